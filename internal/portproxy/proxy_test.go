package portproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/stead-dev/stead/internal/errs"
)

const (
	testDomain  = "stead.localhost"
	testSandbox = "sb-1a2b3c4d"
	keyGood     = "key-good"
	keyOther    = "key-other-tenant"
	tokenGood   = "tok-1"
)

// echo is what the test app answers: what it received.
type echo struct {
	Path        string      `json:"path"`
	EscapedPath string      `json:"escaped_path"`
	Query       string      `json:"query"`
	Host        string      `json:"host"`
	Proto       int         `json:"proto"`
	Header      http.Header `json:"header"`
}

// fixture is a proxy in front of two apps on 127.0.0.1: a private
// exposed port (appPort) and a public one (pubPort), both of sandbox
// testSandbox.
type fixture struct {
	b        *fakeBackend
	p        *Proxy
	srv      *httptest.Server // p.Handler()
	appPort  int
	pubPort  int
	activity atomic.Int64
	release  chan struct{} // lets /stream finish
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{release: make(chan struct{})}
	app := httptest.NewServer(appMux(f.release))
	t.Cleanup(app.Close)
	pub := httptest.NewServer(appMux(f.release))
	t.Cleanup(pub.Close)
	f.appPort = app.Listener.Addr().(*net.TCPAddr).Port
	f.pubPort = pub.Listener.Addr().(*net.TCPAddr).Port
	f.b = &fakeBackend{
		TargetFunc: func(_ context.Context, id string, port int) (Target, error) {
			if id != testSandbox {
				return Target{}, fmt.Errorf("sandbox %s: %w", id, errs.ErrNotFound)
			}
			t := Target{SandboxID: testSandbox, Tenant: "t1", Addr: loopback(), State: stateRunning}
			switch port {
			case f.appPort:
				t.Exposed = true
			case f.pubPort:
				t.Exposed, t.Public = true, true
			}
			return t, nil
		},
		AuthorizeFunc: func(_ context.Context, key, id string) error {
			switch key {
			case keyGood:
				return nil
			case keyOther:
				return fmt.Errorf("sandbox %s: %w", id, errs.ErrNotFound)
			}
			return fmt.Errorf("key: %w", errs.ErrUnauthenticated)
		},
		CheckTokenFunc: func(id string, port int, token string) bool {
			return id == testSandbox && port == f.appPort && token == tokenGood
		},
		NoteActivityFunc: func(string) { f.activity.Add(1) },
	}
	f.p = New(Options{Backend: f.b, Domain: testDomain, Logger: testLogger(t), WakeTimeout: 5 * time.Second})
	f.srv = httptest.NewServer(f.p.Handler())
	t.Cleanup(f.srv.Close)
	t.Cleanup(func() {
		select {
		case <-f.release:
		default:
			close(f.release)
		}
	})
	return f
}

// appMux is the app in a test sandbox.
func appMux(release <-chan struct{}) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(echo{
			Path: r.URL.Path, EscapedPath: r.URL.EscapedPath(), Query: r.URL.RawQuery,
			Host: r.Host, Proto: r.ProtoMajor, Header: r.Header,
		})
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: second\n\n")
	})
	// A slow body of known length: ReverseProxy flushes it as it comes
	// only with FlushInterval -1.
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", "25")
		_, _ = io.WriteString(w, "data: first\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: second")
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer func() { _ = c.CloseNow() }()
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo:"), b...)); err != nil {
				return
			}
		}
	})
	return mux
}

// testLogger logs through t.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// noRedirect is a client that returns redirects instead of following them.
func noRedirect() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// pathURL is the path-routed URL of port, plus rest.
func (f *fixture) pathURL(port int, rest string) string {
	return fmt.Sprintf("%s/v1/sandboxes/%s/ports/%d%s", f.srv.URL, testSandbox, port, rest)
}

// hostReq is a host-routed request for port.
func (f *fixture) hostReq(t *testing.T, port int, pathQuery string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+pathQuery, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = fmt.Sprintf("%d-%s.%s:8443", port, testSandbox, testDomain)
	return req
}

