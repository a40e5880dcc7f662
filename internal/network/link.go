package network

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
)

// delLink deletes l with del. A veth whose other end was in a namespace
// that is being destroyed (its last process just died) goes away on its
// own, asynchronously, so it may vanish between a look and the delete:
// that is not an error.
func delLink(del func(netlink.Link) error, l netlink.Link) error {
	if err := del(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return err
	}
	return nil
}

// ensureGateway makes the gateway link (if missing), gives it the
// gateway addresses and brings it up. Sandboxes are routed, not bridged:
// each host end of a veth pair carries a /32 (/128) route to its sandbox,
// and the gateway's addresses live on this link alone, so the host
// answers for them on every sandbox's link and nothing is shared at layer
// 2. The gateway link is a bridge with no ports (a dummy would do, but
// kernels are built without it, this one among them; a bridge is where
// veth is). An earlier version's sandboxes were its ports: the Sync that
// follows a start takes the running ones' links out of it and deletes the
// rest.
func (m *Manager) ensureGateway(full bool) (netlink.Link, error) {
	gl, err := netlink.LinkByName(m.cfg.Bridge)
	if err == nil && !full && gl.Attrs().Index == m.gwIndex && gl.Attrs().Flags&net.FlagUp != 0 {
		// The link this Manager set up, still up: an attach does not
		// set its addresses and sysctls again (a write under /proc/sys
		// looks its way past every sandbox's namespace: a cost that grows
		// with the fleet). New and Sync repair it.
		return gl, nil
	}
	if err != nil {
		if !errors.As(err, &netlink.LinkNotFoundError{}) {
			return nil, fmt.Errorf("find gateway link %s: %w", m.cfg.Bridge, err)
		}
		la := netlink.NewLinkAttrs()
		la.Name = m.cfg.Bridge
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create gateway link %s: %w", m.cfg.Bridge, err)
		}
		if gl, err = netlink.LinkByName(m.cfg.Bridge); err != nil {
			return nil, fmt.Errorf("find gateway link %s: %w", m.cfg.Bridge, err)
		}
		m.log.Info("created gateway link")
	}
	if gl.Type() != "bridge" {
		return nil, fmt.Errorf("use gateway link %s: it is a %s link, not a bridge", m.cfg.Bridge, gl.Type())
	}
	if err := netlink.AddrReplace(gl, toNlAddr(netip.PrefixFrom(m.gw, m.cfg.Subnet.Bits()))); err != nil {
		return nil, fmt.Errorf("address gateway link %s: %w", m.cfg.Bridge, err)
	}
	if m.gw6.IsValid() {
		if err := writeSysctl("net/ipv6/conf/"+m.cfg.Bridge+"/disable_ipv6", "0"); err != nil {
			return nil, err
		}
		if err := netlink.AddrReplace(gl, toNlAddr(netip.PrefixFrom(m.gw6, m.cfg.Subnet6.Bits()))); err != nil {
			return nil, fmt.Errorf("address gateway link %s: %w", m.cfg.Bridge, err)
		}
	}
	if err := netlink.LinkSetUp(gl); err != nil {
		return nil, fmt.Errorf("bring up gateway link %s: %w", m.cfg.Bridge, err)
	}
	m.gwIndex = gl.Attrs().Index
	return gl, nil
}

// GatewayIntact reports whether the gateway link is the one this Manager
// set up, up, with its addresses: two netlink reads, cheap enough for a
// periodic check. When an administrator (or another program) deletes the
// link, takes it down or removes an address, the kernel drops every
// sandbox's route through it (the routes name the gateway as their
// source), and with it the resolver's and the egress proxy's address:
// Sync puts it all back.
func (m *Manager) GatewayIntact() bool {
	gl, err := netlink.LinkByName(m.cfg.Bridge)
	if err != nil || gl.Attrs().Index != m.gwIndex || gl.Attrs().Flags&net.FlagUp == 0 {
		return false
	}
	addrs, err := dump(func() ([]netlink.Addr, error) { return netlink.AddrList(gl, netlink.FAMILY_ALL) })
	if err != nil {
		return true // unknown: not a reason to repair
	}
	want := []netip.Addr{m.gw}
	if m.gw6.IsValid() {
		want = append(want, m.gw6)
	}
	for _, w := range want {
		if !slices.ContainsFunc(addrs, func(a netlink.Addr) bool {
			ip, ok := netip.AddrFromSlice(a.IP)
			return a.IPNet != nil && ok && ip.Unmap() == w
		}) {
			return false
		}
	}
	return true
}

