package repo

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/repo/pack"
	"github.com/stead-dev/stead/internal/repo/seal"
	"github.com/stead-dev/stead/internal/xattr"
)

// VerifyResult says how a directory compares with a manifest.
type VerifyResult struct {
	Entries   int64         `json:"entries"`
	BytesRead int64         `json:"bytes_read"`
	Diffs     []string      `json:"diffs,omitempty"`
	Duration  time.Duration `json:"duration_ns"`
}

// OK reports whether the directory matched the manifest exactly.
func (v *VerifyResult) OK() bool { return len(v.Diffs) == 0 }

// maxDiffs bounds the differences a verification lists.
const maxDiffs = 50

// Verify compares the tree at dir with manifest id: every entry's name,
// type, mode, owner, size, mtime, symlink target, device number, xattrs,
// sparse layout and hardlink grouping, and every file's content, read from
// disk, chunked and hashed with the scope's key exactly as a push would.
// Inode numbers and change times are not compared (a restore cannot keep
// them). Nothing is uploaded.
func (s *Scope) Verify(ctx context.Context, id seal.ID, dir string) (*VerifyResult, error) {
	start := time.Now()
	if err := s.loadIndex(ctx); err != nil {
		return nil, err
	}
	m, err := s.Manifest(ctx, id)
	if err != nil {
		return nil, err
	}
	rootfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", dir, err)
	}
	defer unix.Close(rootfd)
	p := &pusher{s: s, rootfd: rootfd, pending: map[seal.ID]bool{}, params: s.r.cfg.Chunker, dryRun: true}
	p.bufs.New = func() any { b := make([]byte, 0, p.params.Max); return &b }
	var st unix.Stat_t
	if err := unix.Fstat(rootfd, &st); err != nil {
		return nil, err
	}
	rootNode, err := p.nodeFromStat(rootfd, "", "", &st)
	if err != nil {
		return nil, err
	}
	if x, err := xattr.AllFd(rootfd); err == nil {
		rootNode.Xattrs = sortedXattrs(x)
	}
	root := &wdir{}
	var jobs []readJob
	var stats Stats
	if err := p.walk(ctx, rootfd, root, func(j readJob) error { jobs = append(jobs, j); return nil }, &stats); err != nil {
		return nil, err
	}
	if err := p.readAll(ctx, jobs, nil); err != nil {
		return nil, err
	}
	res := &VerifyResult{BytesRead: p.c.bytesDone.Load()}
	want := m.Root
	want.Name, rootNode.Name = nil, nil
	v := &verifier{s: s, res: res, groupsA: map[uint64]int{}, groupsB: map[uint64]int{}}
	v.node(ctx, "/", &want, rootNode)
	if err := v.dir(ctx, "", m.Tree, root, 0); err != nil {
		return nil, err
	}
	res.Duration = time.Since(start)
	return res, nil
}

type verifier struct {
	s                *Scope
	res              *VerifyResult
	groupsA, groupsB map[uint64]int // inode → hardlink group number, per side
}

func (v *verifier) diff(format string, a ...any) {
	if len(v.res.Diffs) < maxDiffs {
		v.res.Diffs = append(v.res.Diffs, fmt.Sprintf(format, a...))
	}
}

// dir compares the manifest tree id with the walked directory d.
func (v *verifier) dir(ctx context.Context, rel string, id seal.ID, d *wdir, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("verify: nested deeper than %d: %w", maxDepth, pack.ErrCorrupt)
	}
	t, err := v.s.loadTree(ctx, id)
	if err != nil {
		return err
	}
	got := d.tree.Nodes
	subs := map[int]*wdir{}
	for i, k := range d.subIdx {
		subs[k] = d.subs[i]
	}
	i, j := 0, 0
	for i < len(t.Nodes) || j < len(got) {
		switch {
		case j >= len(got) || (i < len(t.Nodes) && string(t.Nodes[i].Name) < string(got[j].Name)):
			v.diff("/%s: missing", joinRel(rel, string(t.Nodes[i].Name)))
			i++
		case i >= len(t.Nodes) || string(t.Nodes[i].Name) > string(got[j].Name):
			v.diff("/%s: not in the snapshot", joinRel(rel, string(got[j].Name)))
			j++
		default:
			crel := joinRel(rel, string(got[j].Name))
			v.res.Entries++
			if v.node(ctx, "/"+crel, &t.Nodes[i], &got[j]) && t.Nodes[i].Type == TypeDir {
				if err := v.dir(ctx, crel, *t.Nodes[i].Subtree, subs[j], depth+1); err != nil {
					return err
				}
			}
			i++
			j++
		}
	}
	return nil
}

// node compares one entry; it reports whether the types match.
func (v *verifier) node(ctx context.Context, path string, want, got *Node) bool {
	if want.Type != got.Type {
		v.diff("%s: type %s, want %s", path, got.Type, want.Type)
		return false
	}
	norm := func(n *Node, groups map[uint64]int) []byte {
		c := *n
		c.CtimeNs, c.Subtree = 0, nil
		if c.Type == TypeFile && c.Links > 1 {
			g, ok := groups[c.Inode]
			if !ok {
				g = len(groups) + 1
				groups[c.Inode] = g
			}
			c.Inode = uint64(g)
		} else {
			c.Inode = 0
		}
		if c.Type == TypeDir {
			c.Links = 0
		}
		b, _ := json.Marshal(c)
		return b
	}
	a, b := norm(want, v.groupsA), norm(got, v.groupsB)
	if string(a) != string(b) {
		v.diff("%s: differs: on disk %s, snapshot %s", path, b, a)
	}
	return true
}
