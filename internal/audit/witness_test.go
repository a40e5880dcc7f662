package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

func testCheckpoint(seq int64) store.AuditCheckpoint {
	return store.AuditCheckpoint{Seq: seq, Hash: bytes.Repeat([]byte{byte(seq)}, 32), Start: 1,
		Time: time.Date(2026, 12, 1, 10, 0, int(seq), 0, time.UTC), KeyID: "0123456789abcdef", Signature: bytes.Repeat([]byte{7}, 64)}
}

func sameCheckpoint(a, b store.AuditCheckpoint) bool {
	return a.Seq == b.Seq && bytes.Equal(a.Hash, b.Hash) && a.Start == b.Start && a.Time.Equal(b.Time) &&
		a.KeyID == b.KeyID && bytes.Equal(a.Signature, b.Signature)
}

func TestFileWitnessRoundTripsPrivately(t *testing.T) {
	w := NewFileWitness(filepath.Join(t.TempDir(), "data", "audit.witness"))
	if _, err := w.Load(t.Context()); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("load before any store: %v, want ErrNotFound", err)
	}
	for _, seq := range []int64{3, 9} {
		c := testCheckpoint(seq)
		if err := w.Store(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		got, err := w.Load(t.Context())
		if err != nil || !sameCheckpoint(got, c) {
			t.Fatalf("load after store of seq %d: %+v %v", seq, got, err)
		}
	}
	fi, err := os.Stat(w.Path())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("witness file mode: %v %v", fi, err)
	}
}

// A crash at any step of Store leaves the previous witness readable, and
// the next Store succeeds over whatever the crash left.
func TestFileWitnessCrashAtEachStepKeepsTheOldOrTheNew(t *testing.T) {
	for _, step := range []string{"create", "write", "sync", "close", "rename", "syncdir"} {
		t.Run(step, func(t *testing.T) {
			w := NewFileWitness(filepath.Join(t.TempDir(), "audit.witness"))
			old, next := testCheckpoint(4), testCheckpoint(8)
			if err := w.Store(t.Context(), old); err != nil {
				t.Fatal(err)
			}
			crash := errors.New("crash")
			w.fault = func(op string) error {
				if op == step {
					return crash
				}
				return nil
			}
			if err := w.Store(t.Context(), next); !errors.Is(err, crash) {
				t.Fatalf("store with a crash at %s: %v", step, err)
			}
			got, err := w.Load(t.Context())
			if err != nil {
				t.Fatalf("load after a crash at %s: %v", step, err)
			}
			// Before the rename the old witness stands; after it, the new.
			want := old
			if step == "syncdir" {
				want = next
			}
			if !sameCheckpoint(got, want) {
				t.Fatalf("after a crash at %s: seq %d, want %d", step, got.Seq, want.Seq)
			}
			w.fault = nil
			if err := w.Store(t.Context(), next); err != nil {
				t.Fatalf("store after the crash: %v", err)
			}
			if got, err := w.Load(t.Context()); err != nil || !sameCheckpoint(got, next) {
				t.Fatalf("load after recovery: %+v %v", got, err)
			}
		})
	}
}

// A torn temporary file (a crash half way through the write) is never
// read, and the next Store truncates it.
func TestFileWitnessIgnoresATornTempFile(t *testing.T) {
	w := NewFileWitness(filepath.Join(t.TempDir(), "audit.witness"))
	old := testCheckpoint(5)
	if err := w.Store(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	full, err := encodeWitness(testCheckpoint(250))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.Path()+".tmp", append(full[:len(full)/2], bytes.Repeat([]byte("x"), 4096)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := w.Load(t.Context()); err != nil || !sameCheckpoint(got, old) {
		t.Fatalf("load beside a torn temp file: %+v %v", got, err)
	}
	next := testCheckpoint(6)
	if err := w.Store(t.Context(), next); err != nil {
		t.Fatal(err)
	}
	if got, err := w.Load(t.Context()); err != nil || !sameCheckpoint(got, next) {
		t.Fatalf("load after store over a torn temp file: %+v %v", got, err)
	}
	if _, err := os.Stat(w.Path() + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file left after a store: %v", err)
	}
}

// A damaged witness is reported as invalid, never taken as absent.
func TestFileWitnessRejectsDamage(t *testing.T) {
	good, err := encodeWitness(testCheckpoint(5))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"empty":      {},
		"truncated":  good[:len(good)/2],
		"garbage":    []byte("\x00\x01not json"),
		"format":     bytes.Replace(good, []byte(witnessFormat), []byte("other-v9"), 1),
		"hash":       bytes.Replace(good, []byte(`"hash": "05`), []byte(`"hash": "zz`), 1),
		"start>seq":  bytes.Replace(good, []byte(`"start": 1`), []byte(`"start": 6`), 1),
		"no sig":     bytes.Replace(good, []byte(`"signature": "07`), []byte(`"signature": "", "x": "07`), 1),
		"zero seq":   bytes.Replace(good, []byte(`"seq": 5`), []byte(`"seq": 0`), 1),
		"wrong type": bytes.Replace(good, []byte(`"seq": 5`), []byte(`"seq": "5"`), 1),
	} {
		t.Run(name, func(t *testing.T) {
			w := NewFileWitness(filepath.Join(t.TempDir(), "audit.witness"))
			if err := os.WriteFile(w.Path(), b, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Load(t.Context()); !errors.Is(err, errs.ErrInvalid) {
				t.Fatalf("load of a damaged witness: %v, want ErrInvalid", err)
			}
		})
	}
}

func FuzzDecodeWitness(f *testing.F) {
	good, _ := encodeWitness(testCheckpoint(5))
	f.Add(good)
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeWitness(b)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalid) {
				t.Fatalf("decode error not ErrInvalid: %v", err)
			}
			return
		}
		if c.Seq < 1 || c.Start < 1 || c.Start > c.Seq || len(c.Hash) == 0 || len(c.Signature) == 0 || c.KeyID == "" {
			t.Fatalf("decoded an invalid witness: %+v", c)
		}
	})
}
