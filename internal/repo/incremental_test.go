package repo_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/pool/btrfs"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/testutil"
	"github.com/stead-dev/stead/internal/treediff"
	"github.com/stead-dev/stead/internal/treedigest"
)

// btrfsRig is a btrfs pool on a loop image with one dataset (the live
// tree) and the read-only snapshots taken of it.
type btrfsRig struct {
	t    *testing.T
	pool *btrfs.Pool
	live string
	n    int
}

func newBtrfsRig(t *testing.T) *btrfsRig {
	t.Helper()
	testutil.RequireRoot(t)
	tmp := t.TempDir()
	p, err := btrfs.Open(t.Context(), btrfs.Options{Dir: filepath.Join(tmp, "mnt"), Image: filepath.Join(tmp, "pool.img"),
		ImageSize: 1 << 30, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open btrfs pool: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Unmount(context.Background()); err != nil {
			t.Errorf("unmount pool: %v", err)
			_ = unix.Unmount(filepath.Join(tmp, "mnt"), unix.MNT_DETACH)
		}
	})
	must(t, p.Create(t.Context(), "sandboxes/live"))
	return &btrfsRig{t: t, pool: p, live: p.Path("sandboxes/live")}
}

// snapshot takes a read-only snapshot of the live tree and returns its path.
func (b *btrfsRig) snapshot() string {
	b.t.Helper()
	b.n++
	name, err := pool.Name(pool.KindSnapshot, "s"+string(rune('a'+b.n)))
	must(b.t, err)
	must(b.t, b.pool.Clone(b.t.Context(), "sandboxes/live", name, pool.CloneOptions{ReadOnly: true}))
	return b.pool.Path(name)
}

func (b *btrfsRig) diff(base, cur string) treediff.Diff {
	b.t.Helper()
	d, err := b.pool.Diff(b.t.Context(), base, cur)
	must(b.t, err)
	b.t.Cleanup(func() { d.Close() })
	return d
}

func writeAt(t *testing.T, path string, data []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	must(t, err)
	_, err = f.WriteAt(data, off)
	must(t, err)
	must(t, f.Close())
}

// churnBase adds to fidelityTree what the churn changes.
func churnBase(t *testing.T, dir string) {
	t.Helper()
	fidelityTree(t, dir)
	for i := range 40 {
		d := filepath.Join(dir, "deep/unchanged", strings.Repeat("d", i%5+1), string(rune('a'+i%26)))
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "f.txt"), randBytes(uint64(100+i), 3000+i), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(dir, "big.bin"), randBytes(10, 16<<20), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "trunc.bin"), randBytes(11, 3<<20), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "dense-punch.bin"), randBytes(12, 2<<20), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "same.bin"), randBytes(13, 700<<10), 0o644))
	for _, n := range []string{"x.txt", "m.txt", "o.txt", "replace.txt", "file-to-dir", "rename-me"} {
		must(t, os.WriteFile(filepath.Join(dir, n), []byte("content of "+n), 0o644))
	}
	must(t, os.MkdirAll(filepath.Join(dir, "dir-to-file/sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "dir-to-file/sub/f"), []byte("f"), 0o644))
	must(t, os.MkdirAll(filepath.Join(dir, "dir-to-link/in"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "dir-to-link/in/f"), []byte("f"), 0o644))
}

// churn changes the tree in every way a push must see.
func churn(t *testing.T, dir, hostDir string) {
	t.Helper()
	j := func(p string) string { return filepath.Join(dir, p) }
	must(t, os.Rename(j("rename-me"), j("deep/renamed")))               // rename across directories
	must(t, os.Rename(j("src/pkg"), j("pkg-moved")))                    // a directory moves with its content
	must(t, os.Remove(j("new\nline")))                                  // delete
	must(t, os.Link(j("capable"), j("capable-link")))                   // hardlink added
	must(t, os.Remove(j("hardlink-a")))                                 // hardlink removed
	must(t, unix.Setxattr(j("x.txt"), "user.only", []byte("xattr"), 0)) // xattr only
	must(t, os.Chmod(j("m.txt"), 0o600))                                // mode only
	must(t, os.Lchown(j("o.txt"), 1234, 5678))                          // owner only
	must(t, os.Truncate(j("trunc.bin"), 1<<20+17))                      // truncation
	f, err := os.OpenFile(j("sparse.img"), os.O_RDWR, 0)                // hole punched in a sparse file
	must(t, err)
	must(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 8<<20, 256<<10))
	must(t, f.Close())
	f, err = os.OpenFile(j("dense-punch.bin"), os.O_RDWR, 0) // a dense file becomes sparse
	must(t, err)
	must(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 512<<10, 512<<10))
	must(t, f.Close())
	must(t, os.Remove(j("file-to-dir"))) // file replaced by a directory
	must(t, os.MkdirAll(j("file-to-dir/inside"), 0o700))
	must(t, os.WriteFile(j("file-to-dir/inside/x"), []byte("x"), 0o644))
	must(t, os.RemoveAll(j("dir-to-file"))) // directory replaced by a file
	must(t, os.WriteFile(j("dir-to-file"), []byte("now a file"), 0o644))
	must(t, os.RemoveAll(j("dir-to-link"))) // directory replaced by a symlink to the host
	must(t, os.Symlink(hostDir, j("dir-to-link")))
	must(t, os.Remove(j("link-rel"))) // symlink retargeted
	must(t, os.Symlink("elsewhere/../x.txt", j("link-rel")))
	must(t, os.WriteFile(j("replace.txt.tmp"), []byte("replaced"), 0o644)) // replaced by rename
	must(t, os.Rename(j("replace.txt.tmp"), j("replace.txt")))
	// Same size, same mtime, other bytes: only ctime (and the btrfs
	// generations) tell.
	var st unix.Stat_t
	must(t, unix.Stat(j("same.bin"), &st))
	writeAt(t, j("same.bin"), randBytes(14, 4096), 300<<10)
	must(t, unix.UtimesNano(j("same.bin"), []unix.Timespec{st.Atim, st.Mtim}))
	// 1 MiB changed in the middle of a big file, and a little appended.
	writeAt(t, j("big.bin"), randBytes(15, 1<<20), 7<<20)
	writeAt(t, j("big.bin"), randBytes(16, 100<<10), 16<<20)
	must(t, os.MkdirAll(j("brand/new/dir"), 0o755))
	must(t, os.WriteFile(j("brand/new/dir/file"), randBytes(17, 5000), 0o644))
	old := time.Date(2011, 1, 1, 0, 0, 0, 0, time.UTC)
	must(t, os.Chtimes(j("deep"), old, old))
}

