package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// faultRouter is a Router whose every answer a test sets, to inject the
// faults the real one (cluster.Router, tested with real nodes in
// internal/cluster) cannot be made to produce on demand.
type faultRouter struct {
	mu        sync.Mutex
	routed    []string
	placed    []client.CreateSandboxRequest
	forwarded []Peer
	done      int

	VerifyFunc func(r *http.Request) (string, error)
	RouteFunc  func(tenant, ref string) (Peer, error)
	// RouteVolumeFunc and RouteOperationFunc answer RouteVolume and
	// RouteOperation (nil: here).
	RouteVolumeFunc    func(tenant, ref string) (Peer, error)
	RouteOperationFunc func(id string) (Peer, error)
	PlaceFunc          func(req client.CreateSandboxRequest) (Peer, error)
	ForwardFunc        func(w http.ResponseWriter, r *http.Request, to Peer) error
}

func (f *faultRouter) Verify(r *http.Request) (string, error) {
	if f.VerifyFunc != nil {
		return f.VerifyFunc(r)
	}
	return "", nil
}

func (f *faultRouter) Route(_ context.Context, tenant, ref string) (Peer, error) {
	f.mu.Lock()
	f.routed = append(f.routed, tenant+"/"+ref)
	f.mu.Unlock()
	if f.RouteFunc != nil {
		return f.RouteFunc(tenant, ref)
	}
	return Peer{}, nil
}

func (f *faultRouter) RouteVolume(_ context.Context, tenant, ref string) (Peer, error) {
	f.mu.Lock()
	f.routed = append(f.routed, "volume:"+tenant+"/"+ref)
	f.mu.Unlock()
	if f.RouteVolumeFunc != nil {
		return f.RouteVolumeFunc(tenant, ref)
	}
	return Peer{}, nil
}

func (f *faultRouter) RouteSnapshot(_ context.Context, tenant, ref string) (Peer, error) {
	f.mu.Lock()
	f.routed = append(f.routed, "snapshot:"+tenant+"/"+ref)
	f.mu.Unlock()
	if f.RouteVolumeFunc != nil { // snapshots go as volumes do here
		return f.RouteVolumeFunc(tenant, ref)
	}
	return Peer{}, nil
}

func (f *faultRouter) RouteOperation(_ context.Context, id string) (Peer, error) {
	f.mu.Lock()
	f.routed = append(f.routed, "operation:"+id)
	f.mu.Unlock()
	if f.RouteOperationFunc != nil {
		return f.RouteOperationFunc(id)
	}
	return Peer{}, nil
}

func (f *faultRouter) Place(_ context.Context, _ string, req client.CreateSandboxRequest) (Peer, func(), error) {
	f.mu.Lock()
	f.placed = append(f.placed, req)
	f.mu.Unlock()
	done := func() { f.mu.Lock(); f.done++; f.mu.Unlock() }
	if f.PlaceFunc != nil {
		to, err := f.PlaceFunc(req)
		if err != nil {
			return Peer{}, nil, err
		}
		return to, done, nil
	}
	return Peer{}, done, nil
}

func (f *faultRouter) Forward(w http.ResponseWriter, r *http.Request, to Peer) error {
	f.mu.Lock()
	f.forwarded = append(f.forwarded, to)
	f.mu.Unlock()
	if f.ForwardFunc != nil {
		return f.ForwardFunc(w, r, to)
	}
	w.Header().Set("X-Forwarded-To", to.Node)
	w.WriteHeader(http.StatusTeapot)
	return nil
}

// statusErr is an error with an HTTP status, as a forward's is.
type statusErr struct {
	status int
	msg    string
}

func (e statusErr) Error() string  { return e.msg }
func (e statusErr) GetStatus() int { return e.status }

// newRoutedServer serves an auditing fake backend with router.
func newRoutedServer(t *testing.T, router Router) (*auditFake, *httptest.Server) {
	t.Helper()
	fb := &auditFake{fakeBackend: &fakeBackend{}}
	h := NewHandler(fb, Options{Logger: slog.New(slog.DiscardHandler), Version: "test", Router: router})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return fb, srv
}

// do sends one request with alice's key and returns the response, its
// body read.
func do(t *testing.T, srv *httptest.Server, method, path, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b)
}

