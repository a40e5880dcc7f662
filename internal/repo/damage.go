package repo

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo/pack"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// Damage marks: check records each pack it finds damaged as a sealed record
// scopes/<scope>/records/damage/<pack id> (authenticated with the scope's
// key, so only a holder of the key can mark or clear a pack). Every
// Repository that opens the scope reads them with the index: a blob whose
// only indexed copy is in a marked pack counts as absent for a push (which
// uploads it again from its source), and a lookup prefers an intact copy
// over one in a marked pack. Repair removes marked packs from the index
// and deletes them, then their marks.

// damageKind is the record kind of damage marks.
const damageKind = "damage"

// PackDamage is what check found wrong with one pack.
type PackDamage struct {
	Pack   seal.ID   `json:"pack"`
	Found  time.Time `json:"found"`
	Reason string    `json:"reason"`
	// Missing is set when the pack is gone from the store.
	Missing bool `json:"missing,omitempty"`
	// Blobs lists the indexed blobs of the pack that could not be read
	// back (the others were intact when checked).
	Blobs []seal.ID `json:"blobs,omitempty"`
}

// lost reports whether blob id cannot be read from the damaged pack.
func (d *PackDamage) lost(id seal.ID) bool {
	return d.Missing || slices.Contains(d.Blobs, id)
}

// SnapshotDamage names a snapshot that references data that is missing or
// unreadable, with the first problem found below it.
type SnapshotDamage struct {
	ID      seal.ID           `json:"id"`
	Source  string            `json:"source"`
	Time    time.Time         `json:"time"`
	Labels  map[string]string `json:"labels,omitempty"`
	Problem string            `json:"problem"`
	// Packs lists the damaged packs the snapshot needs.
	Packs []seal.ID `json:"packs,omitempty"`
}

// loadDamage reads the scope's damage marks; marks that fail to
// authenticate are returned as problems and otherwise ignored.
func (s *Scope) loadDamage(ctx context.Context) (map[seal.ID]*PackDamage, []string, error) {
	infos, err := s.r.store.List(ctx, scopePrefix(s.name)+"records/"+damageKind+"/")
	if err != nil {
		return nil, nil, fmt.Errorf("list damage marks of %s: %w", s.name, err)
	}
	out := map[seal.ID]*PackDamage{}
	var bad []string
	for _, in := range infos {
		name := path.Base(in.Key)
		id, err := seal.ParseID(name)
		if err != nil {
			continue
		}
		data, err := s.r.store.Get(ctx, in.Key)
		if errors.Is(err, errs.ErrNotFound) {
			continue // cleared since the listing
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read damage mark %s: %w", name, err)
		}
		var d PackDamage
		if err := pack.OpenDoc(s.codec, recordLabel(damageKind, name), data, &d); err != nil || d.Pack != id {
			bad = append(bad, fmt.Sprintf("damage mark %s: unreadable (%v): delete it or run check --read-data", name, err))
			continue
		}
		out[id] = &d
	}
	return out, bad, nil
}

// markDamaged records d durably (before anything relies on it).
func (s *Scope) markDamaged(ctx context.Context, d *PackDamage) error {
	if err := s.PutRecord(ctx, damageKind, d.Pack.String(), d); err != nil {
		return fmt.Errorf("mark pack %s damaged: %w", d.Pack, err)
	}
	s.mu.Lock()
	s.damaged[d.Pack] = d
	s.mu.Unlock()
	return nil
}

// clearDamage deletes the mark of pack id.
func (s *Scope) clearDamage(ctx context.Context, id seal.ID) error {
	if err := s.r.store.Delete(ctx, recordKey(s.name, damageKind, id.String())); err != nil && !errors.Is(err, errs.ErrNotFound) {
		return fmt.Errorf("clear damage mark of pack %s: %w", id, err)
	}
	s.mu.Lock()
	delete(s.damaged, id)
	s.mu.Unlock()
	return nil
}