// pushBoth pushes cur incrementally (with the Diff from base) and with a
// full walk, and checks both give the same manifest content.
func pushBoth(t *testing.T, sc *repo.Scope, parent *repo.Manifest, d treediff.Diff, cur string) (*repo.Manifest, repo.PushStats) {
	t.Helper()
	ctx := t.Context()
	inc, ist, err := sc.Push(ctx, cur, repo.PushOptions{Parent: parent.ID, Source: "sandbox/x", Diff: d})
	must(t, err)
	if !ist.Incremental {
		t.Fatalf("the push with a Diff walked the whole tree: %+v", ist)
	}
	full, fst, err := sc.Push(ctx, cur, repo.PushOptions{Parent: parent.ID, Source: "sandbox/x"})
	must(t, err)
	if fst.Incremental {
		t.Fatal("a push without a Diff says it was incremental")
	}
	scratch, _, err := sc.Push(ctx, cur, repo.PushOptions{Source: "sandbox/y"})
	must(t, err)
	if inc.Tree != full.Tree || inc.Tree != scratch.Tree {
		a := treeLines(t, sc, inc.Tree, "")
		b := treeLines(t, sc, full.Tree, "")
		t.Fatalf("incremental tree %s, full walk %s, from scratch %s; differences (incremental, then full):\n%s",
			inc.Tree, full.Tree, scratch.Tree, strings.Join(treedigest.Diff(a, b), "\n"))
	}
	if !reflect.DeepEqual(inc.Root, full.Root) {
		t.Fatalf("root node differs:\n%+v\n%+v", inc.Root, full.Root)
	}
	is, fs := inc.Stats, full.Stats
	is.AddedBytes, fs.AddedBytes = 0, 0
	if is != fs {
		t.Fatalf("stats differ: incremental %+v, full %+v", is, fs)
	}
	return inc, ist
}

// treeLines lists a pushed tree's nodes, one line each, for a failure message.
func treeLines(t *testing.T, sc *repo.Scope, id [32]byte, rel string) []string {
	tr, err := sc.Tree(t.Context(), id)
	if err != nil {
		return []string{rel + ": " + err.Error()}
	}
	var out []string
	for _, n := range tr.Nodes {
		p := rel + "/" + string(n.Name)
		sub := n.Subtree
		n.Subtree = nil
		out = append(out, p+" "+strings.ReplaceAll(strings.TrimSpace(fmtNode(n)), "\n", " "))
		if sub != nil {
			out = append(out, treeLines(t, sc, *sub, p)...)
		}
	}
	return out
}

