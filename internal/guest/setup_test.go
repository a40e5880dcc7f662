package guest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// openRoot opens dir as setupSandbox opens the sandbox's root.
func openRoot(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// sameFile reports whether fd is the file at path.
func sameFile(t *testing.T, fd int, path string) bool {
	t.Helper()
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lstat(path, &b); err != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// TestMountTargetsStayInsideTheRoot: targets the agent prepared with
// symlinks resolve inside the root (absolute links, ".." past the top,
// dangling links), the top-level file systems' targets are real
// directories (a symlink or file there is replaced), and a link loop is
// an error, not a hang.
func TestMountTargetsStayInsideTheRoot(t *testing.T) {
	outside := t.TempDir()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(outside, filepath.Join(root, "proc")))
	must(os.WriteFile(filepath.Join(root, "sys"), []byte("x"), 0o644))
	must(os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(os.Symlink("/../../../.."+outside, filepath.Join(root, "work")))
	must(os.Symlink("../run/resolve/stub-resolv.conf", filepath.Join(root, "etc/resolv.conf")))
	must(os.Symlink("loop", filepath.Join(root, "loop")))
	rdir := openRoot(t, root)

	for _, top := range []string{"proc", "sys", "dev"} {
		fd, err := makeTarget(rdir, "/"+top, false, true)
		if err != nil {
			t.Fatalf("/%s: %v", top, err)
		}
		st, _ := os.Lstat(filepath.Join(root, top))
		if st == nil || !st.IsDir() || !sameFile(t, fd, filepath.Join(root, top)) {
			t.Fatalf("/%s is not a directory of the root: %v", top, st)
		}
		unix.Close(fd)
	}
	fd, err := makeTarget(rdir, "/work/data", false, false)
	if err != nil {
		t.Fatal(err)
	}
	if !sameFile(t, fd, filepath.Join(root, outside, "data")) {
		t.Fatal("/work/data did not resolve to the link's target inside the root")
	}
	unix.Close(fd)
	fd, err = makeTarget(rdir, "/etc/resolv.conf", true, false)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(filepath.Join(root, "run/resolve/stub-resolv.conf")); err != nil || !st.Mode().IsRegular() || !sameFile(t, fd, filepath.Join(root, "run/resolve/stub-resolv.conf")) {
		t.Fatalf("the dangling link's target was not made as a file inside the root: %v %v", st, err)
	}
	unix.Close(fd)
	if _, err := makeTarget(rdir, "/loop/x", false, false); !errors.Is(err, unix.ELOOP) {
		t.Fatalf("a link loop: %v, want ELOOP", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the directory outside the root gained %v", ents)
	}
}