// RepairGateway sets the gateway link up again with its addresses and
// repairs the links of every sandbox attached (their routes and neighbour
// entries through it), removing nothing: unlike Sync it runs beside
// creates, and a sandbox being attached meanwhile is not this call's to
// judge (it waits for the attach, or the attach for it).
func (m *Manager) RepairGateway(ctx context.Context) error {
	m.op.Lock()
	defer m.op.Unlock()
	if _, err := m.ensureGateway(true); err != nil {
		return err
	}
	m.mu.RLock()
	sbs := slices.Collect(maps.Values(m.sbs))
	m.mu.RUnlock()
	var errs []error
	for _, sb := range sbs {
		if err := m.ensureLinks(sb, nil); err != nil {
			errs = append(errs, fmt.Errorf("repair network of %s: %w", sb.id, err))
		}
	}
	return errors.Join(errs...)
}

// subnetsFree fails if an address of another link than the gateway's
// overlaps the sandboxes' subnets: another daemon's gateway with the same
// subnet (the default IPv6 one, say), or a network of the host's. Each
// sandbox's route is its address alone, so two daemons leasing from one
// subnet would take each other's sandboxes' routes. New and Sync check;
// Remove does not (a teardown is never refused).
func (m *Manager) subnetsFree() error {
	sub, held, link, err := subnetHeld(m.cfg.Bridge, m.cfg.Subnet, m.cfg.Subnet6)
	if err != nil {
		return err
	}
	if held.IsValid() {
		return fmt.Errorf("sandbox subnet %s overlaps %s on link %s: give each daemon (and each network of the host) a subnet of its own (serve --subnet, --subnet6): %w",
			sub, held, link, errs.ErrConflict)
	}
	return nil
}

// SubnetInUse reports the address (with its prefix) and link by which a
// link other than gateway holds part of sub; an invalid prefix if none
// does.
func SubnetInUse(gateway string, sub netip.Prefix) (netip.Prefix, string, error) {
	_, held, link, err := subnetHeld(gateway, sub)
	return held, link, err
}

// subnetHeld finds an address of a link other than gateway in one of
// subs (invalid ones are skipped): the subnet, the address with its
// prefix, and the link's name.
func subnetHeld(gateway string, subs ...netip.Prefix) (sub, held netip.Prefix, link string, err error) {
	gw := -1
	if gl, err := netlink.LinkByName(gateway); err == nil {
		gw = gl.Attrs().Index
	}
	addrs, err := dump(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return netip.Prefix{}, netip.Prefix{}, "", fmt.Errorf("list the host's addresses: %w", err)
	}
	for _, a := range addrs {
		if a.LinkIndex == gw || a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		held := netip.PrefixFrom(ip.Unmap(), ones)
		for _, sub := range subs {
			if !sub.IsValid() || !held.IsValid() || !held.Masked().Overlaps(sub) {
				continue
			}
			name := strconv.Itoa(a.LinkIndex)
			if l, err := netlink.LinkByIndex(a.LinkIndex); err == nil {
				name = l.Attrs().Name
			}
			return sub, held, name, nil
		}
	}
	return netip.Prefix{}, netip.Prefix{}, "", nil
}

// linkGroup is the interface group of a table's host ends: the firewall
// knows a sandbox's traffic by it from the moment its pair exists (a
// link's group is set when the kernel makes it), before any rule names
// the sandbox. Nonzero (0 is every other link's) and with the top bit set,
// apart from the small numbers an administrator gives.
func linkGroup(table string) uint32 {
	sum := sha256.Sum256([]byte("stead group " + table))
	return binary.BigEndian.Uint32(sum[:4]) | 1<<31
}

