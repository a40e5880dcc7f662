package audit_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/blobstore/local"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// witnessed returns options with a file witness in the env's directory.
func witnessed(e *env, o audit.Options) audit.Options {
	o.Witness = audit.NewFileWitness(filepath.Join(e.dir, "audit.witness"))
	return o
}

// newWitnessedEnv is newEnv with a file witness.
func newWitnessedEnv(t *testing.T, o audit.Options) (*env, audit.Options) {
	t.Helper()
	e := newEnv(t, audit.Options{CheckpointEvery: -1})
	o = witnessed(e, o)
	e.log = e.open(t, o)
	return e, o
}

// wantProblem fails unless rep lists a problem of kind at seq whose text
// has want.
func wantProblem(t *testing.T, what string, rep client.AuditReport, seq int64, kind, want string) {
	t.Helper()
	if rep.OK {
		t.Fatalf("%s: reported intact: %+v", what, rep)
	}
	for _, p := range rep.Problems {
		if p.Seq == seq && p.Kind == kind && strings.Contains(p.Text, want) {
			return
		}
	}
	t.Fatalf("%s: no %s problem at seq %d with %q in %+v", what, kind, seq, want, rep.Problems)
}

func witnessSeq(t *testing.T, w audit.Witness) int64 {
	t.Helper()
	c, err := w.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return c.Seq
}

// The tail deleted while the daemon was down, with and without the
// checkpoints that covered it, is found through the witness, which the
// restarted daemon keeps as evidence however far the trail grows again.
func TestWitnessDetectsTruncatedTail(t *testing.T) {
	for _, dropCheckpoints := range []bool{false, true} {
		name := "KeepCheckpoints"
		if dropCheckpoints {
			name = "DeleteCheckpoints"
		}
		t.Run(name, func(t *testing.T) {
			e, opts := newWitnessedEnv(t, audit.Options{CheckpointEvery: 4})
			record(t, e.log, 10)
			if err := e.log.Close(t.Context()); err != nil { // a clean stop signs seq 10
				t.Fatal(err)
			}
			if got := witnessSeq(t, opts.Witness); got != 10 {
				t.Fatalf("witness after a clean stop holds seq %d, want 10", got)
			}
			wantOK(t, verify(t, e.log))
			e.exec(t, "DELETE FROM audit_entries WHERE seq > 6")
			if dropCheckpoints {
				e.exec(t, "DELETE FROM audit_checkpoints WHERE seq > 6")
			}
			l := e.open(t, opts)
			wantProblem(t, "restarted", verify(t, l), 7, "truncated", "holds a checkpoint of seq 10")
			// The daemon goes on and passes seq 10: the witness stays.
			record(t, l, 6)
			if _, err := l.Checkpoint(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := witnessSeq(t, opts.Witness); got != 10 {
				t.Fatalf("witness advanced to %d over the evidence", got)
			}
			wantProblem(t, "grown past the witness", verify(t, l), 10, "rewritten", "differs from the one the witness")
			wantProblem(t, "grown past the witness, restarted", verify(t, e.open(t, opts)), 10, "rewritten", "")
			if !dropCheckpoints {
				return
			}
			// The operator, having examined it, moves the witness aside:
			// the running daemon writes a new one from the database.
			if err := os.Rename(filepath.Join(e.dir, "audit.witness"), filepath.Join(e.dir, "audit.witness.evidence")); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Checkpoint(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := witnessSeq(t, opts.Witness); got != 12 {
				t.Fatalf("witness after it was moved aside: seq %d, want 12", got)
			}
			wantOK(t, verify(t, l))
		})
	}
}

// A deleted newest checkpoint is missing, by the witness after a restart
// and by the daemon's own memory while it runs.
func TestWitnessDetectsDeletedCheckpoint(t *testing.T) {
	e, opts := newWitnessedEnv(t, audit.Options{CheckpointEvery: 5})
	record(t, e.log, 10)
	e.exec(t, "DELETE FROM audit_checkpoints WHERE seq = 10")
	wantProblem(t, "running", verify(t, e.log), 10, "checkpoint-missing", "which this daemon made")
	wantProblem(t, "restarted", verify(t, e.open(t, opts)), 10, "checkpoint-missing", "kept by the witness")
}

func TestMissingOrForeignWitnessIsReported(t *testing.T) {
	e, opts := newWitnessedEnv(t, audit.Options{CheckpointEvery: 5})
	record(t, e.log, 5)
	path := filepath.Join(e.dir, "audit.witness")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, "witness removed", verify(t, e.log), 0, "witness", "is missing")

	// A new audit key (the old one deleted) does not get to replace the
	// witness of the old one.
	e2, opts2 := newWitnessedEnv(t, audit.Options{CheckpointEvery: 5})
	record(t, e2.log, 5)
	if err := os.Remove(filepath.Join(e2.dir, "keys", "audit.key")); err != nil {
		t.Fatal(err)
	}
	l := e2.open(t, opts2)
	record(t, l, 5)
	wantProblem(t, "new key", verify(t, l), 5, "witness", "not validly signed")
	if got := witnessSeq(t, opts2.Witness); got != 5 {
		t.Fatalf("witness of the old key replaced: seq %d", got)
	}
	_ = opts
}

// A malformed row neither stops Open nor the chain: it is reported.
func TestMalformedRowsDoNotStopTheDaemon(t *testing.T) {
	for _, tc := range []struct {
		name, tamper string
		seq          int64
	}{
		{"TimeInTheMiddle", "UPDATE audit_entries SET time = 'yesterday' WHERE seq = 4", 4},
		{"HashOfTheLast", "UPDATE audit_entries SET hash = 'not-hex!' WHERE seq = 8", 8},
		{"PrevHashOfTheLast", "UPDATE audit_entries SET prev_hash = x'00ff' WHERE seq = 8", 8},
		{"CheckpointTime", "UPDATE audit_checkpoints SET time = '' WHERE seq = 8", 8},
		{"CheckpointSignature", "UPDATE audit_checkpoints SET signature = 'zz' WHERE seq = 4", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, opts := newWitnessedEnv(t, audit.Options{CheckpointEvery: 4})
			record(t, e.log, 8)
			e.exec(t, tc.tamper)
			var logged bytes.Buffer
			opts.Logger = slog.New(slog.NewTextHandler(&logged, nil))
			l := e.open(t, opts) // must not fail
			wantProblem(t, "restarted", verify(t, l), tc.seq, "malformed", "malformed in the database")
			// The daemon still records, chained on from the damaged row.
			record(t, l, 2)
			if got := e.entry(t, 10); got.Seq != 10 {
				t.Fatalf("entry 10 after a malformed row: %+v", got)
			}
			l.Run(briefly(t)) // the start-up verification logs it
			if !strings.Contains(logged.String(), "malformed") || !strings.Contains(logged.String(), "level=ERROR") {
				t.Fatalf("malformed row not logged loudly:\n%s", logged.String())
			}
		})
	}
}

