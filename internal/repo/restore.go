package repo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/repo/pack"
	"github.com/stead-dev/stead/internal/repo/seal"
	"github.com/stead-dev/stead/internal/xattr"
)

// RestoreOptions tunes a restore.
type RestoreOptions struct {
	// Path restores only this slash-separated path of the snapshot ("" or
	// "/": everything). dst then becomes that file or directory.
	Path string
	// Progress is called about every 200 ms and once at the end (optional).
	Progress func(Progress)
}

// RestoreStats says what a restore did.
type RestoreStats struct {
	Files           int64         `json:"files"`
	Dirs            int64         `json:"dirs"`
	Other           int64         `json:"other"`
	BytesWritten    int64         `json:"bytes_written"`
	BytesDownloaded int64         `json:"bytes_downloaded"`
	Duration        time.Duration `json:"duration_ns"`
}

// Restore reads packs, not chunks: the chunks a restore needs are grouped
// by the pack holding them, neighbours within mergeGap are fetched with one
// ranged read of at most maxRange bytes, and each decoded chunk is written
// to every place that needs it (dedup inside a snapshot is common). Packs
// are read by several workers at once.
//
// From a store whose reads cost no request (blobstore.RangeReader: local
// files) ranges are at most localRange bytes, read into a buffer each
// worker reuses: fresh memory costs a page fault per 4 KiB.
const (
	mergeGap   = 1 << 20
	maxRange   = 32 << 20
	localRange = 4 << 20
)

// rfile is a regular file being restored.
type rfile struct {
	rel     string
	node    *Node
	offsets []int64 // stream offset of each content chunk
	lens    []int64
	pending atomic.Int64 // chunks not yet written
}

// target is one place a chunk goes: chunk i of file f.
type target struct {
	f *rfile
	i int
}

// packWork is what a restore needs from one pack.
type packWork struct {
	id      seal.ID
	blobs   []pack.Blob // sorted by offset, each once
	targets map[seal.ID][]target
}

// rdir is a created directory whose metadata is applied at the end.
type rdir struct {
	rel  string
	node *Node
}

type restorer struct {
	s      *Scope
	rootfd int
	c      counters
	stats  RestoreStats
	dirs   []rdir
	// batch holds the files created since the last flush (batchBytes of
	// data): every batchBytesMax or batchFilesMax the walk hands their packs
	// to the pack workers (work), so packs are read and files written while
	// the rest of the tree is still being created.
	batch      []*rfile
	batchBytes int64
	work       chan *packWork
	workers    *errgroup.Group
	wctx       context.Context   // the workers' context: it ends when one fails
	batchFiles int               // batchFilesMax, or the scope's test override
	links      map[uint64]string // inode → rel path of the first name restored
	// entries counts what the restore has created, against maxEntries.
	entries, maxEntries int64
}

// maxEntries bounds the entries one restore creates: trees are content
// addressed, so a crafted snapshot could point every directory at one
// subtree and describe 2^depth entries in a few blobs.
const maxEntries = 100_000_000

// Restore writes the snapshot id (or one path of it) to dst, which must not
// exist or be an empty directory. Every blob is authenticated and checked
// against its id before a byte of it is written; a corrupt snapshot fails
// the restore (what was written so far stays in dst for inspection; callers
// restore into a fresh place and discard it on error). Entries are created
// only below dst: names are single components, symlinks are never followed.
// Sparse files stay sparse. The result is synced (syncfs) before Restore
// returns.
func (s *Scope) Restore(ctx context.Context, id seal.ID, dst string, opts RestoreOptions) (RestoreStats, error) {
	start := time.Now()
	s.lock.RLock()
	defer s.lock.RUnlock()
	if err := s.loadIndex(ctx); err != nil {
		return RestoreStats{}, err
	}
	m, err := s.Manifest(ctx, id)
	if err != nil {
		return RestoreStats{}, err
	}
	if m.Root.Type != TypeDir || m.Root.Mode&^0o7777 != 0 {
		return RestoreStats{}, fmt.Errorf("restore %s: the root is a %q with mode %o, not a directory: %w", id, m.Root.Type, m.Root.Mode, pack.ErrCorrupt)
	}
	root := m.Root
	root.Subtree = &m.Tree
	node := &root
	if len(splitPath(opts.Path)) > 0 {
		if node, err = s.findNode(ctx, m.Tree, opts.Path); err != nil {
			return RestoreStats{}, fmt.Errorf("restore %s: %w", id, err)
		}
	}
	r := &restorer{s: s, links: map[uint64]string{}, maxEntries: maxEntries}
	if s.maxEntries > 0 {
		r.maxEntries = s.maxEntries
	}
	r.batchFiles = batchFilesMax
	if s.restoreBatch > 0 {
		r.batchFiles = s.restoreBatch
	}
	stop := make(chan struct{})
	go reportProgress(opts.Progress, func() Progress { return r.c.progress("restore", start, false) }, stop)
	err = r.run(ctx, node, dst)
	close(stop)
	r.stats.Duration = time.Since(start)
	r.stats.BytesDownloaded = r.c.moved.Load()
	r.stats.BytesWritten = r.c.bytesDone.Load()
	if err != nil {
		return r.stats, fmt.Errorf("restore %s to %s: %w", id, dst, err)
	}
	if opts.Progress != nil {
		opts.Progress(r.c.progress("restore", start, true))
	}
	return r.stats, nil
}

