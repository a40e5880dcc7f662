// Command network measures what sandbox networking costs, through a real
// stead daemon with networking on a gateway link of its own, its resolver
// forwarding to a stand-in internet (nettest, a network namespace on
// 198.18.0.0/15), side by side with peers from the same run:
//
//  1. create → first exec exits, with networking and on a second daemon
//     with --no-network (interleaved);
//  2. TCP throughput from a sandbox to the stand-in internet through the
//     routed veth and the NAT, against the same transfer between two plain
//     network namespaces joined by a veth (no NAT, no nftables); with the
//     instance type's rate limit and with the bench's own removal of it;
//  3. HTTP through the port proxy (Host routing, public port) against
//     direct requests to the sandbox's address, over K keep-alive
//     connections;
//  4. wake on request: a stopped, then a paused sandbox with auto_resume
//     answering its first proxied request.
//
// Traffic goes only to 127.0.0.0/8, to sandboxes and to the stand-in
// internet; no name is resolved (the HTTP client dials 127.0.0.1 for
// *.localhost itself). It needs root.
//
//	go run ./bench/network -stead bin/stead -n 30
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/stead-dev/stead/bench/internal/benchd"
	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/network/nettest"
)

// The daemon's gateway link (also its nftables table) and subnet, and the
// plain veth pair's names and addresses: chosen not to clash with a
// daemon of the machine or the e2e tests.
const (
	bridge    = "stbench0"
	subnet    = "10.250.0.0/24"
	vethA     = "stbvetha"
	vethB     = "stbvethb"
	vethAddrA = "10.251.0.1"
	vethAddrB = "10.251.0.2"
	servePort = 8080
)

type options struct {
	n, mib, rounds, requests, conns, wakes int
	bin, pool                              string
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 30, "create → first exec iterations per daemon")
	flag.StringVar(&o.bin, "stead", "bin/stead", "stead binary (static build: scripts/build.sh)")
	flag.StringVar(&o.pool, "pool", "btrfs", "pool kind")
	flag.IntVar(&o.mib, "mib", 256, "MiB per throughput transfer")
	flag.IntVar(&o.rounds, "rounds", 3, "throughput transfers per path (the median is shown)")
	flag.IntVar(&o.requests, "requests", 4000, "HTTP requests per round (2 rounds per path, interleaved)")
	flag.IntVar(&o.conns, "conns", 8, "concurrent keep-alive HTTP connections")
	flag.IntVar(&o.wakes, "wakes", 8, "wake rounds from stopped and from paused")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// row is a line of the result table.
type row struct{ measure, stead, peer, ratio, target string }

