package treedigest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/testutil"
)

var fixedTime = time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// capNetBindService is a VFS_CAP_REVISION_2 security.capability value
// granting cap_net_bind_service, effective.
var capNetBindService = []byte{0x01, 0, 0, 0x02, 0x00, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

// buildTree creates a tree exercising every attribute the digest covers.
func buildTree(t *testing.T, root string) {
	t.Helper()
	w := func(name, content string, mode os.FileMode) {
		p := filepath.Join(root, name)
		must(t, os.WriteFile(p, []byte(content), mode))
		must(t, os.Chmod(p, mode))
	}
	must(t, os.MkdirAll(filepath.Join(root, "sub/deeper"), 0o750))
	must(t, os.MkdirAll(filepath.Join(root, "tmp"), 0o755))
	must(t, unix.Chmod(filepath.Join(root, "tmp"), 0o1777))
	w("a.txt", "hello world\n", 0o644)
	w("sub/setuid", "#!/bin/sh\n", 0o755)
	must(t, os.Chown(filepath.Join(root, "sub/setuid"), 1000, 1000))
	must(t, unix.Chmod(filepath.Join(root, "sub/setuid"), 0o4755))
	w("sub/capbin", "\x7fELF", 0o755)
	must(t, unix.Setxattr(filepath.Join(root, "sub/capbin"), "security.capability", capNetBindService, 0))
	must(t, unix.Setxattr(filepath.Join(root, "a.txt"), "user.k", []byte("v"), 0))
	must(t, unix.Setxattr(filepath.Join(root, "sub"), "user.dir", []byte{0, 1, 2}, 0))
	must(t, os.Symlink("a.txt", filepath.Join(root, "link")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(root, "sub/abs")))
	w("h1", "linked", 0o600)
	must(t, os.Link(filepath.Join(root, "h1"), filepath.Join(root, "sub/h2")))
	w("sparse", "", 0o644)
	f, err := os.OpenFile(filepath.Join(root, "sparse"), os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("data in the middle"), 4<<20)
	must(t, err)
	must(t, f.Truncate(8<<20))
	must(t, f.Close())
	must(t, unix.Mkfifo(filepath.Join(root, "fifo"), 0o640))
	must(t, unix.Mknod(filepath.Join(root, "sub/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	w("empty", "", 0o400)
	w("name\xff\xfe", "non-utf8", 0o644)
	w("new\nline", "newline", 0o644)
	w("tmp/scratch", "scratch", 0o644)
	setTimes(t, root)
}

// setTimes gives every entry fixedTime, deepest first so directory times
// stick.
func setTimes(t *testing.T, root string) {
	t.Helper()
	var paths []string
	must(t, filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		paths = append(paths, p)
		return err
	}))
	for i := len(paths) - 1; i >= 0; i-- {
		ts := []unix.Timespec{unix.NsecToTimespec(fixedTime.UnixNano()), unix.NsecToTimespec(fixedTime.UnixNano())}
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, paths[i], ts, unix.AT_SYMLINK_NOFOLLOW))
	}
}

func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	out, err := exec.Command("cp", "-a", "--preserve=all", src, dst).CombinedOutput()
	if err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	return dst
}

func digest(t *testing.T, root string, opts Options) string {
	t.Helper()
	d, err := Digest(context.Background(), root, opts)
	must(t, err)
	return d
}

