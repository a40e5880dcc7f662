package files

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/fsutil"
)

// maxCopyDepth bounds the directory nesting CopyTree follows.
const maxCopyDepth = 4096

// CopyTree copies the entry at sandbox path src of root r (a file, a
// symlink, a special file or a whole directory tree) to a new entry called
// name inside the directory dstDir, as `cp -a --reflink=auto` would, but
// entirely on descriptors: both trees may be changed by a hostile sandbox
// while the copy runs, and neither is ever left. The source is resolved
// inside r (RESOLVE_IN_ROOT); below it, every directory and file is opened
// relative to its parent's descriptor with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS
// and O_NOFOLLOW, so a directory swapped for a symlink mid-copy is refused,
// never followed; the destination is built the same way below dstDir.
//
// Files keep their data (reflinked where the file system can, sparse files
// stay sparse), mode, owner, times and extended attributes, symlinks their
// target, hard links within the tree their sharing. Owners and attributes
// the caller may not set (an unprivileged caller, see AsUser) are left as
// the kernel makes them, as cp does for a user; a device node the caller
// may not make fails the copy. name must not exist in dstDir.
func (r *Root) CopyTree(ctx context.Context, src string, dstDir int, name string) error {
	p, err := CleanPath(src)
	if err != nil {
		return err
	}
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("copy %s: destination name %q: %w", p, name, errs.ErrInvalid)
	}
	var sfd int
	var sname string
	if p == "/" {
		if sfd, err = unix.Dup(r.fd); err != nil {
			return fmt.Errorf("copy %s: %w", p, err)
		}
		sname = "."
	} else if sfd, sname, err = r.openParent(p); err != nil {
		return opErr("copy", p, err)
	}
	defer unix.Close(sfd)
	c := &copier{ctx: ctx, links: map[devIno]string{}}
	rootfd, err := unix.Dup(dstDir)
	if err != nil {
		return fmt.Errorf("copy %s: %w", p, err)
	}
	defer unix.Close(rootfd)
	c.dstRoot = rootfd
	if err := c.entry(sfd, sname, dstDir, name, name, p, 0); err != nil {
		return err
	}
	return nil
}

type devIno struct{ dev, ino uint64 }

type copier struct {
	ctx     context.Context
	dstRoot int               // the destination's parent directory
	links   map[devIno]string // first copy of a multiply-linked file, relative to dstRoot
}

// entry copies sname in sdir to dname in ddir; rel is dname's path below
// dstRoot and p the source's sandbox path (for errors).
func (c *copier) entry(sdir int, sname string, ddir int, dname, rel, p string, depth int) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(sdir, sname, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return opErr("copy", p, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return c.dir(sdir, sname, ddir, dname, rel, p, depth)
	case unix.S_IFREG:
		return c.file(sdir, sname, ddir, dname, rel, p, &st)
	case unix.S_IFLNK:
		target, err := fsutil.ReadlinkAt(sdir, sname)
		if err != nil {
			return opErr("copy", p, err)
		}
		if err := unix.Symlinkat(target, ddir, dname); err != nil {
			return opErr("copy", p, err)
		}
		if err := ignorePerm(unix.Fchownat(ddir, dname, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW)); err != nil {
			return opErr("copy", p, err)
		}
		return c.times(ddir, dname, &st, p)
	default:
		if err := unix.Mknodat(ddir, dname, st.Mode, int(st.Rdev)); err != nil {
			return opErr("copy", p, err)
		}
		if err := ignorePerm(unix.Fchownat(ddir, dname, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW)); err != nil {
			return opErr("copy", p, err)
		}
		if err := unix.Fchmodat(ddir, dname, st.Mode&0o7777, 0); err != nil && !errors.Is(err, unix.EPERM) {
			return opErr("copy", p, err)
		}
		return c.times(ddir, dname, &st, p)
	}
}

func (c *copier) times(ddir int, dname string, st *unix.Stat_t, p string) error {
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(ddir, dname, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return opErr("copy", p, err)
	}
	return nil
}

// openBeneath opens name directly inside dirfd, never through a symlink.
func openBeneath(dirfd int, name string, flags uint64) (int, error) {
	return openat2(dirfd, name, flags|unix.O_NOFOLLOW,
		unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
}

func (c *copier) dir(sdir int, sname string, ddir int, dname, rel, p string, depth int) error {
	if depth > maxCopyDepth {
		return fmt.Errorf("copy %s: directories nested deeper than %d: %w", p, maxCopyDepth, errs.ErrInvalid)
	}
	sfd, err := openBeneath(sdir, sname, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return opErr("copy", p, err)
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return opErr("copy", p, err)
	}
	if err := unix.Mkdirat(ddir, dname, 0o700); err != nil {
		return opErr("copy", p, err)
	}
	dfd, err := openBeneath(ddir, dname, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return opErr("copy", p, err)
	}
	defer unix.Close(dfd)
	if err := eachName(sfd, p, func(n string) error {
		return c.entry(sfd, n, dfd, n, rel+"/"+n, path.Join(p, n), depth+1)
	}); err != nil {
		return err
	}
	if err := c.meta(sfd, dfd, &st, p); err != nil {
		return err
	}
	return nil
}

// eachName calls fn with the name of every entry (but . and ..) of the
// directory p open as fd, stopping at fn's first error, which it returns
// as is.
func eachName(fd int, p string, fn func(string) error) error {
	d, err := unix.Dup(fd)
	if err != nil {
		return opErr("read directory", p, err)
	}
	f := os.NewFile(uintptr(d), "dir")
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return opErr("read directory", p, err)
	}
	for _, n := range names {
		if err := fn(n); err != nil {
			return err
		}
	}
	return nil
}