func run(o options) error {
	ctx := context.Background()
	inet, err := nettest.Start()
	if err != nil {
		return err
	}
	defer inet.Close()
	netsrv, err := buildNetsrv()
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(netsrv))

	// Pools of 64 GiB (sparse images): a large sandbox asks for a 40 GiB
	// quota.
	withNet, err := benchd.StartNetwork(ctx, o.bin, o.pool, 64,
		benchd.Network{Bridge: bridge, Subnet: subnet, DNSUpstream: inet.DNS().String()}, "--verbose")
	if err != nil {
		return err
	}
	defer withNet.Close()
	noNet, err := benchd.Start(ctx, o.bin, o.pool, 64, "--verbose")
	if err != nil {
		return err
	}
	var rows []row

	// 1. create → first exec exits.
	cNet, cNo, err := createPairs(ctx, o.n, withNet.Client, noNet.Client)
	if err != nil {
		noNet.Close()
		return fmt.Errorf("create → first exec: %w", err)
	}
	profile := createProfile(withNet, noNet)
	noNet.Close()
	diff := cNet.Pct(0.5) - cNo.Pct(0.5)
	rows = append(rows,
		row{"create → first exec exits, p50", benchd.Ms(cNet.Pct(0.5)), benchd.Ms(cNo.Pct(0.5)) + " (--no-network)",
			fmt.Sprintf("%.2fx, %+.2f ms", ratio(cNet.Pct(0.5), cNo.Pct(0.5)), ms(diff)), "≤ +5 ms"},
		row{"create → first exec exits, p99", benchd.Ms(cNet.Pct(0.99)), benchd.Ms(cNo.Pct(0.99)) + " (--no-network)",
			fmt.Sprintf("%.2fx, %+.2f ms", ratio(cNet.Pct(0.99), cNo.Pct(0.99)), ms(cNet.Pct(0.99)-cNo.Pct(0.99))), ""})

	// 2. TCP throughput.
	c := withNet.Client
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "bench-net", InstanceType: "large", IdleTimeout: "0"})
	if err != nil {
		return err
	}
	if err := install(ctx, c, sb.ID, netsrv); err != nil {
		return err
	}
	tp, err := throughput(ctx, o, withNet, sb, inet, netsrv)
	if err != nil {
		return fmt.Errorf("throughput: %w", err)
	}
	limit := 1000e6 / 8 // large: 1000 Mbit/s
	rows = append(rows,
		row{"TCP sandbox → internet, routed + NAT, large (1000 Mbit/s limit)", mbs(tp.capped), mbs(tp.veth) + " (plain veth)",
			fmt.Sprintf("%.2fx", tp.capped/tp.veth), "≥ 0.8x"},
		row{"  the same against its rate limit", mbs(tp.capped), mbs(limit) + " (1000 Mbit/s)", fmt.Sprintf("%.2fx", tp.capped/limit), ""},
		row{"TCP sandbox → internet, routed + NAT, limit removed by the bench", mbs(tp.uncapped), mbs(tp.veth) + " (plain veth)",
			fmt.Sprintf("%.2fx", tp.uncapped/tp.veth), "≥ 0.8x"})

	// 3. HTTP through the port proxy against direct.
	hp, err := proxiedHTTP(ctx, o, c, sb)
	if err != nil {
		return fmt.Errorf("proxied HTTP: %w", err)
	}
	rows = append(rows,
		row{fmt.Sprintf("HTTP GET, %d keep-alive conns: req/s", o.conns), fmt.Sprintf("%.0f /s (proxy)", hp.proxy.rate), fmt.Sprintf("%.0f /s (direct)", hp.direct.rate),
			fmt.Sprintf("%.2fx", hp.proxy.rate/hp.direct.rate), "≥ 0.7x"},
		row{"HTTP GET latency p50", benchd.Ms(hp.proxy.lat.Pct(0.5)), benchd.Ms(hp.direct.lat.Pct(0.5)) + " (direct)",
			fmt.Sprintf("%.2fx", ratio(hp.proxy.lat.Pct(0.5), hp.direct.lat.Pct(0.5))), ""},
		row{"HTTP GET latency p99", benchd.Ms(hp.proxy.lat.Pct(0.99)), benchd.Ms(hp.direct.lat.Pct(0.99)) + " (direct)",
			fmt.Sprintf("%.2fx", ratio(hp.proxy.lat.Pct(0.99), hp.direct.lat.Pct(0.99))), ""})

	// 4. Wake on request.
	wk, err := wake(ctx, o, c, netsrv)
	if err != nil {
		return fmt.Errorf("wake: %w", err)
	}
	rows = append(rows,
		row{"wake: stopped → first proxied answer, p50 / p99", benchd.Ms(wk.stopped.Pct(0.5)) + " / " + benchd.Ms(wk.stopped.Pct(0.99)),
			benchd.Ms(wk.start.Pct(0.5)) + " / " + benchd.Ms(wk.start.Pct(0.99)) + " (API start → first direct answer)",
			fmt.Sprintf("%.2fx", ratio(wk.stopped.Pct(0.5), wk.start.Pct(0.5))), ""},
		row{"wake: paused → first proxied answer, p50 / p99", benchd.Ms(wk.paused.Pct(0.5)) + " / " + benchd.Ms(wk.paused.Pct(0.99)),
			benchd.Ms(wk.resume.Pct(0.5)) + " / " + benchd.Ms(wk.resume.Pct(0.99)) + " (API resume → first direct answer)",
			fmt.Sprintf("%.2fx", ratio(wk.paused.Pct(0.5), wk.resume.Pct(0.5))), ""})

	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	fmt.Printf("stead network benchmark: %s, nproc %d, kernel %s, pool %s\n", time.Now().UTC().Format(time.RFC3339),
		runtime.NumCPU(), strings.TrimSpace(string(kernel)), o.pool)
	fmt.Printf("create n=%d per daemon (interleaved); throughput %d MiB × %d (median); HTTP %d requests × 2 rounds per path over %d conns; wake %d rounds\n\n",
		o.n, o.mib, o.rounds, o.requests, o.conns, o.wakes)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tstead\tpeer\tstead / peer\ttarget\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", r.measure, r.stead, r.peer, r.ratio, r.target)
	}
	tw.Flush()
	fmt.Printf("\nthroughput runs (MB/s): veth %s; NAT, limited %s; NAT, limit removed %s\n",
		fmtRates(tp.vethAll), fmtRates(tp.cappedAll), fmtRates(tp.uncappedAll))
	fmt.Printf("\nwhere create's time goes (medians of the daemons' debug logs over the timed creates):\n%s", profile)
	return nil
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }
func ms(d time.Duration) float64       { return float64(d.Microseconds()) / 1000 }
func mbs(bps float64) string           { return fmt.Sprintf("%.1f MB/s", bps/1e6) }

