package network

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/network/policy"
)

// The firewall is two tables named Config.Table, owned entirely by the
// Manager: its rules are fixed, and a sandbox is only elements of sets.
// Attaching one adds no rule and no chain, so a commit never has the
// kernel validate every sandbox's rules again (it walks every chain a
// table's base chains reach on each commit that adds a rule or a jump):
// an attach costs the same with 1 or 1,000 sandboxes. Every set is keyed
// by the sandbox's address, so that nft(8) lists the tables (4|6: one per
// IP family, the IPv6 ones only with Config.Subnet6).
//
// The inet table:
//
//	map sandboxes4|6   address : tag            attached sandboxes (a tag never given twice: an
//	                                            entry left behind under another tag clashes)
//	map marks6         address : mark           a sandbox's IPv6 address to its connections' mark
//	                                            (its IPv4 address: conntrack.go)
//	set refused4|6     address, counter         a drop on a sandbox's behalf, counted
//	set offline4|6     address                  policies without the internet
//	set open4|6        address                  policies that admit by default
//	set deny4|6        address . prefix         denied CIDRs (intervals)
//	set allow4|6       address . prefix         allowed CIDRs (intervals)
//	set byname4|6      address                  policies that allow domains
//	set named4|6       address . address, timeout  addresses admitted by name (AddResolved)
//	set domains4|6     address                  policies that name domains: 80/443 to the egress proxy
//	set limit<N>4|6    address                  sandboxes whose conntrack limit is N
//	set conns<N>4|6    address, dynamic         their connection counts
//	set sources4|6     ifname . address         each host end's own address
//	set spoofed        ifname, counter          drops of another source, counted per host end
//	chain antispoof    (raw) by the gateway link -> dropped; from a host end, a source not its own
//	                   -> counted, dropped (::, link-local: dropped uncounted)
//	chain forward      from a host end: established, else a sandbox's source, its connection marked,
//	                   to policy; to a host end: replies only
//	chain input        from a host end: established, else a sandbox's source, its connection
//	                   marked, to policy
//	chain output       to a host end, a new connection to a sandbox: marked
//	chain policy       limits, gateway services, always-refused, then the policy's sets in order of decision
//	chain limits       one rule per limit in use
//	chain prerouting   (nat) 80/443 of domain sandboxes -> egress proxy; 53 -> resolver port
//	chain postrouting  (nat) masquerade the subnets leaving by another interface
//
// A host end is a link in the table's interface group (linkGroup): the
// kernel gives a link its group as it makes it, so every rule knows a
// sandbox's link from its first packet, before its elements are in. A
// source address identifies a sandbox only because antispoof drops every
// other source from its link. A table named so in the bridge family is
// an earlier version's (sandboxes were bridged then): a rebuild deletes it.

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

// dynamicSize bounds the sets the kernel adds to itself (a dynamic set
// needs one); it is more than a subnet's addresses.
const dynamicSize = 1 << 17

// batch is one nftables transaction over both tables. Rules refer to sets
// by name (the kernel finds a set added earlier in the same transaction by
// name). Elements queued with add go in after everything else, so that a
// removal queued with del comes first.
type batch struct {
	c      *nftables.Conn
	t      *nftables.Table // inet
	bt     *nftables.Table // bridge: an earlier version's, deleted by a rebuild
	nextID uint32
	adds   map[string]*pendingElems
	order  []string
	// limits are the limits whose sets and rule this batch makes;
	// rebuilt when it replaces the tables.
	limits  map[int]bool
	rebuilt bool
}

type pendingElems struct {
	s     *nftables.Set
	elems []nftables.SetElement
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
	return &batch{c: c,
		t:      &nftables.Table{Name: m.cfg.Table, Family: nftables.TableFamilyINet},
		bt:     &nftables.Table{Name: m.cfg.Table, Family: nftables.TableFamilyBridge},
		adds:   map[string]*pendingElems{},
		limits: map[int]bool{},
	}, nil
}

