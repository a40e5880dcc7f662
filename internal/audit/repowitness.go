package audit

import (
	"context"
	"fmt"

	"github.com/stead-dev/stead/internal/store"
)

// RecordStore keeps small sealed documents: a scope of the off-box
// repository (*repo.Scope implements it), encrypted and authenticated under
// the repository's keys.
type RecordStore interface {
	// PutRecord stores v (as JSON) under kind/id atomically, replacing
	// the previous one.
	PutRecord(ctx context.Context, kind, id string, v any) error
	// GetRecord decodes the record kind/id into v; errs.ErrNotFound
	// (wrapped) when there is none.
	GetRecord(ctx context.Context, kind, id string, v any) error
}

// RepoWitness keeps the witness as a sealed record in the off-box
// repository: record "audit-witness/<key id>" of the scope open returns,
// one per daemon (per audit key), so daemons sharing a repository do not
// overwrite each other's. It is independent of pushes: the Log writes it
// on its checkpoint interval and on Close.
type RepoWitness struct {
	open  func(ctx context.Context) (RecordStore, error)
	id    string
	where string
}

var _ Witness = (*RepoWitness)(nil)

// witnessRecordKind is the record kind of repository witnesses.
const witnessRecordKind = "audit-witness"

// NewRepoWitness returns the witness of the daemon whose audit key has id
// keyID (Log.KeyID), kept in the record store open returns (called on
// every use, so the repository may be initialised after the daemon
// starts). where names the repository in messages.
func NewRepoWitness(open func(ctx context.Context) (RecordStore, error), keyID, where string) *RepoWitness {
	return &RepoWitness{open: open, id: keyID, where: where}
}

// Name implements Witness.
func (w *RepoWitness) Name() string { return "repository " + w.where }

// Load implements Witness.
func (w *RepoWitness) Load(ctx context.Context) (store.AuditCheckpoint, error) {
	rs, err := w.open(ctx)
	if err != nil {
		return store.AuditCheckpoint{}, fmt.Errorf("load audit witness from %s: %w", w.Name(), err)
	}
	var d witnessDoc
	if err := rs.GetRecord(ctx, witnessRecordKind, w.id, &d); err != nil {
		return store.AuditCheckpoint{}, fmt.Errorf("load audit witness from %s: %w", w.Name(), err)
	}
	c, err := fromDoc(d)
	if err != nil {
		return store.AuditCheckpoint{}, fmt.Errorf("load audit witness from %s: %w", w.Name(), err)
	}
	return c, nil
}

// Store implements Witness.
func (w *RepoWitness) Store(ctx context.Context, c store.AuditCheckpoint) error {
	rs, err := w.open(ctx)
	if err != nil {
		return fmt.Errorf("store audit witness in %s: %w", w.Name(), err)
	}
	if err := rs.PutRecord(ctx, witnessRecordKind, w.id, toDoc(c)); err != nil {
		return fmt.Errorf("store audit witness in %s (seq %d): %w", w.Name(), c.Seq, err)
	}
	return nil
}
