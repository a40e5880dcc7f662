package network_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/network"
	"github.com/stead-dev/stead/internal/network/nettest"
	"github.com/stead-dev/stead/internal/network/policy"
	"github.com/stead-dev/stead/internal/store/sqlite"
	"github.com/stead-dev/stead/internal/testutil"
)

// testWriter sends the Manager's logs to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// refuseWithin is how long a dial that must fail is given.
const refuseWithin = 400 * time.Millisecond

type env struct {
	t    testing.TB
	ctx  context.Context
	cfg  network.Config
	m    *network.Manager
	inet *nettest.Internet
	st   *sqlite.Store
	// dropped are the Managers a "kill -9" replaced: kept reachable, as
	// a killed daemon's are until it is gone, so that the garbage
	// collector does not close what they hold open (an Attached.NetNS
	// names a pin through the descriptor of the Manager that made it).
	dropped []*network.Manager
}

// newEnv makes a Manager on a bridge, subnet, table and RunDir of the
// test's own, and a stand-in internet.
func newEnv(t *testing.T) *env { t.Helper(); return newEnvWith(t, nil) }

// newEnvWith is newEnv with the config changed by edit (before New).
func newEnvWith(t testing.TB, edit func(cfg *network.Config, slot int)) *env {
	t.Helper()
	testutil.RequireRoot(t)
	ctx := context.Background()
	n := nettest.Slot(t)
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, ctx: ctx, st: st, inet: nettest.NewInternet(t)}
	e.cfg = network.Config{
		Bridge:       fmt.Sprintf("stbr%03d", n),
		Subnet:       netip.MustParsePrefix(fmt.Sprintf("10.199.%d.0/24", n)),
		RunDir:       t.TempDir(),
		ResolverPort: 20000 + n,
		EgressPort:   21000 + n,
		Table:        fmt.Sprintf("stead-test-%03d", n),
		Leases:       st,
		Logger:       slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	}
	if edit != nil {
		edit(&e.cfg, n)
	}
	e.m = e.newManager()
	t.Cleanup(func() {
		if err := e.m.Remove(ctx); err != nil {
			t.Errorf("remove: %v", err)
		}
		if m := mountsUnder(e.cfg.RunDir); len(m) > 0 {
			t.Errorf("mounts left under the run dir after Remove: %v", m)
		}
	})
	return e
}

// mountsUnder lists the mount points at or below dir in the test's mount
// namespace.
func mountsUnder(dir string) []string {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

func (e *env) newManager() *network.Manager {
	e.t.Helper()
	m, err := network.New(e.ctx, e.cfg)
	if err != nil {
		e.t.Fatalf("new manager: %v", err)
	}
	if e.m != nil {
		e.dropped = append(e.dropped, e.m)
	}
	return m
}

func (e *env) attach(id string, p policy.Policy, lim network.Limits) network.Attached {
	e.t.Helper()
	at, err := e.m.Attach(e.ctx, network.Attachment{ID: id, Policy: p, Limits: lim})
	if err != nil {
		e.t.Fatalf("attach %s: %v", id, err)
	}
	return at
}

// dial connects from inside the netns at ns within timeout.
func dial(ns string, addr netip.AddrPort, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := nettest.Dial(ctx, ns, "tcp", addr.String())
	if err != nil {
		return err
	}
	c.Close()
	return nil
}

func (e *env) mustReach(ns string, addr netip.AddrPort) {
	e.t.Helper()
	if err := dial(ns, addr, 3*time.Second); err != nil {
		e.t.Errorf("%s cannot reach %s: %v", filepath.Base(ns), addr, err)
	}
}

func (e *env) mustNotReach(ns string, addr netip.AddrPort) {
	e.t.Helper()
	if err := dial(ns, addr, refuseWithin); err == nil {
		e.t.Errorf("%s reaches %s", filepath.Base(ns), addr)
	}
}

// get fetches a page of the stand-in internet from inside ns.
func (e *env) get(ns, url string) (string, error) {
	resp, err := nettest.HTTPClient(ns, e.inet, 2*time.Second).Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func (e *env) sink(a netip.Addr) netip.AddrPort { return netip.AddrPortFrom(a, nettest.SinkPort) }

// listenHost listens on the host on addr and accepts until the test ends.
func listenHost(t *testing.T, addr string) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return netip.MustParseAddrPort(l.Addr().String())
}

// listenIn listens inside a sandbox's netns.
func listenIn(t *testing.T, ns string, port int) {
	t.Helper()
	var l net.Listener
	if err := nettest.Do(ns, func() error {
		var err error
		l, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "hello from the sandbox\n")
			c.Close()
		}
	}()
}

