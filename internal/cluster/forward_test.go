package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// The tests below run real API handlers (api.NewHandler) of several nodes
// behind real HTTP servers on 127.0.0.1, each with a Router on one real
// store (SQLite), and a test backend per node that says which node served
// a call. The backend is the only stand-in: what is tested is the routing,
// the forwarding and the signing between the nodes.

const aliceKey = "key-alice"

var testTypes = []client.InstanceType{
	{Name: "micro", Limits: client.Limits{CPUs: 0.5, MemoryBytes: 512 << 20, Pids: 256, DiskBytes: 5 << 30}},
	{Name: "small", Limits: client.Limits{CPUs: 1, MemoryBytes: 2 << 30, Pids: 1024, DiskBytes: 10 << 30}},
}

// nodeBackend is one node's api.Backend: the methods the tests call, each
// recording the call; the embedded nil interfaces are never called.
type nodeBackend struct {
	api.Backend
	api.AuditBackend
	node string

	mu      sync.Mutex
	calls   []string
	audited []api.AuditEvent

	exec      func(ctx context.Context, out api.ExecStream) (client.ExecResult, error)
	pty       api.PTY
	writeFile func(r io.Reader) (int64, error)
}

func (b *nodeBackend) record(call string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, call)
}

// Calls returns the calls this node served.
func (b *nodeBackend) Calls() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.calls...)
}

// Audited returns what this node recorded in the audit trail.
func (b *nodeBackend) Audited() []api.AuditEvent {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]api.AuditEvent(nil), b.audited...)
}

func (b *nodeBackend) Authenticate(_ context.Context, secret string) (api.Principal, error) {
	if secret == aliceKey {
		return api.Principal{TenantID: store.DefaultTenant, KeyID: "k-alice"}, nil
	}
	return api.Principal{}, errs.ErrUnauthenticated
}

func (b *nodeBackend) sandbox(tenant, id string) client.Sandbox {
	return client.Sandbox{ID: id, Name: id, Tenant: tenant, State: "running", Labels: map[string]string{"served-by": b.node}}
}

func (b *nodeBackend) GetSandbox(_ context.Context, tenant, id string) (client.Sandbox, error) {
	b.record("GetSandbox " + id)
	return b.sandbox(tenant, id), nil
}

func (b *nodeBackend) ListSandboxes(_ context.Context, tenant string, _ bool) ([]client.Sandbox, error) {
	b.record("ListSandboxes")
	return []client.Sandbox{b.sandbox(tenant, "sb-1")}, nil
}

func (b *nodeBackend) StopSandbox(_ context.Context, tenant, id string) (client.Sandbox, error) {
	b.record("StopSandbox " + id)
	return b.sandbox(tenant, id), nil
}

func (b *nodeBackend) CreateSandbox(_ context.Context, tenant string, req client.CreateSandboxRequest) (client.Sandbox, error) {
	b.record("CreateSandbox " + req.Name + " " + req.InstanceType)
	return b.sandbox(tenant, "sb-"+req.Name), nil
}

func (b *nodeBackend) Exec(ctx context.Context, _, id string, _ client.ExecRequest, out api.ExecStream) (client.ExecResult, error) {
	b.record("Exec " + id)
	return b.exec(ctx, out)
}

func (b *nodeBackend) OpenPTY(_ context.Context, _, id string, _ api.PTYRequest) (api.PTY, error) {
	b.record("OpenPTY " + id)
	return b.pty, nil
}

func (b *nodeBackend) WriteFile(_ context.Context, _, id, path string, mode uint32, r io.Reader) (client.FileInfo, error) {
	b.record("WriteFile " + id)
	n, err := b.writeFile(r)
	return client.FileInfo{Path: path, Type: "file", Size: n, Mode: mode}, err
}

func (b *nodeBackend) RecordAPIRequest(_ context.Context, ev api.AuditEvent) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.audited = append(b.audited, ev)
	return nil
}

// testNode is one node of a test cluster.
type testNode struct {
	name   string
	router *Router
	b      *nodeBackend
	srv    *httptest.Server
	// hits counts the requests that reached the node's server.
	hits atomic.Int64
}