func fmtRates(rs []float64) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%.1f", r/1e6))
	}
	return strings.Join(s, ", ")
}

// buildNetsrv builds e2e/netsrv statically into a temporary directory.
func buildNetsrv() (string, error) {
	dir, err := os.MkdirTemp("", "stead-bench-netsrv-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "netsrv")
	cmd := exec.Command("go", "build", "-o", path, "./e2e/netsrv")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("build netsrv (run from the repository's root): %v\n%s", err, out)
	}
	return path, nil
}

// install copies netsrv into the sandbox's own tree (its /usr is the
// host's, read-only).
func install(ctx context.Context, c *client.Client, id, netsrv string) error {
	f, err := os.Open(netsrv)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := c.WriteFile(ctx, id, "/workspace/netsrv", 0o755, f); err != nil {
		return fmt.Errorf("copy netsrv into %s: %w", id, err)
	}
	return nil
}

// createPairs measures create → first exec on the daemons with (a) and
// without (b) networking, one iteration on each in turn; the sandboxes
// stay until the end (each create takes a new address), then are purged.
func createPairs(ctx context.Context, n int, a, b *client.Client) (benchd.Series, benchd.Series, error) {
	trueCmd := client.ExecRequest{Command: []string{"/bin/true"}}
	var da, db []time.Duration
	for _, c := range []*client.Client{a, b} { // warm the host template
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
		if err != nil {
			return benchd.Series{}, benchd.Series{}, err
		}
		c.DeleteSandbox(ctx, sb.ID, true)
	}
	for range n {
		for _, side := range []struct {
			c *client.Client
			d *[]time.Duration
		}{{a, &da}, {b, &db}} {
			t0 := time.Now()
			sb, err := side.c.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
			if err != nil {
				return benchd.Series{}, benchd.Series{}, err
			}
			if _, err := side.c.Exec(ctx, sb.ID, trueCmd); err != nil {
				return benchd.Series{}, benchd.Series{}, err
			}
			*side.d = append(*side.d, time.Since(t0))
		}
	}
	for _, c := range []*client.Client{a, b} {
		list, err := c.ListSandboxes(ctx, true)
		if err != nil {
			return benchd.Series{}, benchd.Series{}, err
		}
		for _, sb := range list {
			c.DeleteSandbox(ctx, sb.ID, true)
		}
	}
	return benchd.Series{Name: "network", D: da}, benchd.Series{Name: "no network", D: db}, nil
}

// createProfile reads the per-phase timings the daemons log at debug
// level ("sandbox started" of the runtime, "attached network" of the
// network) and prints their medians side by side.
func createProfile(withNet, noNet *benchd.Daemon) string {
	phases := func(d *benchd.Daemon, msg string, keys ...string) map[string]time.Duration {
		b, err := d.Log()
		if err != nil {
			return nil
		}
		vals := map[string][]time.Duration{}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, `msg="`+msg+`"`) {
				continue
			}
			for _, f := range strings.Fields(line) {
				k, v, ok := strings.Cut(f, "=")
				if !ok {
					continue
				}
				for _, want := range keys {
					if k == want {
						if d, err := time.ParseDuration(v); err == nil {
							vals[k] = append(vals[k], d)
						}
					}
				}
			}
		}
		out := map[string]time.Duration{}
		for k, ds := range vals {
			out[k] = benchd.Series{D: ds}.Pct(0.5)
		}
		return out
	}
	rt := []string{"rootfs", "create", "run", "ready", "limits"}
	a, b := phases(withNet, "sandbox started", rt...), phases(noNet, "sandbox started", rt...)
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  runtime phase\twith network\t--no-network\tdifference\t")
	for _, k := range rt {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%+.2f ms\t\n", k, benchd.Ms(a[k]), benchd.Ms(b[k]), ms(a[k]-b[k]))
	}
	nk := []string{"dur", "wait", "lease", "links", "resolv", "nft"}
	att := phases(withNet, "attached network", nk...)
	fmt.Fprintln(tw, "  network attach (inside run)\t\t\t\t")
	for _, k := range nk {
		fmt.Fprintf(tw, "    %s\t%s\t\t\t\n", k, benchd.Ms(att[k]))
	}
	tw.Flush()
	return sb.String()
}

