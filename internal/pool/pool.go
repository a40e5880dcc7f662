// Package pool defines the storage pool: named copy-on-write datasets that
// hold template roots and sandbox roots (and, later, volumes and snapshots).
// Implementations live in pool/btrfs (subvolumes, O(1) clones, qgroup
// quotas) and pool/dir (reflink or plain copies); both pass the contract
// suite in pool/pooltest.
//
// Dataset names are "<kind>/<id>" where kind is one of the Kind* constants
// and id matches ValidID. Path returns where a dataset lives on the host.
package pool

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
)

// Dataset kinds.
const (
	KindTemplate = "templates"
	KindSandbox  = "sandboxes"
	KindSnapshot = "snapshots"
	KindVolume   = "volumes"
)

// ValidID reports whether id may name a dataset: 1 to 128 characters of
// [a-z0-9._-], starting with a letter or digit, without "..". (Checked by
// hand rather than with a regexp: this package is linked into the init that
// starts in every sandbox, where package-level regexp compiles cost time.)
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 128 || strings.Contains(id, "..") {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Name builds a dataset name and validates it.
func Name(kind, id string) (string, error) {
	switch kind {
	case KindTemplate, KindSandbox, KindSnapshot, KindVolume:
	default:
		return "", fmt.Errorf("dataset kind %q: %w", kind, errs.ErrInvalid)
	}
	if !ValidID(id) {
		return "", fmt.Errorf("dataset id %q: %w", id, errs.ErrInvalid)
	}
	return kind + "/" + id, nil
}

// CheckName validates a full dataset name ("kind/id").
func CheckName(name string) error {
	kind, id, ok := strings.Cut(name, "/")
	if !ok {
		return fmt.Errorf("dataset name %q: %w", name, errs.ErrInvalid)
	}
	_, err := Name(kind, id)
	return err
}

// CheckNames validates the source and destination names of a two-name
// operation op ("clone", "rename"), wording errors for it.
func CheckNames(op, src, dst string) error {
	if err := CheckName(src); err != nil {
		return fmt.Errorf("%s dataset: source: %w", op, err)
	}
	if err := CheckName(dst); err != nil {
		return fmt.Errorf("%s dataset %s: destination: %w", op, src, err)
	}
	return nil
}

// Caps says what an implementation can do.
type Caps struct {
	// ConstantTimeClone is true when Clone costs O(1) in the dataset size.
	ConstantTimeClone bool
	// Quota is true when SetQuota is enforced (writes fail with ENOSPC/EDQUOT).
	Quota bool
}

// Capacity is a pool's size and fill level. The daemon bounds what it
// promises (the disk quotas of sandboxes and volumes) by it, shows it in
// `stead info` and warns before the pool is full.
type Capacity struct {
	// SizeBytes is the size of the file system that holds the pool (for a
	// loop-backed btrfs, the image; for a pool on an existing file system,
	// all of it).
	SizeBytes int64
	// UsedBytes is what is in use on that file system, by the pool's
	// datasets and by anything else on it (SizeBytes minus what an
	// unprivileged writer could still write).
	UsedBytes int64
	// ReserveBytes is held back from the datasets: what is left for the
	// daemon's own writes (its database when it shares the file system,
	// subvolume metadata, a stop and a start) when the datasets are full.
	ReserveBytes int64
	// LimitBytes is the bound the pool enforces on all datasets together
	// (SizeBytes - ReserveBytes), 0 when it enforces none (Caps().Quota is
	// false): then the reserve is only a figure for admission.
	LimitBytes int64
	// DatasetsBytes is what the datasets use together, as the pool last
	// accounted it (btrfs: the shared qgroup, as of the last transaction
	// commit, at most 30 s old); -1 when the pool cannot tell cheaply.
	DatasetsBytes int64
}

// Usable is what the datasets may hold together: SizeBytes minus the
// reserve, and never below 0.
func (c Capacity) Usable() int64 { return max(c.SizeBytes-c.ReserveBytes, 0) }

// fullSlack is how close to its bound a pool counts as full: a qgroup
// stops writes a few blocks short of its limit.
const fullSlack = 1 << 20

// enforced reports whether the fill level comes from the datasets' own
// accounting (the pool enforces a limit and knows their bytes).
func (c Capacity) enforced() bool { return c.LimitBytes > 0 && c.DatasetsBytes >= 0 }

// Full reports whether the datasets have reached their limit (less than
// 1 MiB left) or, where the pool enforces none, its file system is full.
func (c Capacity) Full() bool {
	if c.enforced() {
		return c.LimitBytes-c.DatasetsBytes < fullSlack
	}
	return c.SizeBytes > 0 && c.SizeBytes-c.UsedBytes < fullSlack
}

// Fill is how full the pool is, from 0 to 1 (1 when Full): the datasets'
// share of their limit where the pool enforces one, else the share of the
// file system in use. (btrfs's statfs can report nothing available for a
// moment while metadata chunks are being allocated, with room left: it is
// not a fill level to act on.)
func (c Capacity) Fill() float64 {
	switch {
	case c.Full():
		return 1
	case c.enforced():
		return min(float64(c.DatasetsBytes)/float64(c.LimitBytes), 1)
	case c.SizeBytes > 0:
		return min(float64(c.UsedBytes)/float64(c.SizeBytes), 1)
	}
	return 0
}

// MinReserve is the smallest reserve DefaultReserve gives.
const MinReserve int64 = 512 << 20

// DefaultReserve is the reserve of a pool of size bytes when none is
// configured: 10% of it, at least 512 MiB, and never more than half of it.
// On btrfs the reserve must cover what the datasets' accounting does not
// see: the second copy of DUP metadata, chunk slack and the global block
// reserve (a fresh 1 GiB file system offers 0.88 GiB to writers).
func DefaultReserve(size int64) int64 {
	r := max(size/10, MinReserve)
	return min(r, size/2)
}

// StatFS returns the size of the file system holding dir and what is in
// use on it (size minus what an unprivileged writer could still write).
func StatFS(dir string) (size, used int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	bs := int64(st.Bsize)
	if st.Frsize > 0 {
		bs = int64(st.Frsize)
	}
	size = int64(st.Blocks) * bs
	return size, size - int64(st.Bavail)*bs, nil
}

// FormatBytes writes n bytes for a message: "512 MiB", "1.5 GiB", "30 GiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for (v >= unit || v <= -unit) && i < 5 {
		v /= unit
		i++
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + string("KMGTPE"[i]) + "iB"
}

