package network

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Connection tracking. The host tracks every connection a sandbox makes
// through it (and every one the host makes to a sandbox); a detach must
// forget them, or a sandbox given the address later would inherit them.
// A dump of the table to filter it here walks every bucket of the
// kernel's hash table (262,144 here), 6-13 ms per family with four
// connections in it, and the detach held the Manager's lock meanwhile:
// every stop and delete cost 15-30 ms and stalled every attach.
//
// So the rules mark each connection on its first packet with its
// sandbox's IPv4 address (connMark; the sandbox's IPv6 connections too,
// through the map marks6), and a detach flushes the sandbox's mark: one
// walk inside the kernel, filtered there (0.4 ms). Marks are the
// address, not a Manager's tag, so that they mean the same to the next
// daemon. A connection an earlier version tracked carries no mark; Sync
// marks those of the sandboxes it keeps and forgets those of the others,
// in one dump at start-up.
//
// The conntrack mark is the host's: a host whose own rules set marks on
// the sandboxes' connections would have them overwritten (and stead's
// overwritten by them).

// Netlink constants of ctnetlink (linux/netfilter/nfnetlink_conntrack.h).
const (
	ctMsgNew      = 0 // IPCTNL_MSG_CT_NEW
	ctMsgGet      = 1 // IPCTNL_MSG_CT_GET
	ctMsgDelete   = 2 // IPCTNL_MSG_CT_DELETE
	ctaTupleOrig  = 1 // CTA_TUPLE_ORIG
	ctaMark       = 8 // CTA_MARK
	ctaMarkMask   = 21
	ctaTupleIP    = 1 // CTA_TUPLE_IP
	ctaIPv4Src    = 1
	ctaIPv4Dst    = 2
	ctaIPv6Src    = 3
	ctaIPv6Dst    = 4
	ctRequestType = unix.NFNL_SUBSYS_CTNETLINK << 8
)

// connMark is the conntrack mark of a sandbox's connections: its IPv4
// address as the kernel reads it from a register the rules loaded the
// address into (ct mark set ip saddr), in the host's byte order.
func connMark(a netip.Addr) uint32 {
	b := a.As4()
	return binary.NativeEndian.Uint32(b[:])
}

// ctRequest is a ctnetlink request of type msg for family (AF_UNSPEC:
// both).
func ctRequest(msg int, flags int, family uint8) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(ctRequestType|msg, flags)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: family, Version: nl.NFNETLINK_V0})
	return req
}

// forgetMark deletes every tracked connection of both families that
// carries mark, filtered by the kernel.
func forgetMark(mark uint32) error {
	req := ctRequest(ctMsgDelete, unix.NLM_F_ACK, unix.AF_UNSPEC)
	req.AddData(nl.NewRtAttr(ctaMark, nl.BEUint32Attr(mark)))
	req.AddData(nl.NewRtAttr(ctaMarkMask, nl.BEUint32Attr(^uint32(0))))
	if _, err := req.Execute(unix.NETLINK_NETFILTER, 0); err != nil {
		return fmt.Errorf("delete the connections marked %#x: %w", mark, err)
	}
	return nil
}

// tracked is one connection of the table: its original direction's
// addresses, its mark, and what a request needs to name it again.
type tracked struct {
	family   uint8
	orig     []byte // the CTA_TUPLE_ORIG attribute's payload, as the kernel sent it
	src, dst netip.Addr
	mark     uint32
}

// listTracked dumps the connection-tracking table (both families). An
// interrupted dump (the table changed under it) returns what it read,
// with netlink.ErrDumpInterrupted.
func listTracked() ([]tracked, error) {
	msgs, err := ctRequest(ctMsgGet, unix.NLM_F_DUMP, unix.AF_UNSPEC).Execute(unix.NETLINK_NETFILTER, 0)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("list tracked connections: %w", err)
	}
	out := make([]tracked, 0, len(msgs))
	for _, m := range msgs {
		if t, ok := parseTracked(m); ok {
			out = append(out, t)
		}
	}
	return out, err
}