// client returns an API client of alice through this node.
func (n *testNode) client(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(n.srv.URL, aliceKey)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testCluster is nodes on one store.
type testCluster struct {
	st    *sqlite.Store
	nodes map[string]*testNode
}

// newNode starts node name's API on st and registers it with capacity.
func newNode(t *testing.T, st store.Store, name string, c Capacity) *testNode {
	t.Helper()
	return newNodeWith(t, st, name, c, nil)
}

// newNodeWith is newNode with the API served by wrap(the node's backend)
// (nil: the node's backend itself).
func newNodeWith(t *testing.T, st store.Store, name string, c Capacity, wrap func(*nodeBackend) api.Backend) *testNode {
	t.Helper()
	r, err := NewRouter(RouterOptions{Store: st, Node: name, Secret: testSecret, Grace: 30 * time.Second,
		InstanceTypes: testTypes, DefaultInstanceType: "small", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	n := &testNode{name: name, router: r, b: &nodeBackend{node: name}}
	var b api.Backend = n.b
	if wrap != nil {
		b = wrap(n.b)
	}
	h := api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler), Version: "test", Router: r})
	n.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n.hits.Add(1)
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(n.srv.Close)
	heartbeat(t, st, name, n.srv.Listener.Addr().String(), c, time.Now())
	return n
}

// heartbeat registers or refreshes node name at at.
func heartbeat(t *testing.T, st store.NodeStore, name, addr string, c Capacity, at time.Time) {
	t.Helper()
	if _, err := st.HeartbeatNode(t.Context(), store.Node{Name: name, Address: addr, CPUs: c.CPUs, MemoryBytes: c.MemoryBytes,
		PoolFreeBytes: c.PoolFreeBytes, Templates: c.Templates, StartedAt: at, HeartbeatAt: at}); err != nil {
		t.Fatal(err)
	}
}

var roomy = Capacity{CPUs: 8, MemoryBytes: 32 << 30, PoolFreeBytes: 500 << 30}

// newCluster starts nodes on one store.
func newCluster(t *testing.T, names ...string) *testCluster {
	t.Helper()
	c := &testCluster{st: openStore(t), nodes: map[string]*testNode{}}
	for _, name := range names {
		c.nodes[name] = newNode(t, c.st, name, roomy)
	}
	return c
}

