// Package btrfs implements pool.Pool on btrfs. Every dataset is a subvolume
// at <Dir>/<kind>/<id>; Clone is a subvolume snapshot (O(1), read-only when
// asked), SetReadOnly flips the subvolume's read-only property, and quotas
// are qgroup limits on the subvolume's exclusive bytes.
//
// When Dir is not on btrfs the pool lives in a sparse image file that Open
// formats, attaches to a loop device (LO_FLAGS_AUTOCLEAR, so unmounting frees
// the device) and mounts at Dir. The mount outlives the daemon on purpose:
// running sandboxes keep their roots there, and the next Open finds the
// mount and reuses it.
//
// Capacity. Every dataset subvolume is a member of one level-1 qgroup,
// 1/100 (GroupQgroup), whose exclusive bytes are limited to the file
// system's size less a reserve (Options.Reserve, default
// pool.DefaultReserve: 10%, at least 512 MiB). All datasets together can
// therefore never take the last bytes of the file system: when they reach
// the limit, writes into any of them fail with EDQUOT, while subvolume
// creation, snapshots and deletion (charged to the top-level subvolume,
// which is outside the group) and whatever else lives on the file system
// (the daemon's database when the data dir is on this btrfs) keep working.
// Subvolumes join the group as they are made (BTRFS_SUBVOL_QGROUP_INHERIT
// on BTRFS_IOC_SUBVOL_CREATE_V2 and BTRFS_IOC_SNAP_CREATE_V2); templates
// and snapshots are members too, so that the group owns every extent it
// shares and a clone's accounting is updated at once, without the rescan
// that btrfs needs when a member is cloned from a non-member. Open assigns
// subvolumes made by an older stead (BTRFS_IOC_QGROUP_ASSIGN), rescans
// once if it did, and sets the group's limit (BTRFS_IOC_QGROUP_LIMIT) from
// the current size, so a grown image gets a grown limit.
//
// Quota modes. A new pool gets btrfs simple quotas (squota: kernel >= 6.7,
// BTRFS_IOC_QUOTA_CTL with BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA, since
// bookworm's btrfs-progs 6.2 has no `quota enable --simple`). Full qgroup
// accounting works out which subvolumes share every extent a transaction
// touched, and a snapshot's cost grows with the number of subvolumes (the
// clone of a create took 4.6 ms with 1 sandbox and 87 ms with 300); simple
// quotas charge each extent to the subvolume that allocated it, for as long
// as the extent exists, and a snapshot costs the same at any pool size.
// What a dataset's quota and Usage mean changes with it:
//
//   - a clone starts at ~0 bytes: the template's extents stay charged to
//     the template, however many sandboxes share them (as with full
//     qgroups, where they were shared, not exclusive);
//   - a dataset is charged what it wrote and still exists anywhere: a file
//     it deletes while a snapshot or a fork still holds the data stays
//     charged to it until that holder is deleted too (full qgroups counted
//     only what the dataset alone held, so the snapshot took the charge);
//   - data a fork or a rollback shares with its origin stays charged to the
//     origin's qgroup, also after the origin is deleted (a deleted
//     subvolume's qgroup keeps its charge, inside GroupQgroup, until its
//     last extent is freed): the pool-wide limit still counts every byte.
//
// A pool whose quotas are on already keeps its mode: switching a live pool
// would drop every qgroup and its limit, and simple quotas do not charge
// extents written before they were enabled. So a pool made with full
// qgroups (an older stead) keeps working as it did, with a log line at Open
// that says its clones slow down as datasets accumulate; to get flat
// creates, make a new pool and move the sandboxes there by push and
// restore. Options.FullQgroups chooses full accounting for a new pool (for
// measurements), and a kernel without simple quotas falls back to it.
//
// A new image is sized from the free space of the file system that holds
// it (Options.ImageSize 0: half of it, at least 5 GiB; Incus sizes its
// loop pools at a fifth, between 5 and 30 GiB, but stead's pool is where
// every sandbox lives) and is never made larger than that free space: a
// sparse image that outgrows its host file system fails writes inside
// btrfs with I/O errors, for every sandbox at once.
//
// Create, Clone, Delete and SetReadOnly are btrfs ioctls
// (BTRFS_IOC_SUBVOL_CREATE, BTRFS_IOC_SNAP_CREATE_V2, BTRFS_IOC_SNAP_DESTROY,
// BTRFS_IOC_SUBVOL_{GET,SET}FLAGS); so are quota enabling, qgroup limits
// (BTRFS_IOC_QUOTA_CTL, BTRFS_IOC_QGROUP_LIMIT) and Usage, which reads the
// subvolume's qgroup info item with BTRFS_IOC_TREE_SEARCH after a syncfs.
// The btrfs CLI is not used at run time; mkfs.btrfs (btrfs-progs) is needed
// only to format a new image, and losetup only if LOOP_CONFIGURE is missing.
//
// Crash ordering. Each dataset operation is a single ioctl that the kernel
// commits atomically: after a crash a dataset either exists whole or not at
// all, and a clone never appears half copied. Delete detaches the subvolume
// from its name at once and frees its extents in the background (the btrfs
// cleaner), so a crash during the cleanup leaks no name. Rename and
// Exchange are durable on return: the fsync of the kind directory after
// them commits the transaction (btrfs logs no rename of a subvolume in its
// fsync log; it commits instead). RenameUnsynced leaves out that fsync: the
// rename is in the running transaction, which the next commit makes durable
// (at most 30 s later, or at once by any Clone: a snapshot commits the
// transaction it is made in, and every change before it). Open is idempotent:
// a pool image already mounted at Dir is reused as it is, and an image still
// attached to a loop device but not mounted (a crash between attach and
// mount, or a device attached by hand) is mounted from that device instead of
// attaching another one. The image is formatted only while its superblock
// area is all zeros, so an Open interrupted before mkfs finished starts over
// and an Open never formats over existing data.
package btrfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/files"
	sfsutil "github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/pool/internal/fsutil"
)

