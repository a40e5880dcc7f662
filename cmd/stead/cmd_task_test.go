package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
	"github.com/stead-dev/stead/internal/tasks"
)

// taskBackend serves the CLI tests' structured state from a real tasks
// service on a real SQLite store; the sandbox routes come from cliBackend.
type taskBackend struct {
	*cliBackend
	*tasks.Tasks
}

func (b *taskBackend) Authenticate(_ context.Context, secret string) (api.Principal, error) {
	if secret != "k" {
		return api.Principal{}, errs.ErrUnauthenticated
	}
	return api.Principal{TenantID: "t1", KeyID: "key-cli"}, nil
}

// newTaskServer serves a daemon whose tenant t1 has sandbox "agent-1"
// (and tenant t2 has "theirs").
func newTaskServer(t *testing.T) *httptest.Server {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for _, tn := range []string{"t1", "t2"} {
		if err := st.CreateTenant(ctx, store.Tenant{ID: tn}); err != nil {
			t.Fatal(err)
		}
	}
	for _, sb := range []store.Sandbox{
		{ID: "sb-1", TenantID: "t1", Name: "agent-1", State: store.StateRunning},
		{ID: "sb-2", TenantID: "t2", Name: "theirs", State: store.StateRunning},
	} {
		if _, err := st.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	b := &taskBackend{cliBackend: &cliBackend{}, Tasks: tasks.New(st)}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	return srv
}

func TestTaskCommandsRoundTrip(t *testing.T) {
	srv := newTaskServer(t)
	must := func(stdin string, a ...string) string {
		t.Helper()
		code, out, errOut := steadIn(t, srv, stdin, a...)
		if code != exitOK {
			t.Fatalf("stead %s: exit %d: %s", strings.Join(a, " "), code, errOut)
		}
		return out
	}
	if out := must("", "task", "add", "agent-1", `{"goal":"fix the build"}`, "--id", "build"); strings.TrimSpace(out) != "build" {
		t.Fatalf("add: %q", out)
	}
	gen := strings.TrimSpace(must(`{"goal":"write docs"}`, "task", "add", "agent-1", "-"))
	if !strings.HasPrefix(gen, "task-") {
		t.Fatalf("add from stdin printed %q", gen)
	}
	must("", "task", "add", "agent-1", "--id", "later")

	if out := must("", "task", "set-state", "agent-1", "build", "in_progress", "--if-state", "open"); strings.TrimSpace(out) != "build: in_progress" {
		t.Fatalf("set-state: %q", out)
	}
	// A second claim, and an illegal move, are conflicts (exit 4).
	code, _, errOut := steadIn(t, srv, "", "task", "set-state", "agent-1", "build", "in_progress", "--if-state", "open")
	if code != exitConflict || !strings.Contains(errOut, "not open") {
		t.Fatalf("second claim: exit %d: %s", code, errOut)
	}
	code, _, errOut = steadIn(t, srv, "", "task", "set-state", "agent-1", gen, "done")
	if code != exitConflict || !strings.Contains(errOut, "cannot become done") {
		t.Fatalf("open → done: exit %d: %s", code, errOut)
	}
	must("", "task", "set-state", "agent-1", "build", "done", "--payload", `{"commit":"abc123"}`)
	must("", "task", "set-state", "agent-1", "later", "in_progress")

	out := must("", "task", "ls", "agent-1", "--open")
	if strings.Contains(out, "build") || !strings.Contains(out, gen) || !strings.Contains(out, "later") || !strings.Contains(out, "in_progress") {
		t.Fatalf("ls --open: %q", out)
	}
	out = must("", "task", "ls", "agent-1", "--state", "done", "--json")
	var list []client.Task
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 || list[0].ID != "build" ||
		strings.Join(strings.Fields(string(list[0].Payload)), "") != `{"commit":"abc123"}` {
		t.Fatalf("ls --state done --json: %q", out)
	}
	if out := must("", "task", "ls", "agent-1", "--since", "1h", "--limit", "2", "--json"); strings.Count(out, `"id"`) != 2 {
		t.Fatalf("ls --since 1h --limit 2: %q", out)
	}
	if out := must("", "task", "ls", "agent-1", "--since", "2999-01-01T00:00:00Z"); strings.Count(out, "\n") != 1 {
		t.Fatalf("ls --since the future: %q", out)
	}
	var got client.Task
	if err := json.Unmarshal([]byte(must("", "task", "get", "agent-1", "build")), &got); err != nil || got.State != "done" || got.Sandbox != "sb-1" {
		t.Fatalf("get: %+v %v", got, err)
	}

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"task", "get", "agent-1", "nope"}, exitNotFound, "nope"},
		{[]string{"task", "ls", "theirs"}, exitNotFound, "theirs"},
		{[]string{"task", "add", "agent-1", "not json"}, exitUsage, "not JSON"},
		{[]string{"kv", "put", "agent-1", "k", "text"}, exitUsage, "quote a string"},
		{[]string{"task", "ls", "agent-1", "--since", "last week"}, exitUsage, "--since"},
		{[]string{"task", "set-state", "agent-1", "build", "finished"}, exitError, "state"},
		{[]string{"task", "add", "agent-1", "--id", "build"}, exitConflict, "taken"},
	} {
		code, _, errOut := steadIn(t, srv, "", tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("stead %s: exit %d (want %d): %s", strings.Join(tc.args, " "), code, tc.code, errOut)
		}
	}
}

