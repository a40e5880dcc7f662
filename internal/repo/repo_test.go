package repo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/blobstore/local"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/repo/chunker"
	"github.com/stead-dev/stead/internal/repo/seal"
	"github.com/stead-dev/stead/internal/treedigest"
)

// newRepo makes a repository on a local blob store.
func newRepo(t *testing.T, init ...repo.InitOptions) (*repo.Repository, blobstore.BlobStore, seal.Key) {
	t.Helper()
	store, err := local.New(filepath.Join(t.TempDir(), "repo"))
	if err != nil {
		t.Fatal(err)
	}
	master, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := repo.Init(ctx, store, master, init...); err != nil {
		t.Fatal(err)
	}
	r, err := repo.Open(ctx, store, master, repo.Options{CacheDir: filepath.Join(t.TempDir(), "cache"), PackSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return r, store, master
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fidelityTree builds a tree with every kind of entry and attribute the
// repository must carry.
func fidelityTree(t *testing.T, dir string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(dir, "src/pkg/deep/er"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "src/main.go"), []byte(strings.Repeat("package main\n", 5000)), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "src/pkg/deep/er/big.bin"), randBytes(1, 3<<20+17), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "empty"), nil, 0o644))
	// Sparse: 64 MiB apparent, two data regions.
	f, err := os.Create(filepath.Join(dir, "sparse.img"))
	must(t, err)
	must(t, f.Truncate(64<<20))
	_, err = f.WriteAt(randBytes(2, 1<<20), 8<<20)
	must(t, err)
	_, err = f.WriteAt(randBytes(3, 4096), 40<<20)
	must(t, err)
	must(t, f.Close())
	// All hole.
	f, err = os.Create(filepath.Join(dir, "hole.img"))
	must(t, err)
	must(t, f.Truncate(10<<20))
	must(t, f.Close())
	must(t, os.Symlink("src/main.go", filepath.Join(dir, "link-rel")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "link-abs")))
	must(t, os.Symlink("nowhere", filepath.Join(dir, "link-dangling")))
	must(t, os.Link(filepath.Join(dir, "src/main.go"), filepath.Join(dir, "hardlink-a")))
	must(t, os.Link(filepath.Join(dir, "src/main.go"), filepath.Join(dir, "src/pkg/hardlink-b")))
	must(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o640))
	must(t, unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, unix.Mknod(filepath.Join(dir, "loopdev"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 200))))
	must(t, os.WriteFile(filepath.Join(dir, "setuid"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Chown(filepath.Join(dir, "setuid"), 1000, 1001))
	must(t, os.Chmod(filepath.Join(dir, "setuid"), 0o4755|os.ModeSetuid))
	must(t, unix.Chmod(filepath.Join(dir, "setuid"), 0o4755))
	must(t, os.WriteFile(filepath.Join(dir, "capable"), []byte("binary"), 0o755))
	// security.capability: cap_net_bind_service+ep (VFS_CAP_REVISION_2).
	capv := []byte{0x01, 0x00, 0x00, 0x02, 0x00, 0x04, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0}
	must(t, unix.Setxattr(filepath.Join(dir, "capable"), "security.capability", capv, 0))
	must(t, unix.Setxattr(filepath.Join(dir, "src/main.go"), "user.origin", []byte("agent\x00\xff"), 0))
	must(t, unix.Setxattr(filepath.Join(dir, "src"), "user.dir", []byte("d"), 0))
	must(t, os.Mkdir(filepath.Join(dir, "shared"), 0o2775))
	must(t, unix.Chmod(filepath.Join(dir, "shared"), 0o3777))
	must(t, os.Lchown(filepath.Join(dir, "link-rel"), 1000, 1000))
	long := strings.Repeat("l", 250)
	must(t, os.WriteFile(filepath.Join(dir, long), []byte("long"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "caf\xe9-\xff\xfe"), []byte("latin1 name"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "new\nline"), []byte("x"), 0o644))
	old := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	must(t, os.Chtimes(filepath.Join(dir, "src/main.go"), old, old))
	must(t, unix.Lutimes(filepath.Join(dir, "link-abs"), []unix.Timeval{{Sec: 1000}, {Sec: 1000}}))
	must(t, os.Chtimes(filepath.Join(dir, "src/pkg"), old, old))
	must(t, os.Chmod(dir, 0o751))
}

func digest(t *testing.T, dir string) string {
	t.Helper()
	d, err := treedigest.Digest(context.Background(), dir, treedigest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPushRestoreKeepsEveryKindOfEntry(t *testing.T) {
	ctx := context.Background()
	r, _, _ := newRepo(t)
	src := filepath.Join(t.TempDir(), "src")
	must(t, os.Mkdir(src, 0o755))
	fidelityTree(t, src)
	want := digest(t, src)

	sc, err := r.Scope(ctx, "t-test", true)
	must(t, err)
	m, st, err := sc.Push(ctx, src, repo.PushOptions{Source: "sandbox/a", Digest: want})
	must(t, err)
	if st.FilesRead == 0 || st.BytesUploaded == 0 {
		t.Fatalf("push stats: %+v", st)
	}
	dst := filepath.Join(t.TempDir(), "dst")
	rs, err := sc.Restore(ctx, m.ID, dst, repo.RestoreOptions{})
	must(t, err)
	if got := digest(t, dst); got != want {
		a, _ := treedigest.Entries(ctx, src, treedigest.Options{})
		b, _ := treedigest.Entries(ctx, dst, treedigest.Options{})
		t.Fatalf("restored tree differs:\n%s", strings.Join(treedigest.Diff(a, b), "\n"))
	}
	// Sparse files stay sparse: the 64 MiB file holds about 1 MiB.
	var sb unix.Stat_t
	must(t, unix.Stat(filepath.Join(dst, "sparse.img"), &sb))
	if sb.Blocks*512 > 4<<20 {
		t.Fatalf("sparse file inflated to %d bytes on disk", sb.Blocks*512)
	}
	if rs.Files == 0 {
		t.Fatalf("restore stats: %+v", rs)
	}
	// A second restore of the same snapshot from a repository opened
	// afresh (no cache): the same digest.
	dst2 := filepath.Join(t.TempDir(), "dst2")
	_, err = sc.Restore(ctx, m.ID, dst2, repo.RestoreOptions{})
	must(t, err)
	if got := digest(t, dst2); got != want {
		t.Fatal("second restore differs")
	}
}

func TestIncrementalPushReadsOnlyChangedFiles(t *testing.T) {
	ctx := context.Background()
	// Small chunks, so that what a 64 KiB change may upload is bounded
	// well below the file: the chunks around the change (at most Max each,
	// and a few while the cut points realign after it) and the metadata.
	// The gear table comes from the repository's random seed, so the cut
	// points differ from run to run; the bound leaves a wide margin (the
	// largest of 300 runs uploaded about half of it).
	params := chunker.Params{Min: 16 << 10, Avg: 64 << 10, Max: 256 << 10}
	r, _, _ := newRepo(t, repo.InitOptions{Chunker: params})
	src := t.TempDir()
	for i := range 50 {
		must(t, os.WriteFile(filepath.Join(src, "f"+string(rune('a'+i%26))+string(rune('a'+i/26))), randBytes(uint64(i), 100<<10), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(src, "big"), randBytes(99, 8<<20), 0o644))
	sc, err := r.Scope(ctx, "t-inc", true)
	must(t, err)
	m1, st1, err := sc.Push(ctx, src, repo.PushOptions{Source: "s"})
	must(t, err)

	m2, st2, err := sc.Push(ctx, src, repo.PushOptions{Source: "s", Parent: m1.ID})
	must(t, err)
	if st2.FilesRead != 0 || st2.FilesReused != 51 || st2.PacksWritten != 0 {
		t.Fatalf("no-change push read files or wrote packs: %+v", st2)
	}
	if st2.BytesUploaded > 0 {
		t.Fatalf("no-change push uploaded %d bytes besides the manifest", st2.BytesUploaded)
	}
	if m2.Tree != m1.Tree {
		t.Fatal("unchanged tree got a new id")
	}
	// Each manifest says what its push added, beside the logical size.
	if m1.Stats.AddedBytes != st1.BytesUploaded || m1.Stats.AddedBytes < 8<<20 || m2.Stats.AddedBytes != 0 {
		t.Fatalf("added bytes: full push %d (uploaded %d), no-change push %d", m1.Stats.AddedBytes, st1.BytesUploaded, m2.Stats.AddedBytes)
	}

	// Change 64 KiB in the middle of the big file, in place.
	f, err := os.OpenFile(filepath.Join(src, "big"), os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt(randBytes(7, 64<<10), 4<<20)
	must(t, err)
	must(t, f.Close())
	m3, st3, err := sc.Push(ctx, src, repo.PushOptions{Source: "s", Parent: m2.ID})
	must(t, err)
	if st3.FilesRead != 1 {
		t.Fatalf("changed-file push read %d files, want 1", st3.FilesRead)
	}
	if bound := int64(64<<10 + 5*params.Max + 64<<10); st3.BytesUploaded > bound {
		t.Fatalf("64 KiB change uploaded %d bytes, more than %d (full push %d)", st3.BytesUploaded, bound, st1.BytesUploaded)
	}
	dst := filepath.Join(t.TempDir(), "r")
	_, err = sc.Restore(ctx, m3.ID, dst, repo.RestoreOptions{})
	must(t, err)
	if digest(t, dst) != digest(t, src) {
		t.Fatal("restore of the incremental snapshot differs from the source")
	}
}

func TestOpenRefusesWrongKeyAndInitRefusesTwice(t *testing.T) {
	ctx := context.Background()
	_, store, master := newRepo(t)
	other, _ := seal.NewKey()
	if _, err := repo.Open(ctx, store, other, repo.Options{}); !errors.Is(err, repo.ErrWrongKey) {
		t.Fatalf("open with another key: %v, want ErrWrongKey", err)
	}
	if err := repo.Init(ctx, store, master); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("second init: %v, want ErrConflict", err)
	}
	empty, _ := local.New(t.TempDir())
	if _, err := repo.Open(ctx, empty, master, repo.Options{}); !errors.Is(err, repo.ErrNoRepository) {
		t.Fatalf("open empty store: %v", err)
	}
}

func TestScopesShareNothing(t *testing.T) {
	ctx := context.Background()
	r, store, _ := newRepo(t)
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "x"), randBytes(5, 2<<20), 0o644))
	a, _ := r.Scope(ctx, "t-a", true)
	b, _ := r.Scope(ctx, "t-b", true)
	_, sta, err := a.Push(ctx, src, repo.PushOptions{})
	must(t, err)
	_, stb, err := b.Push(ctx, src, repo.PushOptions{})
	must(t, err)
	// (Chunk boundaries differ too: each scope's chunker is keyed.)
	if stb.BytesUploaded < 2<<20 || stb.ChunksKnown != 0 {
		t.Fatalf("second tenant's push deduplicated against the first: %+v vs %+v", sta, stb)
	}
	infos, _ := store.List(ctx, "scopes/t-b/data/")
	if len(infos) == 0 {
		t.Fatal("no packs under the second scope")
	}
	scopes, err := r.Scopes(ctx)
	must(t, err)
	if strings.Join(scopes, ",") != "t-a,t-b" {
		t.Fatalf("scopes = %v", scopes)
	}
}

func TestEraseLeavesNothingRecoverable(t *testing.T) {
	ctx := context.Background()
	r, store, master := newRepo(t)
	marker := bytes.Repeat([]byte("SECRET-VOLUME-DATA-"), 4096)
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "secret"), marker, 0o600))
	sc, _ := r.Scope(ctx, "v-vol1", true)
	_, _, err := sc.Push(ctx, src, repo.PushOptions{})
	must(t, err)
	// Even before erasure, no object holds the plaintext.
	dir := store.(*local.Store).Dir()
	if found := grepDir(t, dir, []byte("SECRET-VOLUME-DATA-")); found != "" {
		t.Fatalf("plaintext found in %s", found)
	}
	must(t, r.Erase(ctx, "v-vol1"))
	left, _ := store.List(ctx, "scopes/v-vol1/")
	if len(left) != 0 {
		t.Fatalf("objects left after erase: %v", left)
	}
	r2, err := repo.Open(ctx, store, master, repo.Options{})
	must(t, err)
	if _, err := r2.Scope(ctx, "v-vol1", false); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("erased scope opens: %v", err)
	}
}

