// Package pooltest is the contract suite that every pool.Pool
// implementation passes. Run it from the implementation's tests with a
// function that opens a fresh, empty pool (and registers its teardown with
// t.Cleanup). The suite needs root: it chowns, sets file capabilities and
// checks that read-only datasets refuse root's writes.
package pooltest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/testutil"
)

// Run runs the contract suite. open must return a fresh, empty pool for the
// calling (sub)test.
func Run(t *testing.T, open func(t *testing.T) pool.Pool) {
	testutil.RequireRoot(t)
	s := suite{open: open}
	tests := []contractTest{
		{"CreateMakesEmptyRootOwnedDir0755", s.createMakesEmptyRootOwnedDir},
		{"CreateExistingNameConflicts", s.createExistingNameConflicts},
		{"ExistsReportsPresenceByFullName", s.existsReportsPresence},
		{"CloneIsFaithful", s.cloneIsFaithful},
		{"CloneOfMissingSourceIsNotFoundAndLeavesNoDst", s.cloneMissingSource},
		{"CloneOntoExistingNameConflictsAndKeepsIt", s.cloneOntoExisting},
		{"CloneIsIndependentOfLaterWritesToSource", s.cloneIndependentOfSource},
		{"SourceIsIndependentOfWritesToClone", s.sourceIndependentOfClone},
		{"ReadOnlyCloneRejectsWritesByRoot", s.readOnlyClone},
		{"CloneOfReadOnlySourceIsWritable", s.cloneOfReadOnlySource},
		{"SetReadOnlyRejectsWritesByRootAndUndoes", s.setReadOnly},
		{"DeleteRemovesNestedContent", s.deleteNested},
		{"DeleteRemovesReadOnlyDatasets", s.deleteReadOnly},
		{"MissingDatasetsAreNotFound", s.missingNotFound},
		{"InvalidNamesAreRejectedAndTouchNothing", s.invalidNames},
		{"ListReturnsSortedIDsOfOneKind", s.listSorted},
		{"QuotaIsEnforcedOrUnsupported", s.quota},
		{"UsageCountsWrittenBytes", s.usage},
		{"CapacityReportsSizeUseAndReserve", s.capacity},
		{"DatasetsTogetherStopAtTheLimitAndThePoolStillWorks", s.capacityLimit},
		{"ConcurrentClonesOfOneSourceAllSucceed", s.concurrentClones},
		{"ConcurrentClonesToOneNameHaveOneWinner", s.concurrentSameDst},
		{"ConcurrentOpsOnDistinctNamesSucceed", s.concurrentDistinct},
		{"RenameMovesAtomicallyAndNeverReplaces", s.rename},
		{"RenameUnsyncedMovesAtomicallyAndNeverReplaces", s.renameUnsynced},
		{"ExchangeSwapsTwoDatasets", s.exchange},
	}
	// An unshared clone keeps every promise of a clone.
	u := suite{open: open, opts: pool.CloneOptions{Unshared: true}}
	tests = append(tests, []contractTest{
		{"UnsharedCloneIsFaithful", u.cloneIsFaithful},
		{"UnsharedCloneIsIndependentOfLaterWritesToSource", u.cloneIndependentOfSource},
		{"SourceIsIndependentOfWritesToUnsharedClone", u.sourceIndependentOfClone},
		{"UnsharedReadOnlyCloneRejectsWritesByRoot", u.readOnlyClone},
		{"UnsharedCloneOfReadOnlySourceIsWritable", u.cloneOfReadOnlySource},
		{"UnsharedCloneOfMissingSourceIsNotFoundAndLeavesNoDst", u.cloneMissingSource},
		{"UnsharedCloneOntoExistingNameConflictsAndKeepsIt", u.cloneOntoExisting},
	}...)
	for _, tc := range tests {
		t.Run(tc.name, tc.fn)
	}
}

// contractTest is one test of the contract.
type contractTest struct {
	name string
	fn   func(t *testing.T)
}

type suite struct {
	open func(t *testing.T) pool.Pool
	opts pool.CloneOptions // of the clones the tests make
}

// with is s.opts with ReadOnly set to ro.
func (s suite) with(ro bool) pool.CloneOptions {
	o := s.opts
	o.ReadOnly = ro
	return o
}

const (
	tplSrc = "templates/src"
	sbxDst = "sandboxes/dst"
)

func ctxT(t *testing.T) context.Context { return t.Context() }

