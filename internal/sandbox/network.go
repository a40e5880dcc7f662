package sandbox

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/network"
	"github.com/stead-dev/stead/internal/network/policy"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/store"
)

// Network is the host side of sandbox networking; *network.Manager
// implements it (see its contract). Without one (Options.Network nil) a
// sandbox has loopback only.
type Network interface {
	// LeaseAhead leases a sandbox's addresses in the background before
	// its Attach (see network.Manager.LeaseAhead).
	LeaseAhead(ctx context.Context, id string) (wait func() error)
	Attach(ctx context.Context, a network.Attachment) (network.Attached, error)
	Detach(ctx context.Context, id string) error
	Release(ctx context.Context, id string) error
	SetPolicy(ctx context.Context, id string, p policy.Policy) error
	Sync(ctx context.Context, running []network.Attachment, exists map[string]bool) error
	Status(ctx context.Context, id string) (network.Status, error)
	// Traffic is Status's bytes alone, without the refusals (which cost
	// O(sandboxes) to read): the idle check asks it of every sandbox.
	Traffic(ctx context.Context, id string) (rx, tx uint64, err error)
	Gateway() netip.Addr
	// GatewayIntact reports whether the gateway link still has what the
	// sandboxes' routes need (see network.Manager.GatewayIntact).
	GatewayIntact() bool
	// RepairGateway puts the gateway's addresses back and the attached
	// sandboxes' routes through it, removing nothing.
	RepairGateway(ctx context.Context) error
	Addr(id string) (netip.Addr, bool)
	// Subnets are the subnets a sandbox is leased an address in (a
	// create leases them with its record: store.Sandbox.LeaseIn).
	Subnets() []netip.Prefix
}

// NetworkOptions configure sandbox networking in the service.
type NetworkOptions struct {
	// Manager attaches sandboxes to the host's network.
	Manager Network
	// Leases lists the leased addresses (shown for stopped sandboxes).
	Leases interface {
		ListLeases(ctx context.Context) ([]store.Lease, error)
	}
	// ResolvConf is a host file bound read-only at /etc/resolv.conf in
	// every sandbox (it names the resolver on the bridge).
	ResolvConf string
	// ProxyDomain is the port proxy's domain: ports are reachable at
	// <port>-<sandbox>.<domain> ("" when there is no wildcard DNS).
	ProxyDomain string
	// ProxyBase is the port proxy's base URL ("http://127.0.0.1:8090"),
	// for the URLs shown to users; "" shows none.
	ProxyBase string
	// APIBase is the API's base URL, for path-routed port URLs.
	APIBase string
}

// netLimits are the network limits of each instance type: a sandbox at
// its bandwidth cannot starve another, nor exhaust the host's
// connection-tracking table.
var netLimits = map[string]network.Limits{
	"micro":  {BandwidthBits: 100e6, MaxConns: 2048},
	"small":  {BandwidthBits: 250e6, MaxConns: 4096},
	"medium": {BandwidthBits: 500e6, MaxConns: 8192},
	"large":  {BandwidthBits: 1000e6, MaxConns: 16384},
}

func limitsOf(sp spec) network.Limits {
	if l, ok := netLimits[sp.InstanceType]; ok {
		return l
	}
	return netLimits[DefaultInstanceType]
}

// portSpec is an exposed port as the spec keeps it. Nonce makes the
// port's access token; exposing the port again draws a new one, which
// revokes the old token.
type portSpec struct {
	Port      int       `json:"port"`
	Public    bool      `json:"public,omitempty"`
	Nonce     string    `json:"nonce,omitempty"`
	ExposedAt time.Time `json:"exposed_at"`
}

// policyOf parses a spec's stored policy (checked when it was set).
func policyOf(sp spec) policy.Policy {
	if sp.Network == nil {
		return policy.Default()
	}
	p, err := policy.Parse(*sp.Network)
	if err != nil {
		// Stored policies were parsed before they were stored; refuse
		// everything rather than open what cannot be read.
		return policy.Policy{}
	}
	return p
}

// hostURL is base with its host replaced by host (the port kept).
func hostURL(base, host string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	if port := u.Port(); port != "" {
		host = net.JoinHostPort(host, port)
	}
	u.Host = host
	u.Path = "/"
	return u.String(), nil
}

func (s *Service) net() Network {
	if s.opts.Net == nil {
		return nil
	}
	return s.opts.Net.Manager
}

