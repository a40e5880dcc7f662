// Package network connects sandboxes to the host's network (node-local):
// a network namespace per sandbox routed from the host over a veth pair,
// a gateway link that holds the gateway's addresses,
// an address leased in the store, an nftables table that NATs sandbox
// traffic and enforces each sandbox's egress policy (package policy), tc
// rate limits and a connection-tracking limit per sandbox.
//
// Everything the package makes on the host (the gateway link, links, the netns
// pins held under Config.RunDir, the nftables table Config.Table) is
// derived from what its callers say is attached: Sync re-applies it
// idempotently at start-up and removes whatever belongs to no attached
// sandbox, so a crash or a kill -9 of the daemon leaks nothing for longer
// than the next start. Instances with different gateway links, tables and
// RunDirs share a host without touching each other's state: a link is
// this instance's when it is in its table's interface group, its alias
// starts with "stead:<table>:", or it is a port of its gateway link (an
// earlier version bridged its sandboxes there).
//
// # Crash ordering
//
// Attach leases the address first (the lease outlives everything else),
// then makes the netns (bind mount first, so the namespace has a name
// before anything is put in it), then the veth pair and the addresses,
// routes, sysctls, neighbour entry and qdiscs, then resolv.conf (temporary
// file, fsync, rename), and last the sandbox's nftables objects in one
// transaction. A crash between two steps leaves a prefix of them: the
// next Attach repairs it in place (a named netns is always kept, so a
// running sandbox never changes namespace), and a Sync that does not list
// the sandbox removes it. Until its rules exist a sandbox's traffic is
// dropped by the table's base chains (fail closed): New rebuilds the
// table empty, and a restart leaves running sandboxes without network
// until Sync or Attach adopts them.
//
// Detach goes the other way: the nftables objects in one transaction,
// then the neighbour entry, the veth (its peer goes with it), the netns
// bind mount and the run directory; the lease stays (Release frees it
// last). A crash in between leaves links and files that Sync removes.
//
// Every nftables change is one transaction: Sync's and New's rebuild
// (delete the table and recreate it), Attach's and Detach's per-sandbox
// change, SetPolicy's replacement of the sandbox's chain, AddResolved's
// admissions.
package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/network/policy"
	"github.com/stead-dev/stead/internal/store"
)

// DefaultEgressPort is Config.EgressPort's default.
const DefaultEgressPort = 3129

