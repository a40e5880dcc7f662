package network

import (
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Expression helpers: each returns the expressions of one match, all
// through register 1, in the spelling nft(8) would generate.

func ifname(name string) []byte {
	b := make([]byte, 16)
	copy(b, name)
	return b
}

// matchIifGroup is "meta iifgroup ==|!= group".
func matchIifGroup(group uint32, eq bool) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFGROUP, Register: 1},
		&expr.Cmp{Op: cmpOp(eq), Register: 1, Data: binaryutil.NativeEndian.PutUint32(group)},
	}
}

// matchOifGroup is "meta oifgroup ==|!= group".
func matchOifGroup(group uint32, eq bool) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFGROUP, Register: 1},
		&expr.Cmp{Op: cmpOp(eq), Register: 1, Data: binaryutil.NativeEndian.PutUint32(group)},
	}
}

// matchIPv4 is "meta nfproto ipv4", needed before an ip header match in
// the inet family.
func matchIPv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

func matchIPv6() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
	}
}

// dir says which address of the IP header a match reads.
type dir int

const (
	src dir = iota
	dst
)

// loadAddr loads the source or destination address of an IPv4 (is4) or
// IPv6 header into register 1.
func loadAddr(d dir, is4 bool) *expr.Payload {
	off, n := uint32(12), uint32(4)
	if !is4 {
		off, n = 8, 16
	}
	if d == dst {
		off += n
	}
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}
}

func matchFamily(is4 bool) []expr.Any {
	if is4 {
		return matchIPv4()
	}
	return matchIPv6()
}

// matchAddr is "ip[6] saddr|daddr [!=] a", with the family check.
func matchAddr(d dir, a netip.Addr, eq bool) []expr.Any {
	return cat(matchFamily(a.Is4()), cmpAddr(d, a, eq))
}

// cmpAddr is matchAddr without the family check.
func cmpAddr(d dir, a netip.Addr, eq bool) []expr.Any {
	op := cmpOp(eq)
	return []expr.Any{loadAddr(d, a.Is4()), &expr.Cmp{Op: op, Register: 1, Data: a.AsSlice()}}
}

// matchPrefix is "ip[6] saddr|daddr [!=] p", with the family check.
func matchPrefix(d dir, p netip.Prefix, eq bool) []expr.Any {
	return cat(matchFamily(p.Addr().Is4()), cmpPrefix(d, p, eq))
}

// cmpPrefix is matchPrefix without the family check.
func cmpPrefix(d dir, p netip.Prefix, eq bool) []expr.Any {
	p = p.Masked()
	if p.IsSingleIP() {
		return cmpAddr(d, p.Addr(), eq)
	}
	bits := p.Addr().BitLen()
	mask := net.CIDRMask(p.Bits(), bits)
	op := cmpOp(eq)
	return []expr.Any{
		loadAddr(d, p.Addr().Is4()),
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(bits / 8), Mask: mask, Xor: make([]byte, bits/8)},
		&expr.Cmp{Op: op, Register: 1, Data: p.Addr().AsSlice()},
	}
}

// lookupAddr is "ip[6] saddr|daddr @set", with the family check.
func lookupAddr(d dir, is4 bool, s *nftables.Set) []expr.Any {
	return cat(matchFamily(is4), []expr.Any{loadAddr(d, is4), &expr.Lookup{SourceRegister: 1, SetName: s.Name}})
}

// markConn is "ip[6] saddr|daddr @sandboxes4|6 ct mark set <mark>", with
// the family check: a sandbox's address, and its connection marked with
// connMark of its IPv4 address (IPv4: the address the lookup read; IPv6:
// what marks6 maps it to).
func (b *batch) markConn(d dir, is4 bool) []expr.Any {
	out := lookupAddr(d, is4, b.sandboxMap(is4))
	if !is4 {
		out = append(out, &expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: b.markMap6().Name})
	}
	return append(out, &expr.Ct{Register: 1, SourceRegister: true, Key: expr.CtKeyMARK})
}

// lookupPair is "ip[6] saddr . ip[6] daddr @set", with the family check,
// in the registers nft(8) uses (the destination right after the source).
func lookupPair(is4 bool, s *nftables.Set) []expr.Any {
	d := loadAddr(dst, is4)
	d.DestRegister = unix.NFT_REG32_01
	if !is4 {
		d.DestRegister = unix.NFT_REG_2
	}
	return cat(matchFamily(is4), []expr.Any{loadAddr(src, is4), d, &expr.Lookup{SourceRegister: 1, SetName: s.Name}})
}

// matchL4Port is "meta l4proto proto th dport port".
func matchL4Port(proto byte, port int) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(port))},
	}
}

// cmpOp is == for eq, else !=.
func cmpOp(eq bool) expr.CmpOp {
	if eq {
		return expr.CmpOpEq
	}
	return expr.CmpOpNeq
}

// matchCtState is "ct state in bits".
func matchCtState(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

// matchDaddrType is "fib daddr type [!=] typ" (an RTN_ route type).
func matchDaddrType(typ uint32, eq bool) []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: cmpOp(eq), Register: 1, Data: binaryutil.NativeEndian.PutUint32(typ)},
	}
}

// matchIifname is "meta iifname == name".
func matchIifname(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)},
	}
}

func accept() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}} }
func drop() []expr.Any   { return []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}} }

// dnatTo is "dnat to addr:port". Not a redirect: a redirect goes to the
// first address of the link a packet came in by, and a host end has none
// (the gateway's addresses are on the gateway link).
func dnatTo(addr netip.Addr, port int) []expr.Any {
	fam := uint32(unix.NFPROTO_IPV4)
	if addr.Is6() {
		fam = unix.NFPROTO_IPV6
	}
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: addr.AsSlice()},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(uint16(port))},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: fam, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}
}

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
