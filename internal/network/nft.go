package network

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/network/policy"
)

// The firewall is one inet table, owned entirely by the Manager (4|6:
// one per IP family, the IPv6 ones only with Config.Subnet6):
//
//	map sandboxes4|6   address : verdict      source address -> jump sb-<id>
//	set domains4|6     address                sandboxes whose policy names domains
//	set named4|6-<id>  address, timeout       addresses admitted by name (AddResolved)
//	counter refused-<id>                      every drop on the sandbox's behalf
//	chain in-<id>      inet ingress on the host veth: anti-spoof (own source only)
//	chain sb-<id>      jump lim-<id>, gateway services, always-refused, policy
//	chain lim-<id>     the conntrack limit (new connections over it refused)
//	chain forward      from the bridge: established, else dispatch by source; to the bridge: replies only
//	chain input        from the bridge: established, neighbour discovery, else dispatch by source
//	chain prerouting   (nat) 80/443 of domain sandboxes -> egress proxy; 53 -> resolver port
//	chain postrouting  (nat) masquerade the subnets leaving by another interface
//
// A source address identifies a sandbox only because its ingress chain
// drops every other source from its veth.
const (
	// hookInetIngress is NF_INET_INGRESS: the inet family's ingress hook
	// (nftables.ChainHookIngress is the netdev family's, a different number).
	hookInetIngress nftables.ChainHook = 5
)

func famName(is4 bool) string {
	if is4 {
		return "4"
	}
	return "6"
}

func keyType(is4 bool) nftables.SetDatatype {
	if is4 {
		return nftables.TypeIPAddr
	}
	return nftables.TypeIP6Addr
}

// batch is one nftables transaction. Rules refer to sets by name (the
// kernel finds a set added earlier in the same transaction by name).
type batch struct {
	c      *nftables.Conn
	t      *nftables.Table
	nextID uint32
}

// addSet queues a set with its elements. It numbers the set itself: the
// library would otherwise number it from a package variable shared,
// unlocked, by every connection.
func (b *batch) addSet(s *nftables.Set, elems []nftables.SetElement) error {
	b.nextID++
	s.ID = b.nextID
	if err := b.c.AddSet(s, elems); err != nil {
		return fmt.Errorf("queue set %s: %w", s.Name, err)
	}
	return nil
}

func (m *Manager) newBatch() (*batch, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("open nftables: %w", err)
	}
	return &batch{c: c, t: &nftables.Table{Name: m.cfg.Table, Family: nftables.TableFamilyINet}}, nil
}

func (b *batch) flush(what string) error {
	if err := b.c.Flush(); err != nil {
		return fmt.Errorf("apply nftables %s: %w", what, err)
	}
	return nil
}

func (b *batch) rule(chain *nftables.Chain, exprs ...[]expr.Any) {
	b.c.AddRule(&nftables.Rule{Table: b.t, Chain: chain, Exprs: cat(exprs...)})
}

func (b *batch) sandboxMap(is4 bool) *nftables.Set {
	return &nftables.Set{Table: b.t, Name: "sandboxes" + famName(is4), IsMap: true, KeyType: keyType(is4), DataType: nftables.TypeVerdict}
}

func (b *batch) domainSet(is4 bool) *nftables.Set {
	return &nftables.Set{Table: b.t, Name: "domains" + famName(is4), KeyType: keyType(is4)}
}

func (b *batch) namedSet(k string, is4 bool) *nftables.Set {
	return &nftables.Set{Table: b.t, Name: namedSet(k, is4), KeyType: keyType(is4), HasTimeout: true}
}

// families are the IP families the Manager serves: IPv4, and IPv6 with
// Subnet6.
func (m *Manager) families() []bool {
	if m.gw6.IsValid() {
		return []bool{true, false}
	}
	return []bool{true}
}

// addrOf is the sandbox's address of a family.
func (sb *sandbox) addrOf(is4 bool) netip.Addr {
	if is4 {
		return sb.addr
	}
	return sb.addr6
}

func (m *Manager) gwOf(is4 bool) netip.Addr {
	if is4 {
		return m.gw
	}
	return m.gw6
}

func (m *Manager) subnetOf(is4 bool) netip.Prefix {
	if is4 {
		return m.cfg.Subnet
	}
	return m.cfg.Subnet6
}

