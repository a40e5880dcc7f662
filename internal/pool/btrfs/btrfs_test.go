package btrfs

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/pool/pooltest"
	"github.com/stead-dev/stead/internal/testutil"
)

const testImageSize = 1 << 30

// openImagePool opens a pool whose Dir is on the host file system (not
// btrfs), so Open goes through the loop image, and tears it down in cleanup.
func openImagePool(t testing.TB, tmp string) *Pool {
	t.Helper()
	return openImagePoolFull(t, tmp, false)
}

// openImagePoolFull is openImagePool with full qgroup accounting chosen for
// a new pool when full is set.
func openImagePoolFull(t testing.TB, tmp string, full bool) *Pool {
	t.Helper()
	p, err := Open(t.Context(), Options{
		Dir:         filepath.Join(tmp, "mnt"),
		Image:       filepath.Join(tmp, "pool.img"),
		ImageSize:   testImageSize,
		FullQgroups: full,
		Logger:      slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatalf("open btrfs pool: %v", err)
	}
	t.Cleanup(func() { unmountForCleanup(t, p) })
	return p
}

// unmountForCleanup unmounts and checks that no loop device is left; a busy
// mount is detached lazily so t.TempDir can still be removed.
func unmountForCleanup(t testing.TB, p *Pool) {
	t.Helper()
	if err := p.Unmount(context.Background()); err != nil {
		t.Errorf("unmount pool: %v", err)
		_ = unix.Unmount(p.dir, unix.MNT_DETACH)
	}
	if !p.managed {
		return
	}
	if _, err := os.Stat(p.image); err != nil {
		return
	}
	// A mount namespace being set up elsewhere on the machine (a sandbox
	// starting in a parallel test package) can hold a copy of the mount for
	// a moment; the autoclear loop device goes when it does.
	devs := losetupJ(t, p.image)
	for deadline := time.Now().Add(5 * time.Second); len(devs) > 0 && time.Now().Before(deadline); devs = losetupJ(t, p.image) {
		time.Sleep(50 * time.Millisecond)
	}
	if len(devs) > 0 {
		t.Errorf("loop devices leaked for %s: %v", p.image, devs)
		for _, d := range devs {
			_ = exec.Command("losetup", "-d", d).Run()
		}
	}
}

// losetupJ lists the loop devices attached to image, as losetup sees them.
func losetupJ(t testing.TB, image string) []string {
	t.Helper()
	out, err := exec.Command("losetup", "-j", image).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup -j: %v: %s", err, out)
	}
	var devs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if dev, _, ok := strings.Cut(line, ":"); ok {
			devs = append(devs, dev)
		}
	}
	return devs
}