// BigTemplate creates the dataset name in p holding one 64 MiB file,
// blob, of data no compression shrinks much, and returns the data (for
// the pools' own tests of what a clone shares).
func BigTemplate(t *testing.T, p pool.Pool, name string) []byte {
	t.Helper()
	if err := p.Create(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 64<<20)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	if err := os.WriteFile(filepath.Join(p.Path(name), "blob"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return data
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	must(t, os.WriteFile(path, data, mode), "write "+path)
	must(t, os.Chmod(path, mode), "chmod "+path)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err, "read "+path)
	return string(b)
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// Fixture layout (relative to the dataset root).
const (
	sparseSize    = 64 << 20
	sparseDataOff = 32 << 20
	sparseDataLen = 1 << 20
)

// capV2 is a vfs_cap_data (revision 2, effective) granting
// CAP_NET_BIND_SERVICE.
var capV2 = []byte{
	0x01, 0x00, 0x00, 0x02, // magic_etc: VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE
	0x00, 0x04, 0x00, 0x00, // permitted[0]: 1<<10
	0x00, 0x00, 0x00, 0x00, // inheritable[0]
	0x00, 0x00, 0x00, 0x00, // permitted[1]
	0x00, 0x00, 0x00, 0x00, // inheritable[1]
}

var fixtureTime = time.Unix(1_600_000_000, 123_456_789)

// populate fills root with every kind of entry the clone must reproduce.
func populate(t *testing.T, root string) {
	t.Helper()
	j := func(p string) string { return filepath.Join(root, p) }
	must(t, os.MkdirAll(j("sub/deep/deeper"), 0o755), "mkdir")
	must(t, os.Mkdir(j("empty"), 0o700), "mkdir empty")
	must(t, os.Mkdir(j("sticky"), 0o755), "mkdir sticky")
	must(t, unix.Chmod(j("sticky"), 0o1777), "chmod sticky")
	must(t, os.Chown(j("sub"), 1000, 1001), "chown sub")
	must(t, unix.Chmod(j("sub"), 0o2750), "chmod sub setgid")

	writeFile(t, j("file.txt"), []byte("hello\n"), 0o644)
	must(t, os.Chown(j("file.txt"), 1000, 1001), "chown file")
	writeFile(t, j("sub/deep/deeper/leaf"), []byte("leaf"), 0o600)
	writeFile(t, j("random.bin"), randBytes(1<<20, 1), 0o640)
	writeFile(t, j("exec.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)

	// setuid and setgid survive only if set after chown.
	writeFile(t, j("setuid"), []byte("suid"), 0o755)
	must(t, os.Chown(j("setuid"), 0, 0), "chown setuid")
	must(t, unix.Chmod(j("setuid"), 0o4755), "chmod setuid")
	writeFile(t, j("setgid"), []byte("sgid"), 0o755)
	must(t, os.Chown(j("setgid"), 0, 42), "chown setgid")
	must(t, unix.Chmod(j("setgid"), 0o2755), "chmod setgid")

	// A file capability is cleared by chown, so set it last.
	writeFile(t, j("cap.bin"), []byte("cap"), 0o755)
	must(t, unix.Setxattr(j("cap.bin"), "security.capability", capV2, 0), "set security.capability")
	writeFile(t, j("xattr.txt"), []byte("x"), 0o644)
	must(t, unix.Setxattr(j("xattr.txt"), "user.stead", []byte("value\x00with nul"), 0), "set user xattr")
	must(t, unix.Setxattr(j("xattr.txt"), "user.empty", []byte{}, 0), "set empty user xattr")
	must(t, unix.Setxattr(j("sub"), "user.dir", []byte("on a dir"), 0), "set dir xattr")

	f, err := os.OpenFile(j("sparse.img"), os.O_CREATE|os.O_WRONLY, 0o644)
	must(t, err, "create sparse")
	_, err = f.WriteAt(randBytes(sparseDataLen, 2), sparseDataOff)
	must(t, err, "write sparse")
	must(t, f.Truncate(sparseSize), "truncate sparse")
	must(t, f.Sync(), "sync sparse")
	must(t, f.Close(), "close sparse")

	must(t, os.Symlink("file.txt", j("link")), "symlink")
	must(t, os.Lchown(j("link"), 1000, 1001), "lchown link")
	must(t, os.Symlink("/nonexistent/target", j("sub/dangling")), "dangling symlink")

	writeFile(t, j("hard1"), []byte("shared inode"), 0o644)
	must(t, os.Link(j("hard1"), j("sub/hard2")), "hardlink")

	must(t, unix.Mkfifo(j("fifo"), 0o640), "mkfifo")
	must(t, unix.Chmod(j("fifo"), 0o640), "chmod fifo")

	// Timestamps last, children before parents.
	var paths []string
	must(t, filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		paths = append(paths, p)
		return err
	}), "walk fixture")
	for i := len(paths) - 1; i >= 0; i-- {
		ts := fixtureTime.Add(time.Duration(i) * time.Second)
		tv := []unix.Timespec{unix.NsecToTimespec(ts.UnixNano()), unix.NsecToTimespec(ts.Add(time.Hour).UnixNano())}
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, paths[i], tv, unix.AT_SYMLINK_NOFOLLOW), "utimes "+paths[i])
	}
}

// entry is what the clone must reproduce of one path.
type entry struct {
	Mode   uint32 // st_mode: type and permission bits incl. setuid/setgid/sticky
	UID    uint32
	GID    uint32
	Size   int64 // regular files and symlinks
	Mtime  int64 // ns
	Target string
	Sum    string
	Xattrs string
	Links  string // the other paths sharing this inode
}

func xattrs(t *testing.T, path string) string {
	t.Helper()
	sz, err := unix.Llistxattr(path, nil)
	if errors.Is(err, unix.ENOTSUP) {
		return ""
	}
	must(t, err, "listxattr "+path)
	buf := make([]byte, sz)
	sz, err = unix.Llistxattr(path, buf)
	must(t, err, "listxattr "+path)
	var out []string
	for _, name := range strings.Split(strings.TrimRight(string(buf[:sz]), "\x00"), "\x00") {
		if name == "" || name == "security.selinux" {
			continue
		}
		vsz, err := unix.Lgetxattr(path, name, nil)
		must(t, err, "getxattr "+name)
		v := make([]byte, vsz)
		vsz, err = unix.Lgetxattr(path, name, v)
		must(t, err, "getxattr "+name)
		out = append(out, name+"="+hex.EncodeToString(v[:vsz]))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	must(t, err, "open "+path)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	must(t, err, "read "+path)
	return hex.EncodeToString(h.Sum(nil))
}

// describe returns every path under root (root itself as ".").
func describe(t *testing.T, root string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	inodes := map[uint64][]string{}
	ino := map[string]uint64{}
	err := filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		e := entry{
			Mode: st.Mode, UID: st.Uid, GID: st.Gid,
			Mtime:  st.Mtim.Nano(),
			Xattrs: xattrs(t, path),
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			e.Size = st.Size
			e.Sum = fileSum(t, path)
			if st.Nlink > 1 {
				inodes[st.Ino] = append(inodes[st.Ino], rel)
				ino[rel] = st.Ino
			}
		case unix.S_IFLNK:
			e.Size = st.Size
			e.Target, err = os.Readlink(path)
			if err != nil {
				return err
			}
		}
		out[rel] = e
		return nil
	})
	must(t, err, "walk "+root)
	for rel, i := range ino {
		e := out[rel]
		e.Links = strings.Join(inodes[i], "|")
		out[rel] = e
	}
	return out
}

func diffTrees(want, got map[string]entry) []string {
	var d []string
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			d = append(d, "missing "+p)
		case g != w:
			d = append(d, fmt.Sprintf("%s:\n\twant %+v\n\tgot  %+v", p, w, g))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			d = append(d, "extra "+p)
		}
	}
	sort.Strings(d)
	return d
}

func assertSameTree(t *testing.T, want map[string]entry, root string) {
	t.Helper()
	if d := diffTrees(want, describe(t, root)); len(d) > 0 {
		t.Fatalf("clone differs from source:\n%s", strings.Join(d, "\n"))
	}
}