// rebuild queues the whole table for sbs: delete (if present) and
// recreate, so one transaction replaces the ruleset.
func (m *Manager) rebuild(b *batch, sbs []*sandbox, now time.Time) error {
	b.c.AddTable(b.t)
	b.c.DelTable(b.t)
	b.c.AddTable(b.t)

	for _, is4 := range m.families() {
		for _, s := range []*nftables.Set{b.sandboxMap(is4), b.domainSet(is4)} {
			if err := b.addSet(s, nil); err != nil {
				return err
			}
		}
	}
	for _, sb := range sbs {
		if err := m.addSandbox(b, sb, now, false); err != nil {
			return err
		}
	}

	pAccept := nftables.ChainPolicyAccept
	br := m.cfg.Bridge
	est := matchCtState(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED)

	fwd := b.c.AddChain(&nftables.Chain{Name: "forward", Table: b.t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &pAccept})
	b.rule(fwd, matchIif(br, true), est, accept())
	for _, is4 := range m.families() {
		b.rule(fwd, matchIif(br, true), lookupAddr(src, is4, b.sandboxMap(is4), true))
	}
	b.rule(fwd, matchIif(br, true), drop())
	b.rule(fwd, matchOif(br, true), est, accept())
	b.rule(fwd, matchOif(br, true), drop())

	in := b.c.AddChain(&nftables.Chain{Name: "input", Table: b.t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &pAccept})
	b.rule(in, matchIif(br, true), est, accept())
	if m.gw6.IsValid() {
		// Neighbour discovery with the gateway (from link-local sources).
		for _, typ := range []byte{133, 135, 136} {
			b.rule(in, matchIif(br, true), matchIPv6(), matchICMPv6Type(typ), accept())
		}
	}
	// Multicast a sandbox's stack sends on its own (MLD reports, IGMP) is
	// dropped uncounted: Refused counts what the sandbox asked for.
	b.rule(in, matchIif(br, true), matchPrefix(dst, netip.MustParsePrefix("224.0.0.0/4"), true), drop())
	if m.gw6.IsValid() {
		b.rule(in, matchIif(br, true), matchPrefix(dst, netip.MustParsePrefix("ff00::/8"), true), drop())
	}
	for _, is4 := range m.families() {
		b.rule(in, matchIif(br, true), lookupAddr(src, is4, b.sandboxMap(is4), true))
	}
	b.rule(in, matchIif(br, true), drop())

	pre := b.c.AddChain(&nftables.Chain{Name: "prerouting", Table: b.t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &pAccept})
	for _, is4 := range m.families() {
		for _, port := range []int{80, 443} {
			b.rule(pre, matchIif(br, true), lookupAddr(src, is4, b.domainSet(is4), false),
				matchLocalDaddr(false), matchL4Port(unix.IPPROTO_TCP, port), redirectTo(m.cfg.EgressPort))
		}
		if m.cfg.ResolverPort != 53 {
			for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
				b.rule(pre, matchIif(br, true), matchAddr(dst, m.gwOf(is4), true),
					matchL4Port(proto, 53), redirectTo(m.cfg.ResolverPort))
			}
		}
	}

	post := b.c.AddChain(&nftables.Chain{Name: "postrouting", Table: b.t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &pAccept})
	for _, is4 := range m.families() {
		b.rule(post, matchPrefix(src, m.subnetOf(is4), true), matchOif(br, false), []expr.Any{&expr.Masq{}})
	}
	return nil
}

