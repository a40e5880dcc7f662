package files

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"path"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
)

// DefaultUsageTop is how many entries of each list DiskUsage keeps when
// UsageOptions.Top is 0.
const DefaultUsageTop = 10

// maxUsageTop bounds UsageOptions.Top.
const maxUsageTop = 1000

// UsageOptions tune DiskUsage.
type UsageOptions struct {
	// Top is how many entries each list keeps (0: DefaultUsageTop; at
	// most 1000).
	Top int
}

// UsageEntry is one file or directory DiskUsage reports.
type UsageEntry struct {
	// Path is sandbox-absolute.
	Path string   `json:"path"`
	Type FileType `json:"type"`
	// Bytes is the space allocated: for a directory, everything under it
	// (Usage.Children) or only the files directly in it (Usage.LargestDirs).
	Bytes int64 `json:"bytes"`
	// Files counts the files the Bytes are made of.
	Files int64 `json:"files"`
}

// Usage is where the space under one path went.
type Usage struct {
	Path string `json:"path"`
	// Bytes is the space allocated under Path (st_blocks; a file with
	// several hard links counted once); ApparentBytes the sizes added up.
	Bytes         int64 `json:"bytes"`
	ApparentBytes int64 `json:"apparent_bytes"`
	Files         int64 `json:"files"`
	Dirs          int64 `json:"dirs"`
	// Children are Path's own entries, largest first (at most Top).
	Children []UsageEntry `json:"children"`
	// LargestFiles are the largest files anywhere under Path.
	LargestFiles []UsageEntry `json:"largest_files"`
	// LargestDirs are the directories whose own files (not their
	// sub-directories') take the most space: where the space went.
	LargestDirs []UsageEntry `json:"largest_dirs"`
	// Skipped counts entries that could not be read (vanished while the
	// walk ran, or unreadable) and mount points of other file systems.
	Skipped int64 `json:"skipped"`
}

// DiskUsage walks the tree at sandbox path p, as du and ncdu do, entirely
// on descriptors: p is resolved inside the root, and below it every
// directory is opened relative to its parent with RESOLVE_BENEATH and
// O_NOFOLLOW, so a hostile sandbox swapping a directory for a symlink
// mid-walk gets the symlink counted as one, never followed. Symlinks are
// not followed, other file systems are not entered, and a file with
// several hard links in the tree is counted once. Entries that vanish
// while the walk runs are counted in Skipped. The walk ends with ctx.
func (r *Root) DiskUsage(ctx context.Context, p string, opts UsageOptions) (Usage, error) {
	clean, err := CleanPath(p)
	if err != nil {
		return Usage{}, err
	}
	top := opts.Top
	switch {
	case top == 0:
		top = DefaultUsageTop
	case top < 0 || top > maxUsageTop:
		return Usage{}, fmt.Errorf("disk usage of %s: top %d: want 1 to %d: %w", clean, top, maxUsageTop, errs.ErrInvalid)
	}
	fd, err := r.open(clean, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		if clean == "/" || (!errors.Is(err, unix.ENOTDIR) && !errors.Is(err, unix.ELOOP)) {
			return Usage{}, opErr("disk usage", clean, err)
		}
		// p itself is a symlink, a file or a special file: stat it.
		pfd, name, perr := r.openParent(clean)
		if perr != nil {
			return Usage{}, opErr("disk usage", clean, perr)
		}
		defer unix.Close(pfd)
		var st unix.Stat_t
		if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return Usage{}, opErr("disk usage", clean, err)
		}
		w := newUsageWalk(ctx, top, st.Dev)
		w.leaf(clean, &st)
		return w.result(clean, nil), nil
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Usage{}, opErr("disk usage", clean, err)
	}
	w := newUsageWalk(ctx, top, st.Dev)
	w.u.Dirs++
	w.u.Bytes += st.Blocks * 512
	w.u.ApparentBytes += st.Size
	var children []UsageEntry
	own := UsageEntry{Path: clean, Type: TypeDir}
	if err := eachName(fd, clean, func(n string) error {
		e, err := w.entry(fd, n, path.Join(clean, n), 1, &own)
		if err != nil {
			return err
		}
		children = append(children, e)
		return nil
	}); err != nil {
		return Usage{}, err
	}
	w.dirs.offer(own)
	return w.result(clean, children), nil
}

// usageWalk is one DiskUsage walk.
type usageWalk struct {
	ctx   context.Context
	dev   uint64
	u     Usage
	seen  map[devIno]bool
	files *topEntries
	dirs  *topEntries
	top   int
}

func newUsageWalk(ctx context.Context, top int, dev uint64) *usageWalk {
	return &usageWalk{ctx: ctx, dev: dev, seen: map[devIno]bool{}, top: top,
		files: &topEntries{max: top}, dirs: &topEntries{max: top}}
}