// parseTracked reads one message of a ctnetlink dump (an nfgenmsg and its
// attributes); ok is false for one it cannot read.
func parseTracked(m []byte) (tracked, bool) {
	if len(m) < nl.SizeofNfgenmsg {
		return tracked{}, false
	}
	t := tracked{family: m[0]}
	attrs, err := nl.ParseRouteAttr(m[nl.SizeofNfgenmsg:])
	if err != nil {
		return tracked{}, false
	}
	for _, a := range attrs {
		switch a.Attr.Type &^ unix.NLA_F_NESTED {
		case ctaTupleOrig:
			t.orig = a.Value
			if t.src, t.dst, err = tupleAddrs(a.Value); err != nil {
				return tracked{}, false
			}
		case ctaMark:
			if len(a.Value) != 4 {
				return tracked{}, false
			}
			t.mark = binary.BigEndian.Uint32(a.Value)
		}
	}
	return t, t.orig != nil
}

// tupleAddrs reads the addresses of a CTA_TUPLE_ORIG payload.
func tupleAddrs(b []byte) (src, dst netip.Addr, err error) {
	attrs, err := nl.ParseRouteAttr(b)
	if err != nil {
		return src, dst, err
	}
	for _, a := range attrs {
		if a.Attr.Type&^unix.NLA_F_NESTED != ctaTupleIP {
			continue
		}
		ips, err := nl.ParseRouteAttr(a.Value)
		if err != nil {
			return src, dst, err
		}
		for _, ip := range ips {
			v, ok := netip.AddrFromSlice(ip.Value)
			if !ok {
				return src, dst, fmt.Errorf("tuple address of %d bytes", len(ip.Value))
			}
			switch ip.Attr.Type {
			case ctaIPv4Src, ctaIPv6Src:
				src = v
			case ctaIPv4Dst, ctaIPv6Dst:
				dst = v
			}
		}
	}
	return src, dst, nil
}

// request is a ctnetlink request of type msg naming t.
func (t tracked) request(msg int) *nl.NetlinkRequest {
	req := ctRequest(msg, unix.NLM_F_ACK, t.family)
	req.AddData(nl.NewRtAttr(unix.NLA_F_NESTED|ctaTupleOrig, t.orig))
	return req
}

// forget deletes t; one gone already is no error.
func (t tracked) forget() error {
	if _, err := t.request(ctMsgDelete).Execute(unix.NETLINK_NETFILTER, 0); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("delete tracked connection %s -> %s: %w", t.src, t.dst, err)
	}
	return nil
}

// setMark gives t the mark; one gone already is no error.
func (t tracked) setMark(mark uint32) error {
	req := t.request(ctMsgNew)
	req.AddData(nl.NewRtAttr(ctaMark, nl.BEUint32Attr(mark)))
	if _, err := req.Execute(unix.NETLINK_NETFILTER, 0); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("mark tracked connection %s -> %s: %w", t.src, t.dst, err)
	}
	return nil
}

// tidyConnections goes over the table once: a connection from or to an
// address stale says so of goes, and an unmarked one from or to an
// address in keep gets that address's sandbox's mark (keep: address ->
// mark).
func tidyConnections(keep map[netip.Addr]uint32, stale func(netip.Addr) bool) error {
	list, err := listTracked()
	var errs []error
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return err
	}
	for _, t := range list {
		src, dst := t.src.Unmap(), t.dst.Unmap()
		switch {
		case stale(src) || stale(dst):
			errs = append(errs, t.forget())
		case t.mark != 0:
		case keep[src] != 0:
			errs = append(errs, t.setMark(keep[src]))
		case keep[dst] != 0:
			errs = append(errs, t.setMark(keep[dst]))
		}
	}
	return errors.Join(errs...)
}