func isMountpoint(t *testing.T, dir string) bool {
	t.Helper()
	m, err := mountAt(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m != nil
}

func TestIoctlABISizes(t *testing.T) {
	for name, c := range map[string][2]uintptr{
		"btrfs_ioctl_vol_args":           {unsafe.Sizeof(volArgs{}), 4096},
		"btrfs_ioctl_vol_args_v2":        {unsafe.Sizeof(volArgsV2{}), 4096},
		"btrfs_ioctl_search_args":        {unsafe.Sizeof(searchArgs{}), 4096},
		"btrfs_ioctl_search_key":         {unsafe.Sizeof(searchKey{}), 104},
		"btrfs_ioctl_ino_lookup_args":    {unsafe.Sizeof(inoLookupArgs{}), 4096},
		"btrfs_ioctl_quota_ctl_args":     {unsafe.Sizeof(quotaCtlArgs{}), 16},
		"btrfs_ioctl_qgroup_limit_args":  {unsafe.Sizeof(qgroupLimitArgs{}), 48},
		"btrfs_qgroup_inherit + 1 id":    {unsafe.Sizeof(qgroupInherit{}), 72 + 8},
		"btrfs_ioctl_qgroup_assign_args": {unsafe.Sizeof(qgroupAssignArgs{}), 24},
		"btrfs_ioctl_qgroup_create_args": {unsafe.Sizeof(qgroupCreateArgs{}), 16},
		"btrfs_ioctl_quota_rescan_args":  {unsafe.Sizeof(quotaRescanArgs{}), 64},
	} {
		if c[0] != c[1] {
			t.Errorf("sizeof(%s) = %d, want %d", name, c[0], c[1])
		}
	}
	// Request numbers as in linux/btrfs.h.
	for name, c := range map[string][2]uintptr{
		"SUBVOL_CREATE":     {ioctlSubvolCreate, 0x5000940e},
		"SNAP_DESTROY":      {ioctlSnapDestroy, 0x5000940f},
		"SNAP_CREATE_V2":    {ioctlSnapCreateV2, 0x50009417},
		"SUBVOL_GETFLAGS":   {ioctlSubvolGetFlags, 0x80089419},
		"SUBVOL_SETFLAGS":   {ioctlSubvolSetFlags, 0x4008941a},
		"QUOTA_CTL":         {ioctlQuotaCtl, 0xc0109428},
		"QGROUP_LIMIT":      {ioctlQgroupLimit, 0x8030942b},
		"TREE_SEARCH":       {ioctlTreeSearch, 0xd0009411},
		"INO_LOOKUP":        {ioctlInoLookup, 0xd0009412},
		"QUOTA_RESCAN_WAIT": {ioctlQuotaRescanWait, 0x942e},
		"SUBVOL_CREATE_V2":  {ioctlSubvolCreateV2, 0x50009418},
		"QGROUP_ASSIGN":     {ioctlQgroupAssign, 0x40189429},
		"QGROUP_CREATE":     {ioctlQgroupCreate, 0x4010942a},
		"QUOTA_RESCAN":      {ioctlQuotaRescan, 0x4040942c},
		"SPACE_INFO":        {ioctlSpaceInfo, 0xc0109414},
		"FS_INFO":           {ioctlFSInfo, 0x8400941f},
	} {
		if c[0] != c[1] {
			t.Errorf("BTRFS_IOC_%s = %#x, want %#x", name, c[0], c[1])
		}
	}
}

func TestBtrfsPoolOnLoopImagePassesContract(t *testing.T) {
	testutil.RequireRoot(t)
	pooltest.Run(t, func(t *testing.T) pool.Pool {
		p := openImagePool(t, t.TempDir())
		if !p.managed {
			t.Fatal("pool on a non-btrfs dir did not mount its image")
		}
		if !p.Caps().Quota {
			t.Fatal("quotas were not enabled")
		}
		return p
	})
}

// TestBtrfsCloneIsSubvolumeSnapshot proves Clone is O(1) without timing it:
// the clone is a subvolume of its own (root inode 256, new subvolume id) and
// shares every extent with its source (its exclusive usage is tiny).
func TestBtrfsCloneIsSubvolumeSnapshot(t *testing.T) {
	testutil.RequireRoot(t)
	for _, full := range []bool{false, true} {
		t.Run(map[bool]string{false: "simple-quotas", true: "full-qgroups"}[full], func(t *testing.T) {
			testCloneIsSubvolumeSnapshot(t, full)
		})
	}
}

func testCloneIsSubvolumeSnapshot(t *testing.T, full bool) {
	p := openImagePoolFull(t, t.TempDir(), full)
	if p.SimpleQuota() == full {
		t.Fatalf("pool opened with FullQgroups=%t has simple quotas=%t", full, p.SimpleQuota())
	}
	ctx := t.Context()
	pooltest.BigTemplate(t, p, "templates/big")
	for _, ro := range []bool{false, true} {
		dst := "sandboxes/rw"
		if ro {
			dst = "snapshots/ro"
		}
		start := time.Now()
		if err := p.Clone(ctx, "templates/big", dst, pool.CloneOptions{ReadOnly: ro}); err != nil {
			t.Fatal(err)
		}
		t.Logf("clone of 64 MiB (read-only %t) took %v", ro, time.Since(start)) // informative, never asserted
		var sst, dstt unix.Stat_t
		if err := unix.Stat(p.Path("templates/big"), &sst); err != nil {
			t.Fatal(err)
		}
		if err := unix.Stat(p.Path(dst), &dstt); err != nil {
			t.Fatal(err)
		}
		if dstt.Ino != firstFreeObjectID {
			t.Errorf("%s root inode %d, want %d (a subvolume root)", dst, dstt.Ino, firstFreeObjectID)
		}
		if dstt.Dev == sst.Dev {
			t.Errorf("%s shares st_dev with its source: not a separate subvolume", dst)
		}
		sid, did := subvolIDOf(t, p.Path("templates/big")), subvolIDOf(t, p.Path(dst))
		if sid == did || did < firstFreeObjectID {
			t.Errorf("subvolume ids: source %d, clone %d", sid, did)
		}
		flags := subvolFlagsOf(t, p.Path(dst))
		if got := flags&subvolRdonly != 0; got != ro {
			t.Errorf("%s read-only flag = %t, want %t", dst, got, ro)
		}
		u, err := p.Usage(ctx, dst)
		if err != nil {
			t.Fatal(err)
		}
		if u > 1<<20 {
			t.Errorf("%s exclusive usage %d bytes after cloning 64 MiB; want shared extents", dst, u)
		}
	}
	u, err := p.Usage(ctx, "templates/big")
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case full && u > 1<<20:
		t.Errorf("source exclusive usage %d bytes; its extents should be shared with the clones", u)
	case !full && u < 64<<20:
		// Simple quotas charge an extent to the subvolume that wrote it,
		// for as long as it exists: the template keeps its 64 MiB.
		t.Errorf("source usage %d bytes under simple quotas; want the 64 MiB it wrote", u)
	}
}