func fmtNode(n repo.Node) string {
	var b bytes.Buffer
	b.WriteString(n.Type)
	for _, v := range []any{n.Mode, n.UID, n.GID, n.Size, n.MtimeNs, n.CtimeNs, n.Inode, n.Links, string(n.Target), n.Xattrs, n.Sparse, n.Extents, len(n.Content)} {
		b.WriteString(" ")
		b.WriteString(strings.TrimSpace(strings.ReplaceAll(fmtAny(v), "\n", " ")))
	}
	return b.String()
}

func fmtAny(v any) string {
	return strings.Trim(strings.ReplaceAll(reflect.ValueOf(v).String(), "<", ""), ">")
}

func restoreEquals(t *testing.T, sc *repo.Scope, m *repo.Manifest, src string) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "dst")
	_, err := sc.Restore(t.Context(), m.ID, dst, repo.RestoreOptions{})
	must(t, err)
	if got, want := digest(t, dst), digest(t, src); got != want {
		a, _ := treedigest.Entries(t.Context(), src, treedigest.Options{})
		b, _ := treedigest.Entries(t.Context(), dst, treedigest.Options{})
		t.Fatalf("restored tree differs from the snapshot:\n%s", strings.Join(treedigest.Diff(a, b), "\n"))
	}
}

func TestIncrementalPushEqualsFullWalk(t *testing.T) {
	rig := newBtrfsRig(t)
	ctx := t.Context()
	r, _, _ := newRepo(t)
	sc, err := r.Scope(ctx, "t-test", true)
	must(t, err)
	host := t.TempDir()
	must(t, os.WriteFile(filepath.Join(host, "secret"), []byte("HOST SECRET"), 0o600))

	churnBase(t, rig.live)
	snapA := rig.snapshot()
	mA, _, err := sc.Push(ctx, snapA, repo.PushOptions{Source: "sandbox/x"})
	must(t, err)

	churn(t, rig.live, host)
	snapB := rig.snapshot()
	mB, st := pushBoth(t, sc, mA, rig.diff(snapA, snapB), snapB)
	restoreEquals(t, sc, mB, snapB)
	// Of the 16 MiB file only about the changed MiB (plus a chunk on
	// either side and the chunker's read-ahead) was read: reading it
	// whole alone would read more than this.
	if st.BytesRead >= 16<<20 {
		t.Errorf("the incremental push read %d bytes: it should read the changed extents, not whole files", st.BytesRead)
	}
	t.Logf("incremental push after churn: %+v", st)

	// A second round on top of the incremental manifest: more churn.
	writeAt(t, filepath.Join(rig.live, "big.bin"), randBytes(20, 4096), 0)
	must(t, os.Rename(filepath.Join(rig.live, "pkg-moved"), filepath.Join(rig.live, "deep/pkg-again")))
	must(t, os.Remove(filepath.Join(rig.live, "capable-link")))
	must(t, os.RemoveAll(filepath.Join(rig.live, "file-to-dir")))
	must(t, os.Symlink("/etc", filepath.Join(rig.live, "file-to-dir")))
	snapC := rig.snapshot()
	mC, st := pushBoth(t, sc, mB, rig.diff(snapB, snapC), snapC)
	restoreEquals(t, sc, mC, snapC)
	t.Logf("incremental push after more churn: %+v", st)

	// Nothing changed: nothing read, the same tree.
	snapD := rig.snapshot()
	mD, st, err := sc.Push(ctx, snapD, repo.PushOptions{Parent: mC.ID, Source: "sandbox/x", Diff: rig.diff(snapC, snapD)})
	must(t, err)
	if !st.Incremental || st.FilesRead != 0 || mD.Tree != mC.Tree {
		t.Fatalf("no-change push: %+v, tree %s, parent's %s", st, mD.Tree, mC.Tree)
	}
	ds, cs := mD.Stats, mC.Stats
	ds.AddedBytes, cs.AddedBytes = 0, 0
	if ds != cs {
		t.Fatalf("no-change push stats %+v, parent's %+v", ds, cs)
	}
	// Nothing of the host came in through the symlinks.
	restoreEquals(t, sc, mD, snapD)
}