// Config configures a Manager.
type Config struct {
	// Bridge names the gateway link (default "stead0"): a Linux bridge
	// with no ports that holds the gateway's addresses. Sandboxes are
	// routed, each on a veth pair of its own; the name is an earlier
	// version's, which bridged them.
	Bridge string
	// Subnet is the sandboxes' IPv4 subnet (default 10.88.0.0/16). The
	// gateway takes its first address; leases start at the second.
	Subnet netip.Prefix
	// Subnet6 is an IPv6 subnet (a /64 ULA); the zero prefix: no IPv6.
	Subnet6 netip.Prefix
	// RunDir holds the netns bind mounts and each sandbox's resolv.conf
	// (default /run/stead/net).
	RunDir string
	// ResolverPort is the resolver's port on the gateway address (default
	// 53); it is written into each sandbox's resolv.conf (port 53 only:
	// resolv.conf has no port) and admitted by the firewall. Another port
	// is reached through a redirect of the gateway's port 53 to it (so
	// several instances, or tests, need not share port 53).
	ResolverPort int
	// EgressPort is the Host/SNI egress proxy's port on the gateway
	// address: connections to ports 80 and 443 of a sandbox whose policy
	// names domains are redirected to it (default 3129).
	EgressPort int
	// Table is the name of the nftables table (family inet) the Manager
	// owns entirely (default "stead"). It also names the aliases of the
	// Manager's links, so instances with different tables, gateway links and
	// RunDirs never touch each other's state.
	Table string
	// Leases keeps the address leases.
	Leases Leases
	// Logger receives the Manager's logs (default slog.Default()).
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Bridge == "" {
		c.Bridge = "stead0"
	}
	if len(c.Bridge) > 15 {
		return fmt.Errorf("check gateway link name %q: longer than 15 bytes", c.Bridge)
	}
	if !c.Subnet.IsValid() {
		c.Subnet = netip.MustParsePrefix("10.88.0.0/16")
	}
	c.Subnet = c.Subnet.Masked()
	if !c.Subnet.Addr().Is4() || c.Subnet.Bits() > 30 {
		return fmt.Errorf("check subnet %s: want an IPv4 prefix of /30 or wider", c.Subnet)
	}
	if c.RunDir == "" {
		c.RunDir = "/run/stead/net"
	}
	if c.ResolverPort == 0 {
		c.ResolverPort = 53
	}
	if c.EgressPort == 0 {
		c.EgressPort = DefaultEgressPort
	}
	if c.Table == "" {
		c.Table = "stead"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Leases == nil {
		return errors.New("check network config: no Leases")
	}
	return nil
}

// Leases keeps each sandbox's address (the store implements it).
type Leases interface {
	// LeaseAddresses returns the sandbox's address in each subnet (one of
	// each family), leasing the lowest free one (after the gateway) on the
	// first call, all in one transaction; the same addresses on every
	// later call. errs.ErrQuota when a subnet is full.
	LeaseAddresses(ctx context.Context, sandboxID string, subnets ...netip.Prefix) ([]netip.Addr, error)
	// ReleaseLease frees every address of the sandbox (idempotent).
	ReleaseLease(ctx context.Context, sandboxID string) error
	// ListLeases lists every lease.
	ListLeases(ctx context.Context) ([]store.Lease, error)
}

// Limits bound one sandbox's use of the host's network.
type Limits struct {
	// BandwidthBits is the rate limit in bits/s of each direction (0: none).
	BandwidthBits int64
	// MaxConns is the most tracked connections the sandbox may have at once (0: none).
	MaxConns int
}

// Attachment is what a sandbox's network is made from.
type Attachment struct {
	ID string
	// NetNS is the path of the sandbox's network namespace, made by the
	// runtime (/proc/<pid>/ns/net, from runtime.Spec.Network); Attach
	// holds it by a bind mount in the pins' namespace (Attached.NetNS;
	// netns.go says why not in the host's), replacing a
	// held namespace that is another. "" keeps the namespace held from an
	// earlier Attach (a daemon restart adopting a running sandbox), or
	// makes a new one when none is held (for a caller that then starts
	// the sandbox in Attached.NetNS).
	NetNS  string
	Policy policy.Policy
	Limits Limits
}

// Attached is a sandbox's network as made by Attach.
type Attached struct {
	// NetNS is the path of the network namespace for the runtime to join,
	// valid while the Manager that made it is open (it goes through a
	// descriptor the Manager holds).
	NetNS string
	// ResolvConf is a host file to bind read-only at /etc/resolv.conf.
	ResolvConf string
	// Addr is the sandbox's IPv4 address; Addr6 its IPv6 one, if any.
	Addr, Addr6 netip.Addr
	// Gateway is the gateway's address (default route and resolver).
	Gateway netip.Addr
}

// Status are a sandbox's counters.
type Status struct {
	Addr, Addr6 netip.Addr
	// Refused counts connections the firewall dropped and names the
	// resolver or the egress proxy refused, since the sandbox was attached.
	Refused          uint64
	RxBytes, TxBytes uint64
}

// ErrNotAttached is returned for a sandbox that has no network now.
var ErrNotAttached = errors.New("sandbox has no network attached")

// Manager owns the host side of sandbox networking.
//
// Contract:
//   - Attach is idempotent: for an attached sandbox it checks and repairs
//     what exists (a daemon restart adopts running sandboxes this way) and
//     returns the same Attached.
//   - Detach removes the sandbox's namespace, links and rules, keeps its
//     lease, and is idempotent. Release is Detach plus the lease.
//   - SetPolicy applies to a running sandbox at once, atomically (one
//     nftables transaction); established connections the new policy
//     refuses are not cut (as a firewall change does not cut them).
//   - Sync(running, exists) makes the host match: the ruleset is rebuilt
//     for running in one transaction; links and namespaces of other
//     sandboxes are removed; leases of sandboxes not in exists released.
//   - Methods are safe for concurrent use.
type Manager struct {
	cfg Config
	log *slog.Logger
	// gw and gw6 are the gateway's addresses (gw6 only with Subnet6).
	gw, gw6 netip.Addr

	// op serializes every change of the host's state.
	op sync.Mutex
	// mu guards sbs and byAddr and the sandboxes' in-memory fields.
	mu     sync.RWMutex
	sbs    map[string]*sandbox
	byAddr map[netip.Addr]*sandbox

	localMu sync.Mutex
	localAt time.Time
	local   hostLocal

	// leasing holds the leases made ahead (LeaseAhead) still in progress,
	// by sandbox; a Release waits for its sandbox's.
	leaseMu sync.Mutex
	leasing map[string]chan struct{}

	// pins holds the sandboxes' network namespaces by name.
	pins *pins

	// prepared holds the veth pairs Prepare made in namespaces not yet
	// attached, by the namespace's inode.
	prepMu     sync.Mutex
	prepared   map[uint64]preparedPair
	prepClosed bool // DropPrepared ran: Prepare refuses

	// Guarded by op: the last tag given (tags are never given twice in
	// a table's life) and the limits whose sets and rule the table has.
	nextTag uint32
	limits  map[int]bool
	// gwIndex is the gateway link New or Sync set up (guarded by op).
	gwIndex int
	// group is the interface group of the host ends (linkGroup).
	group uint32
}

// sandbox is an attached sandbox as the Manager remembers it.
type sandbox struct {
	id, key     string
	addr, addr6 netip.Addr
	// tag keys its policy's elements in the table (0: none yet).
	tag   uint32
	pol   policy.Policy
	lim   Limits
	veth  string
	netns string
	// source is the namespace the caller made (Attachment.NetNS), bound
	// at netns; "" keeps the one held there or makes a new one.
	source string
	resolv string
	// refusedBase counts firewall drops of counters since replaced (a
	// Sync rebuilds them); noted counts NoteRefused.
	refusedBase, noted uint64
	// resolved mirrors its elements of named4|6: address -> expiry.
	resolved map[netip.Addr]time.Time
}

// New sets up the gateway link, the sysctls sandbox traffic needs
// (net.ipv4.ip_forward, logged when it changes) and the nftables table
// with no sandbox in it; it attaches nothing. Until Sync or Attach adds
// them, traffic from sandboxes that still run is dropped.
func New(ctx context.Context, cfg Config) (_ *Manager, retErr error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "network", "bridge", cfg.Bridge),
		gw:     cfg.Subnet.Addr().Next(),
		sbs:    map[string]*sandbox{},
		byAddr: map[netip.Addr]*sandbox{},
		limits: map[int]bool{},
		group:  linkGroup(cfg.Table),
	}
	if cfg.Subnet6.IsValid() {
		m.gw6 = cfg.Subnet6.Addr().Next()
	}
	// A subnet in use elsewhere is refused before anything is made.
	if err := m.subnetsFree(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.RunDir, 0o700); err != nil {
		return nil, fmt.Errorf("create run dir: %w", err)
	}
	p, err := openPins(cfg.RunDir)
	if err != nil {
		return nil, err
	}
	m.pins = p
	defer func() {
		if retErr != nil {
			p.close()
		}
	}()
	if err := m.writeResolvConf(); err != nil {
		return nil, err
	}
	if err := m.ensureForwarding(); err != nil {
		return nil, err
	}
	if _, err := m.ensureGateway(true); err != nil {
		return nil, err
	}
	b, err := m.newBatch()
	if err != nil {
		return nil, err
	}
	if err := m.rebuild(b, nil, time.Now()); err != nil {
		return nil, err
	}
	if err := m.flush(b, "table "+cfg.Table); err != nil {
		return nil, err
	}
	m.unbridge(ctx)
	return m, nil
}