// do sends req and returns the response with its body read.
func do(t *testing.T, c *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	if c == nil {
		c = noRedirect()
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, b
}

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return do(t, nil, req)
}

// decodeEcho returns a function decoding what the app echoed in a 200
// response (a function, so that it takes get's and do's two results).
func decodeEcho(t *testing.T) func(resp *http.Response, body []byte) echo {
	return func(resp *http.Response, body []byte) echo {
		t.Helper()
		return decodeEchoOf(t, resp, body)
	}
}

func decodeEchoOf(t *testing.T, resp *http.Response, body []byte) echo {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", resp.StatusCode, body)
	}
	var e echo
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("decode echo %q: %v", body, err)
	}
	return e
}

// wantProblem checks that a response is a problem document of status.
func wantProblem(t *testing.T, resp *http.Response, body []byte, status int) problem {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("decode problem %q: %v", body, err)
	}
	if p.Status != status || p.Title != http.StatusText(status) || p.Detail == "" {
		t.Fatalf("problem %+v, want status %d with title and detail", p, status)
	}
	return p
}

func TestHostRoutingKeepsPathAndSetsForwardedHeaders(t *testing.T) {
	f := newFixture(t)
	req := f.hostReq(t, f.appPort, "/a/b%2Fc?x=1")
	req.Header.Set("Authorization", "Bearer "+keyGood)
	req.Header.Set("X-Forwarded-For", "6.6.6.6") // a client's claim is not passed on
	e := decodeEcho(t)(do(t, nil, req))
	if e.EscapedPath != "/a/b%2Fc" || e.Query != "x=1" {
		t.Errorf("app got %q ? %q, want /a/b%%2Fc ? x=1", e.EscapedPath, e.Query)
	}
	if got := e.Header.Get("X-Forwarded-Host"); got != req.Host {
		t.Errorf("X-Forwarded-Host %q, want %q", got, req.Host)
	}
	if got := e.Header.Get("X-Forwarded-Proto"); got != "http" {
		t.Errorf("X-Forwarded-Proto %q, want http", got)
	}
	if got := e.Header.Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For %q, want 127.0.0.1", got)
	}
	if got := e.Header.Get("X-Forwarded-Prefix"); got != "" {
		t.Errorf("X-Forwarded-Prefix %q on a host-routed request", got)
	}
}

func TestHostRoutingIsCaseInsensitive(t *testing.T) {
	f := newFixture(t)
	req := f.hostReq(t, f.pubPort, "/")
	req.Host = strings.ToUpper(req.Host)
	decodeEcho(t)(do(t, nil, req))
}

func TestPathRoutingStripsPrefix(t *testing.T) {
	f := newFixture(t)
	e := decodeEcho(t)(get(t, f.pathURL(f.appPort, "/a/b%2Fc/?x=1&y=%20"), map[string]string{"X-API-Key": keyGood}))
	if e.EscapedPath != "/a/b%2Fc/" || e.Query != "x=1&y=%20" {
		t.Errorf("app got %q ? %q, want /a/b%%2Fc/ ? x=1&y=%%20", e.EscapedPath, e.Query)
	}
	want := fmt.Sprintf("/v1/sandboxes/%s/ports/%d", testSandbox, f.appPort)
	if got := e.Header.Get("X-Forwarded-Prefix"); got != want {
		t.Errorf("X-Forwarded-Prefix %q, want %q", got, want)
	}
	e = decodeEcho(t)(get(t, f.pathURL(f.appPort, "/"), map[string]string{"X-API-Key": keyGood}))
	if e.Path != "/" {
		t.Errorf("app got %q for the prefix with a slash, want /", e.Path)
	}
}