// MinImageSize is the smallest image Open makes when it sizes one itself.
const MinImageSize int64 = 5 << 30

// GroupQgroup is the level-1 qgroup (1/100) that holds every dataset and
// carries the pool-wide limit.
const GroupQgroup uint64 = 1<<qgroupLevelShift | 100

// DefaultImageSize is the size of a new image when none is given: half of
// free bytes (the free space of the file system that will hold it), rounded
// down to a GiB, and at least MinImageSize.
func DefaultImageSize(free int64) int64 {
	return max(free/2>>30<<30, MinImageSize)
}

// Options configures Open.
type Options struct {
	// Dir is where the pool lives: used directly when it is on btrfs, else
	// the mountpoint of Image.
	Dir string
	// Image is the path of the loop image used when Dir is not on btrfs.
	// It is created (sparse) and formatted when missing.
	Image string
	// ImageSize is the size of a new image; 0 means DefaultImageSize of
	// the free space where the image goes. A new image larger than that
	// free space is refused.
	ImageSize int64
	// Reserve is what the datasets together may not use (see Capacity);
	// 0 means pool.DefaultReserve of the file system's size.
	Reserve int64
	// FullQgroups turns on full qgroup accounting instead of simple
	// quotas on a pool whose quotas are off (a new one): see Quota modes.
	// A pool whose quotas are on keeps its mode either way.
	FullQgroups bool
	// Logger receives the pool's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Pool is a btrfs storage pool. It is safe for concurrent use on distinct
// dataset names.
type Pool struct {
	dir     string
	image   string // absolute, or "" when none was given
	managed bool   // Image is mounted at dir by this package (now or by an earlier run)
	quota   bool
	simple  bool   // the quotas are btrfs simple quotas (see Quota modes)
	full    bool   // Options.FullQgroups
	group   uint64 // GroupQgroup once it carries the pool's limit, else 0
	reserve int64  // configured reserve; 0: pool.DefaultReserve
	log     *slog.Logger
}

var _ pool.Pool = (*Pool)(nil)

// Open opens (and if needed creates and mounts) the pool at opts.Dir, and
// enables quotas on it. It is idempotent: see the package comment.
func Open(ctx context.Context, opts Options) (*Pool, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.Dir == "" {
		return nil, fmt.Errorf("open btrfs pool: empty dir: %w", errs.ErrInvalid)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("open btrfs pool %s: %w", opts.Dir, err)
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("open btrfs pool %s: %w", dir, err)
	}
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return nil, fmt.Errorf("open btrfs pool %s: %w", dir, err)
	}
	if opts.Reserve < 0 || opts.ImageSize < 0 {
		return nil, fmt.Errorf("open btrfs pool %s: image size %d, reserve %d: %w", dir, opts.ImageSize, opts.Reserve, errs.ErrInvalid)
	}
	p := &Pool{dir: dir, reserve: opts.Reserve, full: opts.FullQgroups, log: log.With("pool", "btrfs", "dir", dir)}
	if opts.Image != "" {
		if p.image, err = filepath.Abs(opts.Image); err != nil {
			return nil, fmt.Errorf("open btrfs pool %s: %w", dir, err)
		}
	}
	if err := p.setup(ctx, opts.ImageSize); err != nil {
		return nil, fmt.Errorf("open btrfs pool %s: %w", dir, err)
	}
	p.enableQuota()
	if p.managed {
		p.enableReclaim()
	}
	if p.quota {
		if err := p.setupGroup(); err != nil {
			p.log.Warn("set up the pool-wide qgroup; the datasets together are not bounded", "err", err)
		}
	}
	return p, nil
}

