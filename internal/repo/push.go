package repo

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/repo/chunker"
	"github.com/stead-dev/stead/internal/repo/pack"
	"github.com/stead-dev/stead/internal/repo/seal"
	"github.com/stead-dev/stead/internal/treediff"
	"github.com/stead-dev/stead/internal/xattr"
)

// Progress reports a long operation (push, restore, check) as it goes.
type Progress struct {
	Op         string `json:"op"`
	FilesDone  int64  `json:"files_done"`
	FilesTotal int64  `json:"files_total"`
	BytesDone  int64  `json:"bytes_done"`
	BytesTotal int64  `json:"bytes_total"`
	// BytesUploaded (push) or BytesDownloaded (restore) counts stored bytes moved.
	BytesMoved int64         `json:"bytes_moved"`
	Elapsed    time.Duration `json:"elapsed_ns"`
	Done       bool          `json:"done"`
}

// PushOptions tunes a push.
type PushOptions struct {
	// Parent is the manifest this push is incremental to: files whose inode,
	// size, mtime and ctime are unchanged are not read again.
	Parent seal.ID
	// Source, Tenant, Labels and Digest are recorded in the manifest.
	Source string
	Tenant string
	Labels map[string]string
	Digest string
	// Writer is recorded in the manifest: the pushing node and the epoch
	// of the lease it pushes under.
	Writer Writer
	// Progress is called about every 200 ms and once at the end (optional).
	Progress func(Progress)
	// Diff, with Parent, says what changed between the local snapshot
	// the parent was pushed from and src: the push then looks only at
	// what changed (see incremental.go). Without it, or when the
	// repository has damaged packs, the push walks the whole tree.
	Diff treediff.Diff
}

// PushStats says what a push did.
type PushStats struct {
	Files       int64 `json:"files"`
	FilesRead   int64 `json:"files_read"`
	FilesReused int64 `json:"files_reused"`
	BytesRead   int64 `json:"bytes_read"`
	ChunksNew   int64 `json:"chunks_new"`
	ChunksKnown int64 `json:"chunks_known"`
	// BlobsReplaced counts blobs uploaded again because their only
	// indexed copy is in a pack marked damaged.
	BlobsReplaced int64         `json:"blobs_replaced,omitempty"`
	TreesNew      int64         `json:"trees_new"`
	PacksWritten  int64         `json:"packs_written"`
	BytesUploaded int64         `json:"bytes_uploaded"`
	Duration      time.Duration `json:"duration_ns"`
	// Incremental is true when the push looked only at what changed since
	// its parent's local snapshot (PushOptions.Diff), not at every file.
	Incremental bool `json:"incremental,omitempty"`
}

// counters are the live numbers behind Progress and PushStats.
type counters struct {
	files, filesDone, bytesTotal, bytesDone, moved atomic.Int64
}

func (c *counters) progress(op string, start time.Time, done bool) Progress {
	return Progress{Op: op, FilesDone: c.filesDone.Load(), FilesTotal: c.files.Load(),
		BytesDone: c.bytesDone.Load(), BytesTotal: c.bytesTotal.Load(), BytesMoved: c.moved.Load(),
		Elapsed: time.Since(start), Done: done}
}

// reportProgress calls fn every 200 ms until stop is closed.
func reportProgress(fn func(Progress), get func() Progress, stop <-chan struct{}) {
	if fn == nil {
		return
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			fn(get())
		}
	}
}

// wdir is a directory being pushed: its tree and the directories below it.
type wdir struct {
	rel    string // path below the root, "" for the root
	tree   Tree
	parent *Tree // the same directory in the parent snapshot, if any
	// parentID is parent's tree id (zero without one).
	parentID seal.ID
	subs     []*wdir
	// subIdx[i] is the index in tree.Nodes of subs[i]'s node.
	subIdx []int
}

// readJob is one file whose content must be read.
type readJob struct {
	rel  string
	node *Node
	// base is the file at the same path in the parent (incremental
	// pushes): only its changed ranges are read.
	base *Node
	// f is the file, opened ahead with its first bytes asked for
	// (prefetch); nil when the reader opens it.
	f *os.File
}

// encJob is a new blob to compress, seal and pack.
type encJob struct {
	t    pack.BlobType
	id   seal.ID
	data []byte
	buf  *[]byte // returned to the buffer pool after encoding
}