// An erasure interrupted after the key is gone: the remaining objects are
// unreadable, and PruneErased deletes them.
func TestEraseInterruptedAfterKeyDeletionIsFinishedByPrune(t *testing.T) {
	ctx := context.Background()
	r, store, master := newRepo(t)
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "f"), randBytes(9, 1<<20), 0o600))
	sc, _ := r.Scope(ctx, "v-x", true)
	_, _, err := sc.Push(ctx, src, repo.PushOptions{})
	must(t, err)
	must(t, store.Delete(ctx, "scopes/v-x/key")) // the crash point
	r2, _ := repo.Open(ctx, store, master, repo.Options{})
	if _, err := r2.Scope(ctx, "v-x", false); err == nil {
		t.Fatal("scope without key opened")
	}
	n, err := r2.PruneErased(ctx)
	must(t, err)
	left, _ := store.List(ctx, "scopes/v-x/")
	if n == 0 || len(left) != 0 {
		t.Fatalf("prune erased %d, left %v", n, left)
	}
}

func grepDir(t *testing.T, dir string, needle []byte) string {
	t.Helper()
	var hit string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, needle) {
			hit = p
		}
		return nil
	})
	return hit
}

func TestPruneDropsForgottenDataAndKeepsTheRest(t *testing.T) {
	ctx := context.Background()
	r, store, _ := newRepo(t)
	sc, _ := r.Scope(ctx, "t-p", true)
	a, b := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(a, "only-a"), randBytes(11, 6<<20), 0o644))
	must(t, os.WriteFile(filepath.Join(a, "shared"), randBytes(12, 2<<20), 0o644))
	must(t, os.WriteFile(filepath.Join(b, "shared"), randBytes(12, 2<<20), 0o644))
	must(t, os.WriteFile(filepath.Join(b, "only-b"), randBytes(13, 1<<20), 0o644))
	ma, _, err := sc.Push(ctx, a, repo.PushOptions{Source: "a"})
	must(t, err)
	mb, _, err := sc.Push(ctx, b, repo.PushOptions{Source: "b"})
	must(t, err)
	before := storeBytes(t, store, "scopes/t-p/data/")
	must(t, sc.Forget(ctx, ma.ID))
	st, err := sc.Prune(ctx, repo.PruneOptions{})
	must(t, err)
	after := storeBytes(t, store, "scopes/t-p/data/")
	if after >= before-5<<20 {
		t.Fatalf("prune freed too little: %d → %d (%+v)", before, after, st)
	}
	res, err := sc.Check(ctx, repo.CheckOptions{ReadData: true})
	must(t, err)
	if !res.OK() || len(res.Warnings) != 0 {
		t.Fatalf("check after prune: %+v", res)
	}
	dst := filepath.Join(t.TempDir(), "b")
	_, err = sc.Restore(ctx, mb.ID, dst, repo.RestoreOptions{})
	must(t, err)
	if digest(t, dst) != digest(t, b) {
		t.Fatal("kept snapshot no longer restores exactly")
	}
}

