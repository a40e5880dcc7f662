package egress

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST (linux/netfilter_ipv4.h) and
// IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h): both 80.
const soOriginalDst = 80

// OriginalDst returns the destination a connection redirected by
// netfilter (nft "redirect", iptables REDIRECT) was addressed to, from
// conntrack: getsockopt SO_ORIGINAL_DST for IPv4, IP6T_SO_ORIGINAL_DST
// for IPv6. A connection conntrack tracks but nothing redirected gives
// its own local address; one conntrack does not track (no netfilter hook
// in the namespace) gives an error wrapping ENOENT.
func OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	local, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: local address %v", c.LocalAddr())
	}
	v4 := local.AddrPort().Addr().Unmap().Is4()
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	var (
		out  netip.AddrPort
		serr error
	)
	err = rc.Control(func(fd uintptr) {
		if v4 {
			// struct sockaddr_in (16 bytes) in the 20 of an ipv6_mreq.
			m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, soOriginalDst)
			if err != nil {
				serr = err
				return
			}
			port := binary.BigEndian.Uint16(m.Multiaddr[2:4])
			out = netip.AddrPortFrom(netip.AddrFrom4([4]byte(m.Multiaddr[4:8])), port)
			return
		}
		// struct sockaddr_in6 (28 bytes) in the 32 of an ip6_mtuinfo.
		m, err := unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, soOriginalDst)
		if err != nil {
			serr = err
			return
		}
		var p [2]byte
		binary.NativeEndian.PutUint16(p[:], m.Addr.Port) // stored in network order
		out = netip.AddrPortFrom(netip.AddrFrom16(m.Addr.Addr).Unmap(), binary.BigEndian.Uint16(p[:]))
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: getsockopt: %w", err)
	}
	return out, nil
}