// packed is an encoded blob on its way into a pack.
type packed struct {
	t          pack.BlobType
	id         seal.ID
	stored     []byte
	raw        int
	compressed bool
	buf        *[]byte // stored's buffer, back to the pool once packed
}

// pusher is the state of one push.
type pusher struct {
	s      *Scope
	rootfd int
	opts   PushOptions
	c      counters
	stats  PushStats
	params chunker.Params
	// dryRun computes trees and chunk ids without storing anything (Verify).
	dryRun bool
	// want, when set, limits uploads to the blobs it accepts (repair from
	// a copy that is not the pushed tree itself).
	want func(seal.ID) bool
	// noManifest stops after the index (repair: the blobs, not a snapshot).
	noManifest bool
	// incremental is set when the tree came from opts.Diff, not a walk.
	incremental bool

	pendMu  sync.Mutex
	pending map[seal.ID]bool

	bufs       sync.Pool // chunk buffers
	storedBufs sync.Pool // encoded blob buffers

	newPacks []pack.IndexPack
	packMu   sync.Mutex
	// dataRead counts the data-region bytes of the files read.
	dataRead atomic.Int64
	// recycle returns uploaded packs' memory to the packer.
	recycle chan []byte
	// spools are the packs started in the store's spool; those not
	// committed are aborted when the push ends.
	spoolMu sync.Mutex
	spools  []blobstore.Spool
}

// Push stores the tree at src (a quiescent directory: a read-only local
// snapshot) as a new manifest. Only new chunks are uploaded; with a parent,
// unchanged files are not even read.
func (s *Scope) Push(ctx context.Context, src string, opts PushOptions) (*Manifest, PushStats, error) {
	start := time.Now()
	s.lock.RLock()
	defer s.lock.RUnlock()
	_, release, err := s.hold(ctx, false)
	if err != nil {
		return nil, PushStats{}, fmt.Errorf("push: %w", err)
	}
	defer release()
	if err := s.loadIndex(ctx); err != nil {
		return nil, PushStats{}, err
	}
	var parentRoot *seal.ID
	var parent *Manifest
	if !opts.Parent.IsZero() {
		pm, err := s.Manifest(ctx, opts.Parent)
		if err != nil {
			return nil, PushStats{}, fmt.Errorf("push: parent: %w", err)
		}
		parentRoot, parent = &pm.Tree, pm
	}
	rootfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, PushStats{}, fmt.Errorf("push %s: %w", src, err)
	}
	defer unix.Close(rootfd)
	p := &pusher{s: s, rootfd: rootfd, opts: opts, pending: map[seal.ID]bool{}, params: s.r.cfg.Chunker,
		recycle: make(chan []byte, s.r.opts.Transfers+2)}
	p.bufs.New = func() any { b := make([]byte, 0, p.params.Max); return &b }
	p.storedBufs.New = func() any { b := make([]byte, 0, p.params.Max+p.params.Max/16+1024); return &b }

	stop := make(chan struct{})
	go reportProgress(opts.Progress, func() Progress { return p.c.progress("push", start, false) }, stop)
	m, err := p.run(ctx, parentRoot, parent)
	close(stop)
	p.stats.Duration = time.Since(start)
	p.stats.BytesUploaded = p.c.moved.Load()
	if opts.Progress != nil && err == nil {
		opts.Progress(p.c.progress("push", start, true))
	}
	if err != nil {
		return nil, p.stats, fmt.Errorf("push %s: %w", src, err)
	}
	s.r.log.Info("pushed", "scope", s.name, "snapshot", m.ID.String()[:12], "files_read", p.stats.FilesRead,
		"files_reused", p.stats.FilesReused, "uploaded", p.stats.BytesUploaded, "incremental", p.stats.Incremental, "dur", p.stats.Duration)
	return m, p.stats, nil
}

