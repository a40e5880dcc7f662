package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/session"
	"github.com/stead-dev/stead/internal/state"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// testBackend is the daemon behind the tests: the real API handler over
// real checkpoint and session-log services on a real SQLite store, with
// an in-memory sandbox "agent-1" (files, exec, snapshots, orient). Backend methods
// the tests do not reach panic through the nil embedded interface.
type testBackend struct {
	api.Backend
	*state.Service
	*session.Sessions

	mu    sync.Mutex
	files map[string][]byte // path -> content
	modes map[string]uint32
	execs []client.ExecRequest
	snaps []client.Snapshot

	orientAsked string

	state   string           // of sb-1: "" is running
	deleted bool             // sb-1 was deleted
	jobs    map[int]*fakeJob // background commands by pid

	policy   client.NetworkPolicy
	policies []client.NetworkPolicy // every SetNetwork, in order
	ports    []client.Port
}

func (b *testBackend) Authenticate(_ context.Context, secret string) (api.Principal, error) {
	switch secret {
	case "k":
		return api.Principal{TenantID: "t1", KeyID: "key-mcp"}, nil
	case "agent": // the token of sandbox sb-1 itself
		return api.Principal{TenantID: "t1", Sandbox: "sb-1"}, nil
	}
	return api.Principal{}, errs.ErrUnauthenticated
}

// check fails for any sandbox but agent-1 (by name or id).
func (b *testBackend) check(id string) error {
	if id != "agent-1" && id != "sb-1" {
		return fmt.Errorf("sandbox %q: %w", id, errs.ErrNotFound)
	}
	return nil
}

func (b *testBackend) Exec(_ context.Context, _, id string, req client.ExecRequest, out api.ExecStream) (client.ExecResult, error) {
	if err := b.check(id); err != nil {
		return client.ExecResult{}, err
	}
	b.mu.Lock()
	b.execs = append(b.execs, req)
	state := b.state
	b.mu.Unlock()
	if state != "" && state != "running" {
		return client.ExecResult{}, fmt.Errorf("sandbox %s is %s: start it first: %w", id, state, errs.ErrConflict)
	}
	if req.Background {
		return b.startJob(req)
	}
	if isAliveCheck(req) {
		return b.aliveCheck(req), nil
	}
	switch req.Command[0] {
	case "slow": // a line every 20 ms for about 400 ms
		for i := range 20 {
			_ = out.Stdout(fmt.Appendf(nil, "line %d\n", i))
			time.Sleep(20 * time.Millisecond)
		}
		return client.ExecResult{}, nil
	case "flood": // 200 KiB of stdout: "<i>\n" lines
		for i := range 20000 {
			_ = out.Stdout(fmt.Appendf(nil, "%09d\n", i))
		}
		return client.ExecResult{}, nil
	case "fail":
		_ = out.Stderr([]byte("boom\n"))
		return client.ExecResult{ExitCode: 7}, nil
	}
	_ = out.Stdout([]byte(strings.Join(req.Command, " ") + "\n"))
	_ = out.Stderr([]byte("cwd=" + req.Cwd + " user=" + req.User + " stdin=" + req.Stdin + "\n"))
	return client.ExecResult{}, nil
}

