package e2e

import (
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/store"
)

// TestAuditTamperingIsDetectedAfterStopAndKill9: a trail of real API
// requests, signed and witnessed, is tampered with in the database while
// the daemon is down (after a clean stop, and after kill -9 once the
// interval checkpoint has witnessed the head); the restarted daemon starts
// and `stead audit verify` exits 1 naming the problem. An untouched trail
// verifies after either.
func TestAuditTamperingIsDetectedAfterStopAndKill9(t *testing.T) {
	const storedTime = "2006-01-02T15:04:05.000000000Z"
	insertRow := func(t *testing.T, db *sql.DB, e store.AuditEntry) {
		t.Helper()
		mustExec(t, db, "INSERT INTO audit_entries (seq, time, actor, tenant_id, action, target, outcome, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
			e.Seq, e.Time.UTC().Format(storedTime), e.Actor, e.Tenant, e.Action, e.Target, e.Outcome,
			hex.EncodeToString(e.PrevHash), hex.EncodeToString(e.Hash))
	}
	cases := []struct {
		name string
		// tamper changes the database; last is the trail's last seq.
		tamper func(t *testing.T, db *sql.DB, last int64)
		// kind is the problem verify must report ("" = intact).
		kind string
	}{
		{"Untouched", func(*testing.T, *sql.DB, int64) {}, ""},
		{"EditAnEntry", func(t *testing.T, db *sql.DB, _ int64) {
			mustExec(t, db, "UPDATE audit_entries SET outcome = '200' WHERE seq = 5")
		}, "altered"},
		{"DeleteInTheMiddle", func(t *testing.T, db *sql.DB, _ int64) {
			mustExec(t, db, "DELETE FROM audit_entries WHERE seq = 5")
		}, "deleted"},
		{"InsertAnEntry", func(t *testing.T, db *sql.DB, _ int64) {
			prev := readEntry(t, db, 4)
			mustExec(t, db, "UPDATE audit_entries SET seq = -seq WHERE seq >= 5")
			mustExec(t, db, "UPDATE audit_entries SET seq = 1 - seq WHERE seq < 0")
			forged := store.AuditEntry{Seq: 5, Time: prev.Time, Actor: prev.Actor, Tenant: prev.Tenant,
				Action: "DELETE /v1/sandboxes/{id}", Target: "sb-forged", Outcome: "200", PrevHash: prev.Hash}
			forged.Hash = audit.HashEntry(forged)
			insertRow(t, db, forged)
		}, "relinked"},
		{"ReorderTwoEntries", func(t *testing.T, db *sql.DB, _ int64) {
			mustExec(t, db, "UPDATE audit_entries SET seq = -1 WHERE seq = 4")
			mustExec(t, db, "UPDATE audit_entries SET seq = 4 WHERE seq = 5")
			mustExec(t, db, "UPDATE audit_entries SET seq = 5 WHERE seq = -1")
		}, "relinked"},
		{"TruncateTheTail", func(t *testing.T, db *sql.DB, last int64) {
			mustExec(t, db, "DELETE FROM audit_entries WHERE seq > ?", last-3)
		}, "truncated"},
		{"TruncateTheTailAndItsCheckpoints", func(t *testing.T, db *sql.DB, last int64) {
			mustExec(t, db, "DELETE FROM audit_entries WHERE seq > ?", last-3)
			mustExec(t, db, "DELETE FROM audit_checkpoints WHERE seq > ?", last-3)
		}, "truncated"},
		{"DeleteTheNewestCheckpoint", func(t *testing.T, db *sql.DB, _ int64) {
			mustExec(t, db, "DELETE FROM audit_checkpoints WHERE seq = (SELECT MAX(seq) FROM audit_checkpoints)")
		}, "checkpoint-missing"},
		{"MalformedRow", func(t *testing.T, db *sql.DB, _ int64) {
			mustExec(t, db, "UPDATE audit_entries SET time = 'last tuesday' WHERE seq = 3")
		}, "malformed"},
	}
	for _, stop := range []string{"CleanStop", "Kill9"} {
		for _, tc := range cases {
			t.Run(stop+"/"+tc.name, func(t *testing.T) {
				d := newDaemon(t, "--pool", "dir", "--audit-checkpoint-interval", "200ms")
				ctx := ctxT(t)
				// Refused requests are recorded too: 12 cheap entries.
				for range 12 {
					if _, err := d.c.StopSandbox(ctx, "no-such-sandbox"); !client.IsNotFound(err) {
						t.Fatalf("stop of a missing sandbox: %v", err)
					}
				}
				last := lastSeq(t, d)
				if stop == "Kill9" {
					// The interval checkpoint witnesses the head; a kill
					// loses at most what came after it.
					waitWitness(t, d, last)
					d.kill9()
				} else {
					d.stopGracefully()
					if got := witnessFile(t, d).Seq; got < last {
						t.Fatalf("witness after a clean stop holds seq %d, want >= %d", got, last)
					}
				}
				last = witnessFile(t, d).Seq
				db, err := sql.Open("sqlite", filepath.Join(d.dataDir, "stead.db")+"?_pragma=busy_timeout(10000)")
				if err != nil {
					t.Fatal(err)
				}
				tc.tamper(t, db, last)
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				d.start() // a damaged trail does not stop the daemon

				code, out, errOut := d.cli("audit", "verify")
				jcode, jout, _ := d.cli("audit", "verify", "--json")
				var rep client.AuditReport
				if err := json.Unmarshal([]byte(jout), &rep); err != nil {
					t.Fatalf("verify --json: %v: %q", err, jout)
				}
				if tc.kind == "" {
					if code != 0 || jcode != 0 || !rep.OK || !strings.Contains(out, "audit trail OK") {
						t.Fatalf("an untouched trail: exit %d/%d\n%s%s\n%+v", code, jcode, out, errOut, rep)
					}
					if len(rep.Witnesses) != 1 || !rep.Witnesses[0].OK {
						t.Fatalf("witness of an untouched trail: %+v", rep.Witnesses)
					}
					return
				}
				if code != 1 || jcode != 1 || rep.OK || !strings.Contains(out, "audit trail ALTERED") || !strings.Contains(errOut, "ALTERED at seq") {
					t.Fatalf("%s not detected: exit %d/%d\nstdout: %s\nstderr: %s\n%+v", tc.name, code, jcode, out, errOut, rep)
				}
				found := false
				for _, p := range rep.Problems {
					found = found || p.Kind == tc.kind
				}
				if !found || !strings.Contains(out, "["+tc.kind+"]") {
					t.Fatalf("%s: no %q problem reported:\n%s\n%+v", tc.name, tc.kind, out, rep.Problems)
				}
				// The daemon said so in its log when it started.
				deadline := time.Now().Add(20 * time.Second)
				for !strings.Contains(d.logText(), "AUDIT TRAIL") {
					if time.Now().After(deadline) {
						t.Fatalf("%s: the restarted daemon did not log it", tc.name)
					}
					time.Sleep(50 * time.Millisecond)
				}
				t.Logf("%s after %s:\n%s", tc.name, stop, out)
			})
		}
	}
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// readEntry reads entry seq straight from the database.
func readEntry(t *testing.T, db *sql.DB, seq int64) store.AuditEntry {
	t.Helper()
	var e store.AuditEntry
	var at, prev, hash string
	err := db.QueryRow("SELECT seq, time, actor, tenant_id, action, target, outcome, prev_hash, hash FROM audit_entries WHERE seq = ?", seq).
		Scan(&e.Seq, &at, &e.Actor, &e.Tenant, &e.Action, &e.Target, &e.Outcome, &prev, &hash)
	if err != nil {
		t.Fatalf("read entry %d: %v", seq, err)
	}
	if e.Time, err = time.Parse("2006-01-02T15:04:05.000000000Z", at); err != nil {
		t.Fatal(err)
	}
	if e.PrevHash, err = hex.DecodeString(prev); err != nil {
		t.Fatal(err)
	}
	if e.Hash, err = hex.DecodeString(hash); err != nil {
		t.Fatal(err)
	}
	return e
}

// lastSeq is the seq of the newest entry the API lists.
func lastSeq(t *testing.T, d *daemon) int64 {
	t.Helper()
	var last int64
	for {
		page, err := d.c.ListAudit(ctxT(t), client.AuditQuery{After: last, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return last
		}
		last = page[len(page)-1].Seq
	}
}

// witnessFile reads the daemon's witness file.
func witnessFile(t *testing.T, d *daemon) struct{ Seq int64 } {
	t.Helper()
	var w struct{ Seq int64 }
	b, err := os.ReadFile(filepath.Join(d.dataDir, "audit.witness"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	return w
}

// waitWitness waits until the witness file holds seq or later.
func waitWitness(t *testing.T, d *daemon, seq int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var w struct{ Seq int64 }
		if b, err := os.ReadFile(filepath.Join(d.dataDir, "audit.witness")); err == nil && json.Unmarshal(b, &w) == nil && w.Seq >= seq {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the witness did not reach seq %d within 20s", seq)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAuditRepositoryWitnessCatchesTruncationWithoutTheLocalWitness: with a
// repository configured, the signed head is also kept there (sealed), so a
// tail deleted with its checkpoints and the witness file beside the
// database is still found.
func TestAuditRepositoryWitnessCatchesTruncationWithoutTheLocalWitness(t *testing.T) {
	repoDir := filepath.Join(t.TempDir(), "repo")
	d := newDaemon(t, "--pool", "dir", "--repo", repoDir, "--audit-checkpoint-interval", "200ms")
	ctx := ctxT(t)
	if info, err := d.c.InitRepo(ctx); err != nil || !info.Initialized {
		t.Fatalf("repo init: %+v %v", info, err)
	}
	for range 12 {
		if _, err := d.c.StopSandbox(ctx, "no-such-sandbox"); !client.IsNotFound(err) {
			t.Fatalf("stop of a missing sandbox: %v", err)
		}
	}
	rep, err := d.c.VerifyAudit(ctx)
	if err != nil || !rep.OK {
		t.Fatalf("verify before tampering: %+v %v", rep, err)
	}
	d.stopGracefully()
	last := witnessFile(t, d).Seq
	recs, _ := filepath.Glob(filepath.Join(repoDir, "scopes", "audit", "records", "audit-witness", "*"))
	if len(recs) != 1 {
		t.Fatalf("repository witness records: %v", recs)
	}
	if b, err := os.ReadFile(recs[0]); err != nil || strings.Contains(string(b), "signature") {
		t.Fatalf("repository witness is not sealed: %q %v", b, err)
	}

	db, err := sql.Open("sqlite", filepath.Join(d.dataDir, "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, "DELETE FROM audit_entries WHERE seq > ?", last-3)
	mustExec(t, db, "DELETE FROM audit_checkpoints WHERE seq > ?", last-3)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(d.dataDir, "audit.witness")); err != nil {
		t.Fatal(err)
	}
	d.start()
	code, out, _ := d.cli("audit", "verify")
	if code != 1 || !strings.Contains(out, "[truncated]") || !strings.Contains(out, "witness in repository") {
		t.Fatalf("truncation with the local witness gone: exit %d\n%s", code, out)
	}
	t.Logf("verify:\n%s", out)
}

// TestAuditHeadIsSignedAcrossKill9s: with the default interval, three
// kill -9s in a row still leave a signed, witnessed trail: each start signs
// the head the last run left unsigned.
func TestAuditHeadIsSignedAcrossKill9s(t *testing.T) {
	d := newDaemon(t, "--pool", "dir")
	ctx := ctxT(t)
	for range 3 {
		for range 5 {
			if _, err := d.c.StopSandbox(ctx, "no-such-sandbox"); !client.IsNotFound(err) {
				t.Fatalf("stop of a missing sandbox: %v", err)
			}
		}
		d.kill9()
		d.start()
	}
	rep, err := d.c.VerifyAudit(ctx)
	if err != nil || !rep.OK {
		t.Fatalf("verify after three kill -9s: %+v %v", rep, err)
	}
	if rep.Entries < 15 || rep.SignedSeq < 15 || rep.Checkpoints < 3 {
		t.Fatalf("after three kill -9s the trail is not signed: %+v", rep)
	}
	if w := witnessFile(t, d); w.Seq != rep.SignedSeq {
		t.Fatalf("witness holds seq %d, newest checkpoint %d", w.Seq, rep.SignedSeq)
	}
}
