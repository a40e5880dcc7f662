package files

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/xattr"
)

// WriteTar writes a PAX tar of the entry at p to w. For a file the archive
// holds one member named after its base name; for a directory the members
// are "<base>/" and everything below it ("./" and top-level names for "/"),
// in sorted order, the same layout `docker cp` produces, so extracting it
// with ExtractTar into a directory recreates p there. Symlinks are stored as
// symlinks and never followed (p itself is not followed either), files with
// several links inside the tree become hardlink members, xattrs become
// SCHILY.xattr.* records, and modes, owners (numeric only) and nanosecond
// modification times are kept. Files with holes are written as PAX GNU
// sparse 1.0 members (only their data segments are stored), which
// ExtractTar, archive/tar and GNU tar read back as sparse files. Sockets are
// skipped.
func (r *Root) WriteTar(ctx context.Context, p string, w io.Writer) error {
	p, err := CleanPath(p)
	if err != nil {
		return fmt.Errorf("write tar: %w", err)
	}
	pfd, name, err := r.openParent(p)
	if err != nil {
		return opErr("write tar", p, err)
	}
	defer unix.Close(pfd)
	t := tarWriter{ctx: ctx, w: w, tw: tar.NewWriter(w), links: map[[2]uint64]string{}, buf: make([]byte, 256*1024)}
	member := name
	if name == "" {
		member = "."
	}
	if err := t.add(pfd, name, member, p); err != nil {
		return fmt.Errorf("write tar of %s: %w", p, err)
	}
	if err := t.tw.Close(); err != nil {
		return fmt.Errorf("write tar of %s: %w", p, err)
	}
	return nil
}

type tarWriter struct {
	ctx   context.Context
	w     io.Writer // the archive, for members archive/tar cannot write
	tw    *tar.Writer
	links map[[2]uint64]string
	buf   []byte
}

// add archives name in dirfd (dirfd itself when name is empty) as member,
// recursing into directories; p is its sandbox path for error messages.
func (t *tarWriter) add(dirfd int, name, member, p string) error {
	if err := t.ctx.Err(); err != nil {
		return err
	}
	var st unix.Stat_t
	var err error
	if name == "" {
		err = unix.Fstat(dirfd, &st)
	} else {
		err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return opErr("stat", p, err)
	}
	hdr := &tar.Header{
		Name:       member,
		Mode:       int64(st.Mode & 0o7777),
		Uid:        int(st.Uid),
		Gid:        int(st.Gid),
		ModTime:    time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		AccessTime: time.Unix(st.Atim.Sec, st.Atim.Nsec),
		Format:     tar.FormatPAX,
	}
	var fd = -1
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
	}()
	ftype := st.Mode & unix.S_IFMT
	switch ftype {
	case unix.S_IFDIR:
		hdr.Typeflag = tar.TypeDir
		if !strings.HasSuffix(hdr.Name, "/") {
			hdr.Name += "/"
		}
		if name == "" {
			fd, err = unix.Dup(dirfd)
		} else {
			fd, err = openChildDir(dirfd, name, unix.O_RDONLY)
		}
	case unix.S_IFREG:
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := t.links[key]; ok && st.Nlink > 1 {
			hdr.Typeflag = tar.TypeLink
			hdr.Linkname = first
			return t.writeHeader(hdr, p)
		}
		if st.Nlink > 1 {
			t.links[key] = member
		}
		hdr.Typeflag = tar.TypeReg
		fd, err = openat2(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY,
			unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	case unix.S_IFLNK:
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname, err = fsutil.ReadlinkAt(dirfd, name)
	case unix.S_IFIFO, unix.S_IFCHR, unix.S_IFBLK:
		hdr.Typeflag = map[uint32]byte{unix.S_IFIFO: tar.TypeFifo, unix.S_IFCHR: tar.TypeChar, unix.S_IFBLK: tar.TypeBlock}[ftype]
		hdr.Devmajor = int64(unix.Major(st.Rdev))
		hdr.Devminor = int64(unix.Minor(st.Rdev))
	default:
		return nil // sockets cannot be archived
	}
	if err != nil {
		return opErr("open", p, err)
	}
	if fd >= 0 {
		// Re-check the inode: the entry may have been swapped after fstatat.
		var st2 unix.Stat_t
		if err := unix.Fstat(fd, &st2); err != nil {
			return opErr("stat", p, err)
		}
		if st2.Ino != st.Ino || st2.Dev != st.Dev {
			return opErr("open", p, unix.EAGAIN)
		}
	}
	var xattrs map[string][]byte
	if fd >= 0 {
		xattrs, err = xattr.AllFd(fd)
	} else if name != "" {
		xattrs, err = xattr.AllAt(dirfd, name)
		if err == unix.ENOTSUP {
			err = nil
		}
	}
	if err != nil {
		return opErr("read xattrs of", p, err)
	}
	for _, k := range sortedKeys(xattrs) {
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords["SCHILY.xattr."+k] = string(xattrs[k])
	}

	switch hdr.Typeflag {
	case tar.TypeReg:
		hdr.Size = st.Size
		f := os.NewFile(uintptr(fd), p)
		fd = -1
		defer f.Close()
		segs, sparse, err := fsutil.DataRegions(int(f.Fd()), st.Size)
		if err != nil {
			return opErr("map holes of", p, err)
		}
		if sparse {
			if err := t.writeSparseMember(hdr, f, segs, st.Size); err != nil {
				return fmt.Errorf("write %s: %w", p, err)
			}
			return nil
		}
		if err := t.writeHeader(hdr, p); err != nil {
			return err
		}
		n, err := io.CopyBuffer(t.tw, io.LimitReader(&ctxReader{ctx: t.ctx, r: f}, st.Size), t.buf)
		if err != nil {
			return opErr("read", p, err)
		}
		if n < st.Size {
			// Truncated while we read it: pad so the archive stays valid.
			if _, err := io.CopyBuffer(t.tw, io.LimitReader(zeroReader{}, st.Size-n), t.buf); err != nil {
				return fmt.Errorf("write %s: %w", p, err)
			}
		}
		return nil
	case tar.TypeDir:
		if err := t.writeHeader(hdr, p); err != nil {
			return err
		}
		dup, err := unix.Dup(fd)
		if err != nil {
			return opErr("list", p, err)
		}
		f := os.NewFile(uintptr(dup), p)
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return opErr("list", p, err)
		}
		slices.Sort(names)
		prefix := hdr.Name
		if prefix == "./" {
			prefix = ""
		}
		for _, n := range names {
			err := t.add(fd, n, prefix+n, path.Join(p, n))
			if err != nil && !isNotExist(err) {
				return err
			}
		}
		return nil
	default:
		return t.writeHeader(hdr, p)
	}
}

func (t *tarWriter) writeHeader(hdr *tar.Header, p string) error {
	if err := t.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write header of %s: %w", p, err)
	}
	return nil
}

type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// isNotExist reports an entry removed while the walk was under way.
func isNotExist(err error) bool {
	return errors.Is(err, errs.ErrNotFound)
}
