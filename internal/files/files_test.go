package files

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/testutil"
	"github.com/stead-dev/stead/internal/treedigest"
	"github.com/stead-dev/stead/internal/xattr"
)

const canaryContent = "host secret: must never be read or written"

// env is a sandbox root next to a canary directory that nothing may touch.
type env struct {
	base    string // host directory holding root/ and outside/
	root    string // host path of the sandbox root
	outside string // host directory outside the root
	canary  string // host path of the canary file
	r       *Root
	snap    string // digest of outside/ at setup
}

func newEnv(t testing.TB) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{base: base, root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	e.canary = filepath.Join(e.outside, "canary")
	must(t, os.Mkdir(e.root, 0o755))
	must(t, os.Mkdir(e.outside, 0o755))
	must(t, os.WriteFile(e.canary, []byte(canaryContent), 0o644))
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	must(t, os.Chtimes(e.canary, old, old))
	must(t, os.Chtimes(e.outside, old, old))
	var err error
	e.snap, err = treedigest.Digest(context.Background(), e.outside, treedigest.Options{})
	must(t, err)
	e.r, err = OpenRoot(e.root)
	must(t, err)
	t.Cleanup(func() { e.r.Close() })
	return e
}

// checkOutside fails unless outside/ (canary included) is byte-for-byte and
// attribute-for-attribute unchanged and base/ holds nothing new.
func (e *env) checkOutside(t testing.TB) {
	t.Helper()
	d, err := treedigest.Digest(context.Background(), e.outside, treedigest.Options{})
	must(t, err)
	if d != e.snap {
		lines, _ := treedigest.Entries(context.Background(), e.outside, treedigest.Options{})
		t.Fatalf("outside of the root changed:\n%s", strings.Join(lines, "\n"))
	}
	names, err := os.ReadDir(e.base)
	must(t, err)
	if len(names) != 2 {
		t.Fatalf("something appeared next to the root: %v", names)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) host(p string) string { return filepath.Join(e.root, p) }

// plantHostile plants the classic escape attempts inside the root.
func (e *env) plantHostile(t testing.TB) {
	t.Helper()
	must(t, os.MkdirAll(e.host("workspace"), 0o755))
	for name, target := range map[string]string{
		"workspace/abs":      "/etc/passwd",
		"workspace/hostabs":  e.canary,
		"workspace/hostdir":  e.outside,
		"workspace/rel":      "../../outside/canary",
		"workspace/reldir":   "../../outside",
		"workspace/deep":     "../../../../../../../../../../../" + e.outside,
		"workspace/loop":     "loop",
		"workspace/loop2":    "loop3",
		"workspace/loop3":    "loop2",
		"workspace/dotdot":   "../../../",
		"workspace/selfproc": "/proc/self/root" + e.outside,
	} {
		must(t, os.Symlink(target, e.host(name)))
	}
}

func TestCleanPath(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"/", "/", true},
		{"/a/b/", "/a/b", true},
		{"//a//./b", "/a/b", true},
		{"/a/../b", "/b", true},
		{"/a/..", "/", true},
		{"", "", false},
		{"a/b", "", false},
		{"/a\x00b", "", false},
		{"/..", "", false},
		{"/../etc/passwd", "", false},
		{"/a/../../b", "", false},
		{"/a/./../..", "", false},
	} {
		got, err := CleanPath(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("CleanPath(%q) error %v is not ErrInvalid", tc.in, err)
		}
	}
}

