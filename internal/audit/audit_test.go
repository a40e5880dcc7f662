package audit_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// env is an audit trail in a fresh SQLite store, with a raw connection to
// the same file to tamper with.
type env struct {
	dir string
	st  *sqlite.Store
	db  *sql.DB
	log *audit.Log
}

func newEnv(t *testing.T, opts audit.Options) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	db, err := sql.Open("sqlite", filepath.Join(dir, "stead.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	e := &env{dir: dir, st: st, db: db}
	e.log = e.open(t, opts)
	return e
}

// open opens (again: a daemon restart) the Log on the env's store.
func (e *env) open(t *testing.T, opts audit.Options) *audit.Log {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	l, err := audit.Open(t.Context(), e.st, filepath.Join(e.dir, "keys", "audit.key"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// record appends n entries numbered from the current head.
func record(t *testing.T, l *audit.Log, n int) {
	t.Helper()
	for i := range n {
		err := l.Record(t.Context(), audit.Entry{Actor: "key-1", Tenant: "default",
			Action: "POST /v1/sandboxes/{id}/stop", Target: fmt.Sprintf("sb-%d", i), Outcome: fmt.Sprint(200 + i)})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func (e *env) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := e.db.ExecContext(t.Context(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// entry reads entry seq from the store.
func (e *env) entry(t *testing.T, seq int64) store.AuditEntry {
	t.Helper()
	es, err := e.st.ListAudit(t.Context(), store.AuditFilter{AfterSeq: seq - 1, Limit: 1})
	if err != nil || len(es) != 1 || es[0].Seq != seq {
		t.Fatalf("entry %d: %v %v", seq, es, err)
	}
	return es[0]
}

func verify(t *testing.T, l *audit.Log) client.AuditReport {
	t.Helper()
	rep, err := l.Verify(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func wantOK(t *testing.T, rep client.AuditReport) {
	t.Helper()
	if !rep.OK || rep.BadSeq != 0 || rep.Problem != "" {
		t.Fatalf("intact trail reported broken: %+v", rep)
	}
}

func wantBad(t *testing.T, what string, rep client.AuditReport, seq int64, problem string) {
	t.Helper()
	if rep.OK || rep.BadSeq != seq || !strings.Contains(rep.Problem, problem) {
		t.Fatalf("%s: report %+v, want bad seq %d with %q", what, rep, seq, problem)
	}
}

func TestIntactTrailVerifiesWithCheckpoints(t *testing.T) {
	e := newEnv(t, audit.Options{CheckpointEvery: 10})
	wantOK(t, verify(t, e.log)) // empty
	record(t, e.log, 25)
	rep := verify(t, e.log)
	wantOK(t, rep)
	if rep.FirstSeq != 1 || rep.LastSeq != 25 || rep.Entries != 25 || rep.Checkpoints != 2 || rep.SignedSeq != 20 || rep.Unsigned != 5 {
		t.Errorf("report %+v", rep)
	}
	if rep.KeyID != audit.KeyID(e.log.PublicKey()) || rep.PublicKey != hex.EncodeToString(e.log.PublicKey()) {
		t.Errorf("key in report %+v", rep)
	}
	// After a restart the chain is read back and still verifies.
	l2 := e.open(t, audit.Options{CheckpointEvery: 10})
	wantOK(t, verify(t, l2))
	record(t, l2, 1)
	if got := e.entry(t, 26); !bytes.Equal(got.PrevHash, e.entry(t, 25).Hash) {
		t.Fatalf("entry 26 does not chain on after a restart")
	}
	wantOK(t, verify(t, l2))
}

func TestVerifyDetectsTampering(t *testing.T) {
	// Checkpoints are off: the chain alone must catch each of these.
	noCheckpoints := audit.Options{CheckpointEvery: -1}
	for _, tc := range []struct {
		name    string
		tamper  func(t *testing.T, e *env)
		seq     int64
		problem string
		// restart: also detected by a Log opened after the tampering.
		restart bool
	}{
		{"EditOutcome", func(t *testing.T, e *env) {
			e.exec(t, "UPDATE audit_entries SET outcome = '200' WHERE seq = 4")
		}, 4, "entry 4 was altered", true},
		{"EditActor", func(t *testing.T, e *env) {
			e.exec(t, "UPDATE audit_entries SET actor = 'someone-else' WHERE seq = 7")
		}, 7, "entry 7 was altered", true},
		{"EditTimeAndRehashTheRow", func(t *testing.T, e *env) {
			en := e.entry(t, 4)
			en.Time = en.Time.Add(-time.Hour)
			e.exec(t, "UPDATE audit_entries SET time = ?, hash = ? WHERE seq = 4",
				en.Time.UTC().Format("2006-01-02T15:04:05.000000000Z"), hex.EncodeToString(audit.HashEntry(en)))
		}, 5, "entry 5 does not link to entry 4", true},
		{"DeleteMiddle", func(t *testing.T, e *env) {
			e.exec(t, "DELETE FROM audit_entries WHERE seq = 6")
		}, 6, "entry 6 is missing", true},
		{"DeleteFirst", func(t *testing.T, e *env) {
			e.exec(t, "DELETE FROM audit_entries WHERE seq = 1")
		}, 1, "entries 1 to 1 are missing", true},
		{"DeleteLast", func(t *testing.T, e *env) {
			e.exec(t, "DELETE FROM audit_entries WHERE seq = 10")
		}, 10, "truncated", false},
		{"InsertInTheMiddle", func(t *testing.T, e *env) {
			// Make room at seq 5 and insert a well-formed entry that links
			// to entry 4: the shifted entry 6 (formerly 5) gives it away.
			e.exec(t, "UPDATE audit_entries SET seq = -seq WHERE seq >= 5")
			e.exec(t, "UPDATE audit_entries SET seq = 1 - seq WHERE seq < 0")
			forged := store.AuditEntry{Seq: 5, Time: e.entry(t, 4).Time, Actor: "key-1", Tenant: "default",
				Action: "DELETE /v1/sandboxes/{id}", Target: "sb-x", Outcome: "200", PrevHash: e.entry(t, 4).Hash}
			forged.Hash = audit.HashEntry(forged)
			e.exec(t, "INSERT INTO audit_entries (seq, time, actor, tenant_id, action, target, outcome, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
				forged.Seq, forged.Time.UTC().Format("2006-01-02T15:04:05.000000000Z"), forged.Actor, forged.Tenant,
				forged.Action, forged.Target, forged.Outcome, hex.EncodeToString(forged.PrevHash), hex.EncodeToString(forged.Hash))
		}, 6, "entry 6 does not link to entry 5", true},
		{"InsertAtTheEnd", func(t *testing.T, e *env) {
			last := e.entry(t, 10)
			forged := store.AuditEntry{Seq: 11, Time: last.Time, Actor: "key-1", Action: "POST /v1/keys", Outcome: "201", PrevHash: last.Hash}
			forged.Hash = audit.HashEntry(forged)
			e.exec(t, "INSERT INTO audit_entries (seq, time, actor, tenant_id, action, target, outcome, prev_hash, hash) VALUES (?, ?, ?, '', ?, '', ?, ?, ?)",
				forged.Seq, forged.Time.UTC().Format("2006-01-02T15:04:05.000000000Z"), forged.Actor, forged.Action, forged.Outcome,
				hex.EncodeToString(forged.PrevHash), hex.EncodeToString(forged.Hash))
		}, 11, "not appended by this daemon", false},
		{"SwapTwoRowsSeq", func(t *testing.T, e *env) {
			e.exec(t, "UPDATE audit_entries SET seq = -1 WHERE seq = 3")
			e.exec(t, "UPDATE audit_entries SET seq = 3 WHERE seq = 7")
			e.exec(t, "UPDATE audit_entries SET seq = 7 WHERE seq = -1")
		}, 3, "entry 3", true},
		{"SwapAdjacentRowsSeq", func(t *testing.T, e *env) {
			e.exec(t, "UPDATE audit_entries SET seq = -1 WHERE seq = 8")
			e.exec(t, "UPDATE audit_entries SET seq = 8 WHERE seq = 9")
			e.exec(t, "UPDATE audit_entries SET seq = 9 WHERE seq = -1")
		}, 8, "entry 8", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, noCheckpoints)
			record(t, e.log, 10)
			wantOK(t, verify(t, e.log))
			tc.tamper(t, e)
			wantBad(t, "running daemon", verify(t, e.log), tc.seq, tc.problem)
			if tc.restart {
				wantBad(t, "after a restart", verify(t, e.open(t, noCheckpoints)), tc.seq, tc.problem)
			}
		})
	}
}

// rewrite changes the actor of entries from..to and re-hashes the chain
// from there on consistently, as someone with write access to the
// database but not the key could.
func rewrite(t *testing.T, e *env, from, to int64) {
	t.Helper()
	prev := e.entry(t, from-1).Hash
	for seq := from; seq <= to; seq++ {
		en := e.entry(t, seq)
		en.Actor = "mallory"
		en.PrevHash = prev
		en.Hash = audit.HashEntry(en)
		e.exec(t, "UPDATE audit_entries SET actor = ?, prev_hash = ?, hash = ? WHERE seq = ?",
			en.Actor, hex.EncodeToString(en.PrevHash), hex.EncodeToString(en.Hash), seq)
		prev = en.Hash
	}
}

func TestSignedCheckpointDetectsConsistentRewrite(t *testing.T) {
	opts := audit.Options{CheckpointEvery: 5}
	e := newEnv(t, opts)
	record(t, e.log, 8)
	rewrite(t, e, 3, 8)
	// After a restart the daemon has nothing but the database and the key:
	// the chain links up, and only the checkpoint of seq 5 catches it.
	restarted := e.open(t, opts)
	wantBad(t, "rewritten chain", verify(t, restarted), 5, "does not match the signed checkpoint")

	// A rewrite after the last checkpoint is caught by the running daemon,
	// which remembers the head it appended.
	e2 := newEnv(t, opts)
	record(t, e2.log, 8)
	rewrite(t, e2, 7, 8)
	wantBad(t, "rewritten unsigned tail", verify(t, e2.log), 8, "differs from the one this daemon appended")
	// The next checkpoint signs the daemon's own head, which no longer
	// matches entry 8, so Verify keeps reporting it.
	if _, err := e2.log.Checkpoint(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantBad(t, "after the next checkpoint", verify(t, e2.log), 8, "")
}

func TestVerifyDetectsForgedCheckpoint(t *testing.T) {
	e := newEnv(t, audit.Options{CheckpointEvery: 5})
	record(t, e.log, 12)
	// Point the checkpoint at a rewritten chain without the key.
	rewrite(t, e, 4, 12)
	e.exec(t, "UPDATE audit_checkpoints SET hash = ? WHERE seq = 5", hex.EncodeToString(e.entry(t, 5).Hash))
	e.exec(t, "UPDATE audit_checkpoints SET hash = ? WHERE seq = 10", hex.EncodeToString(e.entry(t, 10).Hash))
	wantBad(t, "forged checkpoints", verify(t, e.open(t, audit.Options{})), 5, "not validly signed")

	// A checkpoint signed by another key is no better.
	other := newEnv(t, audit.Options{CheckpointEvery: 5})
	record(t, other.log, 5)
	cps, err := other.st.ListAuditCheckpoints(t.Context())
	if err != nil || len(cps) != 1 {
		t.Fatal(cps, err)
	}
	e3 := newEnv(t, audit.Options{CheckpointEvery: -1})
	record(t, e3.log, 5)
	cp := cps[0]
	cp.Hash = e3.entry(t, 5).Hash
	if err := e3.st.PutAuditCheckpoint(t.Context(), cp); err != nil {
		t.Fatal(err)
	}
	wantBad(t, "checkpoint of another key", verify(t, e3.log), 5, "not validly signed")
}

func TestPruneKeepsTheRestVerifiable(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := t0
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Hour)
		return now
	}
	opts := audit.Options{CheckpointEvery: 4, Now: clock}
	e := newEnv(t, opts)
	record(t, e.log, 10) // entry n at t0 + n hours; checkpoints 4 and 8 (at +5h, +10h)
	ctx := t.Context()

	n, err := e.log.Prune(ctx, t0.Add(2*time.Hour)) // no checkpoint that old
	if err != nil || n != 0 {
		t.Fatalf("prune with no old checkpoint: %d %v", n, err)
	}
	// Checkpoint 8's entry is not older than its own time; checkpoint 4's
	// is, so entries 1 to 3 go and entry 4 stays as the anchor.
	before := e.entry(t, 8).Time
	n, err = e.log.Prune(ctx, before)
	if err != nil || n != 3 {
		t.Fatalf("prune: %d entries, %v; want 3", n, err)
	}
	rep := verify(t, e.log)
	wantOK(t, rep)
	if rep.FirstSeq != 4 || rep.LastSeq != 11 {
		t.Fatalf("after prune: %+v", rep)
	}
	if last := e.entry(t, 11); last.Action != "audit.prune" || last.Target != "seq<4" || last.Actor != "daemon" {
		t.Errorf("prune entry %+v", last)
	}
	wantOK(t, verify(t, e.open(t, opts)))
	record(t, e.log, 2)
	wantOK(t, verify(t, e.log))

	// Deleting more at the front is not a prune: the newest checkpoint
	// says the trail starts at 4.
	e.exec(t, "DELETE FROM audit_entries WHERE seq < 6")
	wantBad(t, "front deleted after prune", verify(t, e.open(t, opts)), 4, "missing")
}

func TestKeyFileIsCreatedPrivateAndReused(t *testing.T) {
	e := newEnv(t, audit.Options{})
	path := filepath.Join(e.dir, "keys", "audit.key")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v, want mode 0600", fi, err)
	}
	if again := e.open(t, audit.Options{}); !bytes.Equal(again.PublicKey(), e.log.PublicKey()) {
		t.Fatal("a second open made a new key")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.Open(t.Context(), e.st, path, audit.Options{}); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("open with a world-readable key: %v", err)
	}
}

func TestExportWritesJSONLThatRechecks(t *testing.T) {
	e := newEnv(t, audit.Options{})
	record(t, e.log, 5)
	var buf bytes.Buffer
	if err := e.log.Export(t.Context(), &buf, store.AuditFilter{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines", len(lines))
	}
	prev := strings.Repeat("0", 64)
	for i, line := range lines {
		var c client.AuditEntry
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatal(err)
		}
		ph, _ := hex.DecodeString(c.PrevHash)
		sum := audit.HashEntry(store.AuditEntry{Seq: c.Seq, Time: c.Time, Actor: c.Actor, Tenant: c.Tenant,
			Action: c.Action, Target: c.Target, Outcome: c.Outcome, PrevHash: ph})
		if c.Seq != int64(i+1) || c.PrevHash != prev || hex.EncodeToString(sum) != c.Hash {
			t.Fatalf("line %d does not re-check: %s", i, line)
		}
		prev = c.Hash
	}
}

func TestConcurrentRecordsFormOneChain(t *testing.T) {
	e := newEnv(t, audit.Options{CheckpointEvery: 7})
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Go(func() {
			for i := range 10 {
				if err := e.log.Record(context.Background(), audit.Entry{Actor: fmt.Sprint(w), Action: "x", Target: fmt.Sprint(i)}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	rep := verify(t, e.log)
	wantOK(t, rep)
	if rep.Entries != 100 || rep.SignedSeq != 98 {
		t.Fatalf("report %+v", rep)
	}
}

func TestRecordRejectsEmptyAction(t *testing.T) {
	e := newEnv(t, audit.Options{})
	if err := e.log.Record(t.Context(), audit.Entry{Actor: "a"}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("empty action: %v", err)
	}
}

func TestBackendScopesByAdminAndTenant(t *testing.T) {
	e := newEnv(t, audit.Options{})
	b := audit.NewBackend(e.log)
	ctx := t.Context()
	for _, tenant := range []string{store.DefaultTenant, "acme", "acme"} {
		if err := b.RecordAPIRequest(ctx, api.AuditEvent{Actor: "k", Tenant: tenant, Action: "POST /v1/sandboxes", Status: 201}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.ListAudit(ctx, api.Principal{TenantID: "acme", KeyID: "k"}, client.AuditQuery{}); !errors.Is(err, errs.ErrForbidden) {
		t.Errorf("non-admin list: %v", err)
	}
	if _, err := b.VerifyAudit(ctx, api.Principal{TenantID: "acme", Admin: true, Sandbox: "sb-1"}); !errors.Is(err, errs.ErrForbidden) {
		t.Errorf("sandbox token verify: %v", err)
	}
	es, err := b.ListAudit(ctx, api.Principal{TenantID: "acme", Admin: true}, client.AuditQuery{})
	if err != nil || len(es) != 2 || es[0].Outcome != "201" || es[0].Tenant != "acme" {
		t.Errorf("tenant admin list: %+v %v", es, err)
	}
	es, err = b.ListAudit(ctx, api.Principal{TenantID: store.DefaultTenant, Admin: true}, client.AuditQuery{After: 1, Limit: 1})
	if err != nil || len(es) != 1 || es[0].Seq != 2 {
		t.Errorf("operator list page: %+v %v", es, err)
	}
	cp, err := b.CheckpointAudit(ctx, api.Principal{TenantID: "acme", Admin: true})
	if err != nil || cp.Seq != 3 || len(cp.Signature) != 128 {
		t.Errorf("checkpoint: %+v %v", cp, err)
	}
	rep, err := b.VerifyAudit(ctx, api.Principal{TenantID: "acme", Admin: true})
	if err != nil || !rep.OK || rep.SignedSeq != 3 {
		t.Errorf("verify: %+v %v", rep, err)
	}
}

func TestNilBackendIsUnsupported(t *testing.T) {
	var b *audit.Backend
	if err := b.RecordAPIRequest(t.Context(), api.AuditEvent{Action: "x"}); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("record: %v", err)
	}
	if _, err := b.VerifyAudit(t.Context(), api.Principal{Admin: true}); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("verify: %v", err)
	}
}