func TestPathRoutingRedirectsBarePrefix(t *testing.T) {
	f := newFixture(t)
	resp, body := get(t, f.pathURL(f.appPort, "?x=1"), nil)
	if resp.StatusCode != http.StatusMovedPermanently {
		t.Fatalf("status %d, want 301: %s", resp.StatusCode, body)
	}
	want := fmt.Sprintf("/v1/sandboxes/%s/ports/%d/?x=1", testSandbox, f.appPort)
	if got := resp.Header.Get("Location"); got != want {
		t.Errorf("Location %q, want %q", got, want)
	}
}

func TestUnroutedRequestIsProblem404(t *testing.T) {
	f := newFixture(t)
	for _, path := range []string{"/", "/v1/sandboxes/" + testSandbox, "/v1/sandboxes/x/ports/0/", "/v1/sandboxes/x/ports/70000/"} {
		resp, body := get(t, f.srv.URL+path, nil)
		wantProblem(t, resp, body, http.StatusNotFound)
	}
	req := f.hostReq(t, f.pubPort, "/")
	req.Host = "stead.localhost" // the domain itself routes nothing
	resp, body := do(t, nil, req)
	wantProblem(t, resp, body, http.StatusNotFound)
}

func TestPrivatePortNeedsCredentials(t *testing.T) {
	f := newFixture(t)
	url := f.pathURL(f.appPort, "/")
	for name, hdr := range map[string]map[string]string{
		"none":         nil,
		"unknown key":  {"Authorization": "Bearer nope"},
		"wrong token":  {TokenHeader: "tok-2"},
		"basic scheme": {"Authorization": "Basic " + keyGood},
		"wrong cookie": {"Cookie": TokenCookie + "=tok-2"},
	} {
		t.Run(name, func(t *testing.T) {
			resp, body := get(t, url, hdr)
			wantProblem(t, resp, body, http.StatusUnauthorized)
			if resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("no WWW-Authenticate on a 401")
			}
		})
	}
	for name, hdr := range map[string]map[string]string{
		"bearer":       {"Authorization": "Bearer " + keyGood},
		"x-api-key":    {"X-API-Key": keyGood},
		"token header": {TokenHeader: tokenGood},
		"cookie":       {"Cookie": TokenCookie + "=" + tokenGood},
		"bad key, good token": {
			"Authorization": "Bearer nope", TokenHeader: tokenGood,
		},
	} {
		t.Run(name, func(t *testing.T) {
			decodeEcho(t)(get(t, url, hdr))
		})
	}
}

func TestTokenQueryRedirectsAndSetsCookieByPath(t *testing.T) {
	f := newFixture(t)
	prefix := fmt.Sprintf("/v1/sandboxes/%s/ports/%d/", testSandbox, f.appPort)

	resp, body := get(t, f.pathURL(f.appPort, "/page?a=1&"+TokenQuery+"="+tokenGood+"&b=2"), nil)
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("status %d, want 302: %s", resp.StatusCode, body)
	}
	if got, want := resp.Header.Get("Location"), prefix+"page?a=1&b=2"; got != want {
		t.Errorf("Location %q, want %q", got, want)
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies %v, want one", cookies)
	}
	c := cookies[0]
	if c.Name != TokenCookie || c.Value != tokenGood || c.Path != prefix || !c.HttpOnly ||
		c.SameSite != http.SameSiteLaxMode || c.Domain != "" || c.Secure {
		t.Errorf("cookie %+v, want %s=%s HttpOnly SameSite=Lax Path=%s without Domain", c, TokenCookie, tokenGood, prefix)
	}

	// A browser: follows the redirect with the cookie, then has it.
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	browser := &http.Client{Jar: jar}
	req, _ := http.NewRequest(http.MethodGet, f.pathURL(f.appPort, "/page?"+TokenQuery+"="+tokenGood), nil)
	e := decodeEcho(t)(do(t, browser, req))
	if e.Path != "/page" || e.Query != "" {
		t.Errorf("after the redirect the app got %q ? %q, want /page", e.Path, e.Query)
	}
	req, _ = http.NewRequest(http.MethodGet, f.pathURL(f.appPort, "/other"), nil)
	e = decodeEcho(t)(do(t, browser, req))
	if e.Header.Get("Cookie") != "" {
		t.Errorf("the app got the cookie %q", e.Header.Get("Cookie"))
	}

	resp, body = get(t, f.pathURL(f.appPort, "/?"+TokenQuery+"=tok-2"), nil)
	wantProblem(t, resp, body, http.StatusUnauthorized)
	if len(resp.Cookies()) != 0 {
		t.Errorf("a wrong token set cookies %v", resp.Cookies())
	}
}

