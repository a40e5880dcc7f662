// Package treediff holds the seam between a storage pool that can tell
// what changed between two read-only snapshots of one dataset and the push
// that uses it to read only what changed (internal/repo). The btrfs pool
// implements it from subvolume tree generations and file extent items;
// pools that cannot tell (dir) do not implement Differ, and a push then
// walks the whole tree.
package treediff

import "context"

// Range is a byte range [Off, Off+Len) of a file.
type Range struct {
	Off int64
	Len int64
}

// Diff says what may differ between a base snapshot and a current one, two
// read-only snapshots of the same dataset, the base taken first.
//
// Contract: it may over-report (an inode it names may be unchanged) but
// never under-report. Every inode of the current snapshot whose metadata,
// xattrs, directory entries, names (links) or content differ from the
// same inode number in the base, and every inode absent from the base, is
// in Changed. A directory not in Changed has the same entries, pointing to
// the same inode numbers, as in the base. A Diff is safe for concurrent
// use; Close releases it.
type Diff interface {
	// Changed reports whether inode ino of the current snapshot may
	// differ from the same inode number in the base.
	Changed(ino uint64) bool
	// ChangedPaths lists the paths (slash-separated, relative to the
	// snapshot's root, every hardlink of an inode) of the inodes that may
	// have changed, in no particular order. Inodes no longer linked
	// anywhere are left out.
	ChangedPaths(ctx context.Context) ([]string, error)
	// BasePath returns where directory inode ino was in the base ("" for
	// the root), and false when the base has no such directory inode.
	BasePath(ctx context.Context, ino uint64) (string, bool, error)
	// ChangedRanges returns the byte ranges where the content of file
	// baseIno in the base may differ from file curIno now (sorted, not
	// overlapping). Bytes outside them and below both files' sizes are the
	// same in both; past the smaller size the caller compares sizes.
	ChangedRanges(ctx context.Context, baseIno, curIno uint64) ([]Range, error)
	Close() error
}

// Differ is implemented by pools that can compare two read-only snapshots
// of one dataset.
type Differ interface {
	// Diff compares the read-only snapshot at base with the read-only
	// snapshot at cur (host paths of two datasets). It fails, wrapping
	// errs.ErrUnsupported, when they are not two snapshots of the same
	// dataset, base first: the caller then walks the whole tree.
	Diff(ctx context.Context, base, cur string) (Diff, error)
}