func TestSandboxRoutesGoWhereTheRouterSaysAndOthersStayHere(t *testing.T) {
	fr := &faultRouter{RouteFunc: func(_, ref string) (Peer, error) {
		if ref == "remote" || ref == "a/b" {
			return Peer{Node: "node-b", Address: "10.0.0.2:7879"}, nil
		}
		return Peer{}, nil
	}}
	remote := func(ref string) (Peer, error) {
		if strings.Contains(ref, "remote") {
			return Peer{Node: "node-b", Address: "10.0.0.2:7879"}, nil
		}
		return Peer{}, nil
	}
	fr.RouteVolumeFunc = func(_, ref string) (Peer, error) { return remote(ref) }
	fr.RouteOperationFunc = remote
	fb, srv := newRoutedServer(t, fr)
	for _, tc := range []struct {
		method, path string
		forwarded    bool
	}{
		{http.MethodGet, "/v1/sandboxes/remote", true},
		{http.MethodPost, "/v1/sandboxes/remote/stop", true},
		{http.MethodGet, "/v1/sandboxes/remote/pty", true},
		{http.MethodPut, "/v1/sandboxes/remote/files/content?path=/x", true},
		{http.MethodGet, "/v1/sandboxes/a%2Fb/checkpoints", true},
		{http.MethodGet, "/v1/sandboxes/local", false},
		{http.MethodGet, "/v1/sandboxes", false},
		{http.MethodGet, "/v1/templates", false},
		{http.MethodGet, "/healthz", false},
		{http.MethodPost, "/v1/volumes/vol-remote/push", true},
		{http.MethodGet, "/v1/volumes/vol-remote/snapshots", true},
		{http.MethodDelete, "/v1/volumes/vol-remote", true},
		{http.MethodGet, "/v1/volumes/vol-local", false},
		{http.MethodGet, "/v1/volumes", false},
		{http.MethodGet, "/v1/operations/op-remote-x/events", true},
		{http.MethodGet, "/v1/operations/op-local", false},
	} {
		res, _ := do(t, srv, tc.method, tc.path, "", nil)
		if got := res.Header.Get("X-Forwarded-To") == "node-b"; got != tc.forwarded {
			t.Errorf("%s %s: forwarded %v (status %d), want %v", tc.method, tc.path, got, res.StatusCode, tc.forwarded)
		}
	}
	for _, tc := range []struct {
		method, path, body string
		forwarded          bool
	}{
		{http.MethodPost, "/v1/snapshots/snap-remote/fork", `{"name":"f"}`, true},
		{http.MethodDelete, "/v1/snapshots/snap-remote", "", true},
		{http.MethodDelete, "/v1/snapshots/snap-local", "", false},
		{http.MethodPost, "/v1/volume-snapshots/restore", `{"snapshot":"snap-remote","name":"r"}`, true},
		{http.MethodPost, "/v1/volume-snapshots/restore", `{"volume":"vol-remote","name":"r"}`, false},
	} {
		res, _ := do(t, srv, tc.method, tc.path, tc.body, nil)
		if got := res.Header.Get("X-Forwarded-To") == "node-b"; got != tc.forwarded {
			t.Errorf("%s %s %s: forwarded %v (status %d), want %v", tc.method, tc.path, tc.body, got, res.StatusCode, tc.forwarded)
		}
	}
	fr.mu.Lock()
	defer fr.mu.Unlock()
	want := "t-alice/remote t-alice/remote t-alice/remote t-alice/remote t-alice/a/b t-alice/local" +
		" volume:t-alice/vol-remote volume:t-alice/vol-remote volume:t-alice/vol-remote volume:t-alice/vol-local" +
		" operation:op-remote-x operation:op-local" +
		" snapshot:t-alice/snap-remote snapshot:t-alice/snap-remote snapshot:t-alice/snap-local snapshot:t-alice/snap-remote"
	if got := strings.Join(fr.routed, " "); got != want {
		t.Errorf("routed %q, want %q", got, want)
	}
	// Forwarded calls are recorded by the node that serves them, not here.
	for _, ev := range fb.Events() {
		if strings.Contains(ev.Action, "stop") || strings.Contains(ev.Action, "files") {
			t.Errorf("the entry node recorded a forwarded call: %+v", ev)
		}
	}
}