// newSource creates tplSrc filled with the fixture.
func newSource(t *testing.T, p pool.Pool) string {
	t.Helper()
	must(t, p.Create(ctxT(t), tplSrc), "create source")
	root := p.Path(tplSrc)
	populate(t, root)
	return root
}

func (s suite) createMakesEmptyRootOwnedDir(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	must(t, p.Create(ctx, sbxDst), "create")
	path := p.Path(sbxDst)
	var st unix.Stat_t
	must(t, unix.Lstat(path, &st), "stat")
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o7777 != 0o755 || st.Uid != 0 || st.Gid != 0 {
		t.Fatalf("created dataset: mode %o uid %d gid %d, want dir 0755 0:0", st.Mode, st.Uid, st.Gid)
	}
	ents, err := os.ReadDir(path)
	must(t, err, "readdir")
	if len(ents) != 0 {
		t.Fatalf("created dataset has %d entries, want none", len(ents))
	}
	writeFile(t, filepath.Join(path, "w"), []byte("writable"), 0o644)
}

func (s suite) createExistingNameConflicts(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	must(t, p.Create(ctx, sbxDst), "create")
	writeFile(t, filepath.Join(p.Path(sbxDst), "keep"), []byte("keep"), 0o644)
	wantErr(t, p.Create(ctx, sbxDst), errs.ErrConflict, "second create")
	if got := readFile(t, filepath.Join(p.Path(sbxDst), "keep")); got != "keep" {
		t.Fatalf("conflicting create changed the dataset: %q", got)
	}
}

func (s suite) existsReportsPresence(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	ok, err := p.Exists(ctx, tplSrc)
	if err != nil || ok {
		t.Fatalf("Exists before create = %v, %v; want false, nil", ok, err)
	}
	must(t, p.Create(ctx, tplSrc), "create")
	if ok, err := p.Exists(ctx, tplSrc); err != nil || !ok {
		t.Fatalf("Exists after create = %v, %v; want true, nil", ok, err)
	}
	if ok, err := p.Exists(ctx, "sandboxes/src"); err != nil || ok {
		t.Fatalf("Exists of the same id under another kind = %v, %v; want false, nil", ok, err)
	}
}

func (s suite) cloneIsFaithful(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	src := newSource(t, p)
	want := describe(t, src)
	must(t, p.Clone(ctx, tplSrc, sbxDst, s.with(false)), "clone")
	dst := p.Path(sbxDst)
	j := func(p string) string { return filepath.Join(dst, p) }

	t.Run("TreeMatchesSource", func(t *testing.T) { assertSameTree(t, want, dst) })
	t.Run("SparseFileStaysSparse", func(t *testing.T) {
		var ss, ds unix.Stat_t
		must(t, unix.Stat(filepath.Join(src, "sparse.img"), &ss), "stat src")
		must(t, unix.Stat(j("sparse.img"), &ds), "stat dst")
		if ds.Size != sparseSize {
			t.Fatalf("size %d, want %d", ds.Size, sparseSize)
		}
		if ds.Blocks*512 > ss.Blocks*512+1<<20 || ds.Blocks*512 >= sparseSize/4 {
			t.Fatalf("clone allocates %d bytes (source %d) of a %d-byte sparse file", ds.Blocks*512, ss.Blocks*512, int64(sparseSize))
		}
		fd, err := unix.Open(j("sparse.img"), unix.O_RDONLY, 0)
		must(t, err, "open")
		defer unix.Close(fd)
		off, err := unix.Seek(fd, 0, unix.SEEK_DATA)
		must(t, err, "seek data")
		if off < sparseDataOff-(1<<20) {
			t.Fatalf("first data at %d, want a hole before %d", off, sparseDataOff)
		}
	})
	t.Run("HardlinksShareOneInode", func(t *testing.T) {
		var a, b unix.Stat_t
		must(t, unix.Lstat(j("hard1"), &a), "stat")
		must(t, unix.Lstat(j("sub/hard2"), &b), "stat")
		if a.Ino != b.Ino || a.Dev != b.Dev || a.Nlink != 2 {
			t.Fatalf("hard1 ino %d nlink %d, sub/hard2 ino %d: want one inode with 2 links", a.Ino, a.Nlink, b.Ino)
		}
	})
	t.Run("SymlinksAndFifosKeepTheirType", func(t *testing.T) {
		if tgt, err := os.Readlink(j("link")); err != nil || tgt != "file.txt" {
			t.Fatalf("link -> %q, %v", tgt, err)
		}
		if tgt, err := os.Readlink(j("sub/dangling")); err != nil || tgt != "/nonexistent/target" {
			t.Fatalf("dangling -> %q, %v", tgt, err)
		}
		fi, err := os.Lstat(j("fifo"))
		must(t, err, "stat fifo")
		if fi.Mode()&fs.ModeNamedPipe == 0 {
			t.Fatalf("fifo has mode %v", fi.Mode())
		}
	})
	t.Run("XattrsAndFileCapabilitiesSurvive", func(t *testing.T) {
		buf := make([]byte, 64)
		n, err := unix.Getxattr(j("cap.bin"), "security.capability", buf)
		must(t, err, "get security.capability")
		if !bytes.Equal(buf[:n], capV2) {
			t.Fatalf("security.capability = %x, want %x", buf[:n], capV2)
		}
		n, err = unix.Getxattr(j("xattr.txt"), "user.stead", buf)
		must(t, err, "get user.stead")
		if string(buf[:n]) != "value\x00with nul" {
			t.Fatalf("user.stead = %q", buf[:n])
		}
	})
	t.Run("ModesOwnersAndMtimesSurvive", func(t *testing.T) {
		for rel, wantMode := range map[string]uint32{"setuid": 0o4755, "setgid": 0o2755, "sub": 0o2750, "sticky": 0o1777, "empty": 0o700} {
			var st unix.Stat_t
			must(t, unix.Lstat(j(rel), &st), "stat "+rel)
			if st.Mode&0o7777 != wantMode {
				t.Errorf("%s mode %o, want %o", rel, st.Mode&0o7777, wantMode)
			}
		}
		var st unix.Stat_t
		must(t, unix.Lstat(j("file.txt"), &st), "stat")
		if st.Uid != 1000 || st.Gid != 1001 {
			t.Errorf("file.txt owned by %d:%d, want 1000:1001", st.Uid, st.Gid)
		}
		if got := time.Unix(0, st.Mtim.Nano()); got.Sub(fixtureTime) < 0 || got.Sub(fixtureTime) > 2*time.Hour {
			t.Errorf("file.txt mtime %v, want near %v", got, fixtureTime)
		}
	})
}