func (r *restorer) run(ctx context.Context, node *Node, dst string) error {
	parent, base := filepath.Dir(dst), filepath.Base(dst)
	pfd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", parent, err)
	}
	defer unix.Close(pfd)
	if node.Type != TypeDir {
		// One entry: dst is created as that entry, next to nothing else.
		r.rootfd = pfd
		n := *node
		n.Name = []byte(base)
		wctx := r.startPacks(ctx)
		return r.finish(ctx, r.entry(wctx, pfd, "", &n))
	}
	if err := unix.Mkdirat(pfd, base, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("create %s: %w", dst, err)
	}
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dst, err)
	}
	defer unix.Close(fd)
	if names, err := fsutil.ReadDirNames(fd); err != nil {
		return err
	} else if len(names) > 0 {
		return fmt.Errorf("restore into %s: not empty: %w", dst, errs.ErrConflict)
	}
	r.rootfd = fd
	wctx := r.startPacks(ctx)
	err = r.dir(wctx, fd, "", *node.Subtree, 0)
	r.dirs = append(r.dirs, rdir{rel: ".", node: node})
	return r.finish(ctx, err)
}

// dir creates the entries of tree id inside dirfd (at rel below the root).
func (r *restorer) dir(ctx context.Context, dirfd int, rel string, id seal.ID, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("/%s: directories nested deeper than %d: %w", rel, maxDepth, pack.ErrCorrupt)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.entries += 1; r.entries > r.maxEntries {
		return fmt.Errorf("more than %d entries (a tree whose directories share subtrees without end?): %w", r.maxEntries, pack.ErrCorrupt)
	}
	t, err := r.s.loadTree(ctx, id)
	if err != nil {
		return err
	}
	if r.entries += int64(len(t.Nodes)); r.entries > r.maxEntries {
		return fmt.Errorf("more than %d entries (a tree whose directories share subtrees without end?): %w", r.maxEntries, pack.ErrCorrupt)
	}
	for i := range t.Nodes {
		if err := r.entry(ctx, dirfd, rel, &t.Nodes[i]); err != nil {
			return err
		}
		n := &t.Nodes[i]
		if n.Type != TypeDir {
			continue
		}
		crel := joinRel(rel, string(n.Name))
		fd, err := unix.Openat(dirfd, string(n.Name), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open /%s: %w", crel, err)
		}
		err = r.dir(ctx, fd, crel, *n.Subtree, depth+1)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

// entry creates one entry (a directory empty, a file at its size with its
// data queued) inside dirfd.
func (r *restorer) entry(ctx context.Context, dirfd int, rel string, n *Node) error {
	name := string(n.Name)
	crel := joinRel(rel, name)
	switch n.Type {
	case TypeDir:
		if err := unix.Mkdirat(dirfd, name, 0o700); err != nil {
			return fmt.Errorf("create directory /%s: %w", crel, err)
		}
		r.dirs = append(r.dirs, rdir{rel: crel, node: n})
		r.stats.Dirs++
		return nil
	case TypeFile:
		r.stats.Files++
		if n.Links > 1 && n.Inode != 0 {
			if first, ok := r.links[n.Inode]; ok {
				return r.link(dirfd, first, name, crel)
			}
			r.links[n.Inode] = crel
		}
		fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("create /%s: %w", crel, err)
		}
		defer unix.Close(fd)
		if n.Size > 0 {
			if err := unix.Ftruncate(fd, n.Size); err != nil {
				return fmt.Errorf("size /%s: %w", crel, err)
			}
		}
		f := &rfile{rel: crel, node: n}
		var total int64
		for _, cid := range n.Content {
			loc, ok := r.s.lookup(cid)
			if !ok || loc.blob.Type != pack.DataBlob {
				return fmt.Errorf("/%s: chunk %s is not in the repository index: %w", crel, cid, pack.ErrCorrupt)
			}
			f.offsets = append(f.offsets, total)
			f.lens = append(f.lens, int64(loc.blob.RawLength))
			total += int64(loc.blob.RawLength)
		}
		if total != n.dataLen() {
			return fmt.Errorf("/%s: chunks hold %d bytes, the file %d: %w", crel, total, n.dataLen(), pack.ErrCorrupt)
		}
		r.c.bytesTotal.Add(total)
		r.c.files.Add(1)
		if len(n.Content) == 0 {
			r.c.filesDone.Add(1)
			return applyMeta(fd, n)
		}
		r.batch = append(r.batch, f)
		r.batchBytes += total
		if r.batchBytes >= batchBytesMax || len(r.batch) >= r.batchFiles {
			return r.flush()
		}
		return nil
	case TypeSymlink:
		if err := unix.Symlinkat(string(n.Target), dirfd, name); err != nil {
			return fmt.Errorf("create symlink /%s: %w", crel, err)
		}
	case TypeFifo:
		if err := unix.Mknodat(dirfd, name, unix.S_IFIFO|0o600, 0); err != nil {
			return fmt.Errorf("create fifo /%s: %w", crel, err)
		}
	case TypeSocket:
		if err := unix.Mknodat(dirfd, name, unix.S_IFSOCK|0o600, 0); err != nil {
			return fmt.Errorf("create socket /%s: %w", crel, err)
		}
	case TypeChar, TypeBlock:
		kind := uint32(unix.S_IFCHR)
		if n.Type == TypeBlock {
			kind = unix.S_IFBLK
		}
		if err := unix.Mknodat(dirfd, name, kind|0o600, int(n.Rdev)); err != nil {
			return fmt.Errorf("create device /%s: %w", crel, err)
		}
	default:
		return fmt.Errorf("/%s: type %q: %w", crel, n.Type, pack.ErrCorrupt)
	}
	r.stats.Other++
	return applyMetaAt(dirfd, name, n)
}

// link makes name in dirfd a hardlink of the already restored first.
func (r *restorer) link(dirfd int, first, name, crel string) error {
	dir, base := filepath.Dir(first), filepath.Base(first)
	var pfd int
	var err error
	if dir == "." {
		pfd, err = unix.Dup(r.rootfd)
	} else {
		pfd, err = openBeneath(r.rootfd, dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC)
	}
	if err != nil {
		return fmt.Errorf("hardlink /%s: open /%s: %w", crel, dir, err)
	}
	defer unix.Close(pfd)
	if err := unix.Linkat(pfd, base, dirfd, name, 0); err != nil {
		return fmt.Errorf("hardlink /%s to /%s: %w", crel, first, err)
	}
	return nil
}

// applyMeta sets owner, mode, xattrs and times of an open file (in that
// order: chown clears setuid bits and security.capability).
func applyMeta(fd int, n *Node) error {
	if err := unix.Fchown(fd, int(n.UID), int(n.GID)); err != nil {
		return fmt.Errorf("chown %q: %w", n.Name, err)
	}
	if err := unix.Fchmod(fd, n.Mode); err != nil {
		return fmt.Errorf("chmod %q: %w", n.Name, err)
	}
	for _, x := range n.Xattrs {
		if err := unix.Fsetxattr(fd, x.Name, x.Value, 0); err != nil {
			return fmt.Errorf("set xattr %s on %q: %w", x.Name, n.Name, err)
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(n.MtimeNs), unix.NsecToTimespec(n.MtimeNs)}
	if err := unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("set times of %q: %w", n.Name, err)
	}
	return nil
}

// applyMetaAt is applyMeta for an entry that cannot be opened (symlinks,
// devices, fifos), addressed by name inside dirfd without following it.
func applyMetaAt(dirfd int, name string, n *Node) error {
	if err := unix.Fchownat(dirfd, name, int(n.UID), int(n.GID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown %q: %w", name, err)
	}
	if n.Type != TypeSymlink {
		if err := unix.Fchmodat(dirfd, name, n.Mode, 0); err != nil {
			return fmt.Errorf("chmod %q: %w", name, err)
		}
	}
	for _, x := range n.Xattrs {
		if err := xattr.SetAt(dirfd, name, x.Name, x.Value); err != nil {
			return fmt.Errorf("set xattr %s on %q: %w", x.Name, name, err)
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(n.MtimeNs), unix.NsecToTimespec(n.MtimeNs)}
	if err := unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times of %q: %w", name, err)
	}
	return nil
}

// finish writes the queued file data in parallel, pack by pack, then
// applies directory metadata deepest first and syncs the file system.
// Batches of the walk handed to the pack workers; see restorer.batch.
const (
	batchBytesMax = 64 << 20
	batchFilesMax = 4096
)

// startPacks starts the pack workers, which restore what flush hands them
// until finish; the walk runs under the returned context, which ends when a
// worker fails.
func (r *restorer) startPacks(ctx context.Context) context.Context {
	g, gctx := errgroup.WithContext(ctx)
	r.work, r.workers, r.wctx = make(chan *packWork), g, gctx
	for range max(r.s.r.opts.Transfers, r.s.r.opts.Workers) + 2 {
		g.Go(func() error {
			var bufs restoreBufs
			for pw := range r.work {
				if err := r.restorePack(gctx, pw, &bufs); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return gctx
}

// flush hands the batch's packs to the pack workers (waiting while they
// are busy) and starts a new batch. A pack that holds chunks of files in
// two batches is read once for each, only the ranges each needs.
func (r *restorer) flush() error {
	byPack := map[seal.ID]*packWork{}
	for _, f := range r.batch {
		f.pending.Store(int64(len(f.node.Content)))
		for i, cid := range f.node.Content {
			loc, _ := r.s.lookup(cid)
			pw := byPack[loc.pack]
			if pw == nil {
				pw = &packWork{id: loc.pack, targets: map[seal.ID][]target{}}
				byPack[loc.pack] = pw
			}
			if _, seen := pw.targets[cid]; !seen {
				pw.blobs = append(pw.blobs, loc.blob)
			}
			pw.targets[cid] = append(pw.targets[cid], target{f: f, i: i})
		}
	}
	r.batch, r.batchBytes = nil, 0
	work := make([]*packWork, 0, len(byPack))
	for _, pw := range byPack {
		slices.SortFunc(pw.blobs, func(a, b pack.Blob) int { return cmp.Compare(a.Offset, b.Offset) })
		work = append(work, pw)
	}
	slices.SortFunc(work, func(a, b *packWork) int { return strings.Compare(a.id.String(), b.id.String()) })
	for _, pw := range work {
		select {
		case r.work <- pw:
		case <-r.wctx.Done():
			return r.wctx.Err()
		}
	}
	return nil
}

// finish ends a restore whose walk returned walkErr: the last batch goes
// to the pack workers, they finish, then directories get their metadata
// (deepest first) and the file system is synced. On an error the workers
// are still waited for, so nothing writes into the tree after Restore
// returns.
func (r *restorer) finish(ctx context.Context, walkErr error) error {
	if walkErr == nil {
		walkErr = r.flush()
	}
	close(r.work)
	// A failed worker stops the walk (its context ends): the worker's
	// error is the cause. A walk that failed on its own stops nothing.
	if err := r.workers.Wait(); err != nil {
		return err
	}
	if walkErr != nil {
		return walkErr
	}
	for i := len(r.dirs) - 1; i >= 0; i-- {
		d := r.dirs[i]
		var fd int
		var err error
		if d.rel == "." {
			fd, err = unix.Dup(r.rootfd)
		} else {
			fd, err = openBeneath(r.rootfd, d.rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
		}
		if err != nil {
			return fmt.Errorf("open /%s: %w", d.rel, err)
		}
		err = applyMeta(fd, d.node)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("/%s: %w", d.rel, err)
		}
	}
	if err := unix.Syncfs(r.rootfd); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}

// restoreBufs are one restore worker's reused buffers.
type restoreBufs struct {
	dec []byte // a decoded chunk
	rng []byte // a range read from a RangeReader store
}

// restorePack fetches the needed blobs of one pack in merged ranges,
// authenticates each and writes it wherever it goes.
func (r *restorer) restorePack(ctx context.Context, pw *packWork, bufs *restoreBufs) error {
	key := packKey(r.s.name, pw.id)
	rr, local := r.s.r.store.(blobstore.RangeReader)
	limit := int64(maxRange)
	if local {
		limit = localRange
	}
	for lo := 0; lo < len(pw.blobs); {
		start := int64(pw.blobs[lo].Offset)
		end := start + int64(pw.blobs[lo].Length)
		hi := lo + 1
		for hi < len(pw.blobs) {
			b := pw.blobs[hi]
			bend := int64(b.Offset) + int64(b.Length)
			if int64(b.Offset)-end > mergeGap || bend-start > limit {
				break
			}
			end = max(end, bend)
			hi++
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var data []byte
		var err error
		if local {
			if int64(cap(bufs.rng)) < end-start {
				bufs.rng = make([]byte, max(end-start, localRange))
			}
			data = bufs.rng[:end-start]
			err = rr.ReadRange(ctx, key, start, data)
		} else {
			data, err = r.s.r.store.GetRange(ctx, key, start, end-start)
		}
		if err != nil {
			return fmt.Errorf("fetch pack %s: %w", pw.id, err)
		}
		if int64(len(data)) != end-start {
			// Never slice past len: the bytes beyond it are not what was read.
			return fmt.Errorf("fetch pack %s: got %d of %d bytes: %w", pw.id, len(data), end-start, pack.ErrCorrupt)
		}
		data = data[:len(data):len(data)]
		r.c.moved.Add(int64(len(data)))
		for _, b := range pw.blobs[lo:hi] {
			off := int64(b.Offset) - start
			if bufs.dec, err = r.s.codec.Decode(bufs.dec[:0], b, data[off:off+int64(b.Length)]); err != nil {
				return fmt.Errorf("chunk %s in pack %s: %w", b.ID, pw.id, err)
			}
			for _, t := range pw.targets[b.ID] {
				if err := r.writeChunk(t, bufs.dec); err != nil {
					return err
				}
			}
		}
		lo = hi
	}
	return nil
}

// writeChunk writes chunk t.i of a file; the file's last chunk applies its
// metadata.
func (r *restorer) writeChunk(t target, data []byte) error {
	f := t.f
	fd, err := openBeneath(r.rootfd, f.rel, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open /%s: %w", f.rel, err)
	}
	defer unix.Close(fd)
	if err := writeStream(fd, f.node, f.offsets[t.i], data); err != nil {
		return fmt.Errorf("write /%s: %w", f.rel, err)
	}
	startWriteback(fd, f.node, f.offsets[t.i], len(data))
	r.c.bytesDone.Add(int64(len(data)))
	if f.pending.Add(-1) == 0 {
		r.c.filesDone.Add(1)
		if err := applyMeta(fd, f.node); err != nil {
			return fmt.Errorf("/%s: %w", f.rel, err)
		}
	}
	return nil
}

// startWriteback starts writing n bytes just written at stream offset off
// back to disk, without waiting: the disk then writes while later chunks are
// fetched and decoded, instead of all at once in the final syncfs (a few GB
// of dirty pages stay below the kernel's background threshold on a large
// machine). The syncfs at the end still waits for every byte and reports
// any error, so a failure here is ignored.
func startWriteback(fd int, n *Node, off int64, size int) {
	if n.Sparse {
		off, size = 0, 0 // the whole file: its data regions are few
	}
	_ = unix.SyncFileRange(fd, off, int64(size), unix.SYNC_FILE_RANGE_WRITE)
}

// writeStream writes data found at stream offset off (into the
// concatenation of the file's data regions) at its file offsets.
func writeStream(fd int, n *Node, off int64, data []byte) error {
	if !n.Sparse {
		return pwriteAll(fd, data, off)
	}
	var pos int64 // stream offset where extent e starts
	for _, e := range n.Extents {
		if len(data) == 0 {
			return nil
		}
		if off < pos+e.Len {
			skip := off - pos
			k := min(int64(len(data)), e.Len-skip)
			if err := pwriteAll(fd, data[:k], e.Off+skip); err != nil {
				return err
			}
			data = data[k:]
			off += k
		}
		pos += e.Len
	}
	if len(data) > 0 {
		return fmt.Errorf("data beyond the file's extents: %w", pack.ErrCorrupt)
	}
	return nil
}

func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}
