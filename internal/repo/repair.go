package repo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo/pack"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// RepairSource is a local directory that may hold the data of a damaged
// snapshot (a local snapshot the daemon still has).
type RepairSource struct {
	// Dir is a quiescent directory tree (a read-only local snapshot).
	Dir string
	// Exact says Dir is the very tree the snapshot was pushed from: every
	// blob read from it that the repository cannot serve is uploaded.
	// Otherwise only the blobs the damaged snapshot lacks are.
	Exact bool
	// Name says what Dir is, for the report.
	Name string
}

// RepairOptions tunes Repair.
type RepairOptions struct {
	// Sources returns the local copies that may hold snapshot m's data
	// (optional: without it only salvaging is done).
	Sources func(m *Manifest) []RepairSource
	// Progress is called as packs are salvaged and copies read (optional).
	Progress func(Progress)
}

// RepairedSnapshot is a snapshot that was damaged and restores again.
type RepairedSnapshot struct {
	SnapshotDamage
	// From names the local copy that provided the missing data ("" when
	// intact copies sufficed: salvaged from the damaged packs, or stored
	// again by a push since the check).
	From string `json:"from,omitempty"`
}

// RepairResult says what Repair did.
type RepairResult struct {
	Scope string `json:"scope"`
	// PacksRemoved are damaged packs taken out of the index and deleted
	// (after their intact blobs were copied to new packs).
	PacksRemoved []seal.ID `json:"packs_removed"`
	// PacksIntact are packs marked damaged that read back intact: their
	// mark is cleared and they stay.
	PacksIntact   []seal.ID `json:"packs_intact"`
	BlobsSalvaged int64     `json:"blobs_salvaged"`
	// BlobsUploaded counts blobs read again from local copies.
	BlobsUploaded int64 `json:"blobs_uploaded"`
	BytesUploaded int64 `json:"bytes_uploaded"`
	// Repaired lists the snapshots that were damaged and now restore.
	Repaired []RepairedSnapshot `json:"repaired"`
	// Damaged lists the snapshots still damaged: no local copy had what
	// they lack. Forget them, or restore what is left of them.
	Damaged []SnapshotDamage `json:"damaged"`
}