// unbridge takes the ports an earlier version left on the gateway link
// (its sandboxes were bridged) out of it, into the table's group: with
// the bridge table gone, nothing else would keep two of them from
// talking at layer 2 (the inet table sees bridged frames only where
// br_netfilter is on). Until Sync routes them they reach nothing:
// antispoof knows no source of theirs.
func (m *Manager) unbridge(ctx context.Context) {
	links, err := dump(netlink.LinkList)
	if err != nil {
		m.log.WarnContext(ctx, "list links to take an earlier version's sandboxes off the bridge", "err", err)
		return
	}
	for _, l := range links {
		if m.gwIndex <= 0 || l.Attrs().MasterIndex != m.gwIndex {
			continue
		}
		if err := m.hostEndSysctls(l.Attrs().Name); err != nil {
			m.log.WarnContext(ctx, "set a bridged sandbox's link's sysctls", "link", l.Attrs().Name, "err", err)
		}
		if err := m.leaveBridge(l); err != nil {
			m.log.WarnContext(ctx, "take a bridged sandbox's link off the bridge", "err", err)
		}
	}
}

// Subnets are the subnets a sandbox is leased an address in: IPv4, and
// IPv6 when the sandboxes have it.
func (m *Manager) Subnets() []netip.Prefix {
	if m.cfg.Subnet6.IsValid() {
		return []netip.Prefix{m.cfg.Subnet, m.cfg.Subnet6}
	}
	return []netip.Prefix{m.cfg.Subnet}
}

