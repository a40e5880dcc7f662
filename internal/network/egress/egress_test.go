package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/network/policy"
)

// The sandbox's view: it connects to dst (an address of the stand-in
// internet); the test's Dial takes the proxy to the real upstream on
// 127.0.0.1 instead.
var (
	dstHTTP  = netip.MustParseAddrPort("198.18.1.10:80")
	dstTLS   = netip.MustParseAddrPort("198.18.1.10:443")
	sandbox  = "sb1"
	loopback = netip.MustParseAddr("127.0.0.1")
)

// upstream is an HTTP server on 127.0.0.1 that says which Host it got,
// counts requests, streams bodies, and speaks a raw "echo" protocol
// after an Upgrade.
type upstream struct {
	srv      *httptest.Server
	requests atomic.Int64
	hosts    chan string
	// midBody is signalled when /stream has read its first MiB.
	midBody chan struct{}
}

func newUpstream(t *testing.T, useTLS bool) *upstream {
	t.Helper()
	u := &upstream{hosts: make(chan string, 100), midBody: make(chan struct{}, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		u.requests.Add(1)
		u.hosts <- r.Host
		fmt.Fprintf(w, "host=%s", r.Host)
	})
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		u.requests.Add(1)
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "read=%d err=%v", n, err)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		u.requests.Add(1)
		if _, err := io.ReadFull(r.Body, make([]byte, 1<<20)); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		u.midBody <- struct{}{}
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "read=%d", n+1<<20)
	})
	mux.HandleFunc("/download", func(w http.ResponseWriter, r *http.Request) {
		u.requests.Add(1)
		w.Header().Set("Content-Length", fmt.Sprint(64<<20))
		buf := make([]byte, 1<<20)
		for range 64 {
			w.Write(buf)
		}
	})
	mux.HandleFunc("/upgrade", func(w http.ResponseWriter, r *http.Request) {
		u.requests.Add(1)
		if r.Header.Get("Upgrade") != "echo" {
			fmt.Fprint(w, "not upgraded")
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		io.Copy(c, brw)
	})
	if useTLS {
		u.srv = httptest.NewTLSServer(mux)
	} else {
		u.srv = httptest.NewServer(mux)
	}
	t.Cleanup(u.srv.Close)
	return u
}

// harness is a proxy on 127.0.0.1 whose one sandbox owns 127.0.0.1.
type harness struct {
	p         *Proxy
	pol       policy.Policy
	resolved  map[netip.Addr]bool
	forbidden map[netip.Addr]bool
	dst       atomic.Pointer[netip.AddrPort]
	routes    map[netip.AddrPort]string // original destination → real upstream
	mu        sync.Mutex
	refusals  []string
}

func newHarness(t *testing.T, pol client.NetworkPolicy, resolved ...string) *harness {
	t.Helper()
	p, err := policy.Parse(pol)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{pol: p, resolved: map[netip.Addr]bool{}, forbidden: map[netip.Addr]bool{}, routes: map[netip.AddrPort]string{}}
	for _, a := range resolved {
		h.resolved[netip.MustParseAddr(a)] = true
	}
	h.dst.Store(&dstHTTP)
	h.p, err = New(Options{
		Listen: "127.0.0.1:0",
		Lookup: func(src netip.Addr) (string, policy.Policy, bool) {
			return sandbox, h.pol, src == loopback
		},
		Resolved:  func(id string, a netip.Addr) bool { return id == sandbox && h.resolved[a] },
		Forbidden: func(a netip.Addr) bool { return h.forbidden[a] },
		OnRefused: func(id string, dst netip.AddrPort, name string) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.refusals = append(h.refusals, fmt.Sprintf("%s %s %s", id, dst, name))
		},
		OriginalDst: func(*net.TCPConn) (netip.AddrPort, error) { return *h.dst.Load(), nil },
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			real, ok := h.routes[netip.MustParseAddrPort(addr)]
			if !ok {
				return nil, fmt.Errorf("no route to %s in the test", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, real)
		},
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		HeaderTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.p.Close() })
	return h
}

func (h *harness) route(dst netip.AddrPort, u *upstream) {
	h.routes[dst] = u.srv.Listener.Addr().String()
}

func (h *harness) refused() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.refusals)
}

func (h *harness) dial(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", h.p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

func get(host, path string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: test\r\n\r\n"
}

func readResponse(t *testing.T, br *bufio.Reader) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, string(b)
}

