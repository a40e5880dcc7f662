package repo

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/repo/pack"
)

// Records are small sealed JSON documents a caller keeps in a scope next to
// its snapshots (stead keeps its drill history there, so it survives the
// machine like the snapshots do): scopes/<scope>/records/<kind>/<id>.

func recordKey(scope, kind, id string) string {
	return scopePrefix(scope) + "records/" + kind + "/" + id
}

// recordLabel is the AAD label of record kind/id.
func recordLabel(kind, id string) string { return "stead record v1 " + kind + "/" + id }

// PutRecord stores v as record kind/id (replacing one of that id).
func (s *Scope) PutRecord(ctx context.Context, kind, id string, v any) error {
	if !pool.ValidID(kind) || !pool.ValidID(id) {
		return fmt.Errorf("record %s/%s: %w", kind, id, errs.ErrInvalid)
	}
	data, err := pack.SealDoc(s.codec, recordLabel(kind, id), v)
	if err != nil {
		return err
	}
	return s.r.store.Put(ctx, recordKey(s.name, kind, id), data)
}

// Records decodes every record of kind, in id order, calling fn with a
// decoder for each. A record that fails authentication is an error.
func (s *Scope) Records(ctx context.Context, kind string, fn func(id string, decode func(v any) error) error) error {
	if !pool.ValidID(kind) {
		return fmt.Errorf("records %s: %w", kind, errs.ErrInvalid)
	}
	infos, err := s.r.store.List(ctx, scopePrefix(s.name)+"records/"+kind+"/")
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(infos))
	for _, in := range infos {
		keys = append(keys, in.Key)
	}
	slices.Sort(keys)
	for _, k := range keys {
		id := path.Base(k)
		data, err := s.r.store.Get(ctx, k)
		if errors.Is(err, errs.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		label := recordLabel(kind, id)
		if err := fn(id, func(v any) error { return pack.OpenDoc(s.codec, label, data, v) }); err != nil {
			return err
		}
	}
	return nil
}

// GetRecord decodes record kind/id into v: errs.ErrNotFound (wrapped) when
// there is none; a record that fails authentication is an error.
func (s *Scope) GetRecord(ctx context.Context, kind, id string, v any) error {
	if !pool.ValidID(kind) || !pool.ValidID(id) {
		return fmt.Errorf("record %s/%s: %w", kind, id, errs.ErrInvalid)
	}
	data, err := s.r.store.Get(ctx, recordKey(s.name, kind, id))
	if err != nil {
		return fmt.Errorf("record %s/%s: %w", kind, id, err)
	}
	if err := pack.OpenDoc(s.codec, "stead record v1 "+kind+"/"+id, data, v); err != nil {
		return fmt.Errorf("record %s/%s: %w", kind, id, err)
	}
	return nil
}