func (b *testBackend) ReadFile(_ context.Context, _, id, p string) (io.ReadCloser, client.FileInfo, error) {
	if err := b.check(id); err != nil {
		return nil, client.FileInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.files[p]
	if !ok {
		return nil, client.FileInfo{}, fmt.Errorf("%s: %w", p, errs.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(data)), b.info(p), nil
}

// info describes a file; b.mu is held.
func (b *testBackend) info(p string) client.FileInfo {
	return client.FileInfo{Name: path.Base(p), Path: p, Type: "file", Size: int64(len(b.files[p])),
		Mode: b.modes[p], ModTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (b *testBackend) WriteFile(_ context.Context, _, id, p string, mode uint32, r io.Reader) (client.FileInfo, error) {
	if err := b.check(id); err != nil {
		return client.FileInfo{}, err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return client.FileInfo{}, err
	}
	if mode == 0 {
		mode = 0o644
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.files[p], b.modes[p] = data, mode
	return b.info(p), nil
}

func (b *testBackend) Mkdir(_ context.Context, _, id, _ string, _ bool) error { return b.check(id) }

func (b *testBackend) ListFiles(_ context.Context, _, id, dir string) ([]client.FileInfo, error) {
	if err := b.check(id); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var list []client.FileInfo
	dirs := map[string]bool{}
	for p := range b.files {
		if path.Dir(p) == dir {
			list = append(list, b.info(p))
		}
		// The directories between dir and p.
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if path.Dir(d) == dir && !dirs[d] {
				dirs[d] = true
				list = append(list, client.FileInfo{Name: path.Base(d), Path: d, Type: "dir", Mode: 0o755})
			}
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list, nil
}

func (b *testBackend) CreateSnapshot(_ context.Context, _, id string, req client.CreateSnapshotRequest) (client.Snapshot, error) {
	if err := b.check(id); err != nil {
		return client.Snapshot{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := client.Snapshot{ID: fmt.Sprintf("snap-%d", len(b.snaps)+1), Sandbox: "sb-1", SandboxName: "agent-1",
		Label: req.Label, Description: req.Description, Kind: "user", CreatedAt: time.Now().UTC()}
	b.snaps = append(b.snaps, s)
	return s, nil
}

func (b *testBackend) ListSnapshots(context.Context, string, string) ([]client.Snapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.snaps), nil
}

func (b *testBackend) GetSnapshot(_ context.Context, _, id string) (client.Snapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.snaps {
		if s.ID == id {
			return s, nil
		}
	}
	return client.Snapshot{}, fmt.Errorf("snapshot %q: %w", id, errs.ErrNotFound)
}

func (b *testBackend) DeleteSnapshot(context.Context, string, string) error { return errs.ErrConflict }

func (b *testBackend) Fork(ctx context.Context, tenant, source string, req client.ForkRequest) ([]client.Sandbox, error) {
	if _, err := b.GetSnapshot(ctx, tenant, source); err != nil {
		if err := b.check(source); err != nil {
			return nil, err
		}
	}
	var list []client.Sandbox
	for i := range max(req.Count, 1) {
		list = append(list, client.Sandbox{ID: fmt.Sprintf("sb-fork-%d", i+1), Name: fmt.Sprintf("fork-%d", i+1), State: "running"})
	}
	return list, nil
}

func (b *testBackend) Rollback(ctx context.Context, tenant, id string, req client.RollbackRequest) (client.RollbackResult, error) {
	if err := b.check(id); err != nil {
		return client.RollbackResult{}, err
	}
	if _, err := b.GetSnapshot(ctx, tenant, req.Snapshot); err != nil {
		return client.RollbackResult{}, err
	}
	return client.RollbackResult{
		Sandbox: client.Sandbox{ID: "sb-1", Name: "agent-1", State: "running"},
		Safety:  client.Snapshot{ID: "snap-safety", Sandbox: "sb-1", Kind: "safety"},
	}, nil
}

func (b *testBackend) Orient(_ context.Context, _, id string, files []string, events int) (client.Orient, error) {
	if err := b.check(id); err != nil {
		return client.Orient{}, err
	}
	b.mu.Lock()
	b.orientAsked = fmt.Sprintf("%s %v %d", id, files, events)
	b.mu.Unlock()
	var of []client.OrientFile
	for _, f := range files {
		of = append(of, client.OrientFile{Path: f, Tail: "- decided X\n"})
	}
	return client.Orient{
		Sandbox:    client.Sandbox{ID: "sb-1", Name: "agent-1", State: "running"},
		StopReason: "idle",
		Files:      of,
		Text:       "You are in agent-1.\n",
	}, nil
}

// network answers agent-1's network; b.mu is held.
func (b *testBackend) network() client.NetworkInfo {
	return client.NetworkInfo{Enabled: true, Address: "10.88.0.7", Gateway: "10.88.0.1", Policy: b.policy,
		Refused: 2, RxBytes: 10, TxBytes: 20, Ports: slices.Clone(b.ports)}
}

func (b *testBackend) GetNetwork(_ context.Context, _, id string) (client.NetworkInfo, error) {
	if err := b.check(id); err != nil {
		return client.NetworkInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.network(), nil
}

func (b *testBackend) SetNetwork(_ context.Context, _, id string, p client.NetworkPolicy) (client.NetworkInfo, error) {
	if err := b.check(id); err != nil {
		return client.NetworkInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.policy = p
	b.policies = append(b.policies, p)
	return b.network(), nil
}

func (b *testBackend) ListPorts(_ context.Context, _, id string) ([]client.Port, error) {
	if err := b.check(id); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.ports), nil
}

func (b *testBackend) ExposePort(_ context.Context, _, id string, port int, req client.ExposePortRequest) (client.ExposedPort, error) {
	if err := b.check(id); err != nil {
		return client.ExposedPort{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p := client.Port{Port: port, Public: req.Public, URL: fmt.Sprintf("https://%d-sb-1.stead.example", port),
		PathURL: fmt.Sprintf("/v1/sandboxes/sb-1/ports/%d/", port), ExposedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	b.ports = append(slices.DeleteFunc(b.ports, func(q client.Port) bool { return q.Port == port }), p)
	ep := client.ExposedPort{Port: p}
	if !req.Public {
		ep.Token = "port-token"
	}
	return ep, nil
}

func (b *testBackend) UnexposePort(_ context.Context, _, id string, port int) error {
	if err := b.check(id); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.ports)
	if b.ports = slices.DeleteFunc(b.ports, func(q client.Port) bool { return q.Port == port }); len(b.ports) == n {
		return fmt.Errorf("port %d of sandbox %s is not exposed: %w", port, id, errs.ErrNotFound)
	}
	return nil
}

// newDaemon serves a test daemon and returns its backend and a client of
// it with the right key.
func newDaemon(t *testing.T) (*testBackend, *client.Client) {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.CreateTenant(ctx, store.Tenant{ID: "t1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateSandbox(ctx, store.Sandbox{ID: "sb-1", TenantID: "t1", Name: "agent-1", State: store.StateRunning}); err != nil {
		t.Fatal(err)
	}
	b := &testBackend{Service: state.New(st), Sessions: session.New(st),
		files: map[string][]byte{}, modes: map[string]uint32{}}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, "k")
	if err != nil {
		t.Fatal(err)
	}
	return b, c
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connectHTTP serves srv over streamable HTTP (with a bearer token) and
// connects an SDK client to it.
func connectHTTP(t *testing.T, srv *sdk.Server) *sdk.ClientSession {
	t.Helper()
	hs := httptest.NewServer(HTTPHandler(srv, HTTPOptions{Token: "tok"}))
	t.Cleanup(hs.Close)
	tr := &sdk.StreamableClientTransport{
		Endpoint:   hs.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{"tok", http.DefaultTransport}},
		MaxRetries: -1,
	}
	return connect(t, tr)
}

// connectMemory connects an SDK client to srv in memory.
func connectMemory(t *testing.T, srv *sdk.Server) *sdk.ClientSession {
	t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	return connect(t, ct)
}

// connect opens a client session over tr.
func connect(t *testing.T, tr sdk.Transport) *sdk.ClientSession {
	t.Helper()
	cl := sdk.NewClient(&sdk.Implementation{Name: "stead-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call calls a tool, fails the test on a protocol error, and decodes the
// structured result of a successful call into out (if not nil).
func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, out any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	if out != nil && !res.IsError {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decode %s: %v", name, b, err)
		}
	}
	return res
}

// mustCall is call that also fails on a tool error.
func mustCall(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	if res := call(t, cs, name, args, out); res.IsError {
		t.Fatalf("%s(%v): tool error: %s", name, args, text(res))
	}
}

// wantToolError calls a tool and wants a tool error (not a protocol error)
// whose text contains each of want.
func wantToolError(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, want ...string) {
	t.Helper()
	res := call(t, cs, name, args, nil)
	if !res.IsError {
		t.Fatalf("%s(%v): no tool error: %s", name, args, text(res))
	}
	msg := text(res)
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s(%v): error %q does not contain %q", name, args, msg, w)
		}
	}
}

// text joins the text contents of a result.
func text(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func TestToolsOverTransports(t *testing.T) {
	for _, tc := range []struct {
		name    string
		connect func(*testing.T, *sdk.Server) *sdk.ClientSession
	}{
		{"streamable-http", connectHTTP},
		{"in-memory", connectMemory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, c := newDaemon(t)
			cs := tc.connect(t, NewServer(c, Options{Sandbox: "agent-1", Version: "test"}))
			testTools(t, b, c, cs)
		})
	}
}

// testTools exercises every tool through cs; the server's default
// sandbox is agent-1.
func testTools(t *testing.T, b *testBackend, c *client.Client, cs *sdk.ClientSession) {
	if got := cs.InitializeResult().ServerInfo; got.Name != "stead" || got.Version != "test" {
		t.Errorf("server info %+v", got)
	}
	if ins := cs.InitializeResult().Instructions; !strings.Contains(ins, `"agent-1"`) {
		t.Errorf("instructions do not name the default sandbox: %q", ins)
	}

	t.Run("list", func(t *testing.T) {
		res, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]*sdk.Tool{}
		for _, tool := range res.Tools {
			byName[tool.Name] = tool
		}
		for _, name := range ToolNames() {
			tool := byName[name]
			if tool == nil {
				t.Errorf("tool %s missing", name)
				continue
			}
			if tool.Description == "" || tool.InputSchema == nil || tool.OutputSchema == nil {
				t.Errorf("tool %s: description %q, input schema %v, output schema %v", name, tool.Description, tool.InputSchema, tool.OutputSchema)
			}
		}
		if len(res.Tools) != len(ToolNames()) {
			t.Errorf("%d tools, want %d", len(res.Tools), len(ToolNames()))
		}
		schema, _ := json.Marshal(byName["exec"].InputSchema)
		for _, want := range []string{`"oneOf"`, `"required":["command"]`, `Default: \"agent-1\"`, `"timeout"`} {
			if !bytes.Contains(schema, []byte(want)) {
				t.Errorf("exec input schema lacks %s: %s", want, schema)
			}
		}
		schema, _ = json.Marshal(byName["exec"].OutputSchema)
		if !bytes.Contains(schema, []byte(`"exit_code"`)) {
			t.Errorf("exec output schema: %s", schema)
		}
		for name, readOnly := range map[string]bool{"network_show": true, "port_list": true,
			"network_set": false, "port_expose": false, "port_unexpose": false} {
			a := byName[name].Annotations
			if a == nil || a.ReadOnlyHint != readOnly || (!readOnly && (a.DestructiveHint == nil || !*a.DestructiveHint)) {
				t.Errorf("%s annotations %+v: read-only %v, else destructive", name, a, readOnly)
			}
		}
		if a := byName["port_expose"].Annotations; a.IdempotentHint {
			t.Error("port_expose is marked idempotent, but it rotates the token")
		}
		schema, _ = json.Marshal(byName["port_expose"].OutputSchema)
		if !bytes.Contains(schema, []byte(`"token"`)) || !bytes.Contains(schema, []byte(`"urls"`)) {
			t.Errorf("port_expose output schema: %s", schema)
		}
		schema, _ = json.Marshal(byName["session_append"].InputSchema)
		if !bytes.Contains(schema, []byte(`"tool_intent"`)) {
			t.Errorf("session_append type enum: %s", schema)
		}
	})

	t.Run("exec", func(t *testing.T) {
		var out ExecOutput
		mustCall(t, cs, "exec", map[string]any{"command": []string{"echo", "hi"}, "cwd": "/workspace", "user": "root", "stdin": "in"}, &out)
		if out.ExitCode != 0 || out.Stdout != "echo hi\n" || out.Stderr != "cwd=/workspace user=root stdin=in\n" || out.StdoutTruncated {
			t.Errorf("exec: %+v", out)
		}
		mustCall(t, cs, "exec", map[string]any{"command": "ls | wc -l", "timeout": "30s"}, &out)
		b.mu.Lock()
		last := b.execs[len(b.execs)-1]
		b.mu.Unlock()
		if !slices.Equal(last.Command, []string{"/bin/sh", "-c", "ls | wc -l"}) || last.Timeout != "30s" {
			t.Errorf("shell string exec sent %+v", last)
		}
		mustCall(t, cs, "exec", map[string]any{"command": []string{"fail"}}, &out)
		if out.ExitCode != 7 || out.Stderr != "boom\n" {
			t.Errorf("failing command: %+v", out)
		}
		mustCall(t, cs, "exec", map[string]any{"command": []string{"flood"}, "max_output_bytes": 1000}, &out)
		if !out.StdoutTruncated || len(out.Stdout) > 1100 || !strings.HasPrefix(out.Stdout, "000000000\n") ||
			!strings.HasSuffix(out.Stdout, "000019999\n") || !strings.Contains(out.Stdout, "bytes cut") {
			t.Errorf("flood: truncated %v, %d bytes: %.200q", out.StdoutTruncated, len(out.Stdout), out.Stdout)
		}
		mustCall(t, cs, "exec", map[string]any{"command": []string{"sleep", "1d"}, "background": true}, &out)
		if out.Pid < 100 || !strings.HasPrefix(out.LogPath, "/var/log/stead/exec-") || !out.Running ||
			!strings.HasPrefix(out.Handle, "agent-1/") {
			t.Errorf("background: %+v", out)
		}
		b.mu.Lock()
		last = b.execs[len(b.execs)-1]
		b.mu.Unlock()
		if len(last.Command) != 6 || last.Command[0] != "/bin/sh" || !strings.HasPrefix(last.Command[3], jobMarkerPrefix) ||
			!slices.Equal(last.Command[4:], []string{"sleep", "1d"}) || !last.Background {
			t.Errorf("background exec sent %+v", last)
		}
		wantToolError(t, cs, "exec", map[string]any{"sandbox": "missing", "command": []string{"true"}}, "sandbox missing", "404")
		wantToolError(t, cs, "exec", map[string]any{"command": []string{"true"}, "timeout": "soon"}, "Go duration")
		wantToolError(t, cs, "exec", map[string]any{"command": 3}, "command")
		wantToolError(t, cs, "exec", map[string]any{}, "command")
	})

	t.Run("files", func(t *testing.T) {
		var fe FileEntry
		mustCall(t, cs, "write_file", map[string]any{"path": "/workspace/plan.md", "content": "# Plan\n- step 1\n", "make_parents": true}, &fe)
		if fe.Path != "/workspace/plan.md" || fe.Size != 16 || fe.Mode != "0644" {
			t.Errorf("write_file: %+v", fe)
		}
		mustCall(t, cs, "write_file", map[string]any{"path": "/workspace/run.sh", "content": "#!/bin/sh\n", "mode": "0755"}, &fe)
		if fe.Mode != "0755" {
			t.Errorf("mode: %+v", fe)
		}
		bin := []byte{0xff, 0x00, 0xfe, 'x'}
		mustCall(t, cs, "write_file", map[string]any{"sandbox": "sb-1", "path": "/workspace/blob", "content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64"}, nil)
		b.mu.Lock()
		stored := b.files["/workspace/blob"]
		b.mu.Unlock()
		if !bytes.Equal(stored, bin) {
			t.Errorf("base64 write stored %q", stored)
		}

		var rf ReadFileOutput
		mustCall(t, cs, "read_file", map[string]any{"path": "/workspace/plan.md"}, &rf)
		if rf.Content != "# Plan\n- step 1\n" || rf.Encoding != "utf-8" || rf.Truncated || rf.Size != 16 {
			t.Errorf("read_file: %+v", rf)
		}
		mustCall(t, cs, "read_file", map[string]any{"path": "/workspace/plan.md", "max_bytes": 6}, &rf)
		if rf.Content != "# Plan" || !rf.Truncated {
			t.Errorf("read_file max_bytes: %+v", rf)
		}
		mustCall(t, cs, "read_file", map[string]any{"path": "/workspace/blob"}, &rf)
		if rf.Encoding != "base64" || rf.Content != base64.StdEncoding.EncodeToString(bin) {
			t.Errorf("read_file binary: %+v", rf)
		}

		var ls ListFilesOutput
		mustCall(t, cs, "list_files", map[string]any{"path": "/workspace"}, &ls)
		var names []string
		for _, e := range ls.Entries {
			names = append(names, e.Name)
		}
		if !slices.Equal(names, []string{"blob", "plan.md", "run.sh"}) {
			t.Errorf("list_files: %v", names)
		}

		// An API 404 is a tool error with the daemon's message.
		wantToolError(t, cs, "read_file", map[string]any{"path": "/nope"}, "read /nope in sandbox agent-1", "/nope", "HTTP 404")
		wantToolError(t, cs, "write_file", map[string]any{"path": "/x", "content": "x", "mode": "rwx"}, "octal")
		wantToolError(t, cs, "write_file", map[string]any{"path": "/x", "content": "!!", "encoding": "base64"}, "base64")
	})

	t.Run("checkpoints", func(t *testing.T) {
		var cp CheckpointOutput
		mustCall(t, cs, "checkpoint_put", map[string]any{"name": "progress", "body": map[string]any{"step": 1, "todo": []string{"a"}}, "if_version": 0, "run": "run-x"}, &cp)
		if cp.Name != "progress" || cp.Version != 1 || cp.Principal != "key-mcp" || cp.Run != "run-x" || cp.Body != nil {
			t.Errorf("put: %+v", cp)
		}
		// document is the deprecated name of body, still accepted.
		mustCall(t, cs, "checkpoint_put", map[string]any{"name": "progress", "document": map[string]any{"step": 2}}, &cp)
		if cp.Version != 2 {
			t.Errorf("second put: %+v", cp)
		}
		wantToolError(t, cs, "checkpoint_put", map[string]any{"name": "progress", "body": map[string]any{"step": 3}, "if_version": 1}, "HTTP 409")
		wantToolError(t, cs, "checkpoint_put", map[string]any{"name": "progress"}, "body is missing")

		mustCall(t, cs, "checkpoint_get", map[string]any{"name": "progress"}, &cp)
		if cp.Version != 2 || fmt.Sprint(cp.Body) != "map[step:2]" {
			t.Errorf("get latest: %+v", cp)
		}
		mustCall(t, cs, "checkpoint_get", map[string]any{"name": "progress", "version": 1}, &cp)
		if cp.Version != 1 || fmt.Sprint(cp.Body) != "map[step:1 todo:[a]]" {
			t.Errorf("get v1: %+v", cp)
		}
		// Also visible to a plain API client: the tools wrote the real thing.
		if got, err := c.GetCheckpoint(t.Context(), "agent-1", "", "progress", 0); err != nil || got.Version != 2 {
			t.Errorf("API sees %+v, %v", got, err)
		}
		wantToolError(t, cs, "checkpoint_get", map[string]any{"name": "absent"}, "get checkpoint absent", "HTTP 404")
		wantToolError(t, cs, "checkpoint_get", map[string]any{"sandbox": "missing", "name": "progress"}, "HTTP 404")
	})

	t.Run("session", func(t *testing.T) {
		if _, err := c.CreateThread(t.Context(), "agent-1", client.CreateThreadRequest{Name: "main"}); err != nil {
			t.Fatal(err)
		}
		var ev SessionEventOutput
		mustCall(t, cs, "session_append", map[string]any{"thread": "main", "type": "tool_intent", "payload": map[string]any{"tool": "deploy"}, "idempotency_key": "i-1"}, &ev)
		if !strings.HasPrefix(ev.Run, "run-") || ev.Seq != 1 || ev.Type != "tool_intent" {
			t.Fatalf("append with thread: %+v", ev)
		}
		run := ev.Run
		var again SessionEventOutput
		mustCall(t, cs, "session_append", map[string]any{"run": run, "type": "tool_intent", "payload": map[string]any{"tool": "deploy"}, "idempotency_key": "i-1"}, &again)
		if again.Seq != 1 {
			t.Errorf("idempotent retry stored a new event: %+v", again)
		}
		mustCall(t, cs, "session_append", map[string]any{"run": run, "type": "tool_result", "intent": 1, "payload": "ok"}, &ev)
		if ev.Seq != 2 || ev.Intent != 1 {
			t.Errorf("tool_result: %+v", ev)
		}
		page, err := c.ListEvents(t.Context(), "agent-1", run, 0, 0)
		if err != nil || len(page.Events) != 2 || string(page.Events[0].Payload) != `{"tool":"deploy"}` || string(page.Events[1].Payload) != `"ok"` {
			t.Errorf("events as the API sees them: %+v, %v", page, err)
		}
		// A thread that does not exist yet is created.
		mustCall(t, cs, "session_append", map[string]any{"thread": "fresh", "type": "note", "payload": "hello"}, &ev)
		if !strings.HasPrefix(ev.Run, "run-") || ev.Seq != 1 {
			t.Errorf("append to a new thread: %+v", ev)
		}
		if threads, err := c.ListThreads(t.Context(), "agent-1"); err != nil || len(threads) != 2 {
			t.Errorf("threads after an append to a new one: %+v, %v", threads, err)
		}
		wantToolError(t, cs, "session_append", map[string]any{"thread": "no/slash", "type": "note"}, "create thread no/slash")
		wantToolError(t, cs, "session_append", map[string]any{"type": "note"}, "no run")
		wantToolError(t, cs, "session_append", map[string]any{"run": run, "type": "gossip"}, "type")
		wantToolError(t, cs, "session_append", map[string]any{"run": "run-nope", "type": "note"}, "HTTP 404")
	})

	t.Run("orient", func(t *testing.T) {
		var out OrientOutput
		res := call(t, cs, "orient", map[string]any{"files": []string{"/workspace/notes.md"}, "events": 5}, &out)
		if res.IsError || text(res) != "You are in agent-1.\n" || out.Text != text(res) {
			t.Fatalf("orient: error %v, text %q, out %+v", res.IsError, text(res), out)
		}
		data, _ := json.Marshal(out.Orient)
		if !strings.Contains(string(data), `"stop_reason":"idle"`) || !strings.Contains(string(data), `"/workspace/notes.md"`) {
			t.Errorf("orient data: %s", data)
		}
		b.mu.Lock()
		asked := b.orientAsked
		b.mu.Unlock()
		if asked != "agent-1 [/workspace/notes.md] 5" {
			t.Errorf("orient asked the daemon for %q", asked)
		}
		wantToolError(t, cs, "orient", map[string]any{"sandbox": "missing"}, "orient sandbox missing", "HTTP 404")
	})

	t.Run("snapshots", func(t *testing.T) {
		var snap client.Snapshot
		mustCall(t, cs, "snapshot", map[string]any{"label": "before"}, &snap)
		if !strings.HasPrefix(snap.ID, "snap-") || snap.Label != "before" || snap.SandboxName != "agent-1" {
			t.Errorf("snapshot: %+v", snap)
		}
		var fk ForkOutput
		mustCall(t, cs, "fork", map[string]any{"source": snap.ID, "count": 2}, &fk)
		if len(fk.Sandboxes) != 2 || fk.Sandboxes[1].Name != "fork-2" {
			t.Errorf("fork: %+v", fk)
		}
		mustCall(t, cs, "fork", map[string]any{}, &fk)
		if len(fk.Sandboxes) != 1 {
			t.Errorf("fork of the default sandbox: %+v", fk)
		}
		var rb client.RollbackResult
		mustCall(t, cs, "rollback", map[string]any{"snapshot": snap.ID}, &rb)
		if rb.Sandbox.ID != "sb-1" || rb.Safety.ID != "snap-safety" {
			t.Errorf("rollback: %+v", rb)
		}
		wantToolError(t, cs, "rollback", map[string]any{"snapshot": "snap-404"}, "HTTP 404")
		wantToolError(t, cs, "snapshot", map[string]any{"sandbox": "missing"}, "HTTP 404")
	})

	t.Run("network", func(t *testing.T) {
		var n NetworkOutput
		mustCall(t, cs, "network_show", map[string]any{}, &n)
		if !n.Enabled || n.Address != "10.88.0.7" || !n.Policy.Internet || n.Policy.Allow == nil || n.Ports == nil || n.Refused != 2 {
			t.Errorf("network_show: %+v", n)
		}
		// Each part given replaces that part; the others are kept.
		mustCall(t, cs, "network_set", map[string]any{"allow": []string{"*.pypi.org"}, "deny": []string{"10.0.0.0/8"}}, &n)
		if !n.Policy.Internet || !slices.Equal(n.Policy.Allow, []string{"*.pypi.org"}) || !slices.Equal(n.Policy.Deny, []string{"10.0.0.0/8"}) {
			t.Errorf("network_set allow+deny: %+v", n.Policy)
		}
		mustCall(t, cs, "network_set", map[string]any{"internet": false}, &n)
		if n.Policy.Internet || !slices.Equal(n.Policy.Allow, []string{"*.pypi.org"}) {
			t.Errorf("network_set internet=false lost the lists: %+v", n.Policy)
		}
		mustCall(t, cs, "network_set", map[string]any{"allow": []string{}}, &n)
		if n.Policy.Internet || len(n.Policy.Allow) != 0 || !slices.Equal(n.Policy.Deny, []string{"10.0.0.0/8"}) {
			t.Errorf("network_set allow=[]: %+v", n.Policy)
		}
		b.mu.Lock()
		sets := len(b.policies)
		b.mu.Unlock()
		if sets != 3 {
			t.Errorf("%d policies set, want 3", sets)
		}
		wantToolError(t, cs, "network_set", map[string]any{}, "nothing to change")
		wantToolError(t, cs, "network_show", map[string]any{"sandbox": "missing"}, "show network of sandbox missing", "HTTP 404")
		wantToolError(t, cs, "network_set", map[string]any{"sandbox": "missing", "internet": true}, "HTTP 404")
	})

	t.Run("ports", func(t *testing.T) {
		var list PortListOutput
		mustCall(t, cs, "port_list", map[string]any{}, &list)
		if list.Ports == nil || len(list.Ports) != 0 {
			t.Errorf("port_list of none: %+v, want []", list)
		}
		var ep PortExposeOutput
		mustCall(t, cs, "port_expose", map[string]any{"port": 8080}, &ep)
		if ep.Port != 8080 || ep.Public || ep.Token != "port-token" || len(ep.URLs) != 2 ||
			ep.URLs[0] != "https://8080-sb-1.stead.example" || ep.URLs[1] != c.Endpoint()+"/v1/sandboxes/sb-1/ports/8080/" {
			t.Errorf("port_expose private: %+v", ep)
		}
		ep = PortExposeOutput{}
		mustCall(t, cs, "port_expose", map[string]any{"port": 3000, "public": true}, &ep)
		if ep.Port != 3000 || !ep.Public || ep.Token != "" {
			t.Errorf("port_expose public: %+v", ep)
		}
		mustCall(t, cs, "port_list", map[string]any{}, &list)
		if len(list.Ports) != 2 || list.Ports[0].Port != 8080 || list.Ports[1].ExposedAt != "2026-01-02T03:04:05Z" {
			t.Errorf("port_list: %+v", list)
		}
		var un PortUnexposeOutput
		mustCall(t, cs, "port_unexpose", map[string]any{"port": 8080}, &un)
		if un.Port != 8080 || un.Exposed || un.Sandbox != "agent-1" {
			t.Errorf("port_unexpose: %+v", un)
		}
		wantToolError(t, cs, "port_unexpose", map[string]any{"port": 8080}, "not exposed", "HTTP 404")
		wantToolError(t, cs, "port_expose", map[string]any{"port": 0}, "1 to 65535")
		wantToolError(t, cs, "port_expose", map[string]any{"port": 70000}, "1 to 65535")
		wantToolError(t, cs, "port_list", map[string]any{"sandbox": "missing"}, "HTTP 404")
	})
}

// TestSandboxTokenCannotChangeItsNetworkThroughMCP: an MCP server run with
// the sandbox's own token (the agent's) shows its network and ports, and
// every change is a tool error the model can read.
func TestSandboxTokenCannotChangeItsNetworkThroughMCP(t *testing.T) {
	b, good := newDaemon(t)
	c, err := client.New(good.Endpoint(), "agent")
	if err != nil {
		t.Fatal(err)
	}
	cs := connectMemory(t, NewServer(c, Options{Sandbox: "sb-1"}))
	var n NetworkOutput
	mustCall(t, cs, "network_show", map[string]any{}, &n)
	mustCall(t, cs, "port_list", map[string]any{}, nil)
	wantToolError(t, cs, "network_set", map[string]any{"internet": true}, "HTTP 403")
	wantToolError(t, cs, "port_expose", map[string]any{"port": 8080, "public": true}, "HTTP 403")
	wantToolError(t, cs, "port_unexpose", map[string]any{"port": 8080}, "HTTP 403")
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.policies) != 0 || len(b.ports) != 0 {
		t.Errorf("the sandbox's token changed its network: %+v %+v", b.policies, b.ports)
	}
}

func TestNoDefaultSandbox(t *testing.T) {
	_, c := newDaemon(t)
	cs := connectMemory(t, NewServer(c, Options{}))
	wantToolError(t, cs, "read_file", map[string]any{"path": "/x"}, "no sandbox", "--sandbox")
	wantToolError(t, cs, "read_file", map[string]any{"sandbox": "agent-1", "path": "/x"}, "HTTP 404")
	if ins := cs.InitializeResult().Instructions; !strings.Contains(ins, "Every tool needs the sandbox") {
		t.Errorf("instructions: %q", ins)
	}
}

func TestUnauthenticatedDaemonIsToolError(t *testing.T) {
	_, good := newDaemon(t)
	c, err := client.New(good.Endpoint(), "wrong")
	if err != nil {
		t.Fatal(err)
	}
	cs := connectMemory(t, NewServer(c, Options{Sandbox: "agent-1"}))
	wantToolError(t, cs, "list_files", map[string]any{"path": "/"}, "HTTP 401")
}

func TestHTTPHandlerWantsToken(t *testing.T) {
	_, c := newDaemon(t)
	hs := httptest.NewServer(HTTPHandler(NewServer(c, Options{}), HTTPOptions{Token: "tok"}))
	t.Cleanup(hs.Close)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, auth := range []string{"", "Bearer nope"} {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("auth %q: status %d", auth, resp.StatusCode)
		}
	}
	// Without the token the SDK client cannot connect either.
	cl := sdk.NewClient(&sdk.Implementation{Name: "x", Version: "1"}, nil)
	if cs, err := cl.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: hs.URL, MaxRetries: -1}, nil); err == nil {
		_ = cs.Close()
		t.Error("connected without the token")
	}
}

func TestHeadTail(t *testing.T) {
	h := newHeadTail(10)
	_, _ = h.Write([]byte("0123"))
	_, _ = h.Write([]byte("4"))
	if h.Truncated() || h.String() != "01234" {
		t.Fatalf("short: %q", h.String())
	}
	_, _ = h.Write([]byte("56789abcdef"))
	if !h.Truncated() || h.String() != "01234\n... [6 bytes cut] ...\nbcdef" {
		t.Fatalf("long: %q", h.String())
	}
	if got := trimPartialRune([]byte("aé")[:2]); string(got) != "a" {
		t.Fatalf("trimPartialRune: %q", got)
	}
	if got := trimPartialRune([]byte("aé")); string(got) != "aé" {
		t.Fatalf("trimPartialRune whole: %q", got)
	}
}