// setup makes p.dir a btrfs file system, mounting the image if needed.
func (p *Pool) setup(ctx context.Context, size int64) error {
	if reused, err := p.reuseMount(); err != nil || reused {
		return err
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(p.dir, &sfs); err != nil {
		return fmt.Errorf("statfs: %w", err)
	}
	if sfs.Type == unix.BTRFS_SUPER_MAGIC {
		p.log.Info("pool dir is on btrfs; using it directly")
		return nil
	}
	if p.image == "" {
		return fmt.Errorf("dir is not on btrfs and no image was given: %w", errs.ErrInvalid)
	}
	return p.mountImage(ctx, size)
}

// reuseMount reports whether a btrfs is mounted at p.dir, and marks the pool
// managed when that is p.image on a loop device.
func (p *Pool) reuseMount() (bool, error) {
	m, err := mountAt(p.dir)
	if err != nil || m == nil || m.fstype != "btrfs" {
		return false, err
	}
	if p.image != "" {
		if _, err := os.Stat(p.image); err == nil {
			loops, err := loopsBackedBy(p.image)
			if err != nil {
				return false, err
			}
			for _, l := range loops {
				if m.isDevice(loopMajor, l.minor) {
					p.managed = true
					p.log.Info("reusing mounted pool image", "image", p.image, "loop", l.path)
					// A pool mounted by an older stead may lack nosuid,nodev.
					if err := unix.Mount("", p.dir, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
						return false, fmt.Errorf("remount pool nosuid,nodev: %w", err)
					}
					return true, nil
				}
			}
		}
	}
	p.log.Info("a btrfs is mounted at the pool dir; using it directly", "source", m.source)
	return true, nil
}

// legacyLockWait is how long lockImage waits before it takes a lock held
// by the image's loop device for a stale one.
const legacyLockWait = 10 * time.Second

// lockImage takes the pool image's lock, saying so in the log while
// another Open holds it, and gives up when ctx ends.
func (p *Pool) lockImage(ctx context.Context) (unlock func(), err error) {
	fd, err := unix.Open(p.image, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("lock image %s: %w", p.image, err)
	}
	warned := false
	began := time.Now()
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Close(fd) }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			unix.Close(fd)
			return nil, fmt.Errorf("lock image %s: %w", p.image, err)
		}
		if !warned {
			p.log.Warn("waiting for another process that is opening the pool image (another stead daemon starting?)", "image", p.image)
			warned = true
		}
		if time.Since(began) > legacyLockWait {
			// An Open holds the lock for seconds at most. A stead before
			// this one took it on the descriptor it gave the loop device,
			// which keeps it while the device lives.
			if loops, err := loopsBackedBy(p.image); err == nil && len(loops) > 0 {
				p.log.Warn("the pool image's lock is held by its loop device (attached by an earlier stead); going on without it",
					"image", p.image, "loop", loops[0].path)
				return func() { unix.Close(fd) }, nil
			}
		}
		select {
		case <-ctx.Done():
			unix.Close(fd)
			return nil, fmt.Errorf("lock image %s: %w", p.image, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *Pool) mountImage(ctx context.Context, size int64) error {
	if err := os.MkdirAll(filepath.Dir(p.image), 0o700); err != nil {
		return fmt.Errorf("create image dir: %w", err)
	}
	f, err := os.OpenFile(p.image, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("open image: %w", err)
	}
	defer f.Close()
	// Serialise concurrent Opens of one image (a restarted daemon racing an
	// old one, parallel tests): the loser finds the winner's mount. The
	// lock is taken on a descriptor of its own: the loop device keeps f's
	// open file (and a lock on it) for as long as the device lives, which
	// is as long as anything (a running sandbox's mount) uses the file
	// system, so every later Open would wait for it forever.
	unlock, err := p.lockImage(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if reused, err := p.reuseMount(); err != nil || reused {
		return err
	}
	if err := p.ensureFS(ctx, f, size); err != nil {
		return err
	}
	loops, err := loopsBackedBy(p.image)
	if err != nil {
		return err
	}
	var dev loopDev
	for _, l := range loops {
		mps, err := mountsOfDevice(loopMajor, l.minor)
		if err != nil {
			return err
		}
		if len(mps) > 0 {
			return fmt.Errorf("image %s is mounted at %s, not at the pool dir: %w", p.image, strings.Join(mps, ", "), errs.ErrConflict)
		}
		if dev.path != "" {
			// A second stale device for one image: free it.
			if err := detachLoop(l); err != nil {
				p.log.Warn("detach stale loop device", "loop", l.path, "err", err)
			}
			continue
		}
		dev = l
	}
	// hold keeps the device open until it is mounted: autoclear frees a
	// loop device at its last close, mounted or not.
	var hold int
	attached := dev.path == ""
	if attached {
		if dev, hold, err = attachLoop(ctx, p.image, int(f.Fd())); err != nil {
			return err
		}
		p.log.Info("attached pool image", "image", p.image, "loop", dev.path)
	} else {
		if hold, err = unix.Open(dev.path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("open %s: %w", dev.path, err)
		}
		p.log.Info("reusing loop device left attached to the pool image", "image", p.image, "loop", dev.path)
	}
	defer func() {
		if hold >= 0 {
			unix.Close(hold)
		}
	}()
	// nosuid, nodev: a setuid binary or device node planted inside a sandbox
	// means nothing on the host.
	if err := unix.Mount(dev.path, p.dir, "btrfs", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		if attached {
			unix.Close(hold)
			hold = -1
			if derr := detachLoop(dev); derr != nil {
				p.log.Warn("detach loop device after failed mount", "loop", dev.path, "err", derr)
			}
		}
		return fmt.Errorf("mount %s on %s: %w", dev.path, p.dir, err)
	}
	if !attached {
		// Now that it is mounted, make the reused device free itself on
		// unmount like the ones attachLoop creates.
		setAutoclear(hold, dev, p.log)
	}
	p.managed = true
	p.log.Info("mounted pool image", "image", p.image, "loop", dev.path)
	return nil
}

// setAutoclear makes the loop device open as fd free itself when its last
// user (the mount) goes away.
func setAutoclear(fd int, dev loopDev, log *slog.Logger) {
	info, err := unix.IoctlLoopGetStatus64(fd)
	if err == nil && info.Flags&unix.LO_FLAGS_AUTOCLEAR == 0 {
		info.Flags |= unix.LO_FLAGS_AUTOCLEAR
		err = unix.IoctlLoopSetStatus64(fd, info)
	}
	if err != nil {
		log.Warn("set autoclear", "loop", dev.path, "err", err)
	}
}

const (
	superblockOffset = 0x10040 // btrfs_super_block.magic in the primary superblock
	btrfsMagic       = "_BHRfS_M"
)

// ensureFS sizes a new image and formats it unless it already holds btrfs.
func (p *Pool) ensureFS(ctx context.Context, f *os.File, size int64) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat image: %w", err)
	}
	if fi.Size() == 0 {
		if size, err = p.newImageSize(size); err != nil {
			os.Remove(p.image) // empty: nothing is lost, and the next Open sizes it anew
			return err
		}
		if err := f.Truncate(size); err != nil {
			return fmt.Errorf("size image %s: %w", p.image, err)
		}
		p.log.Info("sized new pool image", "image", p.image, "bytes", size)
	}
	head := make([]byte, superblockOffset+len(btrfsMagic))
	if _, err := f.ReadAt(head, 0); err != nil {
		return fmt.Errorf("read image %s: %w", p.image, err)
	}
	if string(head[superblockOffset:]) == btrfsMagic {
		return nil
	}
	for _, b := range head {
		if b != 0 {
			return fmt.Errorf("image %s holds something other than btrfs: %w", p.image, errs.ErrInvalid)
		}
	}
	if fi, err = f.Stat(); err != nil {
		return fmt.Errorf("stat image: %w", err)
	}
	start := time.Now()
	out, err := exec.CommandContext(ctx, "mkfs.btrfs", mkfsArgs(fi.Size(), p.image)...).CombinedOutput()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("format image %s: mkfs.btrfs not found (install btrfs-progs): %w", p.image, err)
		}
		return fmt.Errorf("format image %s: %w: %s", p.image, err, strings.TrimSpace(string(out)))
	}
	p.log.Info("formatted pool image", "image", p.image, "dur", time.Since(start))
	return nil
}