// toNlAddr is p as a netlink address (IPv6 ones without duplicate
// address detection: the leases are unique).
func toNlAddr(p netip.Prefix) *netlink.Addr {
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

// ensureForwarding turns on IP forwarding (saying so when it changes):
// IPv4, and IPv6 with Subnet6.
func (m *Manager) ensureForwarding() error {
	keys := []string{"net/ipv4/ip_forward"}
	if m.gw6.IsValid() {
		keys = append(keys, "net/ipv6/conf/all/forwarding")
	}
	for _, k := range keys {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return fmt.Errorf("read sysctl %s: %w", k, err)
		}
		if strings.TrimSpace(string(b)) == "1" {
			continue
		}
		if k == "net/ipv6/conf/all/forwarding" {
			m.keepAcceptingRA()
		}
		if err := writeSysctl(k, "1"); err != nil {
			return err
		}
		m.log.Warn("turned on IP forwarding for sandbox traffic", "sysctl", strings.ReplaceAll(k, "/", "."), "was", strings.TrimSpace(string(b)), "now", "1")
	}
	return nil
}

// keepAcceptingRA sets accept_ra to 2 on every interface where it is 1:
// with IPv6 forwarding on, 1 would stop the host from taking router
// advertisements (its own default route would lapse).
func (m *Manager) keepAcceptingRA() {
	ents, err := os.ReadDir("/proc/sys/net/ipv6/conf")
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.Name() == "all" || e.Name() == "default" || e.Name() == "lo" {
			continue
		}
		if l, err := netlink.LinkByName(e.Name()); err == nil && l.Attrs().Group == m.group {
			continue // a host end: it takes none (hostEndSysctls)
		}
		k := "net/ipv6/conf/" + e.Name() + "/accept_ra"
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil && strings.TrimSpace(string(b)) == "1" {
			if err := writeSysctl(k, "2"); err == nil {
				m.log.Warn("kept the host taking router advertisements with IPv6 forwarding on", "sysctl", strings.ReplaceAll(k, "/", "."), "was", "1", "now", "2")
			}
		}
	}
}

// preparedPrefix starts the name of a veth pair's host end that Prepare
// made (vethName's start "sv"'s sibling).
const preparedPrefix = "sp"

// preparedName is the host end's name of the pair Prepare makes for name.
func preparedName(table, name string) string {
	sum := sha256.Sum256([]byte(table + "\x00prepared\x00" + name))
	return preparedPrefix + hex.EncodeToString(sum[:])[:12]
}