// tpResult holds the throughput medians (bytes/s) and every run.
type tpResult struct {
	veth, capped, uncapped          float64
	vethAll, cappedAll, uncappedAll []float64
}

// throughput sends o.mib MiB with netsrv: from the sandbox to the stand-in
// internet's sink (with the large type's rate limit, then with the bench
// having removed it), and between two plain namespaces over a veth, in
// rounds alternating the paths.
func throughput(ctx context.Context, o options, d *benchd.Daemon, sb client.Sandbox, inet *nettest.Internet, netsrv string) (tpResult, error) {
	var r tpResult
	size := int64(o.mib) << 20
	pv, err := newPlainVeth(netsrv)
	if err != nil {
		return r, err
	}
	defer pv.close()
	sink := netip.AddrPortFrom(inet.Web, nettest.SinkPort).String()
	fromSandbox := func() (float64, error) {
		res, err := d.Client.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"/workspace/netsrv", "send", sink, strconv.FormatInt(size, 10)}})
		if err != nil {
			return 0, err
		}
		if res.ExitCode != 0 {
			return 0, fmt.Errorf("netsrv send in the sandbox: exit %d: %s", res.ExitCode, res.Stderr)
		}
		return rate(size, string(res.Stdout))
	}
	for range o.rounds {
		v, err := pv.send(size)
		if err != nil {
			return r, err
		}
		r.vethAll = append(r.vethAll, v)
		c, err := fromSandbox()
		if err != nil {
			return r, err
		}
		r.cappedAll = append(r.cappedAll, c)
	}
	// The NAT path itself: the bench deletes the tbf qdiscs the daemon
	// put on both ends of the sandbox's veth.
	if err := removeRateLimit(d, sb.ID); err != nil {
		return r, err
	}
	for range o.rounds {
		u, err := fromSandbox()
		if err != nil {
			return r, err
		}
		r.uncappedAll = append(r.uncappedAll, u)
	}
	r.veth, r.capped, r.uncapped = median(r.vethAll), median(r.cappedAll), median(r.uncappedAll)
	return r, nil
}

