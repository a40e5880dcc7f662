package repo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/repo/chunker"
	"github.com/stead-dev/stead/internal/repo/seal"
	"github.com/stead-dev/stead/internal/treediff"
	"github.com/stead-dev/stead/internal/xattr"
)

// An incremental push in O(changes). When the caller knows what changed
// between the snapshot the parent manifest was pushed from (the base) and
// the tree it pushes (PushOptions.Diff), the push does not walk the tree:
//
//   - A directory whose inode did not change has the same entries as in
//     the base; only the entries on the way to a changed inode are looked
//     at, the others are the parent's nodes as they are. A directory with
//     no changed inode below it is the parent's tree, wholesale.
//   - A changed directory is listed and its entries stat'ed, as in a full
//     walk. A changed directory that moved finds its parent tree at the
//     path the base had it (so its unchanged content is still reused).
//   - A changed file is read only where its extents differ from the base's
//     (dense files): chunking restarts at the last chunk boundary before a
//     change and stops as soon as it cuts at a boundary the parent's
//     chunking also had, after which the parent's chunks are the file's.
//     Chunk boundaries depend only on the bytes of their own chunk, so
//     this yields the chunks a full read would.
//   - The manifest's statistics are the parent's plus what changed.
//
// The result is the manifest a full walk would produce for the same tree
// (TestIncrementalPushEqualsFullWalk checks it on a churned tree). Any
// surprise (a tree of the parent that cannot be read, a Diff that
// contradicts the tree) makes the push fall back to the full walk.

// errDiffMismatch means the tree and the Diff disagree: walk instead.
var errDiffMismatch = errors.New("the tree does not match the snapshot comparison")

// diffWalk is the state of an incremental walk.
type diffWalk struct {
	p    *pusher
	diff treediff.Diff
	// on holds the paths of changed inodes and all their ancestors.
	on       map[string]bool
	parent   *Manifest
	jobs     []readJob
	statMemo map[seal.ID]Stats
}

// walkDiff builds the root's wdir and the read jobs from the parent and the
// Diff. st receives the new tree's statistics without the data bytes of
// the files still to be read (run adds them).
func (p *pusher) walkDiff(ctx context.Context, parent *Manifest, rootNode *Node) (*wdir, []readJob, Stats, error) {
	w := &diffWalk{p: p, diff: p.opts.Diff, on: map[string]bool{}, parent: parent, statMemo: map[seal.ID]Stats{}}
	paths, err := w.diff.ChangedPaths(ctx)
	if err != nil {
		return nil, nil, Stats{}, err
	}
	for _, rel := range paths {
		for {
			w.on[rel] = true
			i := strings.LastIndexByte(rel, '/')
			if rel == "" {
				break
			}
			if i < 0 {
				rel = ""
			} else {
				rel = rel[:i]
			}
			if w.on[rel] {
				break
			}
		}
	}
	st := parent.Stats
	st.AddedBytes = 0
	root := &wdir{parentID: parent.Tree}
	if root.parent, err = p.parentTree(ctx, parent.Tree, ""); err != nil {
		return nil, nil, Stats{}, err
	}
	if root.parent == nil {
		return nil, nil, Stats{}, fmt.Errorf("parent root tree: %w", errDiffMismatch)
	}
	if !w.on[""] {
		// Nothing changed: the parent's root tree is the tree.
		root.tree = *root.parent
		rootNode.Subtree = &parent.Tree
		return root, nil, st, nil
	}
	delta, err := w.dir(ctx, p.rootfd, root, rootInode(p.rootfd))
	if err != nil {
		return nil, nil, Stats{}, err
	}
	st.add(delta, 1)
	return root, w.jobs, st, nil
}

// rootInode is the inode number of the directory fd.
func rootInode(fd int) uint64 {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return 0
	}
	return st.Ino
}

// add adds sign times o's counts to s (not AddedBytes).
func (s *Stats) add(o Stats, sign int64) {
	s.Files += sign * o.Files
	s.Dirs += sign * o.Dirs
	s.Other += sign * o.Other
	s.Bytes += sign * o.Bytes
	s.DataBytes += sign * o.DataBytes
}

// contrib is what one node of a tree adds to the statistics (with its
// subtree, for a directory).
func (w *diffWalk) contrib(ctx context.Context, n *Node) (Stats, error) {
	switch n.Type {
	case TypeFile:
		return Stats{Files: 1, Bytes: n.Size, DataBytes: n.dataLen()}, nil
	case TypeDir:
		s, err := w.treeStats(ctx, *n.Subtree)
		s.Dirs++
		return s, err
	}
	return Stats{Other: 1}, nil
}