func TestVerifiedNodeCallIsServedHereAndABadOneNowhere(t *testing.T) {
	fr := &faultRouter{
		VerifyFunc: func(r *http.Request) (string, error) {
			switch r.Header.Get("X-Stead-Node") {
			case "":
				return "", nil
			case "node-a":
				return "node-a", nil
			}
			return "", fmt.Errorf("node call from %s refused: bad signature: %w", r.Header.Get("X-Stead-Node"), errs.ErrUnauthenticated)
		},
		RouteFunc: func(string, string) (Peer, error) { return Peer{Node: "node-b", Address: "x:1"}, nil },
	}
	var forwardedBy string
	fb, srv := newRoutedServer(t, fr)
	fb.LifecycleFunc = func(ctx context.Context, op, tenant, id string) (client.Sandbox, error) {
		forwardedBy, _ = ForwardedBy(ctx)
		return client.Sandbox{ID: id}, nil
	}
	res, _ := do(t, srv, http.MethodPost, "/v1/sandboxes/sb-1/stop", "", map[string]string{"X-Stead-Node": "node-a"})
	if res.StatusCode != http.StatusOK || forwardedBy != "node-a" || len(fr.forwarded) != 0 || len(fr.routed) != 0 {
		t.Fatalf("node call: status %d, forwarded by %q, forwarded again %v, routed %v", res.StatusCode, forwardedBy, fr.forwarded, fr.routed)
	}
	if ev := fb.Events(); len(ev) != 1 || ev[0].Action != "POST /v1/sandboxes/{id}/stop" {
		t.Fatalf("the serving node recorded %+v", ev)
	}
	calls := len(fb.Calls())
	res, body := do(t, srv, http.MethodPost, "/v1/sandboxes/sb-1/stop", "", map[string]string{"X-Stead-Node": "mallory"})
	if res.StatusCode != http.StatusUnauthorized || res.Header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(body, "node call from mallory refused: bad signature") {
		t.Fatalf("bad node call: %d %s", res.StatusCode, body)
	}
	if len(fb.Calls()) != calls || len(fr.forwarded) != 0 || len(fb.Events()) != 1 {
		t.Fatalf("a bad node call was served (%v), forwarded (%v) or recorded (%v)", fb.Calls(), fr.forwarded, fb.Events())
	}
}

func TestForwardFailuresAreProblemsRecordedHere(t *testing.T) {
	fr := &faultRouter{
		RouteFunc: func(_, ref string) (Peer, error) {
			if ref == "broken-store" {
				return Peer{}, errors.New("store unreachable")
			}
			return Peer{Node: "node-c", Address: "10.0.0.3:7879"}, nil
		},
		ForwardFunc: func(http.ResponseWriter, *http.Request, Peer) error {
			return statusErr{http.StatusServiceUnavailable, "node node-c (10.0.0.3:7879), which must serve this request, cannot be reached: connection refused"}
		},
	}
	fb, srv := newRoutedServer(t, fr)
	res, body := do(t, srv, http.MethodPost, "/v1/sandboxes/sb-9/stop", "", nil)
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusServiceUnavailable || p.Status != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" ||
		!strings.Contains(p.Detail, "node node-c (10.0.0.3:7879)") {
		t.Fatalf("unreachable owner: %d %s", res.StatusCode, body)
	}
	res, body = do(t, srv, http.MethodGet, "/v1/sandboxes/broken-store", "", nil)
	if res.StatusCode != http.StatusInternalServerError || strings.Contains(body, "store unreachable") {
		t.Fatalf("route error: %d %s (internals must not leak)", res.StatusCode, body)
	}
	ev := fb.Events()
	want := AuditEvent{Actor: "k1", Tenant: "t-alice", Action: "POST /v1/sandboxes/{id}/stop", Target: "sb-9", Status: http.StatusServiceUnavailable}
	if len(ev) != 1 || ev[0] != want {
		t.Fatalf("recorded %+v, want %+v (a GET is never recorded)", ev, want)
	}
	if len(fb.Calls()) != 0 {
		t.Fatalf("served here: %v", fb.Calls())
	}
}