func storeBytes(t *testing.T, s blobstore.BlobStore, prefix string) int64 {
	t.Helper()
	infos, err := s.List(context.Background(), prefix)
	must(t, err)
	var n int64
	for _, in := range infos {
		n += in.Size
	}
	return n
}

func TestCheckFindsMissingAndCorruptPacks(t *testing.T) {
	ctx := context.Background()
	r, store, master := newRepo(t)
	sc, _ := r.Scope(ctx, "t-c", true)
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "f"), randBytes(21, 9<<20), 0o644))
	_, _, err := sc.Push(ctx, src, repo.PushOptions{})
	must(t, err)
	res, err := sc.Check(ctx, repo.CheckOptions{ReadData: true})
	must(t, err)
	if !res.OK() || res.PacksRead == 0 {
		t.Fatalf("clean repository: %+v", res)
	}
	packs, _ := store.List(ctx, "scopes/t-c/data/")
	// Flip one bit in the first blob of the biggest pack: a data chunk
	// (trees are packed after all data), which only --read-data reads.
	slices.SortFunc(packs, func(a, b blobstore.Info) int { return int(b.Size - a.Size) })
	p := filepath.Join(store.(*local.Store).Dir(), packs[0].Key)
	b, _ := os.ReadFile(p)
	b[100] ^= 0x10
	must(t, os.WriteFile(p, b, 0o600))
	r2, _ := repo.Open(ctx, store, master, repo.Options{})
	sc2, _ := r2.Scope(ctx, "t-c", false)
	res, err = sc2.Check(ctx, repo.CheckOptions{})
	must(t, err)
	if !res.OK() {
		t.Fatalf("structure check should not read data: %+v", res)
	}
	res, err = sc2.Check(ctx, repo.CheckOptions{ReadData: true})
	must(t, err)
	if res.OK() {
		t.Fatal("check --read-data missed a flipped bit")
	}
	must(t, store.Delete(ctx, packs[len(packs)-1].Key))
	res, err = sc2.Check(ctx, repo.CheckOptions{})
	must(t, err)
	if res.OK() {
		t.Fatal("check missed a deleted pack")
	}
}