// add queues elements of s, to go in at flush.
func (b *batch) add(s *nftables.Set, elems ...nftables.SetElement) {
	k := strconv.Itoa(int(s.Table.Family)) + "/" + s.Name
	p, ok := b.adds[k]
	if !ok {
		p = &pendingElems{s: s}
		b.adds[k] = p
		b.order = append(b.order, k)
	}
	p.elems = append(p.elems, elems...)
}

// del queues the removal of elements of s, present or not: each is added
// first (a no-op when present), so the removal never fails for a missing
// one.
func (b *batch) del(s *nftables.Set, elems ...nftables.SetElement) {
	if len(elems) == 0 {
		return
	}
	_ = b.c.SetAddElements(s, elems)
	_ = b.c.SetDeleteElements(s, elems)
}

// flush applies the batch, then records the limits it made.
func (m *Manager) flush(b *batch, what string) error {
	for _, k := range b.order {
		p := b.adds[k]
		if err := b.c.SetAddElements(p.s, p.elems); err != nil {
			return fmt.Errorf("queue elements of %s: %w", p.s.Name, err)
		}
	}
	if err := b.c.Flush(); err != nil {
		return fmt.Errorf("apply nftables %s: %w", what, err)
	}
	if b.rebuilt {
		m.limits = map[int]bool{}
	}
	for n := range b.limits {
		m.limits[n] = true
	}
	return nil
}

func (b *batch) rule(chain *nftables.Chain, exprs ...[]expr.Any) {
	b.c.AddRule(&nftables.Rule{Table: chain.Table, Chain: chain, Exprs: cat(exprs...)})
}

// The sets, by name. The library needs a set's key type to encode its
// elements, and its flags to make it.

func (b *batch) sandboxMap(is4 bool) *nftables.Set {
	return &nftables.Set{Table: b.t, Name: "sandboxes" + famName(is4), IsMap: true, KeyType: keyType(is4), DataType: nftables.TypeMark}
}

// markMap6 maps a sandbox's IPv6 address to its connections' mark.
func (b *batch) markMap6() *nftables.Set {
	return &nftables.Set{Table: b.t, Name: "marks6", IsMap: true, KeyType: keyType(false), DataType: nftables.TypeMark}
}

func (b *batch) refusedSet(is4 bool) *nftables.Set {
	return &nftables.Set{Table: b.t, Name: "refused" + famName(is4), KeyType: keyType(is4), Dynamic: true, Counter: true, Size: dynamicSize}
}

// addrSet is one of the sets of addresses (offline4 ...).
func (b *batch) addrSet(name string, is4 bool) *nftables.Set {
	return &nftables.Set{Table: b.t, Name: name + famName(is4), KeyType: keyType(is4)}
}

func (b *batch) limitSet(n int, is4 bool) *nftables.Set {
	return b.addrSet("limit"+strconv.Itoa(n), is4)
}

func (b *batch) connsSet(n int, is4 bool) *nftables.Set {
	return &nftables.Set{Table: b.t, Name: "conns" + strconv.Itoa(n) + famName(is4), KeyType: keyType(is4), Dynamic: true, Size: dynamicSize}
}

// cidrSet is deny4|6 or allow4|6: address . prefix intervals.
func (b *batch) cidrSet(name string, is4 bool) *nftables.Set {
	return &nftables.Set{Table: b.t, Name: name + famName(is4), KeyType: nftables.MustConcatSetType(keyType(is4), keyType(is4)),
		Interval: true, Concatenation: true}
}

func (b *batch) namedSet(is4 bool) *nftables.Set {
	return &nftables.Set{Table: b.t, Name: "named" + famName(is4), KeyType: nftables.MustConcatSetType(keyType(is4), keyType(is4)), HasTimeout: true}
}

// The sets keyed by an interface name say their key is in host order, as
// nft(8) makes them: the kernel compares bytes either way, but nft prints
// the name of a set that says nothing as "".

func (b *batch) sourceSet(is4 bool) *nftables.Set {
	return &nftables.Set{Table: b.t, Name: "sources" + famName(is4), KeyType: nftables.MustConcatSetType(nftables.TypeIFName, keyType(is4))}
}