func (s suite) cloneMissingSource(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	wantErr(t, p.Clone(ctx, tplSrc, sbxDst, s.with(false)), errs.ErrNotFound, "clone of a missing source")
	wantErr(t, p.Clone(ctx, tplSrc, sbxDst, s.with(true)), errs.ErrNotFound, "read-only clone of a missing source")
	if ok, err := p.Exists(ctx, sbxDst); err != nil || ok {
		t.Fatalf("failed clone left dst: Exists = %v, %v", ok, err)
	}
	if _, err := os.Lstat(p.Path(sbxDst)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("failed clone left %s: %v", p.Path(sbxDst), err)
	}
	ids, err := p.List(ctx, pool.KindSandbox)
	must(t, err, "list")
	if len(ids) != 0 {
		t.Fatalf("failed clone left datasets %v", ids)
	}
}

func (s suite) cloneOntoExisting(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	newSource(t, p)
	must(t, p.Create(ctx, sbxDst), "create dst")
	writeFile(t, filepath.Join(p.Path(sbxDst), "mine"), []byte("mine"), 0o644)
	wantErr(t, p.Clone(ctx, tplSrc, sbxDst, s.with(false)), errs.ErrConflict, "clone onto an existing dataset")
	wantErr(t, p.Clone(ctx, tplSrc, tplSrc, s.with(false)), errs.ErrConflict, "clone onto itself")
	ents, err := os.ReadDir(p.Path(sbxDst))
	must(t, err, "readdir")
	if len(ents) != 1 || ents[0].Name() != "mine" || readFile(t, filepath.Join(p.Path(sbxDst), "mine")) != "mine" {
		t.Fatalf("conflicting clone changed dst: %v", ents)
	}
}

func (s suite) cloneIndependentOfSource(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	src := newSource(t, p)
	must(t, p.Clone(ctx, tplSrc, sbxDst, s.with(false)), "clone")
	want := describe(t, p.Path(sbxDst))

	writeFile(t, filepath.Join(src, "file.txt"), []byte("changed in source\n"), 0o644)
	f, err := os.OpenFile(filepath.Join(src, "hard1"), os.O_WRONLY|os.O_APPEND, 0)
	must(t, err, "open hard1")
	_, err = f.WriteString(" appended")
	must(t, err, "append")
	must(t, f.Close(), "close")
	f, err = os.OpenFile(filepath.Join(src, "sparse.img"), os.O_WRONLY, 0)
	must(t, err, "open sparse")
	_, err = f.WriteAt([]byte("filled a hole"), 1<<20)
	must(t, err, "write sparse")
	must(t, f.Close(), "close")
	must(t, os.Remove(filepath.Join(src, "random.bin")), "remove")
	writeFile(t, filepath.Join(src, "new-in-source"), []byte("new"), 0o644)
	must(t, unix.Chmod(filepath.Join(src, "exec.sh"), 0o700), "chmod")
	must(t, unix.Setxattr(filepath.Join(src, "xattr.txt"), "user.stead", []byte("changed"), 0), "setxattr")

	assertSameTree(t, want, p.Path(sbxDst))
}

func (s suite) sourceIndependentOfClone(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	src := newSource(t, p)
	want := describe(t, src)
	must(t, p.Clone(ctx, tplSrc, sbxDst, s.with(false)), "clone")
	dst := p.Path(sbxDst)

	writeFile(t, filepath.Join(dst, "file.txt"), []byte("changed in clone\n"), 0o644)
	f, err := os.OpenFile(filepath.Join(dst, "sub/hard2"), os.O_WRONLY|os.O_APPEND, 0)
	must(t, err, "open hard2")
	_, err = f.WriteString(" appended")
	must(t, err, "append")
	must(t, f.Close(), "close")
	if got := readFile(t, filepath.Join(dst, "hard1")); got != "shared inode appended" {
		t.Fatalf("hard link pair split in the clone: hard1 = %q", got)
	}
	f, err = os.OpenFile(filepath.Join(dst, "random.bin"), os.O_WRONLY, 0)
	must(t, err, "open random")
	_, err = f.WriteAt([]byte("overwrite a shared extent"), 4096)
	must(t, err, "write random")
	must(t, f.Close(), "close")
	must(t, os.RemoveAll(filepath.Join(dst, "sub/deep")), "remove")
	must(t, os.Chown(filepath.Join(dst, "setuid"), 1000, 1000), "chown")
	must(t, unix.Removexattr(filepath.Join(dst, "cap.bin"), "security.capability"), "removexattr")
	must(t, os.Mkdir(filepath.Join(dst, "new-in-clone"), 0o755), "mkdir")

	assertSameTree(t, want, src)
}

// writeAttempts are the writes a read-only dataset must refuse, root's too.
func writeAttempts(root string) map[string]func() error {
	j := func(p string) string { return filepath.Join(root, p) }
	return map[string]func() error{
		"create file in root": func() error {
			f, err := os.OpenFile(j("new"), os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				f.Close()
			}
			return err
		},
		"create file in subdir": func() error {
			f, err := os.OpenFile(j("sub/new"), os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				f.Close()
			}
			return err
		},
		"open file for writing": func() error {
			f, err := os.OpenFile(j("file.txt"), os.O_WRONLY, 0)
			if err == nil {
				f.Close()
			}
			return err
		},
		"open deep file for append": func() error {
			f, err := os.OpenFile(j("sub/deep/deeper/leaf"), os.O_WRONLY|os.O_APPEND, 0)
			if err == nil {
				f.Close()
			}
			return err
		},
		"truncate file":     func() error { return os.Truncate(j("random.bin"), 0) },
		"remove file":       func() error { return os.Remove(j("file.txt")) },
		"remove deep file":  func() error { return os.Remove(j("sub/deep/deeper/leaf")) },
		"remove empty dir":  func() error { return os.Remove(j("empty")) },
		"mkdir":             func() error { return os.Mkdir(j("newdir"), 0o755) },
		"rename":            func() error { return os.Rename(j("sub/hard2"), j("sub/renamed")) },
		"chmod file":        func() error { return os.Chmod(j("exec.sh"), 0o777) },
		"chmod root":        func() error { return os.Chmod(root, 0o777) },
		"chown file":        func() error { return os.Chown(j("file.txt"), 0, 0) },
		"setxattr":          func() error { return unix.Setxattr(j("xattr.txt"), "user.new", []byte("v"), 0) },
		"remove capability": func() error { return unix.Removexattr(j("cap.bin"), "security.capability") },
		"symlink":           func() error { return os.Symlink("x", j("newlink")) },
		"hardlink":          func() error { return os.Link(j("hard1"), j("hard3")) },
		"utimes":            func() error { return os.Chtimes(j("exec.sh"), time.Now(), time.Now()) },
		"mkfifo":            func() error { return unix.Mkfifo(j("newfifo"), 0o644) },
	}
}