// CloneOptions tunes Clone.
type CloneOptions struct {
	// ReadOnly makes the new dataset immutable (a snapshot).
	ReadOnly bool
	// Unshared makes a clone that shares no metadata with src: on btrfs a
	// new subvolume with src's files reflinked into it (their data is
	// shared), where a plain clone is a snapshot that shares src's whole
	// tree. It costs a walk of src, but snapshots of it do not slow the
	// snapshots of src: every snapshot of one subvolume adds a reference
	// to its shared tree blocks, and the next snapshot of it pays for all
	// of them (bench/btrfssnap). A crash during an unshared clone can
	// leave a partial dst: give it a name a restart sweeps. Pools whose
	// clones are copies anyway ignore it.
	Unshared bool
}

// Pool stores datasets.
//
// Contract, checked by pooltest:
//   - Create makes an empty writable directory owned by root, mode 0755;
//     errs.ErrConflict if the name exists.
//   - Clone makes dst a copy of src with identical content, modes, owners,
//     symlinks, hardlinks, xattrs and sparse holes, independent of src
//     (writes to either are invisible in the other). errs.ErrNotFound if src
//     is absent, errs.ErrConflict if dst exists. A failed Clone leaves no dst.
//   - Delete removes a dataset and everything in it, read-only ones too;
//     errs.ErrNotFound if absent.
//   - Rename moves a dataset to a new name of the same kind, atomically:
//     afterwards exactly one of the two names exists. errs.ErrNotFound if
//     src is absent, errs.ErrConflict if dst exists (nothing changes),
//     errs.ErrInvalid if the kinds differ.
//   - RenameUnsynced is Rename without waiting until the change is
//     durable: the same names, errors and atomicity, visible at once and
//     kept through a crash of the process; a crash of the machine before
//     the file system's next commit may undo it (src is back, whole, and
//     dst absent). For a caller that records the rename durably beforehand
//     and redoes it after such a crash. (On btrfs the fsync that makes a
//     rename of a subvolume durable commits the whole file system
//     transaction, which costs more the more subvolumes the pool holds.)
//   - Exchange swaps the names of two existing datasets of the same kind,
//     atomically (a rollback swaps a sandbox's root with a new clone).
//     errs.ErrNotFound if either is absent.
//   - SetReadOnly(true) makes every write under the dataset fail (EROFS or
//     EPERM); SetReadOnly(false) undoes it.
//   - SetQuota limits a dataset's exclusive usage; 0 removes the limit.
//     errs.ErrUnsupported when Caps().Quota is false.
//   - Capacity reports the pool's size, use and reserve (see Capacity).
//     When Caps().Quota is true the pool enforces LimitBytes on all its
//     datasets together, quotas or not: writes into datasets fail with
//     EDQUOT or ENOSPC before they hold more than LimitBytes, and
//     Create, Clone, Delete and writes outside the datasets still work
//     then. When it is false nothing is enforced (the caller refuses what
//     cannot fit and warns).
//   - Invalid names return errs.ErrInvalid and touch nothing.
//   - List(kind) returns the ids of that kind, sorted.
//   - Methods are safe for concurrent use on distinct names.
type Pool interface {
	// Kind names the implementation ("btrfs", "dir").
	Kind() string
	Caps() Caps
	// Path is the host directory of a dataset (it may not exist).
	Path(name string) string
	Exists(ctx context.Context, name string) (bool, error)
	Create(ctx context.Context, name string) error
	Clone(ctx context.Context, src, dst string, opts CloneOptions) error
	Delete(ctx context.Context, name string) error
	Rename(ctx context.Context, src, dst string) error
	RenameUnsynced(ctx context.Context, src, dst string) error
	Exchange(ctx context.Context, a, b string) error
	List(ctx context.Context, kind string) ([]string, error)
	SetReadOnly(ctx context.Context, name string, ro bool) error
	SetQuota(ctx context.Context, name string, bytes int64) error
	// Usage returns the bytes a dataset uses (exclusive where the
	// implementation can tell, else apparent).
	Usage(ctx context.Context, name string) (int64, error)
	// Capacity returns the pool's size and fill level. It is cheap (a
	// statfs and, on btrfs, one qgroup lookup): the daemon calls it on
	// every create and every policy tick.
	Capacity(ctx context.Context) (Capacity, error)
	// Close releases the pool (a btrfs pool on a loop image stays mounted
	// for running sandboxes; Close only drops handles).
	Close() error
}

