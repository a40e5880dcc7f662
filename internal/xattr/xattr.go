// Package xattr reads and writes extended attributes without following a
// final symlink: of a name inside a directory descriptor (setxattrat,
// listxattrat and getxattrat on Linux >= 6.13, the l*xattr calls through
// /proc/self/fd on older kernels), or of an open file. internal/files and
// internal/treedigest share it.
package xattr

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// args is the kernel's struct xattr_args (Linux >= 6.13).
type args struct {
	value uint64
	size  uint32
	flags uint32
}

// SetAt sets the extended attribute attr of name inside dirfd to val
// without following a final symlink.
func SetAt(dirfd int, name, attr string, val []byte) error {
	pname, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	pattr, err := unix.BytePtrFromString(attr)
	if err != nil {
		return err
	}
	a := args{size: uint32(len(val))}
	if len(val) > 0 {
		a.value = uint64(uintptr(unsafe.Pointer(&val[0])))
	}
	_, _, e := unix.Syscall6(unix.SYS_SETXATTRAT, uintptr(dirfd), uintptr(unsafe.Pointer(pname)),
		unix.AT_SYMLINK_NOFOLLOW, uintptr(unsafe.Pointer(pattr)), uintptr(unsafe.Pointer(&a)), unsafe.Sizeof(a))
	_, err = result(0, e, func() (int, error) {
		return 0, unix.Lsetxattr(procFdPath(dirfd, name), attr, val, 0)
	})
	return err
}

// AllAt reads all extended attributes of name inside dirfd without
// following a final symlink. It returns nil when the file system does not
// support xattrs.
func AllAt(dirfd int, name string) (map[string][]byte, error) {
	pname, err := unix.BytePtrFromString(name)
	if err != nil {
		return nil, err
	}
	return readAll(
		func(buf []byte) (int, error) {
			n, _, e := unix.Syscall6(unix.SYS_LISTXATTRAT, uintptr(dirfd), uintptr(unsafe.Pointer(pname)),
				unix.AT_SYMLINK_NOFOLLOW, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0)
			return result(n, e, func() (int, error) { return unix.Llistxattr(procFdPath(dirfd, name), buf) })
		},
		func(attr string, buf []byte) (int, error) {
			pattr, err := unix.BytePtrFromString(attr)
			if err != nil {
				return 0, err
			}
			a := args{value: uint64(uintptr(unsafe.Pointer(&buf[0]))), size: uint32(len(buf))}
			n, _, e := unix.Syscall6(unix.SYS_GETXATTRAT, uintptr(dirfd), uintptr(unsafe.Pointer(pname)),
				unix.AT_SYMLINK_NOFOLLOW, uintptr(unsafe.Pointer(pattr)), uintptr(unsafe.Pointer(&a)), unsafe.Sizeof(a))
			return result(n, e, func() (int, error) { return unix.Lgetxattr(procFdPath(dirfd, name), attr, buf) })
		})
}

// AllFd reads all extended attributes of an open file. It returns nil when
// the file system does not support xattrs.
func AllFd(fd int) (map[string][]byte, error) {
	return readAll(
		func(b []byte) (int, error) { return unix.Flistxattr(fd, b) },
		func(a string, b []byte) (int, error) { return unix.Fgetxattr(fd, a, b) })
}

// readAll lists attribute names with list and reads each with get, both
// called again with a larger buffer on ERANGE. Attributes that vanish in
// between (ENODATA) are skipped; ENOTSUP from list yields nil.
func readAll(list func(buf []byte) (int, error), get func(attr string, buf []byte) (int, error)) (map[string][]byte, error) {
	b, err := grow(1024, list)
	if err == unix.ENOTSUP {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := splitNames(b)
	out := make(map[string][]byte, len(names))
	for _, a := range names {
		v, err := grow(256, func(buf []byte) (int, error) { return get(a, buf) })
		if err == unix.ENODATA {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get xattr %s: %w", a, err)
		}
		out[a] = append([]byte(nil), v...)
	}
	return out, nil
}

// grow calls f with a buffer of size bytes, and again with one four times
// as large for as long as f fails with ERANGE; it returns what f filled.
func grow(size int, f func(buf []byte) (int, error)) ([]byte, error) {
	buf := make([]byte, size)
	for {
		n, err := f(buf)
		if err == unix.ERANGE {
			buf = make([]byte, len(buf)*4)
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// result turns the return of an *xattrat syscall into a count and an
// error, calling fallback instead when the kernel lacks the syscall.
func result(n uintptr, e unix.Errno, fallback func() (int, error)) (int, error) {
	switch e {
	case 0:
		return int(n), nil
	case unix.ENOSYS:
		return fallback()
	}
	return 0, e
}

// splitNames splits a NUL-separated list of attribute names, sorted.
func splitNames(b []byte) []string {
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