// rate is size over netsrv's printed seconds.
func rate(size int64, out string) (float64, error) {
	s, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
	if err != nil || s <= 0 {
		return 0, fmt.Errorf("netsrv send printed %q", out)
	}
	return float64(size) / s, nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// removeRateLimit deletes the tbf qdiscs of a sandbox's veth: the host
// end (found by its alias) and eth0 in the sandbox's namespace.
func removeRateLimit(d *benchd.Daemon, id string) error {
	links, err := netlink.LinkList()
	if err != nil {
		return err
	}
	var host netlink.Link
	for _, l := range links {
		if l.Attrs().Alias == "stead:"+bridge+":"+id {
			host = l
		}
	}
	if host == nil {
		return fmt.Errorf("no host veth with alias stead:%s:%s", bridge, id)
	}
	delTbf := func(h *netlink.Handle, l netlink.Link) error {
		qs, err := h.QdiscList(l)
		if err != nil {
			return err
		}
		n := 0
		for _, q := range qs {
			if q.Type() == "tbf" {
				if err := h.QdiscDel(q); err != nil {
					return fmt.Errorf("delete tbf on %s: %w", l.Attrs().Name, err)
				}
				n++
			}
		}
		if n == 0 {
			return fmt.Errorf("no tbf on %s", l.Attrs().Name)
		}
		return nil
	}
	hh, err := netlink.NewHandle()
	if err != nil {
		return err
	}
	defer hh.Close()
	if err := delTbf(hh, host); err != nil {
		return err
	}
	ns, err := netns.GetFromPath(filepath.Join(d.RunDir(), "net", "ns", id))
	if err != nil {
		return fmt.Errorf("open the sandbox's netns: %w", err)
	}
	defer ns.Close()
	sh, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer sh.Close()
	eth, err := sh.LinkByName("eth0")
	if err != nil {
		return err
	}
	return delTbf(sh, eth)
}

// plainVeth is two network namespaces joined by a veth: a sink in B (in
// this process, as the stand-in internet's sink is) and netsrv send run
// in A.
type plainVeth struct {
	a, b   netns.NsHandle
	ln     net.Listener
	netsrv string
}

func newPlainVeth(netsrv string) (*plainVeth, error) {
	pv := &plainVeth{netsrv: netsrv, a: -1, b: -1}
	if l, err := netlink.LinkByName(vethA); err == nil {
		_ = netlink.LinkDel(l) // left by a killed run
	}
	var err error
	if pv.a, err = nettest.NewAnonNetNS(); err != nil {
		return nil, err
	}
	if pv.b, err = nettest.NewAnonNetNS(); err != nil {
		pv.close()
		return nil, err
	}
	la := netlink.NewLinkAttrs()
	la.Name = vethA
	la.Namespace = netlink.NsFd(int(pv.a))
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: vethB, PeerNamespace: netlink.NsFd(int(pv.b))}); err != nil {
		pv.close()
		return nil, fmt.Errorf("create veth: %w", err)
	}
	for _, side := range []struct {
		ns   netns.NsHandle
		name string
		addr string
	}{{pv.a, vethA, vethAddrA}, {pv.b, vethB, vethAddrB}} {
		if err := func() error {
			h, err := netlink.NewHandleAt(side.ns)
			if err != nil {
				return err
			}
			defer h.Close()
			l, err := h.LinkByName(side.name)
			if err != nil {
				return err
			}
			if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(side.addr), Mask: net.CIDRMask(24, 32)}}); err != nil {
				return err
			}
			if lo, err := h.LinkByName("lo"); err == nil {
				_ = h.LinkSetUp(lo)
			}
			return h.LinkSetUp(l)
		}(); err != nil {
			pv.close()
			return nil, fmt.Errorf("set up %s: %w", side.name, err)
		}
	}
	if err := nettest.DoIn(pv.b, func() error {
		var err error
		pv.ln, err = net.Listen("tcp", net.JoinHostPort(vethAddrB, strconv.Itoa(nettest.SinkPort)))
		return err
	}); err != nil {
		pv.close()
		return nil, err
	}
	go func() {
		for {
			c, err := pv.ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return pv, nil
}

// send runs netsrv send in namespace A (a child forked from a thread in
// A is in A) and returns bytes/s.
func (pv *plainVeth) send(size int64) (float64, error) {
	var out []byte
	err := nettest.DoIn(pv.a, func() error {
		var err error
		out, err = exec.Command(pv.netsrv, "send", net.JoinHostPort(vethAddrB, strconv.Itoa(nettest.SinkPort)), strconv.FormatInt(size, 10)).Output()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("netsrv send over the plain veth: %w", err)
	}
	return rate(size, string(out))
}

func (pv *plainVeth) close() {
	if pv.ln != nil {
		pv.ln.Close()
	}
	for _, h := range []netns.NsHandle{pv.a, pv.b} {
		if h >= 0 {
			h.Close() // the veth goes with the last namespace
		}
	}
}

// loopbackDial dials 127.0.0.1 for localhost and *.localhost and refuses
// any other name: the bench never asks the machine's resolver.
func loopbackDial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		host = "127.0.0.1"
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return nil, fmt.Errorf("the bench dials addresses only, not %q", host)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, net.JoinHostPort(host, port))
}

// httpRun is one path's requests: latencies and requests/s.
type httpRun struct {
	lat  benchd.Series
	rate float64
	dur  time.Duration
	n    int
}

type httpResult struct{ proxy, direct httpRun }

// proxiedHTTP serves netsrv in the sandbox, exposes its port publicly and
// runs o.requests GETs over o.conns keep-alive connections through the
// proxy (Host routing) and directly to the sandbox's address, two rounds
// each, alternating.
func proxiedHTTP(ctx context.Context, o options, c *client.Client, sb client.Sandbox) (httpResult, error) {
	var r httpResult
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"/workspace/netsrv", "serve", strconv.Itoa(servePort)}, Background: true}); err != nil {
		return r, err
	}
	p, err := c.ExposePort(ctx, sb.ID, servePort, client.ExposePortRequest{Public: true})
	if err != nil {
		return r, err
	}
	direct := fmt.Sprintf("http://%s/", net.JoinHostPort(sb.Address, strconv.Itoa(servePort)))
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: loopbackDial,
		MaxIdleConnsPerHost: o.conns, MaxConnsPerHost: o.conns}}
	for _, u := range []string{direct, p.URL} {
		if err := waitHTTP(hc, u, "hello", 20*time.Second, 20*time.Millisecond); err != nil {
			return r, err
		}
	}
	for round := range 3 { // round 0 warms both paths up and is not counted
		for _, side := range []struct {
			url string
			run *httpRun
		}{{direct, &r.direct}, {p.URL, &r.proxy}} {
			n := o.requests
			if round == 0 {
				n = o.requests / 4
			}
			lat, dur, err := load(hc, side.url, n, o.conns)
			if err != nil {
				return r, err
			}
			if round > 0 {
				side.run.lat.D = append(side.run.lat.D, lat...)
				side.run.dur += dur
				side.run.n += n
			}
		}
	}
	for _, run := range []*httpRun{&r.direct, &r.proxy} {
		run.rate = float64(run.n) / run.dur.Seconds()
	}
	return r, nil
}