func assertWritesFail(t *testing.T, root string) {
	t.Helper()
	before := describe(t, root)
	for what, fn := range writeAttempts(root) {
		err := fn()
		if !errors.Is(err, unix.EROFS) && !errors.Is(err, unix.EPERM) {
			t.Errorf("%s in a read-only dataset: got %v, want EROFS or EPERM", what, err)
		}
	}
	if d := diffTrees(before, describe(t, root)); len(d) > 0 {
		t.Fatalf("read-only dataset changed:\n%s", strings.Join(d, "\n"))
	}
}

func assertWritesSucceed(t *testing.T, root string) {
	t.Helper()
	attempts := writeAttempts(root)
	// Order matters for a few (remove before rename of the same file).
	for _, what := range slices.Sorted(maps.Keys(attempts)) {
		if err := attempts[what](); err != nil {
			t.Errorf("%s in a writable dataset: %v", what, err)
		}
	}
}

func (s suite) readOnlyClone(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	src := newSource(t, p)
	want := describe(t, src)
	must(t, p.Clone(ctx, tplSrc, "snapshots/ro", s.with(true)), "read-only clone")
	assertSameTree(t, want, p.Path("snapshots/ro"))
	assertWritesFail(t, p.Path("snapshots/ro"))
	// The source stays writable.
	writeFile(t, filepath.Join(src, "after"), []byte("after"), 0o644)
	must(t, p.SetReadOnly(ctx, "snapshots/ro", false), "make clone writable")
	writeFile(t, filepath.Join(p.Path("snapshots/ro"), "after"), []byte("after"), 0o644)
}

func (s suite) cloneOfReadOnlySource(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	src := newSource(t, p)
	want := describe(t, src)
	must(t, p.SetReadOnly(ctx, tplSrc, true), "set source read-only")
	must(t, p.Clone(ctx, tplSrc, sbxDst, s.with(false)), "clone")
	assertSameTree(t, want, p.Path(sbxDst))
	assertWritesSucceed(t, p.Path(sbxDst))
	assertWritesFail(t, src)
}

func (s suite) setReadOnly(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	src := newSource(t, p)
	must(t, p.SetReadOnly(ctx, tplSrc, true), "set read-only")
	must(t, p.SetReadOnly(ctx, tplSrc, true), "set read-only again")
	assertWritesFail(t, src)
	must(t, p.SetReadOnly(ctx, tplSrc, false), "clear read-only")
	must(t, p.SetReadOnly(ctx, tplSrc, false), "clear read-only again")
	assertWritesSucceed(t, src)
}

func populateNested(t *testing.T, root string) {
	t.Helper()
	dir := root
	for i := 0; i < 20; i++ {
		dir = filepath.Join(dir, fmt.Sprintf("d%d", i))
		must(t, os.Mkdir(dir, 0o755), "mkdir")
		writeFile(t, filepath.Join(dir, "f"), randBytes(4096, uint64(i)), 0o400)
	}
	must(t, os.Chmod(filepath.Join(root, "d0"), 0o000), "chmod 000")
}

func assertGone(t *testing.T, p pool.Pool, name string) {
	t.Helper()
	ctx := ctxT(t)
	if ok, err := p.Exists(ctx, name); err != nil || ok {
		t.Fatalf("after delete, Exists(%s) = %v, %v", name, ok, err)
	}
	if _, err := os.Lstat(p.Path(name)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after delete, %s: %v", p.Path(name), err)
	}
	kind, id, _ := strings.Cut(name, "/")
	ids, err := p.List(ctx, kind)
	must(t, err, "list")
	if slices.Contains(ids, id) {
		t.Fatalf("after delete, List(%s) = %v", kind, ids)
	}
}

func (s suite) deleteNested(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	newSource(t, p)
	populateNested(t, p.Path(tplSrc))
	must(t, p.Delete(ctx, tplSrc), "delete")
	assertGone(t, p, tplSrc)
	wantErr(t, p.Delete(ctx, tplSrc), errs.ErrNotFound, "second delete")
	// The name is free again.
	must(t, p.Create(ctx, tplSrc), "re-create")
}

func (s suite) deleteReadOnly(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	newSource(t, p)
	populateNested(t, p.Path(tplSrc))
	must(t, p.Clone(ctx, tplSrc, "snapshots/ro", pool.CloneOptions{ReadOnly: true}), "read-only clone")
	must(t, p.SetReadOnly(ctx, tplSrc, true), "set read-only")
	must(t, p.Delete(ctx, "snapshots/ro"), "delete read-only clone")
	assertGone(t, p, "snapshots/ro")
	must(t, p.Delete(ctx, tplSrc), "delete read-only dataset")
	assertGone(t, p, tplSrc)
}

func (s suite) missingNotFound(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	wantErr(t, p.Delete(ctx, sbxDst), errs.ErrNotFound, "Delete")
	wantErr(t, p.SetReadOnly(ctx, sbxDst, true), errs.ErrNotFound, "SetReadOnly")
	_, err := p.Usage(ctx, sbxDst)
	wantErr(t, err, errs.ErrNotFound, "Usage")
	if p.Caps().Quota {
		wantErr(t, p.SetQuota(ctx, sbxDst, 1<<20), errs.ErrNotFound, "SetQuota")
	}
}

// listing names every path under root, and the entries of root's parent.
func listing(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	must(t, filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		out = append(out, p)
		return err
	}), "walk")
	ents, err := os.ReadDir(filepath.Dir(root))
	must(t, err, "readdir parent")
	for _, e := range ents {
		out = append(out, "parent:"+e.Name())
	}
	return out
}

