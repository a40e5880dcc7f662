package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/portproxy"
	"github.com/stead-dev/stead/internal/store"
)

// portBackend is one node's port proxy backend: it knows the sandboxes it
// runs (their app listens on 127.0.0.1) and no others.
type portBackend struct {
	node string
	runs map[string]bool
}

func (b portBackend) Target(_ context.Context, id string, _ int) (portproxy.Target, error) {
	if !b.runs[id] {
		return portproxy.Target{}, fmt.Errorf("sandbox %s is not on %s: %w", id, b.node, errs.ErrNotFound)
	}
	return portproxy.Target{SandboxID: id, Tenant: store.DefaultTenant, Addr: netip.MustParseAddr("127.0.0.1"),
		Exposed: true, Public: true, State: "running"}, nil
}
func (portBackend) Authorize(context.Context, string, string) error { return errs.ErrUnauthenticated }
func (portBackend) CheckToken(string, int, string) bool             { return false }
func (portBackend) Wake(context.Context, string) error              { return nil }
func (portBackend) NoteActivity(string)                             {}

func TestPortProxyPathIsForwardedToTheOwner(t *testing.T) {
	st := openStore(t)
	// The app in sb-1, on node-b's side: it streams two chunks.
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "app saw %s prefix %s\n", r.URL.Path, r.Header.Get("X-Forwarded-Prefix"))
		w.(http.Flusher).Flush()
	}))
	t.Cleanup(app.Close)
	_, port, _ := net.SplitHostPort(app.Listener.Addr().String())
	clk := &clock{now: time.Now()}
	start := func(name string, runs map[string]bool) (*Router, *httptest.Server) {
		r, err := NewRouter(RouterOptions{Store: st, Node: name, Secret: testSecret, Grace: 30 * time.Second, Clock: clk.Now,
			InstanceTypes: testTypes, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		p := portproxy.New(portproxy.Options{Backend: portBackend{node: name, runs: runs}, Logger: slog.New(slog.DiscardHandler)})
		mux := http.NewServeMux()
		mux.Handle("/v1/sandboxes/{id}/ports/{port}/", r.ForwardSandboxPaths(p.PathHandler()))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		heartbeat(t, st, name, srv.Listener.Addr().String(), roomy, time.Now())
		return r, srv
	}
	ra, a := start("node-a", nil)
	_, b := start("node-b", map[string]bool{"sb-1": true})
	addSandbox(t, st, "sb-1", "one", "node-b")
	get := func(srv *httptest.Server, path string, prep func(*http.Request)) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, srv.URL+path, nil)
		if prep != nil {
			prep(req)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	path := "/v1/sandboxes/sb-1/ports/" + port + "/hello"
	want := "app saw /hello prefix /v1/sandboxes/sb-1/ports/" + port + "\n"
	for _, srv := range []*httptest.Server{a, b} {
		if code, body := get(srv, path, nil); code != http.StatusOK || body != want {
			t.Fatalf("via %s: %d %q, want %q", srv.URL, code, body, want)
		}
	}
	// A forged node call to node-b is refused, not proxied.
	code, body := get(b, path, func(r *http.Request) { newAuth(t, "node-a", otherSecret, time.Now()).Sign(r) })
	if code != http.StatusUnauthorized || !strings.Contains(body, "bad signature") {
		t.Fatalf("forged: %d %s", code, body)
	}
	// The owner's death: within a second node-a still routes to it (its
	// answer is kept), then serves the request itself (here: its proxy
	// does not run sb-1, so 404).
	b.Close()
	heartbeat(t, st, "node-b", "127.0.0.1:1", roomy, clk.Now().Add(-time.Minute))
	if to, err := ra.RouteID(t.Context(), "sb-1"); err != nil || to.Node != "node-b" {
		t.Fatalf("RouteID within a second: %+v, %v; want node-b still", to, err)
	}
	clk.Add(idRouteTTL)
	if to, err := ra.RouteID(t.Context(), "sb-1"); err != nil || !to.Here() {
		t.Fatalf("RouteID after the owner died: %+v, %v", to, err)
	}
	if code, _ := get(a, path, nil); code != http.StatusNotFound {
		t.Fatalf("after the owner died: %d, want node-a's own 404", code)
	}
}

func TestForwardIsFullDuplex(t *testing.T) {
	// An app that answers at once and reads the upload afterwards (as a
	// sandbox's app behind the port proxy may): the entry node must pass
	// the answer's headers on while the body still flows.
	st := openStore(t)
	start := func(name string, next http.Handler) *httptest.Server {
		r, err := NewRouter(RouterOptions{Store: st, Node: name, Secret: testSecret, Grace: 30 * time.Second,
			InstanceTypes: testTypes, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		srv := httptest.NewServer(r.ForwardSandboxPaths(next))
		t.Cleanup(srv.Close)
		heartbeat(t, st, name, srv.Listener.Addr().String(), roomy, time.Now())
		return srv
	}
	a := start("node-a", http.NotFoundHandler())
	start("node-b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			t.Error(err)
		}
		w.WriteHeader(http.StatusAccepted)
		w.(http.Flusher).Flush()
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "read %d bytes, err %v", n, err)
	}))
	addSandbox(t, st, "sb-1", "one", "node-b")
	pr, pw := io.Pipe()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	go func() { <-ctx.Done(); pw.CloseWithError(ctx.Err()) }() // the client's transport waits for its body
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.URL+"/v1/sandboxes/sb-1/ports/80/upload", pr)
	// Small enough (under the server's 256 KiB) that a server not in full
	// duplex would swallow the rest of it once the answer began, waiting
	// for the client, which waits for the answer.
	req.ContentLength = 64 << 10
	go func() { _, _ = pw.Write(make([]byte, 32<<10)) }()
	res, err := http.DefaultClient.Do(req) // returns with the headers
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d", res.StatusCode)
	}
	// Only now the second half of the body.
	if _, err := pw.Write(make([]byte, 32<<10)); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || string(body) != "read 65536 bytes, err <nil>" {
		t.Fatalf("answer %q, %v", body, err)
	}
}

