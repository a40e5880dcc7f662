// Package blobstoretest is the contract suite every blobstore.BlobStore
// implementation must pass. An implementation's test calls Run with a
// constructor that returns a fresh, empty store for each subtest:
//
//	func TestLocalContract(t *testing.T) {
//		blobstoretest.Run(t, func(t *testing.T) blobstore.BlobStore {
//			s, err := local.New(t.TempDir())
//			...
//			return s
//		})
//	}
package blobstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/errs"
)

const mib = 1 << 20

// Run runs the contract suite. newStore must return an empty store that no
// other subtest uses; Run never calls it concurrently.
func Run(t *testing.T, newStore func(t *testing.T) blobstore.BlobStore) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s blobstore.BlobStore)
	}{
		{"LocationIsNamed", testLocation},
		{"PutGetRoundTripsEmptyTinyAndLargeObjects", testRoundTrip},
		{"PutCopiesCallerBufferAndGetReturnsOwnedCopy", testBufferOwnership},
		{"PutOverExistingKeyReplacesIt", testOverwrite},
		{"GetAbsentKeyIsNotFound", testGetAbsent},
		{"StatReportsSizeAndNotFound", testStat},
		{"GetRangeReturnsExactBytesAndRejectsShortObjects", testGetRange},
		{"ListOfEmptyStoreIsEmpty", testListEmpty},
		{"ListIsSortedPlainPrefixMatchOverNestedKeys", testListPrefix},
		{"DeleteIsIdempotent", testDelete},
		{"InvalidKeysAreRejectedAndNothingIsWritten", testInvalidKeys},
		{"LongestValidKeyWorks", testLongKey},
		{"ConcurrentPutsOfDistinctKeysAllLand", testConcurrentPuts},
		{"LargeObjectRoundTrips", testLarge},
		{"SpoolCommitStoresWhatWasWritten", testSpoolCommit},
		{"SpoolAbortAndFailedCommitsStoreNothing", testSpoolFailures},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

// Random returns n pseudo-random bytes determined by seed.
func Random(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func put(t *testing.T, s blobstore.BlobStore, key string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), key, data); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
}

func mustGet(t *testing.T, s blobstore.BlobStore, key string, want []byte) {
	t.Helper()
	got, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %d bytes %s, want %d bytes %s", key, len(got), head(got), len(want), head(want))
	}
}

func head(b []byte) string {
	if len(b) > 16 {
		return fmt.Sprintf("%x...", b[:16])
	}
	return fmt.Sprintf("%x", b)
}

func keys(infos []blobstore.Info) []string {
	out := make([]string, len(infos))
	for i, in := range infos {
		out[i] = in.Key
	}
	return out
}

func testLocation(t *testing.T, s blobstore.BlobStore) {
	if s.Location() == "" {
		t.Fatal("Location() is empty")
	}
}

func testRoundTrip(t *testing.T, s blobstore.BlobStore) {
	cases := map[string][]byte{
		"empty":        {},
		"one":          {0x5a},
		"data/ab/big":  Random(1, 5*mib),
		"index/x.json": []byte(`{"k":1}`),
	}
	for k, v := range cases {
		put(t, s, k, v)
	}
	for k, v := range cases {
		mustGet(t, s, k, v)
	}
}

func testBufferOwnership(t *testing.T, s blobstore.BlobStore) {
	data := []byte("original")
	put(t, s, "k", data)
	copy(data, "XXXXXXXX")
	mustGet(t, s, "k", []byte("original"))
	got, err := s.Get(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	copy(got, "YYYYYYYY")
	mustGet(t, s, "k", []byte("original"))
}

func testOverwrite(t *testing.T, s blobstore.BlobStore) {
	put(t, s, "a/b", Random(2, 1000))
	put(t, s, "a/b", []byte("short"))
	mustGet(t, s, "a/b", []byte("short"))
	info, err := s.Stat(context.Background(), "a/b")
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != 5 {
		t.Fatalf("Stat after overwrite: size %d, want 5", info.Size)
	}
	list, err := s.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0] != (blobstore.Info{Key: "a/b", Size: 5}) {
		t.Fatalf("List after overwrite = %+v, want one a/b of 5 bytes", list)
	}
}

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("%s: err = %v, want errs.ErrNotFound", what, err)
	}
}