func (p *pusher) run(ctx context.Context, parentRoot *seal.ID, parent *Manifest) (*Manifest, error) {
	// Phase 1: walk the tree, reusing unchanged files of the parent.
	var rootStat unix.Stat_t
	if err := unix.Fstat(p.rootfd, &rootStat); err != nil {
		return nil, err
	}
	rootNode, err := p.nodeFromStat(p.rootfd, "", "", &rootStat)
	if err != nil {
		return nil, err
	}
	if x, err := xattr.AllFd(p.rootfd); err == nil {
		rootNode.Xattrs = sortedXattrs(x)
	}
	var root *wdir
	var jobs []readJob
	var st Stats
	if parent != nil && p.opts.Diff != nil && !p.dryRun && p.want == nil && !p.s.hasDamage() {
		var err error
		root, jobs, st, err = p.walkDiff(ctx, parent, rootNode)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			p.s.r.log.Warn("incremental push: walking the whole tree", "scope", p.s.name, "err", err)
			root, jobs, st = nil, nil, Stats{}
			rootNode.Subtree = nil
		} else {
			p.incremental = true
			p.c.files.Store(st.Files)
			p.c.filesDone.Store(st.Files - int64(len(jobs)))
		}
	}
	fullWalk := root == nil
	if fullWalk {
		root = &wdir{}
		if parentRoot != nil {
			if root.parent, err = p.parentTree(ctx, *parentRoot, ""); err != nil {
				return nil, err
			}
			if root.parent != nil {
				root.parentID = *parentRoot
			}
		}
	}

	// Phase 2: read, chunk, encode and pack changed files; then trees.
	defer func() {
		for _, sp := range p.spools {
			sp.Abort() // a committed spool is left alone
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	// Every queued chunk holds a buffer of up to the chunker's Max (2 MiB):
	// one slot per encoder on each side keeps the encoders busy without
	// raising the push's peak memory.
	enc := make(chan encJob, p.s.r.opts.Workers)
	out := make(chan packed, p.s.r.opts.Workers)
	up := make(chan packUpload, 1) // packs in flight: the uploaders' plus one

	var encWG sync.WaitGroup
	for range p.s.r.opts.Workers {
		encWG.Add(1)
		g.Go(func() error {
			defer encWG.Done()
			return p.encode(gctx, enc, out)
		})
	}
	go func() { encWG.Wait(); close(out) }()
	g.Go(func() error { return p.pack(gctx, out, up) })
	for range p.s.r.opts.Transfers {
		g.Go(func() error { return p.upload(gctx, up) })
	}
	g.Go(func() error {
		defer close(enc)
		if fullWalk {
			// The walk feeds the readers as it goes: files are read
			// while the rest of the tree is still being listed.
			err := p.readStream(gctx, func(emit func(readJob) error) error {
				if err := p.walk(gctx, p.rootfd, root, emit, &st); err != nil {
					return err
				}
				st.Dirs++ // the root
				return nil
			}, enc)
			if err != nil {
				return err
			}
		} else if err := p.readAll(gctx, jobs, enc); err != nil {
			return err
		}
		id, err := p.trees(gctx, root, enc)
		if err != nil {
			return err
		}
		rootNode.Subtree = &id
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}

	// Phase 3: the index of the new packs, then the manifest.
	if len(p.newPacks) > 0 {
		f := pack.IndexFile{Packs: p.newPacks}
		data, err := pack.EncodeIndex(p.s.codec, f)
		if err != nil {
			return nil, fmt.Errorf("encode index: %w", err)
		}
		id := seal.Hash(data)
		if err := p.s.r.store.Put(ctx, indexKey(p.s.name, id), data); err != nil {
			return nil, fmt.Errorf("write index: %w", err)
		}
		p.c.moved.Add(int64(len(data)))
		p.s.addIndex(id, f)
	}
	st.DataBytes += p.dataRead.Load()
	st.AddedBytes = p.c.moved.Load()
	if p.incremental {
		p.stats.Incremental = true
		p.stats.FilesReused = st.Files - p.stats.FilesRead
		p.c.files.Store(st.Files)
		p.c.filesDone.Store(st.Files)
	}
	if p.noManifest {
		return &Manifest{Scope: p.s.name, Tree: *rootNode.Subtree, Root: *rootNode, Stats: st}, nil
	}
	m := &Manifest{Scope: p.s.name, Time: time.Now().UTC(), Tree: *rootNode.Subtree, Root: *rootNode,
		Parent: p.opts.Parent, Source: p.opts.Source, Tenant: p.opts.Tenant, Labels: p.opts.Labels,
		Digest: p.opts.Digest, Stats: st, Writer: p.opts.Writer}
	if err := p.s.writeManifest(ctx, m); err != nil {
		return nil, err
	}
	return m, nil
}

// addIndex makes a just-written index file's blobs visible to lookups.
func (s *Scope) addIndex(id seal.ID, f pack.IndexFile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.indexes[id] = f
	for _, pk := range f.Packs {
		s.packs[pk.ID] = pk.Size
		for _, b := range pk.Blobs {
			if old, ok := s.blobs[b.ID]; ok && s.damaged[old.pack] == nil {
				continue // an intact copy stays the one read
			}
			s.blobs[b.ID] = blobLoc{pack: pk.ID, blob: b}
		}
	}
}

// parentTree loads a tree of the parent snapshot. A tree that cannot be
// read back (damaged or missing) is no parent: the files below it are read.
func (p *pusher) parentTree(ctx context.Context, id seal.ID, rel string) (*Tree, error) {
	t, err := p.s.loadTree(ctx, id)
	if errors.Is(err, pack.ErrCorrupt) || errors.Is(err, seal.ErrAuth) || errors.Is(err, errs.ErrNotFound) {
		p.s.r.log.Warn("parent tree unreadable: reading its files again", "scope", p.s.name, "dir", "/"+rel, "tree", id.String(), "err", err)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("parent tree of /%s: %w", rel, err)
	}
	return t, nil
}

// nodeFromStat builds the node of name (inside dirfd) from its stat.
func (p *pusher) nodeFromStat(dirfd int, rel, name string, st *unix.Stat_t) (*Node, error) {
	n := &Node{Name: []byte(name), Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid,
		MtimeNs: st.Mtim.Nano(), CtimeNs: st.Ctim.Nano(), Inode: st.Ino}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		n.Type, n.Size = TypeFile, st.Size
		if st.Nlink > 1 {
			n.Links = uint32(st.Nlink)
		}
	case unix.S_IFDIR:
		n.Type = TypeDir
	case unix.S_IFLNK:
		n.Type = TypeSymlink
		t, err := fsutil.ReadlinkAt(dirfd, name)
		if err != nil {
			return nil, fmt.Errorf("read symlink %s: %w", rel, err)
		}
		n.Target = []byte(t)
	case unix.S_IFIFO:
		n.Type = TypeFifo
	case unix.S_IFCHR:
		n.Type, n.Rdev = TypeChar, st.Rdev
	case unix.S_IFBLK:
		n.Type, n.Rdev = TypeBlock, st.Rdev
	case unix.S_IFSOCK:
		n.Type = TypeSocket
	default:
		return nil, fmt.Errorf("%s: unknown file type %o: %w", rel, st.Mode&unix.S_IFMT, errs.ErrUnsupported)
	}
	if n.Type != TypeFile {
		n.Inode = 0
	}
	return n, nil
}

func sortedXattrs(m map[string][]byte) []Xattr {
	if len(m) == 0 {
		return nil
	}
	out := make([]Xattr, 0, len(m))
	for k, v := range m {
		out = append(out, Xattr{Name: k, Value: v})
	}
	slices.SortFunc(out, func(a, b Xattr) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// walk fills d.tree with the entries of the directory dirfd, recursing
// into subdirectories, and passes the files that must be read to emit
// (which may read them at once: a file's node is not moved afterwards).
func (p *pusher) walk(ctx context.Context, dirfd int, d *wdir, emit func(readJob) error, st *Stats) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	names, err := fsutil.ReadDirNames(dirfd)
	if err != nil {
		return fmt.Errorf("read directory /%s: %w", d.rel, err)
	}
	slices.Sort(names) // bytewise, like the tree's order
	d.tree.Nodes = make([]Node, 0, len(names))
	for _, name := range names {
		rel := joinRel(d.rel, name)
		var sb unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &sb, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat /%s: %w", rel, err)
		}
		n, err := p.nodeFromStat(dirfd, rel, name, &sb)
		if err != nil {
			return err
		}
		x, err := xattr.AllAt(dirfd, name)
		if err != nil {
			return fmt.Errorf("xattrs of /%s: %w", rel, err)
		}
		n.Xattrs = sortedXattrs(x)
		var prev *Node
		if d.parent != nil {
			if i, ok := slices.BinarySearchFunc(d.parent.Nodes, n.Name, func(e Node, k []byte) int { return bytes.Compare(e.Name, k) }); ok {
				prev = &d.parent.Nodes[i]
			}
		}
		d.tree.Nodes = append(d.tree.Nodes, *n)
		switch n.Type {
		case TypeFile:
			st.Files++
			st.Bytes += n.Size
			p.c.files.Add(1)
			if prev != nil && prev.Type == TypeFile && prev.Inode == n.Inode && prev.Size == n.Size &&
				prev.MtimeNs == n.MtimeNs && prev.CtimeNs == n.CtimeNs && (p.dryRun || p.s.allUsable(prev.Content)) {
				// (A chunk only a damaged pack holds is read again.)
				cur := &d.tree.Nodes[len(d.tree.Nodes)-1]
				cur.Sparse, cur.Extents, cur.Content = prev.Sparse, prev.Extents, prev.Content
				st.DataBytes += cur.dataLen()
				p.c.filesDone.Add(1)
				p.stats.FilesReused++
				continue
			}
			p.c.bytesTotal.Add(n.Size)
			if n.Size > 0 {
				// Nodes has its final capacity: the pointer stays valid.
				if err := emit(readJob{rel: rel, node: &d.tree.Nodes[len(d.tree.Nodes)-1]}); err != nil {
					return err
				}
			} else {
				p.c.filesDone.Add(1)
			}
		case TypeDir:
			st.Dirs++
			sub := &wdir{rel: rel}
			if prev != nil && prev.Type == TypeDir && prev.Subtree != nil {
				if sub.parent, err = p.parentTree(ctx, *prev.Subtree, rel); err != nil {
					return err
				}
				if sub.parent != nil {
					sub.parentID = *prev.Subtree
				}
			}
			d.subs = append(d.subs, sub)
			d.subIdx = append(d.subIdx, len(d.tree.Nodes)-1)
		default:
			st.Other++
		}
	}
	for _, sub := range d.subs {
		fd, err := unix.Openat(dirfd, path.Base(sub.rel), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open directory /%s: %w", sub.rel, err)
		}
		err = p.walk(ctx, fd, sub, emit, st)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// readAll reads the queued files, big ones first (so the tail of the push
// is not one big file alone); see readStream.
func (p *pusher) readAll(ctx context.Context, jobs []readJob, enc chan<- encJob) error {
	slices.SortStableFunc(jobs, func(a, b readJob) int { return cmp.Compare(b.node.Size, a.node.Size) })
	return p.readStream(ctx, func(emit func(readJob) error) error {
		for _, j := range jobs {
			if err := emit(j); err != nil {
				return err
			}
		}
		return nil
	}, enc)
}

// readStream reads the files produce emits, several at a time, chunking
// and deduplicating, and hands new chunks to the encoders.
func (p *pusher) readStream(ctx context.Context, produce func(emit func(readJob) error) error, enc chan<- encJob) error {
	g, gctx := errgroup.WithContext(ctx)
	produced := make(chan readJob, 256)
	next := make(chan readJob, prefetchFiles)
	defer func() {
		// What an error left queued: close the files opened ahead.
		for j := range next {
			if j.f != nil {
				j.f.Close()
			}
		}
	}()
	g.Go(func() error {
		defer close(next)
		for j := range produced {
			if gctx.Err() == nil {
				p.prefetch(&j)
			}
			select {
			case next <- j:
			case <-gctx.Done():
				if j.f != nil {
					j.f.Close()
				}
				for range produced { // let the producer end
				}
				return gctx.Err()
			}
		}
		return nil
	})
	for range p.s.r.opts.Readers {
		g.Go(func() error {
			var ch *chunker.Chunker // made on the first file: a no-change push reads none
			for j := range next {
				if ch == nil {
					var err error
					if ch, err = chunker.New(bytes.NewReader(nil), p.s.seed, p.params); err != nil {
						if j.f != nil {
							j.f.Close()
						}
						return err
					}
				}
				if err := p.readFile(gctx, ch, j, enc); err != nil {
					return err
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(produced)
		return produce(func(j readJob) error {
			select {
			case produced <- j:
				return nil
			case <-gctx.Done():
				return gctx.Err()
			}
		})
	})
	return g.Wait()
}

// readFile chunks one file's data regions.
func (p *pusher) readFile(ctx context.Context, ch *chunker.Chunker, j readJob, enc chan<- encJob) error {
	f := j.f
	if f == nil {
		fd, err := openBeneath(p.rootfd, j.rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC)
		if err != nil {
			return fmt.Errorf("open /%s: %w", j.rel, err)
		}
		f = os.NewFile(uintptr(fd), j.rel)
	}
	fd := int(f.Fd())
	defer f.Close()
	var sb unix.Stat_t
	if err := unix.Fstat(fd, &sb); err != nil {
		return err
	}
	if sb.Ino != j.node.Inode || sb.Size != j.node.Size {
		return fmt.Errorf("/%s changed during the push (push a read-only snapshot): %w", j.rel, errs.ErrConflict)
	}
	if sb.Size >= seqReadahead {
		_ = unix.Fadvise(fd, 0, 0, unix.FADV_SEQUENTIAL)
	}
	exts, sparse, err := dataExtents(fd, sb.Size)
	if err != nil {
		return fmt.Errorf("map /%s: %w", j.rel, err)
	}
	if !sparse && j.base != nil {
		if ok, err := p.readChanged(ctx, ch, j, f, sb.Size, enc); ok || err != nil {
			return err
		}
	}
	// Read with pread up to the size stat gave: no read(2) to find the
	// end of each of thousands of small files. (A file that shrinks is
	// still caught below; one that grows is read as far as its node says.)
	var r io.Reader = io.NewSectionReader(f, 0, sb.Size)
	var want = sb.Size
	if sparse {
		j.node.Sparse, j.node.Extents = true, exts
		rs := make([]io.Reader, len(exts))
		want = 0
		for i, e := range exts {
			rs[i] = io.NewSectionReader(f, e.Off, e.Len)
			want += e.Len
		}
		r = io.MultiReader(rs...)
		// Holes are not read: they count as done at once, so the
		// progress of a push with sparse files ends at its total.
		p.c.bytesDone.Add(sb.Size - want)
	}
	cr := &countReader{r: r, c: &p.c.bytesDone}
	ch.Reset(cr)
	var content []seal.ID
	for {
		bp := p.bufs.Get().(*[]byte)
		chunk, err := ch.Next((*bp)[:0])
		if err == io.EOF {
			p.bufs.Put(bp)
			break
		}
		if err != nil {
			p.bufs.Put(bp)
			return fmt.Errorf("read /%s: %w", j.rel, err)
		}
		id, err := p.emit(ctx, chunk, bp, enc)
		if err != nil {
			return err
		}
		content = append(content, id)
	}
	if cr.n != want {
		return fmt.Errorf("/%s changed during the push (read %d of %d bytes): %w", j.rel, cr.n, want, errs.ErrConflict)
	}
	j.node.Content = content
	atomic.AddInt64(&p.stats.FilesRead, 1)
	atomic.AddInt64(&p.stats.BytesRead, cr.n)
	p.dataRead.Add(cr.n)
	p.c.filesDone.Add(1)
	return nil
}

// prefetchFiles is how many files a full read opens ahead of its readers,
// asking the kernel for the first prefetchBytes of each
// (FADV_WILLNEED): on a cold cache the readers otherwise wait for one small
// file's read at a time each, and the disk idles between them.
const (
	prefetchFiles = 64
	prefetchBytes = 1 << 20
)

// prefetch opens j's file ahead and asks the kernel to start reading it.
// Only whole-file reads are prefetched (an incremental read takes a few
// ranges); a failure is left to the reader, which opens the file again and
// reports it.
func (p *pusher) prefetch(j *readJob) {
	if j.base != nil {
		return
	}
	// O_NONBLOCK: a FIFO put where the walk saw a file does not hang the
	// push (the reader's identity check then fails it).
	fd, err := openBeneath(p.rootfd, j.rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		return
	}
	_ = unix.Fadvise(fd, 0, min(j.node.Size, prefetchBytes), unix.FADV_WILLNEED)
	j.f = os.NewFile(uintptr(fd), j.rel)
}

// seqReadahead is the smallest file a push asks the kernel to read ahead
// of aggressively (FADV_SEQUENTIAL): smaller ones fit in the default
// readahead window and would only cost a system call each.
const seqReadahead = 1 << 20

// emit hands a chunk read into *bp to the encoders if it is new (else
// returns bp to the pool) and returns its id.
func (p *pusher) emit(ctx context.Context, chunk []byte, bp *[]byte, enc chan<- encJob) (seal.ID, error) {
	id := p.s.codec.Sealer().ID(chunk)
	if !p.claim(id) {
		atomic.AddInt64(&p.stats.ChunksKnown, 1)
		p.bufs.Put(bp)
		return id, nil
	}
	atomic.AddInt64(&p.stats.ChunksNew, 1)
	*bp = chunk
	select {
	case enc <- encJob{t: pack.DataBlob, id: id, data: chunk, buf: bp}:
		return id, nil
	case <-ctx.Done():
		return id, ctx.Err()
	}
}

// claim reports whether id is new to the repository and this push, and
// marks it pending if so.
func (p *pusher) claim(id seal.ID) bool {
	if p.dryRun {
		return false
	}
	if p.s.usable(id) {
		return false // indexed in a pack not marked damaged
	}
	if p.want != nil && !p.want(id) {
		return false
	}
	p.pendMu.Lock()
	defer p.pendMu.Unlock()
	if p.pending[id] {
		return false
	}
	p.pending[id] = true
	if _, ok := p.s.lookup(id); ok {
		atomic.AddInt64(&p.stats.BlobsReplaced, 1)
	}
	return true
}

type countReader struct {
	r io.Reader
	n int64
	c *atomic.Int64
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	c.c.Add(int64(n))
	return n, err
}

// dataExtents maps the data regions of fd (fsutil.DataRegions);
// sparse is false when the file has no hole.
func dataExtents(fd int, size int64) (exts []Extent, sparse bool, err error) {
	regions, sparse, err := fsutil.DataRegions(fd, size)
	if err != nil || !sparse {
		return nil, false, err
	}
	exts = make([]Extent, len(regions))
	for i, r := range regions {
		exts[i] = Extent{Off: r.Off, Len: r.Len}
	}
	return exts, true, nil
}

// trees encodes the directory trees bottom-up and queues new tree blobs;
// it returns the root tree's id.
func (p *pusher) trees(ctx context.Context, d *wdir, enc chan<- encJob) (seal.ID, error) {
	for i, sub := range d.subs {
		id, err := p.trees(ctx, sub, enc)
		if err != nil {
			return seal.ID{}, err
		}
		d.tree.Nodes[d.subIdx[i]].Subtree = &id
	}
	data, err := encodeTree(&d.tree)
	if err != nil {
		return seal.ID{}, fmt.Errorf("encode tree /%s: %w", d.rel, err)
	}
	id := p.s.codec.Sealer().ID(data)
	if id != d.parentID { // an unchanged directory's tree is cached already
		p.s.cacheTree(p.s.treeCachePath(id), data)
	}
	if p.claim(id) {
		atomic.AddInt64(&p.stats.TreesNew, 1)
		select {
		case enc <- encJob{t: pack.TreeBlob, id: id, data: data}:
		case <-ctx.Done():
			return seal.ID{}, ctx.Err()
		}
	}
	return id, nil
}

// encode compresses and seals blobs.
func (p *pusher) encode(ctx context.Context, in <-chan encJob, out chan<- packed) error {
	for j := range in {
		// Pooled buffers on both sides: fresh memory costs a page fault
		// per 4 KiB, which on a paravirtualised VM is most of a push's CPU.
		sb := p.storedBufs.Get().(*[]byte)
		stored, compressed := p.s.codec.Encode((*sb)[:0], j.t, j.id, j.data)
		raw := len(j.data)
		if j.buf != nil {
			p.bufs.Put(j.buf)
		}
		select {
		case out <- packed{t: j.t, id: j.id, stored: stored, raw: raw, compressed: compressed, buf: sb}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// packUpload is a finished pack: its bytes in data, or written to spool
// (a store that spools: the bytes are not in memory).
type packUpload struct {
	data  []byte
	spool blobstore.Spool
	size  int64
	id    seal.ID
	blobs []pack.Blob
}

// spoolBuffer is the write buffer in front of a spooled pack: small blobs
// (trees, small files) are written in batches, big ones straight through.
const spoolBuffer = 256 << 10

// pack collects encoded blobs into packs of about PackSize. When the store
// spools (blobstore.Spooler: the local store), each pack is written to the
// store's temp file as its blobs arrive, so no pack is held in memory and
// the writes overlap with reading; an uploader then commits it (fsync,
// rename). Otherwise packs are assembled in memory and Put.
func (p *pusher) pack(ctx context.Context, in <-chan packed, up chan<- packUpload) error {
	defer close(up)
	spooler, spooling := p.s.r.store.(blobstore.Spooler)
	var sw *pack.StreamWriter
	var cur blobstore.Spool
	var bw *bufio.Writer
	finishSpool := func() error {
		if sw == nil {
			return nil
		}
		id, size, blobs, err := sw.Finish()
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			return fmt.Errorf("finish pack: %w", err)
		}
		u := packUpload{spool: cur, size: size, id: id, blobs: blobs}
		sw, cur = nil, nil
		select {
		case up <- u:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w := pack.NewWriter(p.s.codec)
	first := true
	flush := func() error {
		if w.Count() == 0 {
			return nil
		}
		select { // reuse the memory of a pack already uploaded
		case b := <-p.recycle:
			w.Recycle(b)
		default:
		}
		data, id, blobs, err := w.Finish()
		if err != nil {
			return fmt.Errorf("finish pack: %w", err)
		}
		select {
		case up <- packUpload{data: data, size: int64(len(data)), id: id, blobs: blobs}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for b := range in {
		if spooling && sw == nil {
			sp, err := spooler.Spool(ctx, strings.TrimSuffix(scopePrefix(p.s.name), "/")+"/data")
			switch {
			case errors.Is(err, errs.ErrUnsupported):
				spooling = false
			case err != nil:
				return fmt.Errorf("start pack: %w", err)
			default:
				p.spoolMu.Lock()
				p.spools = append(p.spools, sp)
				p.spoolMu.Unlock()
				if bw == nil {
					bw = bufio.NewWriterSize(sp, spoolBuffer)
				} else {
					bw.Reset(sp)
				}
				cur, sw = sp, pack.NewStreamWriter(p.s.codec, bw)
			}
		}
		if spooling {
			err := sw.Add(b.t, b.id, b.stored, b.raw, b.compressed)
			*b.buf = b.stored[:0]
			p.storedBufs.Put(b.buf)
			if err != nil {
				return fmt.Errorf("write pack: %w", err)
			}
			if sw.Len() >= p.s.r.opts.PackSize {
				if err := finishSpool(); err != nil {
					return err
				}
			}
			continue
		}
		if first {
			// A buffer big enough for a whole pack (no growing copies),
			// made only when there is something to pack.
			w.Recycle(make([]byte, 0, p.s.r.opts.PackSize+p.s.r.opts.PackSize/4+p.params.Max))
			first = false
		}
		w.Add(b.t, b.id, b.stored, b.raw, b.compressed)
		*b.buf = b.stored[:0]
		p.storedBufs.Put(b.buf)
		if w.Len() >= p.s.r.opts.PackSize {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := finishSpool(); err != nil {
		return err
	}
	return flush()
}

// upload writes finished packs.
func (p *pusher) upload(ctx context.Context, in <-chan packUpload) error {
	for u := range in {
		var err error
		if u.spool != nil {
			err = u.spool.Commit(ctx, packKey(p.s.name, u.id))
		} else {
			err = p.s.r.store.Put(ctx, packKey(p.s.name, u.id), u.data)
		}
		if err != nil {
			return fmt.Errorf("write pack %s: %w", u.id, err)
		}
		p.c.moved.Add(u.size)
		if u.data != nil {
			select {
			case p.recycle <- u.data:
			default:
			}
		}
		p.packMu.Lock()
		p.newPacks = append(p.newPacks, pack.IndexPack{ID: u.id, Size: u.size, Blobs: u.blobs})
		p.stats.PacksWritten++
		p.packMu.Unlock()
	}
	return nil
}

// openBeneath opens rel below dirfd without following any symlink and
// without leaving dirfd.
func openBeneath(dirfd int, rel string, flags int) (int, error) {
	return unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: uint64(flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
}