// treeStats counts what a tree of the parent holds (the directory itself
// excluded).
func (w *diffWalk) treeStats(ctx context.Context, id seal.ID) (Stats, error) {
	if s, ok := w.statMemo[id]; ok {
		return s, nil
	}
	t, err := w.p.s.loadTree(ctx, id)
	if err != nil {
		return Stats{}, err
	}
	var s Stats
	for i := range t.Nodes {
		c, err := w.contrib(ctx, &t.Nodes[i])
		if err != nil {
			return Stats{}, err
		}
		s.add(c, 1)
	}
	w.statMemo[id] = s
	return s, nil
}

// baseTree returns the parent's tree of the directory the base had at rel
// (nil if the base had none there).
func (w *diffWalk) baseTree(ctx context.Context, rel string) (*Tree, seal.ID, error) {
	id := w.parent.Tree
	for _, c := range splitPath(rel) {
		t, err := w.p.parentTree(ctx, id, rel)
		if err != nil || t == nil {
			return nil, seal.ID{}, err
		}
		i, ok := slices.BinarySearchFunc(t.Nodes, []byte(c), func(e Node, k []byte) int { return bytes.Compare(e.Name, k) })
		if !ok || t.Nodes[i].Type != TypeDir {
			return nil, seal.ID{}, nil
		}
		id = *t.Nodes[i].Subtree
	}
	t, err := w.p.parentTree(ctx, id, rel)
	if t == nil {
		return nil, seal.ID{}, err
	}
	return t, id, err
}

// dir fills d.tree for the directory dirfd (inode ino), whose parent tree
// (d.parent) is the base's tree of the same directory inode or nil, and
// returns how its statistics differ from d.parent's.
func (w *diffWalk) dir(ctx context.Context, dirfd int, d *wdir, ino uint64) (Stats, error) {
	if err := ctx.Err(); err != nil {
		return Stats{}, err
	}
	var delta Stats
	var pt []Node
	if d.parent != nil {
		pt = d.parent.Nodes
	}
	prevOf := func(name []byte) *Node {
		if i, ok := slices.BinarySearchFunc(pt, name, func(e Node, k []byte) int { return bytes.Compare(e.Name, k) }); ok {
			return &pt[i]
		}
		return nil
	}
	if d.parent != nil && !w.diff.Changed(ino) {
		// Same entries as in the base: look only at those on the way to a
		// change.
		d.tree.Nodes = make([]Node, 0, len(pt))
		for i := range pt {
			prev := &pt[i]
			rel := joinRel(d.rel, string(prev.Name))
			if !w.on[rel] {
				d.tree.Nodes = append(d.tree.Nodes, *prev)
				continue
			}
			c, err := w.entry(ctx, dirfd, d, string(prev.Name), prev)
			if err != nil {
				return Stats{}, err
			}
			delta.add(c, 1)
		}
		return delta, nil
	}
	names, err := fsutil.ReadDirNames(dirfd)
	if err != nil {
		return Stats{}, fmt.Errorf("read directory /%s: %w", d.rel, err)
	}
	slices.Sort(names)
	d.tree.Nodes = make([]Node, 0, len(names))
	for _, name := range names {
		c, err := w.entry(ctx, dirfd, d, name, prevOf([]byte(name)))
		if err != nil {
			return Stats{}, err
		}
		delta.add(c, 1)
	}
	// What the base had and the directory no longer has.
	for i := range pt {
		if _, ok := slices.BinarySearch(names, string(pt[i].Name)); !ok {
			c, err := w.contrib(ctx, &pt[i])
			if err != nil {
				return Stats{}, err
			}
			delta.add(c, -1)
		}
	}
	return delta, nil
}