func TestPolicyKeepsWhatItShould(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var ms []*repo.Manifest
	for h := range 72 { // one per hour for three days
		ms = append(ms, &repo.Manifest{Source: "s", Time: now.Add(-time.Duration(h) * time.Hour)})
	}
	ms = append(ms, &repo.Manifest{Source: "other", Time: now.Add(-1000 * time.Hour)})
	cases := []struct {
		p    repo.Policy
		keep int
	}{
		{repo.Policy{}, 73},
		{repo.Policy{KeepLast: 5}, 5 + 1},
		{repo.Policy{Hourly: 10}, 10 + 1},
		{repo.Policy{Daily: 2}, 2 + 1},
		{repo.Policy{KeepLast: 1, Daily: 7}, countDays(ms) + 1}, // every day that has one; the newest is also the last
		{repo.Policy{Within: 6*time.Hour + time.Minute}, 7},     // "other" is older than that
		{repo.Policy{Monthly: 1}, 1 + 1},
	}
	for _, c := range cases {
		keep, drop := c.p.Apply(ms, now)
		want := c.keep
		if len(keep) != want || len(keep)+len(drop) != len(ms) {
			t.Errorf("%+v: kept %d, want %d", c.p, len(keep), want)
		}
	}
}

func countDays(ms []*repo.Manifest) int {
	d := map[string]bool{}
	for _, m := range ms {
		if m.Source == "s" {
			d[m.Time.Format("2006-01-02")] = true
		}
	}
	return len(d)
}