func TestReadFileCannotEscapeRoot(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	e.plantHostile(t)
	for _, p := range []string{
		"/workspace/abs", "/workspace/hostabs", "/workspace/hostdir/canary", "/workspace/rel",
		"/workspace/reldir/canary", "/workspace/deep/canary", "/workspace/loop", "/workspace/loop2",
		"/workspace/dotdot/outside/canary", "/workspace/selfproc/canary", "/../outside/canary",
		"/workspace/../../outside/canary", e.canary,
	} {
		rc, _, err := e.r.ReadFile(p)
		if err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			if strings.Contains(string(b), "host secret") {
				t.Fatalf("ReadFile(%q) read the host canary", p)
			}
			t.Fatalf("ReadFile(%q) unexpectedly succeeded: %q", p, b)
		}
		if !errors.Is(err, errs.ErrNotFound) && !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("ReadFile(%q) = %v; want ErrNotFound or ErrInvalid", p, err)
		}
		if !strings.Contains(err.Error(), "/") {
			t.Errorf("error %q does not name the path", err)
		}
	}
	// Symlinks are resolved as the sandbox sees them: /etc/passwd inside.
	must(t, os.MkdirAll(e.host("etc"), 0o755))
	must(t, os.WriteFile(e.host("etc/passwd"), []byte("sandbox passwd"), 0o644))
	for _, p := range []string{"/workspace/abs", "/workspace/dotdot/etc/passwd"} {
		rc, fi, err := e.r.ReadFile(p)
		must(t, err)
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "sandbox passwd" || fi.Size != int64(len(b)) || fi.Type != TypeFile {
			t.Fatalf("ReadFile(%q) = %q, %+v", p, b, fi)
		}
	}
	e.checkOutside(t)
}