// entry appends the node of name (in dirfd) to d.tree, recursing into a
// directory that has changes below it, and returns its contribution to the
// statistics minus prev's (the entry of that name in the base, or nil).
func (w *diffWalk) entry(ctx context.Context, dirfd int, d *wdir, name string, prev *Node) (Stats, error) {
	p := w.p
	rel := joinRel(d.rel, name)
	var sb unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &sb, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return Stats{}, fmt.Errorf("/%s: %w", rel, errDiffMismatch)
		}
		return Stats{}, fmt.Errorf("stat /%s: %w", rel, err)
	}
	n, err := p.nodeFromStat(dirfd, rel, name, &sb)
	if err != nil {
		return Stats{}, err
	}
	x, err := xattr.AllAt(dirfd, name)
	if err != nil {
		return Stats{}, fmt.Errorf("xattrs of /%s: %w", rel, err)
	}
	n.Xattrs = sortedXattrs(x)
	var old Stats
	if prev != nil && !(prev.Type == TypeDir && n.Type == TypeDir) {
		if old, err = w.contrib(ctx, prev); err != nil {
			return Stats{}, err
		}
	}
	d.tree.Nodes = append(d.tree.Nodes, *n)
	cur := &d.tree.Nodes[len(d.tree.Nodes)-1] // Nodes has its final capacity
	var c Stats
	switch n.Type {
	case TypeFile:
		c = Stats{Files: 1, Bytes: n.Size}
		if prev != nil && prev.Type == TypeFile && !w.diff.Changed(sb.Ino) && prev.Inode == n.Inode && prev.Size == n.Size &&
			prev.MtimeNs == n.MtimeNs && prev.CtimeNs == n.CtimeNs && p.s.allUsable(prev.Content) {
			cur.Sparse, cur.Extents, cur.Content = prev.Sparse, prev.Extents, prev.Content
			c.DataBytes = cur.dataLen()
			break
		}
		if prev != nil && prev.Type == TypeFile && prev.Size == n.Size && n.Size > 0 && p.s.allUsable(prev.Content) {
			// Metadata changed (mode, owner, xattrs, a link) but no
			// extent: the same bytes, not read again.
			if r, err := w.diff.ChangedRanges(ctx, prev.Inode, n.Inode); err == nil && len(r) == 0 {
				cur.Sparse, cur.Extents, cur.Content = prev.Sparse, prev.Extents, prev.Content
				c.DataBytes = cur.dataLen()
				break
			}
		}
		if n.Size > 0 {
			var base *Node
			if prev != nil && prev.Type == TypeFile {
				base = prev
			}
			w.jobs = append(w.jobs, readJob{rel: rel, node: cur, base: base})
			p.c.bytesTotal.Add(n.Size)
		}
	case TypeDir:
		c.Dirs = 1
		var sub = &wdir{rel: rel}
		switch {
		case w.diff.Changed(sb.Ino):
			// Moved, new, or its entries changed: its base is where the
			// base had the same directory inode.
			bp, ok, err := w.diff.BasePath(ctx, sb.Ino)
			if err != nil {
				return Stats{}, err
			}
			if ok {
				if sub.parent, sub.parentID, err = w.baseTree(ctx, bp); err != nil {
					return Stats{}, err
				}
			}
		case prev != nil && prev.Type == TypeDir:
			if !w.on[rel] && p.s.usable(*prev.Subtree) {
				// Nothing changed below: the parent's tree, wholesale.
				cur.Subtree = prev.Subtree
				return Stats{}, nil
			}
			if sub.parent, err = p.parentTree(ctx, *prev.Subtree, rel); err != nil {
				return Stats{}, err
			}
			sub.parentID = *prev.Subtree
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return Stats{}, fmt.Errorf("open directory /%s: %w", rel, err)
		}
		subDelta, err := w.dir(ctx, fd, sub, sb.Ino)
		unix.Close(fd)
		if err != nil {
			return Stats{}, err
		}
		d.subs = append(d.subs, sub)
		d.subIdx = append(d.subIdx, len(d.tree.Nodes)-1)
		if prev != nil && prev.Type == TypeDir && sub.parent != nil && sub.parentID == *prev.Subtree {
			return subDelta, nil // the same base on both sides
		}
		c.add(subDelta, 1)
		if sub.parent != nil {
			base, err := w.treeStats(ctx, sub.parentID)
			if err != nil {
				return Stats{}, err
			}
			c.add(base, 1)
		}
		if prev != nil && prev.Type == TypeDir {
			if old, err = w.contrib(ctx, prev); err != nil {
				return Stats{}, err
			}
		}
	default:
		c.Other = 1
	}
	c.add(old, -1)
	return c, nil
}