func (b *batch) spoofedSet() *nftables.Set {
	return &nftables.Set{Table: b.t, Name: "spoofed", KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian,
		Dynamic: true, Counter: true, Size: dynamicSize}
}

// Names of the sets of addresses (and a family's 4 or 6).
const (
	setOffline = "offline"
	setOpen    = "open"
	setByName  = "byname"
	setDomains = "domains"
)

// addrSets are the sets of addresses every table has.
func addrSets() []string { return []string{setOffline, setOpen, setByName, setDomains} }

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

func tagBytes(tag uint32) []byte { return binaryutil.BigEndian.PutUint32(tag) }

// rebuild queues the table for sbs: delete (if present) and recreate,
// so one transaction replaces the ruleset. The bridge table of an earlier
// version goes with it.
func (m *Manager) rebuild(b *batch, sbs []*sandbox, now time.Time) error {
	b.rebuilt = true
	b.c.AddTable(b.bt)
	b.c.DelTable(b.bt)
	b.c.AddTable(b.t)
	b.c.DelTable(b.t)
	b.c.AddTable(b.t)
	sets := []*nftables.Set{b.spoofedSet()}
	for _, is4 := range m.families() {
		sets = append(sets, b.sandboxMap(is4), b.refusedSet(is4), b.cidrSet("deny", is4), b.cidrSet("allow", is4),
			b.namedSet(is4), b.sourceSet(is4))
		for _, name := range addrSets() {
			sets = append(sets, b.addrSet(name, is4))
		}
	}
	if m.gw6.IsValid() {
		sets = append(sets, b.markMap6())
	}
	for _, s := range sets {
		if err := b.addSet(s, nil); err != nil {
			return err
		}
	}
	m.antispoofRules(b)
	m.baseRules(b)
	for _, sb := range sbs {
		m.tagged(sb)
		if err := m.ensureLimit(b, sb.lim.MaxConns); err != nil {
			return err
		}
		for _, e := range m.elements(b, sb, now, false) {
			b.add(e.s, e.e)
		}
	}
	return nil
}

