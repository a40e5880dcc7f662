// Package treedigest computes a deterministic digest of a directory tree, to
// prove that a sandbox root after a restart (or restore) equals the root
// before the stop, and lists the per-entry lines behind it so two trees that
// differ can be diffed.
//
// Each entry contributes one line holding its path (relative to the root,
// quoted with strconv.Quote so non-UTF-8 bytes and newlines are safe), type,
// permission bits including setuid/setgid/sticky, numeric owner, size and
// nanosecond modification time (directories: see Options.NoMtimeDirs),
// symlink target, device numbers, all extended attributes (sorted, values in
// hex), for regular files the data/hole layout found with SEEK_DATA and
// SEEK_HOLE and a SHA-256 of the content, and a hardlink group. Inode
// numbers never appear: files sharing an inode inside the tree get the same
// group number, numbered in walk order, so a faithful copy (cp -a) digests
// equal. Access and change times are not covered. Entries are walked depth
// first with names sorted bytewise; symlinks are never followed and the
// walk never leaves the tree through them.
package treedigest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/xattr"
)

// Options tunes what the digest covers.
type Options struct {
	// Exclude lists root-relative paths ("/tmp", "/proc") skipped together
	// with everything below them.
	Exclude []string
	// NoMtimeDirs leaves directory modification times out (they change
	// whenever an entry is created and removed again).
	NoMtimeDirs bool
}

// Digest returns "sha256:<hex>" over the Entries of the tree at root (a host
// directory). It fails if root cannot be read completely; an entry vanishing
// during the walk is an error, because the tree was not quiescent.
func Digest(ctx context.Context, root string, opts Options) (string, error) {
	lines, err := Entries(ctx, root, opts)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, l := range lines {
		io.WriteString(h, l)
		h.Write([]byte{'\n'})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// Entries returns one line per entry of the tree at root, in walk order
// (depth first, names sorted bytewise, the root itself first as "/"). The
// lines are stable across runs and machines for equal trees; compare two
// lists with Diff.
func Entries(ctx context.Context, root string, opts Options) ([]string, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("digest tree %s: %w", root, err)
	}
	defer unix.Close(fd)
	w := walker{ctx: ctx, opts: opts, exclude: map[string]bool{}}
	for _, e := range opts.Exclude {
		w.exclude[path.Clean("/"+e)] = true
	}
	if err := w.walkDir(fd, "/"); err != nil {
		return nil, fmt.Errorf("digest tree %s: %w", root, err)
	}
	// Hardlink groups: only inodes met more than once inside the tree.
	counts := map[[2]uint64]int{}
	for _, e := range w.entries {
		if e.linked {
			counts[e.inode]++
		}
	}
	next := 0
	group := map[[2]uint64]int{}
	out := make([]string, len(w.entries))
	for i, e := range w.entries {
		line := e.line
		if e.linked && counts[e.inode] > 1 {
			g, ok := group[e.inode]
			if !ok {
				next++
				g = next
				group[e.inode] = g
			}
			line += " link=" + strconv.Itoa(g)
		}
		out[i] = line
	}
	return out, nil
}

// Diff compares two Entries lists by path and returns human-readable
// differences: "- line" for an entry only in (or changed from) a, "+ line"
// for an entry only in (or changed in) b, in path order. It returns nil for
// equal lists.
func Diff(a, b []string) []string {
	key := func(l string) string {
		k, _, _ := strings.Cut(l, " type=")
		return k
	}
	am := map[string]string{}
	for _, l := range a {
		am[key(l)] = l
	}
	bm := map[string]string{}
	for _, l := range b {
		bm[key(l)] = l
	}
	var keys []string
	for k := range am {
		keys = append(keys, k)
	}
	for k := range bm {
		if _, ok := am[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		la, oka := am[k]
		lb, okb := bm[k]
		if oka && okb && la == lb {
			continue
		}
		if oka {
			out = append(out, "- "+la)
		}
		if okb {
			out = append(out, "+ "+lb)
		}
	}
	return out
}

type entry struct {
	line   string
	inode  [2]uint64
	linked bool // a non-directory with st_nlink > 1
}

type walker struct {
	ctx     context.Context
	opts    Options
	exclude map[string]bool
	entries []entry
	buf     []byte
}

// walkDir records the directory open as fd (at path p) and its subtree.
func (w *walker) walkDir(fd int, p string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	if err := w.record(fd, -1, "", p, &st); err != nil {
		return err
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return fmt.Errorf("list %s: %w", p, err)
	}
	f := os.NewFile(uintptr(dup), p)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("list %s: %w", p, err)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		cp := path.Join(p, name)
		if w.exclude[cp] {
			continue
		}
		var cst unix.Stat_t
		if err := unix.Fstatat(fd, name, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %s: %w", cp, err)
		}
		switch cst.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			cfd, err := openNoFollow(fd, name, unix.O_DIRECTORY)
			if err != nil {
				return fmt.Errorf("open %s: %w", cp, err)
			}
			err = w.walkDir(cfd, cp)
			unix.Close(cfd)
			if err != nil {
				return err
			}
		case unix.S_IFREG:
			cfd, err := openNoFollow(fd, name, unix.O_NONBLOCK|unix.O_NOCTTY)
			if err != nil {
				return fmt.Errorf("open %s: %w", cp, err)
			}
			var st2 unix.Stat_t
			err = unix.Fstat(cfd, &st2)
			if err == nil && (st2.Ino != cst.Ino || st2.Dev != cst.Dev) {
				err = fmt.Errorf("changed during the walk")
			}
			if err == nil {
				err = w.record(cfd, fd, name, cp, &st2)
			}
			unix.Close(cfd)
			if err != nil {
				return err
			}
		default:
			if err := w.record(-1, fd, name, cp, &cst); err != nil {
				return err
			}
		}
	}
	return nil
}