// usable reports whether blob id has an indexed copy in a pack not marked
// damaged: a push may then reference it without uploading it again.
func (s *Scope) usable(id seal.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.blobs[id]
	return ok && s.damaged[l.pack] == nil
}

// allUsable reports whether every blob of ids is usable.
func (s *Scope) allUsable(ids []seal.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.damaged) == 0 {
		for _, id := range ids {
			if _, ok := s.blobs[id]; !ok {
				return false
			}
		}
		return true
	}
	for _, id := range ids {
		l, ok := s.blobs[id]
		if !ok || s.damaged[l.pack] != nil {
			return false
		}
	}
	return true
}

// Damaged lists the scope's damage marks, by pack id.
func (s *Scope) Damaged(ctx context.Context) ([]PackDamage, error) {
	if err := s.loadIndex(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]PackDamage, 0, len(s.damaged))
	for _, d := range s.damaged {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b PackDamage) int { return strings.Compare(a.Pack.String(), b.Pack.String()) })
	return out, nil
}

// blobState says whether blob id can be read: "" if so, else why not, and
// the damaged pack involved (zero if none).
func (s *Scope) blobState(id seal.ID, t pack.BlobType) (string, seal.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.blobs[id]
	if !ok || l.blob.Type != t {
		return fmt.Sprintf("%s %s is missing", t, id), seal.ID{}
	}
	if d := s.damaged[l.pack]; d != nil && d.lost(id) {
		return fmt.Sprintf("%s %s is unreadable in damaged pack %s", t, id, l.pack), l.pack
	}
	return "", seal.ID{}
}

// damageWalker finds, per snapshot, the first problem below its root tree,
// reading each tree once from the repository (not the cache).
type damageWalker struct {
	s     *Scope
	memo  map[seal.ID]*treeDamage
	onErr func(string) // called once per problem found (optional)
	// touched, when set, also counts as damage a blob lost in a marked
	// pack even when an intact copy exists now (repair's "before"), for
	// the snapshots taken before the pack was found damaged (found).
	touched map[seal.ID]seal.ID
	found   map[seal.ID]time.Time
}

type treeDamage struct {
	problem string
	packs   []seal.ID
	// current is set when something below cannot be read now (not only
	// "touched").
	current bool
}

func newDamageWalker(s *Scope, onErr func(string)) *damageWalker {
	return &damageWalker{s: s, memo: map[seal.ID]*treeDamage{}, onErr: onErr}
}

func (w *damageWalker) report(msg string) {
	if w.onErr != nil {
		w.onErr(msg)
	}
}