// Repair fixes what a check found, restic's `repair packs` and the healing
// part of a backup in one: it copies the intact blobs of every pack marked
// damaged into new packs, uploads from local copies (opts.Sources) the
// blobs damaged snapshots still lack, then takes the damaged packs out of
// the index and deletes them. It lists the snapshots still damaged. The
// crash ordering is in the package documentation.
func (s *Scope) Repair(ctx context.Context, opts RepairOptions) (_ *RepairResult, err error) {
	start := time.Now()
	res := &RepairResult{Scope: s.name, PacksRemoved: []seal.ID{}, PacksIntact: []seal.ID{},
		Repaired: []RepairedSnapshot{}, Damaged: []SnapshotDamage{}}
	s.lock.Lock()
	defer s.lock.Unlock()
	ctx, release, err := s.hold(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	defer release()
	defer func() { err = whyStopped(ctx, err) }()
	if err := s.loadIndex(ctx); err != nil {
		return nil, err
	}
	// 1. Salvage: the intact blobs of damaged packs into new packs.
	s.mu.Lock()
	var marked []seal.ID
	var total int64
	for id := range s.damaged {
		if size, ok := s.packs[id]; ok {
			marked = append(marked, id)
			total += size
		}
	}
	byPack := map[seal.ID][]pack.Blob{}
	for _, f := range s.liveIndexes() {
		for _, p := range f.Packs {
			byPack[p.ID] = append(byPack[p.ID], p.Blobs...)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(marked, func(a, b seal.ID) int { return strings.Compare(a.String(), b.String()) })
	// Damaged before: what is unreadable now, and what lost a blob in a
	// damaged pack that a push since the check stored again.
	bw := newDamageWalker(s, nil)
	bw.touched, bw.found = map[seal.ID]seal.ID{}, map[seal.ID]time.Time{}
	s.mu.Lock()
	for _, id := range marked {
		d := s.damaged[id]
		bw.found[id] = d.Found
		for _, b := range byPack[id] {
			if d.lost(b.ID) {
				bw.touched[b.ID] = id
			}
		}
	}
	s.mu.Unlock()
	before, err := s.damagedSnapshots(ctx, bw)
	if err != nil {
		return nil, err
	}
	w := pack.NewWriter(s.codec)
	var newPacks []pack.IndexPack
	flush := func() error {
		if w.Count() == 0 {
			return nil
		}
		data, id, bl, err := w.Finish()
		if err != nil {
			return err
		}
		if err := s.r.store.Put(ctx, packKey(s.name, id), data); err != nil {
			return fmt.Errorf("repair: write pack %s: %w", id, err)
		}
		res.BytesUploaded += int64(len(data))
		newPacks = append(newPacks, pack.IndexPack{ID: id, Size: int64(len(data)), Blobs: bl})
		return nil
	}
	var dropped []seal.ID
	var done int64
	for _, id := range marked {
		data, err := s.r.store.Get(ctx, packKey(s.name, id))
		switch {
		case errors.Is(err, errs.ErrNotFound):
			data = nil
		case err != nil:
			return nil, fmt.Errorf("repair: read pack %s: %w", id, err)
		case seal.Hash(data) == id:
			// Intact after all (put back by hand, or a read error at check time).
			if err := s.clearDamage(ctx, id); err != nil {
				return nil, err
			}
			res.PacksIntact = append(res.PacksIntact, id)
			continue
		}
		dropped = append(dropped, id)
		var scratch []byte
		for _, b := range byPack[id] {
			if s.usableElsewhere(b.ID, id) || int64(b.Offset)+int64(b.Length) > int64(len(data)) {
				continue
			}
			stored := data[b.Offset : b.Offset+b.Length]
			if scratch, err = s.codec.Decode(scratch[:0], b, stored); err != nil {
				continue // lost: a local copy may have it
			}
			w.Add(b.Type, b.ID, stored, int(b.RawLength), b.Compressed)
			res.BlobsSalvaged++
			if w.Len() >= s.r.opts.PackSize {
				if err := flush(); err != nil {
					return nil, err
				}
			}
		}
		done += s.packs[id]
		if opts.Progress != nil {
			opts.Progress(Progress{Op: "salvage", FilesDone: int64(len(dropped) + len(res.PacksIntact)), FilesTotal: int64(len(marked)),
				BytesDone: done, BytesTotal: total, BytesMoved: res.BytesUploaded, Elapsed: time.Since(start)})
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(newPacks) > 0 {
		if err := s.writeIndex(ctx, pack.IndexFile{Packs: newPacks}); err != nil {
			return nil, fmt.Errorf("repair: %w", err)
		}
	}

	// 2. Heal: upload what damaged snapshots still lack from local copies.
	healedFrom := map[seal.ID]string{}
	if opts.Sources != nil {
		damaged, err := s.damagedSnapshots(ctx, newDamageWalker(s, nil))
		if err != nil {
			return nil, err
		}
		for _, d := range damaged {
			m, err := s.Manifest(ctx, d.ID)
			if err != nil {
				continue // an unreadable manifest has nothing to heal
			}
			for _, src := range opts.Sources(m) {
				var want func(seal.ID) bool
				if !src.Exact {
					need, err := s.neededBlobs(ctx, m)
					if err != nil {
						return nil, err
					}
					want = func(id seal.ID) bool { return need[id] }
				}
				st, err := s.heal(ctx, m, src.Dir, want, opts.Progress)
				if err != nil {
					s.r.log.Warn("repair: reading a local copy failed", "scope", s.name, "snapshot", m.ID.String()[:12], "copy", src.Name, "err", err)
					continue
				}
				res.BlobsUploaded += st.ChunksNew + st.TreesNew
				res.BytesUploaded += st.BytesUploaded
				if still, err := newDamageWalker(s, nil).snapshot(ctx, m); err != nil {
					return nil, err
				} else if still == nil {
					healedFrom[m.ID] = src.Name
					break
				}
			}
		}
	}

	// 3. Drop the damaged packs: a new index without them supersedes the
	// index files that list them; then those files, the packs, the marks.
	if err := s.dropPacks(ctx, dropped); err != nil {
		return nil, err
	}
	s.mu.Lock()
	var stale []seal.ID
	for id := range s.damaged {
		if _, ok := s.packs[id]; !ok {
			stale = append(stale, id)
		}
	}
	s.mu.Unlock()
	for _, id := range stale {
		if err := s.clearDamage(ctx, id); err != nil {
			return nil, err
		}
	}
	res.PacksRemoved = append(res.PacksRemoved, dropped...)

	after, err := s.damagedSnapshots(ctx, newDamageWalker(s, nil))
	if err != nil {
		return nil, err
	}
	res.Damaged = append(res.Damaged, after...)
	still := map[seal.ID]bool{}
	for _, d := range after {
		still[d.ID] = true
	}
	for _, d := range before {
		if !still[d.ID] {
			res.Repaired = append(res.Repaired, RepairedSnapshot{SnapshotDamage: d, From: healedFrom[d.ID]})
		}
	}
	s.r.log.Info("repaired", "scope", s.name, "packs_removed", len(res.PacksRemoved), "salvaged", res.BlobsSalvaged,
		"uploaded", res.BlobsUploaded, "repaired", len(res.Repaired), "damaged", len(res.Damaged), "dur", time.Since(start))
	return res, nil
}

// usableElsewhere reports whether blob id has an indexed copy outside pack
// not marked damaged.
func (s *Scope) usableElsewhere(id, not seal.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.blobs[id]
	return ok && l.pack != not && s.damaged[l.pack] == nil
}

// writeIndex stores an index file and makes its blobs visible.
func (s *Scope) writeIndex(ctx context.Context, f pack.IndexFile) error {
	data, err := pack.EncodeIndex(s.codec, f)
	if err != nil {
		return fmt.Errorf("encode index: %w", err)
	}
	id := seal.Hash(data)
	if err := s.r.store.Put(ctx, indexKey(s.name, id), data); err != nil {
		return fmt.Errorf("write index: %w", err)
	}
	s.addIndex(id, f)
	return nil
}

// dropPacks takes packs out of the index (a new index file superseding the
// ones that list them), then deletes the superseded files and the packs.
// Callers hold s.lock exclusively.
func (s *Scope) dropPacks(ctx context.Context, drop []seal.ID) error {
	if len(drop) == 0 {
		return nil
	}
	gone := map[seal.ID]bool{}
	for _, id := range drop {
		gone[id] = true
	}
	s.mu.Lock()
	superseded := map[seal.ID]bool{}
	for _, f := range s.indexes {
		for _, old := range f.Supersedes {
			superseded[old] = true
		}
	}
	var olds []seal.ID
	var keep []pack.IndexPack
	seen := map[seal.ID]bool{}
	for id, f := range s.indexes {
		if superseded[id] || !slices.ContainsFunc(f.Packs, func(p pack.IndexPack) bool { return gone[p.ID] }) {
			continue
		}
		olds = append(olds, id)
		for _, p := range f.Packs {
			if !gone[p.ID] && !seen[p.ID] {
				seen[p.ID] = true
				keep = append(keep, p)
			}
		}
	}
	s.mu.Unlock()
	slices.SortFunc(olds, func(a, b seal.ID) int { return strings.Compare(a.String(), b.String()) })
	slices.SortFunc(keep, func(a, b pack.IndexPack) int { return strings.Compare(a.ID.String(), b.ID.String()) })
	data, err := pack.EncodeIndex(s.codec, pack.IndexFile{Packs: keep, Supersedes: olds})
	if err != nil {
		return fmt.Errorf("repair: encode index: %w", err)
	}
	if err := stillHeld(ctx, "writing the index"); err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	if err := s.r.store.Put(ctx, indexKey(s.name, seal.Hash(data)), data); err != nil {
		return fmt.Errorf("repair: write index: %w", err)
	}
	for _, id := range olds {
		if err := stillHeld(ctx, "deleting index "+id.String()); err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		if err := s.r.store.Delete(ctx, indexKey(s.name, id)); err != nil {
			return fmt.Errorf("repair: delete index %s: %w", id, err)
		}
	}
	for _, id := range drop {
		if err := stillHeld(ctx, "deleting pack "+id.String()); err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		if err := s.r.store.Delete(ctx, packKey(s.name, id)); err != nil && !errors.Is(err, errs.ErrNotFound) {
			return fmt.Errorf("repair: delete pack %s: %w", id, err)
		}
	}
	for _, id := range drop {
		if err := stillHeld(ctx, "clearing the damage mark of pack "+id.String()); err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		if err := s.clearDamage(ctx, id); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.indexes = map[seal.ID]pack.IndexFile{}
	s.mu.Unlock()
	return s.loadIndex(ctx)
}

// neededBlobs returns the trees and chunks manifest m references that the
// repository cannot serve (unreadable trees included; what lies below
// them is unknown until a copy provides them).
func (s *Scope) neededBlobs(ctx context.Context, m *Manifest) (map[seal.ID]bool, error) {
	need := map[seal.ID]bool{}
	seen := map[seal.ID]bool{}
	var walk func(id seal.ID, depth int) error
	walk = func(id seal.ID, depth int) error {
		if seen[id] || depth > maxDepth {
			return nil
		}
		seen[id] = true
		if err := ctx.Err(); err != nil {
			return err
		}
		if !s.usable(id) {
			need[id] = true
		}
		data, err := s.loadBlob(ctx, pack.TreeBlob, id, nil)
		if err != nil {
			need[id] = true
			return nil
		}
		t, err := decodeTree(data)
		if err != nil {
			need[id] = true
			return nil
		}
		for i := range t.Nodes {
			n := &t.Nodes[i]
			for _, c := range n.Content {
				if !s.usable(c) {
					need[c] = true
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
	return need, walk(m.Tree, 0)
}

// heal reads dir as a push incremental to m would, uploading the blobs
// the repository cannot serve (those want accepts, when set), and writes
// their index but no manifest. Callers hold s.lock.
func (s *Scope) heal(ctx context.Context, m *Manifest, dir string, want func(seal.ID) bool, progress func(Progress)) (PushStats, error) {
	start := time.Now()
	rootfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return PushStats{}, fmt.Errorf("repair from %s: %w", dir, err)
	}
	defer unix.Close(rootfd)
	p := &pusher{s: s, rootfd: rootfd, pending: map[seal.ID]bool{}, params: s.r.cfg.Chunker,
		recycle: make(chan []byte, s.r.opts.Transfers+2), want: want, noManifest: true}
	p.bufs.New = func() any { b := make([]byte, 0, p.params.Max); return &b }
	p.storedBufs.New = func() any { b := make([]byte, 0, p.params.Max+p.params.Max/16+1024); return &b }
	stop := make(chan struct{})
	go reportProgress(progress, func() Progress { return p.c.progress("heal", start, false) }, stop)
	root := m.Tree
	_, err = p.run(ctx, &root, nil)
	close(stop)
	p.stats.Duration = time.Since(start)
	p.stats.BytesUploaded = p.c.moved.Load()
	if err != nil {
		return p.stats, fmt.Errorf("repair from %s: %w", dir, err)
	}
	return p.stats, nil
}