// newImageSize checks the size asked for a new image against the free
// space where it goes (0: DefaultImageSize of it).
func (p *Pool) newImageSize(size int64) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(p.image), &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", filepath.Dir(p.image), err)
	}
	free := int64(st.Bavail) * st.Bsize
	if size == 0 {
		size = DefaultImageSize(free)
	}
	if size > free {
		return 0, fmt.Errorf("a %s pool image does not fit in the %s free in %s (a sparse image that outgrows its file system breaks every sandbox at once): free space there or give a smaller pool size: %w",
			pool.FormatBytes(size), pool.FormatBytes(free), filepath.Dir(p.image), errs.ErrInvalid)
	}
	return size, nil
}

// MixedBelow is the image size under which new images use mixed block
// groups.
const MixedBelow int64 = 10 << 30

// mkfsArgs are mkfs.btrfs's arguments for a new image of size bytes.
//
//   - -K: the file is sparse already, so skip the discard pass.
//   - single metadata: one copy (a second copy in the same file on the same
//     disk protects from little), so that what the qgroups account is what
//     the disk holds. With DUP, a million small files filled a 3 GiB file
//     system (ENOSPC for everyone) while the datasets held 1.5 GiB of their
//     2.7 GiB limit.
//   - --mixed below MixedBelow: data and metadata share block groups. On a
//     small file system a data chunk is a tenth of it, not a multiple of
//     btrfs's 128 MiB extents, so big writes take a new chunk for each
//     extent until the whole device is allocated (a 2 GiB pool: 1.97 GiB of
//     data chunks for 1.07 GiB of data), and metadata, which can no longer
//     grow, fails with ENOSPC below the datasets' limit. From 10 GiB data
//     chunks are 1 GiB, eight extents each.
func mkfsArgs(size int64, image string) []string {
	args := []string{"-q", "-f", "-K", "-L", "stead", "-m", "single"}
	if size < MixedBelow {
		args = append(args, "--mixed", "-d", "single")
	}
	return append(args, image)
}

// enableQuota turns quotas on: simple quotas on a pool whose quotas are
// off (full qgroups when Options.FullQgroups is set or the kernel predates
// simple quotas), and nothing new on a pool whose quotas are on, which
// keeps its mode (see Quota modes). It waits for a full-mode rescan, which
// is instant on a new pool; when it fails, the pool works without quotas.
func (p *Pool) enableQuota() {
	fd, err := openDir(p.dir)
	if err != nil {
		p.log.Warn("enable btrfs quotas; SetQuota will be unsupported", "err", err)
		return
	}
	defer unix.Close(fd)
	if _, err := quotaSimple(fd); err != nil { // off: choose the mode
		err = quotaEnable(fd, !p.full)
		if err != nil && !p.full && errors.Is(err, unix.EINVAL) {
			p.log.Warn("btrfs simple quotas are not supported (kernel 6.7 or later); using full qgroup accounting, which makes every clone slower as datasets accumulate", "err", err)
			err = quotaEnable(fd, false)
		}
		if err != nil {
			p.log.Warn("enable btrfs quotas; SetQuota will be unsupported", "err", err)
			return
		}
	}
	simple, err := quotaSimple(fd)
	if err != nil {
		p.log.Warn("read the btrfs quota mode; SetQuota will be unsupported", "err", err)
		return
	}
	p.simple = simple
	if !simple {
		if err := quotaRescanWait(fd); err != nil {
			p.log.Warn("wait for qgroup rescan", "err", err)
		}
		if !p.full {
			p.log.Info("this pool keeps full qgroup accounting (it was made before simple quotas): clones get slower as datasets accumulate; see docs for the migration")
		}
	}
	p.quota = true
}

// SimpleQuota reports whether the pool's quotas are btrfs simple quotas.
func (p *Pool) SimpleQuota() bool { return p.simple }

// enableReclaim turns on btrfs's dynamic and periodic reclaim of data
// block groups (kernel >= 6.10; not kept across mounts, so every Open
// sets it). Without it, data block groups that agents filled and then
// partly emptied keep the file system's unallocated space, and metadata
// (many small files) fails with ENOSPC while bytes are free and the
// datasets are below their limit. With it, btrfs relocates sparse data
// block groups as unallocated space runs low. Only for a pool image
// stead owns: a file system of the host's is left as it is.
func (p *Pool) enableReclaim() {
	fd, err := openDir(p.dir)
	if err != nil {
		return
	}
	uuid, err := fsUUID(fd)
	unix.Close(fd)
	if err != nil {
		p.log.Warn("find the pool's file system id; data block groups are not reclaimed", "err", err)
		return
	}
	space := filepath.Join("/sys/fs/btrfs", uuid, "allocation", "data")
	if _, err := os.Stat(space); err != nil {
		space = filepath.Join("/sys/fs/btrfs", uuid, "allocation", "mixed") // mixed block groups
	}
	for _, knob := range []string{"dynamic_reclaim", "periodic_reclaim"} {
		path := filepath.Join(space, knob)
		if err := os.WriteFile(path, []byte("1"), 0); err != nil {
			p.log.Warn("enable btrfs reclaim of data block groups (kernel 6.10 or later); a pool that filled and emptied may run out of metadata space", "knob", knob, "err", err)
			return
		}
	}
}