func testGetAbsent(t *testing.T, s blobstore.BlobStore) {
	ctx := context.Background()
	_, err := s.Get(ctx, "nope")
	wantNotFound(t, "Get absent", err)
	_, err = s.GetRange(ctx, "nope/deeper", 0, 1)
	wantNotFound(t, "GetRange absent", err)
	put(t, s, "dir/obj", []byte("x"))
	// A prefix of an existing key is not itself an object, nor is a path
	// through an existing object.
	_, err = s.Get(ctx, "dir")
	wantNotFound(t, "Get of a key's parent prefix", err)
	_, err = s.Get(ctx, "dir/obj/below")
	wantNotFound(t, "Get below an object", err)
	_, err = s.Stat(ctx, "dir")
	wantNotFound(t, "Stat of a key's parent prefix", err)
}

func testStat(t *testing.T, s blobstore.BlobStore) {
	ctx := context.Background()
	put(t, s, "s/one", Random(3, 12345))
	put(t, s, "s/zero", nil)
	for key, size := range map[string]int64{"s/one": 12345, "s/zero": 0} {
		info, err := s.Stat(ctx, key)
		if err != nil {
			t.Fatalf("Stat(%q): %v", key, err)
		}
		if info != (blobstore.Info{Key: key, Size: size}) {
			t.Fatalf("Stat(%q) = %+v, want size %d", key, info, size)
		}
	}
	_, err := s.Stat(ctx, "s/absent")
	wantNotFound(t, "Stat absent", err)
}

func testGetRange(t *testing.T, s blobstore.BlobStore) {
	ctx := context.Background()
	data := Random(4, 100000)
	put(t, s, "r", data)
	ok := []struct{ off, n int64 }{
		{0, 1}, {1000, 5000}, {99999, 1}, {50000, 50000}, {0, 100000}, {100000, 0}, {0, 0}, {777, 0},
	}
	for _, c := range ok {
		got, err := s.GetRange(ctx, "r", c.off, c.n)
		if err != nil {
			t.Fatalf("GetRange(%d, %d): %v", c.off, c.n, err)
		}
		if !bytes.Equal(got, data[c.off:c.off+c.n]) {
			t.Fatalf("GetRange(%d, %d) = %d bytes %s, want %s", c.off, c.n, len(got), head(got), head(data[c.off:c.off+c.n]))
		}
	}
	short := []struct{ off, n int64 }{
		{99999, 2}, {0, 100001}, {100000, 1}, {100001, 0}, {200000, 10}, {1, 1 << 62}, {1 << 62, 1 << 62},
	}
	for _, c := range short {
		got, err := s.GetRange(ctx, "r", c.off, c.n)
		if err == nil {
			t.Fatalf("GetRange(%d, %d) beyond the end returned %d bytes and no error", c.off, c.n, len(got))
		}
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("GetRange(%d, %d) beyond the end: err = %v, want io.ErrUnexpectedEOF", c.off, c.n, err)
		}
	}
	for _, c := range []struct{ off, n int64 }{{-1, 1}, {0, -1}} {
		if _, err := s.GetRange(ctx, "r", c.off, c.n); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("GetRange(%d, %d): err = %v, want errs.ErrInvalid", c.off, c.n, err)
		}
	}
	// The empty object has exactly one legal range.
	put(t, s, "e", nil)
	if got, err := s.GetRange(ctx, "e", 0, 0); err != nil || len(got) != 0 {
		t.Fatalf("GetRange(empty, 0, 0) = %d bytes, %v; want 0 bytes, nil", len(got), err)
	}
	if _, err := s.GetRange(ctx, "e", 0, 1); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("GetRange(empty, 0, 1): err = %v, want a short-object error", err)
	}
}

func testListEmpty(t *testing.T, s blobstore.BlobStore) {
	for _, p := range []string{"", "a", "a/", "a/b"} {
		list, err := s.List(context.Background(), p)
		if err != nil {
			t.Fatalf("List(%q) on empty store: %v", p, err)
		}
		if len(list) != 0 {
			t.Fatalf("List(%q) on empty store = %v, want nothing", p, list)
		}
	}
}