func TestTokenQueryRedirectsAndSetsCookieByHost(t *testing.T) {
	f := newFixture(t)
	resp, body := do(t, nil, f.hostReq(t, f.appPort, "//evil.example/x?"+TokenQuery+"="+tokenGood))
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("status %d, want 302: %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Location"); got != "/.//evil.example/x" {
		t.Errorf("Location %q, want the same host's /.//evil.example/x", got)
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || cookies[0].Path != "/" || cookies[0].Domain != "" || !cookies[0].HttpOnly {
		t.Fatalf("cookies %+v, want one host-only HttpOnly cookie on /", cookies)
	}
	req := f.hostReq(t, f.appPort, "/x")
	req.AddCookie(cookies[0])
	req.AddCookie(&http.Cookie{Name: "app", Value: "kept"})
	e := decodeEcho(t)(do(t, nil, req))
	if got := e.Header.Get("Cookie"); got != "app=kept" {
		t.Errorf("the app got Cookie %q, want only app=kept", got)
	}
}

func TestCredentialsNeverReachTheApp(t *testing.T) {
	f := newFixture(t)
	for _, port := range []int{f.appPort, f.pubPort} {
		req, _ := http.NewRequest(http.MethodGet, f.pathURL(port, "/?keep=1"), nil)
		req.Header.Set("Authorization", "Bearer "+keyGood)
		req.Header.Set("X-API-Key", keyGood)
		req.Header.Set(TokenHeader, tokenGood)
		req.Header.Set("Cookie", "a=1; "+TokenCookie+"="+tokenGood+"; b=2")
		e := decodeEcho(t)(do(t, nil, req))
		for _, h := range []string{"Authorization", "X-Api-Key", TokenHeader} {
			if v := e.Header.Values(h); len(v) > 0 {
				t.Errorf("port %d: the app got %s: %q", port, h, v)
			}
		}
		if got := e.Header.Get("Cookie"); got != "a=1; b=2" {
			t.Errorf("port %d: the app got Cookie %q, want a=1; b=2", port, got)
		}
		if e.Query != "keep=1" {
			t.Errorf("port %d: the app got query %q", port, e.Query)
		}
	}
	// A token in the query of a public port is removed too.
	e := decodeEcho(t)(get(t, f.pathURL(f.pubPort, "/?a=1&"+TokenQuery+"=x"), nil))
	if e.Query != "a=1" {
		t.Errorf("the public app got query %q, want a=1", e.Query)
	}
}

func TestPublicPortNeedsNothing(t *testing.T) {
	f := newFixture(t)
	decodeEcho(t)(get(t, f.pathURL(f.pubPort, "/"), nil))
	decodeEcho(t)(do(t, nil, f.hostReq(t, f.pubPort, "/")))
}

func TestUnknownSandboxOtherTenantAndUnexposedPortAreTheSame404(t *testing.T) {
	f := newFixture(t)
	port := f.appPort
	url := f.pathURL(port, "/")
	target := f.b.TargetFunc
	var bodies []string
	check := func(name string, hdr map[string]string) {
		resp, body := get(t, url, hdr)
		wantProblem(t, resp, body, http.StatusNotFound)
		bodies = append(bodies, string(body))
		if len(bodies) > 1 && bodies[0] != string(body) {
			t.Errorf("%s: 404 body %s differs from %s", name, body, bodies[0])
		}
	}
	check("another tenant's key", map[string]string{"Authorization": "Bearer " + keyOther})
	f.b.TargetFunc = func(context.Context, string, int) (Target, error) {
		return Target{}, fmt.Errorf("x: %w", errs.ErrNotFound)
	}
	check("unknown sandbox", map[string]string{"Authorization": "Bearer " + keyGood})
	f.b.TargetFunc = func(ctx context.Context, id string, p int) (Target, error) {
		t, err := target(ctx, id, p)
		t.Exposed = false
		return t, err
	}
	check("unexposed port", map[string]string{"Authorization": "Bearer " + keyGood})
	check("unexposed port, no key", nil)
}

func TestWebSocketThroughProxy(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(f.pathURL(f.appPort, "/ws"), "http")
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{TokenHeader: {tokenGood}}})
	if err != nil {
		t.Fatalf("dial websocket through the proxy: %v", err)
	}
	defer func() { _ = c.CloseNow() }()
	for _, msg := range []string{"hello", "world"} {
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != "echo:"+msg {
			t.Errorf("got %q, want echo:%s", b, msg)
		}
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
}

