package repo_test

// Corruption and fault tests: a faulty.Store between the repository and
// its local store flips bits in, truncates, fails and slows down what the
// repository reads and writes, and files on disk are damaged directly.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/blobstore/faulty"
	"github.com/stead-dev/stead/internal/blobstore/local"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/repo/chunker"
	"github.com/stead-dev/stead/internal/repo/pack"
	"github.com/stead-dev/stead/internal/repo/seal"
)

const faultScope = "t-fault"

// faultRepo is a pushed repository on a local store, opened through a
// faulty.Store.
type faultRepo struct {
	t      *testing.T
	local  *local.Store
	faults *faulty.Store
	master seal.Key
	src    string // the pushed tree
	want   string // its digest
	m      *repo.Manifest
}

// newFaultRepo pushes a tree of several files, each of many ~16 KiB chunks
// spread over several packs, through a store without faults.
func newFaultRepo(t *testing.T) *faultRepo {
	t.Helper()
	ctx := context.Background()
	store, err := local.New(filepath.Join(t.TempDir(), "repo"))
	must(t, err)
	master, err := seal.NewKey()
	must(t, err)
	must(t, repo.Init(ctx, store, master, repo.InitOptions{Chunker: chunker.Params{Min: 4 << 10, Avg: 16 << 10, Max: 64 << 10}}))
	f := &faultRepo{t: t, local: store, faults: faulty.New(store, 42), master: master, src: filepath.Join(t.TempDir(), "src")}
	must(t, os.MkdirAll(filepath.Join(f.src, "dir/sub"), 0o755))
	for i, p := range []struct {
		name string
		size int
	}{{"a.bin", 300 << 10}, {"b.bin", 170 << 10}, {"dir/c.bin", 90 << 10}, {"dir/sub/d.bin", 200 << 10}, {"small", 100}} {
		must(t, os.WriteFile(filepath.Join(f.src, p.name), randBytes(uint64(100+i), p.size), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(f.src, "empty"), nil, 0o644))
	must(t, os.Symlink("a.bin", filepath.Join(f.src, "link")))
	f.want = digest(t, f.src)
	sc := f.scope()
	f.m, _, err = sc.Push(ctx, f.src, repo.PushOptions{Source: "s", Digest: f.want})
	must(t, err)
	if packs := storeKeys(t, store, "scopes/"+faultScope+"/data/"); len(packs) < 3 {
		t.Fatalf("fixture has %d packs, want several", len(packs))
	}
	return f
}

// scope opens the repository afresh through the faulty store (no cache,
// so every read goes through the faults).
func (f *faultRepo) scope() *repo.Scope {
	f.t.Helper()
	ctx := context.Background()
	r, err := repo.Open(ctx, f.faults, f.master, repo.Options{PackSize: 128 << 10, Transfers: 2, Workers: 2, Logger: quiet()})
	must(f.t, err)
	sc, err := r.Scope(ctx, faultScope, true)
	must(f.t, err)
	return sc
}

// restore restores the manifest into a fresh directory through the faulty
// store and returns it with the restore's error.
func (f *faultRepo) restore() (string, error) {
	f.t.Helper()
	dst := filepath.Join(f.t.TempDir(), "dst")
	_, err := f.scope().Restore(context.Background(), f.m.ID, dst, repo.RestoreOptions{})
	return dst, err
}

func storeKeys(t *testing.T, s blobstore.BlobStore, prefix string) []string {
	t.Helper()
	infos, err := s.List(context.Background(), prefix)
	must(t, err)
	keys := make([]string, len(infos))
	for i, in := range infos {
		keys[i] = in.Key
	}
	return keys
}

// assertNothingWrongWritten checks that what a failed restore left in dst
// holds no byte the source does not hold at the same place: every regular
// file exists in the source, is no longer, and each of its bytes is either
// still zero (not written yet) or the source's byte. A corrupt chunk
// written anywhere would show as non-zero bytes that differ.
func assertNothingWrongWritten(t *testing.T, src, dst string) (files, written int) {
	t.Helper()
	err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == dst {
				return nil // the restore failed before creating dst
			}
			return err
		}
		rel, err := filepath.Rel(dst, p)
		if err != nil {
			return err
		}
		info, err := os.Lstat(filepath.Join(src, rel))
		if err != nil {
			return fmt.Errorf("restore created %s, which the source does not have: %w", rel, err)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		want, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			return err
		}
		if len(got) > len(want) || info.Size() != int64(len(want)) {
			return fmt.Errorf("%s: %d bytes restored, the source has %d", rel, len(got), len(want))
		}
		files++
		for i := range got {
			if got[i] != 0 && got[i] != want[i] {
				return fmt.Errorf("%s: byte %d is %#x, the source's is %#x: a corrupt chunk was written", rel, i, got[i], want[i])
			}
			if got[i] != 0 {
				written++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files, written
}

// TestRestoreNeverWritesCorruptChunk corrupts (one flipped bit, a
// truncation) what one read of a pack, an index file or a manifest returns,
// at several points of the restore. Every such restore fails with an error
// saying the data is corrupt, and never writes a corrupt byte: whatever it
// wrote before failing matches the source.
func TestRestoreNeverWritesCorruptChunk(t *testing.T) {
	f := newFaultRepo(t)
	// How many pack reads a clean restore makes.
	before := f.faults.Calls(faulty.OpGetRange)
	dst, err := f.restore()
	must(t, err)
	if got := digest(t, dst); got != f.want {
		t.Fatal("clean restore through the faulty store differs")
	}
	packReads := f.faults.Calls(faulty.OpGetRange) - before
	if packReads < 5 { // restore reads packs in merged ranges, trees one by one
		t.Fatalf("a restore makes %d pack reads, want many", packReads)
	}

	type target struct {
		name   string
		op     faulty.Op
		prefix string
		nths   []int
	}
	targets := []target{
		// Pack reads: the root tree is the first; then trees and chunks.
		{"pack", faulty.OpGetRange, "scopes/" + faultScope + "/data/", []int{1, 2, 3, packReads / 3, packReads / 2, packReads - 1, packReads}},
		{"index", faulty.OpGet, "scopes/" + faultScope + "/index/", []int{1}},
		{"manifest", faulty.OpGet, "scopes/" + faultScope + "/snapshots/", []int{1}},
	}
	faults := []faulty.Rule{
		{Fault: faulty.FlipBit},
		{Fault: faulty.Truncate},
		{Fault: faulty.Truncate, Cut: 1 << 20}, // everything
	}
	var cases, partial, unused int
	for _, tg := range targets {
		for _, fr := range faults {
			for _, nth := range tg.nths {
				name := fmt.Sprintf("%s/%s-cut%d/read%d", tg.name, fr.Fault, fr.Cut, nth)
				f.faults.Clear()
				r := fr
				r.Op, r.Prefix, r.Nth = tg.op, tg.prefix, nth
				f.faults.Add(r)
				dst, err := f.restore()
				cases++
				if err == nil && tg.name == "pack" && fr.Fault == faulty.FlipBit {
					// A pack is read in merged ranges, with the bytes
					// between needed blobs (up to mergeGap) read and
					// dropped; which range is the nth read depends on the
					// readers' order, and a bit flipped in such a gap
					// corrupts nothing. Then the restore must be exact.
					if digest(t, dst) != f.want {
						t.Fatalf("%s: restore succeeded with wrong data", name)
					}
					unused++
					continue
				}
				if err == nil {
					t.Fatalf("%s: restore succeeded with corrupt data", name)
				}
				if !errors.Is(err, pack.ErrCorrupt) && !errors.Is(err, seal.ErrAuth) {
					t.Errorf("%s: error does not say the data is corrupt: %v", name, err)
				}
				if _, written := assertNothingWrongWritten(t, f.src, dst); written > 0 {
					partial++
				}
			}
		}
	}
	if partial == 0 {
		t.Fatal("no failed restore had written any data: the byte comparison proved nothing")
	}
	// Most flipped bits land in a needed blob: a detector that missed
	// them all would pass the exactness check above.
	if unused > 2 {
		t.Fatalf("%d of 7 pack reads with a flipped bit restored without an error", unused)
	}
	t.Logf("%d restores with one corrupted read: all failed but %d whose flipped bit fell between needed blobs (exact); %d had written data first, none a wrong byte", cases, unused, partial)
	f.faults.Clear()
	dst, err = f.restore()
	must(t, err)
	if digest(t, dst) != f.want {
		t.Fatal("restore after the faults cleared differs")
	}
}

// damage rewrites a file of the local store through fn and returns a
// function that puts the original back.
func damage(t *testing.T, path string, fn func([]byte) []byte) (undo func()) {
	t.Helper()
	orig, err := os.ReadFile(path)
	must(t, err)
	must(t, os.WriteFile(path, fn(bytes.Clone(orig)), 0o600))
	return func() { must(t, os.WriteFile(path, orig, 0o600)) }
}

// TestCheckReadDataReportsEveryDamagedPackOnDisk flips single bits at many
// places of a pack file (blob data, header, trailer), truncates it and
// extends it, on disk. Check --read-data reports an error for each; a
// restore either fails without writing a wrong byte or, when the damage
// spares every blob (it reads blobs by the index, not the pack header),
// is exact; and the repository checks clean again once the pack is
// repaired.
func TestCheckReadDataReportsEveryDamagedPackOnDisk(t *testing.T) {
	ctx := context.Background()
	f := newFaultRepo(t)
	packs := storeKeys(t, f.local, "scopes/"+faultScope+"/data/")
	rng := rand.New(rand.NewPCG(5, 5))
	type harm struct {
		name string
		fn   func([]byte) []byte
	}
	var harms []harm
	flip := func(pos func(n int) int) func([]byte) []byte {
		return func(b []byte) []byte {
			i := pos(len(b))
			b[i] ^= 1 << rng.IntN(8)
			return b
		}
	}
	harms = append(harms,
		harm{"flip-first-byte", flip(func(int) int { return 0 })},
		harm{"flip-middle", flip(func(n int) int { return n / 2 })},
		harm{"flip-last-byte", flip(func(n int) int { return n - 1 })},
		harm{"flip-in-header", flip(func(n int) int { return n - 40 })},
		harm{"truncate-1", func(b []byte) []byte { return b[:len(b)-1] }},
		harm{"truncate-half", func(b []byte) []byte { return b[:len(b)/2] }},
		harm{"truncate-all", func(b []byte) []byte { return b[:0] }},
		harm{"extend", func(b []byte) []byte { return append(b, 0) }},
	)
	for i := range 8 {
		harms = append(harms, harm{fmt.Sprintf("flip-random-%d", i), flip(func(n int) int { return rng.IntN(n) })})
	}
	spared := 0
	for i, h := range harms {
		key := packs[i%len(packs)]
		undo := damage(t, filepath.Join(f.local.Dir(), key), h.fn)
		res, err := f.scope().Check(ctx, repo.CheckOptions{ReadData: true})
		must(t, err)
		if res.OK() {
			t.Errorf("%s of %s: check --read-data found nothing", h.name, key)
		}
		dst, err := f.restore()
		if err == nil {
			if digest(t, dst) != f.want {
				t.Errorf("%s of %s: restore succeeded with wrong data", h.name, key)
			}
			spared++
		} else {
			assertNothingWrongWritten(t, f.src, dst)
		}
		undo()
	}
	if spared == len(harms) {
		t.Fatal("no damage reached a blob the restore reads")
	}
	res, err := f.scope().Check(ctx, repo.CheckOptions{ReadData: true})
	must(t, err)
	if !res.OK() || len(res.Warnings) > 0 {
		t.Fatalf("repaired repository: %+v", res)
	}
}

// TestCheckReportsDamagedIndexAndManifestOnDisk flips a bit in the index
// file and in the manifest on disk: the structure check reports each, and
// restore refuses.
func TestCheckReportsDamagedIndexAndManifestOnDisk(t *testing.T) {
	ctx := context.Background()
	f := newFaultRepo(t)
	for _, prefix := range []string{"index/", "snapshots/"} {
		keys := storeKeys(t, f.local, "scopes/"+faultScope+"/"+prefix)
		if len(keys) != 1 {
			t.Fatalf("%s: %d objects, want 1", prefix, len(keys))
		}
		undo := damage(t, filepath.Join(f.local.Dir(), keys[0]), func(b []byte) []byte { b[len(b)/2] ^= 4; return b })
		res, err := f.scope().Check(ctx, repo.CheckOptions{})
		must(t, err)
		if res.OK() {
			t.Errorf("damaged %s: check found nothing", keys[0])
		}
		dst, err := f.restore()
		if !errors.Is(err, pack.ErrCorrupt) {
			t.Errorf("damaged %s: restore error %v, want one wrapping pack.ErrCorrupt", keys[0], err)
		}
		assertNothingWrongWritten(t, f.src, dst)
		undo()
	}
}

// TestTransientStoreErrorsFailCleanlyAndRetrySucceeds makes the first few
// calls of one kind fail (before or after the inner store acted). The push
// or restore fails with an error wrapping the store's, leaves a repository
// that checks without errors, and the same call repeated once the fault
// clears succeeds and restores exactly.
func TestTransientStoreErrorsFailCleanlyAndRetrySucceeds(t *testing.T) {
	ctx := context.Background()
	p := "scopes/" + faultScope + "/"
	type fault struct {
		name   string
		op     faulty.Op
		prefix string
		n      int // the first n matching calls fail
		kind   faulty.Fault
	}
	pushFaults := []fault{
		{"pack-put-fails", faulty.OpPut, p + "data/", 2, faulty.Fail},
		{"pack-put-lost-reply", faulty.OpPut, p + "data/", 1, faulty.FailAfter},
		{"index-put-fails", faulty.OpPut, p + "index/", 1, faulty.Fail},
		{"index-put-lost-reply", faulty.OpPut, p + "index/", 1, faulty.FailAfter},
		{"manifest-put-fails", faulty.OpPut, p + "snapshots/", 1, faulty.Fail},
		{"manifest-put-lost-reply", faulty.OpPut, p + "snapshots/", 1, faulty.FailAfter},
		{"index-list-fails", faulty.OpList, p + "index/", 1, faulty.Fail},
		{"parent-manifest-get-fails", faulty.OpGet, p + "snapshots/", 3, faulty.Fail},
		{"parent-tree-read-fails", faulty.OpGetRange, p + "data/", 1, faulty.Fail},
	}
	restoreFaults := []fault{
		{"chunk-read-fails", faulty.OpGetRange, p + "data/", 3, faulty.Fail},
		{"chunk-read-fails-late", faulty.OpGetRange, p + "data/", 12, faulty.Fail},
		{"index-get-fails", faulty.OpGet, p + "index/", 1, faulty.Fail},
		{"manifest-get-fails", faulty.OpGet, p + "snapshots/", 1, faulty.Fail},
		{"index-list-fails", faulty.OpList, p + "index/", 2, faulty.Fail},
	}
	addFirst := func(fs *faulty.Store, fl fault) {
		for i := 1; i <= fl.n; i++ {
			fs.Add(faulty.Rule{Op: fl.op, Prefix: fl.prefix, Nth: i, Fault: fl.kind})
		}
	}
	for _, fl := range pushFaults {
		t.Run("push/"+fl.name, func(t *testing.T) {
			f := newFaultRepo(t)
			// An incremental push after a change: it reads the parent
			// and writes new packs, an index and a manifest.
			must(t, os.WriteFile(filepath.Join(f.src, "dir/c.bin"), randBytes(777, 150<<10), 0o644))
			must(t, os.WriteFile(filepath.Join(f.src, "new.bin"), randBytes(778, 100<<10), 0o644))
			want := digest(t, f.src)
			sc := f.scope()
			addFirst(f.faults, fl)
			_, _, err := sc.Push(ctx, f.src, repo.PushOptions{Parent: f.m.ID, Source: "s", Digest: want})
			if !errors.Is(err, faulty.ErrInjected) {
				t.Fatalf("push under %s: error %v, want one wrapping the store's", fl.name, err)
			}
			// Packs are spooled in the local store's temp files: a failed
			// push aborts those it did not commit.
			if tmp := tempFiles(t, f.local.Dir()); len(tmp) > 0 {
				t.Fatalf("the failed push left temp files: %q", tmp)
			}
			f.faults.Clear()
			res, err := f.scope().Check(ctx, repo.CheckOptions{})
			must(t, err)
			if !res.OK() {
				t.Fatalf("check after a failed push: %q", res.Errors)
			}
			// Retry on the same Scope, as a caller would.
			m, _, err := sc.Push(ctx, f.src, repo.PushOptions{Parent: f.m.ID, Source: "s", Digest: want})
			must(t, err)
			f.m = m
			dst, err := f.restore()
			must(t, err)
			if digest(t, dst) != want {
				t.Fatal("retried push does not restore exactly")
			}
			sc2 := f.scope()
			_, err = sc2.Prune(ctx, repo.PruneOptions{})
			must(t, err)
			res, err = f.scope().Check(ctx, repo.CheckOptions{ReadData: true})
			must(t, err)
			if !res.OK() || len(res.Warnings) > 0 {
				t.Fatalf("check --read-data after prune: %+v", res)
			}
		})
	}
	for _, fl := range restoreFaults {
		t.Run("restore/"+fl.name, func(t *testing.T) {
			f := newFaultRepo(t)
			before := listStore(t, f.local, "")
			sc := f.scope()
			addFirst(f.faults, fl)
			dst := filepath.Join(t.TempDir(), "dst")
			_, err := sc.Restore(ctx, f.m.ID, dst, repo.RestoreOptions{})
			if !errors.Is(err, faulty.ErrInjected) {
				t.Fatalf("restore under %s: error %v, want one wrapping the store's", fl.name, err)
			}
			assertNothingWrongWritten(t, f.src, dst)
			f.faults.Clear()
			// The failed target is discarded; the retry on the same
			// Scope restores exactly.
			must(t, os.RemoveAll(dst))
			_, err = sc.Restore(ctx, f.m.ID, dst, repo.RestoreOptions{})
			must(t, err)
			if digest(t, dst) != f.want {
				t.Fatal("retried restore differs")
			}
			if after := listStore(t, f.local, ""); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Fatal("a restore changed the repository")
			}
		})
	}
}

// TestSlowStoreStillCompletesCorrectly adds latency to every store call:
// push, restore, check --read-data and prune all complete, and the
// restore is exact.
func TestSlowStoreStillCompletesCorrectly(t *testing.T) {
	ctx := context.Background()
	f := newFaultRepo(t)
	f.faults.Add(faulty.Rule{Fault: faulty.Delay, Delay: 3 * time.Millisecond})
	must(t, os.WriteFile(filepath.Join(f.src, "a.bin"), randBytes(900, 250<<10), 0o644))
	want := digest(t, f.src)
	sc := f.scope()
	start := time.Now()
	m, _, err := sc.Push(ctx, f.src, repo.PushOptions{Parent: f.m.ID, Source: "s", Digest: want})
	must(t, err)
	must(t, sc.Forget(ctx, f.m.ID))
	_, err = sc.Prune(ctx, repo.PruneOptions{})
	must(t, err)
	f.m = m
	dst, err := f.restore()
	must(t, err)
	if digest(t, dst) != want {
		t.Fatal("restore through a slow store differs")
	}
	res, err := f.scope().Check(ctx, repo.CheckOptions{ReadData: true})
	must(t, err)
	if !res.OK() || len(res.Warnings) > 0 {
		t.Fatalf("check through a slow store: %+v", res)
	}
	calls := 0
	for _, op := range []faulty.Op{faulty.OpPut, faulty.OpGet, faulty.OpGetRange, faulty.OpList, faulty.OpStat, faulty.OpDelete} {
		calls += f.faults.Calls(op)
	}
	t.Logf("%d store calls with 3 ms latency each, %v", calls, time.Since(start).Round(time.Millisecond))
}

// tempFiles lists the local store's temp files (".tmp-*") under dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".tmp-") {
			out = append(out, p)
		}
		return nil
	})
	must(t, err)
	return out
}

