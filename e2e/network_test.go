package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/network/nettest"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// The network tests send traffic only to 127.0.0.0/8, to sandboxes and to
// a stand-in internet of the test's own (nettest, on 198.18.0.0/15) whose
// DNS server is the daemon's only upstream.

// netDaemon starts a daemon with networking on its own bridge and subnet,
// its resolver forwarding to the stand-in internet's DNS server.
func netDaemon(t *testing.T, inet *nettest.Internet, extra ...string) (*daemon, string) {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	bridge := "stt" + hex.EncodeToString(b)
	// 10.140-189: clear of the network package's tests (10.199, 10.128-135),
	// the cluster rig's (10.213) and the default (10.88), which run beside
	// these; a daemon refuses a subnet another link holds.
	subnet := fmt.Sprintf("10.%d.%d.0/24", 140+int(b[0])%50, b[1])
	subnet6 := fmt.Sprintf("fd5e:ad%02x:%02x%02x::/64", b[0], b[1], b[2])
	args := append([]string{"--no-network=false", "--bridge", bridge, "--subnet", subnet, "--subnet6", subnet6,
		"--dns-upstream", inet.DNS().String(), "--proxy-domain", "localhost", "--policy-interval", "1s"}, extra...)
	// Registered first, so it runs after the daemon's teardown (cleanups
	// run last first): a daemon still running would make them again.
	t.Cleanup(func() { removeBridge(bridge) })
	d := newDaemon(t, args...)
	return d, bridge
}

// removeBridge deletes what a daemon of a test leaves on the host: its
// gateway link and its nftables table (named as the link), which a daemon
// keeps when it stops so that the sandboxes it leaves running stay
// filtered. A table left behind would stay in the path of every packet
// on the machine.
func removeBridge(bridge string) {
	if l, err := netlink.LinkByName(bridge); err == nil {
		netlink.LinkDel(l)
	}
	if c, err := nftables.New(); err == nil {
		c.DelTable(&nftables.Table{Name: bridge, Family: nftables.TableFamilyINet})
		c.Flush()
	}
}

var netsrvOnce struct {
	sync.Once
	path string
	err  error
}

// netsrvBinary builds e2e/netsrv statically, once.
func netsrvBinary(t *testing.T) string {
	t.Helper()
	netsrvOnce.Do(func() {
		dir, err := os.MkdirTemp("", "stead-netsrv-")
		if err != nil {
			netsrvOnce.err = err
			return
		}
		netsrvOnce.path = filepath.Join(dir, "netsrv")
		cmd := exec.Command("go", "build", "-o", netsrvOnce.path, "./netsrv")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			netsrvOnce.err = fmt.Errorf("build netsrv: %v\n%s", err, out)
		}
	})
	if netsrvOnce.err != nil {
		t.Fatal(netsrvOnce.err)
	}
	return netsrvOnce.path
}

// installNetsrv copies netsrv into a sandbox at /usr/local/bin/netsrv... of
// the sandbox's own tree: /workspace/netsrv (the host template's /usr is
// the host's, read-only).
func (d *daemon) installNetsrv(ctx context.Context, id string) {
	d.t.Helper()
	f, err := os.Open(netsrvBinary(d.t))
	if err != nil {
		d.t.Fatal(err)
	}
	defer f.Close()
	if _, err := d.c.WriteFile(ctx, id, "/workspace/netsrv", 0o755, f); err != nil {
		d.t.Fatalf("copy netsrv into %s: %v", id, err)
	}
}

// try runs a shell command in a sandbox and returns its output and exit.
func (d *daemon) try(ctx context.Context, id, script string) (string, int) {
	d.t.Helper()
	res, err := d.c.Exec(ctx, id, client.ExecRequest{Command: []string{"/bin/sh", "-c", script}})
	if err != nil {
		d.t.Fatalf("exec %q: %v", script, err)
	}
	return string(res.Stdout) + string(res.Stderr), res.ExitCode
}

// mustReach and mustNotReach fetch a URL from inside a sandbox with curl.
func (d *daemon) fetch(ctx context.Context, id, args string) (string, int) {
	d.t.Helper()
	return d.try(ctx, id, "curl -sS --max-time 4 "+args)
}