// Gateway is the gateway's IPv4 address.
func (m *Manager) Gateway() netip.Addr { return m.gw }

// newSandbox is the Manager's view of a sandbox, carrying over what it
// already remembers of it.
func (m *Manager) newSandbox(a Attachment, addr, addr6 netip.Addr) *sandbox {
	k := key(a.ID)
	sb := &sandbox{
		id: a.ID, key: k, addr: addr, addr6: addr6, pol: a.Policy, lim: a.Limits,
		veth:     vethName(m.cfg.Table, a.ID),
		netns:    m.pins.path(k),
		source:   a.NetNS,
		resolv:   m.ResolvConf(),
		resolved: map[netip.Addr]time.Time{},
	}
	m.mu.RLock()
	if old, ok := m.sbs[a.ID]; ok {
		// Its host end may have kept a name given ahead (Prepare).
		sb.veth, sb.tag = old.veth, old.tag
		sb.refusedBase, sb.noted = old.refusedBase, old.noted
		for a, exp := range old.resolved {
			sb.resolved[a] = exp
		}
	}
	m.mu.RUnlock()
	return sb
}

func (sb *sandbox) attached(gw netip.Addr) Attached {
	return Attached{NetNS: sb.netns, ResolvConf: sb.resolv, Addr: sb.addr, Addr6: sb.addr6, Gateway: gw}
}

// Attach makes (or repairs) a sandbox's network.
func (m *Manager) Attach(ctx context.Context, a Attachment) (Attached, error) {
	if a.ID == "" {
		return Attached{}, fmt.Errorf("attach network: empty sandbox id: %w", errs.ErrInvalid)
	}
	t0 := time.Now()
	m.op.Lock()
	defer m.op.Unlock()
	t1 := time.Now()
	// The links first: the addresses (a lease made ahead may still be
	// committing) are needed only halfway through them.
	sb := m.newSandbox(a, netip.Addr{}, netip.Addr{})
	if _, err := m.ensureGateway(false); err != nil {
		return Attached{}, err
	}
	var leaseDur, nftDur time.Duration
	var nft chan error
	lease := func() error {
		t := time.Now()
		m.leaseAheadDone(a.ID)
		var err error
		sb.addr, sb.addr6, err = m.lease(ctx, a.ID)
		leaseDur = time.Since(t)
		if err == nil {
			// The rules need the addresses and the host link's name
			// (made or taken by now), not what the links' second half
			// does inside the namespace: they go in beside it.
			nft = make(chan error, 1)
			go func() {
				t := time.Now()
				err := m.installSandbox(sb)
				nftDur = time.Since(t)
				nft <- err
			}()
		}
		return err
	}
	err := m.ensureLinks(sb, lease)
	t3 := time.Now()
	if nft != nil {
		if nerr := <-nft; err == nil && nerr != nil {
			return Attached{}, fmt.Errorf("attach network of %s: %w", a.ID, nerr)
		}
	}
	if err != nil {
		return Attached{}, fmt.Errorf("attach network of %s: %w", a.ID, err)
	}
	m.remember(sb)
	// The phases are what bench/network reads to tell where create's
	// time goes (links and the rules overlap: nft_wait is what the rules
	// took beyond the links).
	m.log.InfoContext(ctx, "attached network", "sandbox", a.ID, "addr", sb.addr, "veth", sb.veth, "dur", time.Since(t0),
		"wait", t1.Sub(t0), "lease", leaseDur, "links", t3.Sub(t1)-leaseDur, "nft", nftDur, "nft_wait", time.Since(t3))
	return sb.attached(m.gw), nil
}

