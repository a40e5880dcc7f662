package repo

import (
	"cmp"
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

// manifestLabel is the AAD label of sealed manifests.
const manifestLabel = "stead manifest v1"

// errNotInSnapshot means a path asked for is not in the snapshot.
var errNotInSnapshot = fmt.Errorf("path not in snapshot: %w", errs.ErrNotFound)

// Stats counts what a snapshot holds.
type Stats struct {
	Files int64 `json:"files"`
	Dirs  int64 `json:"dirs"`
	Other int64 `json:"other"`
	// Bytes is the apparent size of all regular files; DataBytes what their
	// data regions hold (less for sparse files).
	Bytes     int64 `json:"bytes"`
	DataBytes int64 `json:"data_bytes"`
	// AddedBytes is what the push that made the snapshot stored in the
	// repository (new packs and index, encrypted and compressed): what it
	// cost, beside the logical size above. 0 for older manifests.
	AddedBytes int64 `json:"added_bytes,omitempty"`
}

// Manifest is a pushed snapshot: a root tree plus what it was taken of.
type Manifest struct {
	// ID names the manifest object (seal.Hash of its sealed bytes); not stored inside.
	ID    seal.ID   `json:"-"`
	Scope string    `json:"scope"`
	Time  time.Time `json:"time"`
	Tree  seal.ID   `json:"tree"`
	// Root carries the metadata of the root directory itself (its Subtree is Tree).
	Root Node `json:"root"`
	// Parent is the manifest this push was incremental to (zero: full).
	Parent seal.ID `json:"parent,omitzero"`
	// Source names what was pushed ("sandbox/<id>", "volume/<id>"); retention
	// policies group manifests by it.
	Source string `json:"source"`
	Tenant string `json:"tenant,omitempty"`
	// Labels carry the caller's metadata (sandbox name, template, local
	// snapshot id, instance type ...).
	Labels map[string]string `json:"labels,omitempty"`
	// Digest is the tree digest of the source taken by the caller (optional).
	Digest string `json:"digest,omitempty"`
	Stats  Stats  `json:"stats"`
	// Writer is who pushed the manifest, and under which lease epoch
	// (zero in manifests written before it was recorded).
	Writer Writer `json:"writer,omitzero"`
}

// Writer is the node that pushed a manifest and the epoch of the lease it
// pushed under (a sandbox's owner lease; 0 when the source has none, as a
// volume). Readers that do not know the field ignore it, and manifests
// without it read as the zero Writer, so the format is unchanged both ways.
type Writer struct {
	Node  string `json:"node,omitempty"`
	Epoch int64  `json:"epoch,omitempty"`
}

// CompareManifests orders two manifests of one source from older to
// newer (-1, 0, +1): by the writer's lease epoch first, then by time, then
// by id. A node that lost a sandbox's lease may still write a manifest
// after the new owner's, later in time but at a lower epoch: it never
// counts as the newer one. Manifests without a writer (epoch 0) are older
// than every one with an epoch, as they were written before.
func CompareManifests(a, b *Manifest) int {
	if c := cmp.Compare(a.Writer.Epoch, b.Writer.Epoch); c != 0 {
		return c
	}
	if c := a.Time.Compare(b.Time); c != 0 {
		return c
	}
	return strings.Compare(a.ID.String(), b.ID.String())
}

// writeManifest seals and stores m, setting m.ID.
func (s *Scope) writeManifest(ctx context.Context, m *Manifest) error {
	data, err := pack.SealDoc(s.codec, manifestLabel, m)
	if err != nil {
		return fmt.Errorf("seal manifest: %w", err)
	}
	id := seal.Hash(data)
	if err := s.r.store.Put(ctx, manifestKey(s.name, id), data); err != nil {
		return fmt.Errorf("write manifest %s: %w", id, err)
	}
	m.ID = id
	return nil
}

// Manifest reads one manifest. errs.ErrNotFound if it is not in the scope.
func (s *Scope) Manifest(ctx context.Context, id seal.ID) (*Manifest, error) {
	data, err := s.cached(ctx, "snapshots", manifestKey(s.name, id), id)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", id, err)
	}
	var m Manifest
	if err := pack.OpenDoc(s.codec, manifestLabel, data, &m); err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", id, err)
	}
	if m.Scope != s.name {
		return nil, fmt.Errorf("read manifest %s: belongs to scope %q: %w", id, m.Scope, errs.ErrInvalid)
	}
	m.ID = id
	return &m, nil
}

