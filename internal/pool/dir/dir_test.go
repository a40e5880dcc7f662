package dir

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/pool/pooltest"
	"github.com/stead-dev/stead/internal/testutil"
)

func openAt(t *testing.T, dir string) *Pool {
	t.Helper()
	p, err := Open(t.Context(), dir)
	if err != nil {
		t.Fatalf("open dir pool: %v", err)
	}
	t.Cleanup(func() {
		_ = p.Close()
		// A failed test may leave immutable files that t.TempDir cannot remove.
		_ = setImmutable(context.Background(), dir, false)
	})
	return p
}

func TestDirPoolOnHostFSPassesContract(t *testing.T) {
	testutil.RequireRoot(t)
	pooltest.Run(t, func(t *testing.T) pool.Pool { return openAt(t, t.TempDir()) })
}

func TestDirPoolOnXFSWithReflinkPassesContract(t *testing.T) {
	testutil.RequireRoot(t)
	mnt := mountXFS(t)
	pooltest.Run(t, func(t *testing.T) pool.Pool {
		dir := filepath.Join(mnt, "pool", strings.ReplaceAll(t.Name(), "/", "_"))
		t.Cleanup(func() { _ = removeAll(context.Background(), dir) })
		return openAt(t, dir)
	})
}

// TestDirPoolCloneSharesExtentsOnXFS checks that Clone reflinks: cloning 64
// MiB must not consume 64 MiB of the file system.
func TestDirPoolCloneSharesExtentsOnXFS(t *testing.T) {
	testutil.RequireRoot(t)
	mnt := mountXFS(t)
	p := openAt(t, filepath.Join(mnt, "pool"))
	ctx := t.Context()
	pooltest.BigTemplate(t, p, "templates/big")
	before := freeBytes(t, mnt)
	if err := p.Clone(ctx, "templates/big", "sandboxes/a", pool.CloneOptions{}); err != nil {
		t.Fatal(err)
	}
	after := freeBytes(t, mnt)
	if used := before - after; used > 8<<20 {
		t.Fatalf("cloning 64 MiB used %d bytes; want shared extents (reflink)", used)
	}
}

func freeBytes(t *testing.T, path string) int64 {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bfree) * st.Bsize
}

// TestDirPoolReadOnlySurvivesReopen checks the reason for using the
// immutable flag instead of a read-only bind mount: a restarted daemon finds
// read-only datasets still read-only.
func TestDirPoolReadOnlySurvivesReopen(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	ctx := t.Context()
	p := openAt(t, dir)
	if err := p.Create(ctx, "templates/t"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.Path("templates/t"), "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.SetReadOnly(ctx, "templates/t", true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeAll(context.Background(), p.Path("templates/t")) })
	_ = p.Close()

	p2 := openAt(t, dir)
	err := os.WriteFile(filepath.Join(p2.Path("templates/t"), "f"), []byte("y"), 0o644)
	if !errors.Is(err, unix.EPERM) {
		t.Fatalf("write into a read-only dataset after reopen: got %v, want EPERM", err)
	}
}

// TestDirPoolOpenRemovesLeftovers checks that Open removes the temporaries
// and tombstones an interrupted Clone or Delete leaves, immutable or not.
func TestDirPoolOpenRemovesLeftovers(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	for _, p := range []string{"sandboxes/.tmp-a-1/x", "snapshots/.del-b-2/y/z", "sandboxes/keep"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := setImmutable(t.Context(), filepath.Join(dir, "snapshots/.del-b-2"), true); err != nil {
		t.Fatal(err)
	}
	p := openAt(t, dir)
	for _, leftover := range []string{"sandboxes/.tmp-a-1", "snapshots/.del-b-2"} {
		if _, err := os.Lstat(filepath.Join(dir, leftover)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survived Open: %v", leftover, err)
		}
	}
	if ok, err := p.Exists(t.Context(), "sandboxes/keep"); err != nil || !ok {
		t.Errorf("Open removed a dataset: %v %v", ok, err)
	}
}

func TestDirPoolCaps(t *testing.T) {
	p := openAt(t, t.TempDir())
	if c := p.Caps(); c.ConstantTimeClone || c.Quota {
		t.Fatalf("Caps = %+v, want neither constant-time clones nor quotas", c)
	}
	if p.Kind() != "dir" {
		t.Fatalf("Kind = %q", p.Kind())
	}
}

// mountXFS mounts a fresh sparse XFS image (reflink on) and unmounts it in
// cleanup; mount -o loop sets autoclear, so unmounting frees the loop device.
func mountXFS(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("mkfs.xfs"); err != nil {
		t.Fatalf("mkfs.xfs not found (install xfsprogs): %v", err)
	}
	tmp := t.TempDir()
	img, mnt := filepath.Join(tmp, "xfs.img"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(512 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if out, err := exec.Command("mkfs.xfs", "-q", "-m", "reflink=1", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount xfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		// Clear immutable flags a failed test may have left, then unmount.
		_ = setImmutable(context.Background(), mnt, false)
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount xfs: %v", err)
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
		}
		if out, _ := exec.Command("losetup", "-j", img).CombinedOutput(); len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("loop device leaked: %s", out)
		}
	})
	return mnt
}