func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, req string) (int, string) {
	t.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return readResponse(t, br)
}

var byName = client.NetworkPolicy{Allow: []string{"api.example.test", "*.cdn.test"}, Deny: []string{"bad.cdn.test"}}

func TestHTTPAllowedHostProxied(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, byName, "198.18.1.10")
	h.route(dstHTTP, u)
	c, br := h.dial(t)
	code, body := roundTrip(t, c, br, get("API.example.test:80", "/"))
	if code != 200 || body != "host=API.example.test:80" {
		t.Fatalf("%d %q", code, body)
	}
	// Keep-alive: a second request for an admitted name goes through.
	if code, body := roundTrip(t, c, br, get("x.cdn.test", "/")); code != 200 || body != "host=x.cdn.test" {
		t.Fatalf("second request: %d %q", code, body)
	}
	if r := h.refused(); len(r) != 0 {
		t.Fatalf("refusals %v", r)
	}
}

func TestHTTPOtherHostOnSameAddressRefused(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, byName, "198.18.1.10")
	h.route(dstHTTP, u)
	c, br := h.dial(t)
	code, body := roundTrip(t, c, br, get("evil.test", "/"))
	if code != 403 || !strings.Contains(body, "evil.test") || !strings.Contains(body, "network policy refused") {
		t.Fatalf("%d %q", code, body)
	}
	if u.requests.Load() != 0 {
		t.Fatal("a refused request reached the upstream")
	}
	if r := h.refused(); !slices.Equal(r, []string{"sb1 198.18.1.10:80 evil.test"}) {
		t.Fatalf("refusals %v", r)
	}
}

func TestHTTPNameNotResolvedForAddressRefused(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, byName) // api.example.test never resolved to dst
	h.route(dstHTTP, u)
	c, br := h.dial(t)
	if code, _ := roundTrip(t, c, br, get("api.example.test", "/")); code != 403 {
		t.Fatalf("status %d", code)
	}
}

func TestKeepAliveSecondRequestWithOtherHostRefused(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, byName, "198.18.1.10")
	h.route(dstHTTP, u)
	c, br := h.dial(t)
	if code, _ := roundTrip(t, c, br, get("api.example.test", "/")); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	code, body := roundTrip(t, c, br, get("evil.test", "/"))
	if code != 403 || !strings.Contains(body, "evil.test") {
		t.Fatalf("second request: %d %q", code, body)
	}
	if n := u.requests.Load(); n != 1 {
		t.Fatalf("upstream got %d requests, want 1", n)
	}
}

func TestPipelinedRequestWithOtherHostRefusedAfterEarlierResponses(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, byName, "198.18.1.10")
	h.route(dstHTTP, u)
	c, br := h.dial(t)
	io.WriteString(c, get("api.example.test", "/")+get("a.cdn.test", "/")+get("bad.cdn.test", "/")+get("api.example.test", "/"))
	for _, want := range []string{"host=api.example.test", "host=a.cdn.test"} {
		if code, body := readResponse(t, br); code != 200 || body != want {
			t.Fatalf("%d %q, want %q", code, body, want)
		}
	}
	if code, body := readResponse(t, br); code != 403 || !strings.Contains(body, "bad.cdn.test") {
		t.Fatalf("third: %d %q", code, body)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("connection not closed after the refusal: %v", err)
	}
	if n := u.requests.Load(); n != 2 {
		t.Fatalf("upstream got %d requests, want 2", n)
	}
}

func TestNoNameRefusedWhenAddressAdmittedOnlyByName(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, byName, "198.18.1.10")
	h.route(dstHTTP, u)
	c, br := h.dial(t)
	if code, _ := roundTrip(t, c, br, "GET / HTTP/1.0\r\n\r\n"); code != 403 {
		t.Fatalf("HTTP without Host: %d", code)
	}
	ut := newUpstream(t, true)
	h.dst.Store(&dstTLS)
	h.route(dstTLS, ut)
	c2, err := net.Dial("tcp", h.p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	tc := tls.Client(c2, &tls.Config{InsecureSkipVerify: true}) // no ServerName: no SNI
	if err := tc.Handshake(); err == nil {
		t.Fatal("TLS without SNI admitted")
	}
	if r := h.refused(); len(r) != 2 || r[1] != "sb1 198.18.1.10:443 " {
		t.Fatalf("refusals %q", r)
	}
}