// RenameAt renames dataset src to dst (both valid names of the same kind)
// under the pool directory dir with renameat2(RENAME_NOREPLACE), mapping
// errors to the Pool contract; it fails at once when ctx is done. Both
// implementations' Rename is this call.
func RenameAt(ctx context.Context, dir, src, dst string) error {
	return renameAt(ctx, dir, src, dst, unix.RENAME_NOREPLACE, "rename", true)
}

// RenameAtUnsynced is RenameAt without the fsync that makes the rename
// durable (see RenameUnsynced in the Pool contract). Both
// implementations' RenameUnsynced is this call.
func RenameAtUnsynced(ctx context.Context, dir, src, dst string) error {
	return renameAt(ctx, dir, src, dst, unix.RENAME_NOREPLACE, "rename", false)
}

// ExchangeAt atomically swaps datasets a and b (both existing, same kind)
// under the pool directory dir with renameat2(RENAME_EXCHANGE), mapping
// errors to the Pool contract. Both implementations use it.
func ExchangeAt(ctx context.Context, dir, a, b string) error {
	return renameAt(ctx, dir, a, b, unix.RENAME_EXCHANGE, "exchange", true)
}

func renameAt(ctx context.Context, dir, src, dst string, flags uint, verb string, sync bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s dataset %s: %w", verb, src, err)
	}
	if err := CheckNames(verb, src, dst); err != nil {
		return err
	}
	sk, _, _ := strings.Cut(src, "/")
	dk, _, _ := strings.Cut(dst, "/")
	if sk != dk {
		return fmt.Errorf("%s dataset %s with %s: kinds differ: %w", verb, src, dst, errs.ErrInvalid)
	}
	err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(dir, src), unix.AT_FDCWD, filepath.Join(dir, dst), flags)
	switch {
	case err == nil && !sync:
		return nil
	case err == nil:
		// The change is durable once its directory is.
		fd, err := unix.Open(filepath.Join(dir, sk), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s dataset %s: sync: %w", verb, src, err)
		}
		defer unix.Close(fd)
		if err := unix.Fsync(fd); err != nil {
			return fmt.Errorf("%s dataset %s: sync: %w", verb, src, err)
		}
		return nil
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%s dataset %s with %s: %w", verb, src, dst, errs.ErrNotFound)
	case errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTEMPTY):
		return fmt.Errorf("%s dataset %s to %s: %w", verb, src, dst, errs.ErrConflict)
	}
	return fmt.Errorf("%s dataset %s with %s: %w", verb, src, dst, err)
}

// UsageReader is implemented by pools that read the usage of many datasets
// in one pass (btrfs: one sync and one walk of the quota tree, instead of a
// sync and a search per dataset).
type UsageReader interface {
	// Usages returns what Usage would return for each of names that
	// exists; a name that does not exist, or whose usage cannot be read,
	// is left out of the map. It fails only when nothing can be read.
	Usages(ctx context.Context, names []string) (map[string]int64, error)
}

// Usages returns the usage of each of names from p: in one pass when p is
// a UsageReader, else by one Usage call per name. Names whose usage cannot
// be read are left out.
func Usages(ctx context.Context, p Pool, names []string) map[string]int64 {
	if r, ok := p.(UsageReader); ok {
		if m, err := r.Usages(ctx, names); err == nil {
			return m
		}
	}
	out := make(map[string]int64, len(names))
	for _, n := range names {
		if ctx.Err() != nil {
			break
		}
		if u, err := p.Usage(ctx, n); err == nil {
			out[n] = u
		}
	}
	return out
}
