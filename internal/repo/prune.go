package repo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo/pack"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// Policy is a retention policy (restic's forget semantics). Within each
// source, a manifest is kept if any rule keeps it; an empty policy keeps
// everything.
type Policy struct {
	// KeepLast keeps the n newest manifests.
	KeepLast int `json:"keep_last,omitempty"`
	// Hourly, Daily, Weekly and Monthly keep the newest manifest of each of
	// the last n hours/days/ISO weeks/months that have one.
	Hourly  int `json:"hourly,omitempty"`
	Daily   int `json:"daily,omitempty"`
	Weekly  int `json:"weekly,omitempty"`
	Monthly int `json:"monthly,omitempty"`
	// Within keeps every manifest younger than this.
	Within time.Duration `json:"within,omitempty"`
}

// Empty reports whether the policy has no rule.
func (p Policy) Empty() bool { return p == Policy{} }

// Validate refuses negative counts.
func (p Policy) Validate() error {
	if p.KeepLast < 0 || p.Hourly < 0 || p.Daily < 0 || p.Weekly < 0 || p.Monthly < 0 || p.Within < 0 {
		return fmt.Errorf("retention policy: negative value: %w", errs.ErrInvalid)
	}
	return nil
}

// Apply splits manifests into those the policy keeps and those it drops,
// per Source. Both lists are newest first, as CompareManifests orders a
// source's manifests (a stale writer's after the new owner's).
func (p Policy) Apply(ms []*Manifest, now time.Time) (keep, drop []*Manifest) {
	groups := map[string][]*Manifest{}
	var order []string
	for _, m := range ms {
		if _, ok := groups[m.Source]; !ok {
			order = append(order, m.Source)
		}
		groups[m.Source] = append(groups[m.Source], m)
	}
	for _, src := range order {
		g := slices.Clone(groups[src])
		// Newest first, a stale writer's manifest after the new owner's.
		slices.SortStableFunc(g, func(a, b *Manifest) int { return CompareManifests(b, a) })
		if p.Empty() {
			keep = append(keep, g...)
			continue
		}
		kept := make([]bool, len(g))
		for i := range g {
			if i < p.KeepLast || (p.Within > 0 && now.Sub(g[i].Time) < p.Within) {
				kept[i] = true
			}
		}
		bucket := func(n int, key func(time.Time) string) {
			seen := map[string]bool{}
			for i, m := range g {
				if len(seen) >= n {
					return
				}
				k := key(m.Time.UTC())
				if !seen[k] {
					seen[k] = true
					kept[i] = true
				}
			}
		}
		bucket(p.Hourly, func(t time.Time) string { return t.Format("2006-01-02T15") })
		bucket(p.Daily, func(t time.Time) string { return t.Format("2006-01-02") })
		bucket(p.Weekly, func(t time.Time) string { y, w := t.ISOWeek(); return fmt.Sprintf("%d-%d", y, w) })
		bucket(p.Monthly, func(t time.Time) string { return t.Format("2006-01") })
		for i, m := range g {
			if kept[i] {
				keep = append(keep, m)
			} else {
				drop = append(drop, m)
			}
		}
	}
	return keep, drop
}

// ApplyPolicy forgets the manifests of source (all sources when "") that
// the policy drops and returns them.
func (s *Scope) ApplyPolicy(ctx context.Context, source string, p Policy) ([]*Manifest, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	all, err := s.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	var ms []*Manifest
	for _, m := range all {
		if source == "" || m.Source == source {
			ms = append(ms, m)
		}
	}
	_, drop := p.Apply(ms, time.Now())
	ids := make([]seal.ID, len(drop))
	for i, m := range drop {
		ids[i] = m.ID
	}
	if err := s.Forget(ctx, ids...); err != nil {
		return nil, err
	}
	return drop, nil
}

// PruneOptions tunes Prune.
type PruneOptions struct {
	// MaxUnused is the fraction of unused bytes above which a pack that is
	// still partly used is repacked (0 = 0.25).
	MaxUnused float64
	// DryRun computes what would be done and changes nothing.
	DryRun bool
}

// PruneStats says what a prune did (or would do).
type PruneStats struct {
	PacksDeleted  int   `json:"packs_deleted"`
	PacksRepacked int   `json:"packs_repacked"`
	PacksWritten  int   `json:"packs_written"`
	BlobsDropped  int   `json:"blobs_dropped"`
	BytesFreed    int64 `json:"bytes_freed"`
	IndexesMerged int   `json:"indexes_merged"`
}