// lease returns the sandbox's addresses, leasing them if needed.
func (m *Manager) lease(ctx context.Context, id string) (addr, addr6 netip.Addr, err error) {
	subnets := m.Subnets()
	// One transaction (one commit) for both families.
	addrs, err := m.cfg.Leases.LeaseAddresses(ctx, id, subnets...)
	if err != nil {
		return addr, addr6, fmt.Errorf("lease addresses for %s: %w", id, err)
	}
	if len(addrs) != len(subnets) {
		return addr, addr6, fmt.Errorf("lease addresses for %s: %d for %d subnets", id, len(addrs), len(subnets))
	}
	addr = addrs[0]
	if len(addrs) > 1 {
		addr6 = addrs[1]
	}
	return addr, addr6, nil
}

// LeaseAhead leases sandbox id's addresses in the background, so that a
// start takes the lease's store commit off its path: it leases while the
// runtime makes the sandbox, and the Attach that follows finds the lease
// made. The function returned waits for it and returns its error (Attach
// leases again and reports a failure anyway). A Release of id waits for a
// lease ahead in progress, so that none outlives it.
func (m *Manager) LeaseAhead(ctx context.Context, id string) (wait func() error) {
	done := make(chan struct{})
	m.leaseMu.Lock()
	if m.leasing == nil {
		m.leasing = map[string]chan struct{}{}
	}
	prev := m.leasing[id]
	m.leasing[id] = done
	m.leaseMu.Unlock()
	var err error
	go func() {
		if prev != nil {
			<-prev
		}
		_, _, err = m.lease(ctx, id)
		m.leaseMu.Lock()
		if m.leasing[id] == done {
			delete(m.leasing, id)
		}
		m.leaseMu.Unlock()
		close(done)
	}()
	return func() error {
		<-done
		return err
	}
}

// leaseAheadDone waits for a lease ahead of id in progress.
func (m *Manager) leaseAheadDone(id string) {
	m.leaseMu.Lock()
	ch := m.leasing[id]
	m.leaseMu.Unlock()
	if ch != nil {
		<-ch
	}
}

// remember records sb as attached.
func (m *Manager) remember(sb *sandbox) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.sbs[sb.id]; ok {
		sb.noted = old.noted // NoteRefused may have counted since newSandbox
		delete(m.byAddr, old.addr)
		delete(m.byAddr, old.addr6)
	}
	m.sbs[sb.id] = sb
	m.byAddr[sb.addr] = sb
	if sb.addr6.IsValid() {
		m.byAddr[sb.addr6] = sb
	}
}

// installSandbox puts a sandbox's elements in the table, or changes them
// from what the table holds of it, in one transaction. A failure (a table
// changed behind the Manager's back: its base missing, an element of the
// sandbox's address from before) rebuilds the table from what the Manager
// holds.
func (m *Manager) installSandbox(sb *sandbox) error {
	m.mu.RLock()
	old := m.sbs[sb.id]
	m.mu.RUnlock()
	b, err := m.newBatch()
	if err == nil {
		if err = m.addSandbox(b, sb, old, time.Now()); err == nil {
			if err = m.flush(b, "rules of "+sb.id); err == nil {
				return nil
			}
		}
	}
	m.log.Warn("nftables table is not as held: rebuilding it", "table", m.cfg.Table, "sandbox", sb.id, "err", err)
	fresh := ""
	if old == nil {
		fresh = sb.id
	}
	return m.rebuildFrom(append(m.othersThan(sb.id), sb), fresh)
}

// othersThan is every sandbox the Manager holds but id.
func (m *Manager) othersThan(id string) []*sandbox {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*sandbox
	for oid, o := range m.sbs {
		if oid != id {
			out = append(out, o)
		}
	}
	return out
}