func openNoFollow(dirfd int, name string, flags int) (int, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOATIME|flags, 0)
	if err == unix.EPERM {
		fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|flags, 0)
	}
	return fd, err
}

// record appends the line for one entry: fd is an open descriptor of it
// (regular files and directories) or -1, in which case it is addressed as
// name inside dirfd.
func (w *walker) record(fd, dirfd int, name, p string, st *unix.Stat_t) error {
	var b strings.Builder
	b.WriteString(strconv.Quote(p))
	ft := st.Mode & unix.S_IFMT
	b.WriteString(" type=")
	b.WriteString(typeName(ft))
	fmt.Fprintf(&b, " mode=%04o uid=%d gid=%d", st.Mode&0o7777, st.Uid, st.Gid)
	if ft != unix.S_IFDIR {
		fmt.Fprintf(&b, " size=%d", st.Size)
	}
	if ft != unix.S_IFDIR || !w.opts.NoMtimeDirs {
		fmt.Fprintf(&b, " mtime=%d", st.Mtim.Sec*1e9+st.Mtim.Nsec)
	}
	switch ft {
	case unix.S_IFLNK:
		t, err := fsutil.ReadlinkAt(dirfd, name)
		if err != nil {
			return fmt.Errorf("readlink %s: %w", p, err)
		}
		b.WriteString(" target=" + strconv.Quote(t))
	case unix.S_IFCHR, unix.S_IFBLK:
		fmt.Fprintf(&b, " dev=%d,%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	case unix.S_IFREG:
		layout, sum, err := w.content(fd, st.Size)
		if err != nil {
			return fmt.Errorf("hash %s: %w", p, err)
		}
		b.WriteString(" data=" + layout + " sha256=" + sum)
	}
	var xattrs map[string][]byte
	var err error
	if fd >= 0 {
		xattrs, err = xattr.AllFd(fd)
	} else {
		xattrs, err = xattr.AllAt(dirfd, name)
	}
	if err != nil {
		return fmt.Errorf("xattrs of %s: %w", p, err)
	}
	keys := make([]string, 0, len(xattrs))
	for k := range xattrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString(" xattr:" + strconv.Quote(k) + "=" + hex.EncodeToString(xattrs[k]))
	}
	w.entries = append(w.entries, entry{
		line:   b.String(),
		inode:  [2]uint64{st.Dev, st.Ino},
		linked: ft != unix.S_IFDIR && st.Nlink > 1,
	})
	return nil
}

func typeName(ft uint32) string {
	switch ft {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "chardev"
	case unix.S_IFBLK:
		return "blockdev"
	}
	return "unknown"
}

// content returns the data segments of the file ("start-end,..." or "-"
// for none) and the SHA-256 of the bytes in them. Holes read as zeros by
// definition, so layout plus this hash determine the content exactly.
func (w *walker) content(fd int, size int64) (string, string, error) {
	if w.buf == nil {
		w.buf = make([]byte, 1<<20)
	}
	h := sha256.New()
	var segs []string
	var off int64
	for off < size {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break
		}
		if err != nil {
			return "", "", fmt.Errorf("seek data: %w", err)
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return "", "", fmt.Errorf("seek hole: %w", err)
		}
		end = min(end, size)
		if end <= start {
			break
		}
		segs = append(segs, strconv.FormatInt(start, 10)+"-"+strconv.FormatInt(end, 10))
		for pos := start; pos < end; {
			if err := w.ctx.Err(); err != nil {
				return "", "", err
			}
			n, err := unix.Pread(fd, w.buf[:min(int64(len(w.buf)), end-pos)], pos)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return "", "", fmt.Errorf("read: %w", err)
			}
			if n == 0 {
				return "", "", fmt.Errorf("file shrank during the walk")
			}
			h.Write(w.buf[:n])
			pos += int64(n)
		}
		off = end
	}
	layout := "-"
	if len(segs) > 0 {
		layout = strings.Join(segs, ",")
	}
	return layout, hex.EncodeToString(h.Sum(nil)), nil
}
