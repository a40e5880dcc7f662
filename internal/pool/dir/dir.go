// Package dir implements pool.Pool with plain directories at
// <dir>/<kind>/<id>: the portable fallback for hosts without btrfs.
//
// Clone copies with GNU cp (cp -a --preserve=all --reflink=auto
// --sparse=auto), which keeps modes, owners, symlinks, hard links, xattrs
// (security.capability included), timestamps and sparse holes, and shares
// extents (FICLONE) where the file system can (XFS with reflink=1, btrfs),
// falling back to a plain copy elsewhere. Clone therefore costs O(size)
// (Caps.ConstantTimeClone is false).
//
// Read-only is the immutable inode flag (chattr +i, FS_IOC_SETFLAGS) on the
// dataset's root and on every directory and regular file in it. Unlike a
// read-only bind mount, the flag lives on disk: it survives a daemon restart
// and a reboot with nothing to re-establish, holds for root, and follows the
// directory wherever it is bind-mounted. Symlinks, fifos, sockets and device
// nodes cannot carry the flag (they cannot be opened for the ioctl, or the
// ioctl would reach a device driver); they cannot be created, removed or
// renamed because their directory is immutable, but root can still change
// their owner, mode or timestamps.
//
// Quotas are unsupported (XFS project quotas would need a prjquota mount),
// and so is a bound on all datasets together: a sandbox can fill the file
// system that holds the pool. Capacity reports that file system's size and
// use with a reserve (Options.Reserve, default pool.DefaultReserve) and
// LimitBytes 0; the daemon still refuses a quota or a volume larger than
// the size less the reserve, bounds the sum of what it promises by its
// over-commit ratio, warns at start that nothing is enforced, and warns
// again as the file system fills (85%, 95%). Use the btrfs pool where one
// agent must not be able to starve the others.
//
// Crash ordering. Clone copies into a hidden temporary directory
// (<kind>/.tmp-<id>-<random>) and renames it to the dataset's name with
// RENAME_NOREPLACE only when the copy is complete, so a dataset never
// appears half copied and a concurrent Clone or Create of the same name
// loses with errs.ErrConflict. A read-only Clone is made immutable after
// that rename (an immutable directory cannot be renamed); a failure there
// deletes the new dataset. Delete first renames the dataset to a hidden
// tombstone (<kind>/.del-<id>-<random>), which frees the name at once, then
// removes the tombstone. Open removes temporaries and tombstones that a
// crash left behind. Hidden names never match pool.ValidID, so List and
// Exists never see them.
package dir

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/files"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/pool/internal/fsutil"
)

const (
	tmpPrefix  = ".tmp-"
	tombPrefix = ".del-"
)

// Pool is a directory storage pool. It is safe for concurrent use on
// distinct dataset names.
type Pool struct {
	dir     string
	reserve int64
	log     *slog.Logger
}

// Options configures OpenOptions.
type Options struct {
	// Dir is the pool's directory.
	Dir string
	// Reserve is reported by Capacity; 0 means pool.DefaultReserve of the
	// file system's size.
	Reserve int64
	// Logger receives the pool's logs; nil means slog.Default().
	Logger *slog.Logger
}

var _ pool.Pool = (*Pool)(nil)

// Open opens the pool rooted at dir, creating dir if needed and removing
// what interrupted Clones and Deletes left behind.
func Open(ctx context.Context, dir string) (*Pool, error) {
	return OpenOptions(ctx, Options{Dir: dir})
}

// OpenOptions is Open with options.
func OpenOptions(ctx context.Context, opts Options) (*Pool, error) {
	dir := opts.Dir
	if opts.Reserve < 0 {
		return nil, fmt.Errorf("open dir pool %s: reserve %d: %w", dir, opts.Reserve, errs.ErrInvalid)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if dir == "" {
		return nil, fmt.Errorf("open dir pool: empty dir: %w", errs.ErrInvalid)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open dir pool %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o711); err != nil {
		return nil, fmt.Errorf("open dir pool %s: %w", abs, err)
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return nil, fmt.Errorf("open dir pool %s: %w", dir, err)
	}
	if _, err := exec.LookPath("cp"); err != nil {
		return nil, fmt.Errorf("open dir pool %s: %w", abs, err)
	}
	p := &Pool{dir: abs, reserve: opts.Reserve, log: log.With("pool", "dir", "dir", abs)}
	for _, kind := range []string{pool.KindTemplate, pool.KindSandbox, pool.KindSnapshot, pool.KindVolume} {
		ents, err := os.ReadDir(filepath.Join(abs, kind))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), tmpPrefix) || strings.HasPrefix(e.Name(), tombPrefix) {
				path := filepath.Join(abs, kind, e.Name())
				if err := removeAll(ctx, path); err != nil {
					p.log.Warn("remove leftover of an interrupted operation", "path", path, "err", err)
				}
			}
		}
	}
	return p, nil
}