// rebuildFrom replaces the table with one holding sbs, carrying their
// counters over (but fresh's, a sandbox new to the table: what its
// address was refused before is not its own).
func (m *Manager) rebuildFrom(sbs []*sandbox, fresh string) error {
	b, err := m.newBatch()
	if err != nil {
		return err
	}
	counts, err := m.refusedCounters(b)
	if err != nil {
		m.log.Warn("read nftables counters before a rebuild", "err", err)
	}
	m.mu.Lock()
	for _, o := range sbs {
		if o.id != fresh {
			o.refusedBase += refusedOf(counts, o)
		}
	}
	m.mu.Unlock()
	if err := m.rebuild(b, sbs, time.Now()); err != nil {
		return err
	}
	return m.flush(b, "table "+m.cfg.Table)
}

// resolvConfName is the one resolv.conf every sandbox binds, in RunDir.
const resolvConfName = "resolv.conf"

// ResolvConf is the host file every sandbox binds read-only at
// /etc/resolv.conf: it names the resolver on the gateway.
func (m *Manager) ResolvConf() string { return filepath.Join(m.cfg.RunDir, resolvConfName) }

// writeResolvConf writes the sandboxes' resolv.conf durably (temporary
// file, fsync, rename, fsync of the directory), once, at New.
func (m *Manager) writeResolvConf() error {
	path := m.ResolvConf()
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create dir of resolv.conf: %w", err)
	}
	content := fmt.Sprintf("nameserver %s\noptions timeout:2 attempts:2\n", m.gw)
	if b, err := os.ReadFile(path); err == nil && string(b) == content {
		return nil
	}
	f, err := os.CreateTemp(dir, ".resolv.conf-*")
	if err != nil {
		return fmt.Errorf("create resolv.conf: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return fmt.Errorf("write resolv.conf: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("chmod resolv.conf: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync resolv.conf: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close resolv.conf: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("rename resolv.conf: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir of resolv.conf: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir of resolv.conf: %w", err)
	}
	return nil
}

// Detach removes a sandbox's network and keeps its lease.
func (m *Manager) Detach(ctx context.Context, id string) error {
	m.op.Lock()
	defer m.op.Unlock()
	return m.detach(ctx, id)
}

func (m *Manager) detach(ctx context.Context, id string) error {
	m.mu.RLock()
	sb, ok := m.sbs[id]
	m.mu.RUnlock()
	var others []string // more host ends of its alias: leftovers
	if !ok {
		sb = m.newSandbox(Attachment{ID: id}, netip.Addr{}, netip.Addr{})
		// Its host end may be one Prepare made (another name): found by
		// its alias.
		if names := m.hostEndsByAlias()[aliasPrefix(m.cfg.Table)+sb.key]; len(names) > 0 {
			sb.veth, others = names[0], names[1:]
		}
		leases, err := m.cfg.Leases.ListLeases(ctx)
		if err != nil {
			return fmt.Errorf("detach network of %s: %w", id, err)
		}
		for _, l := range leases {
			switch {
			case l.SandboxID != id:
			case m.cfg.Subnet.Contains(l.Addr):
				sb.addr = l.Addr
			case m.cfg.Subnet6.IsValid() && m.cfg.Subnet6.Contains(l.Addr):
				sb.addr6 = l.Addr
			}
		}
	}
	// The rules go first (a failure there still removes the links: with
	// its veth gone a sandbox has no network, so nothing is left open).
	var errs []error
	if err := m.removeElements(sb, ok); err != nil {
		errs = append(errs, err)
	}
	// Its routes and neighbour entries go with its host end.
	for _, name := range append([]string{sb.veth}, others...) {
		if l, err := netlink.LinkByName(name); err == nil {
			if err := delLink(netlink.LinkDel, l); err != nil {
				errs = append(errs, fmt.Errorf("delete veth %s: %w", name, err))
			}
		}
	}
	m.forgetConnections(ctx, sb.addr)
	if err := m.pins.remove(sb.key); err != nil {
		errs = append(errs, err)
	}
	m.mu.Lock()
	if cur, ok := m.sbs[id]; ok {
		delete(m.byAddr, cur.addr)
		delete(m.byAddr, cur.addr6)
		delete(m.sbs, id)
	}
	m.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("detach network of %s: %w", id, err)
	}
	m.log.InfoContext(ctx, "detached network", "sandbox", id)
	return nil
}

