package files

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/fsutil"
)

// FileType is the kind of a file system entry.
type FileType string

// File types reported in FileInfo.Type.
const (
	TypeFile    FileType = "file"
	TypeDir     FileType = "dir"
	TypeSymlink FileType = "symlink"
	TypeOther   FileType = "other" // FIFO, socket, device
)

// FileInfo describes one entry of a sandbox root, as lstat(2) sees it.
type FileInfo struct {
	Name string   `json:"name"`
	Path string   `json:"path"` // sandbox-absolute
	Type FileType `json:"type"`
	Size int64    `json:"size"`
	// Mode holds the permission bits plus fs.ModeSetuid, fs.ModeSetgid,
	// fs.ModeSticky and the fs.FileMode type bits.
	Mode    fs.FileMode `json:"mode"`
	UID     int         `json:"uid"`
	GID     int         `json:"gid"`
	ModTime time.Time   `json:"mtime"`
	// LinkTarget is the symlink's target, verbatim, for TypeSymlink.
	LinkTarget string `json:"link_target,omitempty"`
}

func fileInfo(p string, st *unix.Stat_t) FileInfo {
	name := path.Base(p)
	fi := FileInfo{
		Name:    name,
		Path:    p,
		Size:    st.Size,
		Mode:    goMode(st.Mode),
		UID:     int(st.Uid),
		GID:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		fi.Type = TypeFile
	case unix.S_IFDIR:
		fi.Type = TypeDir
	case unix.S_IFLNK:
		fi.Type = TypeSymlink
	default:
		fi.Type = TypeOther
	}
	return fi
}

// goMode converts a st_mode to an fs.FileMode.
func goMode(m uint32) fs.FileMode {
	fm := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		fm |= fs.ModeDir
	case unix.S_IFLNK:
		fm |= fs.ModeSymlink
	case unix.S_IFIFO:
		fm |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		fm |= fs.ModeSocket
	case unix.S_IFCHR:
		fm |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		fm |= fs.ModeDevice
	}
	if m&unix.S_ISUID != 0 {
		fm |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		fm |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		fm |= fs.ModeSticky
	}
	return fm
}

// unixPerm converts the permission and special bits of an fs.FileMode to
// st_mode bits.
func unixPerm(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		u |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		u |= unix.S_ISVTX
	}
	return u
}

// statAt lstats name in dirfd (or dirfd itself when name is empty) and
// reads a symlink's target.
func statAt(dirfd int, name, p string) (FileInfo, error) {
	var st unix.Stat_t
	var err error
	if name == "" {
		err = unix.Fstat(dirfd, &st)
	} else {
		err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return FileInfo{}, err
	}
	fi := fileInfo(p, &st)
	if fi.Type == TypeSymlink {
		t, err := fsutil.ReadlinkAt(dirfd, name)
		if err != nil {
			return FileInfo{}, err
		}
		fi.LinkTarget = t
	}
	return fi, nil
}

// Stat describes the entry at p without following a final symlink (lstat
// semantics); symlinks in the parent path are resolved inside the root.
func (r *Root) Stat(p string) (FileInfo, error) {
	p, err := CleanPath(p)
	if err != nil {
		return FileInfo{}, fmt.Errorf("stat: %w", err)
	}
	pfd, name, err := r.openParent(p)
	if err != nil {
		return FileInfo{}, opErr("stat", p, err)
	}
	defer unix.Close(pfd)
	fi, err := statAt(pfd, name, p)
	if err != nil {
		return FileInfo{}, opErr("stat", p, err)
	}
	return fi, nil
}

// List returns the entries of directory dir sorted by name (bytewise), each
// described with lstat semantics. dir itself may be reached through symlinks,
// resolved inside the root.
func (r *Root) List(dir string) ([]FileInfo, error) {
	dir, err := CleanPath(dir)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	fd, err := r.open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, opErr("list", dir, err)
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, opErr("list", dir, err)
	}
	slices.Sort(names)
	out := make([]FileInfo, 0, len(names))
	for _, n := range names {
		fi, err := statAt(fd, n, path.Join(dir, n))
		if err == unix.ENOENT {
			continue // removed while listing
		}
		if err != nil {
			return nil, opErr("list", path.Join(dir, n), err)
		}
		out = append(out, fi)
	}
	return out, nil
}

