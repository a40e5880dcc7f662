package files

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/xattr"
)

// ExtractOptions controls ExtractTar.
type ExtractOptions struct {
	// PreserveOwner applies the uid/gid recorded in the archive, creates
	// character and block devices, and applies every xattr namespace. Set it
	// only for trusted input (template image import). When false, every
	// entry is owned by UID/GID, device entries are rejected and only
	// "user.*" xattrs are applied (security.capability and trusted.* could
	// grant privileges inside the sandbox).
	PreserveOwner bool
	// UID and GID own every entry (and directories created on the way)
	// when PreserveOwner is false. Directories created on the way to an
	// entry are owned by them in both modes.
	UID, GID int
	// Progress, if not nil, is called with the cumulative number of file
	// content bytes extracted so far, after each chunk.
	Progress func(bytes int64)
}

// ExtractTar extracts the tar stream tr into the sandbox directory dir
// (created, with parents, if missing). Entry names are taken relative to dir
// and must not be absolute or contain a ".." component (errs.ErrInvalid);
// symlinks inside the root are honoured when resolving an entry's parent, but
// always as the sandbox would see them, so nothing outside the root is ever
// read or written. Supported entry types: regular files (entries the archive
// marks sparse, GNU or PAX, get holes for their all-zero 4 KiB blocks; other
// files are written densely so their data/hole layout is kept), directories, symlinks (stored verbatim, never
// followed), hardlinks (the target must resolve inside the root), FIFOs, and
// character/block devices (only with PreserveOwner). Modes (setuid, setgid,
// sticky included), ownership, modification times and SCHILY.xattr.* PAX
// records are applied; directory times are set after all entries. An
// existing non-directory at an entry's path is replaced; an existing
// directory is kept and re-attributed. OCI whiteouts are not interpreted.
// On error, entries extracted so far stay in place.
func (r *Root) ExtractTar(ctx context.Context, dir string, tr io.Reader, opts ExtractOptions) error {
	dir, err := CleanPath(dir)
	if err != nil {
		return fmt.Errorf("extract tar: %w", err)
	}
	dfd, err := r.mkdirAll(dir, 0o755, opts.UID, opts.GID)
	if err != nil {
		return fmt.Errorf("extract tar into %s: %w", dir, mapErrno(err))
	}
	unix.Close(dfd)

	x := extractor{r: r, ctx: ctx, dir: dir, opts: opts}
	rd := tar.NewReader(tr)
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("extract tar into %s: %w", dir, err)
		}
		hdr, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("extract tar into %s: read archive: %w", dir, err)
		}
		if err := x.entry(hdr, rd); err != nil {
			return fmt.Errorf("extract tar into %s: entry %q: %w", dir, hdr.Name, err)
		}
	}
	// Directory times last, deepest first, so creating children does not
	// bump them again.
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		fd, err := r.open(d.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
		if err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP {
			continue // replaced or removed by a later entry
		}
		if err != nil {
			return fmt.Errorf("extract tar into %s: set times of %s: %w", dir, d.path, mapErrno(err))
		}
		err = futimens(fd, d.atime, d.mtime)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("extract tar into %s: set times of %s: %w", dir, d.path, mapErrno(err))
		}
	}
	return nil
}

type dirTimes struct {
	path         string
	atime, mtime time.Time
}

type extractor struct {
	r     *Root
	ctx   context.Context
	dir   string
	opts  ExtractOptions
	dirs  []dirTimes
	total int64
}

// entryPath validates a member or hardlink name and returns the clean
// sandbox path it denotes below x.dir.
func (x *extractor) entryPath(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: empty name", errs.ErrInvalid)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("%w: name %q contains a NUL byte", errs.ErrInvalid, name)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: absolute name %q", errs.ErrInvalid, name)
	}
	if slices.Contains(strings.Split(name, "/"), "..") {
		return "", fmt.Errorf("%w: name %q contains \"..\"", errs.ErrInvalid, name)
	}
	return path.Join(x.dir, name), nil
}

func (x *extractor) owner(hdr *tar.Header) (int, int) {
	if x.opts.PreserveOwner {
		return hdr.Uid, hdr.Gid
	}
	return x.opts.UID, x.opts.GID
}

// xattrs returns the xattrs of hdr that may be applied.
func (x *extractor) xattrs(hdr *tar.Header) map[string][]byte {
	const prefix = "SCHILY.xattr."
	var out map[string][]byte
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, prefix)
		if !ok || name == "" {
			continue
		}
		if !x.opts.PreserveOwner && !strings.HasPrefix(name, "user.") {
			continue
		}
		if out == nil {
			out = map[string][]byte{}
		}
		out[name] = []byte(v)
	}
	return out
}