func TestVerifyMatchesRestoreAndFindsChanges(t *testing.T) {
	ctx := context.Background()
	r, _, _ := newRepo(t)
	src := filepath.Join(t.TempDir(), "src")
	must(t, os.Mkdir(src, 0o755))
	fidelityTree(t, src)
	sc, _ := r.Scope(ctx, "t-v", true)
	m, _, err := sc.Push(ctx, src, repo.PushOptions{})
	must(t, err)
	dst := filepath.Join(t.TempDir(), "dst")
	_, err = sc.Restore(ctx, m.ID, dst, repo.RestoreOptions{})
	must(t, err)
	v, err := sc.Verify(ctx, m.ID, dst)
	must(t, err)
	if !v.OK() || v.Entries < 20 {
		t.Fatalf("verify of an exact restore: %+v", v)
	}
	// One byte changed (size and mtime kept), one mode changed.
	p := filepath.Join(dst, "src/pkg/deep/er/big.bin")
	var st unix.Stat_t
	must(t, unix.Stat(p, &st))
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte{'!'}, 1<<20)
	must(t, err)
	must(t, f.Close())
	must(t, unix.UtimesNano(p, []unix.Timespec{st.Atim, st.Mtim}))
	must(t, os.Chmod(filepath.Join(dst, "empty"), 0o600))
	v, err = sc.Verify(ctx, m.ID, dst)
	must(t, err)
	if len(v.Diffs) != 2 {
		t.Fatalf("verify found %d differences, want 2: %v", len(v.Diffs), v.Diffs)
	}
}

