package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// auditCLIBackend serves a real audit trail (SQLite store, signing key)
// behind the API; key "k" is an admin of the default tenant, "u" a plain
// key.
type auditCLIBackend struct {
	*cliBackend
	*audit.Backend
}

func (b *auditCLIBackend) Authenticate(_ context.Context, secret string) (api.Principal, error) {
	switch secret {
	case "k":
		return api.Principal{TenantID: store.DefaultTenant, KeyID: "key-admin", Admin: true}, nil
	case "u":
		return api.Principal{TenantID: store.DefaultTenant, KeyID: "key-user"}, nil
	}
	return api.Principal{}, errs.ErrUnauthenticated
}

func newAuditServer(t *testing.T) (*httptest.Server, *audit.Log, *sql.DB) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	l, err := audit.Open(t.Context(), st, filepath.Join(dir, "audit.key"), audit.Options{CheckpointEvery: 4, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	b := &auditCLIBackend{cliBackend: &cliBackend{}, Backend: audit.NewBackend(l)}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	return srv, l, db
}

func TestAuditCommands(t *testing.T) {
	srv, l, db := newAuditServer(t)
	must := func(a ...string) string {
		t.Helper()
		code, out, errOut := stead(t, srv, a...)
		if code != exitOK {
			t.Fatalf("stead %s: exit %d: %s", strings.Join(a, " "), code, errOut)
		}
		return out
	}
	if out := must("audit", "verify"); !strings.Contains(out, "audit trail OK: empty") {
		t.Fatalf("verify empty: %q", out)
	}
	// State-changing requests through the API are recorded, reads not.
	for range 3 {
		if code, _, _ := stead(t, srv, "start", "web"); code != exitConflict {
			t.Fatalf("start: exit %d", code)
		}
	}
	if code, _, _ := stead(t, srv, "ls"); code != exitOK {
		t.Fatalf("ls: exit %d", code)
	}
	if err := l.Record(t.Context(), audit.Entry{Actor: "daemon", Tenant: store.DefaultTenant, Action: "sandbox.stop",
		Target: "sb-1", Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}
	// Entry 4 was signed on its own (every 4 entries); the checkpoint POST
	// returns that checkpoint and is itself recorded as entry 5.
	if out := must("audit", "checkpoint"); !strings.HasPrefix(out, "signed seq 4 ") {
		t.Fatalf("checkpoint: %q", out)
	}
	out := must("audit", "verify")
	if !strings.Contains(out, "audit trail OK: 5 entries, seq 1 to 5") || !strings.Contains(out, "newest at seq 4; 1 entries after it") {
		t.Fatalf("verify: %q", out)
	}

	out = must("audit", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || strings.Join(strings.Fields(lines[0]), " ") != "SEQ TIME ACTOR TENANT ACTION TARGET OUTCOME" {
		t.Fatalf("ls:\n%s", out)
	}
	if !strings.Contains(lines[1], "POST /v1/sandboxes/{id}/start") || !strings.Contains(lines[1], "key-admin") ||
		!strings.Contains(lines[1], "web") || !strings.HasSuffix(lines[1], "409") {
		t.Fatalf("ls row 1 %q", lines[1])
	}
	if !strings.Contains(lines[4], "sandbox.stop") || !strings.Contains(lines[5], "POST /v1/audit/checkpoints") {
		t.Fatalf("ls rows:\n%s", out)
	}
	var page []client.AuditEntry
	if err := json.Unmarshal([]byte(must("audit", "ls", "--after", "3", "--limit", "1", "--json")), &page); err != nil ||
		len(page) != 1 || page[0].Seq != 4 {
		t.Fatalf("ls page: %+v %v", page, err)
	}

	out = must("audit", "export", "--since", "1h")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	// Still five entries: verify, ls and export are GETs and add none.
	if len(lines) != 5 {
		t.Fatalf("export: %d lines:\n%s", len(lines), out)
	}
	var e client.AuditEntry
	if err := json.Unmarshal([]byte(lines[4]), &e); err != nil || e.Seq != 5 || e.Hash == "" || e.PrevHash == "" {
		t.Fatalf("export line %q: %v", lines[4], err)
	}
	if code, _, errOut := stead(t, srv, "audit", "export", "--since", "yesterday"); code != exitUsage {
		t.Fatalf("bad --since: exit %d %s", code, errOut)
	}

	// Tamper with entry 2: verify names it and exits 1.
	if _, err := db.ExecContext(t.Context(), "UPDATE audit_entries SET outcome = '200' WHERE seq = 2"); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := stead(t, srv, "audit", "verify")
	if code != exitError || !strings.Contains(errOut, "audit trail ALTERED at seq 2") {
		t.Fatalf("verify tampered: exit %d: %q", code, errOut)
	}
	code, out, _ = stead(t, srv, "audit", "verify", "--json")
	var rep client.AuditReport
	if code != exitError || json.Unmarshal([]byte(out), &rep) != nil || rep.OK || rep.BadSeq != 2 {
		t.Fatalf("verify --json tampered: exit %d: %q", code, out)
	}
}

func TestAuditNeedsAdminKey(t *testing.T) {
	srv, _, _ := newAuditServer(t)
	var stdout, stderr strings.Builder
	code := runIO([]string{"--endpoint", srv.URL, "--api-key", "u", "audit", "verify"}, strings.NewReader(""), &stdout, &stderr)
	if code != exitError || !strings.Contains(stderr.String(), "admin key") {
		t.Fatalf("verify with a plain key: exit %d: %q", code, stderr.String())
	}
}
