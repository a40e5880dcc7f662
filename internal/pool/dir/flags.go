package dir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Inode flags (include/uapi/linux/fs.h).
const (
	fsImmutableFL = 0x00000010 // FS_IMMUTABLE_FL
	fsAppendFL    = 0x00000020 // FS_APPEND_FL
)

// setFlag sets (on) or clears the immutable flag of the directory or
// regular file at path; clearing also clears append-only, which blocks
// deletion just the same.
func setFlag(path string, on bool) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	f, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return fmt.Errorf("get inode flags of %s: %w", path, err)
	}
	nf := f &^ (fsImmutableFL | fsAppendFL)
	if on {
		nf = f | fsImmutableFL
	}
	if nf == f {
		return nil
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(nf)); err != nil {
		return fmt.Errorf("set inode flags of %s: %w", path, err)
	}
	return nil
}

// setImmutable sets or clears the immutable flag on root and on every
// directory and regular file under it. Other file types cannot carry it.
func setImmutable(ctx context.Context, root string, on bool) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != root {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if t := d.Type(); !t.IsDir() && !t.IsRegular() {
			return nil
		}
		return setFlag(path, on)
	})
}