func TestNoNameAdmittedWhenAddressAdmittedByPolicy(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, client.NetworkPolicy{Allow: []string{"198.18.1.0/24", "api.example.test"}})
	h.route(dstHTTP, u)
	c, br := h.dial(t)
	if code, _ := roundTrip(t, c, br, "GET / HTTP/1.0\r\n\r\n"); code != 200 {
		t.Fatalf("HTTP without Host: %d", code)
	}
}

func TestDenyPatternRefusesOnAdmittedAddress(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, client.NetworkPolicy{Allow: []string{"198.18.0.0/15"}, Deny: []string{"*.evil.test"}})
	h.route(dstHTTP, u)
	c, br := h.dial(t)
	if code, _ := roundTrip(t, c, br, get("other.test", "/")); code != 200 {
		t.Fatalf("other name: %d", code)
	}
	if code, _ := roundTrip(t, c, br, get("www.EVIL.test.", "/")); code != 403 {
		t.Fatalf("denied name: %d", code)
	}
	// The request target's authority counts, not only the Host header.
	c, br = h.dial(t)
	if code, _ := roundTrip(t, c, br, "GET http://a.evil.test/ HTTP/1.1\r\n\r\n"); code != 403 {
		t.Fatalf("denied absolute-form target: %d", code)
	}
}

func TestForbiddenAddressRefused(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, client.NetworkPolicy{})
	h.route(dstHTTP, u)
	h.forbidden[dstHTTP.Addr()] = true
	c, br := h.dial(t)
	io.WriteString(c, get("api.example.test", "/"))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("forbidden address answered")
	}
	if u.requests.Load() != 0 || len(h.refused()) != 1 {
		t.Fatalf("requests %d refusals %v", u.requests.Load(), h.refused())
	}
}

func TestUnknownSourceClosed(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, client.NetworkPolicy{})
	h.route(dstHTTP, u)
	// Lookup knows 127.0.0.1 only: connect from 127.0.0.2.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	c, err := d.Dial("tcp", h.p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, get("api.example.test", "/"))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("unknown source answered")
	}
	if u.requests.Load() != 0 {
		t.Fatal("unknown source reached the upstream")
	}
}

func TestSNIAllowedAndRefused(t *testing.T) {
	u := newUpstream(t, true)
	h := newHarness(t, byName, "198.18.1.10")
	h.dst.Store(&dstTLS)
	h.route(dstTLS, u)
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", h.p.Addr().String())
		},
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://api.example.test/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "host=api.example.test" {
		t.Fatalf("body %q", b)
	}
	_, err = hc.Get("https://evil.test/")
	if err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("refused SNI: %v", err)
	}
	if r := h.refused(); !slices.Equal(r, []string{"sb1 198.18.1.10:443 evil.test"}) {
		t.Fatalf("refusals %v", r)
	}
	if u.requests.Load() != 1 {
		t.Fatalf("upstream got %d requests", u.requests.Load())
	}
}

func TestUpgradeThenRawRelay(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, byName, "198.18.1.10")
	h.route(dstHTTP, u)
	c, br := h.dial(t)
	io.WriteString(c, "GET /upgrade HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	// After the switch the bytes are not HTTP to the proxy: a request
	// line with another Host is relayed, not checked.
	raw := get("evil.test", "/") + "\x00\xff binary"
	io.WriteString(c, raw)
	got := make([]byte, len(raw))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != raw {
		t.Fatalf("echo %q %v", got, err)
	}
	// Half-close: the echo server ends when the client's side does.
	c.(*net.TCPConn).CloseWrite()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after half-close: %v", err)
	}
}

func TestUpgradeNotTakenKeepsCheckingHosts(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, byName, "198.18.1.10")
	h.route(dstHTTP, u)
	c, br := h.dial(t)
	io.WriteString(c, "GET /upgrade HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade\r\nUpgrade: other\r\n\r\n")
	if code, body := readResponse(t, br); code != 200 || body != "not upgraded" {
		t.Fatalf("%d %q", code, body)
	}
	if code, _ := roundTrip(t, c, br, get("evil.test", "/")); code != 403 {
		t.Fatalf("request after a refused upgrade: %d", code)
	}
}