// setupGroup makes GroupQgroup, puts every dataset in it and limits it
// to the usable size. Datasets already in it are left alone; if any had
// to be assigned (a pool made by an older stead), the accounting is
// rescanned once so the group's numbers are right.
func (p *Pool) setupGroup() error {
	fd, err := openDir(p.dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := qgroupCreate(fd, GroupQgroup); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("create qgroup 1/100: %w", err)
	}
	assigned := 0
	for _, kind := range []string{pool.KindTemplate, pool.KindSandbox, pool.KindSnapshot, pool.KindVolume} {
		ids, err := fsutil.List(p.dir, kind)
		if err != nil {
			return err
		}
		for _, id := range ids {
			dfd, err := openDir(filepath.Join(p.dir, kind, id))
			if err != nil {
				continue // deleted meanwhile
			}
			var st unix.Stat_t
			sid := uint64(0)
			if unix.Fstat(dfd, &st) == nil && st.Ino == firstFreeObjectID {
				sid, err = subvolID(dfd)
			}
			unix.Close(dfd)
			if err != nil || sid == 0 {
				continue // not a subvolume: nothing to account
			}
			switch err := qgroupAssign(fd, sid, GroupQgroup); {
			case err == nil:
				assigned++
			case errors.Is(err, unix.EEXIST):
			default:
				return fmt.Errorf("assign %s/%s to qgroup 1/100: %w", kind, id, err)
			}
		}
	}
	if assigned > 0 && !p.simple {
		start := time.Now()
		if err := quotaRescan(fd); err != nil && !errors.Is(err, unix.EINPROGRESS) {
			return fmt.Errorf("rescan qgroups: %w", err)
		}
		if err := quotaRescanWait(fd); err != nil {
			return fmt.Errorf("wait for the qgroup rescan: %w", err)
		}
		p.log.Info("added existing datasets to the pool-wide qgroup", "datasets", assigned, "dur", time.Since(start))
	}
	if dup, err := metadataDup(fd); err == nil && dup {
		p.log.Warn("the pool's metadata is DUP: the pool-wide limit counts it once, so many small files can fill the file system before the datasets reach their limit; convert it once with `btrfs balance start -mconvert=single " + p.dir + "` or give a larger reserve")
	}
	c, err := p.statCapacity()
	if err != nil {
		return err
	}
	if err := qgroupLimitExclOf(fd, GroupQgroup, uint64(c.LimitBytes)); err != nil {
		return fmt.Errorf("limit qgroup 1/100 to %d bytes: %w", c.LimitBytes, err)
	}
	p.group = GroupQgroup
	p.log.Info("datasets bounded together", "qgroup", "1/100", "limit", c.LimitBytes, "size", c.SizeBytes, "reserve", c.ReserveBytes)
	return nil
}

// statCapacity is Capacity without the group's usage.
func (p *Pool) statCapacity() (pool.Capacity, error) {
	size, used, err := pool.StatFS(p.dir)
	if err != nil {
		return pool.Capacity{}, err
	}
	c := pool.Capacity{SizeBytes: size, UsedBytes: used, ReserveBytes: p.reserve, DatasetsBytes: -1}
	if c.ReserveBytes == 0 {
		c.ReserveBytes = pool.DefaultReserve(size)
	}
	c.ReserveBytes = min(c.ReserveBytes, size)
	c.LimitBytes = c.Usable()
	return c, nil
}

// Capacity reports the file system's size and use, the reserve, and the
// bytes of the pool-wide qgroup as of the last transaction commit. Without
// the qgroup (quotas off), LimitBytes is 0: nothing is enforced.
func (p *Pool) Capacity(ctx context.Context) (pool.Capacity, error) {
	c, err := p.statCapacity()
	if err != nil {
		return c, fmt.Errorf("pool capacity: %w", err)
	}
	if p.group == 0 {
		c.LimitBytes = 0
		return c, nil
	}
	fd, err := openDir(p.dir)
	if err != nil {
		return c, fmt.Errorf("pool capacity: %w", err)
	}
	defer unix.Close(fd)
	if excl, err := qgroupExcl(fd, p.group); err == nil {
		c.DatasetsBytes = int64(excl)
	} else {
		p.log.Warn("read the pool-wide qgroup", "err", err)
	}
	return c, nil
}