func TestReadFileRefusesFifoWithoutBlocking(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	must(t, unix.Mkfifo(e.host("fifo"), 0o644))
	done := make(chan error, 1)
	go func() { _, _, err := e.r.ReadFile("/fifo"); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("ReadFile(fifo) = %v; want ErrInvalid", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadFile blocked on a FIFO")
	}
}

func TestReadFileRefusesDeviceNodes(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	must(t, unix.Mknod(e.host("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, os.Symlink("null", e.host("link-to-null")))
	for _, p := range []string{"/null", "/link-to-null"} {
		rc, _, err := e.r.ReadFile(p)
		if rc != nil {
			rc.Close()
		}
		if !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("ReadFile(%s) = %v; want ErrInvalid: not a regular file", p, err)
		}
	}
}

func TestReadFileNeverOpensAFifoForReading(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	must(t, unix.Mkfifo(e.host("fifo"), 0o644))
	// A writer's open blocks until someone opens the FIFO for reading, so
	// it tells whether ReadFile ran open() on it.
	opened := make(chan struct{})
	go func() {
		f, err := os.OpenFile(e.host("fifo"), os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		close(opened)
	}()
	time.Sleep(20 * time.Millisecond) // let the writer block in open
	if _, _, err := e.r.ReadFile("/fifo"); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("ReadFile(fifo) = %v; want ErrInvalid", err)
	}
	select {
	case <-opened:
		t.Fatal("ReadFile opened the FIFO for reading")
	case <-time.After(200 * time.Millisecond):
	}
	// Release the writer.
	r, err := os.OpenFile(e.host("fifo"), os.O_RDONLY|unix.O_NONBLOCK, 0)
	must(t, err)
	<-opened
	r.Close()
}

func TestReadFileReadsThroughTheReopenedDescriptor(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	must(t, os.WriteFile(e.host("f"), []byte("content"), 0o000))
	rc, fi, err := e.r.ReadFile("/f")
	must(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	must(t, err)
	if string(b) != "content" || fi.Size != 7 {
		t.Fatalf("ReadFile = %q, %+v", b, fi)
	}
	if _, err := rc.(io.Writer).Write([]byte("x")); err == nil {
		t.Fatal("the reader is writable")
	}
}

func TestWriteOperationsCannotEscapeRoot(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	e.plantHostile(t)
	ctx := context.Background()
	hostile := []string{"abs", "hostabs", "hostdir", "rel", "reldir", "deep", "loop", "loop2", "dotdot", "selfproc"}
	for _, h := range hostile {
		for _, p := range []string{"/workspace/" + h + "/canary", "/workspace/" + h + "/new", "/workspace/" + h + "/x/y"} {
			_ = e.r.WriteFile(ctx, p, 0o644, 0, 0, strings.NewReader("pwned"))
			_ = e.r.Mkdir(p, true, 0, 0)
			_ = e.r.Mkdir(p, false, 0, 0)
			_ = e.r.Remove(p, true)
			_ = e.r.Rename("/workspace/"+h, p)
			_ = e.r.ExtractTar(ctx, p, tarOf(t, tarEntry{name: "f", body: "pwned"}), ExtractOptions{})
		}
	}
	e.checkOutside(t)
	// Writing to a final symlink replaces the link, never its target.
	e2 := newEnv(t)
	e2.plantHostile(t)
	for _, h := range hostile {
		must(t, e2.r.WriteFile(ctx, "/workspace/"+h, 0o640, 1000, 1000, strings.NewReader("replaced")))
		fi, err := e2.r.Stat("/workspace/" + h)
		must(t, err)
		if fi.Type != TypeFile || fi.Size != 8 || fi.Mode.Perm() != 0o640 || fi.UID != 1000 {
			t.Fatalf("after WriteFile over symlink %s: %+v", h, fi)
		}
	}
	e2.checkOutside(t)
	// Recursive removal of a tree full of escape symlinks removes the links.
	e3 := newEnv(t)
	e3.plantHostile(t)
	must(t, e3.r.Remove("/workspace", true))
	if _, err := e3.r.Stat("/workspace"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("Stat after Remove = %v; want ErrNotFound", err)
	}
	e3.checkOutside(t)
}

func TestRemoveRecursiveDoesNotFollowSymlinkSwappedMidWalk(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	// Many directories, each with a sibling that a goroutine keeps swapping
	// between a directory and a host-relative symlink to outside/.
	for i := range 50 {
		must(t, os.MkdirAll(e.host(fmt.Sprintf("w/d%02d/sub", i)), 0o755))
		must(t, os.WriteFile(e.host(fmt.Sprintf("w/d%02d/sub/f", i)), nil, 0o644))
	}
	swaps := adversary(func(i int) int64 {
		d := e.host(fmt.Sprintf("w/d%02d", i%50))
		os.Symlink("../../../outside", d+"/tmp")
		if os.Rename(d+"/tmp", d+"/sub") == nil {
			return 1
		}
		return 0
	})
	err := e.r.Remove("/w", true)
	swaps()
	t.Logf("Remove under attack: %v", err)
	e.checkOutside(t)
}

func TestConcurrentSymlinkSwapNeverEscapes(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	ctx := context.Background()
	must(t, os.MkdirAll(e.host("work/real"), 0o755))
	must(t, os.Symlink(e.outside, e.host("work/abs")))
	must(t, os.Symlink("../../outside", e.host("work/rel")))
	must(t, os.MkdirAll(e.host("work/d"), 0o755))

	// The "sandbox": atomically exchange work/d with a symlink to the
	// host's outside/ (absolute or relative), as fast as it can.
	swaps := adversary(func(i int) int64 {
		other := e.host("work/abs")
		if i%2 == 1 {
			other = e.host("work/rel")
		}
		if unix.Renameat2(unix.AT_FDCWD, e.host("work/d"), unix.AT_FDCWD, other, unix.RENAME_EXCHANGE) == nil {
			return 1
		}
		return 0
	})
	var okWrites int
	for i := range 2000 {
		p := fmt.Sprintf("/work/d/f%d", i%7)
		if e.r.WriteFile(ctx, p, 0o644, 0, 0, strings.NewReader("pwned")) == nil {
			okWrites++
		}
		if rc, _, err := e.r.ReadFile("/work/d/canary"); err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			if strings.Contains(string(b), "host secret") {
				t.Fatal("read the host canary through a swapped symlink")
			}
		}
		_ = e.r.Mkdir("/work/d/m", true, 0, 0)
		_ = e.r.Remove("/work/d/m", true)
		_ = e.r.Rename(p, "/work/d/renamed")
		_, _ = e.r.List("/work/d")
		_ = e.r.Remove("/work/d/canary", false)
		if i%50 == 0 {
			_ = e.r.ExtractTar(ctx, "/work/d/x", tarOf(t, tarEntry{name: "a/b", body: "pwned"}), ExtractOptions{})
			var buf bytes.Buffer
			if e.r.WriteTar(ctx, "/work/d", &buf) == nil && strings.Contains(buf.String(), "host secret") {
				t.Fatal("WriteTar archived the host canary")
			}
		}
	}
	n := swaps()
	t.Logf("%d swaps, %d successful writes", n, okWrites)
	if n < 100 {
		t.Fatalf("only %d swaps: the race was not exercised", n)
	}
	e.checkOutside(t)
}

func TestStatListMkdirRenameRemove(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	ctx := context.Background()
	must(t, e.r.Mkdir("/a/b/c", true, 1000, 1001))
	must(t, e.r.Mkdir("/a/b/c", true, 0, 0)) // mkdir -p on existing
	if err := e.r.Mkdir("/a", false, 0, 0); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("Mkdir existing = %v; want ErrConflict", err)
	}
	if err := e.r.Mkdir("/nope/x", false, 0, 0); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("Mkdir without parent = %v; want ErrNotFound", err)
	}
	fi, err := e.r.Stat("/a/b")
	must(t, err)
	if fi.Type != TypeDir || fi.UID != 1000 || fi.GID != 1001 || fi.Mode.Perm() != 0o755 || fi.Name != "b" || fi.Path != "/a/b" {
		t.Fatalf("Stat(/a/b) = %+v", fi)
	}
	must(t, e.r.WriteFile(ctx, "/a/z", 0o4755|fs.ModeSetuid, 5, 6, strings.NewReader("zz")))
	must(t, os.Symlink("z", e.host("a/link")))
	must(t, unix.Mkfifo(e.host("a/fifo"), 0o600))
	list, err := e.r.List("/a")
	must(t, err)
	var names []string
	for _, f := range list {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, []string{"b", "fifo", "link", "z"}) {
		t.Fatalf("List = %v", names)
	}
	if list[2].Type != TypeSymlink || list[2].LinkTarget != "z" || list[1].Type != TypeOther {
		t.Fatalf("List entries = %+v", list)
	}
	if z := list[3]; z.Mode&fs.ModeSetuid == 0 || z.Mode.Perm() != 0o755 || z.UID != 5 || z.GID != 6 || z.Size != 2 {
		t.Fatalf("z = %+v", z)
	}
	if _, err := e.r.Stat("/missing"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("Stat missing = %v", err)
	}
	if _, err := e.r.Stat(""); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("Stat empty = %v", err)
	}
	root, err := e.r.Stat("/")
	must(t, err)
	if root.Type != TypeDir {
		t.Fatalf("Stat(/) = %+v", root)
	}
	must(t, e.r.Rename("/a/z", "/a/b/z2"))
	if _, err := e.r.Stat("/a/b/z2"); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Rename("/a", "/a/b/x"); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("rename into itself = %v", err)
	}
	if err := e.r.Remove("/a", false); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("Remove non-empty = %v; want ErrConflict", err)
	}
	if err := e.r.Remove("/", true); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("Remove / = %v; want ErrInvalid", err)
	}
	must(t, e.r.Remove("/a/link", false))
	must(t, e.r.Remove("/a", true))
	if _, err := os.Lstat(e.host("a")); !os.IsNotExist(err) {
		t.Fatalf("a still exists: %v", err)
	}
	if err := e.r.Remove("/a", true); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("Remove missing = %v; want ErrNotFound", err)
	}
}