// nsInode is the inode of the network namespace at path.
func nsInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// Prepare makes, ahead of any sandbox, the links of a network namespace
// that a sandbox will get (a runtime's shell, named name, whose init is
// pid): the veth pair, its host end down and in the table's group,
// with eth0 inside, loopback up and the namespace's sysctls set. The
// Attach whose Attachment.NetNS is that namespace takes the pair (its host
// end keeps the name Prepare gave it and gets the sandbox's alias, then is
// addressed, routed, brought up and its rules made) instead of making one;
// until then nothing reaches or leaves the namespace (a port that is down
// forwards nothing). The pair goes with the namespace. Prepare changes
// nothing of the host's but the new pair, so it runs beside Attach and
// Detach.
func (m *Manager) Prepare(ctx context.Context, name string, pid int) error {
	src := fmt.Sprintf("/proc/%d/ns/net", pid)
	ino, err := nsInode(src)
	if err != nil {
		return fmt.Errorf("prepare the network of %s: %w", name, err)
	}
	nsh, err := netns.GetFromPath(src)
	if err != nil {
		return fmt.Errorf("prepare the network of %s: open netns: %w", name, err)
	}
	defer nsh.Close()
	nh, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return fmt.Errorf("prepare the network of %s: netlink in its netns: %w", name, err)
	}
	defer nh.Close()
	la := m.hostEndAttrs(preparedName(m.cfg.Table, name))
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(nsh))}); err != nil {
		return fmt.Errorf("prepare the network of %s: create veth %s: %w", name, la.Name, err)
	}
	host, err := netlink.LinkByName(la.Name)
	if err != nil {
		return fmt.Errorf("prepare the network of %s: find veth %s: %w", name, la.Name, err)
	}
	if err := hostEndWithoutIPv6(host); err != nil {
		return fmt.Errorf("prepare the network of %s: %w", name, err)
	}
	if err := m.hostEndSysctls(la.Name); err != nil {
		return fmt.Errorf("prepare the network of %s: %w", name, err)
	}
	if lo, err := nh.LinkByName("lo"); err == nil {
		if err := nh.LinkSetUp(lo); err != nil {
			return fmt.Errorf("prepare the network of %s: bring up lo: %w", name, err)
		}
	}
	if err := inNetNS(src, func() error { return m.nsSysctls() }); err != nil {
		return fmt.Errorf("prepare the network of %s: sysctls: %w", name, err)
	}
	m.prepMu.Lock()
	defer m.prepMu.Unlock()
	if m.prepClosed { // dropped meanwhile: this pair goes too
		if l, err := netlink.LinkByName(la.Name); err == nil {
			delLink(netlink.LinkDel, l)
		}
		return fmt.Errorf("prepare the network of %s: the network is closing", name)
	}
	if m.prepared == nil {
		m.prepared = map[uint64]preparedPair{}
	}
	// Those of namespaces gone (shells discarded) go.
	for i, p := range m.prepared {
		if _, err := netlink.LinkByName(p.name); err != nil {
			delete(m.prepared, i)
		}
	}
	m.prepared[ino] = preparedPair{name: la.Name}
	return nil
}

// DropPrepared deletes the pairs Prepare made that no attach has taken,
// and has Prepare refuse from then on: the daemon stops, and the shells
// they were made for go with it (their namespaces would take the links
// along only once the kernel has cleaned them up, after the daemon is
// gone).
func (m *Manager) DropPrepared() {
	m.prepMu.Lock()
	m.prepClosed = true
	var names []string
	for _, p := range m.prepared {
		names = append(names, p.name)
	}
	m.prepared = nil
	m.prepMu.Unlock()
	for _, name := range names {
		if l, err := netlink.LinkByName(name); err == nil {
			if err := delLink(netlink.LinkDel, l); err != nil {
				m.log.Warn("delete a link made ahead for a shell", "link", name, "err", err)
			}
		}
	}
}

// preparedPair is a veth pair Prepare made: its host end's name.
type preparedPair struct {
	name string
}

// isPrepared reports whether link name is the host end of a pair Prepare
// made that no attach has taken yet.
func (m *Manager) isPrepared(name string) bool {
	m.prepMu.Lock()
	defer m.prepMu.Unlock()
	for _, p := range m.prepared {
		if p.name == name {
			return true
		}
	}
	return false
}

// takePrepared returns (and forgets) the pair Prepare made in the
// namespace at path, if it did.
func (m *Manager) takePrepared(path string) (preparedPair, bool) {
	ino, err := nsInode(path)
	if err != nil {
		return preparedPair{}, false
	}
	m.prepMu.Lock()
	defer m.prepMu.Unlock()
	p, ok := m.prepared[ino]
	delete(m.prepared, ino)
	return p, ok
}

// hostEndAttrs are the attributes a host end of a sandbox's pair is
// made with: its name, the table's group (linkGroup) and the gateway
// link's MTU.
func (m *Manager) hostEndAttrs(name string) netlink.LinkAttrs {
	la := netlink.NewLinkAttrs()
	la.Name = name
	la.Group = m.group
	la.MTU = 1500
	if gl, err := netlink.LinkByName(m.cfg.Bridge); err == nil && gl.Attrs().MTU > 0 {
		la.MTU = gl.Attrs().MTU
	}
	return la
}