// declaredSparse reports whether the archive stores hdr as a sparse file
// (old GNU 'S' entries, PAX GNU.sparse.* 0.0, 0.1 and 1.0). archive/tar does
// not expose the hole map, so ExtractTar recreates holes from the all-zero
// blocks of such entries only; other files are written densely to keep
// their layout.
func declaredSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for _, k := range []string{"GNU.sparse.major", "GNU.sparse.map", "GNU.sparse.numblocks", "GNU.sparse.offset"} {
		if _, ok := hdr.PAXRecords[k]; ok {
			return true
		}
	}
	return false
}

// typeRegA is the pre-POSIX typeflag '\x00' of a regular file (the
// deprecated tar.TypeRegA). archive/tar's reader already reports such
// entries as tar.TypeReg (or tar.TypeDir for a name ending in "/"); it is
// accepted here too so extraction does not depend on that.
const typeRegA = '\x00'

func times(hdr *tar.Header) (atime, mtime time.Time) {
	mtime = hdr.ModTime
	atime = hdr.AccessTime
	if atime.IsZero() {
		atime = mtime
	}
	return atime, mtime
}

func (x *extractor) entry(hdr *tar.Header, body io.Reader) error {
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	}
	p, err := x.entryPath(hdr.Name)
	if err != nil {
		return err
	}
	mode := uint32(hdr.Mode) & 0o7777
	uid, gid := x.owner(hdr)
	atime, mtime := times(hdr)

	if p == x.dir {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("%w: non-directory entry names the extraction directory", errs.ErrInvalid)
		}
		fd, err := x.r.open(p, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return mapErrno(err)
		}
		defer unix.Close(fd)
		if err := x.applyFd(fd, uid, gid, mode, x.xattrs(hdr)); err != nil {
			return err
		}
		x.dirs = append(x.dirs, dirTimes{p, atime, mtime})
		return nil
	}

	parent, name := split(p)
	pfd, err := x.r.mkdirAll(parent, 0o755, x.opts.UID, x.opts.GID)
	if err != nil {
		return fmt.Errorf("create parent %s: %w", parent, mapErrno(err))
	}
	defer unix.Close(pfd)

	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(pfd, name, 0o700); err != nil && err != unix.EEXIST {
			return mapErrno(err)
		}
		fd, err := openChildDir(pfd, name, unix.O_RDONLY)
		if err == unix.ENOTDIR || err == unix.ELOOP {
			// A non-directory is in the way: replace it.
			if err := removeExisting(pfd, name, false); err != nil {
				return mapErrno(err)
			}
			if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
				return mapErrno(err)
			}
			fd, err = openChildDir(pfd, name, unix.O_RDONLY)
		}
		if err != nil {
			return mapErrno(err)
		}
		defer unix.Close(fd)
		if err := x.applyFd(fd, uid, gid, mode, x.xattrs(hdr)); err != nil {
			return err
		}
		x.dirs = append(x.dirs, dirTimes{p, atime, mtime})
		return nil

	case tar.TypeReg, typeRegA, tar.TypeGNUSparse, tar.TypeCont:
		if err := removeExisting(pfd, name, false); err != nil {
			return mapErrno(err)
		}
		fd, err := unix.Openat(pfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return mapErrno(err)
		}
		defer unix.Close(fd)
		progress := func(n int64) {
			x.total += n
			if x.opts.Progress != nil {
				x.opts.Progress(x.total)
			}
		}
		if _, err := writeContent(fd, body, declaredSparse(hdr), progress, x.ctx.Err); err != nil {
			return fmt.Errorf("write content: %w", mapErrno(err))
		}
		if err := x.applyFd(fd, uid, gid, mode, x.xattrs(hdr)); err != nil {
			return err
		}
		if err := futimens(fd, atime, mtime); err != nil {
			return fmt.Errorf("set times: %w", mapErrno(err))
		}
		return nil

	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return fmt.Errorf("%w: bad symlink target %q", errs.ErrInvalid, hdr.Linkname)
		}
		if err := removeExisting(pfd, name, false); err != nil {
			return mapErrno(err)
		}
		if err := unix.Symlinkat(hdr.Linkname, pfd, name); err != nil {
			return mapErrno(err)
		}
		// Linux refuses user.* xattrs on symlinks; drop them like GNU tar.
		xattrs := x.xattrs(hdr)
		for k := range xattrs {
			if strings.HasPrefix(k, "user.") {
				delete(xattrs, k)
			}
		}
		return x.applyAt(pfd, name, uid, gid, 0, false, xattrs, atime, mtime)

	case tar.TypeLink:
		target, err := x.entryPath(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hardlink target: %w", err)
		}
		if target == p {
			return nil
		}
		tfd, tname, err := x.r.openParent(target)
		if err != nil {
			return fmt.Errorf("hardlink target %s: %w", target, mapErrno(err))
		}
		defer unix.Close(tfd)
		if tname == "" {
			return fmt.Errorf("%w: hardlink to the root", errs.ErrInvalid)
		}
		if err := removeExisting(pfd, name, false); err != nil {
			return mapErrno(err)
		}
		// Flags 0: a symlink target is linked itself, never followed.
		if err := unix.Linkat(tfd, tname, pfd, name, 0); err != nil {
			return fmt.Errorf("hardlink to %s: %w", target, mapErrno(err))
		}
		return nil

	case tar.TypeFifo, tar.TypeChar, tar.TypeBlock:
		var ftype uint32
		switch hdr.Typeflag {
		case tar.TypeFifo:
			ftype = unix.S_IFIFO
		case tar.TypeChar:
			ftype = unix.S_IFCHR
		case tar.TypeBlock:
			ftype = unix.S_IFBLK
		}
		dev := 0
		if ftype != unix.S_IFIFO {
			if !x.opts.PreserveOwner {
				return fmt.Errorf("%w: device nodes are only extracted from trusted images", errs.ErrForbidden)
			}
			dev = int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
		}
		if err := removeExisting(pfd, name, false); err != nil {
			return mapErrno(err)
		}
		if err := unix.Mknodat(pfd, name, ftype|0o600, dev); err != nil {
			return mapErrno(err)
		}
		return x.applyAt(pfd, name, uid, gid, mode, true, x.xattrs(hdr), atime, mtime)
	}
	return fmt.Errorf("%w: unsupported entry type %q", errs.ErrInvalid, hdr.Typeflag)
}