// A push that fails while files are opened ahead of its readers (the
// prefetch) closes every one of them: a push that fails a thousand times
// must not leave the daemon without descriptors.
func TestFailedPushClosesTheFilesItOpenedAhead(t *testing.T) {
	ctx := context.Background()
	store, err := local.New(filepath.Join(t.TempDir(), "repo"))
	must(t, err)
	master, err := seal.NewKey()
	must(t, err)
	must(t, repo.Init(ctx, store, master, repo.InitOptions{Chunker: chunker.Params{Min: 4 << 10, Avg: 16 << 10, Max: 64 << 10}}))
	faults := faulty.New(store, 7)
	faults.Add(faulty.Rule{Op: faulty.OpPut, Prefix: "scopes/t-prefetch/data/", Fault: faulty.Fail})
	r, err := repo.Open(ctx, faults, master, repo.Options{PackSize: 128 << 10, Workers: 2, Readers: 2, Logger: quiet()})
	must(t, err)
	sc, err := r.Scope(ctx, "t-prefetch", true)
	must(t, err)
	src := t.TempDir()
	for i := range 2000 {
		must(t, os.WriteFile(filepath.Join(src, fmt.Sprintf("f%04d", i)), randBytes(uint64(i), 8<<10), 0o644))
	}
	open := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		must(t, err)
		return len(ents)
	}
	before := open()
	for range 3 {
		if _, _, err := sc.Push(ctx, src, repo.PushOptions{Source: "s"}); !errors.Is(err, faulty.ErrInjected) {
			t.Fatalf("push with a failing pack upload: %v, want the injected error", err)
		}
	}
	if after := open(); after > before {
		t.Fatalf("%d descriptors open after three failed pushes, %d before", after, before)
	}
}
