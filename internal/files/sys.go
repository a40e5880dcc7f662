package files

import (
	"fmt"
	"io"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

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

// Times are the access and modification times of a file, kept so that an
// operation that fails can put them back (the change time cannot be).
type Times struct{ atime, mtime unix.Timespec }

// TimesOf returns the times of the open file fd.
func TimesOf(fd int) (Times, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Times{}, fmt.Errorf("stat descriptor %d: %w", fd, err)
	}
	return Times{atime: st.Atim, mtime: st.Mtim}, nil
}

// Restore sets the times of the open file fd (any descriptor but O_PATH)
// to t.
func (t Times) Restore(fd int) error {
	if err := futimensBoth(fd, t.atime, t.mtime); err != nil {
		return fmt.Errorf("restore times of descriptor %d: %w", fd, err)
	}
	return nil
}