// sandbox stores sandbox id (named name) of the default tenant, running
// with a small's limits, owned by owner ("" for none).
func addSandbox(t *testing.T, st store.Store, id, name, owner string) {
	t.Helper()
	if _, err := st.CreateSandbox(t.Context(), store.Sandbox{ID: id, TenantID: store.DefaultTenant, Name: name, TemplateID: "host",
		State: store.StateRunning, Spec: []byte(`{"instance_type":"small","limits":{"cpus":1,"memory_bytes":2147483648,"pids":1024,"disk_bytes":10737418240}}`)}); err != nil {
		t.Fatal(err)
	}
	if owner != "" {
		if _, err := st.AcquireOwnership(t.Context(), id, owner, time.Minute, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
}

// testCtx ends with the test or after 20 s.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCallThroughAnyNodeIsAnsweredByTheOwner(t *testing.T) {
	c := newCluster(t, "node-a", "node-b", "node-c")
	addSandbox(t, c.st, "sb-1", "one", "node-b")
	ctx := testCtx(t)
	for _, via := range []string{"node-a", "node-b", "node-c"} {
		for _, ref := range []string{"sb-1", "one"} {
			sb, err := c.nodes[via].client(t).GetSandbox(ctx, ref)
			if err != nil {
				t.Fatalf("get %s via %s: %v", ref, via, err)
			}
			if sb.Labels["served-by"] != "node-b" {
				t.Fatalf("get %s via %s: served by %s, want node-b", ref, via, sb.Labels["served-by"])
			}
		}
	}
	if calls := c.nodes["node-a"].b.Calls(); len(calls) != 0 {
		t.Fatalf("node-a served %v itself", calls)
	}
	// The list is cluster-wide: served where it is asked.
	list, err := c.nodes["node-a"].client(t).ListSandboxes(ctx, false)
	if err != nil || len(list) != 1 || list[0].Labels["served-by"] != "node-a" {
		t.Fatalf("list via node-a: %+v, %v", list, err)
	}
}

// notifyWriter closes seen once it has received want.
type notifyWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestForwardedExecStreamsOutputBeforeTheProcessEnds(t *testing.T) {
	c := newCluster(t, "node-a", "node-b")
	addSandbox(t, c.st, "sb-1", "one", "node-b")
	stdout := &notifyWriter{want: "chunk 1", seen: make(chan struct{})}
	c.nodes["node-b"].b.exec = func(ctx context.Context, out api.ExecStream) (client.ExecResult, error) {
		if err := out.Stdout([]byte("chunk 1\n")); err != nil {
			return client.ExecResult{}, err
		}
		// The process does not end until the client, through node-a, saw
		// chunk 1.
		select {
		case <-stdout.seen:
		case <-time.After(10 * time.Second):
			return client.ExecResult{}, errors.New("the client never saw chunk 1 while the process ran")
		}
		if err := out.Stdout([]byte("chunk 2\n")); err != nil {
			return client.ExecResult{}, err
		}
		return client.ExecResult{ExitCode: 3}, nil
	}
	var stderr bytes.Buffer
	res, err := c.nodes["node-a"].client(t).ExecStream(testCtx(t), "one", client.ExecRequest{Command: []string{"x"}}, stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || stdout.String() != "chunk 1\nchunk 2\n" {
		t.Fatalf("result %+v, stdout %q", res, stdout.String())
	}
	if calls := c.nodes["node-b"].b.Calls(); len(calls) != 1 || calls[0] != "Exec one" {
		t.Fatalf("node-b served %v", calls)
	}
}

// echoPTY is a terminal that echoes its input; "exit N\n" ends it with
// exit code N.
type echoPTY struct {
	pr   *io.PipeReader
	pw   *io.PipeWriter
	done chan struct{}
	code atomic.Int64
	once sync.Once
}

func newEchoPTY() *echoPTY {
	pr, pw := io.Pipe()
	return &echoPTY{pr: pr, pw: pw, done: make(chan struct{})}
}

func (p *echoPTY) Read(b []byte) (int, error) { return p.pr.Read(b) }

func (p *echoPTY) Write(b []byte) (int, error) {
	if rest, ok := strings.CutPrefix(string(b), "exit "); ok {
		var code int64
		fmt.Sscan(rest, &code)
		_, _ = p.pw.Write([]byte("bye\r\n"))
		p.finish(code)
		return len(b), nil
	}
	return p.pw.Write(b)
}

func (p *echoPTY) finish(code int64) {
	p.once.Do(func() {
		p.code.Store(code)
		_ = p.pw.Close()
		close(p.done)
	})
}

func (p *echoPTY) Resize(rows, cols uint16) error {
	_, err := fmt.Fprintf(p.pw, "resized %dx%d\r\n", rows, cols)
	return err
}

func (p *echoPTY) Close() error { p.finish(129); return nil }

func (p *echoPTY) Wait() (int, error) { <-p.done; return int(p.code.Load()), nil }

func TestForwardedPTYWebsocketPassesThrough(t *testing.T) {
	c := newCluster(t, "node-a", "node-b")
	addSandbox(t, c.st, "sb-1", "one", "node-b")
	c.nodes["node-b"].b.pty = newEchoPTY()
	conn, err := c.nodes["node-a"].client(t).PTY(testCtx(t), "sb-1", client.PTYOptions{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	readUntil := func(want string) {
		t.Helper()
		var got []byte
		buf := make([]byte, 256)
		for !strings.Contains(string(got), want) {
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatalf("read: %v (got %q)", err, got)
			}
			got = append(got, buf[:n]...)
		}
	}
	for _, line := range []string{"hello\r", "again\r"} {
		if _, err := conn.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		readUntil(line)
	}
	if err := conn.Resize(50, 132); err != nil {
		t.Fatal(err)
	}
	readUntil("resized 50x132")
	if _, err := conn.Write([]byte("exit 42\n")); err != nil {
		t.Fatal(err)
	}
	readUntil("bye")
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("read to exit: %v", err)
	}
	if code, ok := conn.ExitCode(); !ok || code != 42 {
		t.Fatalf("exit code %d, %v; want 42", code, ok)
	}
	if calls := c.nodes["node-b"].b.Calls(); len(calls) != 1 || calls[0] != "OpenPTY sb-1" {
		t.Fatalf("node-b served %v", calls)
	}
	if calls := c.nodes["node-a"].b.Calls(); len(calls) != 0 {
		t.Fatalf("node-a served %v", calls)
	}
}

func TestForwardedUploadStreamsTheBody(t *testing.T) {
	c := newCluster(t, "node-a", "node-b")
	addSandbox(t, c.st, "sb-1", "one", "node-b")
	const first, rest = 1 << 20, 8 << 20
	gotFirst := make(chan struct{})
	c.nodes["node-b"].b.writeFile = func(r io.Reader) (int64, error) {
		if _, err := io.ReadFull(r, make([]byte, first)); err != nil {
			return 0, err
		}
		close(gotFirst)
		n, err := io.Copy(io.Discard, r)
		return first + n, err
	}
	pr, pw := io.Pipe()
	go func() {
		chunk := bytes.Repeat([]byte{0xa5}, 64<<10)
		for sent := 0; sent < first; sent += len(chunk) {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		// The rest only once node-b has the first MiB: node-a must not
		// hold the body back until it has all of it.
		select {
		case <-gotFirst:
		case <-time.After(10 * time.Second):
			pw.CloseWithError(errors.New("node-b did not get the first MiB while the upload went on"))
			return
		}
		for sent := 0; sent < rest; sent += len(chunk) {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	info, err := c.nodes["node-a"].client(t).WriteFile(testCtx(t), "one", "/workspace/big", 0o600, pr)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != first+rest {
		t.Fatalf("node-b wrote %d bytes, want %d", info.Size, first+rest)
	}
}

// rawCall sends method path to n with alice's key, changed by prep.
func rawCall(t *testing.T, n *testNode, method, path string, prep func(*http.Request)) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, n.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	if prep != nil {
		prep(req)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestForgedOrStaleNodeCallsAreRefusedNotServed(t *testing.T) {
	c := newCluster(t, "node-a", "node-b")
	addSandbox(t, c.st, "sb-1", "one", "node-b")
	a, b := c.nodes["node-a"], c.nodes["node-b"]
	forged := newAuth(t, "node-a", otherSecret, time.Now())
	stale := newAuth(t, "node-a", testSecret, time.Now().Add(-2*time.Minute))
	sign := func(na *NodeAuth) func(*http.Request) { return func(r *http.Request) { na.Sign(r) } }
	for _, tc := range []struct {
		name string
		to   *testNode
		prep func(*http.Request)
		want string
	}{
		{"forged, to the owner", b, sign(forged), "bad signature"},
		{"stale, to the owner", b, sign(stale), "off this node's clock"},
		{"forged, to another node", a, sign(forged), "bad signature"},
		{"a bare node header", b, func(r *http.Request) { r.Header.Set(HeaderNode, "node-a") }, "must each be sent once"},
		{"signed for another key", b, func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer other")
			newAuth(t, "node-a", testSecret, time.Now()).Sign(r)
			r.Header.Set("Authorization", "Bearer "+aliceKey)
		}, "bad signature"},
	} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			path := "/v1/sandboxes/sb-1"
			if method == http.MethodPost {
				path += "/stop"
			}
			res := rawCall(t, tc.to, method, path, tc.prep)
			wantProblem(t, res, http.StatusUnauthorized, tc.want)
		}
	}
	for _, n := range c.nodes {
		if calls := n.b.Calls(); len(calls) != 0 {
			t.Fatalf("%s served %v", n.name, calls)
		}
		if ev := n.b.Audited(); len(ev) != 0 {
			t.Fatalf("%s recorded %v", n.name, ev)
		}
	}
	// Signed properly, the same call is served by node-b as a node call.
	res := rawCall(t, b, http.MethodGet, "/v1/sandboxes/sb-1", sign(newAuth(t, "node-a", testSecret, time.Now())))
	res.Body.Close()
	if res.StatusCode != http.StatusOK || len(b.b.Calls()) != 1 {
		t.Fatalf("signed call: %d, node-b served %v", res.StatusCode, b.b.Calls())
	}
}

func TestForwardingCannotLoopWhenNodesDisagreeAboutTheOwner(t *testing.T) {
	// node-a's store says node-b owns sb-1; node-b's says node-a does
	// (stores that disagree stand for a stale read during a takeover).
	stA, stB := openStore(t), openStore(t)
	a := newNode(t, stA, "node-a", roomy)
	b := newNode(t, stB, "node-b", roomy)
	heartbeat(t, stA, "node-b", b.srv.Listener.Addr().String(), roomy, time.Now())
	heartbeat(t, stB, "node-a", a.srv.Listener.Addr().String(), roomy, time.Now())
	addSandbox(t, stA, "sb-1", "one", "node-b")
	addSandbox(t, stB, "sb-1", "one", "node-a")
	if to, err := b.router.Route(t.Context(), store.DefaultTenant, "sb-1"); err != nil || to.Node != "node-a" {
		t.Fatalf("node-b routes sb-1 to %+v, %v; the test needs node-a", to, err)
	}
	ctx := testCtx(t)
	if _, err := a.client(t).StopSandbox(ctx, "sb-1"); err != nil {
		t.Fatal(err)
	}
	if a.hits.Load() != 1 || b.hits.Load() != 1 {
		t.Fatalf("requests: node-a %d, node-b %d; want one each", a.hits.Load(), b.hits.Load())
	}
	if calls := b.b.Calls(); len(calls) != 1 || calls[0] != "StopSandbox sb-1" {
		t.Fatalf("node-b served %v", calls)
	}
	if calls := a.b.Calls(); len(calls) != 0 {
		t.Fatalf("node-a served %v", calls)
	}
}

func TestForwardedCallIsAuditedOnceByTheNodeThatServesIt(t *testing.T) {
	c := newCluster(t, "node-a", "node-b")
	addSandbox(t, c.st, "sb-1", "one", "node-b")
	if _, err := c.nodes["node-a"].client(t).StopSandbox(testCtx(t), "one"); err != nil {
		t.Fatal(err)
	}
	if ev := c.nodes["node-a"].b.Audited(); len(ev) != 0 {
		t.Fatalf("the entry node recorded %+v", ev)
	}
	ev := c.nodes["node-b"].b.Audited()
	want := api.AuditEvent{Actor: "k-alice", Tenant: store.DefaultTenant, Action: "POST /v1/sandboxes/{id}/stop", Target: "one", Status: http.StatusOK}
	if len(ev) != 1 || ev[0] != want {
		t.Fatalf("the owner recorded %+v, want %+v", ev, want)
	}
}

func TestUnreachableOwnerIsAProblemNamingIt(t *testing.T) {
	c := newCluster(t, "node-a")
	// node-c is alive by its heartbeat but nothing listens at its address
	// (a socket path, so that no other test's server can take it).
	addr := "unix:" + filepath.Join(t.TempDir(), "gone.sock")
	heartbeat(t, c.st, "node-c", addr, roomy, time.Now())
	addSandbox(t, c.st, "sb-2", "two", "node-c")
	a := c.nodes["node-a"]
	res := rawCall(t, a, http.MethodPost, "/v1/sandboxes/two/stop", nil)
	if res.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	wantProblem(t, res, http.StatusServiceUnavailable, "node node-c ("+addr+"), which must serve this request, cannot be reached")
	if calls := a.b.Calls(); len(calls) != 0 {
		t.Fatalf("node-a served %v", calls)
	}
	// Nobody else answered it: the entry node records it.
	want := api.AuditEvent{Actor: "k-alice", Tenant: store.DefaultTenant, Action: "POST /v1/sandboxes/{id}/stop", Target: "two", Status: http.StatusServiceUnavailable}
	if ev := a.b.Audited(); len(ev) != 1 || ev[0] != want {
		t.Fatalf("node-a recorded %+v, want %+v", ev, want)
	}
}

func TestDeadOwnersSandboxIsServedHere(t *testing.T) {
	c := newCluster(t, "node-a", "node-b")
	addSandbox(t, c.st, "sb-1", "one", "node-b")
	b := c.nodes["node-b"]
	heartbeat(t, c.st, "node-b", b.srv.Listener.Addr().String(), roomy, time.Now().Add(-31*time.Second))
	sb, err := c.nodes["node-a"].client(t).GetSandbox(testCtx(t), "one")
	if err != nil || sb.Labels["served-by"] != "node-a" {
		t.Fatalf("get via node-a: %+v, %v; want it served by node-a", sb, err)
	}
	if b.hits.Load() != 0 {
		t.Fatalf("node-b got %d requests", b.hits.Load())
	}
}

func TestRouteFindsTheLiveOwner(t *testing.T) {
	st := openStore(t)
	now := time.Now()
	heartbeat(t, st, "node-a", "10.0.0.1:7879", roomy, now)
	heartbeat(t, st, "node-b", "10.0.0.2:7879", roomy, now.Add(-10*time.Second))
	heartbeat(t, st, "node-dead", "10.0.0.3:7879", roomy, now.Add(-time.Minute))
	if err := st.CreateTenant(t.Context(), store.Tenant{ID: "t-bob", Name: "bob"}); err != nil {
		t.Fatal(err)
	}
	addSandbox(t, st, "sb-own", "own", "node-a")
	addSandbox(t, st, "sb-b", "bee", "node-b")
	addSandbox(t, st, "sb-dead", "dead", "node-dead")
	addSandbox(t, st, "sb-none", "none", "")
	addSandbox(t, st, "sb-gone", "gone", "node-unregistered")
	// A lapsed (released) lease of a live node still routes to it: the
	// node keeps the sandbox's data.
	addSandbox(t, st, "sb-released", "released", "")
	o, err := st.AcquireOwnership(t.Context(), "sb-released", "node-b", time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.ReleaseOwnership(t.Context(), "sb-released", "node-b", o.Epoch, now); err != nil {
		t.Fatal(err)
	}
	r, err := NewRouter(RouterOptions{Store: st, Node: "node-a", Secret: testSecret, Grace: 30 * time.Second,
		InstanceTypes: testTypes, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	b := api.Peer{Node: "node-b", Address: "10.0.0.2:7879"}
	for _, tc := range []struct {
		tenant, ref string
		want        api.Peer
	}{
		{store.DefaultTenant, "sb-own", api.Peer{}},
		{store.DefaultTenant, "sb-b", b},
		{store.DefaultTenant, "bee", b},
		{store.DefaultTenant, "sb-released", b},
		{store.DefaultTenant, "sb-dead", api.Peer{}},
		{store.DefaultTenant, "sb-none", api.Peer{}},
		{store.DefaultTenant, "sb-gone", api.Peer{}},
		{store.DefaultTenant, "sb-absent", api.Peer{}},
		{"t-bob", "sb-b", api.Peer{}}, // another tenant's sandbox is absent
		{"", "sb-b", api.Peer{}},
	} {
		got, err := r.Route(t.Context(), tc.tenant, tc.ref)
		if err != nil || got != tc.want {
			t.Errorf("Route(%q, %q) = %+v, %v; want %+v", tc.tenant, tc.ref, got, err, tc.want)
		}
	}
}

func TestCreateIsPlacedOnANodeWithRoomAndItsBodyReplayed(t *testing.T) {
	st := openStore(t)
	a := newNode(t, st, "node-a", Capacity{CPUs: 0.1, MemoryBytes: 64 << 20, PoolFreeBytes: 1 << 30})
	b := newNode(t, st, "node-b", roomy)
	req := client.CreateSandboxRequest{Name: "placed", InstanceType: "small", Env: map[string]string{"A": strings.Repeat("x", 100<<10)}}
	sb, err := a.client(t).CreateSandbox(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if sb.Labels["served-by"] != "node-b" {
		t.Fatalf("created on %s, want node-b", sb.Labels["served-by"])
	}
	if calls := b.b.Calls(); len(calls) != 1 || calls[0] != "CreateSandbox placed small" {
		t.Fatalf("node-b served %v", calls)
	}
	// Recorded once, by node-b, with the created id.
	if ev := b.b.Audited(); len(ev) != 1 || ev[0].Target != "sb-placed" || ev[0].Status != http.StatusCreated {
		t.Fatalf("node-b recorded %+v", ev)
	}
	if ev := a.b.Audited(); len(ev) != 0 {
		t.Fatalf("node-a recorded %+v", ev)
	}
	// When no node has room the answer says what is short on each.
	_, err = a.client(t).CreateSandbox(testCtx(t), client.CreateSandboxRequest{Name: "huge", DiskBytes: 2000 << 30})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict ||
		!strings.Contains(ae.Detail, "no node has room for a sandbox of 1 cpus, 2.0 GiB memory, 2.0 TiB disk") ||
		!strings.Contains(ae.Detail, "node-a: 0.4 of 0.4 cpus free") || !strings.Contains(ae.Detail, "node-b: 500.0 GiB pool free, 1000.0 GiB needed") {
		t.Fatalf("create with no room: %v", err)
	}
	if ev := a.b.Audited(); len(ev) != 1 || ev[0].Action != "POST /v1/sandboxes" || ev[0].Status != http.StatusConflict {
		t.Fatalf("node-a recorded %+v", ev)
	}
	// A body that is not JSON is left to the route, here, to refuse.
	res := rawCall(t, a, http.MethodPost, "/v1/sandboxes", func(r *http.Request) {
		r.Body = io.NopCloser(strings.NewReader("{not json"))
		r.Header.Set("Content-Type", "application/json")
	})
	res.Body.Close()
	if res.StatusCode/100 != 4 || b.hits.Load() != 1 {
		t.Fatalf("malformed create: status %d, node-b hits %d", res.StatusCode, b.hits.Load())
	}
}

func TestPlaceCountsCreatesInFlight(t *testing.T) {
	st := openStore(t)
	now := time.Now()
	for _, n := range []string{"node-a", "node-b"} {
		heartbeat(t, st, n, n+":7879", Capacity{CPUs: 1, MemoryBytes: 2 << 30, PoolFreeBytes: 100 << 30}, now)
	}
	r, err := NewRouter(RouterOptions{Store: st, Node: "node-a", Secret: testSecret, Grace: 30 * time.Second,
		InstanceTypes: testTypes, CPUOvercommit: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	req := client.CreateSandboxRequest{InstanceType: "small"}
	first, done1, err := r.Place(t.Context(), store.DefaultTenant, req)
	if err != nil || !first.Here() {
		t.Fatalf("first place: %+v, %v; want node-a (a tie, by name)", first, err)
	}
	second, done2, err := r.Place(t.Context(), store.DefaultTenant, req)
	if err != nil || second.Node != "node-b" || second.Address != "node-b:7879" {
		t.Fatalf("second place: %+v, %v; want node-b while the first is in flight", second, err)
	}
	if _, _, err := r.Place(t.Context(), store.DefaultTenant, req); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("third place: %v; want no room", err)
	}
	done1()
	done1() // idempotent
	done2()
	if p, _, err := r.Place(t.Context(), store.DefaultTenant, req); err != nil || !p.Here() {
		t.Fatalf("place after both answered: %+v, %v", p, err)
	}
	// An unknown instance type is placed here, where the service refuses it.
	if p, _, err := r.Place(t.Context(), store.DefaultTenant, client.CreateSandboxRequest{InstanceType: "huge"}); err != nil || !p.Here() {
		t.Fatalf("unknown type: %+v, %v", p, err)
	}
}

func TestNodeClientDoSignsItsOwnCalls(t *testing.T) {
	now := time.Now()
	verifier := newAuth(t, "node-b", testSecret, now)
	var got struct {
		node, path, body string
	}
	srv := httptest.NewServer(verifier.RequireNode(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.node, _ = CallingNode(r.Context())
		got.path = r.URL.RequestURI()
		b, _ := io.ReadAll(r.Body)
		got.body = string(b)
		_ = json.NewEncoder(w).Encode(map[string]string{"ok": "yes"})
	})))
	t.Cleanup(srv.Close)
	nc, err := NewNodeClient(newAuth(t, "node-a", testSecret, now), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := nc.Do(t.Context(), srv.Listener.Addr().String(), http.MethodPost, "/internal/adopt?sandbox=sb-1", strings.NewReader(`{"epoch":2}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || got.node != "node-a" || got.path != "/internal/adopt?sandbox=sb-1" || got.body != `{"epoch":2}` {
		t.Fatalf("status %d, served %+v", res.StatusCode, got)
	}
	// Signed with another secret: refused.
	bad, _ := NewNodeClient(newAuth(t, "node-a", otherSecret, now), nil)
	res, err = bad.Do(t.Context(), "http://"+srv.Listener.Addr().String(), http.MethodPost, "/internal/adopt", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, res, http.StatusUnauthorized, "bad signature")
	// Nothing listening: an error naming the address.
	addr := "unix:" + filepath.Join(t.TempDir(), "gone.sock")
	if _, err := nc.Do(t.Context(), addr, http.MethodGet, "/x", nil); err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("call to a closed port: %v", err)
	}
	for _, a := range []string{"", "unix:", "http://h:1/path", "no-port"} {
		if _, err := nc.Do(t.Context(), a, http.MethodGet, "/x", nil); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("address %q: %v", a, err)
		}
	}
}

func TestOwnerDyingMidStreamIsAnErrorNotACleanEnd(t *testing.T) {
	c := newCluster(t, "node-a", "node-b")
	addSandbox(t, c.st, "sb-1", "one", "node-b")
	b := c.nodes["node-b"]
	stdout := &notifyWriter{want: "chunk 1", seen: make(chan struct{})}
	b.b.exec = func(ctx context.Context, out api.ExecStream) (client.ExecResult, error) {
		if err := out.Stdout([]byte("chunk 1\n")); err != nil {
			return client.ExecResult{}, err
		}
		<-stdout.seen
		// node-b goes away with the stream half sent.
		b.srv.CloseClientConnections()
		<-ctx.Done()
		return client.ExecResult{}, ctx.Err()
	}
	_, err := c.nodes["node-a"].client(t).ExecStream(testCtx(t), "one", client.ExecRequest{Command: []string{"x"}}, stdout, io.Discard)
	if err == nil {
		t.Fatal("a stream cut off at the owner ended without an error through node-a")
	}
	if stdout.String() != "chunk 1\n" {
		t.Fatalf("stdout %q", stdout.String())
	}
}

func TestForwardReachesANodeOnAUnixSocket(t *testing.T) {
	c := newCluster(t, "node-a")
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRouter(RouterOptions{Store: c.st, Node: "node-u", Secret: testSecret, Grace: 30 * time.Second,
		InstanceTypes: testTypes, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	ub := &nodeBackend{node: "node-u"}
	srv := httptest.NewUnstartedServer(api.NewHandler(ub, api.Options{Logger: slog.New(slog.DiscardHandler), Router: r}))
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	heartbeat(t, c.st, "node-u", "unix:"+sock, roomy, time.Now())
	addSandbox(t, c.st, "sb-1", "one", "node-u")
	sb, err := c.nodes["node-a"].client(t).GetSandbox(testCtx(t), "one")
	if err != nil || sb.Labels["served-by"] != "node-u" {
		t.Fatalf("get via node-a: %+v, %v; want it served by node-u", sb, err)
	}
}

func TestCreateWithAnImportedTemplateGoesWhereTheTemplateIs(t *testing.T) {
	st := openStore(t)
	if err := st.CreateTemplate(t.Context(), store.Template{ID: "alpine", TenantID: store.DefaultTenant, Kind: "oci",
		Source: "docker.io/library/alpine", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	a := newNode(t, st, "node-a", roomy)
	small := roomy
	small.MemoryBytes, small.Templates = 1<<30, []string{"alpine"}
	newNode(t, st, "node-b", small)
	sb, err := a.client(t).CreateSandbox(testCtx(t), client.CreateSandboxRequest{Name: "on-b", InstanceType: "micro", Template: "alpine"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Labels["served-by"] != "node-b" {
		t.Fatalf("created on %s, want node-b (the only node with the template)", sb.Labels["served-by"])
	}
	// A small does not fit in node-b's memory, and node-a, with room,
	// lacks the template: a 409 naming it.
	_, err = a.client(t).CreateSandbox(testCtx(t), client.CreateSandboxRequest{Name: "nowhere", InstanceType: "small", Template: "alpine"})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || !strings.Contains(ae.Detail, "no node with room has template alpine") ||
		!strings.Contains(ae.Detail, "node-a: template alpine is not in its pool") {
		t.Fatalf("create with the template's node full: %v", err)
	}
}