func TestLaterUpgradeRefused(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, byName, "198.18.1.10")
	h.route(dstHTTP, u)
	c, br := h.dial(t)
	if code, _ := roundTrip(t, c, br, get("api.example.test", "/")); code != 200 {
		t.Fatal(code)
	}
	if code, _ := roundTrip(t, c, br, "GET /upgrade HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"); code != 403 {
		t.Fatalf("upgrade as the second request: %d", code)
	}
}

func TestLargeBodiesStream(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, byName, "198.18.1.10")
	h.route(dstHTTP, u)
	c, br := h.dial(t)

	// The upstream reads the first MiB before the client sends the rest:
	// the proxy forwards a body as it comes.
	io.WriteString(c, "POST /stream HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 2097152\r\n\r\n")
	c.Write(make([]byte, 1<<20))
	select {
	case <-u.midBody:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream did not get the first half of the body before the second was sent")
	}
	c.Write(make([]byte, 1<<20))
	if code, body := readResponse(t, br); code != 200 || body != "read=2097152" {
		t.Fatalf("%d %q", code, body)
	}

	// 64 MiB up, with Content-Length and chunked, then 64 MiB down.
	const size = 64 << 20
	io.WriteString(c, fmt.Sprintf("POST /upload HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: %d\r\n\r\n", size))
	buf := make([]byte, 1<<20)
	for range size / len(buf) {
		c.Write(buf)
	}
	if code, body := readResponse(t, br); code != 200 || body != fmt.Sprintf("read=%d err=<nil>", size) {
		t.Fatalf("%d %q", code, body)
	}
	io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: chunked\r\n\r\n")
	for range size / len(buf) {
		fmt.Fprintf(c, "%x\r\n", len(buf))
		c.Write(buf)
		io.WriteString(c, "\r\n")
	}
	io.WriteString(c, "0\r\nX-Trailer: 1\r\n\r\n")
	if code, body := readResponse(t, br); code != 200 || body != fmt.Sprintf("read=%d err=<nil>", size) {
		t.Fatalf("chunked: %d %q", code, body)
	}
	io.WriteString(c, get("api.example.test", "/download"))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n != size {
		t.Fatalf("download %d %v", n, err)
	}
	// Still checking Hosts after all that.
	if code, _ := roundTrip(t, c, br, get("evil.test", "/")); code != 403 {
		t.Fatalf("after the bodies: %d", code)
	}
}

func TestMalformedRequestsRefused(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, client.NetworkPolicy{})
	h.route(dstHTTP, u)
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
		"GET / HTTP/1.1\nHost: a.test\n\n\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nHost : a.test\r\n\r\n",
		"GET / HTTP/2.0\r\nHost: a.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket, H2C\r\nConnection: Upgrade\r\n\r\n",
	} {
		c, br := h.dial(t)
		if code, _ := roundTrip(t, c, br, req); code != 400 && code != 403 {
			t.Fatalf("%q: %d", req, code)
		}
	}
	if u.requests.Load() != 0 {
		t.Fatal("a malformed request reached the upstream")
	}
}

// connectUpstream is a raw server that answers a CONNECT with 200 and
// then echoes.
func connectUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
				io.Copy(c, br)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestConnectThenRawRelay(t *testing.T) {
	h := newHarness(t, byName, "198.18.1.10")
	h.routes[dstHTTP] = connectUpstream(t)
	c, br := h.dial(t)
	if code, _ := roundTrip(t, c, br, "CONNECT bad.cdn.test:443 HTTP/1.1\r\nHost: bad.cdn.test:443\r\n\r\n"); code != 403 {
		t.Fatalf("denied CONNECT: %d", code)
	}
	c, br = h.dial(t)
	io.WriteString(c, "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	raw := get("evil.test", "/")
	io.WriteString(c, raw)
	got := make([]byte, len(raw))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != raw {
		t.Fatalf("echo %q %v", got, err)
	}
}

func TestSlowHeadClosedWithoutAnswer(t *testing.T) {
	u := newUpstream(t, false)
	h := newHarness(t, byName, "198.18.1.10")
	h.route(dstHTTP, u)
	c, br := h.dial(t)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.exa")
	start := time.Now()
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("an incomplete head got an answer")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("closed after %v, want about the header timeout", d)
	}
	if u.requests.Load() != 0 {
		t.Fatal("an incomplete head reached the upstream")
	}
}