// baseRules queues the inet table's chains and rules.
func (m *Manager) baseRules(b *batch) {
	pAccept := nftables.ChainPolicyAccept
	fromSb, toSb := matchIifGroup(m.group, true), matchOifGroup(m.group, true)
	est := matchCtState(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED)
	pol := b.c.AddChain(&nftables.Chain{Name: "policy", Table: b.t})
	lim := b.c.AddChain(&nftables.Chain{Name: "limits", Table: b.t})
	toPolicy := []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: pol.Name}}

	fwd := b.c.AddChain(&nftables.Chain{Name: "forward", Table: b.t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &pAccept})
	b.rule(fwd, fromSb, est, accept())
	for _, is4 := range m.families() {
		b.rule(fwd, fromSb, b.markConn(src, is4), toPolicy)
	}
	b.rule(fwd, fromSb, drop())
	b.rule(fwd, toSb, est, accept())
	b.rule(fwd, toSb, drop())

	in := b.c.AddChain(&nftables.Chain{Name: "input", Table: b.t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &pAccept})
	b.rule(in, fromSb, est, accept())
	// Multicast a sandbox's stack sends on its own (MLD reports, IGMP) is
	// dropped uncounted: Refused counts what the sandbox asked for.
	b.rule(in, fromSb, matchPrefix(dst, multicast4, true), drop())
	if m.gw6.IsValid() {
		b.rule(in, fromSb, matchPrefix(dst, multicast6, true), drop())
	}
	for _, is4 := range m.families() {
		b.rule(in, fromSb, b.markConn(src, is4), toPolicy)
	}
	b.rule(in, fromSb, drop())

	// The host's own connections to a sandbox (the port proxy's) are
	// marked too: a detach forgets them with the sandbox's.
	out := b.c.AddChain(&nftables.Chain{Name: "output", Table: b.t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &pAccept})
	for _, is4 := range m.families() {
		b.rule(out, toSb, matchCtState(expr.CtStateBitNEW), b.markConn(dst, is4))
	}

	// The policy chain, in the policy's order of decision, after what no
	// policy opens. Each rule is per family: a refusal is counted by the
	// source address.
	b.rule(pol, []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: lim.Name}})
	fams := m.families()
	for _, is4 := range fams {
		gw := matchAddr(dst, m.gwOf(is4), true)
		b.rule(pol, gw, matchL4Port(unix.IPPROTO_UDP, m.cfg.ResolverPort), accept())
		b.rule(pol, gw, matchL4Port(unix.IPPROTO_TCP, m.cfg.ResolverPort), accept())
		b.rule(pol, gw, matchL4Port(unix.IPPROTO_TCP, m.cfg.EgressPort), accept())
	}
	for _, is4 := range fams {
		ref := b.refuse(is4)
		// The host's own addresses, and what the host takes in as
		// addressed to it too: a directed broadcast of one of its
		// networks, an anycast address (a subnet-router anycast of a
		// network it forwards for), a multicast group.
		for _, typ := range []uint32{unix.RTN_LOCAL, unix.RTN_BROADCAST, unix.RTN_ANYCAST, unix.RTN_MULTICAST} {
			b.rule(pol, matchFamily(is4), matchDaddrType(typ, true), ref)
		}
		b.rule(pol, matchFamily(is4), toSb, ref)
		b.rule(pol, matchPrefix(dst, m.subnetOf(is4), true), ref)
		for _, p := range policy.AlwaysDenied {
			if p.Addr().Is4() == is4 {
				b.rule(pol, matchPrefix(dst, p, true), ref)
			}
		}
	}
	for _, is4 := range fams {
		ref := b.refuse(is4)
		b.rule(pol, lookupAddr(src, is4, b.addrSet(setOffline, is4)), ref)
		b.rule(pol, lookupPair(is4, b.cidrSet("deny", is4)), ref)
		b.rule(pol, lookupAddr(src, is4, b.addrSet(setOpen, is4)), accept())
		b.rule(pol, lookupPair(is4, b.cidrSet("allow", is4)), accept())
		b.rule(pol, lookupAddr(src, is4, b.addrSet(setByName, is4)), lookupPair(is4, b.namedSet(is4)), accept())
		b.rule(pol, matchFamily(is4), ref)
	}

	pre := b.c.AddChain(&nftables.Chain{Name: "prerouting", Table: b.t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &pAccept})
	for _, is4 := range fams {
		for _, port := range []int{80, 443} {
			b.rule(pre, fromSb, lookupAddr(src, is4, b.addrSet(setDomains, is4)),
				matchDaddrType(unix.RTN_LOCAL, false), matchL4Port(unix.IPPROTO_TCP, port), dnatTo(m.gwOf(is4), m.cfg.EgressPort))
		}
		if m.cfg.ResolverPort != 53 {
			for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
				b.rule(pre, fromSb, matchAddr(dst, m.gwOf(is4), true),
					matchL4Port(proto, 53), dnatTo(m.gwOf(is4), m.cfg.ResolverPort))
			}
		}
	}

	post := b.c.AddChain(&nftables.Chain{Name: "postrouting", Table: b.t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &pAccept})
	for _, is4 := range fams {
		b.rule(post, matchPrefix(src, m.subnetOf(is4), true), matchOifGroup(m.group, false), []expr.Any{&expr.Masq{}})
	}
}