// applyFd sets owner, then mode (chown clears setuid bits), then xattrs
// (chown clears security.capability) on an open file.
func (x *extractor) applyFd(fd, uid, gid int, mode uint32, xattrs map[string][]byte) error {
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return fmt.Errorf("chown: %w", mapErrno(err))
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("chmod: %w", mapErrno(err))
	}
	for _, k := range sortedKeys(xattrs) {
		if err := unix.Fsetxattr(fd, k, xattrs[k], 0); err != nil {
			return fmt.Errorf("set xattr %s: %w", k, mapErrno(err))
		}
	}
	return nil
}

// applyAt is applyFd plus times for a node that cannot be opened (symlink,
// FIFO, device), addressed by name in its parent without following it.
func (x *extractor) applyAt(pfd int, name string, uid, gid int, mode uint32, setMode bool, xattrs map[string][]byte, atime, mtime time.Time) error {
	if err := unix.Fchownat(pfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown: %w", mapErrno(err))
	}
	if setMode {
		if err := chmodAt(pfd, name, mode); err != nil {
			return fmt.Errorf("chmod: %w", mapErrno(err))
		}
	}
	for _, k := range sortedKeys(xattrs) {
		if err := xattr.SetAt(pfd, name, k, xattrs[k]); err != nil {
			return fmt.Errorf("set xattr %s: %w", k, mapErrno(err))
		}
	}
	if err := utimesAt(pfd, name, atime, mtime); err != nil {
		return fmt.Errorf("set times: %w", mapErrno(err))
	}
	return nil
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// mkdirAll returns an O_RDONLY descriptor of directory p, creating it and
// its missing parents (owned by uid:gid, with mode) as needed. Every step is
// resolved inside the root.
func (r *Root) mkdirAll(p string, mode uint32, uid, gid int) (int, error) {
	fd, err := r.open(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err == nil || err != unix.ENOENT {
		return fd, err
	}
	cur, err := r.open("/", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return -1, err
	}
	prefix := "/"
	for _, comp := range strings.Split(p[1:], "/") {
		prefix = path.Join(prefix, comp)
		next, err := r.open(prefix, unix.O_RDONLY|unix.O_DIRECTORY)
		if err == unix.ENOENT {
			// cur is the resolved parent of prefix; create comp in it.
			if err := unix.Mkdirat(cur, comp, 0o700); err != nil && err != unix.EEXIST {
				unix.Close(cur)
				return -1, err
			}
			next, err = openChildDir(cur, comp, unix.O_RDONLY)
			if err == nil {
				if err = unix.Fchown(next, uid, gid); err == nil {
					err = unix.Fchmod(next, mode)
				}
				if err != nil {
					unix.Close(next)
				}
			}
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}