// ReadFile opens the regular file at p for reading. Symlinks, the final one
// included, are followed inside the root. A non-regular file (directory,
// FIFO, device, socket) is refused with errs.ErrInvalid without ever being
// opened for reading: the path is resolved to an O_PATH descriptor, which
// does not run the file's open handler (a FIFO would block, a device node
// could have side effects on the host), and only once fstat shows a regular
// file is that very inode reopened for reading. The caller must close the
// reader.
func (r *Root) ReadFile(p string) (io.ReadCloser, FileInfo, error) {
	p, err := CleanPath(p)
	if err != nil {
		return nil, FileInfo{}, fmt.Errorf("read: %w", err)
	}
	pathFd, err := r.open(p, unix.O_PATH)
	if err != nil {
		return nil, FileInfo{}, opErr("read", p, err)
	}
	defer unix.Close(pathFd)
	var st unix.Stat_t
	if err := unix.Fstat(pathFd, &st); err != nil {
		return nil, FileInfo{}, opErr("read", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, FileInfo{}, fmt.Errorf("read %s: %w: not a regular file", p, errs.ErrInvalid)
	}
	fd, err := reopenFd(pathFd, unix.O_RDONLY|unix.O_NOCTTY)
	if err != nil {
		return nil, FileInfo{}, opErr("read", p, err)
	}
	return os.NewFile(uintptr(fd), p), fileInfo(p, &st), nil
}

// WriteFile atomically replaces (or creates) the file at p with the content
// of r, mode (permission and setuid/setgid/sticky bits) and owner uid:gid.
// The parent directory must exist. The content goes to a temporary file in
// the same directory, which is fsynced, renamed over p and followed by an
// fsync of the directory, so after a crash p holds either the old or the new
// content. A final symlink at p is replaced, not followed; an existing
// directory at p is an error (errs.ErrInvalid).
func (r *Root) WriteFile(ctx context.Context, p string, mode fs.FileMode, uid, gid int, rd io.Reader) error {
	p, err := CleanPath(p)
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	pfd, name, err := r.openParent(p)
	if err != nil {
		return opErr("write", p, err)
	}
	defer unix.Close(pfd)
	if name == "" {
		return fmt.Errorf("write %s: %w: is the root directory", p, errs.ErrInvalid)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("write %s: %w: is a directory", p, errs.ErrInvalid)
	}

	tmp, fd, err := createTemp(pfd, name)
	if err != nil {
		return opErr("write", p, err)
	}
	ok := false
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
		if !ok {
			unix.Unlinkat(pfd, tmp, 0)
		}
	}()
	if _, err := writeContent(fd, &ctxReader{ctx: ctx, r: rd}, false, nil, ctx.Err); err != nil {
		return opErr("write", p, err)
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return opErr("write", p, err)
	}
	if err := unix.Fchmod(fd, unixPerm(mode)); err != nil {
		return opErr("write", p, err)
	}
	if err := unix.Fsync(fd); err != nil {
		return opErr("write", p, err)
	}
	err = unix.Close(fd)
	fd = -1
	if err != nil {
		return opErr("write", p, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := unix.Renameat(pfd, tmp, pfd, name); err != nil {
		return opErr("write", p, err)
	}
	ok = true
	if err := unix.Fsync(pfd); err != nil {
		return opErr("write", p, fmt.Errorf("fsync directory: %w", err))
	}
	return nil
}

// createTemp creates a fresh temporary file next to name in dirfd.
func createTemp(dirfd int, name string) (string, int, error) {
	base := name
	if len(base) > 100 {
		base = base[:100]
	}
	for range 16 {
		var b [8]byte
		rand.Read(b[:])
		tmp := ".stead-tmp-" + hex.EncodeToString(b[:]) + "-" + base
		fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST {
			continue
		}
		return tmp, fd, err
	}
	return "", -1, unix.EEXIST
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

// Mkdir creates directory p with mode 0755 owned by uid:gid. With parents,
// missing parents are created too (same owner and mode) and an existing
// directory at p is not an error (mkdir -p); without, the parent must exist
// (errs.ErrNotFound) and p must not (errs.ErrConflict).
func (r *Root) Mkdir(p string, parents bool, uid, gid int) error {
	p, err := CleanPath(p)
	if err != nil {
		return fmt.Errorf("mkdir: %w", err)
	}
	if parents {
		fd, err := r.mkdirAll(p, 0o755, uid, gid)
		if err != nil {
			return opErr("mkdir", p, err)
		}
		unix.Close(fd)
		return nil
	}
	pfd, name, err := r.openParent(p)
	if err != nil {
		return opErr("mkdir", p, err)
	}
	defer unix.Close(pfd)
	if name == "" {
		return opErr("mkdir", p, unix.EEXIST)
	}
	if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
		return opErr("mkdir", p, err)
	}
	fd, err := openChildDir(pfd, name, unix.O_RDONLY)
	if err != nil {
		return opErr("mkdir", p, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return opErr("mkdir", p, err)
	}
	if err := unix.Fchmod(fd, 0o755); err != nil {
		return opErr("mkdir", p, err)
	}
	return nil
}

// Remove deletes the entry at p (a symlink itself, never its target).
// Without recursive, a non-empty directory is an errs.ErrConflict. With
// recursive, a directory is removed with all its content; the walk opens
// every directory with O_NOFOLLOW relative to its parent's descriptor, so a
// symlink planted or swapped in during the walk is unlinked, never entered.
// Removing "/" is refused.
func (r *Root) Remove(p string, recursive bool) error {
	p, err := CleanPath(p)
	if err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	pfd, name, err := r.openParent(p)
	if err != nil {
		return opErr("remove", p, err)
	}
	defer unix.Close(pfd)
	if name == "" {
		return fmt.Errorf("remove %s: %w: cannot remove the root", p, errs.ErrInvalid)
	}
	if recursive {
		err = removeAllAt(pfd, name, 0)
	} else {
		err = unix.Unlinkat(pfd, name, 0)
		if err == unix.EISDIR {
			err = unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
		}
	}
	if err != nil {
		return opErr("remove", p, err)
	}
	return nil
}

const maxRemoveDepth = 4096

// removeAllAt removes name in dirfd and, if it is a directory, everything
// below it, without ever following a symlink.
func removeAllAt(dirfd int, name string, depth int) error {
	if depth > maxRemoveDepth {
		return unix.ELOOP
	}
	for attempt := 0; ; attempt++ {
		err := unix.Unlinkat(dirfd, name, 0)
		if err != unix.EISDIR {
			return err
		}
		fd, err := openChildDir(dirfd, name, unix.O_RDONLY)
		if (err == unix.ENOTDIR || err == unix.ELOOP) && attempt < 8 {
			continue // swapped for a non-directory: unlink it
		}
		if err != nil {
			return err
		}
		err = removeChildren(fd, depth)
		unix.Close(fd)
		if err != nil {
			return err
		}
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		if err == unix.ENOTEMPTY && attempt < 8 {
			continue // something was created meanwhile; go again
		}
		return err
	}
}

func removeChildren(fd int, depth int) error {
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(dup), "")
	defer f.Close()
	for {
		names, err := f.Readdirnames(1024)
		for _, n := range names {
			if err := removeAllAt(fd, n, depth+1); err != nil && err != unix.ENOENT {
				return fmt.Errorf("%s: %w", n, err)
			}
		}
		if err == io.EOF || (err == nil && len(names) == 0) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Rename moves the entry at from to to with rename(2) semantics: an existing
// non-directory (or empty directory, when from is a directory) at to is
// replaced. Neither final component is followed. Renaming "/" or onto "/" is
// refused.
func (r *Root) Rename(from, to string) error {
	from, err := CleanPath(from)
	if err != nil {
		return fmt.Errorf("rename: %w", err)
	}
	to, err = CleanPath(to)
	if err != nil {
		return fmt.Errorf("rename: %w", err)
	}
	if from == "/" || to == "/" {
		return fmt.Errorf("rename %s to %s: %w: cannot rename the root", from, to, errs.ErrInvalid)
	}
	if to == from {
		return nil
	}
	if strings.HasPrefix(to, from+"/") {
		return fmt.Errorf("rename %s to %s: %w: destination inside source", from, to, errs.ErrInvalid)
	}
	ffd, fname, err := r.openParent(from)
	if err != nil {
		return opErr("rename", from, err)
	}
	defer unix.Close(ffd)
	tfd, tname, err := r.openParent(to)
	if err != nil {
		return opErr("rename", to, err)
	}
	defer unix.Close(tfd)
	if err := unix.Renameat2(ffd, fname, tfd, tname, 0); err != nil {
		return fmt.Errorf("rename %s to %s: %w", from, to, mapErrno(err))
	}
	return nil
}

// RemoveAt removes name in the directory dirfd and everything below it,
// never following a symlink (as Remove with recursive does below a path).
// A missing name is not an error.
func RemoveAt(dirfd int, name string) error {
	if err := removeAllAt(dirfd, name, 0); err != nil && err != unix.ENOENT {
		return opErr("remove", name, err)
	}
	return nil
}
