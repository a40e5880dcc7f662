package network

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/network/policy"
)

// The firewall is one inet table, owned entirely by the Manager:
//
//	set sandboxes4   ipv4_addr : verdict   address -> jump sb-<id>
//	set domains4     ipv4_addr             sandboxes whose policy names domains
//	set named-<id>   ipv4_addr, timeout    addresses admitted by name (AddResolved)
//	counter refused-<id>                   every drop on the sandbox's behalf
//	chain in-<id>    inet ingress on the host veth: anti-spoof (own source only)
//	chain sb-<id>    conntrack limit, gateway services, always-refused, policy
//	chain forward    from the bridge: established, else dispatch by source; to the bridge: replies only
//	chain input      from the bridge: established, else dispatch by source
//	chain prerouting (nat) 80/443 of domain sandboxes -> egress proxy; 53 -> resolver port
//	chain postrouting (nat) masquerade the subnet leaving by another interface
//
// A source address identifies a sandbox only because its ingress chain
// drops every other source from its veth.
const (
	// hookInetIngress is NF_INET_INGRESS: the inet family's ingress hook
	// (nftables.ChainHookIngress is the netdev family's, a different number).
	hookInetIngress nftables.ChainHook = 5

	setSandboxes = "sandboxes4"
	setDomains   = "domains4"
)

// batch is one nftables transaction.
type batch struct {
	c      *nftables.Conn
	t      *nftables.Table
	nextID uint32
}

func (b *batch) id() uint32 { b.nextID++; return b.nextID }

func (m *Manager) newBatch() (*batch, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("open nftables: %w", err)
	}
	return &batch{c: c, t: &nftables.Table{Name: m.cfg.Table, Family: nftables.TableFamilyINet}, nextID: 1000}, nil
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

func (b *batch) sandboxMap() *nftables.Set {
	return &nftables.Set{Table: b.t, Name: setSandboxes, IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict}
}

func (b *batch) domainSet() *nftables.Set {
	return &nftables.Set{Table: b.t, Name: setDomains, KeyType: nftables.TypeIPAddr}
}

func (b *batch) namedSet(k string) *nftables.Set {
	return &nftables.Set{Table: b.t, Name: namedSet(k), KeyType: nftables.TypeIPAddr, HasTimeout: true}
}

func addr4(a netip.Addr) []byte { b := a.As4(); return b[:] }

// rebuild queues the whole table for sbs: delete (if present) and
// recreate, so one transaction replaces the ruleset.
func (m *Manager) rebuild(b *batch, sbs []*sandbox, now time.Time) error {
	b.c.AddTable(b.t)
	b.c.DelTable(b.t)
	b.c.AddTable(b.t)

	sbMap := b.sandboxMap()
	sbMap.ID = b.id()
	domSet := b.domainSet()
	domSet.ID = b.id()
	if err := b.c.AddSet(sbMap, nil); err != nil {
		return fmt.Errorf("queue set %s: %w", setSandboxes, err)
	}
	if err := b.c.AddSet(domSet, nil); err != nil {
		return fmt.Errorf("queue set %s: %w", setDomains, err)
	}
	for _, sb := range sbs {
		if err := m.addSandbox(b, sb, sbMap, domSet, now); err != nil {
			return err
		}
	}

	pAccept := nftables.ChainPolicyAccept
	br := m.cfg.Bridge
	est := matchCtState(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED)

	fwd := b.c.AddChain(&nftables.Chain{Name: "forward", Table: b.t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &pAccept})
	b.rule(fwd, matchIif(br, true), est, accept())
	b.rule(fwd, matchIif(br, true), matchIPv4(), lookup4(offSaddr4, sbMap, true))
	b.rule(fwd, matchIif(br, true), drop())
	b.rule(fwd, matchOif(br, true), est, accept())
	b.rule(fwd, matchOif(br, true), drop())

	in := b.c.AddChain(&nftables.Chain{Name: "input", Table: b.t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &pAccept})
	b.rule(in, matchIif(br, true), est, accept())
	b.rule(in, matchIif(br, true), matchIPv4(), lookup4(offSaddr4, sbMap, true))
	b.rule(in, matchIif(br, true), drop())

	pre := b.c.AddChain(&nftables.Chain{Name: "prerouting", Table: b.t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &pAccept})
	for _, port := range []int{80, 443} {
		b.rule(pre, matchIif(br, true), matchIPv4(), lookup4(offSaddr4, domSet, false),
			matchLocalDaddr(false), matchL4Port(unix.IPPROTO_TCP, port), redirectTo(m.cfg.EgressPort))
	}
	if m.cfg.ResolverPort != 53 {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			b.rule(pre, matchIif(br, true), matchIPv4(), matchAddr4(offDaddr4, m.gw, true),
				matchL4Port(proto, 53), redirectTo(m.cfg.ResolverPort))
		}
	}

	post := b.c.AddChain(&nftables.Chain{Name: "postrouting", Table: b.t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &pAccept})
	b.rule(post, matchIPv4(), matchPrefix4(offSaddr4, m.cfg.Subnet), matchOif(br, false), []expr.Any{&expr.Masq{}})
	return nil
}

