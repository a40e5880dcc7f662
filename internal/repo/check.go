package repo

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo/pack"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// CheckOptions tunes Check.
type CheckOptions struct {
	// ReadData downloads every pack and authenticates every blob in it.
	ReadData bool
	// ReadDataSubset reads only part of the packs: "n/m" (the n-th of m
	// groups, so m runs cover everything) or "p%" (a random p percent).
	ReadDataSubset string
	// Progress is called as packs are read (optional).
	Progress func(Progress)
}

// CheckResult lists what Check found. Errors mean data is missing or
// corrupt; Warnings are harmless leftovers (prune removes them).
type CheckResult struct {
	Scope     string   `json:"scope"`
	Snapshots int      `json:"snapshots"`
	Packs     int      `json:"packs"`
	Blobs     int      `json:"blobs"`
	PacksRead int      `json:"packs_read"`
	Errors    []string `json:"errors"`
	Warnings  []string `json:"warnings"`
}

// OK reports whether the check found no error.
func (c *CheckResult) OK() bool { return len(c.Errors) == 0 }

func (c *CheckResult) errorf(format string, a ...any) {
	c.Errors = append(c.Errors, fmt.Sprintf(format, a...))
}

// parseSubset selects which of the sorted packs a subset spec reads.
func parseSubset(spec string, n int) (func(i int) bool, error) {
	if spec == "" {
		return func(int) bool { return true }, nil
	}
	if p, ok := strings.CutSuffix(spec, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || f <= 0 || f > 100 {
			return nil, fmt.Errorf("read-data-subset %q: want p%% with 0 < p <= 100: %w", spec, errs.ErrInvalid)
		}
		want := max(1, int(float64(n)*f/100+0.5))
		pick := map[int]bool{}
		for _, i := range rand.Perm(n)[:min(want, n)] {
			pick[i] = true
		}
		return func(i int) bool { return pick[i] }, nil
	}
	a, b, ok := strings.Cut(spec, "/")
	k, err1 := strconv.Atoi(a)
	m, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || m < 1 || k < 1 || k > m {
		return nil, fmt.Errorf("read-data-subset %q: want n/m with 1 <= n <= m, or p%%: %w", spec, errs.ErrInvalid)
	}
	return func(i int) bool { return i%m == k-1 }, nil
}

