package files

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// xattrArgs is the kernel's struct xattr_args (Linux >= 6.13).
type xattrArgs struct {
	value uint64
	size  uint32
	flags uint32
}

// setXattrAt sets an extended attribute on name inside dirfd without
// following a final symlink. It uses setxattrat(2) and falls back to
// lsetxattr through /proc/self/fd on kernels without it.
func setXattrAt(dirfd int, name, attr string, val []byte) error {
	pname, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	pattr, err := unix.BytePtrFromString(attr)
	if err != nil {
		return err
	}
	args := xattrArgs{size: uint32(len(val))}
	if len(val) > 0 {
		args.value = uint64(uintptr(unsafe.Pointer(&val[0])))
	}
	_, _, e := unix.Syscall6(unix.SYS_SETXATTRAT, uintptr(dirfd), uintptr(unsafe.Pointer(pname)),
		unix.AT_SYMLINK_NOFOLLOW, uintptr(unsafe.Pointer(pattr)), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
	if e == 0 {
		return nil
	}
	if e != unix.ENOSYS {
		return e
	}
	return unix.Lsetxattr(procFdPath(dirfd, name), attr, val, 0)
}

// listXattrAt lists the extended attribute names of name inside dirfd
// without following a final symlink.
func listXattrAt(dirfd int, name string) ([]string, error) {
	pname, err := unix.BytePtrFromString(name)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 1024)
	for {
		n, _, e := unix.Syscall6(unix.SYS_LISTXATTRAT, uintptr(dirfd), uintptr(unsafe.Pointer(pname)),
			unix.AT_SYMLINK_NOFOLLOW, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0)
		var err error
		if e == unix.ENOSYS {
			var m int
			m, err = unix.Llistxattr(procFdPath(dirfd, name), buf)
			n = uintptr(m)
		} else if e != 0 {
			err = e
		}
		if err == unix.ERANGE {
			buf = make([]byte, len(buf)*4)
			continue
		}
		if err != nil {
			return nil, err
		}
		return splitXattrNames(buf[:n]), nil
	}
}

// getXattrAt reads one extended attribute of name inside dirfd without
// following a final symlink.
func getXattrAt(dirfd int, name, attr string) ([]byte, error) {
	pname, err := unix.BytePtrFromString(name)
	if err != nil {
		return nil, err
	}
	pattr, err := unix.BytePtrFromString(attr)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 256)
	for {
		args := xattrArgs{value: uint64(uintptr(unsafe.Pointer(&buf[0]))), size: uint32(len(buf))}
		n, _, e := unix.Syscall6(unix.SYS_GETXATTRAT, uintptr(dirfd), uintptr(unsafe.Pointer(pname)),
			unix.AT_SYMLINK_NOFOLLOW, uintptr(unsafe.Pointer(pattr)), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
		var err error
		if e == unix.ENOSYS {
			var m int
			m, err = unix.Lgetxattr(procFdPath(dirfd, name), attr, buf)
			n = uintptr(m)
		} else if e != 0 {
			err = e
		}
		if err == unix.ERANGE {
			buf = make([]byte, len(buf)*4)
			continue
		}
		if err != nil {
			return nil, err
		}
		return append([]byte(nil), buf[:n]...), nil
	}
}

// fdXattrs reads all extended attributes of an open file.
func fdXattrs(fd int) (map[string][]byte, error) {
	return listXattrsWith(
		func(b []byte) (int, error) { return unix.Flistxattr(fd, b) },
		func(a string, b []byte) (int, error) { return unix.Fgetxattr(fd, a, b) })
}

// atXattrs reads all extended attributes of name inside dirfd without
// following a final symlink.
func atXattrs(dirfd int, name string) (map[string][]byte, error) {
	names, err := listXattrAt(dirfd, name)
	if err == unix.ENOTSUP {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(names))
	for _, a := range names {
		v, err := getXattrAt(dirfd, name, a)
		if err == unix.ENODATA {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get xattr %s: %w", a, err)
		}
		out[a] = v
	}
	return out, nil
}

