package repo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

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
	// DamagedPacks lists the packs marked damaged: found so by this check
	// or by an earlier one and not repaired since.
	DamagedPacks []PackDamage `json:"damaged_packs,omitempty"`
	// DamagedSnapshots lists the snapshots that cannot be restored
	// completely (they need a missing or unreadable tree or chunk).
	DamagedSnapshots []SnapshotDamage `json:"damaged_snapshots,omitempty"`
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
//
// A pack found missing or damaged is marked so in the repository (see
// PackDamage): pushes then upload its blobs again instead of reusing them.
// A marked pack that a read finds intact is unmarked.
func (s *Scope) Check(ctx context.Context, opts CheckOptions) (*CheckResult, error) {
	res, err := CheckScopes(ctx, []*Scope{s}, opts)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// checkPlan is what a check of one scope will read.
type checkPlan struct {
	packs []seal.ID
	sizes map[seal.ID]int64
	total int64
}

// plan picks the packs a read-data check reads.
func (s *Scope) plan(ctx context.Context, subset string) (*checkPlan, error) {
	pl := &checkPlan{sizes: map[seal.ID]int64{}}
	if subset == "" {
		return pl, nil
	}
	s.lock.RLock()
	defer s.lock.RUnlock()
	if err := s.loadIndex(ctx); err != nil {
		return pl, nil // Check reports it
	}
	s.mu.Lock()
	sorted := make([]seal.ID, 0, len(s.packs))
	for id, size := range s.packs {
		sorted = append(sorted, id)
		pl.sizes[id] = size
	}
	s.mu.Unlock()
	slices.SortFunc(sorted, func(a, b seal.ID) int { return strings.Compare(a.String(), b.String()) })
	pick, err := parseSubset(subset, len(sorted))
	if err != nil {
		return nil, err
	}
	for i, id := range sorted {
		if pick(i) {
			pl.packs = append(pl.packs, id)
			pl.total += pl.sizes[id]
		}
	}
	return pl, nil
}

// checkProgress counts a check's reads across scopes.
type checkProgress struct {
	fn                                 func(Progress)
	start                              time.Time
	packs, packsTotal, bytes, bytesTot int64
}

func (p *checkProgress) add(packs, bytes int64) {
	p.packs += packs
	p.bytes += bytes
	if p.fn != nil {
		p.fn(Progress{Op: "check", FilesDone: p.packs, FilesTotal: p.packsTotal, BytesDone: p.bytes,
			BytesTotal: p.bytesTot, Elapsed: time.Since(p.start)})
	}
}

// CheckScopes checks several scopes as Check does, one after the other;
// progress counts the packs of all of them (the totals are known before
// the first is read).
func CheckScopes(ctx context.Context, scopes []*Scope, opts CheckOptions) ([]*CheckResult, error) {
	subset := opts.ReadDataSubset
	if opts.ReadData && subset == "" {
		subset = "1/1"
	}
	plans := make([]*checkPlan, len(scopes))
	prog := &checkProgress{fn: opts.Progress, start: time.Now()}
	for i, s := range scopes {
		pl, err := s.plan(ctx, subset)
		if err != nil {
			return nil, err
		}
		plans[i] = pl
		prog.packsTotal += int64(len(pl.packs))
		prog.bytesTot += pl.total
	}
	out := make([]*CheckResult, len(scopes))
	for i, s := range scopes {
		res, err := s.check(ctx, plans[i], prog)
		if err != nil {
			return nil, err
		}
		out[i] = res
	}
	if opts.Progress != nil {
		opts.Progress(Progress{Op: "check", FilesDone: prog.packsTotal, FilesTotal: prog.packsTotal,
			BytesDone: prog.bytesTot, BytesTotal: prog.bytesTot, Elapsed: time.Since(prog.start), Done: true})
	}
	return out, nil
}

func (s *Scope) check(ctx context.Context, pl *checkPlan, prog *checkProgress) (*CheckResult, error) {
	res := &CheckResult{Scope: s.name}
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
	marked := maps.Clone(s.damaged)
	s.mu.Unlock()
	res.Packs = len(packs)
	now := time.Now().UTC()
	for id, size := range packs {
		got, ok := inStore[id]
		switch {
		case !ok:
			res.errorf("pack %s is indexed but missing", id)
			if d := marked[id]; d == nil || !d.Missing {
				if err := s.markDamaged(ctx, &PackDamage{Pack: id, Found: now, Reason: "missing from the store", Missing: true}); err != nil {
					return nil, err
				}
			}
		case got != size:
			res.errorf("pack %s: %d bytes stored, the index says %d", id, got, size)
		}
	}
	for id := range inStore {
		if _, ok := packs[id]; !ok {
			res.Warnings = append(res.Warnings, fmt.Sprintf("pack %s is not indexed (left by an interrupted push; prune removes it)", id))
		}
	}
	for id := range marked {
		if _, ok := packs[id]; !ok {
			res.Warnings = append(res.Warnings, fmt.Sprintf("damage mark of pack %s, which no index lists (repair removes it)", id))
		}
	}

	// Read the planned packs first, so the snapshots below are judged
	// with what this check found.
	for _, id := range pl.packs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if _, ok := packs[id]; ok {
			if _, ok := inStore[id]; ok {
				d := s.checkPack(ctx, id, byPack[id], res)
				res.PacksRead++
				switch {
				case d != nil:
					d.Found = now
					if old := marked[id]; old != nil {
						d.Found = old.Found // when it was first found
					}
					if err := s.markDamaged(ctx, d); err != nil {
						return nil, err
					}
				case marked[id] != nil:
					// Read back intact (repaired by hand, or a false alarm).
					if err := s.clearDamage(ctx, id); err != nil {
						return nil, err
					}
				}
			}
		}
		prog.add(1, pl.sizes[id])
	}

	w := newDamageWalker(s, func(msg string) { res.errorf("%s", msg) })
	ids, err := s.manifestIDs(ctx)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		m, err := s.Manifest(ctx, id)
		if errors.Is(err, errs.ErrNotFound) {
			continue
		}
		if err != nil {
			res.errorf("snapshot %s: %v", id, err)
			res.DamagedSnapshots = append(res.DamagedSnapshots, SnapshotDamage{ID: id, Problem: err.Error()})
			continue
		}
		res.Snapshots++
		d, err := w.snapshot(ctx, m)
		if err != nil {
			return nil, err
		}
		if d != nil {
			res.DamagedSnapshots = append(res.DamagedSnapshots, *d)
		}
	}
	slices.SortFunc(res.DamagedSnapshots, func(a, b SnapshotDamage) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return strings.Compare(a.ID.String(), b.ID.String())
	})
	s.mu.Lock()
	for id, d := range s.damaged {
		if _, ok := packs[id]; ok {
			res.DamagedPacks = append(res.DamagedPacks, *d)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(res.DamagedPacks, func(a, b PackDamage) int { return strings.Compare(a.Pack.String(), b.Pack.String()) })
	for _, d := range res.DamagedPacks {
		_, stored := inStore[d.Pack]
		if marked[d.Pack] != nil && stored && !slices.Contains(pl.packs, d.Pack) {
			res.errorf("pack %s was found damaged on %s (%s) and is not repaired yet", d.Pack, d.Found.Format(time.RFC3339), d.Reason)
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

// checkPack downloads one pack and authenticates everything in it; it
// returns the damage found (nil: none, or the pack could not be fetched
// for a reason that says nothing about its content).
func (s *Scope) checkPack(ctx context.Context, id seal.ID, indexed []pack.Blob, res *CheckResult) *PackDamage {
	data, err := s.r.store.Get(ctx, packKey(s.name, id))
	if errors.Is(err, errs.ErrNotFound) {
		res.errorf("pack %s: %v", id, err)
		return &PackDamage{Pack: id, Reason: "missing from the store", Missing: true}
	}
	if err != nil {
		res.errorf("pack %s: %v", id, err)
		return nil
	}
	var reasons []string
	if seal.Hash(data) != id {
		res.errorf("pack %s: content does not match its name (corrupt)", id)
		reasons = append(reasons, "content does not match its name")
	}
	// The blobs as the index locates them (restore reads them so).
	var bad []seal.ID
	var buf []byte
	for _, b := range indexed {
		if int64(b.Offset)+int64(b.Length) > int64(len(data)) {
			res.errorf("pack %s: blob %s: beyond the end of the pack", id, b.ID)
			bad = append(bad, b.ID)
			continue
		}
		if buf, err = s.codec.Decode(buf[:0], b, data[b.Offset:b.Offset+b.Length]); err != nil {
			res.errorf("pack %s: blob %s: %v", id, b.ID, err)
			bad = append(bad, b.ID)
		}
	}
	if len(bad) > 0 {
		reasons = append(reasons, fmt.Sprintf("%d of %d blobs unreadable", len(bad), len(indexed)))
	}
	hdr, err := pack.ReadHeader(s.codec, data)
	if err != nil {
		res.errorf("pack %s: header: %v", id, err)
		reasons = append(reasons, "header unreadable")
	} else {
		inHdr := map[seal.ID]pack.Blob{}
		for _, b := range hdr {
			inHdr[b.ID] = b
		}
		for _, b := range indexed {
			if h, ok := inHdr[b.ID]; !ok || h != b {
				res.errorf("pack %s: blob %s: the index and the pack header disagree", id, b.ID)
				if !slices.Contains(reasons, "index and header disagree") {
					reasons = append(reasons, "index and header disagree")
				}
			}
		}
	}
	if len(reasons) == 0 {
		return nil
	}
	return &PackDamage{Pack: id, Reason: strings.Join(reasons, "; "), Blobs: bad}
}