// hostEndWithoutIPv6 has a pair's host end make no IPv6 address of its own
// (netlink, before it is up): the gateway's address is on the gateway
// link, a sandbox's neighbour entry for it is permanent, and with one each
// host end up would add a link-local address (the kernel then goes over
// every IPv6 address of the host to check their lifetimes: a cost that
// grows with the fleet) and send neighbour discovery and multicast reports
// to the sandbox. IPv6 stays on: the host end takes the sandbox's packets.
// A kernel without IPv6 has nothing to turn off.
func hostEndWithoutIPv6(l netlink.Link) error {
	err := netlink.LinkSetIP6AddrGenMode(l, nl.IN6_ADDR_GEN_MODE_NONE)
	if err != nil && !errors.Is(err, unix.EAFNOSUPPORT) && !errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("no IPv6 address on %s: %w", l.Attrs().Name, err)
	}
	return nil
}

// hostEndSysctls keeps a host end out of the host's address resolution
// and router discovery: it answers no ARP request (arp_ignore 8, which
// the kernel takes over a lower value of "all"; both sides' neighbour
// entries are permanent, and a reply would tell a sandbox every address
// the host has) and takes no router advertisement (accept_ra 0). With no
// IPv6 for the sandboxes, IPv6 is off on the link altogether. The
// firewall drops the same packets; these hold without it.
func (m *Manager) hostEndSysctls(name string) error {
	kv := [][2]string{{"net/ipv4/conf/" + name + "/arp_ignore", "8"}}
	if m.gw6.IsValid() {
		// On again for a link an earlier run without IPv6 turned off.
		kv = append(kv, [2]string{"net/ipv6/conf/" + name + "/accept_ra", "0"}, [2]string{"net/ipv6/conf/" + name + "/disable_ipv6", "0"})
	} else {
		kv = append(kv, [2]string{"net/ipv6/conf/" + name + "/disable_ipv6", "1"})
	}
	for _, s := range kv {
		if err := writeSysctl(s[0], s[1]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("host end %s: %w", name, err)
		}
	}
	return nil
}

// sysNetDir opens /proc/sys/net of the caller thread's network namespace
// through a procfs of its own: a detached mount made for the call, which
// goes with the descriptor. Under the host's /proc/sys every namespace
// that ever looked has an entry named "net", all in one bucket of the
// dentry cache, and a lookup compares each in turn (twice for a namespace
// that has none yet): a cost that grew with the fleet. A new procfs's
// /proc/sys has the caller's alone. Where the kernel cannot make one
// (no fsopen), the host's /proc is used.
func sysNetDir() (int, error) {
	const flags = unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC
	if fs, err := unix.Fsopen("proc", unix.FSOPEN_CLOEXEC); err == nil {
		defer unix.Close(fs)
		if err := unix.FsconfigCreate(fs); err != nil {
			return -1, fmt.Errorf("make a procfs: %w", err)
		}
		mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			return -1, fmt.Errorf("mount a procfs: %w", err)
		}
		defer unix.Close(mnt)
		dir, err := unix.Openat(mnt, "sys/net", flags, 0)
		if err != nil {
			return -1, fmt.Errorf("open sys/net of a new procfs: %w", err)
		}
		return dir, nil
	} else if !errors.Is(err, unix.ENOSYS) {
		return -1, fmt.Errorf("make a procfs: %w", err)
	}
	dir, err := unix.Open("/proc/sys/net", flags, 0)
	if err != nil {
		return -1, fmt.Errorf("open /proc/sys/net: %w", err)
	}
	return dir, nil
}