func TestObsCommandsRoundTrip(t *testing.T) {
	srv := newTaskServer(t)
	must := func(stdin string, a ...string) string {
		t.Helper()
		code, out, errOut := steadIn(t, srv, stdin, a...)
		if code != exitOK {
			t.Fatalf("stead %s: exit %d: %s", strings.Join(a, " "), code, errOut)
		}
		return out
	}
	if out := must("", "obs", "add", "agent-1", "test_result", `{"passed":41,"failed":1}`); strings.TrimSpace(out) != "1" {
		t.Fatalf("add: %q", out)
	}
	if out := must(`{"loss":0.1}`, "obs", "add", "agent-1", "metric", "-"); strings.TrimSpace(out) != "2" {
		t.Fatalf("add from stdin: %q", out)
	}
	must("", "obs", "add", "agent-1", "note")
	out := must("", "obs", "ls", "agent-1")
	if !strings.Contains(out, "test_result") || !strings.Contains(out, `{"loss":0.1}`) || !strings.Contains(out, "key-cli") {
		t.Fatalf("ls: %q", out)
	}
	out = must("", "obs", "ls", "agent-1", "--after", "1", "--json")
	var list []client.Observation
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 || list[0].Seq != 2 || list[1].Kind != "note" {
		t.Fatalf("ls --after 1: %q", out)
	}
	out = must("", "obs", "ls", "agent-1", "--kind", "metric", "--json")
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 || list[0].Seq != 2 {
		t.Fatalf("ls --kind metric: %q", out)
	}
	if code, _, errOut := steadIn(t, srv, "", "obs", "add", "agent-1", "bad kind"); code != exitError {
		t.Errorf("bad kind: exit %d: %s", code, errOut)
	}
}

func TestKVCommandsRoundTrip(t *testing.T) {
	srv := newTaskServer(t)
	must := func(stdin string, a ...string) string {
		t.Helper()
		code, out, errOut := steadIn(t, srv, stdin, a...)
		if code != exitOK {
			t.Fatalf("stead %s: exit %d: %s", strings.Join(a, " "), code, errOut)
		}
		return out
	}
	if out := must("", "kv", "put", "agent-1", "cfg/model", `"opus"`, "--if-match", "0"); strings.TrimSpace(out) != "cfg/model: version 1" {
		t.Fatalf("put: %q", out)
	}
	if out := must(`{"t": 0.2}`, "kv", "put", "agent-1", "cfg/params", "-"); !strings.Contains(out, "version 1") {
		t.Fatalf("put from stdin: %q", out)
	}
	must("", "kv", "put", "agent-1", "other", "true")
	if out := must("", "kv", "put", "agent-1", "cfg/model", `"sonnet"`, "--if-match", "1"); !strings.Contains(out, "version 2") {
		t.Fatalf("update: %q", out)
	}
	code, _, errOut := steadIn(t, srv, "", "kv", "put", "agent-1", "cfg/model", `"haiku"`, "--if-match", "1")
	if code != exitConflict || !strings.Contains(errOut, "version 2") {
		t.Fatalf("stale put: exit %d: %s", code, errOut)
	}
	if out := must("", "kv", "get", "agent-1", "cfg/model"); strings.TrimSpace(out) != `"sonnet"` {
		t.Fatalf("get: %q", out)
	}
	var e client.KVEntry
	if err := json.Unmarshal([]byte(must("", "kv", "get", "agent-1", "cfg/params", "--json")), &e); err != nil || e.Version != 1 ||
		!strings.Contains(string(e.Value), "0.2") {
		t.Fatalf("get --json: %+v %v", e, err)
	}
	out := must("", "kv", "ls", "agent-1", "--prefix", "cfg/")
	if !strings.Contains(out, "cfg/model") || !strings.Contains(out, "cfg/params") || strings.Contains(out, "other") {
		t.Fatalf("ls --prefix: %q", out)
	}
	if code, _, _ := steadIn(t, srv, "", "kv", "rm", "agent-1", "cfg/model", "--if-match", "1"); code != exitConflict {
		t.Fatalf("stale rm: exit %d", code)
	}
	must("", "kv", "rm", "agent-1", "cfg/model", "--if-match", "2")
	if code, _, _ := steadIn(t, srv, "", "kv", "get", "agent-1", "cfg/model"); code != exitNotFound {
		t.Fatalf("get removed key: exit %d", code)
	}
	if code, _, _ := steadIn(t, srv, "", "kv", "rm", "agent-1", "cfg/model"); code != exitNotFound {
		t.Fatalf("rm removed key: exit %d", code)
	}
	if code, _, _ := steadIn(t, srv, "", "kv", "get", "theirs", "k"); code != exitNotFound {
		t.Fatalf("another tenant's sandbox: exit %d", code)
	}
	if code, _, errOut := steadIn(t, srv, "", "kv", "put", "agent-1", "a..b", "1"); code != exitError || !strings.Contains(errOut, "..") {
		t.Fatalf("bad key: exit %d: %s", code, errOut)
	}
}