// Kind returns "dir".
func (p *Pool) Kind() string { return "dir" }

// Caps reports O(size) clones and no quotas (nor a bound on all datasets).
func (p *Pool) Caps() pool.Caps { return pool.Caps{} }

// Path returns <dir>/<name>, or "" when name is invalid.
func (p *Pool) Path(name string) string {
	if pool.CheckName(name) != nil {
		return ""
	}
	return filepath.Join(p.dir, name)
}

func hidden(prefix, id string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + id + "-" + hex.EncodeToString(b[:])
}

// Exists reports whether the dataset exists.
func (p *Pool) Exists(ctx context.Context, name string) (bool, error) {
	if err := pool.CheckName(name); err != nil {
		return false, fmt.Errorf("dataset exists: %w", err)
	}
	return fsutil.Exists(p.dir, name)
}

// Create makes an empty directory owned by root, mode 0755.
func (p *Pool) Create(ctx context.Context, name string) error {
	if err := pool.CheckName(name); err != nil {
		return fmt.Errorf("create dataset: %w", err)
	}
	kind, _, _ := strings.Cut(name, "/")
	if _, err := fsutil.KindDir(p.dir, kind); err != nil {
		return fmt.Errorf("create dataset %s: %w", name, err)
	}
	path := filepath.Join(p.dir, name)
	if err := os.Mkdir(path, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create dataset %s: %w", name, errs.ErrConflict)
		}
		return fmt.Errorf("create dataset %s: %w", name, err)
	}
	if err := errors.Join(os.Chown(path, 0, 0), os.Chmod(path, 0o755)); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("create dataset %s: %w", name, err)
	}
	return nil
}

// Clone copies src to dst; see the package comment for how.
func (p *Pool) Clone(ctx context.Context, src, dst string, opts pool.CloneOptions) error {
	if err := pool.CheckNames("clone", src, dst); err != nil {
		return err
	}
	start := time.Now()
	srcPath, dstPath := filepath.Join(p.dir, src), filepath.Join(p.dir, dst)
	fi, err := os.Lstat(srcPath)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !fi.IsDir()) {
		return fmt.Errorf("clone dataset %s: %w", src, errs.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("clone dataset %s: %w", src, err)
	}
	if _, err := os.Lstat(dstPath); err == nil {
		return fmt.Errorf("clone dataset %s to %s: %w", src, dst, errs.ErrConflict)
	}
	kind, id, _ := strings.Cut(dst, "/")
	kdir, err := fsutil.KindDir(p.dir, kind)
	if err != nil {
		return fmt.Errorf("clone dataset %s to %s: %w", src, dst, err)
	}
	tmp := filepath.Join(kdir, hidden(tmpPrefix, id))
	if err := copyTree(ctx, srcPath, tmp); err != nil {
		if rerr := removeAll(context.WithoutCancel(ctx), tmp); rerr != nil {
			p.log.Warn("remove partial clone", "path", tmp, "err", rerr)
		}
		return fmt.Errorf("clone dataset %s to %s: %w", src, dst, err)
	}
	// A copy of a read-only source carries no immutable flags (cp does not
	// copy inode flags), so the rename below cannot be refused for that.
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dstPath, unix.RENAME_NOREPLACE); err != nil {
		if rerr := removeAll(context.WithoutCancel(ctx), tmp); rerr != nil {
			p.log.Warn("remove unused clone", "path", tmp, "err", rerr)
		}
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			return fmt.Errorf("clone dataset %s to %s: %w", src, dst, errs.ErrConflict)
		}
		return fmt.Errorf("clone dataset %s to %s: %w", src, dst, err)
	}
	if opts.ReadOnly {
		if err := setImmutable(ctx, dstPath, true); err != nil {
			if derr := p.Delete(context.WithoutCancel(ctx), dst); derr != nil {
				p.log.Warn("remove clone that could not be made read-only", "dataset", dst, "err", derr)
			}
			return fmt.Errorf("clone dataset %s to %s: make read-only: %w", src, dst, err)
		}
	}
	p.log.Debug("cloned dataset", "op", "clone", "dataset", dst, "src", src, "readonly", opts.ReadOnly, "dur", time.Since(start))
	return nil
}