// addSandbox queues one sandbox's objects: its counter, named sets,
// chains, and its elements in the shared sets.
//
// With fresh, nothing of the sandbox's is known to exist, but the batch
// holds whether it does or not: each chain and named set is emptied right
// after it is added (adding an existing one is no error and would keep
// what it held), so no listing of the table comes first.
func (m *Manager) addSandbox(b *batch, sb *sandbox, now time.Time, fresh bool) error {
	b.c.AddObj(&nftables.NamedObj{Table: b.t, Name: counterName(sb.key), Type: nftables.ObjTypeCounter, Obj: &expr.Counter{}})
	addChain := func(c *nftables.Chain) *nftables.Chain {
		c = b.c.AddChain(c)
		if fresh {
			b.c.FlushChain(c)
		}
		return c
	}

	for _, is4 := range m.families() {
		ns := b.namedSet(sb.key, is4)
		var elems []nftables.SetElement
		for a, exp := range sb.resolved {
			if left := exp.Sub(now); left > time.Second && a.Is4() == is4 {
				elems = append(elems, nftables.SetElement{Key: a.AsSlice(), Timeout: left.Truncate(time.Millisecond)})
			}
		}
		if !fresh {
			if err := b.addSet(ns, elems); err != nil {
				return err
			}
			continue
		}
		if err := b.addSet(ns, nil); err != nil {
			return err
		}
		b.c.FlushSet(ns)
		if len(elems) > 0 {
			if err := b.c.SetAddElements(ns, elems); err != nil {
				return fmt.Errorf("queue elements of %s: %w", ns.Name, err)
			}
		}
	}

	if sb.lim.MaxConns > 0 {
		// Its own chain, which SetPolicy leaves alone: the connection
		// count lives in the rule.
		lim := addChain(&nftables.Chain{Name: limitName(sb.key), Table: b.t})
		b.rule(lim, matchCtState(expr.CtStateBitNEW),
			[]expr.Any{&expr.Connlimit{Count: uint32(sb.lim.MaxConns), Flags: 1}}, refuse(counterName(sb.key)))
	}
	ch := addChain(&nftables.Chain{Name: chainName(sb.key), Table: b.t})
	m.sandboxRules(b, ch, sb)

	prio := nftables.ChainPriority(-500)
	ing := addChain(&nftables.Chain{Name: ingressName(sb.key), Table: b.t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookRef(hookInetIngress), Priority: &prio, Device: sb.veth})
	ref := refuse(counterName(sb.key))
	b.rule(ing, matchAddr(src, sb.addr, false), ref)
	if sb.addr6.IsValid() {
		// Duplicate address detection and MLD speak from :: to link-local
		// multicast before an address is ready: not a spoof (input drops
		// them uncounted).
		b.rule(ing, matchAddr(src, netip.IPv6Unspecified(), true), matchPrefix(dst, linkMulticast6, true), accept())
		b.rule(ing, matchAddr(src, sb.addr6, false), matchPrefix(src, linkLocal6, false), ref)
	} else {
		b.rule(ing, matchIPv6(), drop())
	}

	for _, is4 := range m.families() {
		a := sb.addrOf(is4)
		if !a.IsValid() {
			continue
		}
		if err := b.c.SetAddElements(b.sandboxMap(is4), []nftables.SetElement{{Key: a.AsSlice(),
			VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: ch.Name}}}); err != nil {
			return fmt.Errorf("queue element of sandboxes%s: %w", famName(is4), err)
		}
		if sb.pol.HasDomains() {
			if err := b.c.SetAddElements(b.domainSet(is4), []nftables.SetElement{{Key: a.AsSlice()}}); err != nil {
				return fmt.Errorf("queue element of domains%s: %w", famName(is4), err)
			}
		}
	}
	return nil
}

var (
	linkLocal6     = netip.MustParsePrefix("fe80::/10")
	linkMulticast6 = netip.MustParsePrefix("ff02::/16")
)

// sandboxRules queues the rules of chain sb-<id>, in the policy's order
// of decision, after what no policy opens.
func (m *Manager) sandboxRules(b *batch, ch *nftables.Chain, sb *sandbox) {
	ref := refuse(counterName(sb.key))
	if sb.lim.MaxConns > 0 {
		b.rule(ch, []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: limitName(sb.key)}})
	}
	fams := m.families()
	for _, is4 := range fams {
		gw := matchAddr(dst, m.gwOf(is4), true)
		b.rule(ch, gw, matchL4Port(unix.IPPROTO_UDP, m.cfg.ResolverPort), accept())
		b.rule(ch, gw, matchL4Port(unix.IPPROTO_TCP, m.cfg.ResolverPort), accept())
		b.rule(ch, gw, matchL4Port(unix.IPPROTO_TCP, m.cfg.EgressPort), accept())
	}
	b.rule(ch, matchLocalDaddr(true), ref)
	b.rule(ch, matchOif(m.cfg.Bridge, true), ref)
	for _, is4 := range fams {
		b.rule(ch, matchPrefix(dst, m.subnetOf(is4), true), ref)
	}
	for _, p := range policy.AlwaysDenied {
		if p.Addr().Is4() || m.gw6.IsValid() {
			b.rule(ch, matchPrefix(dst, p, true), ref)
		}
	}
	p := sb.pol
	if !p.Internet {
		b.rule(ch, ref)
		return
	}
	for _, c := range p.DenyCIDRs {
		if c.Addr().Is4() || m.gw6.IsValid() {
			b.rule(ch, matchPrefix(dst, c, true), ref)
		}
	}
	if p.DefaultAdmit() {
		b.rule(ch, accept())
		return
	}
	for _, c := range p.AllowCIDRs {
		if c.Addr().Is4() || m.gw6.IsValid() {
			b.rule(ch, matchPrefix(dst, c, true), accept())
		}
	}
	if len(p.AllowDomains) > 0 {
		for _, is4 := range fams {
			b.rule(ch, lookupAddr(dst, is4, b.namedSet(sb.key, is4), false), accept())
		}
	}
	b.rule(ch, ref)
}