// attachment is what sandbox sb's network is made from.
func attachment(sb store.Sandbox, sp spec, netns string) network.Attachment {
	return network.Attachment{ID: sb.ID, NetNS: netns, Policy: policyOf(sp), Limits: limitsOf(sp)}
}

// withNetwork adds the network to a runtime spec: the attach between the
// sandbox's namespaces and its init, and the resolver's resolv.conf.
func (s *Service) withNetwork(rs *steadrt.Spec, sb store.Sandbox, sp spec) {
	n := s.net()
	if n == nil {
		return
	}
	// The address is leased while the runtime makes the sandbox (Attach
	// waits for the lease halfway through the links; an error is its to
	// report: it leases again).
	n.LeaseAhead(context.Background(), sb.ID)
	rs.Network = s.attachFunc(n, sb, sp)
	if s.opts.Net.ResolvConf != "" {
		rs.Mounts = append(rs.Mounts, steadrt.Mount{Source: s.opts.Net.ResolvConf, Destination: "/etc/resolv.conf", ReadOnly: true})
	}
}

// attachFunc is a sandbox's steadrt.Spec.Network: it attaches the
// network namespace of the sandbox's init.
func (s *Service) attachFunc(n Network, sb store.Sandbox, sp spec) func(ctx context.Context, pid int) error {
	return func(ctx context.Context, pid int) error {
		t0 := time.Now()
		_, err := n.Attach(ctx, attachment(sb, sp, fmt.Sprintf("/proc/%d/ns/net", pid)))
		s.log.Debug("sandbox network attached", "sandbox", sb.ID, "dur", time.Since(t0))
		return err
	}
}

// detachNetwork removes a stopped sandbox's network (its lease stays).
func (s *Service) detachNetwork(ctx context.Context, id string) {
	if n := s.net(); n != nil {
		if err := n.Detach(ctx, id); err != nil {
			s.log.Error("detach the sandbox's network", "sandbox", id, "err", err)
		}
	}
}

// releaseNetwork removes a purged sandbox's network and its lease.
func (s *Service) releaseNetwork(ctx context.Context, id string) error {
	if n := s.net(); n != nil {
		if err := n.Release(ctx, id); err != nil {
			return fmt.Errorf("release the network of sandbox %s: %w", id, err)
		}
	}
	return nil
}

// syncNetwork re-attaches the running sandboxes after a daemon start and
// removes what belongs to no sandbox (links, rules, leases).
func (s *Service) syncNetwork(ctx context.Context) error {
	n := s.net()
	if n == nil {
		return nil
	}
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{IncludeDeleted: true})
	if err != nil {
		return err
	}
	var running []network.Attachment
	exists := map[string]bool{}
	for _, sb := range list {
		exists[sb.ID] = true
		if sb.State != store.StateRunning && sb.State != store.StatePaused || !s.holds(sb.ID) {
			continue // not running, or another node's to attach
		}
		sp, err := decodeSpec(sb)
		if err != nil {
			continue
		}
		a := attachment(sb, sp, "")
		if _, err := n.Attach(ctx, a); err != nil {
			s.log.Error("re-attach a running sandbox's network", "sandbox", sb.ID, "err", err)
			continue
		}
		running = append(running, a)
	}
	return n.Sync(ctx, running, exists)
}

// address is the sandbox's leased IPv4 address, "" if none.
func (s *Service) address(ctx context.Context, id string) string {
	n := s.net()
	if n == nil {
		return ""
	}
	if a, ok := n.Addr(id); ok {
		return a.String()
	}
	if s.opts.Net.Leases == nil {
		return ""
	}
	leases, err := s.opts.Net.Leases.ListLeases(ctx)
	if err != nil {
		return ""
	}
	for _, l := range leases {
		if l.SandboxID == id && l.Addr.Is4() {
			return l.Addr.String()
		}
	}
	return ""
}

// GetNetwork describes a sandbox's network (api.NetworkBackend).
func (s *Service) GetNetwork(ctx context.Context, tenant, id string) (client.NetworkInfo, error) {
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return client.NetworkInfo{}, err
	}
	return s.networkInfo(ctx, sb)
}

