package faulty_test

import (
	"bytes"
	"context"
	"errors"
	"math/bits"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/blobstore/blobstoretest"
	"github.com/stead-dev/stead/internal/blobstore/faulty"
	"github.com/stead-dev/stead/internal/blobstore/local"
	"github.com/stead-dev/stead/internal/errs"
)

func newFaulty(t *testing.T, seed uint64) *faulty.Store {
	t.Helper()
	inner, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return faulty.New(inner, seed)
}

func put(t *testing.T, s blobstore.BlobStore, key string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), key, data); err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
}

func TestFaultyWithoutRulesPassesBlobStoreContract(t *testing.T) {
	blobstoretest.Run(t, func(t *testing.T) blobstore.BlobStore { return newFaulty(t, 1) })
}

func bitDiff(a, b []byte) int {
	n := 0
	for i := range a {
		n += bits.OnesCount8(a[i] ^ b[i])
	}
	return n
}

func TestFlipBitCorruptsExactlyOneBitOfMatchingKeysOnly(t *testing.T) {
	ctx := context.Background()
	s := newFaulty(t, 7)
	data := blobstoretest.Random(1, 4096)
	put(t, s, "data/p1", data)
	put(t, s, "index/i1", data)
	s.Add(faulty.Rule{Op: faulty.OpGet, Prefix: "data/", Fault: faulty.FlipBit})
	s.Add(faulty.Rule{Op: faulty.OpGetRange, Prefix: "data/", Fault: faulty.FlipBit})

	got, err := s.Get(ctx, "data/p1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(data) || bitDiff(got, data) != 1 {
		t.Fatalf("Get(data/p1) differs in %d bits, want exactly 1", bitDiff(got, data))
	}
	rng, err := s.GetRange(ctx, "data/p1", 100, 200)
	if err != nil {
		t.Fatal(err)
	}
	if bitDiff(rng, data[100:300]) != 1 {
		t.Fatalf("GetRange differs in %d bits, want 1", bitDiff(rng, data[100:300]))
	}
	clean, err := s.Get(ctx, "index/i1")
	if err != nil || !bytes.Equal(clean, data) {
		t.Fatalf("Get(index/i1) of a non-matching key was altered (err %v)", err)
	}
	// The store itself is untouched: only what the caller sees is corrupted.
	s.Clear()
	if again, _ := s.Get(ctx, "data/p1"); !bytes.Equal(again, data) {
		t.Fatal("FlipBit changed the stored object")
	}
}

func TestFlipBitIsDeterministicForASeed(t *testing.T) {
	ctx := context.Background()
	data := blobstoretest.Random(2, 1<<16)
	var results [][]byte
	for _, seed := range []uint64{42, 42, 43} {
		s := newFaulty(t, seed)
		put(t, s, "k", data)
		s.Add(faulty.Rule{Fault: faulty.FlipBit})
		got, err := s.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, got)
	}
	if !bytes.Equal(results[0], results[1]) {
		t.Fatal("the same seed flipped different bits")
	}
	if bytes.Equal(results[0], results[2]) {
		t.Fatal("different seeds flipped the same bit (possible but vanishingly unlikely over 2^19 bits)")
	}
}

func TestTruncateShortensReadsWithoutError(t *testing.T) {
	ctx := context.Background()
	s := newFaulty(t, 1)
	put(t, s, "k", []byte("0123456789"))
	s.Add(faulty.Rule{Op: faulty.OpGet, Fault: faulty.Truncate, Cut: 3})
	got, err := s.Get(ctx, "k")
	if err != nil || string(got) != "0123456" {
		t.Fatalf("Get = %q, %v; want 0123456", got, err)
	}
	s.Clear()
	s.Add(faulty.Rule{Op: faulty.OpGetRange, Fault: faulty.Truncate, Cut: 100})
	got, err = s.GetRange(ctx, "k", 2, 4)
	if err != nil || len(got) != 0 {
		t.Fatalf("GetRange = %q, %v; want everything cut", got, err)
	}
}