// Unmount unmounts the pool image and frees its loop device. It is for
// tests and teardown; the daemon calls Close, which leaves the pool mounted
// for running sandboxes. It does nothing when Dir was already on btrfs.
// The Pool must not be used after Unmount; Open the image again instead.
func (p *Pool) Unmount(ctx context.Context) error {
	if !p.managed {
		return nil
	}
	for i := 0; ; i++ {
		err := unix.Unmount(p.dir, 0)
		if err == nil || errors.Is(err, unix.EINVAL) { // EINVAL: not mounted
			break
		}
		if !errors.Is(err, unix.EBUSY) || i >= 100 {
			return fmt.Errorf("unmount pool %s: %w", p.dir, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("unmount pool %s: %w", p.dir, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	loops, err := loopsBackedBy(p.image)
	if err != nil {
		return fmt.Errorf("unmount pool %s: %w", p.dir, err)
	}
	for _, l := range loops {
		if mps, err := mountsOfDevice(loopMajor, l.minor); err != nil || len(mps) > 0 {
			continue
		}
		if err := detachLoop(l); err != nil {
			return fmt.Errorf("unmount pool %s: detach %s: %w", p.dir, l.path, err)
		}
	}
	// A device another mount namespace still holds for an instant (one
	// being set up when the pool was unmounted: a sandbox of another
	// daemon, copying the host's mounts before it pivots) is only marked
	// autoclear; it goes when that copy does.
	for i := 0; ; i++ {
		left, err := loopsBackedBy(p.image)
		if err != nil || len(left) == 0 {
			break
		}
		if i == 100 {
			p.log.Warn("loop device still held after the unmount; it goes when its last user does", "image", p.image, "device", left[0].path)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.log.Info("unmounted pool image", "image", p.image)
	return nil
}

// Destroy removes a pool that will not be used again (a drill's fresh
// daemon, tests): every dataset, then, for a loop-backed pool, the mount,
// every loop device backed by the image and the image itself. It never
// formats or mounts anything: a pool whose Dir is not on btrfs (its image
// not mounted) has only its image (and stale loop devices) removed. Running sandboxes must
// be gone.
func Destroy(ctx context.Context, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	var errsOut []error
	// A btrfs at Dir: the image's mount, or a data dir on btrfs itself.
	if sfs := (unix.Statfs_t{}); unix.Statfs(opts.Dir, &sfs) == nil && sfs.Type == unix.BTRFS_SUPER_MAGIC {
		p, err := Open(ctx, Options{Dir: opts.Dir, Image: opts.Image, Logger: log})
		if err != nil {
			return fmt.Errorf("destroy pool %s: %w", opts.Dir, err)
		}
		for _, kind := range []string{"templates", "sandboxes", "snapshots", "volumes"} {
			ids, _ := p.List(ctx, kind)
			for _, id := range ids {
				if err := p.Delete(ctx, kind+"/"+id); err != nil && !errors.Is(err, errs.ErrNotFound) {
					errsOut = append(errsOut, err)
				}
			}
		}
		if err := p.Unmount(ctx); err != nil {
			errsOut = append(errsOut, err)
		}
	}
	if opts.Image != "" {
		if loops, err := loopsBackedBy(opts.Image); err == nil {
			for _, l := range loops {
				if mps, err := mountsOfDevice(loopMajor, l.minor); err == nil && len(mps) == 0 {
					if err := detachLoop(l); err != nil {
						errsOut = append(errsOut, fmt.Errorf("detach %s: %w", l.path, err))
					}
				}
			}
		}
		if err := os.Remove(opts.Image); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errsOut = append(errsOut, err)
		}
	}
	if err := errors.Join(errsOut...); err != nil {
		return fmt.Errorf("destroy pool %s: %w", opts.Dir, err)
	}
	return nil
}

// Kind returns "btrfs".
func (p *Pool) Kind() string { return "btrfs" }

// Caps reports O(1) clones, and quotas when qgroups could be enabled.
func (p *Pool) Caps() pool.Caps { return pool.Caps{ConstantTimeClone: true, Quota: p.quota} }

// Path returns <Dir>/<name>, or "" when name is invalid.
func (p *Pool) Path(name string) string {
	if pool.CheckName(name) != nil {
		return ""
	}
	return filepath.Join(p.dir, name)
}

func split(name string) (kind, id string) {
	kind, id, _ = strings.Cut(name, "/")
	return kind, id
}

func openDir(path string) (int, error) {
	return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// kindDir opens <Dir>/<kind>, creating it.
func (p *Pool) kindDir(kind string) (int, error) {
	path, err := fsutil.KindDir(p.dir, kind)
	if err != nil {
		return -1, err
	}
	return openDir(path)
}

// openDataset opens a dataset's root, mapping ENOENT to errs.ErrNotFound.
func (p *Pool) openDataset(name string) (int, error) {
	fd, err := openDir(filepath.Join(p.dir, name))
	if errors.Is(err, unix.ENOENT) {
		return -1, errs.ErrNotFound
	}
	return fd, err
}

// Exists reports whether the dataset exists.
func (p *Pool) Exists(ctx context.Context, name string) (bool, error) {
	if err := pool.CheckName(name); err != nil {
		return false, err
	}
	return fsutil.Exists(p.dir, name)
}

// Create makes an empty subvolume owned by root, mode 0755.
func (p *Pool) Create(ctx context.Context, name string) error {
	if err := pool.CheckName(name); err != nil {
		return fmt.Errorf("create dataset: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("create dataset %s: %w", name, err)
	}
	kind, id := split(name)
	parent, err := p.kindDir(kind)
	if err != nil {
		return fmt.Errorf("create dataset %s: %w", name, err)
	}
	defer unix.Close(parent)
	if err := subvolCreateIn(parent, id, p.group); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create dataset %s: %w", name, errs.ErrConflict)
		}
		return fmt.Errorf("create dataset %s: %w", name, err)
	}
	fd, err := unix.Openat(parent, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		// The subvolume root got the caller's ids and 0777 &^ umask. Change
		// them only when they differ: the change is a write into the new
		// subvolume, which fails with EDQUOT while the pool is full.
		var st unix.Stat_t
		if err = unix.Fstat(fd, &st); err == nil && (st.Uid != 0 || st.Gid != 0) {
			err = unix.Fchown(fd, 0, 0)
		}
		if err == nil && st.Mode&0o7777 != 0o755 {
			err = unix.Fchmod(fd, 0o755)
		}
		unix.Close(fd)
	}
	if err != nil {
		if derr := snapDestroy(parent, id); derr != nil {
			p.log.Warn("remove half-created dataset", "dataset", name, "err", derr)
		}
		return fmt.Errorf("create dataset %s: %w", name, err)
	}
	p.log.Debug("created dataset", "op", "create", "dataset", name)
	return nil
}

// Clone snapshots src as dst: one ioctl, O(1) in the size of src. Nested
// subvolumes inside src appear in dst as empty directories (btrfs snapshots
// are not recursive).
func (p *Pool) Clone(ctx context.Context, src, dst string, opts pool.CloneOptions) error {
	if err := pool.CheckNames("clone", src, dst); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("clone dataset %s: %w", src, err)
	}
	start := time.Now()
	sfd, err := p.openDataset(src)
	if err != nil {
		return fmt.Errorf("clone dataset %s: %w", src, err)
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return fmt.Errorf("clone dataset %s: %w", src, err)
	}
	if st.Ino != firstFreeObjectID {
		return fmt.Errorf("clone dataset %s: not a subvolume: %w", src, errs.ErrInvalid)
	}
	kind, id := split(dst)
	parent, err := p.kindDir(kind)
	if err != nil {
		return fmt.Errorf("clone dataset %s: %w", src, err)
	}
	defer unix.Close(parent)
	if opts.Unshared {
		if err := p.copyInto(ctx, src, parent, id, opts.ReadOnly); err != nil {
			return fmt.Errorf("clone dataset %s to %s: %w", src, dst, err)
		}
		p.log.Debug("cloned dataset", "op", "clone", "dataset", dst, "src", src, "unshared", true, "readonly", opts.ReadOnly, "dur", time.Since(start))
		return nil
	}
	if err := snapCreate(parent, sfd, id, opts.ReadOnly, p.group); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("clone dataset %s to %s: %w", src, dst, errs.ErrConflict)
		}
		return fmt.Errorf("clone dataset %s to %s: %w", src, dst, err)
	}
	p.log.Debug("cloned dataset", "op", "clone", "dataset", dst, "src", src, "readonly", opts.ReadOnly, "dur", time.Since(start))
	return nil
}

// unsharedTmp is where copyInto builds the tree inside the new subvolume
// before moving its entries up to the subvolume's root.
const unsharedTmp = ".stead-unshared"

// copyInto makes the subvolume id in the kind directory parent and
// copies dataset src's tree into it, files reflinked (Unshared: see
// pool.CloneOptions). files.Root.CopyTree copies a tree as a new
// directory, so it is copied whole into a directory of the subvolume
// (hard links between its top-level entries stay links) whose entries
// and attributes then move up to the subvolume's root. On failure the
// subvolume is destroyed.
func (p *Pool) copyInto(ctx context.Context, src string, parent int, id string, readOnly bool) (retErr error) {
	if err := subvolCreateIn(parent, id, p.group); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return errs.ErrConflict
		}
		return err
	}
	defer func() {
		if retErr != nil {
			if err := snapDestroy(parent, id); err != nil {
				p.log.Warn("remove half-made unshared clone", "dataset", id, "err", err)
			}
		}
	}()
	dfd, err := unix.Openat(parent, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	root, err := files.OpenRoot(p.Path(src))
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.CopyTree(ctx, "/", dfd, unsharedTmp); err != nil {
		return err
	}
	tfd, err := unix.Openat(dfd, unsharedTmp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	// The root's attributes are the copy's, read before the moves
	// change its times.
	attrs, err := readDirAttrs(tfd)
	if err != nil {
		return err
	}
	names, err := sfsutil.ReadDirNames(tfd)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := unix.Renameat2(tfd, name, dfd, name, unix.RENAME_NOREPLACE); err != nil {
			return fmt.Errorf("move %s into place: %w", name, err)
		}
	}
	if err := unix.Unlinkat(dfd, unsharedTmp, unix.AT_REMOVEDIR); err != nil {
		return err
	}
	// Last: the moves and the removal changed the root's times.
	if err := attrs.apply(dfd); err != nil {
		return err
	}
	if readOnly {
		return setSubvolReadOnly(dfd, true)
	}
	return nil
}

// dirAttrs are a directory's owner, mode, extended attributes and times.
type dirAttrs struct {
	st     unix.Stat_t
	xattrs map[string][]byte
}

// readDirAttrs reads the attributes of the directory fd.
func readDirAttrs(fd int) (dirAttrs, error) {
	a := dirAttrs{xattrs: map[string][]byte{}}
	if err := unix.Fstat(fd, &a.st); err != nil {
		return a, err
	}
	sz, err := unix.Flistxattr(fd, nil)
	if err != nil && err != unix.ENOTSUP {
		return a, err
	}
	if sz <= 0 {
		return a, nil
	}
	buf := make([]byte, sz)
	if sz, err = unix.Flistxattr(fd, buf); err != nil {
		return a, err
	}
	for _, name := range strings.Split(string(buf[:sz]), "\x00") {
		if name == "" {
			continue
		}
		n, err := unix.Fgetxattr(fd, name, nil)
		if err != nil {
			return a, err
		}
		val := make([]byte, n)
		if n, err = unix.Fgetxattr(fd, name, val); err != nil {
			return a, err
		}
		a.xattrs[name] = val[:n]
	}
	return a, nil
}

// apply gives the directory fd the attributes a.
func (a dirAttrs) apply(fd int) error {
	if err := unix.Fchown(fd, int(a.st.Uid), int(a.st.Gid)); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, a.st.Mode&0o7777); err != nil {
		return err
	}
	for name, val := range a.xattrs {
		if err := unix.Fsetxattr(fd, name, val, 0); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	return unix.UtimesNanoAt(fd, "", []unix.Timespec{a.st.Atim, a.st.Mtim}, unix.AT_EMPTY_PATH)
}

// Delete destroys the dataset's subvolume, read-only or not, with any
// subvolumes nested in it.
func (p *Pool) Delete(ctx context.Context, name string) error {
	if err := pool.CheckName(name); err != nil {
		return fmt.Errorf("delete dataset: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete dataset %s: %w", name, err)
	}
	path := filepath.Join(p.dir, name)
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete dataset %s: %w", name, errs.ErrNotFound)
		}
		return fmt.Errorf("delete dataset %s: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Ino != firstFreeObjectID {
		// Not a subvolume (left by hand or by an older layout).
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("delete dataset %s: %w", name, err)
		}
		return nil
	}
	if err := p.destroy(ctx, path); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete dataset %s: %w", name, errs.ErrNotFound)
		}
		return fmt.Errorf("delete dataset %s: %w", name, err)
	}
	p.log.Debug("deleted dataset", "op", "delete", "dataset", name)
	return nil
}