func (s suite) invalidNames(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	newSource(t, p)
	must(t, p.Clone(ctx, tplSrc, sbxDst, pool.CloneOptions{}), "clone")
	root := filepath.Dir(filepath.Dir(p.Path(tplSrc)))
	before := listing(t, root)
	names := []string{
		"../x", "sandboxes/../../etc", "", "templates/A", "/etc", "/etc/passwd", "/tmp/x",
		"templates", "templates/", "templates/a/b", "templates/..", "templates/.", "templates/.hidden",
		"bogus/x", "sandboxes/-x", "sandboxes/a..b", "sandboxes/a b", "sandboxes/a\x00b",
		"sandboxes//x", "./sandboxes/x", "sandboxes/x/", "Templates/x", "templates/" + strings.Repeat("a", 129),
	}
	for _, name := range names {
		if path := p.Path(name); path != "" && !strings.HasPrefix(path, root+"/") {
			t.Errorf("Path(%q) = %q escapes the pool", name, path)
		}
		_, err := p.Exists(ctx, name)
		wantInvalid(t, err, "Exists", name)
		wantInvalid(t, p.Create(ctx, name), "Create", name)
		wantInvalid(t, p.Clone(ctx, tplSrc, name, pool.CloneOptions{}), "Clone to", name)
		wantInvalid(t, p.Clone(ctx, name, "sandboxes/other", pool.CloneOptions{}), "Clone from", name)
		wantInvalid(t, p.Delete(ctx, name), "Delete", name)
		wantInvalid(t, p.SetReadOnly(ctx, name, true), "SetReadOnly", name)
		wantInvalid(t, p.SetQuota(ctx, name, 1<<20), "SetQuota", name)
		_, err = p.Usage(ctx, name)
		wantInvalid(t, err, "Usage", name)
	}
	for _, kind := range []string{"", "bogus", "..", "../templates", "templates/x", "/templates", "Templates"} {
		_, err := p.List(ctx, kind)
		wantInvalid(t, err, "List", kind)
	}
	if d := cmpListing(before, listing(t, root)); d != "" {
		t.Fatalf("invalid names touched the file system:\n%s", d)
	}
	assertWritesSucceed(t, p.Path(sbxDst)) // not left read-only
}

func wantInvalid(t *testing.T, err error, op, name string) {
	t.Helper()
	if !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("%s(%q): got %v, want ErrInvalid", op, name, err)
	}
}

func cmpListing(a, b []string) string {
	var d []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			d = append(d, "removed "+x)
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			d = append(d, "added "+x)
		}
	}
	return strings.Join(d, "\n")
}

func (s suite) listSorted(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	for _, kind := range []string{pool.KindTemplate, pool.KindSandbox, pool.KindSnapshot, pool.KindVolume} {
		ids, err := p.List(ctx, kind)
		must(t, err, "list empty "+kind)
		if len(ids) != 0 {
			t.Fatalf("List(%s) of an empty pool = %v", kind, ids)
		}
	}
	for _, id := range []string{"b", "a10", "c.1", "a2", "a", "0-z", "a_b"} {
		must(t, p.Create(ctx, "sandboxes/"+id), "create "+id)
	}
	must(t, p.Create(ctx, "templates/t"), "create template")
	must(t, p.Clone(ctx, "templates/t", "sandboxes/cloned", pool.CloneOptions{}), "clone")
	must(t, p.Clone(ctx, "templates/t", "snapshots/s", pool.CloneOptions{ReadOnly: true}), "clone snapshot")
	must(t, p.Create(ctx, "volumes/v"), "create volume")
	must(t, p.Delete(ctx, "sandboxes/c.1"), "delete")
	for kind, want := range map[string][]string{
		pool.KindSandbox:  {"0-z", "a", "a10", "a2", "a_b", "b", "cloned"},
		pool.KindTemplate: {"t"},
		pool.KindSnapshot: {"s"},
		pool.KindVolume:   {"v"},
	} {
		got, err := p.List(ctx, kind)
		must(t, err, "list "+kind)
		if !slices.Equal(got, want) {
			t.Errorf("List(%s) = %v, want %v", kind, got, want)
		}
	}
}

// isQuotaErr reports whether err is the failure of a write past a quota.
func isQuotaErr(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}

func (s suite) quota(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	must(t, p.Create(ctx, sbxDst), "create")
	if !p.Caps().Quota {
		wantErr(t, p.SetQuota(ctx, sbxDst, 32<<20), errs.ErrUnsupported, "SetQuota without Caps().Quota")
		return
	}
	const limit = 32 << 20
	must(t, p.SetQuota(ctx, sbxDst, limit), "set quota")
	path := filepath.Join(p.Path(sbxDst), "fill")
	written, err := fill(path, 8*limit)
	if !isQuotaErr(err) {
		t.Fatalf("writing %d bytes past a %d-byte quota: got %v, want ENOSPC or EDQUOT", written, limit, err)
	}
	if written > 2*limit {
		t.Fatalf("quota of %d bytes let %d bytes through", limit, written)
	}
	t.Logf("write failed after %d bytes with %v", written, err)

	must(t, os.Remove(path), "remove fill")
	must(t, p.SetQuota(ctx, sbxDst, 0), "remove quota")
	if written, err := fill(path, 3*limit); err != nil {
		t.Fatalf("after removing the quota, writing %d bytes failed after %d: %v", 3*limit, written, err)
	}
}