// TestPushProgressOfSparseFilesEndsAtItsTotal: holes are never read, and
// they count as done, so the last progress report of a push with sparse
// files is at 100%.
func TestPushProgressOfSparseFilesEndsAtItsTotal(t *testing.T) {
	ctx := context.Background()
	r, _, _ := newRepo(t)
	src := t.TempDir()
	f, err := os.Create(filepath.Join(src, "sparse"))
	must(t, err)
	_, err = f.WriteAt(randBytes(1, 64<<10), 32<<20)
	must(t, err)
	must(t, f.Truncate(64<<20))
	must(t, f.Close())
	must(t, os.WriteFile(filepath.Join(src, "dense"), randBytes(2, 1<<20), 0o644))
	sc, err := r.Scope(ctx, "t-sparse", true)
	must(t, err)
	var last repo.Progress
	_, _, err = sc.Push(ctx, src, repo.PushOptions{Source: "s", Progress: func(p repo.Progress) { last = p }})
	must(t, err)
	if last.BytesTotal != 65<<20 || last.BytesDone != last.BytesTotal {
		t.Fatalf("last progress of a push with a sparse file: %d of %d bytes", last.BytesDone, last.BytesTotal)
	}
}

// plainStore is a BlobStore with neither a spool nor range reads into the
// caller's buffer (as S3): packs are assembled in memory and Put, ranges
// fetched with GetRange.
type plainStore struct{ blobstore.BlobStore }

// TestPushAndRestoreAgreeWithAndWithoutTheStoresSpool pushes the same tree
// through the local store (packs spooled to temp files, ranges read into
// reused buffers) and through the same store seen as a plain BlobStore
// (packs in memory): both repositories check clean, hold packs named by
// their hashes and restore the tree exactly, and no temp file is left.
func TestPushAndRestoreAgreeWithAndWithoutTheStoresSpool(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "src")
	must(t, os.Mkdir(src, 0o755))
	fidelityTree(t, src)
	for i := range 6 {
		must(t, os.WriteFile(filepath.Join(src, fmt.Sprintf("big%d.bin", i)), randBytes(uint64(900+i), 3<<20), 0o644))
	}
	want := digest(t, src)
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			ls, err := local.New(filepath.Join(t.TempDir(), "repo"))
			must(t, err)
			var store blobstore.BlobStore = ls
			if plain {
				store = plainStore{ls}
			}
			if _, ok := store.(blobstore.Spooler); ok == plain {
				t.Fatalf("store spools: %v, want %v", ok, !plain)
			}
			master, err := seal.NewKey()
			must(t, err)
			must(t, repo.Init(ctx, store, master))
			r, err := repo.Open(ctx, store, master, repo.Options{PackSize: 4 << 20})
			must(t, err)
			sc, err := r.Scope(ctx, "t-test", true)
			must(t, err)
			m, st, err := sc.Push(ctx, src, repo.PushOptions{Digest: want})
			must(t, err)
			if st.PacksWritten < 3 {
				t.Fatalf("%d packs written, want several", st.PacksWritten)
			}
			packs, err := ls.List(ctx, "scopes/t-test/data/")
			must(t, err)
			var sum int64
			for _, in := range packs {
				data, err := ls.Get(ctx, in.Key)
				must(t, err)
				if seal.Hash(data).String() != path.Base(in.Key) {
					t.Fatalf("pack %s is not named by its hash", in.Key)
				}
				sum += in.Size
			}
			if int64(len(packs)) != st.PacksWritten {
				t.Fatalf("%d packs stored, PushStats says %d", len(packs), st.PacksWritten)
			}
			if tmp := tempFiles(t, ls.Dir()); len(tmp) > 0 {
				t.Fatalf("temp files left: %q", tmp)
			}
			res, err := sc.Check(ctx, repo.CheckOptions{ReadData: true})
			must(t, err)
			if !res.OK() {
				t.Fatalf("check: %q", res.Errors)
			}
			dst := filepath.Join(t.TempDir(), "dst")
			rs, err := sc.Restore(ctx, m.ID, dst, repo.RestoreOptions{})
			must(t, err)
			if got := digest(t, dst); got != want {
				t.Fatal("restored tree differs from the source")
			}
			if rs.BytesDownloaded == 0 || rs.BytesDownloaded > sum {
				t.Fatalf("restore downloaded %d bytes of %d stored in packs", rs.BytesDownloaded, sum)
			}
		})
	}
}