func parse(t *testing.T, allow, deny []string, internet bool) policy.Policy {
	t.Helper()
	p, err := policy.Parse(client.NetworkPolicy{Internet: &internet, Allow: allow, Deny: deny})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSandboxFetchesPageFromInternetThroughNAT(t *testing.T) {
	e := newEnv(t)
	a := e.attach("sb-a", policy.Default(), network.Limits{})
	if a.Gateway != e.m.Gateway() || a.Gateway != e.cfg.Subnet.Masked().Addr().Next() {
		t.Fatalf("gateway %s", a.Gateway)
	}
	if !e.cfg.Subnet.Contains(a.Addr) || a.Addr == a.Gateway {
		t.Fatalf("address %s", a.Addr)
	}
	for _, tls := range []bool{false, true} {
		body, err := e.get(a.NetNS, nettest.URL(tls, e.inet.Web.String()))
		if err != nil {
			t.Fatalf("fetch (tls %v): %v", tls, err)
		}
		port := uint16(80)
		if tls {
			port = 443
		}
		if want := nettest.Echo(e.inet.Web.String(), netip.AddrPortFrom(e.inet.Web, port)); body != want {
			t.Fatalf("body %q, want %q", body, want)
		}
	}
	rc, err := os.ReadFile(a.ResolvConf)
	if err != nil || !strings.Contains(string(rc), "nameserver "+a.Gateway.String()+"\n") {
		t.Fatalf("resolv.conf %q: %v", rc, err)
	}
	// The sandbox's root must bind low ports and ping without privileges.
	if err := nettest.Do(a.NetNS, func() error {
		for key, want := range map[string]string{
			"net/ipv4/ip_unprivileged_port_start": "0",
			"net/ipv4/ping_group_range":           "0\t2147483647",
		} {
			b, err := os.ReadFile("/proc/sys/" + key)
			if err != nil {
				return err
			}
			if got := strings.TrimSpace(string(b)); got != want {
				return fmt.Errorf("%s = %q, want %q", key, got, want)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	id, _, ok := e.m.Lookup(a.Addr)
	if !ok || id != "sb-a" {
		t.Fatalf("lookup %s: %q %v", a.Addr, id, ok)
	}
	if addr, ok := e.m.Addr("sb-a"); !ok || addr != a.Addr {
		t.Fatalf("addr: %s %v", addr, ok)
	}
}

func TestPolicyDecidesWhatLeavesTheSandbox(t *testing.T) {
	e := newEnv(t)
	web, web2 := e.sink(e.inet.Web), e.sink(e.inet.Web2)
	cases := []struct {
		name       string
		p          policy.Policy
		reach, not []netip.AddrPort
	}{
		{"internet off refuses everything", parse(t, nil, nil, false), nil, []netip.AddrPort{web, web2}},
		{"deny CIDR refuses only it", parse(t, nil, []string{e.inet.Web.String() + "/32"}, true), []netip.AddrPort{web2}, []netip.AddrPort{web}},
		{"allow CIDR admits only it", parse(t, []string{e.inet.Web2.String()}, nil, true), []netip.AddrPort{web2}, []netip.AddrPort{web}},
		{"deny wins over allow", parse(t, []string{e.inet.Prefix.String()}, []string{e.inet.Web2.String()}, true), []netip.AddrPort{web}, []netip.AddrPort{web2}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := e.attach(fmt.Sprintf("pol-%d", i), c.p, network.Limits{})
			for _, r := range c.reach {
				e.mustReach(a.NetNS, r)
			}
			for _, r := range c.not {
				e.mustNotReach(a.NetNS, r)
			}
		})
	}
}

func TestAllowByNameAdmitsResolvedAddressesUntilTheyExpire(t *testing.T) {
	e := newEnv(t)
	p := parse(t, []string{"example.test"}, nil, true)
	a := e.attach("named", p, network.Limits{})
	web := e.sink(e.inet.Web)
	e.mustNotReach(a.NetNS, web)
	if e.m.Resolved("named", e.inet.Web) {
		t.Fatal("resolved before AddResolved")
	}
	e.m.AddResolved("named", []netip.Addr{e.inet.Web}, 1500*time.Millisecond)
	if !e.m.Resolved("named", e.inet.Web) {
		t.Fatal("not resolved after AddResolved")
	}
	e.mustReach(a.NetNS, web)
	e.mustNotReach(a.NetNS, e.sink(e.inet.Web2))
	// Renewing extends the admission.
	e.m.AddResolved("named", []netip.Addr{e.inet.Web}, 1500*time.Millisecond)
	time.Sleep(1700 * time.Millisecond)
	if e.m.Resolved("named", e.inet.Web) {
		t.Fatal("still resolved after expiry")
	}
	e.mustNotReach(a.NetNS, web)
}

func TestDomainPolicyRedirectsWebPortsToTheEgressProxy(t *testing.T) {
	e := newEnv(t)
	proxy, err := net.Listen("tcp", netip.AddrPortFrom(e.m.Gateway(), uint16(e.cfg.EgressPort)).String())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	got := make(chan string, 4)
	go func() {
		for {
			c, err := proxy.Accept()
			if err != nil {
				return
			}
			got <- c.RemoteAddr().String()
			c.Close()
		}
	}()
	a := e.attach("dom", parse(t, []string{"example.test"}, nil, true), network.Limits{})
	for _, port := range []uint16{80, 443} {
		if err := dial(a.NetNS, netip.AddrPortFrom(e.inet.Web, port), 3*time.Second); err != nil {
			t.Fatalf("dial :%d: %v", port, err)
		}
		select {
		case src := <-got:
			if ap := netip.MustParseAddrPort(src); ap.Addr() != a.Addr {
				t.Fatalf("proxy saw %s, want the sandbox's %s", src, a.Addr)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("port %d not redirected to the proxy", port)
		}
	}
	// A sandbox without domains goes straight out.
	b := e.attach("nodom", policy.Default(), network.Limits{})
	body, err := e.get(b.NetNS, nettest.URL(false, e.inet.Web.String()))
	if err != nil || !strings.Contains(body, "addr="+e.inet.Web.String()+":80") {
		t.Fatalf("direct fetch: %q %v", body, err)
	}
}

func TestHostGatewayOtherSandboxesAndMetadataAreRefusedUnderEveryPolicy(t *testing.T) {
	e := newEnv(t)
	hostSvc := listenHost(t, "0.0.0.0:0")
	resolver := listenHost(t, netip.AddrPortFrom(e.m.Gateway(), uint16(e.cfg.ResolverPort)).String())
	_ = resolver
	other := e.attach("other", policy.Default(), network.Limits{})
	listenIn(t, other.NetNS, 7000)
	// The host reaches a sandbox (the port proxy's path), and replies return.
	// 5 s: one lost SYN on a loaded machine is retransmitted after 1 s.
	c, err := net.DialTimeout("tcp", netip.AddrPortFrom(other.Addr, 7000).String(), 5*time.Second)
	if err != nil {
		t.Fatalf("host to sandbox: %v", err)
	}
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "hello from the sandbox\n" {
		t.Fatalf("host to sandbox read %q: %v", line, err)
	}
	// From the gateway's address, not one of the host's other links'.
	if from := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap(); from != e.m.Gateway() {
		t.Errorf("the host's connection to a sandbox came from %s, not the gateway %s", from, e.m.Gateway())
	}
	c.Close()

	policies := map[string]policy.Policy{
		"default":        policy.Default(),
		"allow all":      parse(t, []string{"0.0.0.0/0"}, nil, true),
		"internet off":   parse(t, nil, nil, false),
		"allow by names": parse(t, []string{"*.example.test"}, nil, true),
	}
	i := 0
	for name, p := range policies {
		t.Run(name, func(t *testing.T) {
			i++
			a := e.attach(fmt.Sprintf("walled-%d", i), p, network.Limits{})
			e.m.AddResolved(fmt.Sprintf("walled-%d", i), []netip.Addr{other.Addr, e.inet.HostAddr, netip.MustParseAddr("169.254.169.254")}, time.Minute)
			for _, dst := range []netip.AddrPort{
				netip.AddrPortFrom(e.inet.HostAddr, hostSvc.Port()), // a host address
				netip.AddrPortFrom(e.m.Gateway(), hostSvc.Port()),   // the gateway, not 53
				netip.AddrPortFrom(other.Addr, 7000),                // another sandbox
				netip.MustParseAddrPort("169.254.169.254:80"),       // metadata
				netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), hostSvc.Port()),
			} {
				e.mustNotReach(a.NetNS, dst)
			}
			// The resolver (53 on the gateway, redirected to ResolverPort) is open.
			e.mustReach(a.NetNS, netip.AddrPortFrom(e.m.Gateway(), 53))
		})
	}
	for _, a := range []netip.Addr{e.inet.HostAddr, e.m.Gateway(), other.Addr, netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("127.0.0.1")} {
		if !e.m.Forbidden(a) {
			t.Errorf("Forbidden(%s) = false", a)
		}
	}
	if e.m.Forbidden(e.inet.Web) {
		t.Errorf("Forbidden(%s) = true", e.inet.Web)
	}
}

func TestSetPolicyChangesARunningSandboxsReach(t *testing.T) {
	e := newEnv(t)
	a := e.attach("live", policy.Default(), network.Limits{})
	web := e.sink(e.inet.Web)
	e.mustReach(a.NetNS, web)
	// An established connection survives the change.
	conn, err := nettest.Dial(e.ctx, a.NetNS, "tcp", web.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := e.m.SetPolicy(e.ctx, "live", parse(t, nil, nil, false)); err != nil {
		t.Fatal(err)
	}
	e.mustNotReach(a.NetNS, web)
	if _, err := conn.Write([]byte("still here")); err != nil {
		t.Fatalf("established connection cut: %v", err)
	}
	if _, p, _ := e.m.Lookup(a.Addr); p.Internet {
		t.Fatal("Lookup returns the old policy")
	}
	if err := e.m.SetPolicy(e.ctx, "live", policy.Default()); err != nil {
		t.Fatal(err)
	}
	e.mustReach(a.NetNS, web)
	if err := e.m.SetPolicy(e.ctx, "absent", policy.Default()); !errors.Is(err, network.ErrNotAttached) {
		t.Fatalf("SetPolicy of an absent sandbox: %v", err)
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return statIno(fi)
}

func TestAttachIsIdempotentAndRepairsWithoutANewNetns(t *testing.T) {
	e := newEnv(t)
	a := e.attach("same", policy.Default(), network.Limits{})
	ino := inode(t, a.NetNS)
	veth := func() int {
		for _, l := range linkList(t) {
			if l.Attrs().Alias == "stead:"+e.cfg.Table+":same" {
				return l.Attrs().Index
			}
		}
		return 0
	}
	idx := veth()
	// An open connection survives a repeated Attach (nothing is remade).
	conn, err := nettest.Dial(e.ctx, a.NetNS, "tcp", e.sink(e.inet.Web).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b := e.attach("same", policy.Default(), network.Limits{})
	if a != b || inode(t, b.NetNS) != ino || veth() != idx {
		t.Fatalf("second attach: %+v (inode %d), first %+v (inode %d)", b, inode(t, b.NetNS), a, ino)
	}
	if _, err := conn.Write([]byte("still here")); err != nil {
		t.Fatalf("connection broken by a repeated attach: %v", err)
	}
	// Break it: the host veth goes (the peer with it).
	links := linkList(e.t)
	for _, l := range links {
		if l.Attrs().Alias == "stead:"+e.cfg.Table+":same" {
			if err := netlink.LinkDel(l); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.mustNotReach(a.NetNS, e.sink(e.inet.Web))
	c := e.attach("same", policy.Default(), network.Limits{})
	if c != a || inode(t, c.NetNS) != ino {
		t.Fatalf("repair gave %+v, inode %d", c, inode(t, c.NetNS))
	}
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
}

func TestAddressIsStableAcrossDetachAndAttachAndFreedByRelease(t *testing.T) {
	e := newEnv(t)
	a := e.attach("stable", policy.Default(), network.Limits{})
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
	if n := len(marksOf(t, a.Addr)); n == 0 {
		t.Fatal("no connection tracked: the check below is blind")
	}
	if err := e.m.Detach(e.ctx, "stable"); err != nil {
		t.Fatal(err)
	}
	if n := len(marksOf(t, a.Addr)); n > 0 {
		t.Fatalf("%d connection tracking entries of %s kept after detach", n, a.Addr)
	}
	if err := e.m.Detach(e.ctx, "stable"); err != nil {
		t.Fatalf("second detach: %v", err)
	}
	if _, err := os.Stat(a.NetNS); !os.IsNotExist(err) {
		t.Fatalf("netns file after detach: %v", err)
	}
	if _, err := e.m.Status(e.ctx, "stable"); !errors.Is(err, network.ErrNotAttached) {
		t.Fatalf("status after detach: %v", err)
	}
	if _, _, err := e.m.Traffic(e.ctx, "stable"); !errors.Is(err, network.ErrNotAttached) {
		t.Fatalf("traffic after detach: %v", err)
	}
	b := e.attach("stable", policy.Default(), network.Limits{})
	if b.Addr != a.Addr {
		t.Fatalf("address %s after re-attach, was %s", b.Addr, a.Addr)
	}
	e.mustReach(b.NetNS, e.sink(e.inet.Web))
	if err := e.m.Release(e.ctx, "stable"); err != nil {
		t.Fatal(err)
	}
	leases, err := e.st.ListLeases(e.ctx)
	if err != nil || len(leases) != 0 {
		t.Fatalf("leases after release: %v %v", leases, err)
	}
}

// leftovers lists what of the instance remains on the host.
func (e *env) leftovers() []string {
	var out []string
	links := linkList(e.t)
	group := network.LinkGroup(e.cfg.Table)
	gw, _ := netlink.LinkByName(e.cfg.Bridge)
	for _, l := range links {
		a := l.Attrs()
		if strings.HasPrefix(a.Alias, "stead:"+e.cfg.Table+":") || a.Group == group || gw != nil && a.MasterIndex == gw.Attrs().Index {
			out = append(out, "link "+a.Name)
		}
	}
	// A route to an address of the subnets by another link than the
	// gateway's (a sandbox's, left by a link that is not deleted).
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		routes, _ := netlink.RouteList(nil, fam)
		for _, r := range routes {
			if r.Dst == nil || gw != nil && r.LinkIndex == gw.Attrs().Index {
				continue
			}
			if a, ok := netip.AddrFromSlice(r.Dst.IP); ok && (e.cfg.Subnet.Contains(a.Unmap()) || e.cfg.Subnet6.IsValid() && e.cfg.Subnet6.Contains(a)) {
				out = append(out, "route "+r.Dst.String())
			}
		}
	}
	// The gateway link holds no neighbour entry of a sandbox (an
	// earlier version's bridge held them).
	if gw != nil {
		for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
			neighs, _ := netlink.NeighList(gw.Attrs().Index, fam)
			for _, n := range neighs {
				if n.State&netlink.NUD_PERMANENT != 0 {
					out = append(out, "neighbour "+n.IP.String()+" on "+e.cfg.Bridge)
				}
			}
		}
	}
	// The pins' own namespace is held under RunDir while a Manager
	// lives (Remove takes it down: newEnv checks); the pins are in it.
	for _, m := range mountsUnder(e.cfg.RunDir) {
		if m != filepath.Join(e.cfg.RunDir, "pins") {
			out = append(out, "mount "+m)
		}
	}
	pins, err := network.Pins(e.m)
	if err != nil {
		out = append(out, err.Error())
	}
	for _, p := range pins {
		out = append(out, "netns "+p)
	}
	c, _ := nftables.New()
	chains, _ := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	for _, ch := range chains {
		fixed := map[string]bool{"antispoof": true, "forward": true, "input": true, "output": true, "prerouting": true, "postrouting": true, "policy": true, "limits": true}
		if ch.Table.Name == e.cfg.Table && !fixed[ch.Name] {
			out = append(out, "chain "+ch.Name)
		}
	}
	// A sandbox is elements of the table's sets: none may be left (but
	// the connection counts, which the kernel keeps and drops itself).
	// No bridge table is made any more.
	if sets, err := c.GetSets(&nftables.Table{Name: e.cfg.Table, Family: nftables.TableFamilyBridge}); err == nil {
		out = append(out, fmt.Sprintf("a bridge table with %d sets", len(sets)))
	}
	{
		tab := &nftables.Table{Name: e.cfg.Table, Family: nftables.TableFamilyINet}
		sets, _ := c.GetSets(tab)
		for _, s := range sets {
			if strings.HasPrefix(s.Name, "conns") {
				continue
			}
			if els, _ := c.GetSetElements(s); len(els) > 0 {
				out = append(out, fmt.Sprintf("%d elements of set %s", len(els), s.Name))
			}
		}
	}
	leases, _ := e.st.ListLeases(e.ctx)
	for _, l := range leases {
		out = append(out, "lease "+l.SandboxID)
	}
	return out
}

func TestSyncAfterACrashLeavesNothingBehind(t *testing.T) {
	e := newEnv(t)
	e.attach("crash-a", policy.Default(), network.Limits{BandwidthBits: 10e6, MaxConns: 10})
	e.attach("crash-b", parse(t, []string{"example.test"}, nil, true), network.Limits{})
	e.m.AddResolved("crash-b", []netip.Addr{e.inet.Web}, time.Minute)
	if left := e.leftovers(); len(left) == 0 {
		t.Fatal("nothing to clean up: the check is blind")
	}
	// kill -9: the old Manager vanishes without a word.
	e.m = e.newManager()
	if err := e.m.Sync(e.ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(); len(left) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

func TestRestartAdoptsARunningSandbox(t *testing.T) {
	e := newEnv(t)
	a := e.attach("adopt", policy.Default(), network.Limits{})
	gone := e.attach("gone", policy.Default(), network.Limits{})
	ino := inode(t, a.NetNS)
	e.m = e.newManager()
	// Until Sync, a running sandbox's traffic is dropped (fail closed).
	e.mustNotReach(a.NetNS, e.sink(e.inet.Web))
	if err := e.m.Sync(e.ctx, []network.Attachment{{ID: "adopt", Policy: policy.Default()}}, map[string]bool{"gone": true}); err != nil {
		t.Fatal(err)
	}
	if inode(t, a.NetNS) != ino {
		t.Fatal("adopted sandbox got a new netns")
	}
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
	if _, err := os.Stat(gone.NetNS); !os.IsNotExist(err) {
		t.Fatalf("netns of a stopped sandbox kept: %v", err)
	}
	b, err := e.m.Attach(e.ctx, network.Attachment{ID: "adopt", Policy: policy.Default()})
	if err != nil || differBeyondNetNS(b, a) || inode(t, b.NetNS) != ino {
		t.Fatalf("attach after sync: %+v %v", b, err)
	}
	leases, _ := e.st.ListLeases(e.ctx)
	if len(leases) != 2 {
		t.Fatalf("leases of existing sandboxes released: %v", leases)
	}
	// Another kill -9; this time Attach alone adopts the sandbox.
	e.m = e.newManager()
	c := e.attach("adopt", policy.Default(), network.Limits{})
	if differBeyondNetNS(c, a) || inode(t, c.NetNS) != ino {
		t.Fatalf("attach after restart: %+v", c)
	}
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
}

// differBeyondNetNS reports whether two attachments of a sandbox by different
// Managers differ in more than the path to the namespace (which goes
// through a descriptor of the Manager's: the callers compare inodes).
func differBeyondNetNS(a, b network.Attached) bool {
	a.NetNS, b.NetNS = "", ""
	return a != b
}

// rate reads (or writes) conn for d.
func rate(t *testing.T, conn net.Conn, read bool, d time.Duration) {
	t.Helper()
	buf := make([]byte, 64<<10)
	var n int64
	start := time.Now()
	_ = conn.SetDeadline(start.Add(d))
	for {
		var k int
		var err error
		if read {
			k, err = conn.Read(buf)
		} else {
			k, err = conn.Write(buf)
		}
		n += int64(k)
		if err != nil {
			break
		}
	}
	t.Logf("moved %d bytes through the socket", n)
}

func TestBandwidthLimitCapsTransfersBothWays(t *testing.T) {
	e := newEnv(t)
	const bits = 16e6 // 2 MB/s
	a := e.attach("slow", policy.Default(), network.Limits{BandwidthBits: bits})
	for _, c := range []struct {
		name string
		port uint16
		read bool
	}{{"download", nettest.SourcePort, true}, {"upload", nettest.SinkPort, false}} {
		conn, err := nettest.Dial(e.ctx, a.NetNS, "tcp", netip.AddrPortFrom(e.inet.Web, c.port).String())
		if err != nil {
			t.Fatal(err)
		}
		st0, _ := e.m.Status(e.ctx, "slow")
		start := time.Now()
		rate(t, conn, c.read, 1500*time.Millisecond)
		st1, _ := e.m.Status(e.ctx, "slow")
		conn.Close()
		moved := st1.RxBytes - st0.RxBytes
		if !c.read {
			moved = st1.TxBytes - st0.TxBytes
		}
		r := float64(moved) / time.Since(start).Seconds()
		t.Logf("%s: %.2f MB/s under a %.0f MB/s limit", c.name, r/1e6, bits/8/1e6)
		if r > bits/8*1.3 || r < bits/8*0.4 {
			t.Errorf("%s at %.0f B/s, limit %.0f B/s", c.name, r, bits/8)
		}
	}
}

func TestConnLimitRefusesTheConnectionOverItAndStatusCountsIt(t *testing.T) {
	e := newEnv(t)
	const limit = 4
	a := e.attach("conns", policy.Default(), network.Limits{MaxConns: limit})
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	// Connections to the gateway's resolver count too.
	resolver := listenHost(t, netip.AddrPortFrom(e.m.Gateway(), uint16(e.cfg.ResolverPort)).String())
	_ = resolver
	for i := range limit {
		dst := e.sink(e.inet.Web).String()
		if i == 0 {
			dst = netip.AddrPortFrom(e.m.Gateway(), 53).String()
		}
		c, err := nettest.Dial(e.ctx, a.NetNS, "tcp", dst)
		if err != nil {
			t.Fatalf("connection %d of %d: %v", i+1, limit, err)
		}
		open = append(open, c)
	}
	st0, err := e.m.Status(e.ctx, "conns")
	if err != nil {
		t.Fatal(err)
	}
	// A policy change keeps the count.
	if err := e.m.SetPolicy(e.ctx, "conns", parse(t, []string{e.inet.Prefix.String()}, nil, true)); err != nil {
		t.Fatal(err)
	}
	e.mustNotReach(a.NetNS, e.sink(e.inet.Web))
	st1, err := e.m.Status(e.ctx, "conns")
	if err != nil {
		t.Fatal(err)
	}
	if st1.Refused <= st0.Refused {
		t.Fatalf("refused %d -> %d", st0.Refused, st1.Refused)
	}
	if st1.TxBytes == 0 || st1.RxBytes == 0 || st1.Addr != a.Addr {
		t.Fatalf("status %+v", st1)
	}
	// Traffic (the idle check's) reads the same link.
	if rx, tx, err := e.m.Traffic(e.ctx, "conns"); err != nil || rx < st1.RxBytes || tx < st1.TxBytes {
		t.Fatalf("Traffic = %d, %d, %v; Status said %d, %d", rx, tx, err, st1.RxBytes, st1.TxBytes)
	}
	e.m.NoteRefused("conns")
	if st2, _ := e.m.Status(e.ctx, "conns"); st2.Refused != st1.Refused+1 {
		t.Fatalf("NoteRefused: %d -> %d", st1.Refused, st2.Refused)
	}
	// Closing one frees a slot.
	open[len(open)-1].Close()
	open = open[:len(open)-1]
	time.Sleep(100 * time.Millisecond)
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
}

// TestAHostEndAnswersNoAddressResolution: a routed sandbox needs no ARP
// (both sides' neighbour entries are permanent), so its host end answers
// none: a sandbox that asks for a host address as if it were on its link
// learns nothing (with the kernel's default the host would answer for
// every address it has). The host end takes no router advertisement,
// and with no IPv6 for the sandboxes has IPv6 off.
func TestAHostEndAnswersNoAddressResolution(t *testing.T) {
	for _, dual := range []bool{false, true} {
		t.Run(map[bool]string{false: "IPv4 only", true: "dual stack"}[dual], func(t *testing.T) {
			e := newEnvWith(t, func(cfg *network.Config, n int) {
				if dual {
					cfg.Subnet6 = netip.MustParsePrefix(fmt.Sprintf("fd00:5ead:0:%x::/64", n))
				}
			})
			a := e.attach("asker", policy.Default(), network.Limits{})
			host := hostEndOf(t, a.NetNS)
			want := map[string]string{"ipv4/conf/" + host + "/arp_ignore": "8"}
			if dual {
				want["ipv6/conf/"+host+"/accept_ra"] = "0"
			} else {
				want["ipv6/conf/"+host+"/disable_ipv6"] = "1"
			}
			for k, v := range want {
				if b, err := os.ReadFile("/proc/sys/net/" + k); err != nil || strings.TrimSpace(string(b)) != v {
					t.Errorf("sysctl %s = %q %v, want %s", k, b, err, v)
				}
			}
			var state int
			var mac net.HardwareAddr
			err := nettest.Do(a.NetNS, func() error {
				eth, err := netlink.LinkByName("eth0")
				if err != nil {
					return err
				}
				dst := &net.IPNet{IP: e.inet.HostAddr.AsSlice(), Mask: net.CIDRMask(32, 32)}
				if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK}); err != nil {
					return err
				}
				c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: e.inet.HostAddr.AsSlice(), Port: 9})
				if err != nil {
					return err
				}
				defer c.Close()
				for range 3 {
					c.Write([]byte("who has it?"))
					time.Sleep(400 * time.Millisecond)
				}
				neighs, err := netlink.NeighList(eth.Attrs().Index, unix.AF_INET)
				if err != nil {
					return err
				}
				for _, n := range neighs {
					if n.IP.Equal(e.inet.HostAddr.AsSlice()) {
						state, mac = n.State, n.HardwareAddr
						return nil
					}
				}
				return errors.New("no neighbour entry for the address asked for: the check is blind")
			})
			if err != nil {
				t.Fatal(err)
			}
			if state&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE) != 0 || len(mac) > 0 {
				t.Fatalf("the host answered a sandbox's ARP request for %s: state %#x, MAC %s", e.inet.HostAddr, state, mac)
			}
			// The sandbox's own route is back to the gateway: it still reaches.
			e.mustReach(a.NetNS, e.sink(e.inet.Web))
		})
	}
}

// TestTurningIPv6OnReachesTheRunningSandboxes: a daemon that ran without
// IPv6 (its host ends have IPv6 off) and restarts with it gives the
// running sandboxes IPv6 at its Sync.
func TestTurningIPv6OnReachesTheRunningSandboxes(t *testing.T) {
	e := newEnv(t)
	a := e.attach("v4 first", policy.Default(), network.Limits{})
	host := hostEndOf(t, a.NetNS)
	if b, _ := os.ReadFile("/proc/sys/net/ipv6/conf/" + host + "/disable_ipv6"); strings.TrimSpace(string(b)) != "1" {
		t.Fatalf("disable_ipv6 of the host end without IPv6: %q", b)
	}
	e.cfg.Subnet6 = netip.MustParsePrefix(fmt.Sprintf("fd00:5ead:0:%x::/64", nettest.Slot(t)))
	e.m = e.newManager()
	att := network.Attachment{ID: "v4 first", Policy: policy.Default()}
	if err := e.m.Sync(e.ctx, []network.Attachment{att}, nil); err != nil {
		t.Fatal(err)
	}
	if body, err := e.get(a.NetNS, nettest.URL(false, e.inet.Web6.String())); err != nil || !strings.Contains(body, "addr=[") {
		t.Fatalf("fetch over IPv6 after IPv6 was turned on: %q %v", body, err)
	}
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
}

// TestTheHostsBroadcastAndAnycastAddressesAreRefused: what the host takes
// in as addressed to itself without being one of its addresses (a
// directed broadcast of one of its networks; the subnet-router anycast
// address of a network it forwards for) is refused like its addresses,
// under a policy that allows everything.
func TestTheHostsBroadcastAndAnycastAddressesAreRefused(t *testing.T) {
	e := newEnvWith(t, func(cfg *network.Config, n int) {
		cfg.Subnet6 = netip.MustParsePrefix(fmt.Sprintf("fd00:5ead:0:%x::/64", n))
	})
	a := e.attach("caller", parse(t, []string{"0.0.0.0/0", "::/0"}, nil, true), network.Limits{})
	bcast := netip.AddrFrom4([4]byte(e.inet.Prefix.Addr().As4()))
	b4 := bcast.As4()
	b4[3] = 255
	bcast = netip.AddrFrom4(b4)
	anycast := e.inet.Prefix6.Masked().Addr()
	for _, to := range []netip.Addr{bcast, anycast} {
		proto := "udp4"
		if to.Is6() {
			proto = "udp6"
		}
		pc, err := net.ListenPacket(proto, ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		port := pc.LocalAddr().(*net.UDPAddr).Port
		st0, _ := e.m.Status(e.ctx, "caller")
		err = nettest.Do(a.NetNS, func() error {
			c, err := net.DialUDP(proto, nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(to, uint16(port))))
			if err != nil {
				return err
			}
			defer c.Close()
			for range 3 {
				if _, err := c.Write([]byte("hello, host")); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		pc.SetReadDeadline(time.Now().Add(refuseWithin))
		buf := make([]byte, 64)
		if n, from, err := pc.ReadFrom(buf); err == nil {
			t.Fatalf("a host service bound to every address got %q from %s, sent to %s", buf[:n], from, to)
		}
		if st1, _ := e.m.Status(e.ctx, "caller"); st1.Refused <= st0.Refused {
			t.Errorf("datagrams to %s not counted as refused: %d -> %d", to, st0.Refused, st1.Refused)
		}
		// What connects on a sandbox's behalf (the egress proxy) refuses it too.
		if !e.m.Forbidden(to) {
			t.Errorf("Forbidden(%s) = false", to)
		}
	}
	if e.m.Forbidden(e.inet.Web) || e.m.Forbidden(e.inet.Web6) {
		t.Errorf("an address of a network the host is on is forbidden")
	}
}

func TestSandboxCannotSendFromAnAddressNotItsOwn(t *testing.T) {
	e := newEnv(t)
	a := e.attach("spoofer", policy.Default(), network.Limits{})
	// The test (root over the netns, unlike the sandbox) adds a second
	// address, as a sandbox with CAP_NET_ADMIN over its netns could.
	spoofed := a.Addr.Next().Next()
	err := nettest.Do(a.NetNS, func() error {
		eth, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		return netlink.AddrAdd(eth, &netlink.Addr{IPNet: &net.IPNet{IP: spoofed.AsSlice(), Mask: net.CIDRMask(32, 32)}})
	})
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox learns the gateway's MAC first, from its own address: a
	// fresh namespace's first packet waits for ARP, which would hold the
	// spoofed SYN past the dial's timeout, uncounted.
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
	st0, _ := e.m.Status(e.ctx, "spoofer")
	err = nettest.Do(a.NetNS, func() error {
		d := net.Dialer{Timeout: refuseWithin, LocalAddr: &net.TCPAddr{IP: spoofed.AsSlice()}}
		c, err := d.Dial("tcp", e.sink(e.inet.Web).String())
		if err == nil {
			c.Close()
			return errors.New("a spoofed source reached the internet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st1, _ := e.m.Status(e.ctx, "spoofer")
	if st1.Refused <= st0.Refused {
		t.Fatalf("spoofed packets not counted: %d -> %d", st0.Refused, st1.Refused)
	}
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
	if id, _, ok := e.m.Lookup(spoofed); ok {
		t.Fatalf("Lookup(%s) = %s", spoofed, id)
	}
}

func TestIPv6SandboxGoesOutThroughNAT66UnderTheSameRules(t *testing.T) {
	e := newEnvWith(t, func(cfg *network.Config, n int) {
		cfg.Subnet6 = netip.MustParsePrefix(fmt.Sprintf("fd00:5ead:0:%x::/64", n))
	})
	a := e.attach("six", policy.Default(), network.Limits{})
	if !e.cfg.Subnet6.Contains(a.Addr6) {
		t.Fatalf("Addr6 %s not in %s", a.Addr6, e.cfg.Subnet6)
	}
	body, err := e.get(a.NetNS, nettest.URL(false, e.inet.Web6.String()))
	if err != nil || !strings.Contains(body, "addr=["+e.inet.Web6.String()+"]:80") {
		t.Fatalf("fetch over IPv6: %q %v", body, err)
	}
	if id, _, ok := e.m.Lookup(a.Addr6); !ok || id != "six" {
		t.Fatalf("Lookup(%s) = %q %v", a.Addr6, id, ok)
	}
	other := e.attach("six-other", policy.Default(), network.Limits{})
	listenIn(t, other.NetNS, 7000)
	hostSvc := listenHost(t, "[::]:0")
	for _, dst := range []netip.AddrPort{
		netip.AddrPortFrom(other.Addr6, 7000),
		netip.AddrPortFrom(e.inet.HostAddr6, hostSvc.Port()),
		netip.AddrPortFrom(a.Addr6.Prev(), hostSvc.Port()), // the gateway
		netip.MustParseAddrPort("[fd00:ec2::254]:80"),
	} {
		e.mustNotReach(a.NetNS, dst)
	}
	web6, web26 := e.sink(e.inet.Web6), e.sink(e.inet.Web26)
	if err := e.m.SetPolicy(e.ctx, "six", parse(t, []string{e.inet.Web26.String()}, nil, true)); err != nil {
		t.Fatal(err)
	}
	e.mustNotReach(a.NetNS, web6)
	e.mustReach(a.NetNS, web26)
	if err := e.m.SetPolicy(e.ctx, "six", parse(t, []string{"example.test"}, nil, true)); err != nil {
		t.Fatal(err)
	}
	e.mustNotReach(a.NetNS, web6)
	e.m.AddResolved("six", []netip.Addr{e.inet.Web6}, time.Minute)
	e.mustReach(a.NetNS, web6)
	if !e.m.Forbidden(a.Addr6) || !e.m.Forbidden(e.inet.HostAddr6) || e.m.Forbidden(e.inet.Web6) {
		t.Fatal("Forbidden is wrong for IPv6")
	}
	// A spoofed IPv6 source is dropped as an IPv4 one is.
	spoofed := a.Addr6.Next().Next().Next()
	if err := nettest.Do(a.NetNS, func() error {
		eth, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(eth, &netlink.Addr{IPNet: &net.IPNet{IP: spoofed.AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD}); err != nil {
			return err
		}
		d := net.Dialer{Timeout: refuseWithin, LocalAddr: &net.TCPAddr{IP: spoofed.AsSlice()}}
		if c, err := d.Dial("tcp", web6.String()); err == nil {
			c.Close()
			return errors.New("a spoofed IPv6 source reached the internet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Release(e.ctx, "six"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Sync(e.ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(); len(left) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

// TestASandboxsOwnMulticastReachesNoOther: multicast a sandbox sends (MLD
// reports as it joins a group, duplicate address detection from ::,
// datagrams to all nodes and to mDNS's IPv4 group) reaches no other
// sandbox listening for it (each is routed on a link of its own: nothing
// floods) and is not counted as refused; a fresh sandbox reaches the
// gateway over IPv6 (its neighbour entry for it is permanent: no
// neighbour discovery needed, and none gets through).
func TestASandboxsOwnMulticastReachesNoOther(t *testing.T) {
	e := newEnvWith(t, func(cfg *network.Config, n int) {
		cfg.Subnet6 = netip.MustParsePrefix(fmt.Sprintf("fd00:5ead:0:%x::/64", n))
	})
	a := e.attach("mcast", policy.Default(), network.Limits{})
	b := e.attach("mcast-listener", policy.Default(), network.Limits{})
	// The other sandbox listens on both groups' ports, joined to them.
	got := make(chan string, 8)
	for _, ln := range []struct{ group, addr string }{{"ff02::1", "[::]:9"}, {"224.0.0.251", "0.0.0.0:5353"}} {
		var c *net.UDPConn
		if err := nettest.Do(b.NetNS, func() error {
			eth, err := net.InterfaceByName("eth0")
			if err != nil {
				return err
			}
			c, err = net.ListenMulticastUDP("udp", eth, &net.UDPAddr{IP: net.ParseIP(ln.group), Port: int(netip.MustParseAddrPort(ln.addr).Port())})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		go func() {
			buf := make([]byte, 64)
			for {
				n, from, err := c.ReadFromUDP(buf)
				if err != nil {
					return
				}
				got <- fmt.Sprintf("%q from %s", buf[:n], from)
			}
		}()
	}
	// A fresh sandbox fetches over IPv6 through the gateway.
	body, err := e.get(a.NetNS, nettest.URL(false, e.inet.Web6.String()))
	if err != nil || !strings.Contains(body, "addr=["+e.inet.Web6.String()+"]:80") {
		t.Fatalf("fetch over IPv6: %q %v", body, err)
	}
	time.Sleep(2 * time.Second) // the attach's own address work is over
	st0, err := e.m.Status(e.ctx, "mcast")
	if err != nil {
		t.Fatal(err)
	}
	if err := nettest.Do(a.NetNS, func() error {
		eth, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		// Joining a group sends MLD reports.
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		mreq := &unix.IPv6Mreq{Interface: uint32(eth.Index)}
		copy(mreq.Multiaddr[:], netip.MustParseAddr("ff02::1:2345").AsSlice())
		if err := unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, mreq); err != nil {
			return err
		}
		// Datagrams to all nodes on the link, and to mDNS's group.
		for _, to := range []*net.UDPAddr{{IP: net.ParseIP("ff02::1"), Port: 9, Zone: "eth0"}, {IP: net.ParseIP("224.0.0.251"), Port: 5353}} {
			c, err := net.DialUDP("udp", nil, to)
			if err != nil {
				return err
			}
			_, err = c.Write([]byte("hello, everyone"))
			c.Close()
			if err != nil {
				return err
			}
		}
		// A new address's duplicate address detection (from ::).
		return netlink.AddrAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: eth.Index}},
			&netlink.Addr{IPNet: &net.IPNet{IP: a.Addr6.Next().Next().AsSlice(), Mask: net.CIDRMask(128, 128)}})
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // MLD repeats its reports within a second or two
	select {
	case m := <-got:
		t.Fatalf("another sandbox received %s: a sandbox's multicast left its link", m)
	default:
	}
	if st1, err := e.m.Status(e.ctx, "mcast"); err != nil || st1.Refused != st0.Refused {
		t.Fatalf("a sandbox's own multicast was counted as refused: %d -> %+v %v", st0.Refused, st1, err)
	}
}

func TestInstancesWithOtherBridgesAndTablesDoNotTouchEachOther(t *testing.T) {
	e1, e2 := newEnv(t), newEnv(t)
	a1 := e1.attach("mine", policy.Default(), network.Limits{})
	a2 := e2.attach("theirs", policy.Default(), network.Limits{})
	// A crash-restart of instance 1 with nothing running.
	e1.m = e1.newManager()
	if err := e1.m.Sync(e1.ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if left := e1.leftovers(); len(left) > 0 {
		t.Fatalf("instance 1 left:\n%s", strings.Join(left, "\n"))
	}
	if _, err := os.Stat(a1.NetNS); !os.IsNotExist(err) {
		t.Fatalf("instance 1 netns: %v", err)
	}
	// Instance 2's sandbox, rules and lease are intact.
	e2.mustReach(a2.NetNS, e2.sink(e2.inet.Web))
	if st, err := e2.m.Status(e2.ctx, "theirs"); err != nil || st.Addr != a2.Addr {
		t.Fatalf("instance 2 status: %+v %v", st, err)
	}
	if leases, _ := e2.st.ListLeases(e2.ctx); len(leases) != 1 {
		t.Fatalf("instance 2 leases: %v", leases)
	}
}

// TestASubnetInUseIsRefused: a second instance whose subnet (IPv4 or
// IPv6) overlaps the first's, or a network of the host's, is refused with
// a clear error before it makes anything (each sandbox's route is its
// address alone: two instances leasing from one subnet would take each
// other's sandboxes' routes).
func TestASubnetInUseIsRefused(t *testing.T) {
	e := newEnvWith(t, func(cfg *network.Config, n int) {
		cfg.Subnet6 = netip.MustParsePrefix(fmt.Sprintf("fd00:5ead:0:%x::/64", n))
	})
	a := e.attach("first", policy.Default(), network.Limits{})
	other := func(edit func(cfg *network.Config)) network.Config {
		cfg := e.cfg
		cfg.Bridge, cfg.Table, cfg.RunDir = e.cfg.Bridge+"x", e.cfg.Table+"-x", filepath.Join(t.TempDir(), "run")
		cfg.Subnet = netip.MustParsePrefix("10.198.0.0/24")
		cfg.Subnet6 = netip.Prefix{}
		edit(&cfg)
		return cfg
	}
	for name, cfg := range map[string]network.Config{
		"the same IPv4 subnet":     other(func(c *network.Config) { c.Subnet = e.cfg.Subnet }),
		"an IPv4 subnet within it": other(func(c *network.Config) { c.Subnet = netip.PrefixFrom(e.cfg.Subnet.Addr(), 28) }),
		"the same IPv6 subnet":     other(func(c *network.Config) { c.Subnet6 = e.cfg.Subnet6 }),
		"a network of the host's":  other(func(c *network.Config) { c.Subnet = e.inet.Prefix }),
	} {
		_, err := network.New(e.ctx, cfg)
		if !errors.Is(err, errs.ErrConflict) || !strings.Contains(err.Error(), "overlaps") {
			t.Errorf("%s: New = %v, want a conflict naming the overlap", name, err)
		}
		if _, err := netlink.LinkByName(cfg.Bridge); err == nil {
			t.Errorf("%s: the refused instance made its gateway link", name)
		}
		if _, err := os.Stat(cfg.RunDir); err == nil {
			t.Errorf("%s: the refused instance made its run dir", name)
		}
	}
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
}

// linkList lists the host's links, retrying dumps that concurrent tests
// interrupt.
func linkList(t testing.TB) []netlink.Link {
	t.Helper()
	for range 10 {
		links, err := netlink.LinkList()
		if err == nil {
			return links
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			t.Fatal(err)
		}
	}
	t.Fatal("list links: interrupted 10 times")
	return nil
}

func TestSandboxCannotReachAnotherThroughTheGateway(t *testing.T) {
	e := newEnv(t)
	a := e.attach("hairpin-a", parse(t, []string{"0.0.0.0/0"}, nil, true), network.Limits{})
	b := e.attach("hairpin-b", policy.Default(), network.Limits{})
	listenIn(t, b.NetNS, 7000)
	// There is no L2 between sandboxes (each is routed on a link of its
	// own); send it to the gateway instead, as a sandbox with a route of
	// its own would.
	if err := nettest.Do(a.NetNS, func() error {
		eth, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		dst := &net.IPNet{IP: b.Addr.AsSlice(), Mask: net.CIDRMask(32, 32)}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Dst: dst, Gw: a.Gateway.AsSlice()})
	}); err != nil {
		t.Fatal(err)
	}
	st0, _ := e.m.Status(e.ctx, "hairpin-a")
	e.mustNotReach(a.NetNS, netip.AddrPortFrom(b.Addr, 7000))
	if st1, _ := e.m.Status(e.ctx, "hairpin-a"); st1.Refused <= st0.Refused {
		t.Fatalf("hairpin not refused by the firewall: %d -> %d", st0.Refused, st1.Refused)
	}
}

func TestReleaseAfterARestartRemovesWhatTheOldManagerMade(t *testing.T) {
	t.Run("IPv4", func(t *testing.T) { releaseAfterARestart(t, nil) })
	t.Run("IPv6", func(t *testing.T) {
		releaseAfterARestart(t, func(cfg *network.Config, n int) {
			cfg.Subnet6 = netip.MustParsePrefix(fmt.Sprintf("fd00:5ead:0:%x::/64", n))
		})
	})
}

func releaseAfterARestart(t *testing.T, edit func(cfg *network.Config, n int)) {
	e := newEnvWith(t, edit)
	a := e.attach("orphan", parse(t, []string{"example.test"}, nil, true), network.Limits{BandwidthBits: 1e6})
	e.m = e.newManager()
	if _, ok := e.m.Addr("orphan"); ok {
		t.Fatal("a new Manager knows the sandbox before Sync or Attach")
	}
	if err := e.m.Release(e.ctx, "orphan"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Release(e.ctx, "orphan"); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if left := e.leftovers(); len(left) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(left, "\n"))
	}
	if _, err := os.Stat(a.ResolvConf); err != nil {
		t.Fatalf("the shared resolv.conf went with a sandbox: %v", err)
	}
	if id, _, ok := e.m.Lookup(a.Addr); ok || e.m.Resolved("orphan", e.inet.Web) {
		t.Fatalf("Lookup after release: %q", id)
	}
	e.m.NoteRefused("orphan") // not attached: ignored
	e.m.AddResolved("orphan", []netip.Addr{e.inet.Web}, time.Minute)
	if e.m.Resolved("orphan", e.inet.Web) {
		t.Fatal("AddResolved admitted for a sandbox with no network")
	}
}

// marksOf lists the marks of the tracked connections from or to a.
func marksOf(t *testing.T, a netip.Addr) []uint32 {
	t.Helper()
	var out []uint32
	for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, fam)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			t.Fatal(err)
		}
		for _, f := range flows {
			if f.Forward.SrcIP.Equal(a.AsSlice()) || f.Forward.DstIP.Equal(a.AsSlice()) {
				out = append(out, f.Mark)
			}
		}
	}
	return out
}

// mustBeMarked fails unless a has tracked connections and all of them
// carry mark.
func mustBeMarked(t *testing.T, a netip.Addr, mark uint32) {
	t.Helper()
	marks := marksOf(t, a)
	if len(marks) == 0 {
		t.Fatalf("no connection of %s tracked: the checks are blind", a)
	}
	for _, got := range marks {
		if got != mark {
			t.Fatalf("connections of %s marked %#x, want %#x (all: %#x)", a, got, mark, marks)
		}
	}
}

// dialHost connects from the host to addr (the port proxy's way in).
func dialHost(t *testing.T, addr netip.AddrPort) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr.String(), 3*time.Second)
	if err != nil {
		t.Fatalf("host to %s: %v", addr, err)
	}
	c.Close()
}

// TestADetachForgetsItsSandboxsConnectionsOnly: the connections a sandbox
// made (IPv4 and IPv6) and the host's to it carry the mark of its IPv4
// address, and its detach forgets all of them, through the kernel's
// filter, and none of another sandbox's.
func TestADetachForgetsItsSandboxsConnectionsOnly(t *testing.T) {
	e := newEnvWith(t, func(cfg *network.Config, n int) {
		cfg.Subnet6 = netip.MustParsePrefix(fmt.Sprintf("fd00:5ead:0:%x::/64", n))
	})
	a := e.attach("mine", policy.Default(), network.Limits{})
	b := e.attach("theirs", policy.Default(), network.Limits{})
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
	e.mustReach(a.NetNS, e.sink(e.inet.Web6))
	e.mustReach(b.NetNS, e.sink(e.inet.Web))
	listenIn(t, a.NetNS, 7001)
	dialHost(t, netip.AddrPortFrom(a.Addr, 7001))
	dialHost(t, netip.AddrPortFrom(a.Addr6, 7001))
	mark := network.ConnMark(a.Addr)
	mustBeMarked(t, a.Addr, mark)
	mustBeMarked(t, a.Addr6, mark)
	mustBeMarked(t, b.Addr, network.ConnMark(b.Addr))
	if err := e.m.Detach(e.ctx, "mine"); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []netip.Addr{a.Addr, a.Addr6} {
		if marks := marksOf(t, addr); len(marks) > 0 {
			t.Fatalf("%d tracked connections of %s kept after its detach", len(marks), addr)
		}
	}
	mustBeMarked(t, b.Addr, network.ConnMark(b.Addr))
}

// TestSyncMarksTheConnectionsAnEarlierVersionLeftUnmarked: connections
// tracked before the rules marked them (an upgrade) get their sandbox's
// mark at the next daemon's Sync, so its detach forgets them too.
func TestSyncMarksTheConnectionsAnEarlierVersionLeftUnmarked(t *testing.T) {
	e := newEnv(t)
	a := e.attach("older", policy.Default(), network.Limits{})
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
	if err := network.Unmark(a.Addr); err != nil {
		t.Fatal(err)
	}
	mustBeMarked(t, a.Addr, 0)
	e.m = e.newManager()
	if err := e.m.Sync(e.ctx, []network.Attachment{{ID: "older", Policy: policy.Default()}}, nil); err != nil {
		t.Fatal(err)
	}
	mustBeMarked(t, a.Addr, network.ConnMark(a.Addr))
	if err := e.m.Detach(e.ctx, "older"); err != nil {
		t.Fatal(err)
	}
	if marks := marksOf(t, a.Addr); len(marks) > 0 {
		t.Fatalf("%d tracked connections of %s kept after its detach", len(marks), a.Addr)
	}
}

// TestSyncRoutesTheSandboxesAnEarlierVersionBridged: an earlier version
// made each sandbox's host end a port of a bridge (the gateway link's
// name) and kept its anti-spoof rules in a bridge table. The next daemon's
// Sync takes a running sandbox's link out of the bridge into the table's
// group and routes it, deletes the bridge table, and the sandbox reaches
// the internet again, still unable to send from another's address.
func TestSyncRoutesTheSandboxesAnEarlierVersionBridged(t *testing.T) {
	e := newEnv(t)
	a := e.attach("bridged", policy.Default(), network.Limits{})
	other := e.attach("gone", policy.Default(), network.Limits{})
	gw, err := netlink.LinkByName(e.cfg.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox that goes has connections tracked (its mark is an
	// earlier version's business: the check is that they go).
	e.mustReach(other.NetNS, e.sink(e.inet.Web))
	if len(marksOf(t, other.Addr)) == 0 {
		t.Fatal("no connection of the sandbox that goes is tracked: the check is blind")
	}
	hostSvc := listenHost(t, "0.0.0.0:0")
	// As the earlier version left them: ports of the bridge in group 0,
	// no routes of their own, the host's permanent neighbour entries on
	// the bridge, a bridge table.
	for _, at := range []network.Attached{a, other} {
		host, err := netlink.LinkByName(hostEndOf(t, at.NetNS))
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetGroup(host, 0); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetMaster(host, gw); err != nil {
			t.Fatal(err)
		}
		dst := &net.IPNet{IP: at.Addr.AsSlice(), Mask: net.CIDRMask(32, 32)}
		if err := netlink.RouteDel(&netlink.Route{LinkIndex: host.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK}); err != nil {
			t.Fatal(err)
		}
		eth := eth0(t, at.NetNS)
		if err := netlink.NeighDel(&netlink.Neigh{LinkIndex: host.Attrs().Index, Family: unix.AF_INET, IP: at.Addr.AsSlice()}); err != nil {
			t.Fatal(err)
		}
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: gw.Attrs().Index, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
			IP: at.Addr.AsSlice(), HardwareAddr: eth.Attrs().HardwareAddr}); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("nft", "add", "table", "bridge", e.cfg.Table).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	e.m = e.newManager()
	// The new daemon's start takes them off the bridge at once (with the
	// bridge table gone, nothing else would keep them apart at layer 2
	// where br_netfilter is off) ...
	for _, l := range linkList(t) {
		if l.Attrs().MasterIndex == gw.Attrs().Index {
			t.Fatalf("link %s is still a port of the gateway link after the start", l.Attrs().Name)
		}
	}
	// ... and until its Sync no rule knows the bridged sandboxes'
	// sources: they get nowhere (not out, not to the host, not to each
	// other) rather than everywhere.
	listenIn(t, other.NetNS, 7002)
	for _, dst := range []netip.AddrPort{e.sink(e.inet.Web), netip.AddrPortFrom(e.inet.HostAddr, hostSvc.Port()),
		netip.AddrPortFrom(e.m.Gateway(), hostSvc.Port()), netip.AddrPortFrom(other.Addr, 7002)} {
		e.mustNotReach(a.NetNS, dst)
	}
	if err := e.m.Sync(e.ctx, []network.Attachment{{ID: "bridged", Policy: policy.Default()}}, map[string]bool{"bridged": true}); err != nil {
		t.Fatal(err)
	}
	host, err := netlink.LinkByName(hostEndOf(t, a.NetNS))
	if err != nil {
		t.Fatal(err)
	}
	if host.Attrs().MasterIndex != 0 || host.Attrs().Group != network.LinkGroup(e.cfg.Table) {
		t.Fatalf("the running sandbox's host end after Sync: master %d, group %d", host.Attrs().MasterIndex, host.Attrs().Group)
	}
	if out, err := exec.Command("nft", "list", "table", "bridge", e.cfg.Table).CombinedOutput(); err == nil {
		t.Fatalf("the bridge table is still there:\n%s", out)
	}
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
	for _, l := range linkList(t) {
		if l.Attrs().MasterIndex == gw.Attrs().Index {
			t.Fatalf("link %s is still a port of the gateway link", l.Attrs().Name)
		}
	}
	// The sandbox that went: its connections and its neighbour entry
	// on the bridge went with it (a sandbox given its address later
	// would inherit them).
	if marks := marksOf(t, other.Addr); len(marks) > 0 {
		t.Fatalf("%d tracked connections of a sandbox an earlier version bridged are kept after Sync", len(marks))
	}
	if err := e.m.Detach(e.ctx, "bridged"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Sync(e.ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(); len(left) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

// TestAttachHoldsTheNamespaceTheCallerMade: the runtime makes a sandbox's
// network namespace (owned by the sandbox's user namespace) and hands its
// /proc path to Attach: the Manager links that very namespace, holds it,
// replaces it when a later run brings another, and Detach lets it go.
func TestAttachHoldsTheNamespaceTheCallerMade(t *testing.T) {
	e := newEnv(t)
	start := func() (*exec.Cmd, string) {
		cmd := exec.Command("sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)
	}
	inode := func(p string) uint64 {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	cmd1, ns1 := start()
	a, err := e.m.Attach(e.ctx, network.Attachment{ID: "sb-own", NetNS: ns1, Policy: policy.Default()})
	if err != nil {
		t.Fatal(err)
	}
	if inode(a.NetNS) != inode(ns1) {
		t.Fatalf("held namespace %d is not the caller's %d", inode(a.NetNS), inode(ns1))
	}
	// Traffic from the caller's namespace goes out.
	if _, err := e.get(ns1, nettest.URL(false, e.inet.Web.String())); err != nil {
		t.Fatalf("fetch from the caller's namespace: %v", err)
	}
	// Adoption without a path keeps what is held.
	if b, err := e.m.Attach(e.ctx, network.Attachment{ID: "sb-own", Policy: policy.Default()}); err != nil || inode(b.NetNS) != inode(ns1) || b.Addr != a.Addr {
		t.Fatalf("re-attach: %+v %v", b, err)
	}
	// A new run brings a new namespace: it replaces the held one, same address.
	cmd1.Process.Kill()
	cmd1.Wait()
	_, ns2 := start()
	c, err := e.m.Attach(e.ctx, network.Attachment{ID: "sb-own", NetNS: ns2, Policy: policy.Default()})
	if err != nil || inode(c.NetNS) != inode(ns2) || c.Addr != a.Addr {
		t.Fatalf("attach of a new run: %+v %v", c, err)
	}
	if _, err := e.get(ns2, nettest.URL(false, e.inet.Web.String())); err != nil {
		t.Fatalf("fetch from the new run's namespace: %v", err)
	}
	if err := e.m.Detach(e.ctx, "sb-own"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.NetNS); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("held namespace file after Detach: %v", err)
	}
}

// TestLeaseAheadIsAttachsLeaseAndNeverOutlivesARelease: a lease made
// ahead is the address Attach then uses, and a Release right after a
// lease ahead (a create that failed before its network) leaves no lease,
// however the two interleave.
func TestLeaseAheadIsAttachsLeaseAndNeverOutlivesARelease(t *testing.T) {
	// Leases that take a while, as a store under load does: a Release
	// that did not wait for a lease ahead would run before it commits.
	e := newEnvWith(t, func(cfg *network.Config, slot int) { cfg.Leases = slowLeases{cfg.Leases} })
	wait := e.m.LeaseAhead(e.ctx, "ahead")
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	leases, err := e.st.ListLeases(e.ctx)
	if err != nil || len(leases) != 1 {
		t.Fatalf("leases after a lease ahead: %v %v", leases, err)
	}
	a := e.attach("ahead", policy.Default(), network.Limits{})
	if a.Addr != leases[0].Addr {
		t.Fatalf("attached with %s, leased %s ahead", a.Addr, leases[0].Addr)
	}
	if err := e.m.Release(e.ctx, "ahead"); err != nil {
		t.Fatal(err)
	}
	var waits []func() error
	for i := range 5 {
		id := fmt.Sprintf("gone-%d", i)
		waits = append(waits, e.m.LeaseAhead(e.ctx, id)) // not waited for before the release
		if err := e.m.Release(e.ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range waits {
		w()
	}
	if leases, err := e.st.ListLeases(e.ctx); err != nil || len(leases) != 0 {
		t.Fatalf("leases left after releases: %v %v", leases, err)
	}
}

// slowLeases delays every lease by 30 ms.
type slowLeases struct{ network.Leases }

func (l slowLeases) LeaseAddresses(ctx context.Context, id string, subnets ...netip.Prefix) ([]netip.Addr, error) {
	time.Sleep(30 * time.Millisecond)
	return l.Leases.LeaseAddresses(ctx, id, subnets...)
}

// TestMoreSandboxesThanABridgeHasPorts: sandboxes are routed, not ports
// of a bridge (a Linux bridge takes 1,023), so a daemon attaches more than
// that; the first and the last reach the internet, none reaches another,
// and the gateway link has no port.
func TestMoreSandboxesThanABridgeHasPorts(t *testing.T) {
	e := newEnvWith(t, func(cfg *network.Config, n int) {
		// A /21 of the slot's own (10.128.0.0/13 holds one for each).
		cfg.Subnet = netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/21", 128+n>>5, (n&31)<<3))
	})
	const n = 1030
	var first, last network.Attached
	for i := range n {
		at := e.attach(fmt.Sprintf("many-%d", i), policy.Default(), network.Limits{})
		if i == 0 {
			first = at
		}
		last = at
	}
	e.mustReach(first.NetNS, e.sink(e.inet.Web))
	e.mustReach(last.NetNS, e.sink(e.inet.Web))
	listenIn(t, first.NetNS, 8080)
	e.mustNotReach(last.NetNS, netip.AddrPortFrom(first.Addr, 8080))
	gw, err := netlink.LinkByName(e.cfg.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range linkList(t) {
		if l.Attrs().MasterIndex == gw.Attrs().Index {
			t.Fatalf("link %s is a port of the gateway link", l.Attrs().Name)
		}
	}
	if err := e.m.Sync(e.ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(); len(left) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(left[:min(len(left), 20)], "\n"))
	}
}

// TestNftListsTheTables: nft(8), what an operator reads the firewall
// with, lists the table with every kind of element a policy makes (both
// families, CIDRs allowed and denied, names admitted, a conntrack limit,
// the anti-spoof pairs), and finds the sandbox's addresses in them.
func TestNftListsTheTables(t *testing.T) {
	e := newEnvWith(t, func(cfg *network.Config, n int) {
		cfg.Subnet6 = netip.MustParsePrefix(fmt.Sprintf("fd00:5ead:0:%x::/64", n))
	})
	p, err := policy.Parse(client.NetworkPolicy{Allow: []string{"198.18.0.0/15", "2001:db8::/32", "example.com"}, Deny: []string{"198.18.7.0/24"}})
	if err != nil {
		t.Fatal(err)
	}
	a := e.attach("listed", p, network.Limits{MaxConns: 64})
	e.m.AddResolved("listed", []netip.Addr{netip.MustParseAddr("198.18.0.9"), netip.MustParseAddr("2001:db8::9")}, time.Minute)
	out, err := exec.Command("nft", "list", "table", "inet", e.cfg.Table).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list table inet %s: %v\n%s", e.cfg.Table, err, out)
	}
	for _, addr := range []netip.Addr{a.Addr, a.Addr6} {
		if !strings.Contains(string(out), addr.String()) {
			t.Errorf("nft lists no element of %s:\n%s", addr, out)
		}
	}
	// The host end by its name beside its addresses (anti-spoof).
	port := hostEndOf(t, a.NetNS)
	blk, _, _ := strings.Cut(string(out[strings.Index(string(out), "set sources4 {"):]), "}")
	if !strings.Contains(blk, `"`+port+`" . `+a.Addr.String()) {
		t.Errorf("nft lists set sources4 without %s . %s:\n%s", port, a.Addr, out)
	}
}

// The pins are not the host's mounts: every new mount namespace copies
// its parent's mounts, and the runtime makes one per sandbox, so a pin
// per running sandbox in the host's namespace made each create cost more
// the more sandboxes ran.
func TestPinsAreNotInTheHostsMountNamespace(t *testing.T) {
	e := newEnv(t)
	before := len(mountLines(t))
	var first network.Attached
	for i := range 20 {
		a := e.attach(fmt.Sprintf("pinned-%d", i), policy.Default(), network.Limits{})
		if i == 0 {
			first = a
		}
	}
	if after := len(mountLines(t)); after != before {
		t.Fatalf("the host's mount namespace went from %d to %d mounts with 20 sandboxes", before, after)
	}
	pins, err := network.Pins(e.m)
	if err != nil || len(pins) != 20 {
		t.Fatalf("pins: %v %v", pins, err)
	}
	// A new mount namespace (as a sandbox's init makes) copies neither
	// the pins nor the holder of theirs.
	cmd := exec.Command("cat", "/proc/self/mountinfo")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), e.cfg.RunDir) || strings.Count(string(out), "\n") > before {
		t.Fatalf("a new mount namespace has the pins (the host's has %d mounts):\n%s", before, out)
	}
	// The pinned namespace is the sandbox's: it is reached through the
	// path Attach gave.
	e.mustReach(first.NetNS, e.sink(e.inet.Web))
}

// mountLines is the test's mount table.
func mountLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// An earlier version pinned namespaces in the host's mount namespace
// under RunDir/ns: a new Manager moves them into the pins' namespace, so
// a sandbox left running across the upgrade keeps its namespace.
func TestPinsOfAnEarlierVersionAreAdopted(t *testing.T) {
	var old string
	e := newEnvWith(t, func(cfg *network.Config, _ int) {
		old = filepath.Join(cfg.RunDir, "ns", "legacy")
		if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(old, nil, 0o400); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("unshare", "--net="+old, "true").CombinedOutput(); err != nil {
			t.Fatalf("make a host pin: %v %s", err, out)
		}
		t.Cleanup(func() { syscall.Unmount(old, syscall.MNT_DETACH) })
	})
	if _, err := os.Stat(filepath.Dir(old)); !os.IsNotExist(err) {
		t.Fatalf("the old pins' directory is left: %v", err)
	}
	if m := mountsUnder(e.cfg.RunDir); len(m) != 1 {
		t.Fatalf("mounts under the run dir: %v, want the pins' holder alone", m)
	}
	pins, err := network.Pins(e.m)
	if err != nil || len(pins) != 1 || pins[0] != "legacy" {
		t.Fatalf("pins: %v %v", pins, err)
	}
	a := e.attach("legacy", policy.Default(), network.Limits{})
	// The namespace is the one the old pin held: the test can tell by
	// the loopback-only state unshare left, now with eth0 in it.
	if err := nettest.Do(a.NetNS, func() error {
		_, err := netlink.LinkByName("eth0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
}

// Close keeps the pins' namespace while a sandbox is attached (it runs on
// across a daemon restart) and takes it down when none is.
func TestCloseKeepsThePinsOfRunningSandboxesOnly(t *testing.T) {
	e := newEnv(t)
	a := e.attach("stays", policy.Default(), network.Limits{})
	ino := inode(t, a.NetNS)
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}
	if m := mountsUnder(e.cfg.RunDir); len(m) != 1 {
		t.Fatalf("mounts under the run dir after Close with a sandbox attached: %v", m)
	}
	e.m = e.newManager()
	b := e.attach("stays", policy.Default(), network.Limits{})
	if inode(t, b.NetNS) != ino {
		t.Fatal("the sandbox got a new namespace across Close and New")
	}
	if err := e.m.Detach(e.ctx, "stays"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}
	if m := mountsUnder(e.cfg.RunDir); len(m) != 0 {
		t.Fatalf("mounts under the run dir after Close with nothing attached: %v", m)
	}
	e.m = e.newManager() // for the test's Remove
}

// TestAGatewayThatLostItsAddressIsRepaired: removing the gateway link's
// address (an administrator's `ip addr flush`) takes every sandbox's
// route with it (the routes name it as their source), and the sandbox
// reaches nothing; GatewayIntact says so, and RepairGateway puts the
// address and the routes back without touching the sandbox.
func TestAGatewayThatLostItsAddressIsRepaired(t *testing.T) {
	e := newEnv(t)
	a := e.attach("gw-lost", policy.Default(), network.Limits{})
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
	if !e.m.GatewayIntact() {
		t.Fatal("the gateway of a new instance is not intact")
	}
	gl, err := netlink.LinkByName(e.cfg.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := netlink.AddrList(gl, netlink.FAMILY_V4)
	if err != nil || len(addrs) == 0 {
		t.Fatalf("gateway addresses: %v %v", addrs, err)
	}
	for _, ad := range addrs {
		if err := netlink.AddrDel(gl, &ad); err != nil {
			t.Fatal(err)
		}
	}
	if e.m.GatewayIntact() {
		t.Fatal("GatewayIntact with the gateway's address removed")
	}
	e.mustNotReach(a.NetNS, e.sink(e.inet.Web))
	if err := e.m.RepairGateway(e.ctx); err != nil {
		t.Fatal(err)
	}
	if !e.m.GatewayIntact() {
		t.Fatal("the gateway is not intact after its repair")
	}
	e.mustReach(a.NetNS, e.sink(e.inet.Web))
	if host := hostEndOf(t, a.NetNS); host == "" {
		t.Fatal("the sandbox lost its host end")
	}
}

// TestADetachAfterARestartDeletesEveryHostEndOfItsAlias: a sandbox with
// more host ends carrying its alias (leftovers) loses them all to a
// Detach by a new Manager, which finds them by the alias alone.
func TestADetachAfterARestartDeletesEveryHostEndOfItsAlias(t *testing.T) {
	e := newEnv(t)
	a := e.attach("two-ends", policy.Default(), network.Limits{})
	host, err := netlink.LinkByName(hostEndOf(t, a.NetNS))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{host.Attrs().Name}
	slot := nettest.Slot(t)
	for i := range 3 {
		la := netlink.NewLinkAttrs()
		la.Name = fmt.Sprintf("stleft%03d%d", slot, i)
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: la.Name + "p"}); err != nil {
			t.Fatal(err)
		}
		left, err := netlink.LinkByName(la.Name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { netlink.LinkDel(left) })
		if err := netlink.LinkSetAlias(left, host.Attrs().Alias); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetGroup(left, int(host.Attrs().Group)); err != nil {
			t.Fatal(err)
		}
		names = append(names, la.Name)
	}
	e.m = e.newManager()
	if err := e.m.Detach(e.ctx, "two-ends"); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if _, err := netlink.LinkByName(name); err == nil {
			t.Errorf("host end %s is still there after the detach", name)
		}
	}
}