func (c *copier) file(sdir int, sname string, ddir int, dname, rel, p string, lst *unix.Stat_t) error {
	if lst.Nlink > 1 {
		if first, ok := c.links[devIno{lst.Dev, lst.Ino}]; ok {
			return c.link(first, ddir, dname, p)
		}
	}
	// O_NONBLOCK: a FIFO swapped in after the lstat must not hang the copy.
	sfd, err := openBeneath(sdir, sname, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return opErr("copy", p, err)
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return opErr("copy", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("copy %s: changed while copying: %w", p, errs.ErrConflict)
	}
	dfd, err := openat2(ddir, dname, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return opErr("copy", p, err)
	}
	defer unix.Close(dfd)
	if err := copyData(sfd, dfd, st.Size); err != nil {
		return opErr("copy", p, err)
	}
	if err := c.meta(sfd, dfd, &st, p); err != nil {
		return err
	}
	if st.Nlink > 1 {
		c.links[devIno{st.Dev, st.Ino}] = rel
	}
	return nil
}

// link makes dname in ddir a hard link to the file already copied at first
// (a path below dstRoot, resolved beneath it without symlinks).
func (c *copier) link(first string, ddir int, dname, p string) error {
	dir, base := path.Split(first)
	pfd := c.dstRoot
	if dir != "" {
		fd, err := openBeneath(c.dstRoot, strings.TrimSuffix(dir, "/"), unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return opErr("copy", p, err)
		}
		defer unix.Close(fd)
		pfd = fd
	}
	if err := unix.Linkat(pfd, base, ddir, dname, 0); err != nil {
		return opErr("copy", p, err)
	}
	return nil
}

// copyData copies size bytes of sfd to the empty file dfd: a reflink where
// the file system can, else the data regions only (holes stay holes).
func copyData(sfd, dfd int, size int64) error {
	if size == 0 {
		return nil
	}
	if err := unix.IoctlFileClone(dfd, sfd); err == nil {
		return nil
	}
	regions, sparse, err := fsutil.DataRegions(sfd, size)
	if err != nil {
		return err
	}
	if !sparse {
		regions = []fsutil.Region{{Off: 0, Len: size}}
	}
	for _, rg := range regions {
		off, end := rg.Off, rg.Off+rg.Len
		for off < end {
			roff, woff := off, off
			n, err := unix.CopyFileRange(sfd, &roff, dfd, &woff, int(min(end-off, 1<<30)), 0)
			if err != nil {
				if errors.Is(err, unix.EINTR) {
					continue
				}
				return err
			}
			if n == 0 {
				return fmt.Errorf("source shrank while copying: %w", errs.ErrConflict)
			}
			off += int64(n)
		}
	}
	return unix.Ftruncate(dfd, size)
}

// meta gives dfd the owner, mode, extended attributes and times of the
// source sfd (stat st). Owner and attributes the caller may not set are
// left alone.
func (c *copier) meta(sfd, dfd int, st *unix.Stat_t, p string) error {
	if err := ignorePerm(unix.Fchown(dfd, int(st.Uid), int(st.Gid))); err != nil {
		return opErr("copy", p, err)
	}
	if err := copyXattrs(sfd, dfd); err != nil {
		return opErr("copy", p, err)
	}
	// After chown, which clears setuid and setgid bits.
	if err := unix.Fchmod(dfd, st.Mode&0o7777); err != nil && !errors.Is(err, unix.EPERM) {
		return opErr("copy", p, err)
	}
	if err := futimensBoth(dfd, st.Atim, st.Mtim); err != nil {
		return opErr("copy", p, err)
	}
	return nil
}

func futimensBoth(fd int, atime, mtime unix.Timespec) error {
	return unix.UtimesNanoAt(fd, "", []unix.Timespec{atime, mtime}, unix.AT_EMPTY_PATH)
}

// copyXattrs copies every extended attribute of sfd to dfd; attributes
// the caller may not set (trusted.*, security.capability for a user) and
// file systems without them are skipped.
func copyXattrs(sfd, dfd int) error {
	sz, err := unix.Flistxattr(sfd, nil)
	if err != nil || sz == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	}
	buf := make([]byte, sz)
	if sz, err = unix.Flistxattr(sfd, buf); err != nil {
		return err
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:sz]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		vsz, err := unix.Fgetxattr(sfd, name, nil)
		if err != nil {
			continue // gone, or not readable by this caller
		}
		val := make([]byte, vsz)
		if vsz, err = unix.Fgetxattr(sfd, name, val); err != nil {
			continue
		}
		if err := unix.Fsetxattr(dfd, name, val[:vsz], 0); err != nil && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	return nil
}

// ignorePerm drops the EPERM an unprivileged caller gets for an owner it
// may not give (cp -a as a user keeps its own ownership the same way).
func ignorePerm(err error) error {
	if errors.Is(err, unix.EPERM) {
		return nil
	}
	return err
}

// ChownTree gives the entry name in dirfd, and everything below it, to
// uid and gid, without following any symlink (chown also clears setuid and
// setgid bits of files). It hands what a privileged restore wrote over to
// the user it was done for.
func ChownTree(ctx context.Context, dirfd int, name string, uid, gid int) error {
	return chownTree(ctx, dirfd, name, uid, gid, 0)
}

func chownTree(ctx context.Context, dirfd int, name string, uid, gid, depth int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if depth > maxCopyDepth {
		return fmt.Errorf("chown %s: directories nested deeper than %d: %w", name, maxCopyDepth, errs.ErrInvalid)
	}
	if err := unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return opErr("chown", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return opErr("chown", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	fd, err := openBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return opErr("chown", name, err)
	}
	defer unix.Close(fd)
	return eachName(fd, name, func(n string) error { return chownTree(ctx, fd, n, uid, gid, depth+1) })
}
