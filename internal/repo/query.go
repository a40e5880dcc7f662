package repo

import (
	"context"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/repo/chunker"
	"github.com/stead-dev/stead/internal/repo/pack"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// Node returns the entry at a slash-separated path of manifest id ("" or
// "/": the root). errs.ErrNotFound if the path is not in the snapshot.
func (s *Scope) Node(ctx context.Context, id seal.ID, path string) (*Node, error) {
	if err := s.ensureIndex(ctx); err != nil {
		return nil, err
	}
	m, err := s.Manifest(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(splitPath(path)) == 0 {
		root := m.Root
		root.Subtree = &m.Tree
		return &root, nil
	}
	return s.findNode(ctx, m.Tree, path)
}

// ContentDigest names a file's content the way the repository sees it: a
// hash of its chunk ids under the scope's key. Equal digests mean equal
// content (holes aside).
func ContentDigest(ids []seal.ID) string {
	b := make([]byte, 0, 32*len(ids))
	for _, id := range ids {
		b = append(b, id[:]...)
	}
	return "chunks:" + seal.Hash(b).String()[:32]
}

// FileDigest computes ContentDigest for an open local file (its data
// regions, chunked with the scope's chunker and key), so a file on disk can
// be compared with a version in a pushed snapshot.
func (s *Scope) FileDigest(f *os.File) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", err
	}
	exts, sparse, err := dataExtents(int(f.Fd()), st.Size)
	if err != nil {
		return "", err
	}
	var r io.Reader = f
	if sparse {
		rs := make([]io.Reader, len(exts))
		for i, e := range exts {
			rs[i] = io.NewSectionReader(f, e.Off, e.Len)
		}
		r = io.MultiReader(rs...)
	}
	ch, err := chunker.New(r, s.seed, s.r.cfg.Chunker)
	if err != nil {
		return "", err
	}
	var ids []seal.ID
	var buf []byte
	for {
		c, err := ch.Next(buf[:0])
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
		buf = c
		ids = append(ids, s.codec.Sealer().ID(c))
	}
	return ContentDigest(ids), nil
}

// ReadAll downloads and authenticates every blob manifest id references
// (trees and file content), without writing anything: proof that the
// repository can restore it. It returns the bytes of content verified.
func (s *Scope) ReadAll(ctx context.Context, id seal.ID, progress func(Progress)) (int64, error) {
	s.lock.RLock()
	defer s.lock.RUnlock()
	if err := s.loadIndex(ctx); err != nil {
		return 0, err
	}
	m, err := s.Manifest(ctx, id)
	if err != nil {
		return 0, err
	}
	var total int64
	seen := map[seal.ID]bool{}
	var buf []byte
	var walk func(tid seal.ID, depth int) error
	walk = func(tid seal.ID, depth int) error {
		if seen[tid] {
			return nil
		}
		seen[tid] = true
		if depth > maxDepth {
			return fmt.Errorf("nested deeper than %d: %w", maxDepth, pack.ErrCorrupt)
		}
		t, err := s.loadTree(ctx, tid)
		if err != nil {
			return err
		}
		for i := range t.Nodes {
			n := &t.Nodes[i]
			for _, c := range n.Content {
				if seen[c] {
					continue
				}
				seen[c] = true
				if buf, err = s.loadBlob(ctx, pack.DataBlob, c, buf[:0]); err != nil {
					return fmt.Errorf("%q: %w", n.Name, err)
				}
				total += int64(len(buf))
				if progress != nil {
					progress(Progress{Op: "verify", BytesDone: total, BytesTotal: m.Stats.DataBytes})
				}
			}
			if n.Type == TypeDir {
				if err := walk(*n.Subtree, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(m.Tree, 0); err != nil {
		return total, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	return total, nil
}