func TestPortProxyHostRouteIsForwardedToTheOwnerWebsocketsIncluded(t *testing.T) {
	st := openStore(t)
	const domain = "proxy.test"
	// The app in sb-1, on node-b's side: it names what it saw, and echoes
	// bytes back on an upgraded connection.
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "echo" {
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "echo")
			w.WriteHeader(http.StatusSwitchingProtocols)
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_ = rw.Flush()
			_, _ = io.Copy(conn, rw)
			return
		}
		fmt.Fprintf(w, "app saw %s host %s\n", r.URL.Path, r.Header.Get("X-Forwarded-Host"))
	}))
	t.Cleanup(app.Close)
	_, port, _ := net.SplitHostPort(app.Listener.Addr().String())
	host := port + "-sb-1." + domain
	// Each node: its API listener (registered; it takes the host-routed
	// node calls) and its port proxy's own listener (forwarding in front).
	start := func(name string, runs map[string]bool) *httptest.Server {
		r, err := NewRouter(RouterOptions{Store: st, Node: name, Secret: testSecret, Grace: 30 * time.Second,
			InstanceTypes: testTypes, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		p := portproxy.New(portproxy.Options{Backend: portBackend{node: name, runs: runs}, Domain: domain, Logger: slog.New(slog.DiscardHandler),
			Front: r.ForwardSandbox(func(req *http.Request) (string, bool) { return portproxy.SandboxOf(req, domain) })})
		hostOf := func(req *http.Request) (string, bool) { return portproxy.HostSandbox(req, domain) }
		mux := http.NewServeMux() // the API listener's, as the daemon's
		mux.Handle("/v1/sandboxes/{id}/ports/{port}/", r.ForwardSandboxPaths(p.PathHandler()))
		mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "the API of "+name, http.StatusNotFound) })
		apiSrv := httptest.NewServer(r.NodeHostRoutes(hostOf, p.Handler(), mux))
		t.Cleanup(apiSrv.Close)
		proxySrv := httptest.NewServer(p.Server().Handler)
		t.Cleanup(proxySrv.Close)
		heartbeat(t, st, name, apiSrv.Listener.Addr().String(), roomy, time.Now())
		return proxySrv
	}
	a := start("node-a", nil)
	b := start("node-b", map[string]bool{"sb-1": true})
	addSandbox(t, st, "sb-1", "one", "node-b")
	get := func(srv *httptest.Server, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, srv.URL+path, nil)
		if !strings.HasPrefix(path, "/v1/") {
			req.Host = host
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	want := "app saw /hello host " + host + "\n"
	for _, srv := range []*httptest.Server{a, b} {
		if code, body := get(srv, "/hello"); code != http.StatusOK || body != want {
			t.Fatalf("via %s: %d %q, want %q", srv.URL, code, body, want)
		}
	}
	// The path form on the proxy's own listener is forwarded too.
	if code, body := get(a, "/v1/sandboxes/sb-1/ports/"+port+"/p"); code != http.StatusOK || !strings.HasPrefix(body, "app saw /p host "+a.Listener.Addr().String()) {
		t.Fatalf("path form via node-a's proxy listener: %d %q", code, body)
	}
	// On node-b's API listener, a client's request with such a Host is the
	// API's; a forged node call is refused.
	apiB, _ := st.GetNode(t.Context(), "node-b")
	for _, forge := range []bool{false, true} {
		req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, "http://"+apiB.Address+"/hello", nil)
		req.Host = host
		if forge {
			newAuth(t, "node-a", otherSecret, time.Now()).Sign(req)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusUnauthorized}[forge]; res.StatusCode != want ||
			(!forge && !strings.Contains(string(body), "the API of node-b")) {
			t.Fatalf("node-b's API listener, forged %v: %d %s", forge, res.StatusCode, body)
		}
	}
	// An upgrade through node-a's proxy listener reaches the app on node-b.
	conn, err := net.DialTimeout("tcp", a.Listener.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", host)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade via node-a: %v, %v", res, err)
	}
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo over the upgraded connection: %q, %v", line, err)
	}
}