// Check verifies the scope's structure: every index file decodes, every
// indexed pack exists with its size, every manifest decodes and every tree
// and chunk it references is indexed with consistent sizes. With ReadData
// it also downloads packs and authenticates every blob. The returned error
// is for failing to run at all; what the check finds is in the result.
func (s *Scope) Check(ctx context.Context, opts CheckOptions) (*CheckResult, error) {
	res := &CheckResult{Scope: s.name}
	subset := opts.ReadDataSubset
	if opts.ReadData && subset == "" {
		subset = "1/1"
	}
	s.lock.RLock()
	defer s.lock.RUnlock()
	if err := s.loadIndex(ctx); err != nil {
		res.errorf("%v", err)
		return res, nil
	}
	stored, err := s.r.store.List(ctx, scopePrefix(s.name)+"data/")
	if err != nil {
		return nil, fmt.Errorf("check %s: list packs: %w", s.name, err)
	}
	inStore := map[seal.ID]int64{}
	for _, in := range stored {
		id, err := seal.ParseID(path.Base(in.Key))
		if err != nil || packKey(s.name, id) != in.Key {
			res.Warnings = append(res.Warnings, fmt.Sprintf("unexpected object %s", in.Key))
			continue
		}
		inStore[id] = in.Size
	}
	s.mu.Lock()
	for _, b := range s.badIndexes {
		res.errorf("%s", b)
	}
	packs := make(map[seal.ID]int64, len(s.packs))
	for id, size := range s.packs {
		packs[id] = size
	}
	byPack := map[seal.ID][]pack.Blob{}
	for _, f := range s.liveIndexes() {
		for _, p := range f.Packs {
			byPack[p.ID] = append(byPack[p.ID], p.Blobs...)
		}
	}
	res.Blobs = len(s.blobs)
	s.mu.Unlock()
	res.Packs = len(packs)
	for id, size := range packs {
		got, ok := inStore[id]
		switch {
		case !ok:
			res.errorf("pack %s is indexed but missing", id)
		case got != size:
			res.errorf("pack %s: %d bytes stored, the index says %d", id, got, size)
		}
	}
	for id := range inStore {
		if _, ok := packs[id]; !ok {
			res.Warnings = append(res.Warnings, fmt.Sprintf("pack %s is not indexed (left by an interrupted push; prune removes it)", id))
		}
	}

	ids, err := s.manifestIDs(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[seal.ID]bool{}
	for _, id := range ids {
		m, err := s.Manifest(ctx, id)
		if err != nil {
			res.errorf("snapshot %s: %v", id, err)
			continue
		}
		res.Snapshots++
		if err := s.checkTree(ctx, m.Tree, seen, res, 0); err != nil {
			return nil, err
		}
	}

	if subset != "" {
		sorted := make([]seal.ID, 0, len(packs))
		for id := range packs {
			if _, ok := inStore[id]; ok {
				sorted = append(sorted, id)
			}
		}
		slices.SortFunc(sorted, func(a, b seal.ID) int { return strings.Compare(a.String(), b.String()) })
		pick, err := parseSubset(subset, len(sorted))
		if err != nil {
			return nil, err
		}
		var total int64
		for i, id := range sorted {
			if pick(i) {
				total += packs[id]
			}
		}
		var done int64
		for i, id := range sorted {
			if !pick(i) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			s.checkPack(ctx, id, byPack[id], res)
			res.PacksRead++
			done += packs[id]
			if opts.Progress != nil {
				opts.Progress(Progress{Op: "check", FilesDone: int64(res.PacksRead), BytesDone: done, BytesTotal: total})
			}
		}
	}
	return res, nil
}

// liveIndexes returns the index files not superseded. Callers hold s.mu.
func (s *Scope) liveIndexes() []pack.IndexFile {
	superseded := map[seal.ID]bool{}
	for _, f := range s.indexes {
		for _, old := range f.Supersedes {
			superseded[old] = true
		}
	}
	var out []pack.IndexFile
	for id, f := range s.indexes {
		if !superseded[id] {
			out = append(out, f)
		}
	}
	return out
}

// checkTree walks a tree from the repository (not the cache).
func (s *Scope) checkTree(ctx context.Context, id seal.ID, seen map[seal.ID]bool, res *CheckResult, depth int) error {
	if seen[id] {
		return nil
	}
	seen[id] = true
	if err := ctx.Err(); err != nil {
		return err
	}
	if depth > maxDepth {
		res.errorf("tree %s: nested deeper than %d", id, maxDepth)
		return nil
	}
	data, err := s.loadBlob(ctx, pack.TreeBlob, id, nil)
	if err != nil {
		res.errorf("tree %s: %v", id, err)
		return nil
	}
	var t Tree
	if err := json.Unmarshal(data, &t); err != nil {
		res.errorf("tree %s: %v", id, err)
		return nil
	}
	if err := t.validate(); err != nil {
		res.errorf("tree %s: %v", id, err)
		return nil
	}
	for i := range t.Nodes {
		n := &t.Nodes[i]
		switch n.Type {
		case TypeDir:
			if err := s.checkTree(ctx, *n.Subtree, seen, res, depth+1); err != nil {
				return err
			}
		case TypeFile:
			var total int64
			ok := true
			for _, c := range n.Content {
				loc, found := s.lookup(c)
				if !found || loc.blob.Type != pack.DataBlob {
					res.errorf("tree %s: file %q: chunk %s is missing", id, n.Name, c)
					ok = false
					break
				}
				total += int64(loc.blob.RawLength)
			}
			if ok && total != n.dataLen() {
				res.errorf("tree %s: file %q: chunks hold %d bytes, the file %d", id, n.Name, total, n.dataLen())
			}
		}
	}
	return nil
}

// checkPack downloads one pack and authenticates everything in it.
func (s *Scope) checkPack(ctx context.Context, id seal.ID, indexed []pack.Blob, res *CheckResult) {
	data, err := s.r.store.Get(ctx, packKey(s.name, id))
	if err != nil {
		res.errorf("pack %s: %v", id, err)
		return
	}
	if seal.Hash(data) != id {
		res.errorf("pack %s: content does not match its name (corrupt)", id)
		return
	}
	hdr, err := pack.ReadHeader(s.codec, data)
	if err != nil {
		res.errorf("pack %s: header: %v", id, err)
		return
	}
	inHdr := map[seal.ID]pack.Blob{}
	for _, b := range hdr {
		inHdr[b.ID] = b
	}
	var buf []byte
	for _, b := range indexed {
		h, ok := inHdr[b.ID]
		if !ok || h != b {
			res.errorf("pack %s: blob %s: the index and the pack header disagree", id, b.ID)
			continue
		}
	}
	for _, b := range hdr {
		if buf, err = s.codec.Decode(buf[:0], b, data[b.Offset:b.Offset+b.Length]); err != nil {
			res.errorf("pack %s: blob %s: %v", id, b.ID, err)
		}
	}
}
