package daemon

import (
	"bytes"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/stead-dev/stead/internal/testutil"
)

// TestAutoSubnet6StepsAsideForAnotherDaemon: "auto" gives a daemon the
// default IPv6 subnet, unless another link holds part of it (a second
// daemon that took it first): then no IPv6, and the log says how to give
// this one its own. The daemon's own bridge holding it is no conflict.
func TestAutoSubnet6StepsAsideForAnotherDaemon(t *testing.T) {
	testutil.RequireRoot(t)
	la := netlink.NewLinkAttrs()
	la.Name = "stauto6test"
	br := &netlink.Bridge{LinkAttrs: la}
	if err := netlink.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netlink.LinkDel(br) })
	// A /64 of the test's own stands for the default (a daemon on this
	// machine may hold the real one).
	def := netip.MustParsePrefix("fd5e:ad00:8801::/64")
	if err := netlink.AddrAdd(br, &netlink.Addr{IPNet: &net.IPNet{IP: def.Addr().Next().AsSlice(), Mask: net.CIDRMask(64, 128)}}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if got := autoSubnet6("stauto6test", def, log); got != def {
		t.Errorf("the daemon whose bridge holds the default: %v, want %s", got, def)
	}
	if got := autoSubnet6("stauto6other", def, log); got.IsValid() {
		t.Errorf("a second daemon: %v, want no IPv6", got)
	}
	if !strings.Contains(logs.String(), "--subnet6") || !strings.Contains(logs.String(), "stauto6test") {
		t.Errorf("the log does not say why and what to do: %s", logs.String())
	}
}
