// Package fsutil holds small file-system helpers: durable writes, reading
// a symlink relative to a directory descriptor, unmounting what a run
// directory holds.
package fsutil

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// WriteFileAtomic replaces path with data durably: a temp file in the same
// directory is written and fsynced, renamed over path, and the directory is
// fsynced, so after a crash path holds either the old or the new content.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := writeTemp(path, data, perm)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// WriteFileExclusive writes data to a new file at path, durably (temp file,
// fsync, link into place, directory fsync), and fails with an error
// satisfying errors.Is(err, fs.ErrExist) when path already exists: unlike
// WriteFileAtomic it never replaces a file, so two writers racing for
// path cannot overwrite each other (the key files that must never change).
func WriteFileExclusive(path string, data []byte, perm os.FileMode) error {
	tmp, err := writeTemp(path, data, perm)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	// link(2) fails with EEXIST instead of replacing path.
	if err := os.Link(tmp, path); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// writeTemp writes data, with mode perm, to a new temporary file beside
// path and fsyncs it; the caller moves it into place and removes it.
func writeTemp(path string, data []byte, perm os.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		if err = f.Sync(); err != nil {
			err = fmt.Errorf("sync: %w", err)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return tmp, nil
}

// SyncDir fsyncs a directory so renames and creates in it are durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// ReadlinkAt returns the target of the symlink name inside dirfd, however
// long it is.
func ReadlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, len(buf)*4)
	}
}

// ReadDirNames lists the names in the directory dirfd (an O_PATH
// descriptor will do), without . and ..; dirfd stays open.
func ReadDirNames(dirfd int) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}

// UnmountUnder detaches every mount at or below dir (what a killed daemon
// leaves in a run directory it made: per-sandbox tmpfs mounts), deepest
// first.
func UnmountUnder(dir string) {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Mountpoint) > len(mounts[j].Mountpoint) })
	for _, m := range mounts {
		unix.Unmount(m.Mountpoint, unix.MNT_DETACH)
	}
}