// tree returns the damage below tree id (nil: none).
func (w *damageWalker) tree(ctx context.Context, id seal.ID, depth int) (*treeDamage, error) {
	if d, ok := w.memo[id]; ok {
		return d, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out *treeDamage
	add := func(problem string, p seal.ID, current bool) {
		if out == nil {
			out = &treeDamage{problem: problem}
		}
		if current && !out.current {
			out.current, out.problem = true, problem
		}
		if !p.IsZero() && !slices.Contains(out.packs, p) {
			out.packs = append(out.packs, p)
		}
	}
	w.memo[id] = nil // a cycle reads as no damage; validate refuses it on restore
	if depth > maxDepth {
		msg := fmt.Sprintf("tree %s: nested deeper than %d", id, maxDepth)
		w.report(msg)
		add(msg, seal.ID{}, true)
		w.memo[id] = out
		return out, nil
	}
	if p, ok := w.touched[id]; ok {
		add(fmt.Sprintf("tree %s is in damaged pack %s", id, p), p, false)
	}
	t, err := w.load(ctx, id)
	if err != nil {
		msg := fmt.Sprintf("tree %s: %v", id, err)
		w.report(msg)
		_, p := w.s.blobState(id, pack.TreeBlob)
		if p.IsZero() {
			if l, ok := w.s.lookup(id); ok && w.s.isDamaged(l.pack) {
				p = l.pack
			}
		}
		add(msg, p, true)
		w.memo[id] = out
		return out, nil
	}
	for i := range t.Nodes {
		n := &t.Nodes[i]
		switch n.Type {
		case TypeDir:
			sub, err := w.tree(ctx, *n.Subtree, depth+1)
			if err != nil {
				return nil, err
			}
			if sub != nil {
				add(sub.problem, seal.ID{}, sub.current)
				for _, p := range sub.packs {
					add("", p, false)
				}
			}
		case TypeFile:
			var total int64
			ok := true
			for _, c := range n.Content {
				if p, ok := w.touched[c]; ok {
					add(fmt.Sprintf("tree %s: file %q: data %s is lost in damaged pack %s", id, n.Name, c, p), p, false)
				}
				if msg, p := w.s.blobState(c, pack.DataBlob); msg != "" {
					msg = fmt.Sprintf("tree %s: file %q: %s", id, n.Name, msg)
					w.report(msg)
					add(msg, p, true)
					ok = false
					continue
				}
				loc, _ := w.s.lookup(c)
				total += int64(loc.blob.RawLength)
			}
			if ok && total != n.dataLen() {
				msg := fmt.Sprintf("tree %s: file %q: chunks hold %d bytes, the file %d", id, n.Name, total, n.dataLen())
				w.report(msg)
				add(msg, seal.ID{}, true)
			}
		}
	}
	w.memo[id] = out
	return out, nil
}

// load reads and validates one tree from the repository.
func (w *damageWalker) load(ctx context.Context, id seal.ID) (*Tree, error) {
	data, err := w.s.loadBlob(ctx, pack.TreeBlob, id, nil)
	if err != nil {
		return nil, err
	}
	t, err := decodeTree(data)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// isDamaged reports whether pack id carries a damage mark.
func (s *Scope) isDamaged(id seal.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.damaged[id] != nil
}

// snapshotDamage walks manifest m and returns its damage (nil: none).
func (w *damageWalker) snapshot(ctx context.Context, m *Manifest) (*SnapshotDamage, error) {
	d, err := w.tree(ctx, m.Tree, 0)
	if err != nil || d == nil {
		return nil, err
	}
	if !d.current {
		// Only lost blobs stored again since: damaged if it was taken
		// before the loss was found (else its push stored them anew).
		before := false
		for _, p := range d.packs {
			if f, ok := w.found[p]; ok && m.Time.Before(f) {
				before = true
			}
		}
		if !before {
			return nil, nil
		}
	}
	packs := slices.Clone(d.packs)
	slices.SortFunc(packs, func(a, b seal.ID) int { return strings.Compare(a.String(), b.String()) })
	return &SnapshotDamage{ID: m.ID, Source: m.Source, Time: m.Time, Labels: m.Labels, Problem: d.problem, Packs: packs}, nil
}

// DamagedSnapshots lists the scope's snapshots that cannot be restored
// completely: they reference a tree or chunk that is missing from the
// index or unreadable in a damaged pack. Snapshots whose manifest cannot
// be read are listed too.
func (s *Scope) DamagedSnapshots(ctx context.Context) ([]SnapshotDamage, error) {
	if err := s.loadIndex(ctx); err != nil {
		return nil, err
	}
	return s.damagedSnapshots(ctx, newDamageWalker(s, nil))
}

func (s *Scope) damagedSnapshots(ctx context.Context, w *damageWalker) ([]SnapshotDamage, error) {
	ids, err := s.manifestIDs(ctx)
	if err != nil {
		return nil, err
	}
	var out []SnapshotDamage
	for _, id := range ids {
		m, err := s.Manifest(ctx, id)
		if errors.Is(err, errs.ErrNotFound) {
			continue
		}
		if err != nil {
			out = append(out, SnapshotDamage{ID: id, Problem: err.Error()})
			continue
		}
		d, err := w.snapshot(ctx, m)
		if err != nil {
			return nil, err
		}
		if d != nil {
			out = append(out, *d)
		}
	}
	slices.SortFunc(out, func(a, b SnapshotDamage) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return strings.Compare(a.ID.String(), b.ID.String())
	})
	return out, nil
}