// present lists the table's chains, sets and objects by name (empty when
// the table does not exist). Of the chains it lists only the base chains
// and those of one sandbox (presentChains): a listing of every chain is a
// dump of every table of the family on the host, hundreds of chains on a
// busy one, on every attach.
type present struct {
	chains, sets, objs map[string]bool
}

// presentChains are the chains listPresent looks for: the base chains
// whose absence means a table to rebuild, and sandbox k's.
func presentChains(k string) []string {
	return []string{"forward", "input", chainName(k), limitName(k), ingressName(k)}
}

// listPresent lists what of the table installSandbox and Detach need to
// know for sandbox key k.
func (m *Manager) listPresent(b *batch, k string) (present, error) {
	p := present{chains: map[string]bool{}, sets: map[string]bool{}, objs: map[string]bool{}}
	for _, name := range presentChains(k) {
		ok, err := chainExists(b.c, b.t, name)
		if err != nil {
			return p, fmt.Errorf("look up nftables chain %s: %w", name, err)
		}
		p.chains[name] = ok
	}
	sets, err := b.c.GetSets(b.t)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return p, fmt.Errorf("list nftables sets: %w", err)
	}
	for _, s := range sets {
		p.sets[s.Name] = true
	}
	objs, err := b.c.GetNamedObjects(b.t)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return p, fmt.Errorf("list nftables objects: %w", err)
	}
	for _, o := range objs {
		if n, ok := o.(*nftables.NamedObj); ok {
			p.objs[n.Name] = true
		}
	}
	return p, nil
}

// chainExists reports whether table t has chain name (false, nil when it
// or the table is absent). The library's single-chain lookup wraps the
// kernel's error as text: ENOENT is recognised by its message.
func chainExists(c *nftables.Conn, t *nftables.Table, name string) (bool, error) {
	_, err := c.ListChain(t, name)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT) || strings.HasSuffix(err.Error(), unix.ENOENT.Error()):
		return false, nil
	default:
		return false, err
	}
}

// delSandbox queues the removal of whatever of a sandbox's objects p
// lists. Its elements in the shared sets exist only with its chain (they
// are added and removed together); they are first added then deleted so
// the deletion never fails for a missing one. (Deletions make a commit
// wait for the kernel's RCU grace period, ~10 ms: a first Attach has none.)
func (m *Manager) delSandbox(b *batch, p present, k string, addrs ...netip.Addr) {
	for _, a := range addrs {
		if !a.IsValid() || !p.chains[chainName(k)] {
			continue
		}
		is4 := a.Is4()
		if sm := b.sandboxMap(is4); p.sets[sm.Name] {
			el := []nftables.SetElement{{Key: a.AsSlice(), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: chainName(k)}}}
			_ = b.c.SetAddElements(sm, el)
			_ = b.c.SetDeleteElements(sm, el)
		}
		if ds := b.domainSet(is4); p.sets[ds.Name] {
			el := []nftables.SetElement{{Key: a.AsSlice()}}
			_ = b.c.SetAddElements(ds, el)
			_ = b.c.SetDeleteElements(ds, el)
		}
	}
	for _, name := range []string{chainName(k), limitName(k), ingressName(k)} {
		if p.chains[name] {
			ch := &nftables.Chain{Name: name, Table: b.t}
			b.c.FlushChain(ch)
			b.c.DelChain(ch)
		}
	}
	for _, is4 := range []bool{true, false} {
		if p.sets[namedSet(k, is4)] {
			b.c.DelSet(b.namedSet(k, is4))
		}
	}
	if p.objs[counterName(k)] {
		b.c.DeleteObject(&nftables.NamedObj{Table: b.t, Name: counterName(k), Type: nftables.ObjTypeCounter})
	}
}

// refusedCounters reads every sandbox counter of the table by key.
func (m *Manager) refusedCounters(b *batch) (map[string]uint64, error) {
	objs, err := b.c.GetNamedObjects(b.t)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, fmt.Errorf("read nftables counters: %w", err)
	}
	out := map[string]uint64{}
	for _, o := range objs {
		n, ok := o.(*nftables.NamedObj)
		if !ok {
			continue
		}
		if c, ok := n.Obj.(*expr.Counter); ok {
			out[n.Name] = c.Packets
		}
	}
	return out, nil
}