func (s *Service) networkInfo(ctx context.Context, sb store.Sandbox) (client.NetworkInfo, error) {
	sp, err := decodeSpec(sb)
	if err != nil {
		return client.NetworkInfo{}, err
	}
	lim := limitsOf(sp)
	info := client.NetworkInfo{
		Policy: policyOf(sp).API(), Ports: s.ports(sb, sp),
		Bandwidth: lim.BandwidthBits, MaxConns: lim.MaxConns,
	}
	n := s.net()
	if n == nil {
		return info, nil
	}
	info.Enabled = true
	info.Gateway = n.Gateway().String()
	info.Address = s.address(ctx, sb.ID)
	if st, err := n.Status(ctx, sb.ID); err == nil {
		info.Refused, info.RxBytes, info.TxBytes = st.Refused, st.RxBytes, st.TxBytes
		if st.Addr6.IsValid() {
			info.Address6 = st.Addr6.String()
		}
	} else if !errors.Is(err, network.ErrNotAttached) {
		s.log.Warn("network status", "sandbox", sb.ID, "err", err)
	}
	return info, nil
}

// SetNetwork replaces a sandbox's egress policy; a running or paused
// sandbox gets it at once (api.NetworkBackend).
func (s *Service) SetNetwork(ctx context.Context, tenant, id string, p client.NetworkPolicy) (client.NetworkInfo, error) {
	parsed, err := policy.Parse(p)
	if err != nil {
		return client.NetworkInfo{}, fmt.Errorf("network policy: %w", err)
	}
	canon := parsed.API()
	sb, err := s.updateSpec(ctx, tenant, id, "set the network policy of", func(ctx context.Context, sb store.Sandbox, sp *spec) error {
		sp.Network = &canon
		if sb.State != store.StateRunning && sb.State != store.StatePaused {
			return nil
		}
		if n := s.net(); n != nil {
			return n.SetPolicy(ctx, sb.ID, parsed)
		}
		return nil
	})
	if err != nil {
		return client.NetworkInfo{}, err
	}
	s.event(ctx, events.SandboxNetwork, sb.TenantID, sb.ID, map[string]string{"internet": fmt.Sprint(parsed.Internet),
		"allow": strings.Join(canon.Allow, ","), "deny": strings.Join(canon.Deny, ",")})
	return s.networkInfo(ctx, sb)
}

// updateSpec changes a sandbox's spec under its lock, in any state but
// deleted or creating; apply runs before the store is written and may
// refuse the change.
func (s *Service) updateSpec(ctx context.Context, tenant, id, verb string, apply func(ctx context.Context, sb store.Sandbox, sp *spec) error) (store.Sandbox, error) {
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return sb, err
	}
	unlock := s.lock(sb.ID)
	defer unlock()
	if sb, err = s.get(ctx, tenant, sb.ID); err != nil {
		return sb, err
	}
	if sb.State == store.StateDeleted || sb.State == store.StateCreating {
		return sb, fmt.Errorf("cannot %s sandbox %s: it is %s%s: %w", verb, sb.Name, sb.State, hint(verb, sb.State), errs.ErrConflict)
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		return sb, err
	}
	if err := apply(context.WithoutCancel(ctx), sb, &sp); err != nil {
		return sb, fmt.Errorf("%s sandbox %s: %w", verb, sb.Name, err)
	}
	if err := setSpec(&sb, sp); err != nil {
		return sb, err
	}
	defer s.portCache.forget(sb.ID)
	return s.st.UpdateSandbox(context.WithoutCancel(ctx), sb)
}

// ports lists the exposed ports with their URLs.
func (s *Service) ports(sb store.Sandbox, sp spec) []client.Port {
	out := make([]client.Port, 0, len(sp.Ports))
	for _, p := range sp.Ports {
		out = append(out, s.portView(sb, p))
	}
	return out
}

func (s *Service) portView(sb store.Sandbox, p portSpec) client.Port {
	v := client.Port{Port: p.Port, Public: p.Public, ExposedAt: p.ExposedAt}
	if s.opts.Net == nil {
		return v
	}
	o := s.opts.Net
	path := "/v1/sandboxes/" + sb.ID + "/ports/" + strconv.Itoa(p.Port) + "/"
	switch {
	case o.ProxyBase != "":
		v.PathURL = o.ProxyBase + path
	case o.APIBase != "":
		v.PathURL = o.APIBase + path
	}
	if o.ProxyDomain != "" && o.ProxyBase != "" {
		if u, err := hostURL(o.ProxyBase, strconv.Itoa(p.Port)+"-"+sb.ID+"."+o.ProxyDomain); err == nil {
			v.URL = u
		}
	}
	return v
}