func TestFailOnNthPutFailsOnlyThatCallAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	s := newFaulty(t, 1)
	s.Add(faulty.Rule{Op: faulty.OpPut, Nth: 3, Fault: faulty.Fail})
	keys := []string{"a", "b", "c", "d"}
	for i, k := range keys {
		err := s.Put(ctx, k, []byte(k))
		if i == 2 {
			if !errors.Is(err, faulty.ErrInjected) {
				t.Fatalf("3rd Put: err = %v, want ErrInjected", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Put #%d: %v", i+1, err)
		}
	}
	if _, err := s.Inner.Stat(ctx, "c"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("failed-before Put wrote the object: Stat err = %v", err)
	}
	if got := s.Calls(faulty.OpPut); got != 4 {
		t.Fatalf("Calls(put) = %d, want 4", got)
	}
}

func TestFailAfterPutWritesTheObjectButReportsFailure(t *testing.T) {
	ctx := context.Background()
	s := newFaulty(t, 1)
	crash := errors.New("connection reset")
	s.Add(faulty.Rule{Op: faulty.OpPut, Prefix: "snapshots/", Fault: faulty.FailAfter, Err: crash})
	if err := s.Put(ctx, "snapshots/s1", []byte("manifest")); !errors.Is(err, crash) {
		t.Fatalf("Put: err = %v, want the rule's error", err)
	}
	if got, err := s.Inner.Get(ctx, "snapshots/s1"); err != nil || string(got) != "manifest" {
		t.Fatalf("object after fail-after Put = %q, %v; want it written", got, err)
	}
	put(t, s, "data/p", []byte("unaffected"))
}

func TestFailOnPrefixAppliesToEveryMethod(t *testing.T) {
	ctx := context.Background()
	s := newFaulty(t, 1)
	put(t, s, "bad/k", []byte("x"))
	s.Add(faulty.Rule{Prefix: "bad/", Fault: faulty.Fail})
	checks := map[string]error{}
	checks["put"] = s.Put(ctx, "bad/k", nil)
	_, checks["get"] = s.Get(ctx, "bad/k")
	_, checks["getrange"] = s.GetRange(ctx, "bad/k", 0, 1)
	_, checks["stat"] = s.Stat(ctx, "bad/k")
	_, checks["list"] = s.List(ctx, "bad/")
	checks["delete"] = s.Delete(ctx, "bad/k")
	for op, err := range checks {
		if !errors.Is(err, faulty.ErrInjected) {
			t.Errorf("%s: err = %v, want ErrInjected", op, err)
		}
	}
	if _, err := s.Get(ctx, "good"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("non-matching key: err = %v, want the inner store's not found", err)
	}
}

func TestDelayWaitsAndHonoursContext(t *testing.T) {
	s := newFaulty(t, 1)
	put(t, s, "k", []byte("x"))
	s.Add(faulty.Rule{Op: faulty.OpGet, Fault: faulty.Delay, Delay: 30 * time.Millisecond})
	start := time.Now()
	if _, err := s.Get(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("Get took %v, want >= 30ms", d)
	}
	s.Clear()
	s.Add(faulty.Rule{Op: faulty.OpGet, Fault: faulty.Delay, Delay: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := s.Get(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get with an hour's delay and a 10ms deadline: err = %v", err)
	}
}

// spoolInto spools data in s and commits it under key.
func spoolInto(s *faulty.Store, key string, data []byte) error {
	sp, err := s.Spool(context.Background(), "data")
	if err != nil {
		return err
	}
	if _, err := sp.Write(data); err != nil {
		return err
	}
	return sp.Commit(context.Background(), key)
}

func TestFaultySpoolCommitFollowsThePutRules(t *testing.T) {
	s := newFaulty(t, 1)
	ctx := context.Background()
	s.Add(faulty.Rule{Op: faulty.OpPut, Prefix: "data/", Nth: 1, Fault: faulty.Fail})
	s.Add(faulty.Rule{Op: faulty.OpPut, Prefix: "data/", Nth: 2, Fault: faulty.FailAfter})
	if err := spoolInto(s, "data/a", []byte("one")); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("first Commit = %v, want the injected fault", err)
	}
	if _, err := s.Inner.Get(ctx, "data/a"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("a failed Commit stored the object: %v", err)
	}
	if err := spoolInto(s, "data/b", []byte("two")); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("second Commit = %v, want the injected fault", err)
	}
	if got, err := s.Inner.Get(ctx, "data/b"); err != nil || string(got) != "two" {
		t.Fatalf("a fail-after Commit did not store the object: %q, %v", got, err)
	}
	if err := spoolInto(s, "data/c", []byte("three")); err != nil {
		t.Fatal(err)
	}
	if got := s.Calls(faulty.OpPut); got != 3 {
		t.Fatalf("Calls(OpPut) = %d, want 3 (one per Commit)", got)
	}
	infos, err := s.List(ctx, "")
	if err != nil || len(infos) != 2 {
		t.Fatalf("List = %v, %v; want data/b and data/c only (no temp file)", infos, err)
	}
}

func TestFaultySpoolIsUnsupportedOverAStoreWithoutOne(t *testing.T) {
	s := faulty.New(noSpool{}, 1)
	if _, err := s.Spool(context.Background(), "data"); !errors.Is(err, errs.ErrUnsupported) {
		t.Fatalf("Spool = %v, want ErrUnsupported", err)
	}
}

// noSpool is a BlobStore without a Spool method.
type noSpool struct{ blobstore.BlobStore }

func (noSpool) Location() string { return "test://nospool" }