// nsSysctls sets a sandbox namespace's sysctls (the caller's thread is in
// it). IPv6 is off unless the sandboxes have addresses (then without
// router advertisements: the route is set by Attach).
func (m *Manager) nsSysctls() error {
	sysctls := [][2]string{
		{"net/ipv4/ip_unprivileged_port_start", "0"},
		{"net/ipv4/ping_group_range", "0 2147483647"},
		{"net/ipv6/conf/all/disable_ipv6", "1"},
		{"net/ipv6/conf/default/disable_ipv6", "1"},
		{"net/ipv6/conf/eth0/disable_ipv6", "1"},
	}
	if m.cfg.Subnet6.IsValid() {
		sysctls = [][2]string{
			{"net/ipv4/ip_unprivileged_port_start", "0"},
			{"net/ipv4/ping_group_range", "0 2147483647"},
			{"net/ipv6/conf/all/accept_ra", "0"},
			{"net/ipv6/conf/default/accept_ra", "0"},
			{"net/ipv6/conf/eth0/accept_ra", "0"},
			{"net/ipv6/conf/all/disable_ipv6", "0"},
			{"net/ipv6/conf/eth0/disable_ipv6", "0"},
		}
	}
	dir, err := sysNetDir()
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	for _, kv := range sysctls {
		rel := strings.TrimPrefix(kv[0], "net/")
		fd, err := unix.Openat(dir, rel, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err == nil {
			_, err = unix.Write(fd, []byte(kv[1]))
			unix.Close(fd)
		}
		if err != nil {
			return fmt.Errorf("write sysctl %s: %w", kv[0], err)
		}
	}
	return nil
}

// ensureLinks makes (or repairs) a sandbox's netns, veth pair, addresses,
// routes and sysctls. An existing netns is always kept. The sandbox's
// addresses are needed only for the second half: lease (nil when sb has
// them) is called between the two, so that the links are made while a
// lease made ahead commits.
func (m *Manager) ensureLinks(sb *sandbox, lease func() error) error {
	// A pair Prepare made in the namespace given is the sandbox's: its
	// host end keeps its name (a rename waits for an RCU grace period)
	// and gets the sandbox's alias, by which a restart finds it.
	var prepared preparedPair
	adopt := false
	if sb.source != "" {
		prepared, adopt = m.takePrepared(sb.source)
	}
	if sb.source != "" && isNetNS(sb.netns) && !sameFile(sb.source, sb.netns) {
		// A namespace of an earlier run of the sandbox: its links go with it.
		if err := m.pins.remove(sb.key); err != nil {
			return err
		}
	}
	if !isNetNS(sb.netns) {
		var err error
		if sb.source != "" {
			err = m.pins.bind(sb.source, sb.key)
		} else {
			err = m.pins.createNetNS(sb.key)
		}
		if err != nil {
			return err
		}
	}
	nsh, err := netns.GetFromPath(sb.netns)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", sb.netns, err)
	}
	defer nsh.Close()
	nh, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return fmt.Errorf("open netlink in netns %s: %w", sb.netns, err)
	}
	defer nh.Close()

	host, herr := netlink.LinkByName(sb.veth)
	peer, perr := nh.LinkByName("eth0")
	if adopt && perr == nil {
		if p, err := netlink.LinkByName(prepared.name); err == nil && p.Type() == "veth" && peer.Attrs().ParentIndex == p.Attrs().Index && p.Attrs().ParentIndex == peer.Attrs().Index {
			if herr == nil { // a stale link of the sandbox's usual name
				if err := delLink(netlink.LinkDel, host); err != nil {
					return fmt.Errorf("delete stale veth %s: %w", sb.veth, err)
				}
			}
			sb.veth, host, herr = prepared.name, p, nil
		} else {
			adopt = false
		}
	} else {
		adopt = false
	}
	paired := herr == nil && perr == nil && peer.Attrs().ParentIndex == host.Attrs().Index && host.Type() == "veth"
	if !paired {
		if herr == nil {
			if err := delLink(netlink.LinkDel, host); err != nil {
				return fmt.Errorf("delete stale veth %s: %w", sb.veth, err)
			}
		}
		if perr == nil {
			if err := delLink(nh.LinkDel, peer); err != nil {
				return fmt.Errorf("delete stale eth0 in %s: %w", sb.netns, err)
			}
		}
		adopt = false
		la := m.hostEndAttrs(sb.veth)
		v := &netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(nsh))}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("create veth %s: %w", sb.veth, err)
		}
		if host, err = netlink.LinkByName(sb.veth); err != nil {
			return fmt.Errorf("find veth %s: %w", sb.veth, err)
		}
		if err := hostEndWithoutIPv6(host); err != nil {
			return err
		}
		if peer, err = nh.LinkByName("eth0"); err != nil {
			return fmt.Errorf("find eth0 in %s: %w", sb.netns, err)
		}
	}
	if err := netlink.LinkSetAlias(host, aliasPrefix(m.cfg.Table)+sb.key); err != nil {
		return fmt.Errorf("set alias of %s: %w", sb.veth, err)
	}
	if err := m.leaveBridge(host); err != nil {
		return err
	}
	if !adopt { // Prepare set a prepared pair's
		if err := m.hostEndSysctls(sb.veth); err != nil {
			return err
		}
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("bring up %s: %w", sb.veth, err)
	}

	if lease != nil {
		if err := lease(); err != nil {
			return err
		}
	}
	// Inside: lo, eth0 with the leased address, the default route (lo
	// and the sysctls of a prepared pair were made with it).
	if !adopt {
		if lo, err := nh.LinkByName("lo"); err == nil {
			if err := nh.LinkSetUp(lo); err != nil {
				return fmt.Errorf("bring up lo in %s: %w", sb.netns, err)
			}
		}
		if err := inNetNS(sb.netns, m.nsSysctls); err != nil {
			return fmt.Errorf("set sysctls in %s: %w", sb.netns, err)
		}
	}
	if err := nh.AddrReplace(peer, toNlAddr(netip.PrefixFrom(sb.addr, m.cfg.Subnet.Bits()))); err != nil {
		return fmt.Errorf("address eth0 in %s: %w", sb.netns, err)
	}
	if sb.addr6.IsValid() {
		if err := nh.AddrReplace(peer, toNlAddr(netip.PrefixFrom(sb.addr6, m.cfg.Subnet6.Bits()))); err != nil {
			return fmt.Errorf("address eth0 in %s: %w", sb.netns, err)
		}
	}
	if err := nh.LinkSetUp(peer); err != nil {
		return fmt.Errorf("bring up eth0 in %s: %w", sb.netns, err)
	}
	if err := nh.RouteReplace(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: m.gw.AsSlice()}); err != nil {
		return fmt.Errorf("add default route in %s: %w", sb.netns, err)
	}
	if sb.addr6.IsValid() {
		def6 := &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
		if err := nh.RouteReplace(&netlink.Route{LinkIndex: peer.Attrs().Index, Dst: def6, Gw: m.gw6.AsSlice()}); err != nil {
			return fmt.Errorf("add default IPv6 route in %s: %w", sb.netns, err)
		}
	}

	// Each way a permanent neighbour entry: the sandbox's for the
	// gateway (its host end's MAC), the host's for the sandbox (on its
	// own link: no other link can claim its address). And the host's
	// route to the sandbox: its address alone, by its link.
	for _, gw := range []netip.Addr{m.gw, m.gw6} {
		if !gw.IsValid() || (gw.Is6() && !sb.addr6.IsValid()) {
			continue
		}
		if err := nh.NeighSet(&netlink.Neigh{LinkIndex: peer.Attrs().Index, Family: family(gw),
			State: netlink.NUD_PERMANENT, IP: gw.AsSlice(), HardwareAddr: host.Attrs().HardwareAddr}); err != nil {
			return fmt.Errorf("pin the gateway's neighbour %s in %s: %w", gw, sb.netns, err)
		}
	}
	for _, a := range []netip.Addr{sb.addr, sb.addr6} {
		if !a.IsValid() {
			continue
		}
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: host.Attrs().Index, Family: family(a),
			State: netlink.NUD_PERMANENT, IP: a.AsSlice(), HardwareAddr: peer.Attrs().HardwareAddr}); err != nil {
			return fmt.Errorf("pin neighbour %s: %w", a, err)
		}
		// From the gateway's address: the host's own connections to a
		// sandbox (the port proxy's) would otherwise take the source of
		// another of its links, an address the sandbox has no business
		// learning.
		dst := &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
		if err := netlink.RouteReplace(&netlink.Route{LinkIndex: host.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK, Src: m.gwOf(a.Is4()).AsSlice()}); err != nil {
			return fmt.Errorf("route %s to %s: %w", a, sb.veth, err)
		}
	}

	if adopt && sb.lim.BandwidthBits <= 0 {
		return nil // a pair made ahead has no rate limit to remove
	}
	if err := setRate(netlink.QdiscReplace, netlink.QdiscDel, netlink.QdiscList, host, sb.lim.BandwidthBits); err != nil {
		return fmt.Errorf("limit %s: %w", sb.veth, err)
	}
	if err := setRate(nh.QdiscReplace, nh.QdiscDel, nh.QdiscList, peer, sb.lim.BandwidthBits); err != nil {
		return fmt.Errorf("limit eth0 in %s: %w", sb.netns, err)
	}
	return nil
}