// ListPorts lists a sandbox's exposed ports (api.NetworkBackend).
func (s *Service) ListPorts(ctx context.Context, tenant, id string) ([]client.Port, error) {
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		return nil, err
	}
	return s.ports(sb, sp), nil
}

// ExposePort exposes a port through the port proxy; a private port's
// token comes back once (api.NetworkBackend).
func (s *Service) ExposePort(ctx context.Context, tenant, id string, port int, req client.ExposePortRequest) (client.ExposedPort, error) {
	if port < 1 || port > 65535 {
		return client.ExposedPort{}, fmt.Errorf("port %d (want 1-65535): %w", port, errs.ErrInvalid)
	}
	if s.net() == nil {
		return client.ExposedPort{}, fmt.Errorf("expose port %d: this daemon runs without sandbox networking (serve --no-network): %w", port, errs.ErrUnsupported)
	}
	var out client.ExposedPort
	_, err := s.updateSpec(ctx, tenant, id, "expose a port of", func(ctx context.Context, sb store.Sandbox, sp *spec) error {
		if len(sp.Ports) >= maxPorts && !slices.ContainsFunc(sp.Ports, func(p portSpec) bool { return p.Port == port }) {
			return fmt.Errorf("a sandbox exposes at most %d ports: %w", maxPorts, errs.ErrQuota)
		}
		nonce := make([]byte, 16)
		rand.Read(nonce)
		ps := portSpec{Port: port, Public: req.Public, Nonce: base64.RawURLEncoding.EncodeToString(nonce), ExposedAt: s.now()}
		sp.Ports = slices.DeleteFunc(sp.Ports, func(p portSpec) bool { return p.Port == port })
		sp.Ports = append(sp.Ports, ps)
		slices.SortFunc(sp.Ports, func(a, b portSpec) int { return a.Port - b.Port })
		out.Port = s.portView(sb, ps)
		if !ps.Public {
			out.Token = s.portToken(sb.ID, ps)
		}
		return nil
	})
	if err != nil {
		return client.ExposedPort{}, err
	}
	return out, nil
}

// maxPorts bounds the exposed ports of one sandbox.
const maxPorts = 64

// UnexposePort stops exposing a port (api.NetworkBackend).
func (s *Service) UnexposePort(ctx context.Context, tenant, id string, port int) error {
	_, err := s.updateSpec(ctx, tenant, id, "unexpose a port of", func(ctx context.Context, sb store.Sandbox, sp *spec) error {
		n := len(sp.Ports)
		sp.Ports = slices.DeleteFunc(sp.Ports, func(p portSpec) bool { return p.Port == port })
		if len(sp.Ports) == n {
			return fmt.Errorf("port %d is not exposed: %w", port, errs.ErrNotFound)
		}
		return nil
	})
	return err
}

// portToken is a private port's access token: an HMAC of the sandbox, the
// port and the exposure's nonce under the daemon's token key, so nothing
// secret is stored and exposing again revokes it.
func (s *Service) portToken(id string, p portSpec) string {
	m := hmac.New(sha256.New, s.opts.TokenKey)
	fmt.Fprintf(m, "stead-port\x00%s\x00%d\x00%s", id, p.Port, p.Nonce)
	return "stp_" + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// netActivity is the idle policy's view of network traffic: a sandbox
// whose interface moved more than a few packets' worth since the last
// poll is in use.
type netActivity struct {
	n    Network
	mu   sync.Mutex
	last map[string]uint64
}

// netActivityBytes is the traffic between two idle checks that counts as
// use (a little background chatter does not).
const netActivityBytes = 4096

// Kind implements ActivitySource.
func (a *netActivity) Kind() ActivityKind { return ActivityNetwork }

// Active implements ActivitySource.
func (a *netActivity) Active(ctx context.Context, id string) (bool, error) {
	rx, tx, err := a.n.Traffic(ctx, id)
	if errors.Is(err, network.ErrNotAttached) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	total := rx + tx
	a.mu.Lock()
	defer a.mu.Unlock()
	prev, seen := a.last[id]
	a.last[id] = total
	return seen && total > prev+netActivityBytes, nil
}