func TestDiffRefusesSnapshotsOfDifferentLineage(t *testing.T) {
	rig := newBtrfsRig(t)
	ctx := t.Context()
	must(t, os.WriteFile(filepath.Join(rig.live, "f"), []byte("x"), 0o644))
	a := rig.snapshot()
	b := rig.snapshot()
	// The live tree is replaced by a clone of another (a rollback).
	must(t, rig.pool.Create(ctx, "sandboxes/other"))
	must(t, rig.pool.Exchange(ctx, "sandboxes/live", "sandboxes/other"))
	c := rig.snapshot()
	for _, tc := range []struct{ name, base, cur string }{
		{"other lineage", a, c},
		{"base newer than current", b, a},
		{"the same snapshot", a, a},
		{"a writable dataset", a, rig.live},
	} {
		if d, err := rig.pool.Diff(ctx, tc.base, tc.cur); err == nil {
			d.Close()
			t.Errorf("%s: Diff succeeded", tc.name)
		}
	}
	// Two snapshots with nothing between them: nothing changed (though
	// the tree is one leaf, which taking a snapshot rewrites), and a file
	// only read (its access time rewritten) did not change either.
	if paths, err := rig.diff(a, b).ChangedPaths(ctx); err != nil || len(paths) != 0 {
		t.Fatalf("two snapshots with nothing between them: changed %q, %v", paths, err)
	}
	must(t, os.WriteFile(filepath.Join(rig.live, "g"), []byte("y"), 0o644))
	e := rig.snapshot()
	var before, after unix.Stat_t
	must(t, unix.Stat(filepath.Join(rig.live, "g"), &before))
	time.Sleep(10 * time.Millisecond)
	_, err := os.ReadFile(filepath.Join(rig.live, "g")) // relatime: the first read after a write sets the atime
	must(t, err)
	must(t, unix.Stat(filepath.Join(rig.live, "g"), &after))
	if after.Atim == before.Atim {
		t.Fatal("reading the file did not change its access time: the case is not tested")
	}
	f := rig.snapshot()
	if paths, err := rig.diff(e, f).ChangedPaths(ctx); err != nil || len(paths) != 0 {
		t.Fatalf("a file whose access time alone changed: changed %q, %v", paths, err)
	}
}

// The agent swaps directories for symlinks to the host in its live root,
// as fast as it can, while incremental pushes run, and plants such links
// in the snapshots themselves: the pushes read only the read-only
// snapshots, and store links as links, never what they point at.
func TestIncrementalPushReadsNoHostFileThroughSwappedSymlinks(t *testing.T) {
	rig := newBtrfsRig(t)
	ctx := t.Context()
	r, _, _ := newRepo(t)
	sc, err := r.Scope(ctx, "t-test", true)
	must(t, err)
	host := t.TempDir()
	secret := []byte("HOST SECRET 0123456789")
	must(t, os.WriteFile(filepath.Join(host, "f"), secret, 0o600))
	must(t, os.MkdirAll(filepath.Join(host, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(host, "sub", "f"), secret, 0o600))

	live := rig.live
	for _, d := range []string{"a", "b", "c"} {
		must(t, os.MkdirAll(filepath.Join(live, d, "sub"), 0o755))
		must(t, os.WriteFile(filepath.Join(live, d, "f"), []byte("agent file "+d), 0o644))
		must(t, os.WriteFile(filepath.Join(live, d, "sub", "f"), []byte("agent file "+d), 0o644))
	}
	base := rig.snapshot()
	parent, _, err := sc.Push(ctx, base, repo.PushOptions{Source: "sandbox/x"})
	must(t, err)

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the agent
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			d := filepath.Join(live, []string{"a", "b", "c"}[i%3])
			tmp := d + ".swap"
			_ = os.RemoveAll(tmp)
			if os.Rename(d, tmp) == nil {
				_ = os.Symlink(host, d)
				_ = os.Remove(d)
				_ = os.Rename(tmp, d)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range 12 {
		// Links to the host planted in what the snapshot holds too.
		name := filepath.Join(live, "planted"+string(rune('0'+i%10)))
		_ = os.RemoveAll(name)
		if i%2 == 0 {
			must(t, os.Symlink(host, name))
		} else {
			must(t, os.MkdirAll(filepath.Join(name, "sub"), 0o755))
			must(t, os.WriteFile(filepath.Join(name, "sub", "f"), []byte("agent"), 0o644))
		}
		cur := rig.snapshot()
		d := rig.diff(base, cur)
		m, st, err := sc.Push(ctx, cur, repo.PushOptions{Parent: parent.ID, Source: "sandbox/x", Diff: d})
		must(t, err)
		if !st.Incremental {
			t.Fatalf("push %d walked the whole tree", i)
		}
		dst := filepath.Join(t.TempDir(), "dst")
		_, err = sc.Restore(ctx, m.ID, dst, repo.RestoreOptions{})
		must(t, err)
		if got, want := digest(t, dst), digest(t, cur); got != want {
			t.Fatalf("push %d: restored tree differs from its snapshot", i)
		}
		must(t, filepath.WalkDir(dst, func(p string, e os.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(p)
			if err == nil && bytes.Contains(b, secret) {
				t.Fatalf("push %d stored a host file's content at %s", i, p)
			}
			return err
		}))
		base, parent = cur, m
	}
}
