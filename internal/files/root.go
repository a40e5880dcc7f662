// Package files performs file operations inside a sandbox's root directory on
// the host, safely against a hostile, running sandbox.
//
// The sandbox controls every byte below its root: it may plant symlinks
// (absolute, relative, looping), `..` tricks and swap a directory for a
// symlink while the daemon is working on it. Every path is therefore resolved
// with openat2(2) and RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS relative to a
// file descriptor of the root, so symlinks and `..` are interpreted as the
// sandbox would see them and can never leave the root. Operations then act on
// the resolved parent directory's descriptor and the final name with the
// *at(2) system calls and AT_SYMLINK_NOFOLLOW, so the final component is
// never followed by accident and nothing is resolved in the host's namespace.
//
// All paths taken by this package are sandbox-absolute ("/workspace/a.txt");
// see [CleanPath]. Errors wrap [errs.ErrNotFound] for a missing path and
// [errs.ErrInvalid] for a malformed or escaping path, and name the path.
package files

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
)

// resolveFlags is used for every resolution of a sandbox path.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// Root is an open sandbox root directory. It holds a file descriptor of the
// directory, so renaming or replacing the host path after OpenRoot does not
// redirect later operations. A Root is safe for concurrent use; Close it when
// done.
type Root struct {
	fd   int
	path string
}

// OpenRoot opens the host directory path as a sandbox root. path itself is
// resolved in the host's namespace (it is trusted daemon configuration);
// everything below it is not.
func OpenRoot(path string) (*Root, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root %s: %w", path, mapErrno(err))
	}
	return &Root{fd: fd, path: path}, nil
}

// Close releases the root's file descriptor.
func (r *Root) Close() error {
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	if err != nil {
		return fmt.Errorf("close root %s: %w", r.path, err)
	}
	return nil
}

// Path returns the host path the root was opened with (for logs only; never
// use it to build host paths of files inside the root).
func (r *Root) Path() string { return r.path }

// CleanPath validates and normalizes a sandbox-absolute path. It rejects an
// empty path, a path containing a NUL byte, a relative path and a path whose
// `..` components would climb above "/", all with errs.ErrInvalid. The result
// is absolute, has no trailing slash (except "/" itself) and no "." or ".."
// components.
func CleanPath(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("%w: empty path", errs.ErrInvalid)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: path %q contains a NUL byte", errs.ErrInvalid, p)
	}
	if p[0] != '/' {
		return "", fmt.Errorf("%w: path %q is not absolute", errs.ErrInvalid, p)
	}
	if climbsAbove(p) {
		return "", fmt.Errorf("%w: path %q escapes the root", errs.ErrInvalid, p)
	}
	return path.Clean(p), nil
}

// climbsAbove reports whether the `..` components of p (taken lexically)
// would go above its starting directory.
func climbsAbove(p string) bool {
	depth := 0
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}

// rel turns a clean sandbox-absolute path into the relative form openat2
// expects ("." for the root).
func rel(p string) string {
	if p == "/" {
		return "."
	}
	return p[1:]
}

// split splits a clean sandbox-absolute path into its parent and final name.
// For "/" the name is empty.
func split(p string) (dir, name string) {
	if p == "/" {
		return "/", ""
	}
	dir, name = path.Split(p)
	return path.Clean(dir), name
}

// openat2 wraps unix.Openat2, retrying the EAGAIN the kernel returns when a
// concurrent rename or mount could have made a `..` resolution unsafe.
func openat2(dirfd int, p string, flags uint64, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: resolve}
	var err error
	for range 128 {
		var fd int
		fd, err = unix.Openat2(dirfd, p, &how)
		if err == nil {
			return fd, nil
		}
		if err != unix.EAGAIN && err != unix.EINTR {
			return -1, err
		}
	}
	return -1, err
}

// open resolves the clean sandbox path p inside the root, following symlinks
// only inside the root.
func (r *Root) open(p string, flags uint64) (int, error) {
	return openat2(r.fd, rel(p), flags, resolveFlags)
}

// openParent resolves the parent directory of the clean path p and returns
// a descriptor of it and the final name (empty for "/"). The descriptor is
// opened O_RDONLY so it can be fsynced and read.
func (r *Root) openParent(p string) (int, string, error) {
	dir, name := split(p)
	fd, err := r.open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return -1, "", err
	}
	return fd, name, nil
}

// openChildDir opens the directory name directly inside dirfd without
// following a symlink.
func openChildDir(dirfd int, name string, flags uint64) (int, error) {
	return openat2(dirfd, name, flags|unix.O_DIRECTORY|unix.O_NOFOLLOW,
		unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
}

// mapErrno adds the stead sentinel error matching a system call error while
// keeping the errno itself in the chain.
func mapErrno(err error) error {
	var en unix.Errno
	if !errors.As(err, &en) {
		return err
	}
	switch en {
	case unix.ENOENT:
		return fmt.Errorf("%w: %w", errs.ErrNotFound, err)
	case unix.ELOOP, unix.EXDEV, unix.ENOTDIR, unix.EISDIR, unix.EINVAL, unix.ENAMETOOLONG:
		return fmt.Errorf("%w: %w", errs.ErrInvalid, err)
	case unix.EEXIST, unix.ENOTEMPTY, unix.EBUSY:
		return fmt.Errorf("%w: %w", errs.ErrConflict, err)
	case unix.EPERM, unix.EACCES:
		return fmt.Errorf("%w: %w", errs.ErrForbidden, err)
	case unix.ENOSPC, unix.EDQUOT:
		return fmt.Errorf("%w: %w", errs.ErrQuota, err)
	case unix.EOPNOTSUPP:
		return fmt.Errorf("%w: %w", errs.ErrUnsupported, err)
	}
	return err
}

// opErr formats an operation error with the sandbox path and the mapped
// sentinel.
func opErr(op, p string, err error) error {
	return fmt.Errorf("%s %s: %w", op, p, mapErrno(err))
}

// OpenParent resolves the parent directory of the sandbox path p (cleaned
// with CleanPath) inside the root and returns a descriptor of it and the
// final name. The caller closes the descriptor. Refuses "/".
func (r *Root) OpenParent(p string) (int, string, error) {
	p, err := CleanPath(p)
	if err != nil {
		return -1, "", err
	}
	if p == "/" {
		return -1, "", fmt.Errorf("%w: the root has no parent", errs.ErrInvalid)
	}
	fd, name, err := r.openParent(p)
	if err != nil {
		return -1, "", opErr("open parent of", p, err)
	}
	return fd, name, nil
}

// OpenSubRoot opens the directory at sandbox path p inside r as a root of
// its own (a volume's mounted sub-path): p is resolved without following
// any symlink, so it is the directory a bind mount of it would show, and
// nothing resolved in the new root can climb out of it into r.
func (r *Root) OpenSubRoot(p string) (*Root, error) {
	p, err := CleanPath(p)
	if err != nil {
		return nil, err
	}
	fd, err := openat2(r.fd, rel(p), unix.O_PATH|unix.O_DIRECTORY,
		unix.RESOLVE_IN_ROOT|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS|unix.RESOLVE_NO_XDEV)
	if err != nil {
		return nil, opErr("open sub-root", p, err)
	}
	return &Root{fd: fd, path: r.path + p}, nil
}