func (d *daemon) mustFetch(ctx context.Context, id, args, want string) {
	d.t.Helper()
	out, code := d.fetch(ctx, id, args)
	if code != 0 || !strings.Contains(out, want) {
		d.t.Fatalf("curl %s in %s: exit %d, %q; want %q", args, id, code, out, want)
	}
}

func (d *daemon) mustNotFetch(ctx context.Context, id, args string) {
	d.t.Helper()
	out, code := d.fetch(ctx, id, args)
	// A refusal is a failed connection, or the egress proxy's 403 page.
	if code == 0 && !strings.Contains(out, "network policy refused") {
		d.t.Fatalf("curl %s in %s succeeded: %q", args, id, out)
	}
}

func (d *daemon) setPolicy(ctx context.Context, id string, p client.NetworkPolicy) client.NetworkInfo {
	d.t.Helper()
	n, err := d.c.SetNetwork(ctx, id, p)
	if err != nil {
		d.t.Fatalf("set network policy %+v: %v", p, err)
	}
	return n
}

func off() *bool { b := false; return &b }

// hostAddrs are the host's own addresses but loopback and link-local.
func hostAddrs(t *testing.T) []netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && !p.Addr().IsLoopback() && !p.Addr().IsLinkLocalUnicast() {
			out = append(out, p.Addr())
		}
	}
	return out
}

// TestSandboxEgressFollowsItsPolicy: a sandbox resolves names and fetches
// pages from the stand-in internet; internet off lets nothing out; an
// allow-list of one domain admits that domain and refuses another name on
// the same address at DNS and at connect (Host and SNI); a CIDR deny-list
// refuses its range; a change applies to the running sandbox at once;
// refusals are counted.
func TestSandboxEgressFollowsItsPolicy(t *testing.T) {
	inet := nettest.NewInternet(t)
	web := inet.Web.String()
	inet.SetZone(map[string][]netip.Addr{"example.test": {inet.Web}, "other.test": {inet.Web}, "third.test": {inet.Web2}})
	d, _ := netDaemon(t, inet)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "egress"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Address == "" {
		t.Fatalf("a running sandbox has no address: %+v", sb)
	}
	// The default: the internet, names resolved by the daemon's resolver.
	if out := d.sh(ctx, sb.ID, "agent", "cat /etc/resolv.conf; getent hosts example.test"); !strings.Contains(out, web) {
		t.Fatalf("resolve example.test: %q", out)
	}
	d.mustFetch(ctx, sb.ID, "http://example.test/", "host=example.test")
	d.mustFetch(ctx, sb.ID, "-k https://third.test/", "host=third.test")
	// Nothing was refused yet: the count is what the sandbox asked for.
	time.Sleep(time.Second)
	if n, err := d.c.GetNetwork(ctx, sb.ID); err != nil || n.Refused != 0 {
		t.Fatalf("refusals before any refused request: %+v %v", n, err)
	}

	// Internet off: no name, no address.
	d.setPolicy(ctx, sb.ID, client.NetworkPolicy{Internet: off()})
	if out, code := d.try(ctx, sb.ID, "getent hosts example.test"); code == 0 {
		t.Fatalf("internet off: example.test resolved: %q", out)
	}
	d.mustNotFetch(ctx, sb.ID, "http://"+web+"/")
	d.mustNotFetch(ctx, sb.ID, "http://"+inet.Web2.String()+"/")

	// An allow-list of one domain.
	d.setPolicy(ctx, sb.ID, client.NetworkPolicy{Allow: []string{"example.test"}})
	d.mustFetch(ctx, sb.ID, "http://example.test/", "host=example.test")
	d.mustFetch(ctx, sb.ID, "-k https://example.test/", "host=example.test")
	if out, code := d.try(ctx, sb.ID, "getent hosts other.test"); code == 0 {
		t.Fatalf("allow example.test: other.test resolved: %q", out)
	}
	// Same address, another name: refused at connect, by Host and by SNI.
	d.mustNotFetch(ctx, sb.ID, "--resolve other.test:80:"+web+" http://other.test/")
	if out, _ := d.fetch(ctx, sb.ID, "--resolve other.test:80:"+web+" http://other.test/"); !strings.Contains(out, "refused") {
		t.Fatalf("other Host on an allowed address: want the proxy's refusal, got %q", out)
	}
	d.mustNotFetch(ctx, sb.ID, "-k --resolve other.test:443:"+web+" https://other.test/")
	// An address no allowed name resolved to.
	d.mustNotFetch(ctx, sb.ID, "http://"+inet.Web2.String()+"/")

	// A CIDR deny-list.
	d.setPolicy(ctx, sb.ID, client.NetworkPolicy{Deny: []string{inet.Web.String() + "/32"}})
	d.mustNotFetch(ctx, sb.ID, "http://"+web+"/")
	d.mustFetch(ctx, sb.ID, "http://"+inet.Web2.String()+"/", "host=")

	n, err := d.c.GetNetwork(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n.Refused == 0 || n.Address != sb.Address || !n.Enabled {
		t.Fatalf("network info after refusals: %+v", n)
	}
	// The policy is kept across stop/start.
	if _, err := d.c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	d.mustNotFetch(ctx, sb.ID, "http://"+web+"/")
	d.mustFetch(ctx, sb.ID, "http://"+inet.Web2.String()+"/", "host=")
}

// TestSandboxReachesTheInternetOverIPv6: with an IPv6 subnet a sandbox has
// an IPv6 address and reaches the stand-in internet's IPv6 addresses
// through NAT66, by name and by address, under the same policy.
func TestSandboxReachesTheInternetOverIPv6(t *testing.T) {
	inet := nettest.NewInternet(t)
	d, _ := netDaemon(t, inet)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "six"})
	if err != nil {
		t.Fatal(err)
	}
	n, err := d.c.GetNetwork(ctx, sb.ID)
	if err != nil || n.Address6 == "" {
		t.Fatalf("no IPv6 address: %+v %v", n, err)
	}
	web6 := "[" + inet.Web6.String() + "]"
	d.mustFetch(ctx, sb.ID, "-6 http://example.test/", "addr="+web6)
	d.mustFetch(ctx, sb.ID, "-g http://"+web6+"/", "addr="+web6)
	d.setPolicy(ctx, sb.ID, client.NetworkPolicy{Deny: []string{inet.Web6.String()}})
	d.mustNotFetch(ctx, sb.ID, "-g http://"+web6+"/")
	d.mustFetch(ctx, sb.ID, "-g http://["+inet.Web26.String()+"]/", "addr=")
}