// antispoofRules queues the chain that drops, counted by link, a packet
// from a host end whose source address is not that link's sandbox's. It
// runs before connection tracking: a spoofed packet leaves no state.
func (m *Manager) antispoofRules(b *batch) {
	pAccept := nftables.ChainPolicyAccept
	ch := b.c.AddChain(&nftables.Chain{Name: "antispoof", Table: b.t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw, Policy: &pAccept})
	fromSb := matchIifGroup(m.group, true)
	iif := &expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}
	spoof := countAndDrop(iif, b.spoofedSet())
	// iifname . ip[6] saddr: the name fills register 1 (16 bytes), the
	// address follows it in register 2.
	notOwn := func(is4 bool) []expr.Any {
		a := loadAddr(src, is4)
		a.DestRegister = 2
		return []expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, a,
			&expr.Lookup{SourceRegister: 1, SetName: b.sourceSet(is4).Name, Invert: true}}
	}
	// Nothing comes in by the gateway link: it has no ports. A sandbox of
	// an earlier version still is one until Sync routes it, and no rule
	// of this table knows its link (group 0): it gets nothing through
	// meanwhile.
	b.rule(ch, matchIifname(m.cfg.Bridge), drop())
	b.rule(ch, fromSb, matchIPv4(), notOwn(true), spoof)
	if !m.gw6.IsValid() {
		b.rule(ch, fromSb, matchIPv6(), drop())
		return
	}
	// What a sandbox's stack sends on its own as its link comes up
	// (duplicate address detection from ::, MLD reports and router
	// solicitations from its link-local address) is no spoof: dropped,
	// uncounted. A routed sandbox needs no neighbour discovery (the
	// entries each way are permanent), and the host's neighbour table
	// takes nothing from a sandbox.
	b.rule(ch, fromSb, matchAddr(src, netip.IPv6Unspecified(), true), drop())
	b.rule(ch, fromSb, matchPrefix(src, linkLocal6, true), drop())
	b.rule(ch, fromSb, matchIPv6(), notOwn(false), spoof)
}

var (
	linkLocal6 = netip.MustParsePrefix("fe80::/10")
	multicast6 = netip.MustParsePrefix("ff00::/8")
	multicast4 = netip.MustParsePrefix("224.0.0.0/4")
)

// refuse counts the drop by the source address in refused4|6 and drops.
func (b *batch) refuse(is4 bool) []expr.Any {
	return countAndDrop(loadAddr(src, is4), b.refusedSet(is4))
}