func TestWriteFileIsAtomicAndLeavesNoTemp(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	ctx := context.Background()
	must(t, e.r.WriteFile(ctx, "/f", 0o600, 0, 0, strings.NewReader("one")))
	// A failing reader leaves the old content and no temporary file.
	err := e.r.WriteFile(ctx, "/f", 0o600, 0, 0, io.MultiReader(strings.NewReader("two"), errReader{}))
	if err == nil {
		t.Fatal("want error from failing reader")
	}
	b, _ := os.ReadFile(e.host("f"))
	if string(b) != "one" {
		t.Fatalf("content after failed write = %q", b)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.r.WriteFile(cctx, "/f", 0o600, 0, 0, strings.NewReader("three")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled write = %v", err)
	}
	ents, _ := os.ReadDir(e.root)
	if len(ents) != 1 {
		t.Fatalf("leftovers: %v", ents)
	}
	must(t, os.Mkdir(e.host("d"), 0o755))
	if err := e.r.WriteFile(ctx, "/d", 0o600, 0, 0, strings.NewReader("x")); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("write over directory = %v", err)
	}
	if err := e.r.WriteFile(ctx, "/nodir/f", 0o600, 0, 0, strings.NewReader("x")); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("write without parent = %v", err)
	}
	// Zeros are written, not turned into holes: the layout is what a
	// process writing the same bytes would get.
	big := bytes.Repeat([]byte{0}, 1<<20)
	big = append(big, "tail"...)
	must(t, e.r.WriteFile(ctx, "/zeros", 0o644, 0, 0, bytes.NewReader(big)))
	var st unix.Stat_t
	must(t, unix.Stat(e.host("zeros"), &st))
	if st.Size != int64(len(big)) || st.Blocks*512 < 1<<20 {
		t.Fatalf("zeros write: size %d, %d bytes allocated", st.Size, st.Blocks*512)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("boom") }