func testListPrefix(t *testing.T, s blobstore.BlobStore) {
	ctx := context.Background()
	// No key here is also a directory of another ("a" beside "a/b"): a
	// directory tree cannot hold both, so the contract does not ask for it.
	all := []string{
		"a.b", "a-b", "a_b", "a/b-", "a/ba", "a/bc/d", "a/b/x", "a/b/y/z", "a/c", "ab", "b/0", "data/00/p1",
		"data/00/p2", "data/ff/p3", "Z", "z/9/8/7/6/5/4/3/2/1",
	}
	// Put in a shuffled order so a store that lists in insertion order fails.
	shuffled := slices.Clone(all)
	rand.New(rand.NewPCG(5, 5)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for i, k := range shuffled {
		put(t, s, k, Random(uint64(i), i+1))
	}
	sorted := slices.Clone(all)
	slices.Sort(sorted)
	for _, p := range []string{"", "a", "a/", "a/b", "a/b/", "a/bc", "a/bc/d", "ab", "data/", "data/0", "data/00/", "z/9/8/", "nope", "nope/", "a/b/y/z/w", "Z"} {
		list, err := s.List(ctx, p)
		if err != nil {
			t.Fatalf("List(%q): %v", p, err)
		}
		var want []string
		for _, k := range sorted {
			if strings.HasPrefix(k, p) {
				want = append(want, k)
			}
		}
		if got := keys(list); !slices.Equal(got, want) {
			t.Fatalf("List(%q) = %q, want %q", p, got, want)
		}
		for _, in := range list {
			st, err := s.Stat(ctx, in.Key)
			if err != nil {
				t.Fatalf("Stat(%q) of listed key: %v", in.Key, err)
			}
			if st.Size != in.Size {
				t.Fatalf("List(%q) reports %q as %d bytes, Stat says %d", p, in.Key, in.Size, st.Size)
			}
		}
	}
}

func testDelete(t *testing.T, s blobstore.BlobStore) {
	ctx := context.Background()
	if err := s.Delete(ctx, "never/was"); err != nil {
		t.Fatalf("Delete of an absent key: %v", err)
	}
	put(t, s, "d/x", []byte("x"))
	put(t, s, "d/y", []byte("y"))
	for i := range 2 {
		if err := s.Delete(ctx, "d/x"); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	_, err := s.Get(ctx, "d/x")
	wantNotFound(t, "Get after Delete", err)
	_, err = s.Stat(ctx, "d/x")
	wantNotFound(t, "Stat after Delete", err)
	list, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(list); !slices.Equal(got, []string{"d/y"}) {
		t.Fatalf("List after Delete = %q, want [d/y]", got)
	}
	// Deleting a prefix that is not itself an object deletes nothing.
	if err := s.Delete(ctx, "d"); err != nil {
		t.Fatalf("Delete of a prefix: %v", err)
	}
	mustGet(t, s, "d/y", []byte("y"))
	// A deleted key can be written again.
	put(t, s, "d/x", []byte("again"))
	mustGet(t, s, "d/x", []byte("again"))
}

// InvalidKeys returns keys every BlobStore must reject with errs.ErrInvalid.
func InvalidKeys() []string {
	return []string{
		"", ".", "..", "/a", "a/", "a//b", "a/./b", "a/../b", "../a", "a/..",
		strings.Repeat("k", 513), strings.Repeat("s", 256), "a b", "a\x00b", "\x00", "a\\b",
		"é", "a*", "a?b", "a\nb", "/", "//",
	}
}

func testInvalidKeys(t *testing.T, s blobstore.BlobStore) {
	ctx := context.Background()
	put(t, s, "keep", []byte("k"))
	for _, k := range InvalidKeys() {
		if blobstore.ValidKey(k) {
			t.Fatalf("ValidKey(%q) = true", k)
		}
		calls := map[string]error{}
		calls["Put"] = s.Put(ctx, k, []byte("bad"))
		_, calls["Get"] = s.Get(ctx, k)
		_, calls["GetRange"] = s.GetRange(ctx, k, 0, 1)
		_, calls["Stat"] = s.Stat(ctx, k)
		calls["Delete"] = s.Delete(ctx, k)
		if k != "" && k != "a/" {
			_, calls["List"] = s.List(ctx, k)
		}
		for op, err := range calls {
			if !errors.Is(err, errs.ErrInvalid) {
				t.Fatalf("%s(%q): err = %v, want errs.ErrInvalid", op, k, err)
			}
		}
	}
	for _, p := range []string{"a//", "/", "/a/", "a b/"} {
		if _, err := s.List(ctx, p); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("List(%q): err = %v, want errs.ErrInvalid", p, err)
		}
	}
	list, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(list); !slices.Equal(got, []string{"keep"}) {
		t.Fatalf("after invalid Puts List = %q, want only [keep]", got)
	}
	mustGet(t, s, "keep", []byte("k"))
}

func testLongKey(t *testing.T, s blobstore.BlobStore) {
	key := strings.Repeat("a", 255) + "/" + strings.Repeat("b", 254) + "/c"
	if len(key) != blobstore.MaxKeyLen || !blobstore.ValidKey(key) {
		t.Fatalf("test key: len %d valid %v", len(key), blobstore.ValidKey(key))
	}
	put(t, s, key, []byte("long"))
	mustGet(t, s, key, []byte("long"))
	list, err := s.List(context.Background(), key[:300])
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(list); !slices.Equal(got, []string{key}) {
		t.Fatalf("List(long prefix) = %q", got)
	}
}

func testConcurrentPuts(t *testing.T, s blobstore.BlobStore) {
	ctx := context.Background()
	const n = 16
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			// Half share a new directory, so directory creation races too.
			key := fmt.Sprintf("c/shared/%02d", i)
			if i%2 == 1 {
				key = fmt.Sprintf("c/own%02d/obj", i)
			}
			if err := s.Put(ctx, key, Random(uint64(100+i), 64*1024+i)); err != nil {
				errc <- fmt.Errorf("put %s: %w", key, err)
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	list, err := s.List(ctx, "c/")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n {
		t.Fatalf("List after %d concurrent puts = %d objects: %q", n, len(list), keys(list))
	}
	for i := range n {
		key := fmt.Sprintf("c/shared/%02d", i)
		if i%2 == 1 {
			key = fmt.Sprintf("c/own%02d/obj", i)
		}
		mustGet(t, s, key, Random(uint64(100+i), 64*1024+i))
	}
}

func testLarge(t *testing.T, s blobstore.BlobStore) {
	ctx := context.Background()
	data := Random(6, 20*mib)
	put(t, s, "big/obj", data)
	mustGet(t, s, "big/obj", data)
	off, n := int64(17*mib+3), int64(3*mib-3)
	got, err := s.GetRange(ctx, "big/obj", off, n)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[off:off+n]) {
		t.Fatalf("GetRange of the large object's tail differs")
	}
	info, err := s.Stat(ctx, "big/obj")
	if err != nil || info.Size != int64(len(data)) {
		t.Fatalf("Stat = %+v, %v; want %d bytes", info, err, len(data))
	}
	if _, err := s.GetRange(ctx, "big/obj", off, n+1); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("GetRange one byte past the large object's end: err = %v, want io.ErrUnexpectedEOF", err)
	}
}