// copyTree copies the tree src to dst, which must not exist. A dataset
// may belong to a running sandbox that changes it meanwhile: the copy works
// on descriptors below src's root and never follows a symlink out of it
// (files.Root.CopyTree), unlike cp, which walks by path.
func copyTree(ctx context.Context, src, dst string) error {
	root, err := files.OpenRoot(src)
	if err != nil {
		return err
	}
	defer root.Close()
	pfd, err := unix.Open(filepath.Dir(dst), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("copy to %s: %w", dst, err)
	}
	defer unix.Close(pfd)
	return root.CopyTree(ctx, "/", pfd, filepath.Base(dst))
}

// Delete removes the dataset, clearing immutable flags as it goes.
func (p *Pool) Delete(ctx context.Context, name string) error {
	if err := pool.CheckName(name); err != nil {
		return fmt.Errorf("delete dataset: %w", err)
	}
	path := filepath.Join(p.dir, name)
	if _, err := os.Lstat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete dataset %s: %w", name, errs.ErrNotFound)
		}
		return fmt.Errorf("delete dataset %s: %w", name, err)
	}
	// An immutable directory cannot be renamed: clear the root's flag first.
	if err := setFlag(path, false); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete dataset %s: %w", name, err)
	}
	kind, id, _ := strings.Cut(name, "/")
	tomb := filepath.Join(p.dir, kind, hidden(tombPrefix, id))
	if err := os.Rename(path, tomb); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete dataset %s: %w", name, errs.ErrNotFound)
		}
		return fmt.Errorf("delete dataset %s: %w", name, err)
	}
	if err := removeAll(ctx, tomb); err != nil {
		return fmt.Errorf("delete dataset %s: %w", name, err)
	}
	p.log.Debug("deleted dataset", "op", "delete", "dataset", name)
	return nil
}

// removeAll removes path, clearing immutable and append-only flags when
// they are in the way.
func removeAll(ctx context.Context, path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	if err := setImmutable(ctx, path, false); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.RemoveAll(path)
}

// List returns the ids of kind, sorted.
func (p *Pool) List(ctx context.Context, kind string) ([]string, error) {
	return fsutil.List(p.dir, kind)
}

// SetReadOnly sets or clears the immutable flag on every directory and
// regular file of the dataset.
func (p *Pool) SetReadOnly(ctx context.Context, name string, ro bool) error {
	if err := pool.CheckName(name); err != nil {
		return fmt.Errorf("set dataset read-only: %w", err)
	}
	path := filepath.Join(p.dir, name)
	if _, err := os.Lstat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("set dataset %s read-only=%t: %w", name, ro, errs.ErrNotFound)
		}
		return fmt.Errorf("set dataset %s read-only=%t: %w", name, ro, err)
	}
	if err := setImmutable(ctx, path, ro); err != nil {
		return fmt.Errorf("set dataset %s read-only=%t: %w", name, ro, err)
	}
	return nil
}

// SetQuota returns errs.ErrUnsupported.
func (p *Pool) SetQuota(ctx context.Context, name string, bytes int64) error {
	if err := pool.CheckName(name); err != nil {
		return fmt.Errorf("set dataset quota: %w", err)
	}
	return fmt.Errorf("set dataset %s quota: dir pool: %w", name, errs.ErrUnsupported)
}

// Usage returns the apparent size of the dataset's files, each hard-linked
// inode counted once.
func (p *Pool) Usage(ctx context.Context, name string) (int64, error) {
	if err := pool.CheckName(name); err != nil {
		return 0, fmt.Errorf("dataset usage: %w", err)
	}
	if _, err := os.Lstat(filepath.Join(p.dir, name)); errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("dataset %s usage: %w", name, errs.ErrNotFound)
	}
	return fsutil.DatasetSize(ctx, p.dir, name)
}

// Capacity reports the size and use of the file system holding the pool
// and the reserve; LimitBytes is 0 (nothing is enforced) and
// DatasetsBytes -1 (walking every dataset is too slow to do often).
func (p *Pool) Capacity(ctx context.Context) (pool.Capacity, error) {
	size, used, err := pool.StatFS(p.dir)
	if err != nil {
		return pool.Capacity{}, fmt.Errorf("pool capacity: %w", err)
	}
	c := pool.Capacity{SizeBytes: size, UsedBytes: used, ReserveBytes: p.reserve, DatasetsBytes: -1}
	if c.ReserveBytes == 0 {
		c.ReserveBytes = pool.DefaultReserve(size)
	}
	c.ReserveBytes = min(c.ReserveBytes, size)
	return c, nil
}

// Close does nothing; the pool holds no handles.
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