func TestStreamedResponseArrivesBeforeHandlerEnds(t *testing.T) {
	for _, path := range []string{"/stream", "/slow"} {
		t.Run(path[1:], func(t *testing.T) {
			f := newFixture(t)
			type first struct {
				resp *http.Response
				line string
				br   *bufio.Reader
				err  error
			}
			got := make(chan first, 1)
			go func() {
				resp, err := http.Get(f.pathURL(f.pubPort, path))
				if err != nil {
					got <- first{err: err}
					return
				}
				br := bufio.NewReader(resp.Body)
				l, err := br.ReadString('\n')
				got <- first{resp: resp, line: l, br: br, err: err}
			}()
			var fst first
			select {
			case fst = <-got:
			case <-time.After(2 * time.Second):
				t.Fatal("the first chunk did not arrive while the app's handler was still running")
			}
			if fst.resp != nil {
				defer func() { _ = fst.resp.Body.Close() }()
			}
			if fst.err != nil || fst.line != "data: first\n" {
				t.Fatalf("first line %q, %v", fst.line, fst.err)
			}
			close(f.release)
			rest, err := io.ReadAll(fst.br)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(rest), "data: second") {
				t.Errorf("rest %q lacks the second chunk", rest)
			}
		})
	}
}

func TestActivityNotedPerRequestAndWhileStreaming(t *testing.T) {
	f := newFixture(t)
	f.p.actEvery = time.Millisecond
	decodeEcho(t)(get(t, f.pathURL(f.pubPort, "/"), nil))
	if n := f.activity.Load(); n < 1 {
		t.Fatalf("NoteActivity called %d times for a request, want at least 1", n)
	}
	// A websocket's traffic is activity while it flows.
	before := f.activity.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(f.pathURL(f.pubPort, "/ws"), "http")
	c, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.CloseNow() }()
	for i := 0; i < 5; i++ {
		time.Sleep(3 * time.Millisecond)
		if err := c.Write(ctx, websocket.MessageBinary, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Read(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.activity.Load() - before; n < 3 {
		t.Errorf("NoteActivity called %d times during a busy websocket, want several", n)
	}
}

func TestProxyErrorsWhenNothingListens(t *testing.T) {
	f := newFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	f.b.TargetFunc = func(context.Context, string, int) (Target, error) {
		return Target{SandboxID: testSandbox, Addr: loopback(), State: stateRunning, Exposed: true, Public: true}, nil
	}
	resp, body := get(t, f.pathURL(port, "/"), nil)
	wantProblem(t, resp, body, http.StatusBadGateway)
}

func TestBackendFailureIsNot404(t *testing.T) {
	f := newFixture(t)
	f.b.TargetFunc = func(context.Context, string, int) (Target, error) {
		return Target{}, errors.New("store is down")
	}
	resp, body := get(t, f.pathURL(f.appPort, "/"), nil)
	wantProblem(t, resp, body, http.StatusBadGateway)
}

// concurrently runs fn n times at once and waits for all.
func concurrently(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	wg.Wait()
}
