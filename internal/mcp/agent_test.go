package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// fakeJob is a background command of the test backend.
type fakeJob struct {
	marker  string // the wrapper's $0
	logPath string
	alive   bool
}

// startJob "runs" a wrapped background command: argv "count N" writes N
// lines 30 ms apart and exits 3; "hang" writes one line and runs until
// killed; "vanish" writes one line and dies without its marker (killed
// with its process group).
func (b *testBackend) startJob(req client.ExecRequest) (client.ExecResult, error) {
	if len(req.Command) < 5 || req.Command[0] != "/bin/sh" || req.Command[2] != jobWrapper {
		return client.ExecResult{}, fmt.Errorf("background command not wrapped: %q: %w", req.Command, errs.ErrInvalid)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.jobs == nil {
		b.jobs = map[int]*fakeJob{}
	}
	pid := 100 + len(b.jobs)
	j := &fakeJob{marker: req.Command[3], logPath: fmt.Sprintf("/var/log/stead/exec-%dab.log", pid), alive: true}
	b.jobs[pid] = j
	b.files[j.logPath] = []byte("started\n")
	argv := req.Command[4:]
	appendLog := func(s string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.files[j.logPath] = append(b.files[j.logPath], s...)
	}
	switch argv[0] {
	case "count":
		n, _ := strconv.Atoi(argv[1])
		go func() {
			for i := range n {
				time.Sleep(30 * time.Millisecond)
				appendLog(fmt.Sprintf("line %d\n", i))
			}
			appendLog("\n" + j.marker + " 3\n")
			b.mu.Lock()
			j.alive = false
			b.mu.Unlock()
		}()
	case "vanish":
		j.alive = false
	}
	return client.ExecResult{Pid: pid, LogPath: j.logPath}, nil
}

// isAliveCheck reports whether req is the server's look for a job's pid.
func isAliveCheck(req client.ExecRequest) bool {
	return len(req.Command) == 6 && req.Command[0] == "/bin/sh" && strings.Contains(req.Command[2], "/proc/")
}

// aliveCheck answers it: exit 0 while the job runs.
func (b *testBackend) aliveCheck(req client.ExecRequest) client.ExecResult {
	pid, _ := strconv.Atoi(req.Command[5])
	b.mu.Lock()
	defer b.mu.Unlock()
	if j := b.jobs[pid]; j != nil && j.alive && strings.Contains(j.marker, req.Command[4]) {
		return client.ExecResult{}
	}
	return client.ExecResult{ExitCode: 1}
}

func (b *testBackend) StatFile(_ context.Context, _, id, p string) (client.FileInfo, error) {
	if err := b.check(id); err != nil {
		return client.FileInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.files[p]; !ok {
		return client.FileInfo{}, fmt.Errorf("%s: %w", p, errs.ErrNotFound)
	}
	return b.info(p), nil
}

func (b *testBackend) RemoveFile(_ context.Context, _, id, p string, recursive bool) error {
	if err := b.check(id); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.files[p]; ok {
		delete(b.files, p)
		return nil
	}
	var below []string
	for f := range b.files {
		if strings.HasPrefix(f, p+"/") {
			below = append(below, f)
		}
	}
	if len(below) == 0 {
		return fmt.Errorf("%s: %w", p, errs.ErrNotFound)
	}
	if !recursive {
		return fmt.Errorf("%s is a directory that is not empty: %w", p, errs.ErrConflict)
	}
	for _, f := range below {
		delete(b.files, f)
	}
	return nil
}

func (b *testBackend) RenameFile(_ context.Context, _, id, from, to string) error {
	if err := b.check(id); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.files[from]
	if !ok {
		return fmt.Errorf("%s: %w", from, errs.ErrNotFound)
	}
	delete(b.files, from)
	b.files[to] = data
	b.modes[to] = b.modes[from]
	return nil
}

// sandbox returns sb-1 as it stands.
func (b *testBackend) sandbox() client.Sandbox {
	state := b.state
	if state == "" {
		state = "running"
	}
	if b.deleted {
		state = "deleted"
	}
	return client.Sandbox{ID: "sb-1", Name: "agent-1", Tenant: "t1", State: state, IdleTimeout: "15m"}
}

func (b *testBackend) GetSandbox(_ context.Context, _, id string) (client.Sandbox, error) {
	if err := b.check(id); err != nil {
		return client.Sandbox{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sandbox(), nil
}

func (b *testBackend) ListSandboxes(context.Context, string, bool) ([]client.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return []client.Sandbox{b.sandbox(), {ID: "sb-2", Name: "other", Tenant: "t1", State: "running"}}, nil
}

// transition moves sb-1 from one of states to state to.
func (b *testBackend) transition(id, to string, from ...string) (client.Sandbox, error) {
	if err := b.check(id); err != nil {
		return client.Sandbox{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.sandbox().State
	for _, f := range from {
		if cur == f {
			b.state = to
			return b.sandbox(), nil
		}
	}
	return client.Sandbox{}, fmt.Errorf("sandbox %s is %s: %w", id, cur, errs.ErrConflict)
}

func (b *testBackend) StartSandbox(_ context.Context, _, id string) (client.Sandbox, error) {
	return b.transition(id, "running", "stopped", "archived")
}

func (b *testBackend) StopSandbox(_ context.Context, _, id string) (client.Sandbox, error) {
	return b.transition(id, "stopped", "running", "paused", "stopped")
}

func (b *testBackend) ResumeSandbox(_ context.Context, _, id string) (client.Sandbox, error) {
	return b.transition(id, "running", "paused")
}

func (b *testBackend) DeleteSandbox(_ context.Context, _, id string, _ bool) (client.Sandbox, error) {
	if err := b.check(id); err != nil {
		return client.Sandbox{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deleted = true
	return b.sandbox(), nil
}

func (b *testBackend) CreateSandbox(_ context.Context, _ string, req client.CreateSandboxRequest) (client.Sandbox, error) {
	return client.Sandbox{ID: "sb-new", Name: req.Name, Tenant: "t1", State: "running", IdleTimeout: req.IdleTimeout}, nil
}

// progressClient connects a client that records the progress
// notifications it gets.
func progressClient(t *testing.T, srv *sdk.Server) (*sdk.ClientSession, func() []*sdk.ProgressNotificationParams) {
	t.Helper()
	var mu sync.Mutex
	var got []*sdk.ProgressNotificationParams
	cl := sdk.NewClient(&sdk.Implementation{Name: "progress-test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, req.Params)
		},
	})
	ct, st := sdk.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := cl.Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, func() []*sdk.ProgressNotificationParams {
		// The client handles notifications in order but apart from
		// responses: one sent before a call returned may not have been
		// handled yet. A ping from the server is handled after them.
		if err := ss.Ping(t.Context(), nil); err != nil {
			t.Fatalf("ping the client: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]*sdk.ProgressNotificationParams(nil), got...)
	}
}

// messages returns the notifications' messages.
func messages(ps []*sdk.ProgressNotificationParams) []string {
	ms := make([]string, len(ps))
	for i, p := range ps {
		ms[i] = p.Message
	}
	return ms
}

// callWithProgress calls a tool with a progress token.
func callWithProgress(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, out any) *sdk.CallToolResult {
	t.Helper()
	params := &sdk.CallToolParams{Name: name, Arguments: args}
	params.SetProgressToken("tok-1")
	res, err := cs.CallTool(t.Context(), params)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error %s", name, text(res))
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

// TestExecSendsProgressWithOutput: a request with a progressToken gets
// progress notifications while the command runs, with growing progress
// and the latest output; one without gets none.
func TestExecSendsProgressWithOutput(t *testing.T) {
	_, c := newDaemon(t)
	cs, got := progressClient(t, NewServer(c, Options{Sandbox: "agent-1", ProgressInterval: 60 * time.Millisecond}))
	var out ExecOutput
	callWithProgress(t, cs, "exec", map[string]any{"command": []string{"slow"}}, &out)
	if !strings.HasPrefix(out.Stdout, "line 0\n") || !strings.HasSuffix(out.Stdout, "line 19\n") {
		t.Fatalf("exec output %q", out.Stdout)
	}
	ps := got()
	if len(ps) < 3 {
		t.Fatalf("%d progress notifications, want at least 3 in 400 ms at 60 ms", len(ps))
	}
	for i, p := range ps {
		if p.ProgressToken != "tok-1" || !strings.Contains(p.Message, "exec slow: running for") {
			t.Errorf("notification %d: %+v", i, p)
		}
		if i > 0 && p.Progress <= ps[i-1].Progress {
			t.Errorf("progress does not grow: %v then %v", ps[i-1].Progress, p.Progress)
		}
	}
	// A tick may come before the first line (or after the last): some
	// notification carries output, not necessarily the first.
	if !slices.ContainsFunc(messages(ps), func(m string) bool { return strings.Contains(m, "line ") }) {
		t.Errorf("no notification carries output: %q", messages(ps))
	}
	n := len(ps)
	mustCall(t, cs, "exec", map[string]any{"command": []string{"slow"}}, &out)
	if len(got()) != n {
		t.Errorf("progress sent to a request without a progressToken")
	}
}

// TestBackgroundExecWaitAndPoll: exec with background returns a handle at
// once; exec_wait follows it with progress to its exit code, without the
// wrapper's marker in the output; exec_poll pages the output by offset; a
// command killed without its marker is reported gone.
func TestBackgroundExecWaitAndPoll(t *testing.T) {
	_, c := newDaemon(t)
	cs, got := progressClient(t, NewServer(c, Options{Sandbox: "agent-1", ProgressInterval: 50 * time.Millisecond,
		JobPollInterval: 10 * time.Millisecond}))
	var started ExecOutput
	mustCall(t, cs, "exec", map[string]any{"command": []string{"count", "10"}, "background": true}, &started)
	if !started.Running || started.Handle == "" {
		t.Fatalf("background exec: %+v", started)
	}
	var poll JobOutput
	mustCall(t, cs, "exec_poll", map[string]any{"handle": started.Handle}, &poll)
	if !poll.Running || poll.ExitCode != nil || !strings.HasPrefix(poll.Output, "started\n") || poll.NextOffset != int64(len(poll.Output)) {
		t.Fatalf("poll while running: %+v", poll)
	}
	from := poll.NextOffset // lines may have come before the poll on a loaded machine
	var done JobOutput
	callWithProgress(t, cs, "exec_wait", map[string]any{"handle": started.Handle, "wait": "10s"}, &done)
	if done.Running || done.ExitCode == nil || *done.ExitCode != 3 || done.Gone {
		t.Fatalf("wait: %+v", done)
	}
	want := "started\n"
	for i := range 10 {
		want += fmt.Sprintf("line %d\n", i)
	}
	if done.Output != want {
		t.Errorf("wait output %q, want %q", done.Output, want)
	}
	if ms := messages(got()); !slices.ContainsFunc(ms, func(m string) bool { return strings.Contains(m, "line ") }) {
		t.Errorf("exec_wait sent no progress with output: %q", ms)
	}
	// From an offset: only what is newer, and no marker.
	mustCall(t, cs, "exec_poll", map[string]any{"handle": started.Handle, "offset": from}, &poll)
	if poll.Running || *poll.ExitCode != 3 || poll.Output != want[from:] || poll.NextOffset != int64(len(want)) {
		t.Errorf("poll from offset: %+v", poll)
	}
	mustCall(t, cs, "exec_poll", map[string]any{"handle": started.Handle, "offset": poll.NextOffset}, &poll)
	if poll.Output != "" || *poll.ExitCode != 3 {
		t.Errorf("poll at the end: %+v", poll)
	}

	var hang ExecOutput
	mustCall(t, cs, "exec", map[string]any{"command": "hang", "background": true}, &hang)
	poll = JobOutput{}
	mustCall(t, cs, "exec_wait", map[string]any{"handle": hang.Handle, "wait": "100ms"}, &poll)
	if !poll.Running || poll.ExitCode != nil || poll.Waited == "" {
		t.Errorf("wait that times out: %+v", poll)
	}

	var vanish ExecOutput
	mustCall(t, cs, "exec", map[string]any{"command": []string{"vanish"}, "background": true}, &vanish)
	poll = JobOutput{}
	mustCall(t, cs, "exec_poll", map[string]any{"handle": vanish.Handle}, &poll)
	if poll.Running || !poll.Gone || poll.ExitCode != nil {
		t.Errorf("killed command: %+v", poll)
	}

	wantToolError(t, cs, "exec_poll", map[string]any{"handle": "nonsense"}, "not one exec returned")
	wantToolError(t, cs, "exec_poll", map[string]any{"handle": started.Handle, "sandbox": "other"}, "belongs to sandbox agent-1")
	wantToolError(t, cs, "exec_poll", map[string]any{"handle": started.Handle, "offset": -1}, "negative")
	wantToolError(t, cs, "exec_wait", map[string]any{"handle": started.Handle, "wait": "forever"}, "Go duration")
	wantToolError(t, cs, "exec", map[string]any{"command": "cat", "background": true, "stdin": "x"}, "stdin")
}

// TestLifecycleTools: an auto-stopped sandbox is started from MCP after
// exec says to; a paused one is resumed; delete wants the name; lists.
func TestLifecycleTools(t *testing.T) {
	b, c := newDaemon(t)
	cs := connectMemory(t, NewServer(c, Options{Sandbox: "agent-1"}))
	b.mu.Lock()
	b.state = "stopped"
	b.mu.Unlock()
	wantToolError(t, cs, "exec", map[string]any{"command": "true"}, "HTTP 409", "call the start tool")
	var sb SandboxOutput
	mustCall(t, cs, "start", map[string]any{}, &sb)
	if sb.State != "running" || sb.ID != "sb-1" {
		t.Errorf("start: %+v", sb)
	}
	mustCall(t, cs, "exec", map[string]any{"command": []string{"echo", "back"}}, nil)
	mustCall(t, cs, "start", map[string]any{}, &sb) // running: left as it is
	b.mu.Lock()
	b.state = "paused"
	b.mu.Unlock()
	mustCall(t, cs, "start", map[string]any{}, &sb)
	if sb.State != "running" {
		t.Errorf("start of a paused sandbox: %+v", sb)
	}
	mustCall(t, cs, "stop", map[string]any{}, &sb)
	if sb.State != "stopped" {
		t.Errorf("stop: %+v", sb)
	}
	var list SandboxListOutput
	mustCall(t, cs, "sandbox_list", map[string]any{}, &list)
	if len(list.Sandboxes) != 2 || list.Sandboxes[0].Name != "agent-1" {
		t.Errorf("sandbox_list: %+v", list)
	}
	mustCall(t, cs, "create", map[string]any{"name": "helper", "idle_timeout": "1h"}, &sb)
	if sb.ID != "sb-new" || sb.Name != "helper" {
		t.Errorf("create: %+v", sb)
	}
	wantToolError(t, cs, "create", map[string]any{"idle_timeout": "later"}, "Go duration")

	wantToolError(t, cs, "delete", map[string]any{}, "confirm")
	wantToolError(t, cs, "delete", map[string]any{"confirm": "agent"}, "nothing deleted", `"agent-1"`)
	wantToolError(t, cs, "delete", map[string]any{"confirm": "sb-1"}, "nothing deleted")
	b.mu.Lock()
	deleted := b.deleted
	b.mu.Unlock()
	if deleted {
		t.Fatal("delete without the right confirmation deleted the sandbox")
	}
	mustCall(t, cs, "delete", map[string]any{"confirm": "agent-1"}, &sb)
	if sb.State != "deleted" {
		t.Errorf("delete: %+v", sb)
	}
	wantToolError(t, cs, "delete", map[string]any{"sandbox": "missing", "confirm": "missing"}, "HTTP 404")
}

// TestSnapshotAndCheckpointLists: snapshot_list gives rollback its ids,
// newest first; checkpoint_list and checkpoint_history show the documents
// and their versions.
func TestSnapshotAndCheckpointLists(t *testing.T) {
	_, c := newDaemon(t)
	cs := connectMemory(t, NewServer(c, Options{Sandbox: "agent-1"}))
	mustCall(t, cs, "snapshot", map[string]any{"label": "one"}, nil)
	mustCall(t, cs, "snapshot", map[string]any{"label": "two"}, nil)
	var snaps SnapshotListOutput
	mustCall(t, cs, "snapshot_list", map[string]any{}, &snaps)
	if len(snaps.Snapshots) != 2 || snaps.Snapshots[0].Label != "two" || snaps.Snapshots[1].ID != "snap-1" {
		t.Fatalf("snapshot_list: %+v", snaps)
	}
	mustCall(t, cs, "rollback", map[string]any{"snapshot": snaps.Snapshots[1].ID}, nil)

	for i := range 3 {
		mustCall(t, cs, "checkpoint_put", map[string]any{"name": "plan", "body": map[string]any{"step": i}}, nil)
	}
	mustCall(t, cs, "checkpoint_put", map[string]any{"name": "notes", "body": "n"}, nil)
	var docs CheckpointListOutput
	mustCall(t, cs, "checkpoint_list", map[string]any{}, &docs)
	if len(docs.Documents) != 2 {
		t.Fatalf("checkpoint_list: %+v", docs)
	}
	for _, d := range docs.Documents {
		if d.Name == "plan" && (d.Version != 3 || d.Versions != 3) {
			t.Errorf("plan: %+v", d)
		}
	}
	var hist CheckpointHistoryOutput
	mustCall(t, cs, "checkpoint_history", map[string]any{"name": "plan"}, &hist)
	if len(hist.Versions) != 3 || hist.Versions[0].Version != 3 || hist.Versions[0].Body != nil {
		t.Errorf("checkpoint_history: %+v", hist)
	}
	mustCall(t, cs, "checkpoint_history", map[string]any{"name": "plan", "bodies": true}, &hist)
	if fmt.Sprint(hist.Versions[0].Body) != "map[step:2]" || fmt.Sprint(hist.Versions[2].Body) != "map[step:0]" {
		t.Errorf("checkpoint_history with bodies: %+v", hist)
	}
	wantToolError(t, cs, "checkpoint_history", map[string]any{}, "name")
	wantToolError(t, cs, "checkpoint_history", map[string]any{"name": ""}, "name is missing")
	wantToolError(t, cs, "checkpoint_history", map[string]any{"name": "absent"}, "HTTP 404")
}

// TestFileTools: remove_file, move_file and search_files.
func TestFileTools(t *testing.T) {
	b, c := newDaemon(t)
	cs := connectMemory(t, NewServer(c, Options{Sandbox: "agent-1"}))
	b.mu.Lock()
	b.files["/workspace/a.go"] = []byte("package a\n// TODO: fix\n")
	b.files["/workspace/sub/b.go"] = []byte("package b\nfunc B() {} // TODO later\n")
	b.files["/workspace/sub/c.txt"] = []byte("TODO in text\n")
	b.files["/workspace/bin.dat"] = []byte("TODO\x00binary")
	b.files["/workspace/node_modules/x/y.go"] = []byte("TODO hidden\n")
	b.mu.Unlock()

	var found SearchFilesOutput
	mustCall(t, cs, "search_files", map[string]any{"name": "*.go"}, &found)
	var paths []string
	for _, m := range found.Matches {
		paths = append(paths, m.Path)
	}
	if strings.Join(paths, " ") != "/workspace/a.go /workspace/sub/b.go" || len(found.Skipped) != 1 {
		t.Errorf("search by name: %+v", found)
	}
	mustCall(t, cs, "search_files", map[string]any{"contains": "TODO"}, &found)
	var lines []string
	for _, m := range found.Matches {
		lines = append(lines, fmt.Sprintf("%s:%d:%s", m.Path, m.Line, m.Text))
	}
	if strings.Join(lines, "|") != "/workspace/a.go:2:// TODO: fix|/workspace/sub/b.go:2:func B() {} // TODO later|/workspace/sub/c.txt:1:TODO in text" {
		t.Errorf("search by content: %q", lines)
	}
	mustCall(t, cs, "search_files", map[string]any{"name": "sub/*.go", "contains": "TODO", "max_results": 1}, &found)
	if len(found.Matches) != 1 || found.Matches[0].Path != "/workspace/sub/b.go" {
		t.Errorf("search by path glob and content: %+v", found)
	}
	mustCall(t, cs, "search_files", map[string]any{"contains": "TODO", "max_results": 1}, &found)
	if len(found.Matches) != 1 || !found.Truncated {
		t.Errorf("bounded search: %+v", found)
	}
	wantToolError(t, cs, "search_files", map[string]any{}, "nothing to search for")
	wantToolError(t, cs, "search_files", map[string]any{"name": "[x"}, "not a valid glob")
	wantToolError(t, cs, "search_files", map[string]any{"name": "*", "path": "rel"}, "absolute")

	var fe FileEntry
	mustCall(t, cs, "move_file", map[string]any{"from": "/workspace/a.go", "to": "/workspace/z.go"}, &fe)
	if fe.Path != "/workspace/z.go" {
		t.Errorf("move_file: %+v", fe)
	}
	wantToolError(t, cs, "move_file", map[string]any{"from": "/workspace/a.go", "to": "/workspace/y.go"}, "HTTP 404")
	wantToolError(t, cs, "move_file", map[string]any{"from": "a", "to": "/"}, "absolute", "root")
	wantToolError(t, cs, "remove_file", map[string]any{"path": "/workspace/sub"}, "HTTP 409")
	mustCall(t, cs, "remove_file", map[string]any{"path": "/workspace/sub", "recursive": true}, nil)
	mustCall(t, cs, "remove_file", map[string]any{"path": "/workspace/z.go"}, nil)
	b.mu.Lock()
	left := len(b.files)
	b.mu.Unlock()
	if left != 2 {
		t.Errorf("%d files left, want bin.dat and node_modules/x/y.go", left)
	}
	wantToolError(t, cs, "remove_file", map[string]any{"path": "/"}, "root")
}

// TestConfinedSessionRefusesOtherSandboxes: with Confine, a call naming
// another sandbox, create and fork are refused before the daemon is
// asked, and sandbox_list shows only the session's sandbox.
func TestConfinedSessionRefusesOtherSandboxes(t *testing.T) {
	b, c := newDaemon(t)
	cs := connectMemory(t, NewServer(c, Options{Sandbox: "agent-1", SandboxAliases: []string{"sb-1"}, Confine: true}))
	b.mu.Lock()
	n := len(b.execs)
	b.mu.Unlock()
	wantToolError(t, cs, "exec", map[string]any{"sandbox": "other", "command": "true"}, "confined to sandbox \"agent-1\"")
	wantToolError(t, cs, "fork", map[string]any{}, "confined")
	wantToolError(t, cs, "fork", map[string]any{"source": "other"}, "confined")
	wantToolError(t, cs, "create", map[string]any{"name": "x"}, "confined")
	wantToolError(t, cs, "read_file", map[string]any{"sandbox": "other", "path": "/etc/passwd"}, "confined")
	mustCall(t, cs, "exec", map[string]any{"sandbox": "sb-1", "command": "true"}, nil)
	var list SandboxListOutput
	mustCall(t, cs, "sandbox_list", map[string]any{}, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != "sb-1" {
		t.Errorf("sandbox_list of a confined session: %+v", list)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.execs) != n+1 {
		t.Errorf("%d execs reached the daemon, want only the one on agent-1", len(b.execs)-n)
	}
}

// TestToolAnnotations: every read-only tool says so and is idempotent;
// the destructive ones say they are.
func TestToolAnnotations(t *testing.T) {
	_, c := newDaemon(t)
	cs := connectMemory(t, NewServer(c, Options{}))
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	readOnly := map[string]bool{"read_file": true, "list_files": true, "disk_usage": true, "checkpoint_get": true,
		"orient": true, "network_show": true, "port_list": true, "exec_poll": true, "exec_wait": true,
		"sandbox_list": true, "snapshot_list": true, "checkpoint_list": true, "checkpoint_history": true, "search_files": true}
	destructive := map[string]bool{"delete": true, "remove_file": true, "move_file": true, "rollback": true, "stop": true, "exec": true}
	for _, tool := range res.Tools {
		a := tool.Annotations
		if a == nil {
			t.Errorf("%s: no annotations", tool.Name)
			continue
		}
		if readOnly[tool.Name] != a.ReadOnlyHint || (a.ReadOnlyHint && !a.IdempotentHint) {
			t.Errorf("%s: readOnlyHint %v idempotentHint %v", tool.Name, a.ReadOnlyHint, a.IdempotentHint)
		}
		if destructive[tool.Name] && (a.DestructiveHint == nil || !*a.DestructiveHint) {
			t.Errorf("%s: not marked destructive", tool.Name)
		}
	}
	for _, tool := range res.Tools {
		if tool.Name == "delete" {
			schema, _ := json.Marshal(tool.InputSchema)
			if !bytes.Contains(schema, []byte(`"required":["confirm"]`)) {
				t.Errorf("delete schema does not require confirm: %s", schema)
			}
		}
	}
}

// TestHTTPRefusesForeignOrigins: a browser request from a foreign origin
// is refused (DNS rebinding); localhost origins, configured ones and
// requests without an Origin pass.
func TestHTTPRefusesForeignOrigins(t *testing.T) {
	_, c := newDaemon(t)
	hs := httptest.NewServer(HTTPHandler(NewServer(c, Options{}), HTTPOptions{AllowedOrigins: []string{"https://ide.example.com"}}))
	t.Cleanup(hs.Close)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for origin, want := range map[string]int{
		"https://evil.example":     http.StatusForbidden,
		"http://attacker.test:80":  http.StatusForbidden,
		"null":                     http.StatusForbidden,
		"http://localhost:3000":    http.StatusOK,
		"http://127.0.0.1":         http.StatusOK,
		"https://ide.example.com/": http.StatusOK,
		"":                         http.StatusOK,
	} {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("origin %q: status %d, want %d", origin, resp.StatusCode, want)
		}
	}
}

func TestSplitJobLog(t *testing.T) {
	const nonce = "0123456789abcdef"
	m := jobMarkerPrefix + nonce + "]"
	for _, tc := range []struct {
		in   string
		out  string
		code int
		done bool
	}{
		{"hello\n\n" + m + " 0\n", "hello\n", 0, true},
		{"\n" + m + " 127\n", "", 127, true},
		{m + " 3\n", "", 3, true},
		{"hello\n", "hello\n", 0, false},
		{"x\n" + m + " 3", "x\n" + m + " 3", 0, false},       // no newline yet
		{"x\n" + m + " 03\n", "x\n" + m + " 03\n", 0, false}, // not canonical
		{"x\n" + m + " 256\n", "x\n" + m + " 256\n", 0, false},
		{"\n" + jobMarkerPrefix + "ffffffffffffffff] 0\n", "\n" + jobMarkerPrefix + "ffffffffffffffff] 0\n", 0, false},
		{"\n" + m + " 1\nmore\n", "\n" + m + " 1\nmore\n", 0, false},
	} {
		out, code, done := splitJobLog([]byte(tc.in), nonce)
		if string(out) != tc.out || code != tc.code || done != tc.done {
			t.Errorf("splitJobLog(%q) = %q %d %v, want %q %d %v", tc.in, out, code, done, tc.out, tc.code, tc.done)
		}
	}
}

func FuzzSplitJobLog(f *testing.F) {
	const nonce = "0123456789abcdef"
	m := jobMarkerPrefix + nonce + "]"
	for _, s := range []string{"", "x", "\n" + m + " 0\n", m + " 255\n", "a\n" + m + " 12", m, "\n\n" + m + " 1\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, code, done := splitJobLog(data, nonce)
		if !done {
			if !bytes.Equal(out, data) {
				t.Fatalf("not done but output changed")
			}
			return
		}
		if code < 0 || code > 255 || !bytes.HasPrefix(data, out) {
			t.Fatalf("code %d, output %q of %q", code, out, data)
		}
		if want := fmt.Sprintf("%s %d\n", m, code); !bytes.HasSuffix(data, []byte(want)) {
			t.Fatalf("done without the marker at the end: %q", data)
		}
	})
}

func FuzzParseHandle(f *testing.F) {
	for _, s := range []string{"agent-1/42/0123456789abcdef/exec-123.log", "", "a/b/c/d", "sb/1/0123456789abcdef/../x.log",
		"a/0/0123456789abcdef/exec-1.log", "a/01/0123456789abcdef/exec-1.log"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		j, err := parseHandle(h)
		if err != nil {
			return
		}
		if j.Handle() != h {
			t.Fatalf("handle %q parses to %+v, which prints %q", h, j, j.Handle())
		}
		if path.Dir(j.LogPath) != jobLogDir || path.Clean(j.LogPath) != j.LogPath || j.Pid <= 0 {
			t.Fatalf("handle %q: log %q pid %d", h, j.LogPath, j.Pid)
		}
	})
}

func FuzzOriginAllowed(f *testing.F) {
	for _, s := range []string{"http://localhost:3000", "https://evil.example", "null", "http://127.0.0.1.evil.example",
		"http://[::1]:8080", "http://localhost@evil.example", "file://", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, origin string) {
		if !OriginAllowed(origin, nil) {
			return
		}
		// Whatever passes names a loopback host.
		u := strings.TrimPrefix(strings.TrimPrefix(strings.ToLower(origin), "http://"), "https://")
		if !strings.HasPrefix(u, "localhost") && !strings.HasPrefix(u, "127.") && !strings.HasPrefix(u, "[::1]") &&
			!strings.HasPrefix(u, "[0:0:0:0:0:0:0:1]") && !strings.HasPrefix(u, "[::ffff:127.") && !strings.HasPrefix(u, "[0") {
			t.Fatalf("origin %q allowed", origin)
		}
	})
}