// TestSandboxCannotReachTheHostOrOtherSandboxes: under every policy, even
// one allowing everything by CIDR, a sandbox reaches neither the host's
// addresses (a listener of the test on every host address, the gateway
// included, stands in for the daemon's API) nor another sandbox, nor the
// link-local metadata address.
func TestSandboxCannotReachTheHostOrOtherSandboxes(t *testing.T) {
	inet := nettest.NewInternet(t)
	d, _ := netDaemon(t, inet)
	ctx := ctxT(t)
	ln, err := net.Listen("tcp", ":0") // every host address, IPv4 and IPv6
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "host-secret") }))
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	a, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	d.installNetsrv(ctx, b.ID)
	if _, err := d.c.Exec(ctx, b.ID, client.ExecRequest{Command: []string{"/workspace/netsrv", "serve", "8080"}, Background: true}); err != nil {
		t.Fatal(err)
	}
	// b serves: the host reaches it.
	waitHTTP(t, "http://"+b.Address+":8080/", "hello")
	n, _ := d.c.GetNetwork(ctx, a.ID)
	targets := []string{"http://" + b.Address + ":8080/", "http://" + n.Gateway + ":" + port + "/", "http://169.254.169.254/",
		"http://" + d.addr + "/healthz"}
	for _, h := range hostAddrs(t) {
		targets = append(targets, "http://"+netip.AddrPortFrom(h, uint16(ln.Addr().(*net.TCPAddr).Port)).String()+"/")
	}
	if n.Address6 != "" {
		gw6 := netip.MustParsePrefix(strings.Split(n.Address6, "/")[0] + "/64").Masked().Addr().Next()
		targets = append(targets, "http://"+netip.AddrPortFrom(gw6, uint16(ln.Addr().(*net.TCPAddr).Port)).String()+"/")
	}
	for _, pol := range []client.NetworkPolicy{{}, {Allow: []string{"0.0.0.0/0"}}, {Allow: []string{"10.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16"}}} {
		d.setPolicy(ctx, a.ID, pol)
		// All at once: a refused connection is a dropped SYN, which
		// curl waits out.
		script := ""
		for _, u := range targets {
			script += fmt.Sprintf("(curl -gsS --max-time 2 '%s' && echo ' REACHED %s') & ", u, u)
		}
		out, _ := d.try(ctx, a.ID, script+"wait")
		if strings.Contains(out, "REACHED") || strings.Contains(out, "host-secret") || strings.Contains(out, "hello") {
			t.Errorf("policy %+v: the sandbox reached a forbidden address:\n%s", pol, out)
		}
	}
}

