package treedigest

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The helpers below mirror internal/files: they read xattrs of an open file,
// or of a name in a directory without following a final symlink
// (listxattrat/getxattrat on Linux >= 6.13, /proc/self/fd otherwise).

// xattrArgs is the kernel's struct xattr_args (Linux >= 6.13).
type xattrArgs struct {
	value uint64
	size  uint32
	flags uint32
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