// countAndDrop loads a key into register 1, counts the packet in its
// element of s (a set with a counter per element) and drops it.
func countAndDrop(key expr.Any, s *nftables.Set) []expr.Any {
	return []expr.Any{key,
		&expr.Dynset{SrcRegKey: 1, SetName: s.Name, Operation: unix.NFT_DYNSET_OP_UPDATE, Exprs: []expr.Any{&expr.Counter{}}},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// ensureLimit queues limit n's sets and rule if the table lacks them.
func (m *Manager) ensureLimit(b *batch, n int) error {
	if n <= 0 || b.limits[n] || (!b.rebuilt && m.limits[n]) {
		return nil
	}
	b.limits[n] = true
	lim := &nftables.Chain{Name: "limits", Table: b.t}
	for _, is4 := range m.families() {
		cs := b.connsSet(n, is4)
		for _, s := range []*nftables.Set{b.limitSet(n, is4), cs} {
			if err := b.addSet(s, nil); err != nil {
				return err
			}
		}
		b.rule(lim, lookupAddr(src, is4, b.limitSet(n, is4)), matchCtState(expr.CtStateBitNEW),
			[]expr.Any{loadAddr(src, is4), &expr.Dynset{SrcRegKey: 1, SetName: cs.Name, Operation: unix.NFT_DYNSET_OP_ADD,
				Exprs: []expr.Any{&expr.Connlimit{Count: uint32(n), Flags: 1}}}}, b.refuse(is4))
	}
	return nil
}

// setEl is one element of one set.
type setEl struct {
	s *nftables.Set
	e nftables.SetElement
}

// id names the element for comparing two sandboxes' elements.
func (e setEl) id() string {
	return strconv.Itoa(int(e.s.Table.Family)) + "/" + e.s.Name + "/" + hex.EncodeToString(e.e.Key) + "-" + hex.EncodeToString(e.e.KeyEnd) +
		"-" + hex.EncodeToString(e.e.Val)
}

// elements are a sandbox's elements but for its counters (refused4|6,
// spoofed), which are reset only when it is new. An address admitted by
// name is one of them while it lasts more than a second (to add), or at
// all (all, to remove).
func (m *Manager) elements(b *batch, sb *sandbox, now time.Time, all bool) []setEl {
	p := sb.pol
	var out []setEl
	for _, is4 := range m.families() {
		a := sb.addrOf(is4)
		if !a.IsValid() {
			continue
		}
		k := a.AsSlice()
		out = append(out,
			setEl{b.sandboxMap(is4), nftables.SetElement{Key: k, Val: tagBytes(sb.tag)}},
			setEl{b.sourceSet(is4), nftables.SetElement{Key: slices.Concat(ifname(sb.veth), k)}})
		for name, yes := range map[string]bool{setOffline: !p.Internet, setOpen: p.DefaultAdmit(),
			setByName: len(p.AllowDomains) > 0, setDomains: p.HasDomains()} {
			if yes {
				out = append(out, setEl{b.addrSet(name, is4), nftables.SetElement{Key: k}})
			}
		}
		if !is4 && sb.addr.IsValid() {
			out = append(out, setEl{b.markMap6(), nftables.SetElement{Key: k, Val: sb.addr.AsSlice()}})
		}
		if sb.lim.MaxConns > 0 {
			out = append(out, setEl{b.limitSet(sb.lim.MaxConns, is4), nftables.SetElement{Key: k}})
		}
		for _, c := range disjoint(p.DenyCIDRs, is4) {
			out = append(out, setEl{b.cidrSet("deny", is4), prefixElem(k, c)})
		}
		for _, c := range disjoint(p.AllowCIDRs, is4) {
			out = append(out, setEl{b.cidrSet("allow", is4), prefixElem(k, c)})
		}
		for r, exp := range sb.resolved {
			if left := exp.Sub(now); r.Is4() == is4 && (left > time.Second || all && left > 0) {
				out = append(out, setEl{b.namedSet(is4), nftables.SetElement{Key: slices.Concat(k, r.AsSlice()),
					Timeout: max(left, time.Second).Truncate(time.Millisecond)}})
			}
		}
	}
	return out
}

// prefixElem is the interval element a . c (a: an address's bytes).
func prefixElem(a []byte, c netip.Prefix) nftables.SetElement {
	return nftables.SetElement{Key: slices.Concat(a, c.Masked().Addr().AsSlice()), KeyEnd: slices.Concat(a, lastAddr(c).AsSlice())}
}

// lastAddr is the last address of c.
func lastAddr(c netip.Prefix) netip.Addr {
	a := c.Masked().Addr().AsSlice()
	for i := c.Bits(); i < len(a)*8; i++ {
		a[i/8] |= 0x80 >> (i % 8)
	}
	r, _ := netip.AddrFromSlice(a)
	return r
}

// disjoint is the prefixes of one family in ps without those another
// covers: an interval set refuses overlapping elements, and two prefixes
// either nest or do not meet. Only the families the Manager serves get
// here; the others are never matched.
func disjoint(ps []netip.Prefix, is4 bool) []netip.Prefix {
	var fam []netip.Prefix
	for _, p := range ps {
		if p.Addr().Is4() == is4 {
			fam = append(fam, p.Masked())
		}
	}
	slices.SortFunc(fam, func(a, b netip.Prefix) int { return a.Bits() - b.Bits() })
	var out []netip.Prefix
	for _, p := range fam {
		if !slices.ContainsFunc(out, func(q netip.Prefix) bool { return q.Contains(p.Addr()) }) {
			out = append(out, p)
		}
	}
	return out
}

// counters are sandbox sb's counted elements: its addresses in refused4|6
// and its port in spoofed.
func (m *Manager) counters(b *batch, sb *sandbox) []setEl {
	out := []setEl{{b.spoofedSet(), nftables.SetElement{Key: ifname(sb.veth)}}}
	for _, is4 := range m.families() {
		if a := sb.addrOf(is4); a.IsValid() {
			out = append(out, setEl{b.refusedSet(is4), nftables.SetElement{Key: a.AsSlice()}})
		}
	}
	return out
}

// addSandbox queues a sandbox not in the table (fresh, so its counters
// start at zero) or the change from old, the same sandbox as the table
// holds it: the elements old has and sb has not go, sb's go in (adding
// one present is a no-op).
func (m *Manager) addSandbox(b *batch, sb, old *sandbox, now time.Time) error {
	m.tagged(sb)
	if err := m.ensureLimit(b, sb.lim.MaxConns); err != nil {
		return err
	}
	next := slices.Concat(m.elements(b, sb, now, false), m.counters(b, sb))
	if old == nil {
		for _, e := range m.counters(b, sb) {
			b.del(e.s, e.e)
		}
		// What a table changed behind the Manager's back may hold of its
		// address in the sets of addresses goes (an entry in sandboxes4|6
		// under another tag fails the batch: the table is rebuilt).
		for _, is4 := range m.families() {
			m.clearAddr(b, sb.addrOf(is4))
		}
	} else {
		keep := map[string]bool{}
		for _, e := range next {
			keep[e.id()] = true
		}
		for _, e := range slices.Concat(m.elements(b, old, now, true), m.counters(b, old)) {
			if !keep[e.id()] {
				b.del(e.s, e.e)
			}
		}
	}
	for _, e := range next {
		b.add(e.s, e.e)
	}
	return nil
}

// tagged gives sb a tag if it has none.
func (m *Manager) tagged(sb *sandbox) {
	if sb.tag == 0 {
		m.nextTag++
		sb.tag = m.nextTag
	}
}

// clearAddr queues the removal of address a from every set of addresses
// (nothing when a is not valid).
func (m *Manager) clearAddr(b *batch, a netip.Addr) {
	if !a.IsValid() {
		return
	}
	el := nftables.SetElement{Key: a.AsSlice()}
	for _, name := range addrSets() {
		b.del(b.addrSet(name, a.Is4()), el)
	}
	for n := range m.limits {
		b.del(b.limitSet(n, a.Is4()), el)
	}
}

// delSandbox queues the removal of every element of sb.
func (m *Manager) delSandbox(b *batch, sb *sandbox) {
	for _, e := range slices.Concat(m.elements(b, sb, time.Now(), true), m.counters(b, sb)) {
		b.del(e.s, e.e)
	}
}

// tagOf finds the tag the table holds for address a (a listing of
// sandboxes4|6: for a sandbox the Manager does not hold).
func (m *Manager) tagOf(b *batch, a netip.Addr) (uint32, bool, error) {
	els, err := b.c.GetSetElements(b.sandboxMap(a.Is4()))
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("list nftables sandboxes: %w", err)
	}
	for _, e := range els {
		if slices.Equal(e.Key, a.AsSlice()) && len(e.Val) == 4 {
			return binaryutil.BigEndian.Uint32(e.Val), true, nil
		}
	}
	return 0, false, nil
}

// refusedCounters reads the refusal counters of the table: by address
// (refused4|6) and by port ("port:" and the name; spoofed).
func (m *Manager) refusedCounters(b *batch) (map[string]uint64, error) {
	out := map[string]uint64{}
	sets := []*nftables.Set{b.spoofedSet()}
	for _, is4 := range m.families() {
		sets = append(sets, b.refusedSet(is4))
	}
	for _, s := range sets {
		els, err := b.c.GetSetElements(s)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return nil, fmt.Errorf("read nftables counters of %s: %w", s.Name, err)
		}
		for _, e := range els {
			if e.Counter == nil {
				continue
			}
			if s.Name == "spoofed" {
				name, _, _ := bytes.Cut(e.Key, []byte{0})
				out[counterKeyPort(string(name))] += e.Counter.Packets
			} else if a, ok := netip.AddrFromSlice(e.Key); ok {
				out[a.String()] += e.Counter.Packets
			}
		}
	}
	return out, nil
}

// refusedOf is sandbox sb's share of counts (refusedCounters).
func refusedOf(counts map[string]uint64, sb *sandbox) uint64 {
	n := counts[counterKeyPort(sb.veth)]
	for _, a := range []netip.Addr{sb.addr, sb.addr6} {
		if a.IsValid() {
			n += counts[a.String()]
		}
	}
	return n
}

func counterKeyPort(name string) string { return "port:" + name }
