package network

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/network/policy"
)

// Status returns an attached sandbox's counters (ErrNotAttached if none).
// The firewall's part of Refused counts dropped packets: a client that
// retransmits a refused SYN is counted once per attempt.
func (m *Manager) Status(ctx context.Context, id string) (Status, error) {
	m.mu.RLock()
	sb, ok := m.sbs[id]
	var st Status
	if ok {
		st = Status{Addr: sb.addr, Addr6: sb.addr6, Refused: sb.refusedBase + sb.noted}
	}
	m.mu.RUnlock()
	if !ok {
		return Status{}, fmt.Errorf("status of %s: %w", id, ErrNotAttached)
	}
	b, err := m.newBatch()
	if err != nil {
		return Status{}, err
	}
	// The kernel lists a set's elements whole: O(sandboxes), on a
	// status read only.
	counts, err := m.refusedCounters(b)
	if err != nil {
		return Status{}, fmt.Errorf("read refused counters of %s: %w", id, err)
	}
	st.Refused += refusedOf(counts, sb)
	if st.RxBytes, st.TxBytes, err = linkTraffic(sb.veth); err != nil {
		return Status{}, fmt.Errorf("read link stats of %s: %w", id, err)
	}
	return st, nil
}

// Traffic returns the bytes an attached sandbox has received and sent
// (ErrNotAttached if none): Status without the refusals, whose count
// lists a set that holds every sandbox (O(sandboxes)). The idle check
// asks it of every running sandbox, so it reads the sandbox's link alone.
func (m *Manager) Traffic(ctx context.Context, id string) (rx, tx uint64, err error) {
	m.mu.RLock()
	sb, ok := m.sbs[id]
	var veth string
	if ok {
		veth = sb.veth
	}
	m.mu.RUnlock()
	if !ok {
		return 0, 0, fmt.Errorf("traffic of %s: %w", id, ErrNotAttached)
	}
	if rx, tx, err = linkTraffic(veth); err != nil {
		return 0, 0, fmt.Errorf("read link stats of %s: %w", id, err)
	}
	return rx, tx, nil
}

// linkTraffic reads what a sandbox received and sent from the statistics
// of its host end (which receives what the sandbox sends).
func linkTraffic(veth string) (rx, tx uint64, err error) {
	l, err := netlink.LinkByName(veth)
	if err != nil {
		return 0, 0, err
	}
	if s := l.Attrs().Statistics; s != nil {
		return s.TxBytes, s.RxBytes, nil
	}
	return 0, 0, nil
}

// Lookup finds the attached sandbox that owns source address src (for the
// resolver and the egress proxy).
func (m *Manager) Lookup(src netip.Addr) (id string, p policy.Policy, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	sb, ok := m.byAddr[src.Unmap()]
	if !ok {
		return "", policy.Policy{}, false
	}
	return sb.id, sb.pol, true
}

// AddResolved admits addrs for sandbox id for ttl: an admitted name
// resolved to them (the resolver calls it before it answers). Errors are
// logged: an address not admitted is refused, which is the safe side.
func (m *Manager) AddResolved(id string, addrs []netip.Addr, ttl time.Duration) {
	ttl = max(ttl, time.Second).Truncate(time.Millisecond)
	m.op.Lock()
	defer m.op.Unlock()
	m.mu.RLock()
	sb, ok := m.sbs[id]
	m.mu.RUnlock()
	if !ok {
		return
	}
	now := time.Now()
	b, err := m.newBatch()
	if err != nil {
		m.log.Error("admit resolved addresses", "sandbox", id, "err", err)
		return
	}
	var admitted []netip.Addr
	for _, is4 := range m.families() {
		var els, withTTL []nftables.SetElement
		for _, a := range addrs {
			if a = a.Unmap(); a.IsValid() && a.Is4() == is4 {
				k := slices.Concat(sb.addrOf(is4).AsSlice(), a.AsSlice())
				els = append(els, nftables.SetElement{Key: k})
				withTTL = append(withTTL, nftables.SetElement{Key: k, Timeout: ttl})
				admitted = append(admitted, a)
			}
		}
		if len(els) == 0 {
			continue
		}
		// add (a no-op if present), delete, add: an element's timeout is
		// set anew whatever the set held.
		s := b.namedSet(is4)
		_ = b.c.SetAddElements(s, withTTL)
		_ = b.c.SetDeleteElements(s, els)
		_ = b.c.SetAddElements(s, withTTL)
	}
	if len(admitted) == 0 {
		return
	}
	if err := b.c.Flush(); err != nil {
		m.log.Error("admit resolved addresses", "sandbox", id, "err", err)
		return
	}
	m.mu.Lock()
	for a, exp := range sb.resolved {
		if !exp.After(now) {
			delete(sb.resolved, a)
		}
	}
	for _, a := range admitted {
		sb.resolved[a] = now.Add(ttl)
	}
	m.mu.Unlock()
}