// leaf counts a non-directory and returns its allocated bytes (0 for a
// further hard link to a file already counted).
func (w *usageWalk) leaf(p string, st *unix.Stat_t) int64 {
	if st.Nlink > 1 {
		k := devIno{st.Dev, st.Ino}
		if w.seen[k] {
			return 0
		}
		w.seen[k] = true
	}
	b := st.Blocks * 512
	w.u.Bytes += b
	w.u.ApparentBytes += st.Size
	w.u.Files++
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		w.files.offer(UsageEntry{Path: p, Type: TypeFile, Bytes: b, Files: 1})
	}
	return b
}

// entry counts the entry name of the directory dirfd (at path p, depth
// below the walk's root) and returns its total; parent collects the bytes
// of the files directly in the directory.
func (w *usageWalk) entry(dirfd int, name, p string, depth int, parent *UsageEntry) (UsageEntry, error) {
	if err := w.ctx.Err(); err != nil {
		return UsageEntry{}, fmt.Errorf("disk usage: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		w.u.Skipped++
		return UsageEntry{Path: p, Type: TypeOther}, nil
	}
	if st.Dev != w.dev {
		w.u.Skipped++ // another file system mounted here (or a btrfs subvolume)
		return UsageEntry{Path: p, Type: TypeDir}, nil
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		b := w.leaf(p, &st)
		parent.Bytes += b
		parent.Files++
		return UsageEntry{Path: p, Type: fileInfo(p, &st).Type, Bytes: b, Files: 1}, nil
	}
	total := UsageEntry{Path: p, Type: TypeDir, Bytes: st.Blocks * 512}
	w.u.Dirs++
	w.u.Bytes += total.Bytes
	w.u.ApparentBytes += st.Size
	if depth > maxCopyDepth {
		w.u.Skipped++
		return total, nil
	}
	fd, err := openChildDir(dirfd, name, unix.O_RDONLY)
	if err != nil {
		// Swapped for a symlink, removed, or unreadable: counted as is.
		w.u.Skipped++
		return total, nil
	}
	defer unix.Close(fd)
	own := UsageEntry{Path: p, Type: TypeDir}
	if err := eachName(fd, p, func(n string) error {
		e, err := w.entry(fd, n, path.Join(p, n), depth+1, &own)
		if err != nil {
			return err
		}
		total.Bytes += e.Bytes
		total.Files += e.Files
		return nil
	}); err != nil {
		if w.ctx.Err() != nil {
			return UsageEntry{}, err
		}
		w.u.Skipped++
	}
	w.dirs.offer(own)
	return total, nil
}

// result finishes the walk: children sorted and cut to top, the lists in
// order.
func (w *usageWalk) result(p string, children []UsageEntry) Usage {
	u := w.u
	u.Path = p
	sortEntries(children)
	if len(children) > w.top {
		children = children[:w.top]
	}
	u.Children = append([]UsageEntry{}, children...)
	u.LargestFiles = w.files.sorted()
	u.LargestDirs = w.dirs.sorted()
	return u
}

// sortEntries orders entries largest first, then by path.
func sortEntries(e []UsageEntry) {
	sort.Slice(e, func(i, j int) bool {
		if e[i].Bytes != e[j].Bytes {
			return e[i].Bytes > e[j].Bytes
		}
		return e[i].Path < e[j].Path
	})
}

// topEntries keeps the max largest entries offered (a min-heap by Bytes).
type topEntries struct {
	max int
	h   []UsageEntry
}

func (t *topEntries) Len() int           { return len(t.h) }
func (t *topEntries) Less(i, j int) bool { return t.h[i].Bytes < t.h[j].Bytes }
func (t *topEntries) Swap(i, j int)      { t.h[i], t.h[j] = t.h[j], t.h[i] }
func (t *topEntries) Push(x any)         { t.h = append(t.h, x.(UsageEntry)) }
func (t *topEntries) Pop() any {
	x := t.h[len(t.h)-1]
	t.h = t.h[:len(t.h)-1]
	return x
}

// offer keeps e if it is among the max largest so far (empty entries are
// never kept).
func (t *topEntries) offer(e UsageEntry) {
	if e.Bytes <= 0 {
		return
	}
	if len(t.h) < t.max {
		heap.Push(t, e)
		return
	}
	if e.Bytes > t.h[0].Bytes {
		t.h[0] = e
		heap.Fix(t, 0)
	}
}

// sorted returns the kept entries, largest first.
func (t *topEntries) sorted() []UsageEntry {
	out := append([]UsageEntry{}, t.h...)
	sortEntries(out)
	return out
}