// ResolveManifest finds a manifest by full id or unique prefix (>= 4 hex digits).
func (s *Scope) ResolveManifest(ctx context.Context, ref string) (*Manifest, error) {
	if id, err := seal.ParseID(ref); err == nil {
		return s.Manifest(ctx, id)
	}
	if len(ref) < 4 {
		return nil, fmt.Errorf("snapshot %q: give at least 4 hex digits: %w", ref, errs.ErrInvalid)
	}
	ids, err := s.manifestIDs(ctx)
	if err != nil {
		return nil, err
	}
	var match []seal.ID
	for _, id := range ids {
		if strings.HasPrefix(id.String(), ref) {
			match = append(match, id)
		}
	}
	switch len(match) {
	case 0:
		return nil, fmt.Errorf("snapshot %q: %w", ref, errs.ErrNotFound)
	case 1:
		return s.Manifest(ctx, match[0])
	}
	return nil, fmt.Errorf("snapshot %q is ambiguous (%d matches): %w", ref, len(match), errs.ErrInvalid)
}

func (s *Scope) manifestIDs(ctx context.Context) ([]seal.ID, error) {
	infos, err := s.r.store.List(ctx, scopePrefix(s.name)+"snapshots/")
	if err != nil {
		return nil, fmt.Errorf("list snapshots of %s: %w", s.name, err)
	}
	var ids []seal.ID
	for _, in := range infos {
		if id, err := seal.ParseID(path.Base(in.Key)); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Snapshots lists the scope's manifests, oldest first: by time across
// sources, and within one source as CompareManifests orders them (a stale
// writer's manifest goes before the new owner's, whatever its time). A
// manifest that cannot be read is an error (check reports which).
func (s *Scope) Snapshots(ctx context.Context) ([]*Manifest, error) {
	ids, err := s.manifestIDs(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Manifest, 0, len(ids))
	for _, id := range ids {
		m, err := s.Manifest(ctx, id)
		if errors.Is(err, errs.ErrNotFound) {
			continue // forgotten since the listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *Manifest) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return strings.Compare(a.ID.String(), b.ID.String())
	})
	orderSources(out)
	return out, nil
}

// orderSources reorders, in place, the manifests of each source among the
// positions the time order gave that source, as CompareManifests orders
// them: other sources' manifests keep their places.
func orderSources(ms []*Manifest) {
	pos := map[string][]int{}
	for i, m := range ms {
		pos[m.Source] = append(pos[m.Source], i)
	}
	for _, p := range pos {
		if len(p) < 2 {
			continue
		}
		group := make([]*Manifest, len(p))
		for j, i := range p {
			group[j] = ms[i]
		}
		slices.SortFunc(group, CompareManifests)
		for j, i := range p {
			ms[i] = group[j]
		}
	}
}

// Latest returns the newest manifest of source (CompareManifests: the
// highest writer epoch, then the newest time), or errs.ErrNotFound.
func (s *Scope) Latest(ctx context.Context, source string) (*Manifest, error) {
	all, err := s.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].Source == source {
			return all[i], nil
		}
	}
	return nil, fmt.Errorf("latest pushed snapshot of %s: %w", source, errs.ErrNotFound)
}

// Forget deletes manifests (their data stays until Prune). It holds the
// scope alone, as prune does, and stops when that hold ends.
func (s *Scope) Forget(ctx context.Context, ids ...seal.ID) (err error) {
	if len(ids) == 0 {
		return nil
	}
	s.lock.Lock()
	defer s.lock.Unlock()
	ctx, release, err := s.hold(ctx, true)
	if err != nil {
		return fmt.Errorf("forget: %w", err)
	}
	defer release()
	defer func() { err = whyStopped(ctx, err) }()
	for _, id := range ids {
		if err := stillHeld(ctx, "forgetting snapshot "+id.String()); err != nil {
			return fmt.Errorf("forget: %w", err)
		}
		if err := s.r.store.Delete(ctx, manifestKey(s.name, id)); err != nil {
			return fmt.Errorf("forget snapshot %s: %w", id, err)
		}
	}
	return nil
}

// splitPath splits a slash-separated path into its components, dropping
// empty ones and ".". ".." is kept so callers refuse it.
func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}