// spooler returns s's Spooler; every store of stead's spools (packs are
// written through it), so one that does not fails the contract.
func spooler(t *testing.T, s blobstore.BlobStore) blobstore.Spooler {
	t.Helper()
	sp, ok := s.(blobstore.Spooler)
	if !ok {
		t.Fatalf("%T does not implement blobstore.Spooler", s)
	}
	return sp
}

func testSpoolCommit(t *testing.T, s blobstore.BlobStore) {
	ctx := context.Background()
	data := Random(7, 3*mib+17)
	sp, err := spooler(t, s).Spool(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 100_000)
		if w, err := sp.Write(rest[:n]); err != nil || w != n {
			t.Fatalf("Write = %d, %v", w, err)
		}
		rest = rest[n:]
	}
	if err := sp.Commit(ctx, "data/ab/pack1"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "data/ab/pack1"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get after Commit: %d bytes, %v; want %d bytes written", len(got), err, len(data))
	}
	sp.Abort() // after Commit: nothing happens
	if _, err := s.Stat(ctx, "data/ab/pack1"); err != nil {
		t.Fatalf("Abort after Commit removed the object: %v", err)
	}
	if err := sp.Commit(ctx, "data/ab/pack2"); err == nil {
		t.Fatal("a second Commit succeeded")
	}
	if _, err := sp.Write([]byte("x")); err == nil {
		t.Fatal("Write after Commit succeeded")
	}
	// An empty spool commits an empty object.
	sp, err = spooler(t, s).Spool(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Commit(ctx, "data/empty"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "data/empty"); err != nil || len(got) != 0 {
		t.Fatalf("Get of an empty spool = %q, %v", got, err)
	}
}

func testSpoolFailures(t *testing.T, s blobstore.BlobStore) {
	ctx := context.Background()
	spr := spooler(t, s)
	nothing := func(when string) {
		t.Helper()
		if infos, err := s.List(ctx, ""); err != nil || len(infos) != 0 {
			t.Fatalf("objects after %s = %v, %v; want none", when, infos, err)
		}
	}
	sp, err := spr.Spool(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	sp.Write([]byte("x"))
	sp.Abort()
	sp.Abort()
	nothing("Abort")
	for _, key := range []string{"data/../x", "", "/abs"} {
		sp, err := spr.Spool(ctx, "data")
		if err != nil {
			t.Fatal(err)
		}
		sp.Write([]byte("x"))
		if err := sp.Commit(ctx, key); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("Commit(%q) = %v, want ErrInvalid", key, err)
		}
		nothing(fmt.Sprintf("Commit(%q)", key))
	}
	cctx, cancel := context.WithCancel(ctx)
	sp, err = spr.Spool(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	sp.Write([]byte("x"))
	cancel()
	if err := sp.Commit(cctx, "data/ab/c"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with a canceled context = %v", err)
	}
	nothing("a canceled Commit")
	if _, err := spr.Spool(ctx, "bad//dir"); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("Spool(bad dir) = %v, want ErrInvalid", err)
	}
}