// briefly is a context for a Run that should do its start-up work and
// return.
func briefly(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

// Run signs the head and writes the witness on its interval, and only
// when the head moved.
func TestRunCheckpointsAndWitnessesOnTheInterval(t *testing.T) {
	e, opts := newWitnessedEnv(t, audit.Options{CheckpointEvery: -1, CheckpointInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { e.log.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	record(t, e.log, 3)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if c, err := opts.Witness.Load(t.Context()); err == nil && c.Seq == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no witness of seq 3 within 5s of a 20ms interval")
		}
		time.Sleep(10 * time.Millisecond)
	}
	rep := verify(t, e.log)
	wantOK(t, rep)
	if rep.SignedSeq != 3 || len(rep.Witnesses) != 1 || !rep.Witnesses[0].OK || rep.Witnesses[0].Seq != 3 {
		t.Fatalf("report after an interval checkpoint: %+v", rep)
	}
}

// newRepoWitness returns a witness kept in a real repository on a local
// blob store.
func newRepoWitness(t *testing.T, keyID string) audit.Witness {
	w, _ := newRepoWitnessIn(t, keyID)
	return w
}

func newRepoWitnessIn(t *testing.T, keyID string) (audit.Witness, *repo.Repository) {
	t.Helper()
	bs, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	master, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Init(t.Context(), bs, master); err != nil {
		t.Fatal(err)
	}
	r, err := repo.Open(t.Context(), bs, master, repo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return audit.NewRepoWitness(func(ctx context.Context) (audit.RecordStore, error) {
		return r.Scope(ctx, "audit", true)
	}, keyID, bs.Location()), r
}

// The repository's witness is sealed, round-trips, and its scope passes
// the repository's own check.
func TestRepoWitnessIsSealedAndPassesRepoCheck(t *testing.T) {
	w, r := newRepoWitnessIn(t, "0123456789abcdef")
	if _, err := w.Load(t.Context()); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("load before any store: %v", err)
	}
	e, _ := newWitnessedEnv(t, audit.Options{CheckpointEvery: 3})
	record(t, e.log, 3)
	cps, err := e.st.ListAuditCheckpoints(t.Context())
	if err != nil || len(cps) != 1 {
		t.Fatal(cps, err)
	}
	if err := w.Store(t.Context(), cps[0]); err != nil {
		t.Fatal(err)
	}
	got, err := w.Load(t.Context())
	if err != nil || got.Seq != 3 || !bytes.Equal(got.Signature, cps[0].Signature) || !got.Time.Equal(cps[0].Time) {
		t.Fatalf("load: %+v %v", got, err)
	}
	infos, err := r.Store().List(t.Context(), "scopes/audit/records/")
	if err != nil || len(infos) != 1 {
		t.Fatalf("records: %v %v", infos, err)
	}
	raw, err := r.Store().Get(t.Context(), infos[0].Key)
	if err != nil || bytes.Contains(raw, []byte("signature")) || bytes.Contains(raw, []byte(hex.EncodeToString(cps[0].Hash))) {
		t.Fatalf("the repository witness is stored in the clear: %q %v", raw, err)
	}
	sc, err := r.Scope(t.Context(), "audit", false)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sc.Check(t.Context(), repo.CheckOptions{ReadData: true})
	if err != nil || !res.OK() {
		t.Fatalf("repo check of the audit scope: %+v %v", res, err)
	}
}

// With the file witness gone too, the repository's copy still shows the
// truncation.
func TestRepoWitnessDetectsTruncationWhenTheFileIsGone(t *testing.T) {
	e, opts := newWitnessedEnv(t, audit.Options{CheckpointEvery: -1})
	rw := newRepoWitness(t, e.log.KeyID())
	e.log.SetRemote(rw)
	record(t, e.log, 9)
	if err := e.log.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := witnessSeq(t, rw); got != 9 {
		t.Fatalf("repository witness after a clean stop: seq %d", got)
	}
	rep := verify(t, e.log)
	wantOK(t, rep)
	if len(rep.Witnesses) != 2 || !rep.Witnesses[1].OK {
		t.Fatalf("witnesses of an intact trail: %+v", rep.Witnesses)
	}
	e.exec(t, "DELETE FROM audit_entries WHERE seq > 5")
	e.exec(t, "DELETE FROM audit_checkpoints WHERE seq > 5")
	if err := os.Remove(filepath.Join(e.dir, "audit.witness")); err != nil {
		t.Fatal(err)
	}
	l := e.open(t, opts)
	l.SetRemote(rw)
	l.Run(briefly(t)) // tries to write the repository's witness: refused
	if got := witnessSeq(t, rw); got != 9 {
		t.Fatalf("repository witness replaced by the truncated head: seq %d", got)
	}
	wantProblem(t, "file and tail gone", verify(t, l), 6, "truncated", "repository")
}

// A crash between storing a checkpoint in the database and writing the
// witness leaves the witness one checkpoint behind: that verifies, and the
// restarted daemon brings it up to date.
func TestWitnessOneCheckpointBehindIsAccepted(t *testing.T) {
	e, opts := newWitnessedEnv(t, audit.Options{CheckpointEvery: 4})
	path := filepath.Join(e.dir, "audit.witness")
	record(t, e.log, 4)
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	record(t, e.log, 4) // checkpoint 8, witness 8
	// The crash: the witness write of checkpoint 8 never happened.
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	rep := verify(t, e.log)
	wantOK(t, rep)
	if len(rep.Witnesses) != 1 || !rep.Witnesses[0].OK || rep.Witnesses[0].Seq != 4 {
		t.Fatalf("lagging witness: %+v", rep.Witnesses)
	}
	l := e.open(t, opts)
	if got := witnessSeq(t, opts.Witness); got != 8 {
		t.Fatalf("witness after a restart: seq %d, want 8", got)
	}
	wantOK(t, verify(t, l))
}