// removeElements takes a sandbox's elements out of the table. One the
// Manager holds (known) goes by what it holds; one it does not (a Detach
// after a restart, before a Sync) by its addresses: its entries in every
// set (those of the sets of pairs found by listing them), its counters
// and its port. A table that refuses the removal is rebuilt without the
// sandbox.
func (m *Manager) removeElements(sb *sandbox, known bool) error {
	b, err := m.newBatch()
	if err != nil {
		return err
	}
	if known {
		m.delSandbox(b, sb)
	} else {
		for _, is4 := range m.families() {
			a := sb.addrOf(is4)
			if !a.IsValid() {
				continue
			}
			tag, found, err := m.tagOf(b, a)
			if err != nil {
				return err
			}
			if found {
				b.del(b.sandboxMap(is4), nftables.SetElement{Key: a.AsSlice(), Val: tagBytes(tag)})
			}
			b.del(b.sourceSet(is4), nftables.SetElement{Key: slices.Concat(ifname(sb.veth), a.AsSlice())})
			if !is4 && sb.addr.IsValid() {
				// Its mark is its IPv4 address, the value it holds.
				b.del(b.markMap6(), nftables.SetElement{Key: a.AsSlice(), Val: sb.addr.AsSlice()})
			}
			m.clearAddr(b, a)
			// Its pairs (CIDRs, names admitted) are found by a listing.
			for _, set := range []*nftables.Set{b.cidrSet("deny", is4), b.cidrSet("allow", is4), b.namedSet(is4)} {
				els, err := b.c.GetSetElements(set)
				if err != nil && !errors.Is(err, unix.ENOENT) {
					return fmt.Errorf("list nftables %s: %w", set.Name, err)
				}
				for _, e := range els {
					if !e.IntervalEnd && bytes.HasPrefix(e.Key, a.AsSlice()) {
						b.del(set, nftables.SetElement{Key: e.Key, KeyEnd: e.KeyEnd})
					}
				}
			}
		}
		for _, e := range m.counters(b, sb) {
			b.del(e.s, e.e)
		}
	}
	err = m.flush(b, "removal of "+sb.id)
	if err == nil {
		return nil
	}
	m.log.Warn("nftables table refused a removal: rebuilding it", "table", m.cfg.Table, "sandbox", sb.id, "err", err)
	return m.rebuildFrom(m.othersThan(sb.id), "")
}

// forgetConnections deletes the tracked connections of the sandbox whose
// IPv4 address is a, of both families (conntrack.go), so that the next
// holder of its addresses inherits no state of them (best effort:
// logged); nothing when a is not valid.
func (m *Manager) forgetConnections(ctx context.Context, a netip.Addr) {
	if !a.IsValid() {
		return
	}
	if err := forgetMark(connMark(a)); err != nil {
		m.log.WarnContext(ctx, "forget the connections of a sandbox", "addr", a, "err", err)
	}
}

// Release removes a sandbox's network and frees its lease.
func (m *Manager) Release(ctx context.Context, id string) error {
	m.leaseAheadDone(id)
	m.op.Lock()
	defer m.op.Unlock()
	if err := m.detach(ctx, id); err != nil {
		return err
	}
	if err := m.cfg.Leases.ReleaseLease(ctx, id); err != nil {
		return fmt.Errorf("release lease of %s: %w", id, err)
	}
	return nil
}

// SetPolicy replaces an attached sandbox's policy.
func (m *Manager) SetPolicy(ctx context.Context, id string, p policy.Policy) error {
	m.op.Lock()
	defer m.op.Unlock()
	m.mu.RLock()
	cur, ok := m.sbs[id]
	m.mu.RUnlock()
	if !ok {
		return fmt.Errorf("set policy of %s: %w", id, ErrNotAttached)
	}
	m.mu.RLock()
	next := *cur
	m.mu.RUnlock()
	next.pol = p
	b, err := m.newBatch()
	if err != nil {
		return err
	}
	if err := m.addSandbox(b, &next, cur, time.Now()); err != nil {
		return err
	}
	if err := m.flush(b, "policy of "+id); err != nil {
		return err
	}
	m.mu.Lock()
	cur.pol = p
	m.mu.Unlock()
	m.log.InfoContext(ctx, "set network policy", "sandbox", id)
	return nil
}