// loopbackClient is an HTTP client that resolves nothing: *.localhost
// names (the port proxy's Host routing) are dialled on 127.0.0.1, so no
// test asks the machine's resolver.
var loopbackClient = &http.Client{Transport: &http.Transport{
	DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(host, ".localhost") || host == "localhost" {
			host = "127.0.0.1"
		}
		if _, err := netip.ParseAddr(host); err != nil {
			return nil, fmt.Errorf("test dials addresses only, not %q", host)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(host, port))
	},
}}

// waitHTTP polls url from the host until it answers with want.
func waitHTTP(t *testing.T, url, want string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		resp, err := loopbackClient.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
			if resp.StatusCode == 200 && strings.Contains(string(b), want) {
				return string(b)
			}
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("GET %s: %s; want %q", url, last, want)
	return ""
}

// TestSandboxAddressIsStable: the address survives stop/start,
// pause/resume, a kill -9 of the daemon and its restart (with the policy
// still enforced), and rollback; a fork gets a new one; purges and a
// crash leave no link, namespace, rule or lease behind.
func TestSandboxAddressIsStable(t *testing.T) {
	inet := nettest.NewInternet(t)
	inet.SetZone(map[string][]netip.Addr{"example.test": {inet.Web}})
	d, bridge := netDaemon(t, inet)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "stable", Network: &client.NetworkPolicy{Allow: []string{"example.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	addr := sb.Address
	same := func(when string) {
		t.Helper()
		got, err := d.c.GetNetwork(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Address != addr {
			t.Fatalf("%s: address %s, want %s", when, got.Address, addr)
		}
		if out := d.sh(ctx, sb.ID, "root", "cat /proc/net/fib_trie | grep -c "+addr+" || true"); strings.TrimSpace(out) == "0" {
			t.Fatalf("%s: the sandbox's interface does not hold %s", when, addr)
		}
	}
	if _, err := d.c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	same("after stop/start")
	if _, err := d.c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	same("after pause/resume")
	d.kill9()
	d.start()
	same("after kill -9 and restart")
	d.mustFetch(ctx, sb.ID, "http://example.test/", "host=example.test")
	d.mustNotFetch(ctx, sb.ID, "--resolve other.test:80:"+inet.Web.String()+" http://other.test/")
	snap, err := d.c.CreateSnapshot(ctx, sb.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Rollback(ctx, sb.ID, snap.ID); err != nil {
		t.Fatal(err)
	}
	same("after rollback")
	forks, err := d.c.Fork(ctx, sb.ID, client.ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if forks[0].Address == "" || forks[0].Address == addr {
		t.Fatalf("fork address %q (the source has %s)", forks[0].Address, addr)
	}
	if forks[0].Network.Allow == nil || forks[0].Network.Allow[0] != "example.test" {
		t.Fatalf("the fork did not keep the policy: %+v", forks[0].Network)
	}
	// A crash: the daemon dies with sandboxes running; they are purged
	// after its restart; nothing of theirs remains.
	d.kill9()
	d.start()
	for _, id := range []string{sb.ID, forks[0].ID} {
		if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}
	d.stopGracefully()
	assertNoNetworkLeftovers(t, d, bridge)
}

// assertNoNetworkLeftovers checks a stopped daemon left no sandbox link on
// its bridge, no namespace mount, no per-sandbox rule, no lease.
func assertNoNetworkLeftovers(t *testing.T, d *daemon, bridge string) {
	t.Helper()
	br, err := netlink.LinkByName(bridge)
	if err == nil {
		links, _ := netlink.LinkList()
		for _, l := range links {
			if l.Attrs().MasterIndex == br.Attrs().Index {
				t.Errorf("link %s is still on the bridge", l.Attrs().Name)
			}
		}
	}
	if n := mountsUnder(t, filepath.Join(d.runDir, "net")); n != 0 {
		t.Errorf("%d mounts left under %s/net", n, d.runDir)
	}
	// A sandbox is elements of the tables' sets (the kernel keeps and
	// drops the connection counts itself).
	for _, fam := range []string{"inet", "bridge"} {
		out, _ := exec.Command("nft", "list", "table", fam, bridge).CombinedOutput()
		for _, blk := range regexp.MustCompile(`\n\t(?:set|map) `).Split(string(out), -1)[1:] {
			if strings.Contains(blk, "elements = ") && !strings.HasPrefix(blk, "conns") {
				t.Errorf("a sandbox's elements left in %s table %s:\n%s", fam, bridge, out)
			}
		}
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(d.dataDir, "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if leases, err := st.ListLeases(context.Background()); err != nil || len(leases) != 0 {
		t.Errorf("leases left: %v %v", leases, err)
	}
}

// TestExposedPortsThroughTheProxy: a web server in a sandbox is served
// through the port proxy by Host and by path, streams unbuffered, echoes
// over a WebSocket; a private port answers 401 without a key or token and
// never passes credentials on; a public one needs nothing.
func TestExposedPortsThroughTheProxy(t *testing.T) {
	inet := nettest.NewInternet(t)
	d, _ := netDaemon(t, inet)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	d.installNetsrv(ctx, sb.ID)
	if _, err := d.c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"/workspace/netsrv", "serve", "8080"}, Background: true}); err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, "http://"+sb.Address+":8080/", "hello")
	p, err := d.c.ExposePort(ctx, sb.ID, 8080, client.ExposePortRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Token == "" || p.URL == "" || p.PathURL == "" {
		t.Fatalf("exposed port: %+v", p)
	}
	get := func(url string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest("GET", url, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := loopbackClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// By Host: <port>-<id>.localhost resolves to this machine.
	if code, _ := get(p.URL, nil); code != 401 {
		t.Fatalf("private port without a token: %d", code)
	}
	if code, body := get(p.URL+"headers", map[string]string{"X-Stead-Port-Token": p.Token, "Authorization": "Bearer " + d.key}); code != 200 || strings.Contains(body, p.Token) || strings.Contains(body, d.key) {
		t.Fatalf("by Host with the token: %d %s", code, body)
	}
	// By path, on the API's address, with the API key.
	code, body := get("http://"+d.addr+"/v1/sandboxes/"+sb.ID+"/ports/8080/hello", map[string]string{"Authorization": "Bearer " + d.key})
	if code != 200 || !strings.Contains(body, "path=/hello") {
		t.Fatalf("by path: %d %s", code, body)
	}
	// Raw TCP through port-forward (the port need not be exposed for it).
	conn, err := d.c.PortForward(ctx, sb.ID, 8080)
	if err != nil {
		t.Fatalf("port-forward: %v", err)
	}
	io.WriteString(conn, "GET /raw HTTP/1.0\r\nHost: x\r\n\r\n")
	raw, _ := io.ReadAll(conn)
	conn.Close()
	if !strings.Contains(string(raw), "path=/raw") {
		t.Fatalf("port-forward answer: %q", raw)
	}
	// Streaming: the first event arrives well before the stream ends (the
	// server writes a tick every 300 ms and ends 900 ms after the first;
	// a buffering proxy would hand them over together at the end). Timed
	// against the end, not the start, which a loaded machine delays.
	req, _ := http.NewRequest("GET", p.URL+"stream", nil)
	req.Header.Set("X-Stead-Port-Token", p.Token)
	resp, err := loopbackClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := resp.Body.Read(buf)
	first := time.Now()
	rest, _ := io.ReadAll(resp.Body)
	before := time.Since(first)
	resp.Body.Close()
	if !strings.Contains(string(buf[:n]), "tick 0") || !strings.Contains(string(rest), "tick 2") || before < 300*time.Millisecond {
		t.Fatalf("stream: first chunk %q %s before the end %q (the ticks are 300 ms apart)", buf[:n], before, rest)
	}
	// WebSocket echo.
	wsURL := "ws" + strings.TrimPrefix(p.URL, "http") + "ws"
	c, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: loopbackClient, HTTPHeader: http.Header{"X-Stead-Port-Token": {p.Token}}})
	if err != nil {
		t.Fatalf("websocket through the proxy: %v", err)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := c.Read(ctx); err != nil || string(msg) != "echo: ping" {
		t.Fatalf("websocket echo: %q %v", msg, err)
	}
	c.Close(websocket.StatusNormalClosure, "")
	// Public.
	if _, err := d.c.ExposePort(ctx, sb.ID, 8080, client.ExposePortRequest{Public: true}); err != nil {
		t.Fatal(err)
	}
	if code, body := get(p.URL, nil); code != 200 || !strings.Contains(body, "hello") {
		t.Fatalf("public port: %d %s", code, body)
	}
	if err := d.c.UnexposePort(ctx, sb.ID, 8080); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(p.URL, nil); code != 404 {
		t.Fatalf("unexposed port: %d", code)
	}
}

// TestRequestWakesAnAutoStoppedSandbox: a sandbox with auto_resume whose
// idle policy stopped it is started by a request to its exposed port and
// answers it; proxied requests count as activity for the idle policy; a
// paused one is resumed.
func TestRequestWakesAnAutoStoppedSandbox(t *testing.T) {
	inet := nettest.NewInternet(t)
	d, _ := netDaemon(t, inet)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "sleepy", AutoResume: true, IdleTimeout: "3s", NoStart: true,
		Service: &client.Service{Command: []string{"/workspace/netsrv", "serve", "8080"}}})
	if err != nil {
		t.Fatal(err)
	}
	d.installNetsrv(ctx, sb.ID)
	if sb, err = d.c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	p, err := d.c.ExposePort(ctx, sb.ID, 8080, client.ExposePortRequest{Public: true})
	if err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, p.URL, "hello")
	state := func() string {
		got, err := d.c.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.State + "/" + got.StopReason
	}
	// Requests every second keep it awake past its 3 s idle timeout.
	for range 7 {
		waitHTTP(t, p.URL, "hello")
		time.Sleep(time.Second)
	}
	if st := state(); st != "running/" {
		t.Fatalf("a sandbox served every second was stopped: %s", st)
	}
	// Left alone, the idle policy stops it.
	deadline := time.Now().Add(30 * time.Second)
	for state() != "stopped/idle" {
		if time.Now().After(deadline) {
			t.Fatalf("not stopped as idle: %s", state())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A request wakes it and gets its answer.
	t0 := time.Now()
	if body := waitHTTP(t, p.URL+"woken", "path=/woken"); body == "" {
		t.Fatal("no answer")
	}
	t.Logf("wake from stopped: %s", time.Since(t0))
	if st := state(); st != "running/" {
		t.Fatalf("after the waking request: %s", st)
	}
	if _, err := d.c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	waitHTTP(t, p.URL, "hello")
	t.Logf("wake from paused: %s", time.Since(t0))
	if st := state(); st != "running/" {
		t.Fatalf("after a request to a paused sandbox: %s", st)
	}
}

// TestBandwidthLimitKeepsNeighboursFast: a sandbox sending at its limit
// does not slow a second sandbox's transfer by more than the limit
// implies, and is itself held near its limit.
func TestBandwidthLimitKeepsNeighboursFast(t *testing.T) {
	inet := nettest.NewInternet(t)
	d, _ := netDaemon(t, inet)
	ctx := ctxT(t)
	var ids []string
	for _, name := range []string{"hog", "neighbour"} {
		sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: name, InstanceType: "micro"})
		if err != nil {
			t.Fatal(err)
		}
		d.installNetsrv(ctx, sb.ID)
		ids = append(ids, sb.ID)
	}
	const size = 25 << 20 // 2 s at micro's 100 Mbit/s
	send := func(id string) float64 {
		out := d.sh(ctx, id, "agent", "/workspace/netsrv send "+netip.AddrPortFrom(inet.Web, nettest.SinkPort).String()+" "+strconv.Itoa(size))
		s, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
		if err != nil {
			t.Fatalf("netsrv send: %q", out)
		}
		return s
	}
	alone := send(ids[1])
	var hog float64
	var wg sync.WaitGroup
	wg.Go(func() { hog = send(ids[0]) })
	time.Sleep(200 * time.Millisecond)
	together := send(ids[1])
	wg.Wait()
	limit := 100e6 / 8
	t.Logf("neighbour alone %.2fs, beside the hog %.2fs; hog %.2fs (%.0f Mbit/s)", alone, together, hog, size/hog*8/1e6)
	if rate := size / hog; rate > 1.3*limit {
		t.Errorf("the hog sent at %.0f Mbit/s, over its 100 Mbit/s limit", rate*8/1e6)
	}
	if together > 1.5*alone+0.5 {
		t.Errorf("the neighbour slowed from %.2fs to %.2fs beside a sandbox at its limit", alone, together)
	}
}

// TestResolvConfMountFollowsNoSymlinkOutOfTheSandbox: the agent (root
// inside) swaps /etc/resolv.conf for a symlink to a host path, and a
// directory on its way for another; the next starts bind the daemon's
// resolv.conf inside the sandbox's own tree, and the host path is neither
// created nor touched.
func TestResolvConfMountFollowsNoSymlinkOutOfTheSandbox(t *testing.T) {
	inet := nettest.NewInternet(t)
	d, _ := netDaemon(t, inet)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "swapper"})
	if err != nil {
		t.Fatal(err)
	}
	victimDir := t.TempDir()
	victim := filepath.Join(victimDir, "victim")
	if err := os.WriteFile(victim, []byte("host file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(victimDir, "absent")
	for i, target := range []string{victim, absent, victimDir} {
		// /etc/resolv.conf is a mount point while the sandbox runs: the
		// agent moves /etc aside and plants a new one.
		d.sh(ctx, sb.ID, "root", fmt.Sprintf("rm -rf /etc.old; mv /etc /etc.old && mkdir /etc && cp -a /etc.old/passwd /etc.old/group /etc/ && ln -s ../../../../../../..%s /etc/resolv.conf", target))
		if _, err := d.c.StopSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := d.c.StartSandbox(ctx, sb.ID); err != nil {
			t.Fatalf("start %d after the swap to %s: %v", i, target, err)
		}
		if out := d.sh(ctx, sb.ID, "agent", "cat /etc/resolv.conf"); !strings.Contains(out, "nameserver") {
			t.Fatalf("resolv.conf in the sandbox after the swap to %s: %q", target, out)
		}
		d.mustFetch(ctx, sb.ID, "http://example.test/", "host=example.test")
		if b, err := os.ReadFile(victim); err != nil || string(b) != "host file\n" {
			t.Fatalf("the host file changed: %q %v", b, err)
		}
		if _, err := os.Stat(absent); !os.IsNotExist(err) {
			t.Fatalf("a host path was created: %v", err)
		}
		if ents, _ := os.ReadDir(victimDir); len(ents) != 1 {
			t.Fatalf("the host directory gained entries: %v", ents)
		}
	}
}

// TestTheGatewaysAddressComesBack: when the gateway link loses its
// addresses while the daemon runs (an administrator's `ip addr flush`),
// every sandbox's route goes with them; the daemon's policy loop notices
// and puts the addresses and routes back within a few intervals, and the
// sandbox, never restarted, fetches by name again (its resolver is on the
// gateway).
func TestTheGatewaysAddressComesBack(t *testing.T) {
	inet := nettest.NewInternet(t)
	d, bridge := netDaemon(t, inet)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	web := inet.Web.String()
	d.mustFetch(ctx, sb.ID, "http://example.test/", "addr="+web)
	gl, err := netlink.LinkByName(bridge)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := netlink.AddrList(gl, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a.IP.IsGlobalUnicast() {
			if err := netlink.AddrDel(gl, &a); err != nil {
				t.Fatal(err)
			}
		}
	}
	// (That nothing gets through meanwhile is the network package's
	// TestAGatewayThatLostItsAddressIsRepaired: here the loop may repair
	// it before a fetch could tell.)
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, code := d.fetch(ctx, sb.ID, "--max-time 2 http://example.test/")
		if code == 0 && strings.Contains(out, "addr="+web) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox still reaches nothing 20 s after the gateway lost its addresses: exit %d, %q\n%s", code, out, d.logText())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(d.logText(), "repaired the sandboxes' network") {
		t.Fatalf("no repair in the daemon's log:\n%s", d.logText())
	}
}
