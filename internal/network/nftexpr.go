package network

import (
	"encoding/binary"
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

func matchIif(name string, eq bool) []expr.Any {
	op := expr.CmpOpEq
	if !eq {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: ifname(name)},
	}
}

func matchOif(name string, eq bool) []expr.Any {
	op := expr.CmpOpEq
	if !eq {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: ifname(name)},
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

const (
	offSaddr4 = 12
	offDaddr4 = 16
)

func loadAddr4(off uint32) *expr.Payload {
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4}
}

// matchAddr4 is "ip saddr|daddr [!=] a".
func matchAddr4(off uint32, a netip.Addr, eq bool) []expr.Any {
	op := expr.CmpOpEq
	if !eq {
		op = expr.CmpOpNeq
	}
	b := a.As4()
	return []expr.Any{loadAddr4(off), &expr.Cmp{Op: op, Register: 1, Data: b[:]}}
}

// matchPrefix4 is "ip saddr|daddr p".
func matchPrefix4(off uint32, p netip.Prefix) []expr.Any {
	p = p.Masked()
	if p.Bits() == 32 {
		return matchAddr4(off, p.Addr(), true)
	}
	mask := make([]byte, 4)
	binary.BigEndian.PutUint32(mask, ^uint32(0)<<(32-p.Bits()))
	if p.Bits() == 0 {
		mask = []byte{0, 0, 0, 0}
	}
	b := p.Addr().As4()
	return []expr.Any{
		loadAddr4(off),
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b[:]},
	}
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

// matchCtState is "ct state in bits".
func matchCtState(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

// matchLocalDaddr is "fib daddr type [!=] local".
func matchLocalDaddr(eq bool) []expr.Any {
	op := expr.CmpOpEq
	if !eq {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: op, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
	}
}

// lookup4 is "ip saddr|daddr @set" (or a verdict map lookup when vmap).
func lookup4(off uint32, s *nftables.Set, vmap bool) []expr.Any {
	l := &expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID}
	if vmap {
		l.IsDestRegSet = true
		l.DestRegister = 0
	}
	return []expr.Any{loadAddr4(off), l}
}

// refuse counts into the sandbox's named counter and drops.
func refuse(counter string) []expr.Any {
	return []expr.Any{
		&expr.Objref{Type: int(nftables.ObjTypeCounter), Name: counter},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

func accept() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}} }
func drop() []expr.Any   { return []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}} }

// redirectTo is "redirect to :port".
func redirectTo(port int) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(port))},
		&expr.Redir{RegisterProtoMin: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	}
}

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