// addSandbox queues one sandbox's objects: its counter, named set,
// chains, and its elements in the shared sets.
func (m *Manager) addSandbox(b *batch, sb *sandbox, sbMap, domSet *nftables.Set, now time.Time) error {
	b.c.AddObj(&nftables.NamedObj{Table: b.t, Name: counterName(sb.key), Type: nftables.ObjTypeCounter, Obj: &expr.Counter{}})

	ns := b.namedSet(sb.key)
	ns.ID = b.id()
	var elems []nftables.SetElement
	for a, exp := range sb.resolved {
		if left := exp.Sub(now); left > time.Second && a.Is4() {
			elems = append(elems, nftables.SetElement{Key: addr4(a), Timeout: left.Truncate(time.Millisecond)})
		}
	}
	if err := b.c.AddSet(ns, elems); err != nil {
		return fmt.Errorf("queue set %s: %w", ns.Name, err)
	}

	ch := b.c.AddChain(&nftables.Chain{Name: chainName(sb.key), Table: b.t})
	m.sandboxRules(b, ch, ns, sb)

	prio := nftables.ChainPriority(-500)
	ing := b.c.AddChain(&nftables.Chain{Name: ingressName(sb.key), Table: b.t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookRef(hookInetIngress), Priority: &prio, Device: sb.veth})
	b.rule(ing, matchIPv4(), matchAddr4(offSaddr4, sb.addr, false), refuse(counterName(sb.key)))
	b.rule(ing, matchIPv6(), drop())

	if err := b.c.SetAddElements(sbMap, []nftables.SetElement{{Key: addr4(sb.addr),
		VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: ch.Name}}}); err != nil {
		return fmt.Errorf("queue element of %s: %w", setSandboxes, err)
	}
	if sb.pol.HasDomains() {
		if err := b.c.SetAddElements(domSet, []nftables.SetElement{{Key: addr4(sb.addr)}}); err != nil {
			return fmt.Errorf("queue element of %s: %w", setDomains, err)
		}
	}
	return nil
}

// sandboxRules queues the rules of chain sb-<id>, in the policy's order
// of decision, after what no policy opens.
func (m *Manager) sandboxRules(b *batch, ch *nftables.Chain, ns *nftables.Set, sb *sandbox) {
	ref := refuse(counterName(sb.key))
	if sb.lim.MaxConns > 0 {
		b.rule(ch, matchCtState(expr.CtStateBitNEW),
			[]expr.Any{&expr.Connlimit{Count: uint32(sb.lim.MaxConns), Flags: 1}}, ref)
	}
	gw := matchAddr4(offDaddr4, m.gw, true)
	b.rule(ch, gw, matchL4Port(unix.IPPROTO_UDP, m.cfg.ResolverPort), accept())
	b.rule(ch, gw, matchL4Port(unix.IPPROTO_TCP, m.cfg.ResolverPort), accept())
	b.rule(ch, gw, matchL4Port(unix.IPPROTO_TCP, m.cfg.EgressPort), accept())
	b.rule(ch, matchLocalDaddr(true), ref)
	b.rule(ch, matchOif(m.cfg.Bridge, true), ref)
	b.rule(ch, matchPrefix4(offDaddr4, m.cfg.Subnet), ref)
	for _, p := range policy.AlwaysDenied {
		if p.Addr().Is4() {
			b.rule(ch, matchPrefix4(offDaddr4, p), ref)
		}
	}
	p := sb.pol
	if !p.Internet {
		b.rule(ch, ref)
		return
	}
	for _, c := range p.DenyCIDRs {
		if c.Addr().Is4() {
			b.rule(ch, matchPrefix4(offDaddr4, c), ref)
		}
	}
	if p.DefaultAdmit() {
		b.rule(ch, accept())
		return
	}
	for _, c := range p.AllowCIDRs {
		if c.Addr().Is4() {
			b.rule(ch, matchPrefix4(offDaddr4, c), accept())
		}
	}
	if len(p.AllowDomains) > 0 {
		b.rule(ch, lookup4(offDaddr4, ns, false), accept())
	}
	b.rule(ch, ref)
}

// present lists the table's chains, sets and objects by name (empty when
// the table does not exist).
type present struct {
	chains, sets, objs map[string]bool
}

func (m *Manager) listPresent(b *batch) (present, error) {
	p := present{chains: map[string]bool{}, sets: map[string]bool{}, objs: map[string]bool{}}
	chains, err := b.c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return p, fmt.Errorf("list nftables chains: %w", err)
	}
	for _, c := range chains {
		if c.Table.Name == m.cfg.Table {
			p.chains[c.Name] = true
		}
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

// delSandbox queues the removal of whatever of a sandbox's objects p
// lists. Elements are first added then deleted so the deletion never
// fails for a missing element.
func (m *Manager) delSandbox(b *batch, p present, k string, addr netip.Addr) {
	if addr.IsValid() && p.sets[setSandboxes] && p.chains[chainName(k)] {
		sm := b.sandboxMap()
		el := []nftables.SetElement{{Key: addr4(addr), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: chainName(k)}}}
		_ = b.c.SetAddElements(sm, el)
		_ = b.c.SetDeleteElements(sm, el)
	}
	if addr.IsValid() && p.sets[setDomains] {
		el := []nftables.SetElement{{Key: addr4(addr)}}
		_ = b.c.SetAddElements(b.domainSet(), el)
		_ = b.c.SetDeleteElements(b.domainSet(), el)
	}
	for _, name := range []string{chainName(k), ingressName(k)} {
		if p.chains[name] {
			ch := &nftables.Chain{Name: name, Table: b.t}
			b.c.FlushChain(ch)
			b.c.DelChain(ch)
		}
	}
	if p.sets[namedSet(k)] {
		b.c.DelSet(b.namedSet(k))
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