func listXattrsWith(list func([]byte) (int, error), get func(string, []byte) (int, error)) (map[string][]byte, error) {
	buf := make([]byte, 1024)
	var n int
	var err error
	for {
		n, err = list(buf)
		if err == unix.ERANGE {
			buf = make([]byte, len(buf)*4)
			continue
		}
		if err != nil {
			if err == unix.ENOTSUP {
				return nil, nil
			}
			return nil, err
		}
		break
	}
	names := splitXattrNames(buf[:n])
	out := make(map[string][]byte, len(names))
	for _, a := range names {
		vb := make([]byte, 256)
		for {
			m, err := get(a, vb)
			if err == unix.ERANGE {
				vb = make([]byte, len(vb)*4)
				continue
			}
			if err == unix.ENODATA {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("get xattr %s: %w", a, err)
			}
			out[a] = append([]byte(nil), vb[:m]...)
			break
		}
	}
	return out, nil
}

func splitXattrNames(b []byte) []string {
	var names []string
	for _, s := range bytes.Split(b, []byte{0}) {
		if len(s) > 0 {
			names = append(names, string(s))
		}
	}
	sort.Strings(names)
	return names
}

func procFdPath(dirfd int, name string) string {
	return "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name
}

// reopenFd opens the inode an O_PATH descriptor refers to afresh with
// flags, through its /proc/self/fd magic link (Linux has no AT_EMPTY_PATH
// for open). The link names the pinned inode itself, so nothing is resolved
// again and a concurrent rename or swap inside the sandbox cannot redirect
// it.
func reopenFd(pathFd int, flags int) (int, error) {
	for {
		fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pathFd), flags|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// chmodAt sets the mode of name inside dirfd without following a symlink.
func chmodAt(dirfd int, name string, mode uint32) error {
	err := unix.Fchmodat(dirfd, name, mode, unix.AT_SYMLINK_NOFOLLOW)
	if err != unix.EOPNOTSUPP {
		return err
	}
	// No fchmodat2 (or name is a symlink): pin the inode with O_PATH first.
	fd, err := openat2(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil // symlink modes are meaningless on Linux
	}
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode)
}

// futimens sets the access and modification times of an open file.
func futimens(fd int, atime, mtime time.Time) error {
	ts := [2]unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// utimesAt sets times on name inside dirfd without following a symlink.
func utimesAt(dirfd int, name string, atime, mtime time.Time) error {
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// removeExisting makes room for a new entry called name in dirfd: a
// non-directory is unlinked, an empty directory is removed. A non-empty
// directory is left in place and reported with ENOTEMPTY unless keepDir.
func removeExisting(dirfd int, name string, keepDir bool) error {
	err := unix.Unlinkat(dirfd, name, 0)
	switch err {
	case nil, unix.ENOENT:
		return nil
	case unix.EISDIR:
		if keepDir {
			return nil
		}
		return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
	}
	return err
}

// isZero reports whether b is all zero bytes.
func isZero(b []byte) bool {
	for len(b) >= 8 {
		if *(*uint64)(unsafe.Pointer(&b[0])) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

const sparseBlock = 4096

// writeContent copies r into the fresh, empty file fd and sets the final
// size. With sparse, aligned all-zero 4 KiB blocks are left as holes;
// without, every byte is written so the data/hole layout matches a dense
// source. progress, if not nil, receives the number of bytes consumed after
// each chunk.
func writeContent(fd int, r io.Reader, sparse bool, progress func(int64), check func() error) (int64, error) {
	buf := make([]byte, 256*1024)
	var off int64
	for {
		if err := check(); err != nil {
			return off, err
		}
		n, rerr := readFull(r, buf)
		chunk := buf[:n]
		for i := 0; i < len(chunk); {
			end := min(i+sparseBlock, len(chunk))
			if !sparse {
				end = len(chunk)
			} else if isZero(chunk[i:end]) {
				i = end
				continue
			}
			// Extend over the following non-zero blocks to write in one go.
			for sparse && end < len(chunk) {
				next := min(end+sparseBlock, len(chunk))
				if isZero(chunk[end:next]) {
					break
				}
				end = next
			}
			if err := pwriteAll(fd, chunk[i:end], off+int64(i)); err != nil {
				return off, err
			}
			i = end
		}
		off += int64(n)
		if progress != nil && n > 0 {
			progress(int64(n))
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return off, rerr
		}
	}
	if err := unix.Ftruncate(fd, off); err != nil {
		return off, err
	}
	return off, nil
}

// readFull reads until buf is full or r fails; unlike io.ReadFull it passes
// io.EOF through unchanged and never turns it into io.ErrUnexpectedEOF, so a
// truncated tar stream (which reports io.ErrUnexpectedEOF) stays an error.
func readFull(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
		off += int64(n)
	}
	return nil
}