// fill writes n incompressible bytes to path, syncing as it goes, and
// returns how many were written before an error.
func fill(path string, n int) (int, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	chunk := randBytes(1<<20, 7)
	written := 0
	for written < n {
		chunk[0]++ // no two chunks alike
		m, err := f.Write(chunk)
		written += m
		if err == nil && written%(8<<20) == 0 {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
			return written, err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return written, err
	}
	return written, f.Close()
}

func (s suite) capacity(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	c, err := p.Capacity(ctx)
	must(t, err, "capacity")
	t.Logf("capacity %+v, fill %.3f", c, c.Fill())
	if c.SizeBytes <= 0 || c.UsedBytes < 0 || c.UsedBytes > c.SizeBytes {
		t.Fatalf("size %d, used %d", c.SizeBytes, c.UsedBytes)
	}
	if c.ReserveBytes <= 0 || c.ReserveBytes >= c.SizeBytes {
		t.Fatalf("reserve %d of %d bytes", c.ReserveBytes, c.SizeBytes)
	}
	if c.Usable() != c.SizeBytes-c.ReserveBytes {
		t.Fatalf("usable %d, want size - reserve = %d", c.Usable(), c.SizeBytes-c.ReserveBytes)
	}
	if f := c.Fill(); f < 0 || f > 1 {
		t.Fatalf("fill %f", f)
	}
	if !p.Caps().Quota {
		if c.LimitBytes != 0 {
			t.Fatalf("a pool without quotas reports an enforced limit of %d bytes", c.LimitBytes)
		}
		return
	}
	if c.LimitBytes != c.Usable() || c.DatasetsBytes < 0 {
		t.Fatalf("limit %d (want %d), datasets %d", c.LimitBytes, c.Usable(), c.DatasetsBytes)
	}
	// The datasets' bytes grow with what is written into any of them.
	must(t, p.Create(ctx, sbxDst), "create")
	const n = 64 << 20
	if written, err := fill(filepath.Join(p.Path(sbxDst), "f"), n); err != nil {
		t.Fatalf("write %d bytes: failed after %d: %v", n, written, err)
	}
	syncfs(t, p.Path(sbxDst))
	c2, err := p.Capacity(ctx)
	must(t, err, "capacity after a write")
	if c2.DatasetsBytes-c.DatasetsBytes < n || c2.UsedBytes-c.UsedBytes < n/2 {
		t.Fatalf("after writing %d bytes: datasets %d -> %d, used %d -> %d", n, c.DatasetsBytes, c2.DatasetsBytes, c.UsedBytes, c2.UsedBytes)
	}
	if c2.Fill() <= c.Fill() {
		t.Fatalf("fill did not grow: %f -> %f", c.Fill(), c2.Fill())
	}
}

func syncfs(t *testing.T, dir string) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err, "open "+dir)
	defer unix.Close(fd)
	must(t, unix.Syncfs(fd), "syncfs")
}

// pokeCleaner asks a btrfs to commit and run its cleaner now
// (BTRFS_IOC_SYNC wakes the transaction thread, which wakes the cleaner
// that frees deleted subvolumes' extents; otherwise that waits for the
// 30 s commit interval). Elsewhere it is a syncfs.
func pokeCleaner(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	const btrfsIocSync = 0x9408 // _IO(0x94, 8)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), btrfsIocSync, 0); e != 0 {
		_ = unix.Syncfs(fd)
	}
}

// capacityLimit fills two datasets without quotas of their own (one
// created empty, one cloned from a template) until writes fail: together
// they hold no more than LimitBytes, and the pool still creates, clones,
// snapshots and deletes datasets, and a file beside the datasets (where
// the daemon's database lives when the data dir is on the pool's file
// system) can still be written.
func (s suite) capacityLimit(t *testing.T) {
	p := s.open(t)
	if !p.Caps().Quota {
		t.Log("no quotas: nothing bounds the datasets (the daemon refuses and warns instead)")
		return
	}
	ctx := ctxT(t)
	c, err := p.Capacity(ctx)
	must(t, err, "capacity")
	must(t, p.Create(ctx, tplSrc), "create template")
	writeFile(t, filepath.Join(p.Path(tplSrc), "base"), randBytes(8<<20, 3), 0o644)
	must(t, p.Clone(ctx, tplSrc, sbxDst, pool.CloneOptions{}), "clone")
	must(t, p.Create(ctx, "volumes/v"), "create volume")
	limit := int(c.LimitBytes)
	a, errA := fill(filepath.Join(p.Path(sbxDst), "fill"), 2*limit)
	b, errB := fill(filepath.Join(p.Path("volumes/v"), "fill"), 2*limit)
	t.Logf("limit %d: the clone took %d bytes (%v), the volume %d more (%v)", limit, a, errA, b, errB)
	if !isQuotaErr(errA) && !isQuotaErr(errB) {
		t.Fatalf("writing 4x the limit into two datasets: %v, %v; want EDQUOT or ENOSPC", errA, errB)
	}
	if a+b > limit {
		t.Fatalf("the datasets took %d bytes together, over the %d-byte limit", a+b, limit)
	}
	if a+b < limit*3/4 {
		t.Fatalf("the datasets took only %d bytes of the %d-byte limit", a+b, limit)
	}
	syncfs(t, p.Path(sbxDst))
	full, err := p.Capacity(ctx)
	must(t, err, "capacity when full")
	t.Logf("when full: %+v, fill %.3f", full, full.Fill())
	if full.Fill() < 0.95 {
		t.Fatalf("fill %.3f when the datasets are full", full.Fill())
	}
	// The pool still works.
	must(t, p.Clone(ctx, sbxDst, "snapshots/s", pool.CloneOptions{ReadOnly: true}), "snapshot when full")
	must(t, p.Clone(ctx, tplSrc, "sandboxes/second", pool.CloneOptions{}), "clone when full")
	must(t, p.Create(ctx, "volumes/w"), "create when full")
	beside := filepath.Join(filepath.Dir(filepath.Dir(p.Path(tplSrc))), "beside-the-datasets")
	if n, err := fill(beside, 16<<20); err != nil {
		t.Fatalf("writing beside the datasets when they are full failed after %d bytes: %v", n, err)
	}
	must(t, os.Remove(beside), "remove")
	must(t, p.Delete(ctx, "snapshots/s"), "delete snapshot when full")
	must(t, p.Delete(ctx, sbxDst), "delete when full")
	// What a delete frees can be written again (the cleaner frees the
	// extents in the background: wait for it).
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := fill(filepath.Join(p.Path("sandboxes/second"), "after"), 8<<20)
		if err == nil {
			break
		}
		if !isQuotaErr(err) || time.Now().After(deadline) {
			t.Fatalf("after deleting a full dataset, writing 8 MiB failed after %d bytes: %v", n, err)
		}
		pokeCleaner(p.Path(tplSrc))
		time.Sleep(200 * time.Millisecond)
	}
}

func (s suite) usage(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	must(t, p.Create(ctx, sbxDst), "create")
	const n = 8 << 20
	if _, err := fill(filepath.Join(p.Path(sbxDst), "data"), n); err != nil {
		t.Fatalf("fill: %v", err)
	}
	u, err := p.Usage(ctx, sbxDst)
	must(t, err, "usage")
	if u < n-(1<<20) || u > 4*n {
		t.Fatalf("Usage after writing %d bytes = %d", n, u)
	}
}