// setRate puts a tbf of bits/s as the link's root qdisc (or removes ours
// when bits is 0).
func setRate(replace, del func(netlink.Qdisc) error,
	list func(netlink.Link) ([]netlink.Qdisc, error), l netlink.Link, bits int64) error {
	if bits <= 0 {
		qs, err := dump(func() ([]netlink.Qdisc, error) { return list(l) })
		if err != nil {
			return fmt.Errorf("list qdiscs: %w", err)
		}
		for _, q := range qs {
			if q.Type() == "tbf" && q.Attrs().Parent == netlink.HANDLE_ROOT {
				if err := del(q); err != nil {
					return fmt.Errorf("delete tbf: %w", err)
				}
			}
		}
		return nil
	}
	rate := uint64(bits / 8)
	burst := max(rate/100, 32*1024)
	q := &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       rate,
		Limit:      uint32(burst + rate/20),
		Buffer:     netlink.Xmittime(rate, uint32(burst)),
	}
	if err := replace(q); err != nil {
		return fmt.Errorf("replace tbf: %w", err)
	}
	return nil
}

// ownedLinks lists the host links of this instance's sandboxes by name:
// those in the table's group, those carrying the table's alias and ports
// of the gateway link (an earlier version's sandboxes').
func (m *Manager) ownedLinks() (map[string]netlink.Link, error) {
	links, err := dump(netlink.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := map[string]netlink.Link{}
	prefix := aliasPrefix(m.cfg.Table)
	for _, l := range links {
		a := l.Attrs()
		if strings.HasPrefix(a.Alias, prefix) || a.Group == m.group || a.MasterIndex != 0 && a.MasterIndex == m.gwIndex {
			out[a.Name] = l
		}
	}
	return out, nil
}

// leaveBridge puts a host end in the table's group and, if it is a
// bridge's port (an earlier version's sandbox), takes it off: in that
// order, so that no moment finds it a routed link the rules do not know.
func (m *Manager) leaveBridge(l netlink.Link) error {
	if l.Attrs().Group != m.group {
		if err := netlink.LinkSetGroup(l, int(m.group)); err != nil {
			return fmt.Errorf("set group of %s: %w", l.Attrs().Name, err)
		}
	}
	if l.Attrs().MasterIndex != 0 {
		if err := netlink.LinkSetNoMaster(l); err != nil {
			return fmt.Errorf("take %s out of its bridge: %w", l.Attrs().Name, err)
		}
	}
	return nil
}

// hostEndsByAlias maps the aliases of this instance's host ends to their
// names, sorted (a pair Prepare made keeps the name it was given). A
// sandbox has one host end; a second of the same alias is a leftover
// (Sync keeps the first and sweeps it, a detach deletes them all).
func (m *Manager) hostEndsByAlias() map[string][]string {
	out := map[string][]string{}
	links, err := m.ownedLinks()
	if err != nil {
		return out
	}
	for name, l := range links {
		if a := l.Attrs().Alias; a != "" && l.Type() == "veth" {
			out[a] = append(out[a], name)
		}
	}
	for _, names := range out {
		slices.Sort(names)
	}
	return out
}

// dump retries a netlink dump that a concurrent change interrupted (the
// kernel then flags the results as possibly inconsistent).
func dump[T any](f func() (T, error)) (T, error) {
	var out T
	var err error
	for range 10 {
		out, err = f()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return out, err
}