type tarEntry struct {
	name, link, body string
	typ              byte
	mode             int64
	uid, gid         int
	pax              map[string]string
}

func tarOf(t testing.TB, entries ...tarEntry) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0), PAXRecords: e.pax, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		must(t, tw.WriteHeader(h))
		if h.Size > 0 {
			_, err := tw.Write([]byte(e.body))
			must(t, err)
		}
	}
	must(t, tw.Close())
	return &buf
}

func TestExtractTarRejectsHostileArchives(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tc := range []struct {
		name    string
		entries []tarEntry
		invalid bool // must fail with ErrInvalid
	}{
		{"dotdot name", []tarEntry{{name: "../../outside/evil", body: "x"}}, true},
		{"dotdot in middle", []tarEntry{{name: "a/../../../outside/canary", body: "x"}}, true},
		{"absolute name", []tarEntry{{name: e0canary, body: "x"}}, true},
		{"absolute dir", []tarEntry{{name: "/etc/", typ: tar.TypeDir}}, true},
		{"hardlink dotdot", []tarEntry{{name: "h", typ: tar.TypeLink, link: "../../outside/canary"}}, true},
		{"hardlink absolute", []tarEntry{{name: "h", typ: tar.TypeLink, link: e0canary}}, true},
		{"symlink abs then file through it", []tarEntry{
			{name: "s", typ: tar.TypeSymlink, link: e0outside},
			{name: "s/canary", body: "pwned"},
			{name: "s/new", body: "pwned"}}, false},
		{"symlink rel then file through it", []tarEntry{
			{name: "s", typ: tar.TypeSymlink, link: "../../../../../../../outside"},
			{name: "s/canary", body: "pwned"}}, false},
		{"symlink then dir through it", []tarEntry{
			{name: "s", typ: tar.TypeSymlink, link: "../../.."},
			{name: "s/outside/", typ: tar.TypeDir},
			{name: "s/outside/canary", body: "pwned"}}, false},
		{"symlink to file then overwrite", []tarEntry{
			{name: "s", typ: tar.TypeSymlink, link: e0canary},
			{name: "s", body: "pwned"}}, false},
		{"hardlink through symlink", []tarEntry{
			{name: "s", typ: tar.TypeSymlink, link: e0outside},
			{name: "h", typ: tar.TypeLink, link: "s/canary"}}, false},
		{"hardlink to symlink to canary", []tarEntry{
			{name: "s", typ: tar.TypeSymlink, link: e0canary},
			{name: "h", typ: tar.TypeLink, link: "s"},
			{name: "h", body: "pwned"}}, false},
		{"device without trust", []tarEntry{{name: "null", typ: tar.TypeChar}}, false},
		{"xattr through symlink", []tarEntry{
			{name: "s", typ: tar.TypeSymlink, link: e0canary, pax: map[string]string{"SCHILY.xattr.user.x": "y"}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			// Make the placeholders real: the test table is built before
			// the temp dir exists.
			var entries []tarEntry
			for _, en := range tc.entries {
				en.name = strings.ReplaceAll(en.name, e0outside, e.outside)
				en.link = strings.ReplaceAll(en.link, e0outside, e.outside)
				entries = append(entries, en)
			}
			for _, dir := range []string{"/", "/workspace/deep/dir"} {
				err := e.r.ExtractTar(context.Background(), dir, tarOf(t, entries...), ExtractOptions{UID: 1000, GID: 1000})
				t.Logf("ExtractTar into %s: %v", dir, err)
				if tc.invalid && !errors.Is(err, errs.ErrInvalid) {
					t.Fatalf("ExtractTar = %v; want ErrInvalid", err)
				}
				if err != nil && !strings.Contains(err.Error(), "entry") {
					t.Fatalf("error %q does not name the entry", err)
				}
				e.checkOutside(t)
				var st unix.Stat_t
				must(t, unix.Stat(e.canary, &st))
				if st.Nlink != 1 {
					t.Fatalf("canary gained a hardlink")
				}
			}
		})
	}
}

// Placeholders replaced per test by the real host paths.
const (
	e0outside = "/HOST-OUTSIDE"
	e0canary  = "/HOST-OUTSIDE/canary"
)

func TestExtractTarUntrustedDropsPrivileges(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	err := e.r.ExtractTar(context.Background(), "/w", tarOf(t,
		tarEntry{name: "bin", body: "x", mode: 0o4755, uid: 0, gid: 0, pax: map[string]string{
			"SCHILY.xattr.security.capability": string(capNetBindService),
			"SCHILY.xattr.trusted.x":           "t",
			"SCHILY.xattr.user.ok":             "u",
		}},
	), ExtractOptions{UID: 1000, GID: 1001})
	must(t, err)
	fi, err := e.r.Stat("/w/bin")
	must(t, err)
	if fi.UID != 1000 || fi.GID != 1001 || fi.Mode&fs.ModeSetuid == 0 {
		t.Fatalf("bin = %+v", fi)
	}
	x, err := xattr.AllAt(unix.AT_FDCWD, e.host("w/bin"))
	must(t, err)
	if len(x) != 1 || string(x["user.ok"]) != "u" {
		t.Fatalf("xattrs = %q; want only user.ok", x)
	}
	w, err := e.r.Stat("/w")
	must(t, err)
	if w.UID != 1000 || w.GID != 1001 {
		t.Fatalf("created dir owner = %d:%d", w.UID, w.GID)
	}
	if err := e.r.ExtractTar(context.Background(), "/w", tarOf(t, tarEntry{name: "dev", typ: tar.TypeBlock}), ExtractOptions{}); !errors.Is(err, errs.ErrForbidden) {
		t.Fatalf("device without PreserveOwner = %v; want ErrForbidden", err)
	}
}

func TestExtractTarReportsProgressAndHonoursContext(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	var last int64
	err := e.r.ExtractTar(context.Background(), "/", tarOf(t,
		tarEntry{name: "a", body: strings.Repeat("a", 1000)},
		tarEntry{name: "b", body: strings.Repeat("b", 500)},
	), ExtractOptions{Progress: func(n int64) { last = n }})
	must(t, err)
	if last != 1500 {
		t.Fatalf("progress = %d; want 1500", last)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.r.ExtractTar(ctx, "/", tarOf(t, tarEntry{name: "c", body: "c"}), ExtractOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled = %v", err)
	}
	// A truncated archive is an error, not a short file.
	full := tarOf(t, tarEntry{name: "d", body: strings.Repeat("d", 5000)}).(*bytes.Buffer).Bytes()
	if err := e.r.ExtractTar(context.Background(), "/", bytes.NewReader(full[:2000]), ExtractOptions{}); err == nil {
		t.Fatal("truncated archive extracted without error")
	}
}

// capNetBindService is a VFS_CAP_REVISION_2 security.capability value
// granting cap_net_bind_service, effective.
var capNetBindService = []byte{0x01, 0, 0, 0x02, 0x00, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

// buildRichTree creates, below the host directory dir, every kind of entry
// and attribute WriteTar and ExtractTar must carry.
func buildRichTree(t *testing.T, dir string) {
	t.Helper()
	p := func(n string) string { return filepath.Join(dir, n) }
	must(t, os.MkdirAll(p("sub/deeper"), 0o755))
	must(t, unix.Chmod(p("sub"), 0o2750))
	must(t, os.Mkdir(p("sticky"), 0o755))
	must(t, unix.Chmod(p("sticky"), 0o1777))
	must(t, os.WriteFile(p("a.txt"), []byte("hello"), 0o644))
	must(t, unix.Setxattr(p("a.txt"), "user.k", []byte("v\x00bin"), 0))
	must(t, unix.Setxattr(p("sub"), "user.dir", []byte("d"), 0))
	must(t, os.WriteFile(p("sub/setuid"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Chown(p("sub/setuid"), 1000, 1001))
	must(t, unix.Chmod(p("sub/setuid"), 0o6755))
	must(t, os.WriteFile(p("sub/capbin"), []byte("\x7fELF"), 0o755))
	must(t, unix.Setxattr(p("sub/capbin"), "security.capability", capNetBindService, 0))
	must(t, os.Symlink("../a.txt", p("sub/link")))
	must(t, os.Symlink("/etc/passwd", p("abslink")))
	must(t, os.Symlink("dangling", p("dangling")))
	must(t, os.Lchown(p("dangling"), 7, 8))
	must(t, unix.Lsetxattr(p("abslink"), "trusted.sym", []byte("on a symlink"), 0))
	must(t, os.WriteFile(p("h1"), []byte("linked"), 0o600))
	must(t, os.Link(p("h1"), p("sub/deeper/h2")))
	must(t, os.Link(p("h1"), p("h3")))
	must(t, unix.Mkfifo(p("fifo"), 0o640))
	must(t, unix.Mknod(p("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, unix.Mknod(p("loop9"), unix.S_IFBLK|0o660, int(unix.Mkdev(7, 9))))
	must(t, os.WriteFile(p("empty"), nil, 0o400))
	must(t, os.WriteFile(p("name\xff\xfe\n"), []byte("odd name"), 0o644))
	must(t, os.WriteFile(p(strings.Repeat("long", 40)), []byte("long name"), 0o644))
	f, err := os.Create(p("sparse"))
	must(t, err)
	_, err = f.WriteAt([]byte("middle"), 3<<20)
	must(t, err)
	must(t, f.Truncate(6<<20))
	must(t, f.Close())
	f, err = os.Create(p("allhole"))
	must(t, err)
	must(t, f.Truncate(1<<20))
	must(t, f.Close())
	f, err = os.Create(p("holeatstart"))
	must(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte("x"), 10000), 1<<20)
	must(t, err)
	must(t, f.Close())
	// Dense, but with whole zero blocks (like many binaries): must stay
	// dense.
	zeros := append(append([]byte("a"), make([]byte, 64<<10)...), 'b')
	must(t, os.WriteFile(p("densezeros"), zeros, 0o755))
	var paths []string
	must(t, filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		paths = append(paths, p)
		return err
	}))
	for i := len(paths) - 1; i >= 0; i-- {
		ts := time.Unix(1600000000, int64(i)*1111111)
		tss := []unix.Timespec{unix.NsecToTimespec(ts.UnixNano()), unix.NsecToTimespec(ts.UnixNano())}
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, paths[i], tss, unix.AT_SYMLINK_NOFOLLOW))
	}
}

func TestWriteTarExtractTarRoundTripPreservesEverything(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	ctx := context.Background()
	must(t, os.MkdirAll(e.host("src/tree"), 0o755))
	buildRichTree(t, e.host("src/tree"))

	var buf bytes.Buffer
	must(t, e.r.WriteTar(ctx, "/src/tree", &buf))
	must(t, e.r.ExtractTar(ctx, "/dst", bytes.NewReader(buf.Bytes()), ExtractOptions{PreserveOwner: true}))

	want, err := treedigest.Entries(ctx, e.host("src/tree"), treedigest.Options{})
	must(t, err)
	got, err := treedigest.Entries(ctx, e.host("dst/tree"), treedigest.Options{})
	must(t, err)
	if d := treedigest.Diff(want, got); d != nil {
		t.Fatalf("round trip differs:\n%s", strings.Join(d, "\n"))
	}
	var st unix.Stat_t
	must(t, unix.Stat(e.host("dst/tree/sparse"), &st))
	if st.Blocks*512 > 64<<10 {
		t.Fatalf("sparse file not sparse after extraction: %d bytes allocated", st.Blocks*512)
	}

	// A single file archives as one member named after it.
	buf.Reset()
	must(t, e.r.WriteTar(ctx, "/src/tree/a.txt", &buf))
	tr := tar.NewReader(&buf)
	h, err := tr.Next()
	must(t, err)
	if h.Name != "a.txt" || h.PAXRecords["SCHILY.xattr.user.k"] != "v\x00bin" {
		t.Fatalf("single-file header = %+v", h)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Fatalf("want one member, got more (%v)", err)
	}

	// The whole root round-trips too, root directory attributes included.
	must(t, os.Chmod(e.root, 0o711))
	buf.Reset()
	must(t, e.r.WriteTar(ctx, "/", &buf))
	other := filepath.Join(e.base, "outside", "copy") // checkOutside not used below
	must(t, os.Mkdir(other, 0o755))
	r2, err := OpenRoot(other)
	must(t, err)
	defer r2.Close()
	must(t, r2.ExtractTar(ctx, "/", bytes.NewReader(buf.Bytes()), ExtractOptions{PreserveOwner: true}))
	want, err = treedigest.Entries(ctx, e.root, treedigest.Options{})
	must(t, err)
	got, err = treedigest.Entries(ctx, other, treedigest.Options{})
	must(t, err)
	if d := treedigest.Diff(want, got); d != nil {
		t.Fatalf("root round trip differs:\n%s", strings.Join(d, "\n"))
	}
}

func TestWriteTarStoresSymlinksNotTargets(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	e.plantHostile(t)
	var buf bytes.Buffer
	must(t, e.r.WriteTar(context.Background(), "/workspace", &buf))
	if strings.Contains(buf.String(), "host secret") {
		t.Fatal("archive contains the host canary")
	}
	tr := tar.NewReader(&buf)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(t, err)
		if h.Name != "workspace/" && h.Typeflag != tar.TypeSymlink {
			t.Fatalf("unexpected member %+v", h)
		}
		n++
	}
	if n != 12 {
		t.Fatalf("%d members; want 12", n)
	}
	// A final symlink is archived as the link itself.
	buf.Reset()
	must(t, e.r.WriteTar(context.Background(), "/workspace/hostdir", &buf))
	h, err := tar.NewReader(&buf).Next()
	must(t, err)
	if h.Typeflag != tar.TypeSymlink || h.Linkname != e.outside {
		t.Fatalf("header = %+v", h)
	}
	e.checkOutside(t)
}

func TestTarInteropWithGNUTar(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "tree")
	must(t, os.Mkdir(src, 0o755))
	buildRichTree(t, src)
	want, err := treedigest.Entries(ctx, src, treedigest.Options{})
	must(t, err)

	// GNU tar (PAX, sparse, xattrs) → ExtractTar.
	cmd := exec.Command("tar", "--format=pax", "--sparse", "--xattrs", "--xattrs-include=*", "-cpf", "-", "-C", src, ".")
	var gnu, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &gnu, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tar -c: %v: %s", err, stderr.String())
	}
	must(t, e.r.ExtractTar(ctx, "/gnu", &gnu, ExtractOptions{PreserveOwner: true}))
	got, err := treedigest.Entries(ctx, e.host("gnu"), treedigest.Options{})
	must(t, err)
	if d := treedigest.Diff(want, got); d != nil {
		t.Errorf("GNU tar → ExtractTar differs:\n%s", strings.Join(d, "\n"))
	}

	// WriteTar → GNU tar -x.
	must(t, os.Rename(src, e.host("tree")))
	var ours bytes.Buffer
	must(t, e.r.WriteTar(ctx, "/tree", &ours))
	dst := t.TempDir()
	cmd = exec.Command("tar", "--xattrs", "--xattrs-include=*", "--numeric-owner", "-xpf", "-", "-C", dst)
	cmd.Stdin = &ours
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v: %s", err, out)
	}
	got, err = treedigest.Entries(ctx, filepath.Join(dst, "tree"), treedigest.Options{})
	must(t, err)
	if d := treedigest.Diff(want, got); d != nil {
		t.Errorf("WriteTar → GNU tar differs:\n%s", strings.Join(d, "\n"))
	}
}

func TestExtractTarTreatsOldNULTypeflagAsRegularFile(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	must(t, tw.WriteHeader(&tar.Header{Name: "old.txt", Typeflag: tar.TypeReg, Mode: 0o640, Size: 3,
		ModTime: time.Unix(1700000000, 0), Format: tar.FormatUSTAR}))
	_, err := tw.Write([]byte("old"))
	must(t, err)
	must(t, tw.Close())
	// Rewrite the typeflag as a pre-POSIX '\x00' and fix the checksum.
	b := buf.Bytes()
	b[156] = 0
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b[:512] {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))

	must(t, e.r.ExtractTar(context.Background(), "/", bytes.NewReader(b), ExtractOptions{UID: 1000, GID: 1000}))
	fi, err := os.Lstat(e.host("old.txt"))
	must(t, err)
	got, err := os.ReadFile(e.host("old.txt"))
	must(t, err)
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 || string(got) != "old" {
		t.Fatalf("extracted %v %q", fi.Mode(), got)
	}
}
