package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/session"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// sessionBackend serves the CLI tests' session log from a real session
// service on a real SQLite store; the sandbox routes come from cliBackend.
type sessionBackend struct {
	*cliBackend
	*session.Sessions
}

func (b *sessionBackend) Authenticate(_ context.Context, secret string) (api.Principal, error) {
	if secret != "k" {
		return api.Principal{}, errs.ErrUnauthenticated
	}
	return api.Principal{TenantID: "t1", KeyID: "key-cli"}, nil
}

func newSessionServer(t *testing.T) *httptest.Server {
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
	b := &sessionBackend{cliBackend: &cliBackend{}, Sessions: session.New(st)}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	return srv
}

func TestSessionCommandsRoundTrip(t *testing.T) {
	srv := newSessionServer(t)
	must := func(stdin string, a ...string) string {
		t.Helper()
		code, out, errOut := steadIn(t, srv, stdin, a...)
		if code != exitOK {
			t.Fatalf("stead %s: exit %d: %s", strings.Join(a, " "), code, errOut)
		}
		return out
	}
	if out := must("", "session", "threads", "agent-1", "--create", "main", "--keep-last", "1000"); !strings.Contains(out, "\tmain") {
		t.Fatalf("create thread: %q", out)
	}
	if out := must("", "session", "threads", "agent-1"); !strings.Contains(out, "main") || !strings.Contains(out, "last 1000") {
		t.Fatalf("threads: %q", out)
	}
	run := strings.TrimSpace(must("", "session", "runs", "agent-1", "main", "--start"))
	if !strings.HasPrefix(run, "run-") {
		t.Fatalf("start run printed %q", run)
	}
	if out := must("", "session", "append", "agent-1", run, "tool_intent", `{"tool":"send_mail"}`, "--key", "mail-1"); strings.TrimSpace(out) != "1" {
		t.Fatalf("append intent: %q", out)
	}
	// A retry with the same key prints the original seq.
	if out := must("", "session", "append", "agent-1", run, "tool_intent", `{"tool":"send_mail"}`, "--key", "mail-1"); strings.TrimSpace(out) != "1" {
		t.Fatalf("retried intent: %q", out)
	}
	batch := `{"type":"tool_intent","payload":{"tool":"rm"}}
{"type":"tool_result","intent":2,"payload":{"ok":true}}

{"type":"checkpoint","payload":{"step":3}}
`
	if out := must(batch, "session", "append", "agent-1", run, "--batch", "-"); out != "2\n3\n4\n" {
		t.Fatalf("batch append: %q", out)
	}
	if out := must(`"from stdin"`, "session", "append", "agent-1", run, "note", "-"); strings.TrimSpace(out) != "5" {
		t.Fatalf("append from stdin: %q", out)
	}
	out := must("", "session", "resume", "agent-1", run)
	if !strings.Contains(out, "Safe point: seq 4 (checkpoint)") || !strings.Contains(out, "In doubt (1") || !strings.Contains(out, "send_mail") {
		t.Fatalf("resume: %q", out)
	}
	out = must("", "session", "events", "agent-1", run, "--after", "1", "--limit", "2")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "2\t") || !strings.Contains(lines[1], "intent=2") {
		t.Fatalf("events --after 1 --limit 2: %q", out)
	}
	out = must("", "--json", "session", "events", "agent-1", run)
	var seqs []int64
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e struct {
			Seq int64 `json:"seq"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("events --json line %q: %v", line, err)
		}
		seqs = append(seqs, e.Seq)
	}
	if len(seqs) != 5 || seqs[4] != 5 {
		t.Fatalf("events --json seqs %v", seqs)
	}
	if out := must("", "session", "end", "agent-1", run, "--status", "failed"); !strings.Contains(out, "failed, last seq 5") {
		t.Fatalf("end: %q", out)
	}
	// Following an ended run prints what is left and returns.
	if out := must("", "session", "events", "-f", "agent-1", run, "--after", "3"); len(strings.Split(strings.TrimSpace(out), "\n")) != 2 {
		t.Fatalf("events -f of an ended run: %q", out)
	}
	if out := must("", "session", "runs", "agent-1", "main"); !strings.Contains(out, "failed") {
		t.Fatalf("runs: %q", out)
	}

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"session", "append", "agent-1", run, "note"}, exitConflict, "ended"},
		{[]string{"session", "end", "agent-1", run}, exitConflict, "ended"},
		{[]string{"session", "resume", "agent-1", "run-nope"}, exitNotFound, ""},
		{[]string{"session", "threads", "missing"}, exitNotFound, ""},
		{[]string{"session", "append", "agent-1", run, "note", "{bad"}, exitUsage, "not JSON"},
		{[]string{"session", "append", "agent-1", run}, exitUsage, "TYPE"},
		{[]string{"session", "threads", "agent-1", "--keep-last", "5"}, exitUsage, "--create"},
	} {
		code, _, errOut := steadIn(t, srv, "", tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("stead %s: exit %d (%s), want %d with %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.msg)
		}
	}
}