// readChanged chunks only the changed parts of a dense file whose base
// (the same path in the parent) was dense too, reusing the base's chunks
// elsewhere. ok is false when it cannot (the caller reads the file whole).
func (p *pusher) readChanged(ctx context.Context, ch *chunker.Chunker, j readJob, f *os.File, size int64, enc chan<- encJob) (ok bool, err error) {
	node, b := j.node, j.base
	if b == nil || b.Sparse || len(b.Content) == 0 || p.opts.Diff == nil || p.dryRun || p.want != nil {
		return false, nil
	}
	// The base's chunk boundaries, from the index.
	ends := make([]int64, len(b.Content))
	var off int64
	for i, id := range b.Content {
		l, found := p.s.lookup(id)
		if !found || !p.s.usable(id) {
			return false, nil
		}
		off += int64(l.blob.RawLength)
		ends[i] = off
	}
	if off != b.Size {
		return false, nil
	}
	ranges, err := p.opts.Diff.ChangedRanges(ctx, b.Inode, node.Inode)
	if err != nil {
		p.s.r.log.Warn("changed ranges: reading the file whole", "file", "/"+j.rel, "err", err)
		return false, nil
	}
	oldSize, newSize := b.Size, size
	m := min(oldSize, newSize)
	start := func(i int) int64 {
		if i == 0 {
			return 0
		}
		return ends[i-1]
	}
	// reusable reports whether base chunk i is also a chunk of the file
	// when chunking starts at its start: its bytes are unchanged, and
	// its end was cut by its own bytes (not by the end of the base).
	reusable := func(i int) bool {
		s, e := start(i), ends[i]
		if e > m || (e == m && oldSize != newSize) {
			return false
		}
		for _, r := range ranges {
			if r.Off < e && r.Off+r.Len > s {
				return false
			}
		}
		return true
	}
	content := make([]seal.ID, 0, len(b.Content))
	var read int64
	pos := int64(0)
	for i := 0; i < len(b.Content); {
		if reusable(i) {
			content = append(content, b.Content[i])
			pos = ends[i]
			i++
			continue
		}
		// Chunk from pos (a boundary both chunkings share) until a cut
		// falls on a boundary of the base again.
		cr := &countReader{r: io.NewSectionReader(f, pos, newSize-pos), c: &p.c.bytesDone}
		ch.ResetShort(cr)
		resynced := false
		for !resynced {
			bp := p.bufs.Get().(*[]byte)
			chunk, err := ch.Next((*bp)[:0])
			if err == io.EOF {
				p.bufs.Put(bp)
				i = len(b.Content)
				break
			}
			if err != nil {
				p.bufs.Put(bp)
				return false, fmt.Errorf("read /%s: %w", j.rel, err)
			}
			pos += int64(len(chunk))
			id, err := p.emit(ctx, chunk, bp, enc)
			if err != nil {
				return false, err
			}
			content = append(content, id)
			if k, found := slices.BinarySearch(ends, pos); found && k+1 < len(b.Content) && reusable(k+1) {
				i, resynced = k+1, true
			}
		}
		read += cr.n
	}
	if pos < newSize {
		// The base ended before the file does and its last chunk was
		// reused (equal sizes): nothing is left. Otherwise read the rest.
		cr := &countReader{r: io.NewSectionReader(f, pos, newSize-pos), c: &p.c.bytesDone}
		ch.Reset(cr)
		for {
			bp := p.bufs.Get().(*[]byte)
			chunk, err := ch.Next((*bp)[:0])
			if err == io.EOF {
				p.bufs.Put(bp)
				break
			}
			if err != nil {
				p.bufs.Put(bp)
				return false, fmt.Errorf("read /%s: %w", j.rel, err)
			}
			pos += int64(len(chunk))
			id, err := p.emit(ctx, chunk, bp, enc)
			if err != nil {
				return false, err
			}
			content = append(content, id)
		}
		read += cr.n
	}
	if pos != newSize {
		return false, fmt.Errorf("/%s changed during the push: %w", j.rel, errDiffMismatch)
	}
	p.s.r.log.Debug("read changed ranges", "file", "/"+j.rel, "ranges", ranges, "read", read, "size", newSize)
	// Bytes not read count as done.
	p.c.bytesDone.Add(newSize - read)
	node.Content = content
	atomic.AddInt64(&p.stats.FilesRead, 1)
	atomic.AddInt64(&p.stats.BytesRead, read)
	p.dataRead.Add(newSize)
	p.c.filesDone.Add(1)
	return true, nil
}

// hasDamage reports whether any pack of the scope is marked damaged (then
// a parent's tree is not reused wholesale: what it references may be
// what is damaged).
func (s *Scope) hasDamage() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.damaged) > 0
}