func TestCreateIsPlacedWithItsBodyIntact(t *testing.T) {
	fr := &faultRouter{PlaceFunc: func(req client.CreateSandboxRequest) (Peer, error) {
		switch req.InstanceType {
		case "large":
			return Peer{}, fmt.Errorf("no node has room for a sandbox of 4 cpus: node-a: 1 of 2 cpus free: %w", errs.ErrConflict)
		case "medium":
			return Peer{Node: "node-b", Address: "x:1"}, nil
		}
		return Peer{}, nil
	}}
	fr.ForwardFunc = func(w http.ResponseWriter, r *http.Request, to Peer) error {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		if r.ContentLength != int64(len(b)) {
			return fmt.Errorf("content length %d for %d bytes", r.ContentLength, len(b))
		}
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write(b)
		return nil
	}
	fb, srv := newRoutedServer(t, fr)
	body := `{"name":"web","instance_type":"medium","env":{"K":"` + strings.Repeat("v", 200<<10) + `"}}`
	res, got := do(t, srv, http.MethodPost, "/v1/sandboxes", body, nil)
	if res.StatusCode != http.StatusTeapot || got != body {
		t.Fatalf("forwarded create: %d, body intact %v", res.StatusCode, got == body)
	}
	// Placed here: the route gets the body.
	var gotReq client.CreateSandboxRequest
	fb.CreateSandboxFunc = func(_ context.Context, _ string, req client.CreateSandboxRequest) (client.Sandbox, error) {
		gotReq = req
		return client.Sandbox{ID: "sb-here", Name: req.Name}, nil
	}
	res, _ = do(t, srv, http.MethodPost, "/v1/sandboxes", `{"name":"here","instance_type":"small"}`, nil)
	if res.StatusCode != http.StatusCreated || gotReq.Name != "here" {
		t.Fatalf("create here: %d, backend got %+v", res.StatusCode, gotReq)
	}
	res, got = do(t, srv, http.MethodPost, "/v1/sandboxes", `{"name":"big","instance_type":"large"}`, nil)
	if res.StatusCode != http.StatusConflict || !strings.Contains(got, "node-a: 1 of 2 cpus free") {
		t.Fatalf("no room: %d %s", res.StatusCode, got)
	}
	// Too large or malformed: not placed, the route refuses it here.
	for _, b := range []string{`{"name":`, `{"name":"x","env":{"K":"` + strings.Repeat("v", MaxJSONBodyBytes) + `"}}`} {
		res, _ = do(t, srv, http.MethodPost, "/v1/sandboxes", b, nil)
		if res.StatusCode/100 != 4 {
			t.Fatalf("bad body: %d", res.StatusCode)
		}
	}
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if len(fr.placed) != 3 || fr.done != 2 {
		t.Fatalf("placed %d, done %d; want 3 placed, 2 done (a refused pick has nothing to finish)", len(fr.placed), fr.done)
	}
	var actions []string
	for _, ev := range fb.Events() {
		actions = append(actions, fmt.Sprint(ev.Action, " ", ev.Status))
	}
	if want := "POST /v1/sandboxes 201|POST /v1/sandboxes 409|POST /v1/sandboxes 400|POST /v1/sandboxes 413"; strings.Join(actions, "|") != want {
		t.Fatalf("recorded %q, want %q (the forwarded create is the other node's to record)", strings.Join(actions, "|"), want)
	}
}

func TestSandboxRefTakesTheFirstSegment(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/sandboxes/sb-1":              "sb-1",
		"/v1/sandboxes/sb-1/exec":         "sb-1",
		"/v1/sandboxes/my%2Fname/files":   "my/name",
		"/v1/sandboxes/":                  "",
		"/v1/sandboxes":                   "",
		"/v1/sandboxesx/sb-1":             "",
		"/v1/sandboxes/../templates":      "",
		"/v1/snapshots/snap-1":            "",
		"/v1/sandboxes/sb-1/../sb-2/exec": "sb-1",
	} {
		r := httptest.NewRequest(http.MethodGet, path, nil) // as the server parses it, dot segments kept
		got, ok := sandboxRef(r)
		if got != want || ok != (want != "") {
			t.Errorf("sandboxRef(%q) = %q, %v; want %q", path, got, ok, want)
		}
	}
}

func TestOperationIDsNameTheirNode(t *testing.T) {
	id := OperationID("node-a", "abcdefgh")
	tag, ok := OperationNodeTag(id)
	if !ok || tag != NodeTag("node-a") || tag == NodeTag("node-b") || len(tag) != nodeTagLen {
		t.Fatalf("OperationNodeTag(%q) = %q, %v", id, tag, ok)
	}
	for _, single := range []string{"op-abcdefghijklm", "op-", "op-short-x", "sb-1", "op-abcdefgh-"} {
		if tag, ok := OperationNodeTag(single); ok {
			t.Errorf("OperationNodeTag(%q) = %q, want none", single, tag)
		}
	}
}

func TestReadJSONPutsTheBodyBack(t *testing.T) {
	for _, body := range []string{`{"snapshot":"snap-1","name":"r"}`, `not json`, strings.Repeat("x", MaxJSONBodyBytes+10)} {
		r := httptest.NewRequest(http.MethodPost, "/v1/volume-snapshots/restore", strings.NewReader(body))
		var req client.RestoreVolumeRequest
		ok := readJSON(r, &req)
		if want := strings.HasPrefix(body, "{"); ok != want || (ok && req.Snapshot != "snap-1") {
			t.Errorf("readJSON(%.20q) = %v, %+v", body, ok, req)
		}
		if got, _ := io.ReadAll(r.Body); string(got) != body {
			t.Errorf("the body after readJSON(%.20q) is %d bytes, want %d", body, len(got), len(body))
		}
	}
}
