package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/state"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// checkpointBackend serves the CLI tests' checkpoints from a real state
// service on a real SQLite store; the sandbox routes come from cliBackend.
type checkpointBackend struct {
	*cliBackend
	*state.Service
}

func (b *checkpointBackend) Authenticate(_ context.Context, secret string) (api.Principal, error) {
	if secret != "k" {
		return api.Principal{}, errs.ErrUnauthenticated
	}
	return api.Principal{TenantID: "t1", KeyID: "key-cli"}, nil
}

// newCheckpointServer serves a daemon whose tenant t1 has sandbox
// "agent-1" (and tenant t2 has "theirs").
func newCheckpointServer(t *testing.T) *httptest.Server {
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
	b := &checkpointBackend{cliBackend: &cliBackend{}, Service: state.New(st)}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	return srv
}

// steadIn runs the CLI with stdin.
func steadIn(t *testing.T, srv *httptest.Server, stdin string, a ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runIO(append([]string{"--endpoint", srv.URL, "--api-key", "k"}, a...), strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestCheckpointCommandsRoundTrip(t *testing.T) {
	srv := newCheckpointServer(t)
	dir := t.TempDir()
	planFile := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planFile, []byte(`{"step": 1, "todo": ["a"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(stdin string, a ...string) string {
		t.Helper()
		code, out, errOut := steadIn(t, srv, stdin, a...)
		if code != exitOK {
			t.Fatalf("stead %s: exit %d: %s", strings.Join(a, " "), code, errOut)
		}
		return out
	}

	if out := must("", "checkpoint", "put", "agent-1", "plan", planFile, "--if-match", "0", "--run", "run-1"); !strings.Contains(out, "agent-1/plan: version 1") {
		t.Fatalf("put: %q", out)
	}
	if out := must(`{"step": 2}`, "checkpoint", "put", "agent-1", "plan", "-", "--if-match", "1"); !strings.Contains(out, "version 2") {
		t.Fatalf("put from stdin: %q", out)
	}
	// A stale --if-match is a conflict (exit 4) and changes nothing.
	code, _, errOut := steadIn(t, srv, `{"step": 99}`, "checkpoint", "put", "agent-1", "plan", "-", "--if-match", "1")
	if code != exitConflict || !strings.Contains(errOut, "latest version is 2") {
		t.Fatalf("stale put: exit %d: %s", code, errOut)
	}

	out := must("", "checkpoint", "get", "agent-1", "plan")
	var body map[string]any
	if err := json.Unmarshal([]byte(out), &body); err != nil || body["step"] != float64(2) {
		t.Fatalf("get printed %q", out)
	}
	out = must("", "checkpoint", "get", "agent-1", "plan", "--version", "1", "--json")
	var env struct {
		Version   int64           `json:"version"`
		Principal string          `json:"principal"`
		Run       string          `json:"run"`
		Body      json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal([]byte(out), &env); err != nil || env.Version != 1 || env.Principal != "key-cli" || env.Run != "run-1" ||
		!strings.Contains(string(env.Body), `"todo"`) {
		t.Fatalf("get --version 1 --json printed %q", out)
	}

	if out := must("", "checkpoint", "rollback", "agent-1", "plan", "1"); !strings.Contains(out, "version 3 (rollback from 1)") {
		t.Fatalf("rollback: %q", out)
	}
	out = must("", "checkpoint", "history", "agent-1", "plan")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || !strings.Contains(lines[3], "rollback from 1") ||
		!strings.Contains(lines[1], "run-1") || !strings.Contains(lines[1], "key-cli") {
		t.Fatalf("history:\n%s", out)
	}

	// A schema refuses a write that fails it (exit 1, the reason shown).
	must(`{"type": "object", "required": ["step"], "properties": {"step": {"type": "integer"}}}`,
		"checkpoint", "schema", "agent-1", "plan", "-")
	code, _, errOut = steadIn(t, srv, `{"step": "three"}`, "checkpoint", "put", "agent-1", "plan", "-")
	if code != exitError || !strings.Contains(errOut, "schema") || !strings.Contains(errOut, "/step") {
		t.Fatalf("put failing the schema: exit %d: %s", code, errOut)
	}
	must(`{"step": 4}`, "checkpoint", "put", "agent-1", "plan", "-", "--agent", "planner")
	out = must("", "checkpoint", "ls", "agent-1")
	if !strings.Contains(out, "planner") || !strings.Contains(out, "yes") || strings.Count(out, "plan") < 2 {
		t.Fatalf("ls:\n%s", out)
	}
	must("", "checkpoint", "schema", "agent-1", "plan", "--remove")
	must(`"anything goes"`, "checkpoint", "put", "agent-1", "plan", "-")

	must("", "checkpoint", "rm", "agent-1", "plan")
	if code, _, errOut := steadIn(t, srv, "", "checkpoint", "get", "agent-1", "plan"); code != exitNotFound {
		t.Fatalf("get after rm: exit %d: %s", code, errOut)
	}
}

func TestCheckpointCommandsExitCodes(t *testing.T) {
	srv := newCheckpointServer(t)
	cases := []struct {
		stdin string
		args  []string
		code  int
	}{
		{"", []string{"checkpoint", "get", "theirs", "plan"}, exitNotFound},
		{"1", []string{"checkpoint", "put", "theirs", "plan", "-"}, exitNotFound},
		{"", []string{"checkpoint", "ls", "theirs"}, exitNotFound},
		{"", []string{"checkpoint", "ls", "no-such-sandbox"}, exitNotFound},
		{"", []string{"checkpoint", "put", "agent-1", "plan"}, exitUsage},
		{"", []string{"checkpoint", "put", "agent-1", "plan", "/no/such/file.json"}, exitUsage},
		{"1", []string{"checkpoint", "put", "agent-1", "plan", "-", "--if-match", "-1"}, exitUsage},
		{"", []string{"checkpoint", "rollback", "agent-1", "plan", "zero"}, exitUsage},
		{"", []string{"checkpoint", "schema", "agent-1", "plan"}, exitUsage},
		{"{", []string{"checkpoint", "schema", "agent-1", "plan", "-"}, exitUsage},
		{"", []string{"checkpoint", "bogus"}, exitUsage},
		{"{not json", []string{"checkpoint", "put", "agent-1", "plan", "-"}, exitError},
		{"1", []string{"checkpoint", "put", "agent-1", "a/b", "-"}, exitError},
		{"1", []string{"checkpoint", "put", "agent-1", "-x", "-"}, exitUsage},
		{"1", []string{"checkpoint", "put", "agent-1", ".hidden", "-"}, exitError},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, errOut := steadIn(t, srv, tc.stdin, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, errOut)
			}
		})
	}
}

func TestCheckpointPolicyCommand(t *testing.T) {
	srv := newCheckpointServer(t)
	must := func(stdin string, a ...string) string {
		t.Helper()
		code, out, errOut := steadIn(t, srv, stdin, a...)
		if code != exitOK {
			t.Fatalf("stead %s: exit %d: %s", strings.Join(a, " "), code, errOut)
		}
		return out
	}
	must(`[1]`, "checkpoint", "put", "agent-1", "log", "-")
	out := must("", "checkpoint", "policy", "agent-1", "log", "--mutability", "append-only", "--keep", "none")
	if !strings.Contains(out, "agent-1/log: write any, read any, append-only, keep 1") {
		t.Fatalf("policy: %q", out)
	}
	must(`[1,2]`, "checkpoint", "put", "agent-1", "log", "-")
	code, _, errOut := steadIn(t, srv, `[2]`, "checkpoint", "put", "agent-1", "log", "-")
	if code != exitConflict || !strings.Contains(errOut, "append-only") {
		t.Fatalf("non-extending put: exit %d: %s", code, errOut)
	}
	if out := must("", "checkpoint", "policy", "agent-1", "log"); !strings.Contains(out, "append-only, keep 1") {
		t.Fatalf("show policy: %q", out)
	}
	if out := must("", "checkpoint", "ls", "agent-1"); !strings.Contains(out, "w:any r:any append-only") {
		t.Fatalf("ls:\n%s", out)
	}
	// Governed: this non-admin key may no longer change the policy.
	code, _, errOut = steadIn(t, srv, "", "checkpoint", "policy", "agent-1", "log", "--mutability", "mutable")
	if code == exitOK || !strings.Contains(errOut, "admin") {
		t.Fatalf("re-govern as a plain key: exit %d: %s", code, errOut)
	}
	// A write limited to the agent token refuses this key.
	must("", "checkpoint", "policy", "agent-1", "notes", "--write", "agent", "--read", "keys=key-cli")
	code, _, errOut = steadIn(t, srv, `{}`, "checkpoint", "put", "agent-1", "notes", "-")
	if code == exitOK || !strings.Contains(errOut, "403") {
		t.Fatalf("put as a key on an agent-only document: exit %d: %s", code, errOut)
	}

	for _, bad := range [][]string{
		{"--write", "everyone"}, {"--read", "keys="}, {"--mutability", "sometimes"}, {"--keep", "0"}, {"--keep", "many"},
	} {
		code, _, errOut := steadIn(t, srv, "", append([]string{"checkpoint", "policy", "agent-1", "plan"}, bad...)...)
		if code != exitUsage {
			t.Errorf("policy %v: exit %d, want usage: %s", bad, code, errOut)
		}
	}
	if code, _, _ := steadIn(t, srv, "", "checkpoint", "policy", "agent-1", "absent"); code != exitNotFound {
		t.Errorf("show policy of an absent document: exit %d, want not found", code)
	}
}