// destroy deletes the subvolume at path; when subvolumes are nested in it
// (ENOTEMPTY), it makes path writable and destroys those first, deepest
// first.
func (p *Pool) destroy(ctx context.Context, path string) error {
	parent, err := openDir(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	err = snapDestroy(parent, filepath.Base(path))
	if !errors.Is(err, unix.ENOTEMPTY) {
		return err
	}
	fd, err := openDir(path)
	if err != nil {
		return err
	}
	err = setSubvolReadOnly(fd, false)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("make %s writable: %w", path, err)
	}
	var nested []string
	err = filepath.WalkDir(path, func(sub string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if sub == path || !d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Ino == firstFreeObjectID {
			nested = append(nested, sub)
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("find nested subvolumes in %s: %w", path, err)
	}
	for _, sub := range nested {
		if err := p.destroy(ctx, sub); err != nil {
			return fmt.Errorf("delete nested subvolume %s: %w", sub, err)
		}
	}
	return snapDestroy(parent, filepath.Base(path))
}

// List returns the ids of kind, sorted.
func (p *Pool) List(ctx context.Context, kind string) ([]string, error) {
	return fsutil.List(p.dir, kind)
}

// SetReadOnly sets or clears the subvolume's read-only property; a
// read-only subvolume fails every write with EROFS, root's included. The
// property is on disk, so it survives restarts.
func (p *Pool) SetReadOnly(ctx context.Context, name string, ro bool) error {
	if err := pool.CheckName(name); err != nil {
		return fmt.Errorf("set dataset read-only: %w", err)
	}
	fd, err := p.openDataset(name)
	if err != nil {
		return fmt.Errorf("set dataset %s read-only=%t: %w", name, ro, err)
	}
	defer unix.Close(fd)
	if err := setSubvolReadOnly(fd, ro); err != nil {
		return fmt.Errorf("set dataset %s read-only=%t: %w", name, ro, err)
	}
	return nil
}

// SetQuota limits the exclusive bytes of the dataset's qgroup (0 removes
// the limit). Writes past it fail with EDQUOT.
func (p *Pool) SetQuota(ctx context.Context, name string, bytes int64) error {
	if err := pool.CheckName(name); err != nil {
		return fmt.Errorf("set dataset quota: %w", err)
	}
	if bytes < 0 {
		return fmt.Errorf("set dataset %s quota %d: %w", name, bytes, errs.ErrInvalid)
	}
	if !p.quota {
		return fmt.Errorf("set dataset %s quota: qgroups are disabled: %w", name, errs.ErrUnsupported)
	}
	fd, err := p.openDataset(name)
	if err != nil {
		return fmt.Errorf("set dataset %s quota: %w", name, err)
	}
	defer unix.Close(fd)
	if err := qgroupLimitExcl(fd, uint64(bytes)); err != nil {
		return fmt.Errorf("set dataset %s quota: %w", name, err)
	}
	return nil
}

// Usage returns the dataset's exclusive bytes from its qgroup, after
// committing pending writes; without quotas, the apparent size of its files.
func (p *Pool) Usage(ctx context.Context, name string) (int64, error) {
	if err := pool.CheckName(name); err != nil {
		return 0, fmt.Errorf("dataset usage: %w", err)
	}
	fd, err := p.openDataset(name)
	if err != nil {
		return 0, fmt.Errorf("dataset %s usage: %w", name, err)
	}
	defer unix.Close(fd)
	if p.quota {
		if err := unix.Syncfs(fd); err != nil {
			return 0, fmt.Errorf("dataset %s usage: sync: %w", name, err)
		}
		id, err := subvolID(fd)
		if err != nil {
			return 0, fmt.Errorf("dataset %s usage: subvolume id: %w", name, err)
		}
		excl, err := qgroupExcl(fd, id)
		if err == nil {
			return int64(excl), nil
		}
		p.log.Warn("read qgroup; falling back to apparent size", "dataset", name, "err", err)
	}
	return fsutil.DatasetSize(ctx, p.dir, name)
}

// Close drops the pool's handles. It never unmounts: running sandboxes
// live in the pool. Use Unmount to tear the pool down.
func (p *Pool) Close() error { return nil }

// Rename moves a dataset to a new name of the same kind (see pool.Pool).
func (p *Pool) Rename(ctx context.Context, src, dst string) error {
	return pool.RenameAt(ctx, p.dir, src, dst)
}

// RenameUnsynced is Rename without making the change durable (see
// pool.Pool).
func (p *Pool) RenameUnsynced(ctx context.Context, src, dst string) error {
	return pool.RenameAtUnsynced(ctx, p.dir, src, dst)
}

// Exchange swaps two datasets' names atomically (see pool.Pool).
func (p *Pool) Exchange(ctx context.Context, a, b string) error {
	return pool.ExchangeAt(ctx, p.dir, a, b)
}

var _ pool.UsageReader = (*Pool)(nil)

// Usages is Usage for many datasets with one syncfs and one walk of the
// quota tree (see pool.UsageReader); without quotas, or when the quota
// tree cannot be read, it fails and callers fall back to Usage per name.
func (p *Pool) Usages(ctx context.Context, names []string) (map[string]int64, error) {
	if !p.quota {
		return nil, fmt.Errorf("datasets usage: qgroups are disabled: %w", errs.ErrUnsupported)
	}
	fd, err := openDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("datasets usage: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return nil, fmt.Errorf("datasets usage: sync: %w", err)
	}
	excl, err := qgroupExclAll(fd)
	if err != nil {
		return nil, fmt.Errorf("datasets usage: read qgroups: %w", err)
	}
	out := make(map[string]int64, len(names))
	for _, name := range names {
		if ctx.Err() != nil {
			return out, nil
		}
		if pool.CheckName(name) != nil {
			continue
		}
		dfd, err := p.openDataset(name)
		if err != nil {
			continue
		}
		id, err := subvolID(dfd)
		unix.Close(dfd)
		if err != nil {
			continue
		}
		if b, ok := excl[id]; ok {
			out[name] = int64(b)
		}
	}
	return out, nil
}