// TestBtrfsUnsharedCloneIsASubvolumeOfItsOwnWithSharedData: an unshared
// clone is no snapshot (no parent UUID, so snapshots of it add no
// reference to its source's tree), while its files' data is reflinked
// (its exclusive usage stays small beside a 64 MiB file); a plain clone
// names its source as its parent.
func TestBtrfsUnsharedCloneIsASubvolumeOfItsOwnWithSharedData(t *testing.T) {
	testutil.RequireRoot(t)
	p := openImagePool(t, t.TempDir())
	ctx := t.Context()
	data := pooltest.BigTemplate(t, p, "templates/big")
	if err := p.Clone(ctx, "templates/big", "sandboxes/snap", pool.CloneOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := p.Clone(ctx, "templates/big", "sandboxes/copy", pool.CloneOptions{Unshared: true}); err != nil {
		t.Fatal(err)
	}
	info := func(name string) subvolInfo { return onSubvol(t, p.Path(name), getSubvolInfo) }
	src, snap, cp := info("templates/big"), info("sandboxes/snap"), info("sandboxes/copy")
	if snap.parentUUID != src.uuid {
		t.Fatalf("a plain clone's parent UUID %x, want its source's %x", snap.parentUUID, src.uuid)
	}
	if cp.parentUUID != ([16]byte{}) || cp.uuid == src.uuid {
		t.Fatalf("an unshared clone has parent UUID %x (uuid %x, source %x): want none", cp.parentUUID, cp.uuid, src.uuid)
	}
	if u, err := p.Usage(ctx, "sandboxes/copy"); err != nil || u > 1<<20 {
		t.Fatalf("unshared clone's exclusive usage %d bytes (%v) after copying 64 MiB: want the data reflinked", u, err)
	}
	if got, err := os.ReadFile(filepath.Join(p.Path("sandboxes/copy"), "blob")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("unshared clone's blob differs (%v)", err)
	}
	if _, err := os.Lstat(filepath.Join(p.Path("sandboxes/copy"), unsharedTmp)); !os.IsNotExist(err) {
		t.Fatalf("the copy's build directory is left: %v", err)
	}
}

func subvolIDOf(t *testing.T, path string) uint64 { return onSubvol(t, path, subvolID) }

func subvolFlagsOf(t *testing.T, path string) uint64 { return onSubvol(t, path, subvolGetFlags) }

// onSubvol is what read returns for the directory at path.
func onSubvol[T any](t *testing.T, path string, read func(fd int) (T, error)) T {
	t.Helper()
	fd, err := openDir(path)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	v, err := read(fd)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestBtrfsReopenReusesMountedImage is a daemon restart while sandboxes run:
// the second Open finds the image mounted and attaches nothing.
func TestBtrfsReopenReusesMountedImage(t *testing.T) {
	testutil.RequireRoot(t)
	tmp := t.TempDir()
	p := openImagePool(t, tmp)
	ctx := t.Context()
	if err := p.Create(ctx, "sandboxes/running"); err != nil {
		t.Fatal(err)
	}
	devs := losetupJ(t, p.image)
	if len(devs) != 1 {
		t.Fatalf("loop devices for the image after Open: %v, want one", devs)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !isMountpoint(t, p.dir) {
		t.Fatal("Close unmounted the pool")
	}

	p2 := openImagePool(t, tmp)
	if got := losetupJ(t, p.image); len(got) != 1 || got[0] != devs[0] {
		t.Fatalf("loop devices after re-open: %v, want %v", got, devs)
	}
	if !p2.managed {
		t.Fatal("re-opened pool does not know it owns the mount")
	}
	if ok, err := p2.Exists(ctx, "sandboxes/running"); err != nil || !ok {
		t.Fatalf("dataset lost across re-open: %v %v", ok, err)
	}
	ms, err := readMounts()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		if m.mountpoint == p.dir {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d mounts at %s after re-open, want 1", n, p.dir)
	}
}

// TestBtrfsReopenReusesAttachedLoopDevice is a crash between attach and
// mount (or a device attached by hand without autoclear): Open mounts from
// that device instead of leaking another, and Unmount frees it.
func TestBtrfsReopenReusesAttachedLoopDevice(t *testing.T) {
	testutil.RequireRoot(t)
	tmp := t.TempDir()
	p := openImagePool(t, tmp)
	if err := p.Create(t.Context(), "sandboxes/kept"); err != nil {
		t.Fatal(err)
	}
	if err := p.Unmount(t.Context()); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", p.image).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })

	p2 := openImagePool(t, tmp)
	if got := losetupJ(t, p.image); len(got) != 1 || got[0] != dev {
		t.Fatalf("loop devices after re-open: %v, want [%s]", got, dev)
	}
	if ok, err := p2.Exists(t.Context(), "sandboxes/kept"); err != nil || !ok {
		t.Fatalf("dataset lost across re-open: %v %v", ok, err)
	}
	if err := p2.Unmount(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := losetupJ(t, p.image); len(got) != 0 {
		t.Fatalf("loop devices after Unmount: %v, want none", got)
	}
}

func TestBtrfsUnmountFreesLoopDevice(t *testing.T) {
	testutil.RequireRoot(t)
	tmp := t.TempDir()
	p := openImagePool(t, tmp)
	if len(losetupJ(t, p.image)) != 1 {
		t.Fatal("no loop device after Open")
	}
	if err := p.Unmount(t.Context()); err != nil {
		t.Fatal(err)
	}
	if isMountpoint(t, p.dir) {
		t.Fatal("pool still mounted after Unmount")
	}
	if got := losetupJ(t, p.image); len(got) != 0 {
		t.Fatalf("loop devices after Unmount: %v, want none", got)
	}
	if err := p.Unmount(t.Context()); err != nil {
		t.Fatalf("second Unmount: %v", err)
	}
	// The image keeps its data: a new Open mounts it again.
	p2 := openImagePool(t, tmp)
	if !isMountpoint(t, p2.dir) {
		t.Fatal("re-open after Unmount did not mount")
	}
}

// TestBtrfsOpenUsesDirOnBtrfsDirectly: a Dir already on btrfs needs no
// image, attaches no loop device, and Unmount leaves it alone.
func TestBtrfsOpenUsesDirOnBtrfsDirectly(t *testing.T) {
	testutil.RequireRoot(t)
	outer := openImagePool(t, t.TempDir())
	devs := losetupJ(t, outer.image)
	inner, err := Open(t.Context(), Options{
		Dir:    filepath.Join(outer.dir, "nested", "pool"),
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if inner.managed {
		t.Fatal("pool on a btrfs dir claims to own a mount")
	}
	if err := inner.Create(t.Context(), "sandboxes/a"); err != nil {
		t.Fatal(err)
	}
	if err := inner.Clone(t.Context(), "sandboxes/a", "snapshots/a", pool.CloneOptions{ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	if err := inner.Unmount(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !isMountpoint(t, outer.dir) {
		t.Fatal("Unmount of a pool on a btrfs dir unmounted the file system")
	}
	if got := losetupJ(t, outer.image); len(got) != len(devs) {
		t.Fatalf("loop devices %v, want %v", got, devs)
	}
}

func TestBtrfsOpenRefusesDirWithoutBtrfsOrImage(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := Open(t.Context(), Options{Dir: t.TempDir()})
	if !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("Open of a non-btrfs dir without an image: %v, want ErrInvalid", err)
	}
}

func TestBtrfsOpenRefusesToFormatForeignImage(t *testing.T) {
	testutil.RequireRoot(t)
	tmp := t.TempDir()
	img := filepath.Join(tmp, "pool.img")
	junk := make([]byte, 1<<20)
	for i := range junk {
		junk[i] = 0xa5
	}
	if err := os.WriteFile(img, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(t.Context(), Options{Dir: filepath.Join(tmp, "mnt"), Image: img, ImageSize: testImageSize})
	if !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("Open over a non-btrfs image: %v, want ErrInvalid", err)
	}
	if got := losetupJ(t, img); len(got) != 0 {
		t.Fatalf("failed Open leaked loop devices %v", got)
	}
}

// TestBtrfsDeleteRemovesNestedSubvolumes: a sandbox that made subvolumes of
// its own (inside a read-only snapshot, even) is still deleted whole.
func TestBtrfsDeleteRemovesNestedSubvolumes(t *testing.T) {
	testutil.RequireRoot(t)
	p := openImagePool(t, t.TempDir())
	ctx := t.Context()
	if err := p.Create(ctx, "sandboxes/outer"); err != nil {
		t.Fatal(err)
	}
	root := p.Path("sandboxes/outer")
	if err := os.MkdirAll(filepath.Join(root, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(dir, name string) {
		t.Helper()
		fd, err := openDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if err := subvolCreate(fd, name); err != nil {
			t.Fatalf("create nested subvolume %s/%s: %v", dir, name, err)
		}
	}
	mk(filepath.Join(root, "a/b"), "nested")
	mk(filepath.Join(root, "a/b/nested"), "deeper")
	if err := os.WriteFile(filepath.Join(root, "a/b/nested/deeper/f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.SetReadOnly(ctx, "sandboxes/outer", true); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, "sandboxes/outer"); err != nil {
		t.Fatalf("delete dataset with nested subvolumes: %v", err)
	}
	if _, err := os.Lstat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dataset still there: %v", err)
	}
}

// BenchmarkBtrfsClone measures Clone of a settled template (its data
// already committed), the case the daemon meets when it starts a sandbox.
func BenchmarkBtrfsClone(b *testing.B) {
	testutil.RequireRoot(b)
	p := openImagePool(b, b.TempDir())
	ctx := b.Context()
	if err := p.Create(ctx, "templates/t"); err != nil {
		b.Fatal(err)
	}
	for i := range 256 {
		name := filepath.Join(p.Path("templates/t"), "f"+strconv.Itoa(i))
		if err := os.WriteFile(name, make([]byte, 64<<10), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := p.Usage(ctx, "templates/t"); err != nil { // syncs
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		if err := p.Clone(ctx, "templates/t", "sandboxes/s"+strconv.Itoa(i), pool.CloneOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestPoolIsMountedNosuidNodevAndClosedToOtherUsers(t *testing.T) {
	testutil.RequireRoot(t)
	p := openImagePool(t, t.TempDir())
	ctx := context.Background()
	if err := p.Create(ctx, "sandboxes/sb-x"); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(p.Path("sandboxes/sb-x"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Flags&unix.ST_NOSUID == 0 || st.Flags&unix.ST_NODEV == 0 {
		t.Fatalf("pool mount flags %#x lack nosuid/nodev", st.Flags)
	}
	fi, err := os.Stat(filepath.Dir(p.Path("sandboxes/sb-x")))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("kind dir mode %v, want 0700", fi.Mode().Perm())
	}
}

// qgroupShow runs `btrfs qgroup show` (an independent reader of the quota
// tree) and returns each qgroup's parents, and whether btrfs-progs says
// the accounting is inconsistent.
func qgroupShow(t *testing.T, dir string) (parents map[string]string, inconsistent bool) {
	t.Helper()
	cmd := exec.Command("btrfs", "qgroup", "show", "-p", "--raw", dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("btrfs qgroup show: %v: %s", err, stderr.String())
	}
	parents = map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && strings.Contains(f[0], "/") && f[0] != "Qgroupid" {
			parents[f[0]] = f[3]
		}
	}
	return parents, strings.Contains(stderr.String(), "inconsistent")
}

// TestBtrfsDatasetsJoinThePoolQgroupWithoutRescan: every dataset, made by
// Create or by Clone (writable or read-only, from a template or from a
// sandbox), is a member of qgroup 1/100 from its first transaction, and
// the accounting stays consistent (no rescan needed), so the pool-wide
// limit counts every byte.
func TestBtrfsDatasetsJoinThePoolQgroupWithoutRescan(t *testing.T) {
	testutil.RequireRoot(t)
	p := openImagePool(t, t.TempDir())
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.Create(ctx, "templates/t"))
	must(os.WriteFile(filepath.Join(p.Path("templates/t"), "base"), make([]byte, 16<<20), 0o644))
	start := time.Now()
	must(p.Clone(ctx, "templates/t", "sandboxes/a", pool.CloneOptions{}))
	t.Logf("clone into the group: %v", time.Since(start)) // informative
	must(os.WriteFile(filepath.Join(p.Path("sandboxes/a"), "own"), make([]byte, 8<<20), 0o644))
	must(p.Clone(ctx, "sandboxes/a", "snapshots/s", pool.CloneOptions{ReadOnly: true}))
	must(p.Clone(ctx, "snapshots/s", "sandboxes/b", pool.CloneOptions{}))
	must(p.Create(ctx, "volumes/v"))
	parents, inconsistent := qgroupShow(t, p.dir)
	if inconsistent {
		t.Fatal("qgroup accounting is inconsistent after clones: the group's numbers would need a rescan")
	}
	for _, name := range []string{"templates/t", "sandboxes/a", "snapshots/s", "sandboxes/b", "volumes/v"} {
		fd, err := openDir(p.Path(name))
		must(err)
		id, err := subvolID(fd)
		unix.Close(fd)
		must(err)
		if got := parents["0/"+strconv.FormatUint(id, 10)]; got != "1/100" {
			t.Errorf("%s (0/%d): parent %q, want 1/100", name, id, got)
		}
	}
	c, err := p.Capacity(ctx)
	must(err)
	if c.DatasetsBytes < 24<<20 {
		t.Fatalf("the group accounts %d bytes, want at least the 24 MiB written", c.DatasetsBytes)
	}
}

// TestBtrfsOpenAddsOlderDatasetsToThePoolQgroup: subvolumes made before
// the group existed (an older stead) join it at the next Open, and a
// rescan makes its numbers right.
func TestBtrfsOpenAddsOlderDatasetsToThePoolQgroup(t *testing.T) {
	testutil.RequireRoot(t)
	tmp := t.TempDir()
	p := openImagePool(t, tmp)
	for _, name := range []string{"sandboxes/old", "volumes/old"} {
		kind, id := split(name)
		dir, err := p.kindDir(kind)
		if err != nil {
			t.Fatal(err)
		}
		err = subvolCreate(dir, id) // outside the group, as an older stead made it
		unix.Close(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p.Path(name), "data"), make([]byte, 16<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	syncDir(t, p.dir)
	p2 := openImagePool(t, tmp)
	parents, inconsistent := qgroupShow(t, p2.dir)
	if inconsistent {
		t.Fatal("accounting inconsistent after Open assigned older datasets")
	}
	n := 0
	for _, parent := range parents {
		if parent == "1/100" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d subvolumes in 1/100, want 2: %v", n, parents)
	}
	c, err := p2.Capacity(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if c.DatasetsBytes < 32<<20 || c.LimitBytes != c.SizeBytes-c.ReserveBytes {
		t.Fatalf("capacity after the rescan: %+v", c)
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	fd, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		t.Fatal(err)
	}
}

// TestBtrfsOpenSizesAndBoundsNewImages: a new image larger than the free
// space where it goes is refused (and leaves nothing behind); the reserve
// and the default size follow their rules.
func TestBtrfsOpenSizesAndBoundsNewImages(t *testing.T) {
	testutil.RequireRoot(t)
	tmp := t.TempDir()
	_, err := Open(t.Context(), Options{Dir: filepath.Join(tmp, "mnt"), Image: filepath.Join(tmp, "pool.img"), ImageSize: 1 << 60,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("Open with a 1 EiB image: %v, want ErrInvalid (does not fit)", err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "pool.img")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused image was left behind: %v", err)
	}
	if _, err := Open(t.Context(), Options{Dir: filepath.Join(tmp, "mnt"), Image: filepath.Join(tmp, "pool.img"), Reserve: -1}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("negative reserve: %v", err)
	}
	for _, c := range []struct {
		size  int64
		mixed bool
	}{{1 << 30, true}, {9 << 30, true}, {10 << 30, false}, {100 << 30, false}} {
		args := strings.Join(mkfsArgs(c.size, "img"), " ")
		if strings.Contains(args, "--mixed") != c.mixed || !strings.Contains(args, "-m single") {
			t.Errorf("mkfs args for %d bytes: %s", c.size, args)
		}
	}
	for _, c := range []struct{ free, want int64 }{
		{0, MinImageSize},
		{4 << 30, MinImageSize},
		{79<<30 + 123, 39 << 30},
		{1 << 40, 512 << 30},
	} {
		if got := DefaultImageSize(c.free); got != c.want {
			t.Errorf("DefaultImageSize(%d) = %d, want %d", c.free, got, c.want)
		}
	}
	for _, c := range []struct{ size, want int64 }{
		{1 << 30, 512 << 20},
		{2 << 30, 512 << 20},
		{8 << 30, 8 << 30 / 10},
		{100 << 30, 10 << 30},
		{256 << 20, 128 << 20},
	} {
		if got := pool.DefaultReserve(c.size); got != c.want {
			t.Errorf("DefaultReserve(%d) = %d, want %d", c.size, got, c.want)
		}
	}
	// A pool with a reserve of its own enforces it.
	p, err := Open(t.Context(), Options{Dir: filepath.Join(tmp, "mnt"), Image: filepath.Join(tmp, "pool.img"), ImageSize: testImageSize, Reserve: 300 << 20,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmountForCleanup(t, p) })
	c, err := p.Capacity(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if c.SizeBytes != testImageSize || c.ReserveBytes != 300<<20 || c.LimitBytes != testImageSize-300<<20 {
		t.Fatalf("capacity %+v", c)
	}
	if dup, err := metadataDup(mustOpenDir(t, p.dir)); err != nil || dup {
		t.Fatalf("new image has DUP metadata (%v): the qgroups would count half of it", err)
	}
	// Reclaim of data block groups is on (the btrfs CLI names the same
	// file system id).
	uuid, err := fsUUID(mustOpenDir(t, p.dir))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("btrfs", "filesystem", "show", p.dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), uuid) {
		t.Fatalf("fs id %s not in btrfs filesystem show: %v %s", uuid, err, out)
	}
	for _, knob := range []string{"dynamic_reclaim", "periodic_reclaim"} {
		b, err := os.ReadFile(filepath.Join("/sys/fs/btrfs", uuid, "allocation", "mixed", knob)) // a 1 GiB image: mixed block groups
		if err != nil || strings.TrimSpace(string(b)) != "1" {
			t.Errorf("%s: %q %v", knob, b, err)
		}
	}
}

func mustOpenDir(t *testing.T, dir string) int {
	t.Helper()
	fd, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// TestBtrfsDestroyRemovesDatasetsImageAndLoopDevice: Destroy of a mounted
// image pool with a read-only snapshot leaves no mount, no loop device and
// no image; Destroy of a pool that is not mounted formats nothing.
func TestBtrfsDestroyRemovesDatasetsImageAndLoopDevice(t *testing.T) {
	testutil.RequireRoot(t)
	tmp := t.TempDir()
	ctx := t.Context()
	p, err := Open(ctx, Options{Dir: filepath.Join(tmp, "mnt"), Image: filepath.Join(tmp, "pool.img"), ImageSize: testImageSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(p.dir, unix.MNT_DETACH) })
	if err := p.Create(ctx, "sandboxes/a"); err != nil {
		t.Fatal(err)
	}
	if err := p.Clone(ctx, "sandboxes/a", "snapshots/s", pool.CloneOptions{ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	if err := Destroy(ctx, Options{Dir: p.dir, Image: p.image}); err != nil {
		t.Fatal(err)
	}
	if isMountpoint(t, p.dir) {
		t.Fatal("pool still mounted after Destroy")
	}
	if _, err := os.Stat(p.image); !os.IsNotExist(err) {
		t.Fatalf("image left: %v", err)
	}
	if left := testutil.LoopDevicesLeft(p.image); len(left) > 0 {
		t.Fatalf("loop devices left for the image after 10 s: %v", left)
	}
	if err := os.RemoveAll(p.dir); err != nil {
		t.Fatalf("the pool dir cannot be removed: %v", err)
	}
	// Nothing mounted, no image: nothing is made.
	if err := Destroy(ctx, Options{Dir: p.dir, Image: p.image}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.image); !os.IsNotExist(err) {
		t.Fatalf("Destroy made an image: %v", err)
	}
}

// TestBtrfsSimpleQuotaChargesTheWriter: under simple quotas a clone starts
// at ~0 bytes, is charged what it writes, is stopped with EDQUOT at its
// limit, and keeps the charge for extents that a snapshot still holds after
// it deleted them (they are freed, and uncharged, with the snapshot).
func TestBtrfsSimpleQuotaChargesTheWriter(t *testing.T) {
	testutil.RequireRoot(t)
	p := openImagePool(t, t.TempDir())
	if !p.SimpleQuota() {
		t.Fatal("a new pool has full qgroups; want simple quotas (kernel 6.7 or later)")
	}
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.Create(ctx, "templates/t"))
	must(os.WriteFile(filepath.Join(p.Path("templates/t"), "base"), make([]byte, 32<<20), 0o644))
	must(p.Clone(ctx, "templates/t", "sandboxes/a", pool.CloneOptions{}))
	usage := func(name string) int64 {
		t.Helper()
		u, err := p.Usage(ctx, name)
		must(err)
		return u
	}
	if u := usage("sandboxes/a"); u > 1<<20 {
		t.Fatalf("a fresh clone is charged %d bytes; want ~0 (the template owns its extents)", u)
	}
	must(os.WriteFile(filepath.Join(p.Path("sandboxes/a"), "own"), make([]byte, 8<<20), 0o644))
	if u := usage("sandboxes/a"); u < 8<<20 || u > 9<<20 {
		t.Fatalf("after writing 8 MiB the clone is charged %d bytes", u)
	}
	must(p.SetQuota(ctx, "sandboxes/a", 16<<20))
	err := os.WriteFile(filepath.Join(p.Path("sandboxes/a"), "big"), make([]byte, 32<<20), 0o644)
	if !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("writing 32 MiB past a 16 MiB quota: %v, want EDQUOT", err)
	}
	must(os.Remove(filepath.Join(p.Path("sandboxes/a"), "big")))
	must(p.Clone(ctx, "sandboxes/a", "snapshots/s", pool.CloneOptions{ReadOnly: true}))
	must(os.Remove(filepath.Join(p.Path("sandboxes/a"), "own")))
	if u := usage("sandboxes/a"); u < 8<<20 {
		t.Fatalf("deleting a file a snapshot holds uncharged the clone to %d bytes; simple quotas keep the charge while the extent lives", u)
	}
	must(p.Delete(ctx, "snapshots/s"))
	// The cleaner frees a deleted subvolume's extents in the background;
	// wait for it as `btrfs subvolume sync` does.
	if out, err := exec.Command("btrfs", "subvolume", "sync", p.dir).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume sync: %v: %s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for usage("sandboxes/a") > 1<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("the clone is still charged %d bytes after the snapshot holding its extents was deleted", usage("sandboxes/a"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBtrfsPoolWithFullQgroupsKeepsItsMode: a pool made with full qgroup
// accounting (an older stead) reopens with full accounting and working
// quotas; the mode is never switched under existing datasets.
func TestBtrfsPoolWithFullQgroupsKeepsItsMode(t *testing.T) {
	testutil.RequireRoot(t)
	tmp := t.TempDir()
	p := openImagePoolFull(t, tmp, true)
	if p.SimpleQuota() || !p.Caps().Quota {
		t.Fatalf("pool with FullQgroups: simple=%t quota=%t", p.SimpleQuota(), p.Caps().Quota)
	}
	ctx := t.Context()
	if err := p.Create(ctx, "sandboxes/x"); err != nil {
		t.Fatal(err)
	}
	p2 := openImagePool(t, tmp)
	if p2.SimpleQuota() || !p2.Caps().Quota {
		t.Fatalf("reopened full-qgroup pool: simple=%t quota=%t; want full accounting kept", p2.SimpleQuota(), p2.Caps().Quota)
	}
	if err := p2.SetQuota(ctx, "sandboxes/x", 4<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p2.Path("sandboxes/x"), "big"), make([]byte, 16<<20), 0o644); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("write past the quota on the reopened pool: %v, want EDQUOT", err)
	}
}

// TestBtrfsUsagesMatchesUsageInOneWalk: the one-pass usage of many
// datasets (more than one tree-search buffer of qgroup items) equals
// Usage for each, and leaves out names that do not exist.
func TestBtrfsUsagesMatchesUsageInOneWalk(t *testing.T) {
	testutil.RequireRoot(t)
	p := openImagePool(t, t.TempDir())
	ctx := t.Context()
	var names []string
	for i := range 90 {
		name := "sandboxes/s" + strconv.Itoa(i)
		if err := p.Create(ctx, name); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p.Path(name), "f"), make([]byte, (i%5+1)<<18), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	got, err := p.Usages(ctx, append(names, "sandboxes/missing"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(names) {
		t.Fatalf("Usages returned %d datasets, want %d (the missing one left out)", len(got), len(names))
	}
	for i, name := range names {
		want, err := p.Usage(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got[name] != want || want < int64(i%5+1)<<18 {
			t.Errorf("%s: Usages %d, Usage %d, wrote %d", name, got[name], want, (i%5+1)<<18)
		}
	}
}

// commits reads how many transactions the pool's file system committed
// (sysfs commit_stats, kernel >= 6.0).
func commits(t *testing.T, p *Pool) int {
	t.Helper()
	fd := mustOpenDir(t, p.dir)
	defer unix.Close(fd)
	uuid, err := fsUUID(fd)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("/sys/fs/btrfs", uuid, "commit_stats"))
	if err != nil {
		// A failure, not a skip: the host kernels stead supports (6.x)
		// all have commit_stats, and a skip would hide the check in CI.
		t.Fatalf("read btrfs commit_stats (kernel 6.0 or later): %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "commits "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no commits line in commit_stats: %q", b)
	return 0
}

// TestBtrfsRenameUnsyncedCommitsNoTransaction: RenameUnsynced of a
// subvolume leaves the change to the next commit, where Rename's fsync
// commits the transaction (what the spares of internal/sandbox save on
// every create: a commit costs more the more subvolumes the pool holds).
func TestBtrfsRenameUnsyncedCommitsNoTransaction(t *testing.T) {
	testutil.RequireRoot(t)
	p := openImagePool(t, t.TempDir())
	ctx := t.Context()
	if err := p.Create(ctx, "templates/t"); err != nil {
		t.Fatal(err)
	}
	clone := func(name string) {
		t.Helper()
		if err := p.Clone(ctx, "templates/t", name, pool.CloneOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The periodic commit (every 30 s) may fall between two reads: one
	// more try tells it from a commit of the rename's.
	for try := 0; ; try++ {
		spare := "sandboxes/spare-a" + strconv.Itoa(try)
		clone(spare) // a snapshot commits: nothing is pending after it
		before := commits(t, p)
		if err := p.RenameUnsynced(ctx, spare, "sandboxes/sb-a"+strconv.Itoa(try)); err != nil {
			t.Fatal(err)
		}
		if got := commits(t, p); got != before {
			if try == 0 {
				continue
			}
			t.Fatalf("RenameUnsynced committed %d transactions", got-before)
		}
		break
	}
	clone("sandboxes/spare-b")
	before := commits(t, p)
	if err := p.Rename(ctx, "sandboxes/spare-b", "sandboxes/sb-b"); err != nil {
		t.Fatal(err)
	}
	if got := commits(t, p); got == before {
		t.Fatal("Rename committed no transaction: is it durable on return?")
	}
}

// TestBtrfsReopenAfterThePoolDirWasUnmountedWhileBusy: the pool dir is
// unmounted (lazily, by hand) while something still uses the file system
// (here an open file; in life a running sandbox's root), so its loop
// device stays. The next Open mounts the same device again and finds the
// data; it used to wait forever for the image lock the loop device held.
func TestBtrfsReopenAfterThePoolDirWasUnmountedWhileBusy(t *testing.T) {
	testutil.RequireRoot(t)
	tmp := t.TempDir()
	p := openImagePool(t, tmp)
	ctx := t.Context()
	if err := p.Create(ctx, "sandboxes/running"); err != nil {
		t.Fatal(err)
	}
	busy, err := os.Create(filepath.Join(p.Path("sandboxes/running"), "open"))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(p.dir, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if devs := losetupJ(t, p.image); len(devs) != 1 {
		t.Fatalf("loop devices of the busy, unmounted image: %v, want one", devs)
	}
	octx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	p2, err := Open(octx, Options{Dir: p.dir, Image: p.image, ImageSize: testImageSize,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatalf("open the pool again: %v", err)
	}
	busy.Close()
	t.Cleanup(func() { unmountForCleanup(t, p2) })
	if ok, err := p2.Exists(ctx, "sandboxes/running"); err != nil || !ok {
		t.Fatalf("dataset after the re-open: %v %v", ok, err)
	}
}

// TestBtrfsOpenGoesOnWhenTheImageLockIsHeldByItsLoopDevice: a stead before
// this one locked the image on the descriptor it gave the loop device, so
// the lock lives as long as the device. Open waits a while, sees the
// device, and goes on instead of waiting forever.
func TestBtrfsOpenGoesOnWhenTheImageLockIsHeldByItsLoopDevice(t *testing.T) {
	testutil.RequireRoot(t)
	tmp := t.TempDir()
	p := openImagePool(t, tmp)
	ctx := t.Context()
	if err := p.Create(ctx, "sandboxes/kept"); err != nil {
		t.Fatal(err)
	}
	if err := p.Unmount(ctx); err != nil {
		t.Fatal(err)
	}
	// What an earlier stead left: a loop device holding the locked file.
	f, err := os.OpenFile(p.image, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	dev, hold, err := attachLoop(ctx, p.image, int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev.path).Run() })
	octx, cancel := context.WithTimeout(ctx, legacyLockWait+20*time.Second)
	defer cancel()
	p2, err := Open(octx, Options{Dir: p.dir, Image: p.image, ImageSize: testImageSize,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	unix.Close(hold)
	if err != nil {
		t.Fatalf("open the pool with its lock held by the loop device: %v", err)
	}
	t.Cleanup(func() { unmountForCleanup(t, p2) })
	if ok, err := p2.Exists(ctx, "sandboxes/kept"); err != nil || !ok {
		t.Fatalf("dataset after the open: %v %v", ok, err)
	}
}
