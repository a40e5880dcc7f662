package network_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/stead-dev/stead/internal/network"
	"github.com/stead-dev/stead/internal/network/nettest"
	"github.com/stead-dev/stead/internal/network/policy"
)

// netnsProc starts a process in a new network namespace and returns its
// pid and namespace path.
func netnsProc(t *testing.T) (int, string) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid, fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)
}

// eth0 is the eth0 link inside the namespace at ns.
func eth0(t *testing.T, ns string) netlink.Link {
	t.Helper()
	h, err := netns.GetFromPath(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	l, err := nh.LinkByName("eth0")
	if err != nil {
		t.Fatalf("eth0 in %s: %v", ns, err)
	}
	return l
}

// TestAPreparedPairIsTakenByTheAttachOfItsNamespace: Prepare makes the
// namespace's eth0 and a host end that is down, in the table's group and
// no port of anything (nothing leaves); a Sync leaves it alone; the Attach of another
// namespace does not take it; the Attach of a sandbox given that namespace
// takes the pair (the same eth0, the host end under the name it was given,
// with the sandbox's alias, up) and the sandbox reaches the internet; a
// restarted daemon (a new Manager's Sync) finds the host end by its alias
// and keeps it.
func TestAPreparedPairIsTakenByTheAttachOfItsNamespace(t *testing.T) {
	e := newEnv(t)
	pid, ns := netnsProc(t)
	if err := e.m.Prepare(e.ctx, "shell-a", pid); err != nil {
		t.Fatal(err)
	}
	group := network.LinkGroup(e.cfg.Table)
	before := eth0(t, ns)
	var host netlink.Link
	for _, l := range linkList(t) {
		if l.Attrs().Index == before.Attrs().ParentIndex {
			host = l
		}
	}
	if host == nil || !strings.HasPrefix(host.Attrs().Name, "sp") || host.Attrs().Group != group || host.Attrs().MasterIndex != 0 || host.Attrs().Flags&1 != 0 {
		t.Fatalf("prepared host end: %+v", host)
	}
	// A Sync (of no sandbox) sweeps links of the group that no sandbox
	// holds, but not a pair made ahead.
	if err := e.m.Sync(e.ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(host.Attrs().Name); err != nil {
		t.Fatalf("a Sync took the prepared pair: %v", err)
	}
	// Another namespace's attach leaves the prepared pair alone.
	_, other := netnsProc(t)
	if _, err := e.m.Attach(e.ctx, network.Attachment{ID: "sb-other", NetNS: other, Policy: policy.Default()}); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(host.Attrs().Name); err != nil {
		t.Fatalf("another namespace's attach took the prepared pair: %v", err)
	}
	att := network.Attachment{ID: "sb-prep", NetNS: ns, Policy: policy.Default()}
	a, err := e.m.Attach(e.ctx, att)
	if err != nil {
		t.Fatal(err)
	}
	if after := eth0(t, a.NetNS); after.Attrs().Index != before.Attrs().Index || after.Attrs().HardwareAddr.String() != before.Attrs().HardwareAddr.String() {
		t.Fatalf("eth0 was made anew: %+v, prepared %+v", after.Attrs(), before.Attrs())
	}
	sandboxEnd := func() {
		t.Helper()
		l, err := netlink.LinkByIndex(host.Attrs().Index)
		if err != nil || l.Attrs().Name != host.Attrs().Name || l.Attrs().Group != group || l.Attrs().MasterIndex != 0 || l.Attrs().Flags&1 == 0 ||
			!strings.HasPrefix(l.Attrs().Alias, "stead:"+e.cfg.Table+":") {
			t.Fatalf("the sandbox's host end: %+v %v", l, err)
		}
		if _, err := e.get(a.NetNS, nettest.URL(false, e.inet.Web.String())); err != nil {
			t.Fatalf("fetch from the prepared namespace: %v", err)
		}
	}
	sandboxEnd()
	// The namespace's sysctls, set ahead with its pair.
	err = nettest.Do(ns, func() error {
		for k, want := range map[string]string{"ipv4/ip_unprivileged_port_start": "0", "ipv4/ping_group_range": "0\t2147483647"} {
			if b, err := os.ReadFile("/proc/sys/net/" + k); err != nil || strings.TrimSpace(string(b)) != want {
				return fmt.Errorf("sysctl %s = %q %v, want %q", k, b, err, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	// Both host ends answer no ARP (TestAHostEndAnswersNoAddressResolution).
	for _, name := range []string{host.Attrs().Name, hostEndOf(t, other)} {
		if b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + name + "/arp_ignore"); err != nil || strings.TrimSpace(string(b)) != "8" {
			t.Errorf("arp_ignore of the host end %s: %q %v", name, b, err)
		}
	}
	// Neither host end has IPv6 of its own (no link-local address each
	// link up would add and the kernel would go over).
	for _, name := range []string{host.Attrs().Name, hostEndOf(t, other)} {
		l, _ := netlink.LinkByName(name)
		if addrs, err := netlink.AddrList(l, netlink.FAMILY_V6); err != nil || len(addrs) != 0 {
			t.Errorf("IPv6 addresses of the host end %s: %v %v", name, addrs, err)
		}
	}
	// A restart: a new Manager finds the host end by its alias.
	e.m = e.newManager()
	if err := e.m.Sync(e.ctx, []network.Attachment{att, {ID: "sb-other", NetNS: other, Policy: policy.Default()}}, nil); err != nil {
		t.Fatal(err)
	}
	sandboxEnd()
	if st, err := e.m.Status(e.ctx, "sb-prep"); err != nil || st.TxBytes == 0 {
		t.Fatalf("status after the restart: %+v %v", st, err)
	}
	// Another restart, and a detach before any Sync: the Manager does
	// not hold the sandbox and finds its host end by its alias (not by
	// the name it would have given it).
	e.m = e.newManager()
	if err := e.m.Detach(e.ctx, "sb-prep"); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByIndex(host.Attrs().Index); err == nil {
		t.Fatalf("the prepared host end %s outlived its sandbox's detach after a restart", host.Attrs().Name)
	}
	if err := e.m.Release(e.ctx, "sb-prep"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Release(e.ctx, "sb-other"); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(); len(left) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

// hostEndOf is the name of the host end of the namespace's eth0.
func hostEndOf(t *testing.T, ns string) string {
	t.Helper()
	l, err := netlink.LinkByIndex(eth0(t, ns).Attrs().ParentIndex)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Name
}

// TestLeftoversOfASandboxsAddressOpenNothing: an Attach of a sandbox the
// Manager does not hold adds its elements without listing the table
// first. Behind the Manager's back, the table got an entry for the
// sandbox's address under a tag of its own, and the address in set open4
// (admit everything): the Attach finds the clash, rebuilds the table from
// what the Manager holds (the other sandbox keeps its reach), and the
// sandbox's policy still refuses. The same leftover in open4 alone is
// cleared by the Attach itself.
func TestLeftoversOfASandboxsAddressOpenNothing(t *testing.T) {
	e := newEnv(t)
	first := e.attach("sb-first", policy.Default(), network.Limits{})
	pol := parse(t, []string{"192.0.2.0/24"}, nil, true)
	a := e.attach("sb-stale", pol, network.Limits{})
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tab := &nftables.Table{Name: e.cfg.Table, Family: nftables.TableFamilyINet}
	sandboxes := &nftables.Set{Table: tab, Name: "sandboxes4", IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeMark}
	open := &nftables.Set{Table: tab, Name: "open4", KeyType: nftables.TypeIPAddr}
	for _, withTag := range []bool{true, false} {
		if err := e.m.Detach(e.ctx, "sb-stale"); err != nil {
			t.Fatal(err)
		}
		if withTag {
			stale := []byte{0, 0x0f, 0x42, 0x40} // a tag no sandbox has
			if err := c.SetAddElements(sandboxes, []nftables.SetElement{{Key: a.Addr.AsSlice(), Val: stale}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.SetAddElements(open, []nftables.SetElement{{Key: a.Addr.AsSlice()}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		a = e.attach("sb-stale", pol, network.Limits{})
		e.mustNotReach(a.NetNS, e.sink(e.inet.Web))
		e.mustReach(first.NetNS, e.sink(e.inet.Web))
		els, err := c.GetSetElements(open)
		if err != nil {
			t.Fatal(err)
		}
		for _, el := range els {
			if string(el.Key) == string(a.Addr.AsSlice()) {
				t.Fatalf("the leftover is still in set open4 (tag %v)", withTag)
			}
		}
	}
}

// TestDropPreparedDeletesThePairsNotTaken: when the daemon stops, the pairs
// made ahead that no attach took are deleted at once (not when the kernel
// gets to their namespaces), a pair an attach took stays, and Prepare
// refuses from then on.
func TestDropPreparedDeletesThePairsNotTaken(t *testing.T) {
	e := newEnv(t)
	hostEnd := func(ns string) string {
		t.Helper()
		idx := eth0(t, ns).Attrs().ParentIndex
		l, err := netlink.LinkByIndex(idx)
		if err != nil {
			t.Fatal(err)
		}
		return l.Attrs().Name
	}
	pidA, nsA := netnsProc(t)
	pidB, nsB := netnsProc(t)
	for i, pid := range []int{pidA, pidB} {
		if err := e.m.Prepare(e.ctx, fmt.Sprint("shell-", i), pid); err != nil {
			t.Fatal(err)
		}
	}
	taken, waiting := hostEnd(nsA), hostEnd(nsB)
	if _, err := e.m.Attach(e.ctx, network.Attachment{ID: "sb-took", NetNS: nsA, Policy: policy.Default()}); err != nil {
		t.Fatal(err)
	}
	e.m.DropPrepared()
	if _, err := netlink.LinkByName(waiting); err == nil {
		t.Fatalf("the pair not taken (%s) is still there", waiting)
	}
	if _, err := netlink.LinkByName(taken); err != nil {
		t.Fatalf("the pair an attach took (%s) went: %v", taken, err)
	}
	pidC, _ := netnsProc(t)
	if err := e.m.Prepare(e.ctx, "shell-late", pidC); err == nil {
		t.Fatal("Prepare after DropPrepared succeeded")
	}
}