func (s suite) concurrentClones(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	src := newSource(t, p)
	want := describe(t, src)
	const n = 8
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errc <- p.Clone(ctx, tplSrc, fmt.Sprintf("sandboxes/c%d", i), pool.CloneOptions{ReadOnly: i%2 == 1})
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		must(t, err, "concurrent clone")
	}
	for i := range n {
		assertSameTree(t, want, p.Path(fmt.Sprintf("sandboxes/c%d", i)))
	}
	assertSameTree(t, want, src)
}

func (s suite) concurrentSameDst(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	src := newSource(t, p)
	want := describe(t, src)
	const n = 8
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for range n {
		wg.Go(func() { errc <- p.Clone(ctx, tplSrc, sbxDst, pool.CloneOptions{}) })
	}
	wg.Wait()
	close(errc)
	wins := 0
	for err := range errc {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, errs.ErrConflict):
		default:
			t.Errorf("concurrent clone to one name: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d concurrent clones to one name succeeded, want 1", wins)
	}
	assertSameTree(t, want, p.Path(sbxDst))
	ids, err := p.List(ctx, pool.KindSandbox)
	must(t, err, "list")
	if !slices.Equal(ids, []string{"dst"}) {
		t.Fatalf("List = %v, want [dst]", ids)
	}
	// Nothing else (temporaries) is left beside the dataset.
	ents, err := os.ReadDir(filepath.Dir(p.Path(sbxDst)))
	must(t, err, "readdir")
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("entries beside the dataset: %v", names)
	}
}

func (s suite) concurrentDistinct(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	newSource(t, p)
	const n = 8
	for i := range n {
		must(t, p.Create(ctx, fmt.Sprintf("volumes/old%d", i)), "create")
	}
	var wg sync.WaitGroup
	errc := make(chan error, 4*n)
	for i := range n {
		wg.Go(func() { errc <- p.Create(ctx, fmt.Sprintf("volumes/new%d", i)) })
		wg.Go(func() { errc <- p.Delete(ctx, fmt.Sprintf("volumes/old%d", i)) })
		wg.Go(func() {
			name := fmt.Sprintf("snapshots/s%d", i)
			err := p.Clone(ctx, tplSrc, name, pool.CloneOptions{})
			if err == nil {
				err = p.SetReadOnly(ctx, name, true)
			}
			errc <- err
		})
		wg.Go(func() {
			_, err := p.List(ctx, pool.KindVolume)
			errc <- err
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		must(t, err, "concurrent op")
	}
	ids, err := p.List(ctx, pool.KindVolume)
	must(t, err, "list")
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("new%d", i))
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("List(volumes) = %v, want %v", ids, want)
	}
}

func (s suite) rename(t *testing.T) {
	testRename(t, s.open(t), pool.Pool.Rename)
}

// renameUnsynced checks RenameUnsynced as rename checks Rename: what it
// leaves out (durability against a crash of the machine) is not
// observable from a running one.
func (s suite) renameUnsynced(t *testing.T) {
	testRename(t, s.open(t), pool.Pool.RenameUnsynced)
}

func testRename(t *testing.T, p pool.Pool, rename func(p pool.Pool, ctx context.Context, src, dst string) error) {
	ctx := ctxT(t)
	must(t, p.Create(ctx, "sandboxes/spare-1"), "create")
	writeFile(t, filepath.Join(p.Path("sandboxes/spare-1"), "f"), []byte("one"), 0o644)
	must(t, rename(p, ctx, "sandboxes/spare-1", "sandboxes/sb-1"), "rename")
	if ok, _ := p.Exists(ctx, "sandboxes/spare-1"); ok {
		t.Fatal("old name still exists after rename")
	}
	if got := readFile(t, filepath.Join(p.Path("sandboxes/sb-1"), "f")); got != "one" {
		t.Fatalf("renamed content %q", got)
	}
	wantErr(t, rename(p, ctx, "sandboxes/spare-1", "sandboxes/sb-2"), errs.ErrNotFound, "rename of a missing dataset")
	must(t, p.Create(ctx, "sandboxes/sb-2"), "create")
	wantErr(t, rename(p, ctx, "sandboxes/sb-2", "sandboxes/sb-1"), errs.ErrConflict, "rename onto an existing dataset")
	if got := readFile(t, filepath.Join(p.Path("sandboxes/sb-1"), "f")); got != "one" {
		t.Fatalf("a conflicting rename changed the target: %q", got)
	}
	wantErr(t, rename(p, ctx, "sandboxes/sb-2", "templates/sb-2"), errs.ErrInvalid, "rename across kinds")
	wantErr(t, rename(p, ctx, "sandboxes/sb-2", "sandboxes/../x"), errs.ErrInvalid, "rename to an invalid name")
	ids, err := p.List(ctx, pool.KindSandbox)
	if err != nil || len(ids) != 2 || ids[0] != "sb-1" || ids[1] != "sb-2" {
		t.Fatalf("list after renames: %v %v", ids, err)
	}
}

func (s suite) exchange(t *testing.T) {
	p := s.open(t)
	ctx := ctxT(t)
	must(t, p.Create(ctx, "sandboxes/a"), "create")
	must(t, p.Create(ctx, "sandboxes/b"), "create")
	writeFile(t, filepath.Join(p.Path("sandboxes/a"), "f"), []byte("a"), 0o644)
	writeFile(t, filepath.Join(p.Path("sandboxes/b"), "f"), []byte("b"), 0o644)
	must(t, p.Exchange(ctx, "sandboxes/a", "sandboxes/b"), "exchange")
	if a, b := readFile(t, filepath.Join(p.Path("sandboxes/a"), "f")), readFile(t, filepath.Join(p.Path("sandboxes/b"), "f")); a != "b" || b != "a" {
		t.Fatalf("after exchange a=%q b=%q", a, b)
	}
	wantErr(t, p.Exchange(ctx, "sandboxes/a", "sandboxes/missing"), errs.ErrNotFound, "exchange with a missing dataset")
	wantErr(t, p.Exchange(ctx, "sandboxes/a", "templates/b"), errs.ErrInvalid, "exchange across kinds")
	if a := readFile(t, filepath.Join(p.Path("sandboxes/a"), "f")); a != "b" {
		t.Fatalf("a failed exchange changed a: %q", a)
	}
}