// Prune removes data no manifest references: packs no index lists (left by
// interrupted pushes) and packs with no used blob are deleted; packs with
// more than MaxUnused unused bytes are repacked. The crash ordering is in
// the package documentation.
func (s *Scope) Prune(ctx context.Context, opts PruneOptions) (st PruneStats, err error) {
	if opts.MaxUnused <= 0 {
		opts.MaxUnused = 0.25
	}
	s.lock.Lock()
	defer s.lock.Unlock()
	ctx, release, err := s.hold(ctx, true)
	if err != nil {
		return st, fmt.Errorf("prune: %w", err)
	}
	defer release()
	defer func() { err = whyStopped(ctx, err) }()
	if err := s.loadIndex(ctx); err != nil {
		return st, err
	}
	s.mu.Lock()
	bad := len(s.badIndexes)
	s.mu.Unlock()
	if bad > 0 {
		return st, fmt.Errorf("prune: %d damaged index files (run check; refusing to delete packs a damaged index may list): %w", bad, pack.ErrCorrupt)
	}
	// What is used: every tree and chunk reachable from a manifest.
	used := map[seal.ID]bool{}
	ids, err := s.manifestIDs(ctx)
	if err != nil {
		return st, err
	}
	for _, id := range ids {
		m, err := s.Manifest(ctx, id)
		if errors.Is(err, errs.ErrNotFound) {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("prune: %w (refusing to prune a repository with an unreadable snapshot; run check, then repair)", err)
		}
		if err := s.markUsed(ctx, m.Tree, used); err != nil {
			return st, fmt.Errorf("prune: snapshot %s: %w (run check, then repair; forget the snapshots repair cannot fix)", id, err)
		}
	}
	s.mu.Lock()
	oldIndexes := make([]seal.ID, 0, len(s.indexes))
	for id := range s.indexes {
		oldIndexes = append(oldIndexes, id)
	}
	live := s.liveIndexes()
	// A copy: a reload by a restore running beside the prune adds to the
	// scope's maps in place (addFresh).
	blobs := maps.Clone(s.blobs)
	damaged := maps.Clone(s.damaged)
	s.mu.Unlock()

	// Classify indexed packs. A blob counts as used only at the location
	// the index resolves it to (duplicates elsewhere are unused).
	type packUse struct {
		p          pack.IndexPack
		usedBytes  int64
		totalBytes int64
		usedBlobs  []pack.Blob
	}
	packs := map[seal.ID]*packUse{}
	for _, f := range live {
		for _, p := range f.Packs {
			if _, dup := packs[p.ID]; dup {
				continue
			}
			pu := &packUse{p: p}
			for _, b := range p.Blobs {
				pu.totalBytes += int64(b.Length)
				if used[b.ID] && blobs[b.ID].pack == p.ID {
					pu.usedBytes += int64(b.Length)
					pu.usedBlobs = append(pu.usedBlobs, b)
				} else {
					st.BlobsDropped++
				}
			}
			packs[p.ID] = pu
		}
	}
	var keep []pack.IndexPack
	var remove []seal.ID
	var repack []*packUse
	for id, pu := range packs {
		switch {
		case pu.usedBytes == 0:
			remove = append(remove, id)
			st.BytesFreed += pu.p.Size
		case damaged[id] != nil:
			// Not repacked: its bytes cannot be trusted. Repair salvages it.
			keep = append(keep, pu.p)
		case float64(pu.totalBytes-pu.usedBytes) > opts.MaxUnused*float64(pu.totalBytes):
			repack = append(repack, pu)
		default:
			keep = append(keep, pu.p)
		}
	}
	stored, err := s.r.store.List(ctx, scopePrefix(s.name)+"data/")
	if err != nil {
		return st, fmt.Errorf("prune: list packs: %w", err)
	}
	for _, in := range stored {
		id, err := seal.ParseID(path.Base(in.Key))
		if err != nil {
			continue
		}
		if _, ok := packs[id]; !ok {
			remove = append(remove, id) // not indexed: an interrupted push's
			st.BytesFreed += in.Size
		}
	}
	st.PacksDeleted = len(remove)
	st.PacksRepacked = len(repack)
	if opts.DryRun {
		return st, nil
	}
	if len(remove) == 0 && len(repack) == 0 && len(oldIndexes) <= 1 {
		return st, nil
	}

	// 1. Repacked packs.
	slices.SortFunc(repack, func(a, b *packUse) int { return strings.Compare(a.p.ID.String(), b.p.ID.String()) })
	w := pack.NewWriter(s.codec)
	var scratch []byte
	flush := func() error {
		if w.Count() == 0 {
			return nil
		}
		data, id, bl, err := w.Finish()
		if err != nil {
			return err
		}
		if err := s.r.store.Put(ctx, packKey(s.name, id), data); err != nil {
			return fmt.Errorf("prune: write pack %s: %w", id, err)
		}
		keep = append(keep, pack.IndexPack{ID: id, Size: int64(len(data)), Blobs: bl})
		st.PacksWritten++
		return nil
	}
	for _, pu := range repack {
		data, err := s.r.store.Get(ctx, packKey(s.name, pu.p.ID))
		if err != nil {
			return st, fmt.Errorf("prune: repack %s: %w", pu.p.ID, err)
		}
		if seal.Hash(data) != pu.p.ID {
			return st, fmt.Errorf("prune: repack %s: %w (run check --read-data)", pu.p.ID, pack.ErrCorrupt)
		}
		for _, b := range pu.usedBlobs {
			if int64(b.Offset)+int64(b.Length) > int64(len(data)) {
				return st, fmt.Errorf("prune: repack %s: blob %s beyond the pack: %w", pu.p.ID, b.ID, pack.ErrCorrupt)
			}
			stored := data[b.Offset : b.Offset+b.Length]
			if scratch, err = s.codec.Decode(scratch[:0], b, stored); err != nil {
				return st, fmt.Errorf("prune: repack %s: blob %s: %w", pu.p.ID, b.ID, err)
			}
			w.Add(b.Type, b.ID, stored, int(b.RawLength), b.Compressed)
			if w.Len() >= s.r.opts.PackSize {
				if err := flush(); err != nil {
					return st, err
				}
			}
		}
		remove = append(remove, pu.p.ID)
		st.BytesFreed += pu.p.Size
	}
	if err := flush(); err != nil {
		return st, err
	}

	// 2. One index listing every live pack, superseding all the old ones.
	slices.SortFunc(keep, func(a, b pack.IndexPack) int { return strings.Compare(a.ID.String(), b.ID.String()) })
	slices.SortFunc(oldIndexes, func(a, b seal.ID) int { return strings.Compare(a.String(), b.String()) })
	nf := pack.IndexFile{Packs: keep, Supersedes: oldIndexes}
	data, err := pack.EncodeIndex(s.codec, nf)
	if err != nil {
		return st, fmt.Errorf("prune: encode index: %w", err)
	}
	nid := seal.Hash(data)
	if err := stillHeld(ctx, "writing the new index"); err != nil {
		return st, fmt.Errorf("prune: %w", err)
	}
	if err := s.r.store.Put(ctx, indexKey(s.name, nid), data); err != nil {
		return st, fmt.Errorf("prune: write index: %w", err)
	}
	st.IndexesMerged = len(oldIndexes)

	// 3. The old index files, then the packs nothing lists any more.
	for _, id := range oldIndexes {
		if err := stillHeld(ctx, "deleting index "+id.String()); err != nil {
			return st, fmt.Errorf("prune: %w", err)
		}
		if err := s.r.store.Delete(ctx, indexKey(s.name, id)); err != nil {
			return st, fmt.Errorf("prune: delete index %s: %w", id, err)
		}
	}
	// The new index no longer needs to name what it superseded; a later
	// prune drops the list. Reload so lookups match the store.
	for _, id := range remove {
		if err := stillHeld(ctx, "deleting pack "+id.String()); err != nil {
			return st, fmt.Errorf("prune: %w", err)
		}
		if err := s.r.store.Delete(ctx, packKey(s.name, id)); err != nil {
			return st, fmt.Errorf("prune: delete pack %s: %w", id, err)
		}
	}
	// 4. The damage marks of packs now gone.
	for _, id := range remove {
		if damaged[id] != nil {
			if err := stillHeld(ctx, "clearing the damage mark of pack "+id.String()); err != nil {
				return st, fmt.Errorf("prune: %w", err)
			}
			if err := s.clearDamage(ctx, id); err != nil {
				return st, fmt.Errorf("prune: %w", err)
			}
		}
	}
	s.mu.Lock()
	s.indexes = map[seal.ID]pack.IndexFile{}
	s.mu.Unlock()
	if err := s.loadIndex(ctx); err != nil {
		return st, err
	}
	return st, nil
}

// markUsed adds a tree and everything below it to used, reading trees from
// the repository.
func (s *Scope) markUsed(ctx context.Context, id seal.ID, used map[seal.ID]bool) error {
	if used[id] {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	used[id] = true
	data, err := s.loadBlob(ctx, pack.TreeBlob, id, nil)
	if err != nil {
		return err
	}
	var t Tree
	if err := json.Unmarshal(data, &t); err != nil {
		return fmt.Errorf("tree %s: %w: %w", id, pack.ErrCorrupt, err)
	}
	if err := t.validate(); err != nil {
		return fmt.Errorf("tree %s: %w", id, err)
	}
	for i := range t.Nodes {
		n := &t.Nodes[i]
		for _, c := range n.Content {
			if _, ok := s.lookup(c); !ok {
				return fmt.Errorf("tree %s: file %q: chunk %s missing: %w", id, n.Name, c, pack.ErrCorrupt)
			}
			used[c] = true
		}
		if n.Type == TypeDir {
			if err := s.markUsed(ctx, *n.Subtree, used); err != nil {
				return err
			}
		}
	}
	return nil
}