func TestDigestEqualForFaithfulCopy(t *testing.T) {
	testutil.RequireRoot(t)
	src := filepath.Join(t.TempDir(), "src")
	must(t, os.Mkdir(src, 0o755))
	buildTree(t, src)
	dst := copyTree(t, src)
	a, err := Entries(context.Background(), src, Options{})
	must(t, err)
	b, err := Entries(context.Background(), dst, Options{})
	must(t, err)
	if d := Diff(a, b); d != nil {
		t.Fatalf("copy differs:\n%q", d)
	}
	if digest(t, src, Options{}) != digest(t, dst, Options{}) {
		t.Fatal("digests differ for equal entries")
	}
	if len(a) < 15 {
		t.Fatalf("only %d entries: %q", len(a), a)
	}
	// The inode-independent hardlink group is present.
	found := 0
	for _, l := range a {
		if len(l) > 7 && l[len(l)-7:] == " link=1" {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("want 2 entries in hardlink group 1, got %d:\n%q", found, a)
	}
}

func TestDigestChangesWithEachAttribute(t *testing.T) {
	testutil.RequireRoot(t)
	src := filepath.Join(t.TempDir(), "src")
	must(t, os.Mkdir(src, 0o755))
	buildTree(t, src)
	base := digest(t, src, Options{})

	tests := []struct {
		name   string
		mutate func(t *testing.T, root string)
	}{
		{"content same size", func(t *testing.T, r string) {
			must(t, os.WriteFile(filepath.Join(r, "a.txt"), []byte("HELLO WORLD\n"), 0o644))
		}},
		{"mode", func(t *testing.T, r string) { must(t, os.Chmod(filepath.Join(r, "a.txt"), 0o600)) }},
		{"setuid bit", func(t *testing.T, r string) { must(t, unix.Chmod(filepath.Join(r, "sub/setuid"), 0o755)) }},
		{"sticky bit on dir", func(t *testing.T, r string) { must(t, unix.Chmod(filepath.Join(r, "tmp"), 0o777)) }},
		{"owner uid", func(t *testing.T, r string) { must(t, os.Lchown(filepath.Join(r, "a.txt"), 1, 0)) }},
		{"owner gid", func(t *testing.T, r string) { must(t, os.Lchown(filepath.Join(r, "a.txt"), 0, 1)) }},
		{"symlink owner", func(t *testing.T, r string) { must(t, os.Lchown(filepath.Join(r, "link"), 5, 5)) }},
		{"mtime one ns", func(t *testing.T, r string) {
			ts := fixedTime.Add(time.Nanosecond)
			must(t, os.Chtimes(filepath.Join(r, "a.txt"), ts, ts))
		}},
		{"dir mtime", func(t *testing.T, r string) {
			ts := fixedTime.Add(time.Second)
			must(t, os.Chtimes(filepath.Join(r, "sub"), ts, ts))
		}},
		{"xattr value", func(t *testing.T, r string) {
			must(t, unix.Setxattr(filepath.Join(r, "a.txt"), "user.k", []byte("w"), 0))
		}},
		{"xattr added", func(t *testing.T, r string) {
			must(t, unix.Setxattr(filepath.Join(r, "empty"), "user.new", nil, 0))
		}},
		{"capability removed", func(t *testing.T, r string) {
			must(t, unix.Removexattr(filepath.Join(r, "sub/capbin"), "security.capability"))
		}},
		{"symlink target", func(t *testing.T, r string) {
			p := filepath.Join(r, "link")
			must(t, os.Remove(p))
			must(t, os.Symlink("b.txt", p))
		}},
		{"hardlink broken", func(t *testing.T, r string) {
			p := filepath.Join(r, "sub/h2")
			must(t, os.Remove(p))
			must(t, os.WriteFile(p, []byte("linked"), 0o600))
		}},
		{"hole filled with zeros", func(t *testing.T, r string) {
			f, err := os.OpenFile(filepath.Join(r, "sparse"), os.O_WRONLY, 0)
			must(t, err)
			_, err = f.WriteAt(make([]byte, 4096), 0)
			must(t, err)
			must(t, f.Close())
		}},
		{"device number", func(t *testing.T, r string) {
			p := filepath.Join(r, "sub/null")
			must(t, os.Remove(p))
			must(t, unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))))
		}},
		{"file removed", func(t *testing.T, r string) { must(t, os.Remove(filepath.Join(r, "empty"))) }},
		{"file added", func(t *testing.T, r string) {
			must(t, os.WriteFile(filepath.Join(r, "sub/deeper/x"), nil, 0o644))
		}},
		{"file renamed", func(t *testing.T, r string) {
			must(t, os.Rename(filepath.Join(r, "empty"), filepath.Join(r, "empty2")))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := copyTree(t, src)
			before, err := Entries(context.Background(), dst, Options{})
			must(t, err)
			if digest(t, dst, Options{}) != base {
				t.Fatalf("copy differs before mutation")
			}
			tc.mutate(t, dst)
			// Restore every time the mutation may have bumped (parent
			// directories, the file itself) unless time is what we test.
			if tc.name != "mtime one ns" && tc.name != "dir mtime" {
				setTimes(t, dst)
			}
			after, err := Entries(context.Background(), dst, Options{})
			must(t, err)
			if digest(t, dst, Options{}) == base {
				t.Fatalf("digest unchanged after %s", tc.name)
			}
			if len(Diff(before, after)) == 0 {
				t.Fatalf("Diff empty after %s", tc.name)
			}
		})
	}
}

func TestDigestOptions(t *testing.T) {
	testutil.RequireRoot(t)
	src := filepath.Join(t.TempDir(), "src")
	must(t, os.Mkdir(src, 0o755))
	buildTree(t, src)
	opts := Options{Exclude: []string{"/tmp", "sub/deeper"}, NoMtimeDirs: true}
	base := digest(t, src, opts)

	must(t, os.WriteFile(filepath.Join(src, "tmp/other"), []byte("x"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "sub/deeper/y"), []byte("x"), 0o644))
	ts := fixedTime.Add(time.Hour)
	must(t, os.Chtimes(filepath.Join(src, "sub"), ts, ts))
	if got := digest(t, src, opts); got != base {
		t.Fatalf("excluded paths or directory times changed the digest")
	}
	if digest(t, src, Options{}) == digest(t, src, Options{NoMtimeDirs: true}) {
		t.Fatal("NoMtimeDirs had no effect")
	}
	lines, err := Entries(context.Background(), src, opts)
	must(t, err)
	for _, l := range lines {
		if len(l) >= 6 && (l[:6] == `"/tmp"` || l[:6] == `"/tmp/`) {
			t.Fatalf("excluded entry listed: %q", l)
		}
	}
}

func TestDigestDoesNotFollowSymlinks(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	root := filepath.Join(base, "root")
	must(t, os.Mkdir(root, 0o755))
	must(t, os.Mkdir(filepath.Join(base, "outside"), 0o755))
	must(t, os.Symlink("../outside", filepath.Join(root, "out")))
	must(t, os.Symlink("loop", filepath.Join(root, "loop")))
	d1 := digest(t, root, Options{})
	must(t, os.WriteFile(filepath.Join(base, "outside/new"), []byte("x"), 0o644))
	if d2 := digest(t, root, Options{}); d1 != d2 {
		t.Fatal("digest changed when a symlink's target outside the tree changed")
	}
}

func TestDigestMissingRoot(t *testing.T) {
	if _, err := Digest(context.Background(), filepath.Join(t.TempDir(), "nope"), Options{}); err == nil {
		t.Fatal("want error for a missing root")
	}
}