// load runs n GETs of url over conns concurrent workers sharing hc.
func load(hc *http.Client, url string, n, conns int) ([]time.Duration, time.Duration, error) {
	var mu sync.Mutex
	var all []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := range conns {
		wg.Go(func() {
			var mine []time.Duration
			for i := w; i < n; i += conns {
				s := time.Now()
				resp, err := hc.Get(url)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("GET %s: %s", url, resp.Status)
					}
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(s))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all, time.Since(t0), firstErr
}

// waitHTTP polls url every so often until it answers 200 with want in
// its body.
func waitHTTP(hc *http.Client, url, want string, timeout, every time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if err := getOnce(hc, url, want); err == nil {
			return nil
		} else {
			last = err.Error()
		}
		time.Sleep(every)
	}
	return fmt.Errorf("GET %s: %s", url, last)
}

func getOnce(hc *http.Client, url, want string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
		return fmt.Errorf("%s: %.200s", resp.Status, b)
	}
	return nil
}

type wakeResult struct{ stopped, paused, start, resume benchd.Series }

// wake measures the first proxied answer of a sandbox with auto_resume
// whose service serves the exposed port, after a stop and after a pause,
// each on a new connection; and, as the peer, the same sandbox started or
// resumed through the API, then polled directly at its address until it
// answers.
func wake(ctx context.Context, o options, c *client.Client, netsrv string) (wakeResult, error) {
	var r wakeResult
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "bench-wake", AutoResume: true, IdleTimeout: "0", NoStart: true,
		Service: &client.Service{Command: []string{"/workspace/netsrv", "serve", strconv.Itoa(servePort)}}})
	if err != nil {
		return r, err
	}
	if err := install(ctx, c, sb.ID, netsrv); err != nil {
		return r, err
	}
	if sb, err = c.StartSandbox(ctx, sb.ID); err != nil {
		return r, err
	}
	p, err := c.ExposePort(ctx, sb.ID, servePort, client.ExposePortRequest{Public: true})
	if err != nil {
		return r, err
	}
	direct := fmt.Sprintf("http://%s/", net.JoinHostPort(sb.Address, strconv.Itoa(servePort)))
	hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DialContext: loopbackDial, DisableKeepAlives: true}}
	if err := waitHTTP(hc, p.URL, "hello", 20*time.Second, 20*time.Millisecond); err != nil {
		return r, err
	}
	poll := func(url string) error { return waitHTTP(hc, url, "hello", 30*time.Second, 2*time.Millisecond) }
	for range o.wakes {
		if _, err := c.StopSandbox(ctx, sb.ID); err != nil {
			return r, err
		}
		t0 := time.Now()
		if err := getOnce(hc, p.URL, "hello"); err != nil {
			return r, fmt.Errorf("first request to a stopped sandbox: %w", err)
		}
		r.stopped.D = append(r.stopped.D, time.Since(t0))

		if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
			return r, err
		}
		t0 = time.Now()
		if err := getOnce(hc, p.URL, "hello"); err != nil {
			return r, fmt.Errorf("first request to a paused sandbox: %w", err)
		}
		r.paused.D = append(r.paused.D, time.Since(t0))

		// The peers: the API wakes it, the client polls the address.
		if _, err := c.StopSandbox(ctx, sb.ID); err != nil {
			return r, err
		}
		t0 = time.Now()
		if _, err := c.StartSandbox(ctx, sb.ID); err != nil {
			return r, err
		}
		if err := poll(direct); err != nil {
			return r, err
		}
		r.start.D = append(r.start.D, time.Since(t0))
		if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
			return r, err
		}
		t0 = time.Now()
		if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
			return r, err
		}
		if err := poll(direct); err != nil {
			return r, err
		}
		r.resume.D = append(r.resume.D, time.Since(t0))
	}
	return r, nil
}