// Resolved reports whether an admitted name resolved to a for sandbox id
// and the admission has not expired.
func (m *Manager) Resolved(id string, a netip.Addr) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	sb, ok := m.sbs[id]
	if !ok {
		return false
	}
	exp, ok := sb.resolved[a.Unmap()]
	return ok && time.Now().Before(exp)
}

// Forbidden reports whether a is an address no sandbox may reach whatever
// its policy: what the host takes in as addressed to itself (its local
// routing table's local, broadcast and anycast routes: its addresses, the
// broadcast addresses of its IPv4 networks, the subnet-router anycast
// addresses of the IPv6 ones it forwards for), the sandboxes' subnets,
// and policy.AlwaysDenied. The firewall refuses the same by route type;
// this is for what connects on a sandbox's behalf (the egress proxy).
func (m *Manager) Forbidden(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || policy.IsAlwaysDenied(a) || m.cfg.Subnet.Contains(a) || m.cfg.Subnet6.IsValid() && m.cfg.Subnet6.Contains(a) {
		return true
	}
	return m.localAddrs().has(a)
}

// hostLocal is what the host's local routing table delivers to the host:
// single addresses, and the wider prefixes of local routes (127.0.0.0/8,
// an "AnyIP" range).
type hostLocal struct {
	addrs map[netip.Addr]bool
	nets  []netip.Prefix
}

func (h hostLocal) has(a netip.Addr) bool {
	if h.addrs[a] {
		return true
	}
	for _, p := range h.nets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// localAddrs reads the host's local routing table, at most every second.
func (m *Manager) localAddrs() hostLocal {
	m.localMu.Lock()
	defer m.localMu.Unlock()
	if m.local.addrs != nil && time.Since(m.localAt) < time.Second {
		return m.local
	}
	routes, err := dump(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_LOCAL}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		m.log.Warn("list the host's local routes", "err", err)
		if m.local.addrs != nil {
			return m.local
		}
	}
	local := hostLocal{addrs: map[netip.Addr]bool{}}
	for _, r := range routes {
		if r.Dst == nil || r.Type != unix.RTN_LOCAL && r.Type != unix.RTN_BROADCAST && r.Type != unix.RTN_ANYCAST {
			continue
		}
		ip, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		p := netip.PrefixFrom(ip.Unmap(), ones)
		if p.IsSingleIP() {
			local.addrs[p.Addr()] = true
		} else if p.IsValid() {
			local.nets = append(local.nets, p.Masked())
		}
	}
	m.local, m.localAt = local, time.Now()
	return local
}

// NoteRefused counts a refusal made outside the firewall (the resolver's,
// the egress proxy's) for sandbox id.
func (m *Manager) NoteRefused(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sb, ok := m.sbs[id]; ok {
		sb.noted++
	}
}

// family is the netlink address family of a.
func family(a netip.Addr) int {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// Addr is an attached sandbox's IPv4 address.
func (m *Manager) Addr(id string) (netip.Addr, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	sb, ok := m.sbs[id]
	if !ok {
		return netip.Addr{}, false
	}
	return sb.addr, true
}
