package audit

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Backend serves the audit trail to the API: it implements
// api.AuditBackend (embed it in the API backend).
//
// Access: every call needs an admin principal. An admin of
// store.DefaultTenant (the daemon's operator) reads every tenant's
// entries; any other admin reads only its own tenant's. Verify and
// checkpoint cover the whole trail and reveal no entry.
type Backend struct {
	log *Log
}

var _ api.AuditBackend = (*Backend)(nil)

// NewBackend returns the API backend of l.
func NewBackend(l *Log) *Backend { return &Backend{log: l} }

// maxListLimit caps one ListAudit page.
const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

// errNoTrail is returned by a nil Backend (embedded but never set).
var errNoTrail = fmt.Errorf("the audit trail is not configured in this daemon: %w", errs.ErrUnsupported)

// RecordAPIRequest appends an API request to the trail.
func (b *Backend) RecordAPIRequest(ctx context.Context, ev api.AuditEvent) error {
	if b == nil || b.log == nil {
		return errNoTrail
	}
	return b.log.Record(ctx, Entry{Actor: ev.Actor, Tenant: ev.Tenant, Action: ev.Action, Target: ev.Target,
		Outcome: strconv.Itoa(ev.Status)})
}

// scope returns the tenant p may read ("" for all: an admin key acting in
// the default tenant), or an error when p does not administer its tenant.
func (b *Backend) scope(p api.Principal) (string, error) {
	if b == nil || b.log == nil {
		return "", errNoTrail
	}
	if !p.AdministersTenant() {
		return "", fmt.Errorf("the audit trail needs a tenant-admin or admin key: %w", errs.ErrForbidden)
	}
	if p.Admin && p.TenantID == store.DefaultTenant {
		return "", nil
	}
	return p.TenantID, nil
}

// ListAudit returns one page of entries.
func (b *Backend) ListAudit(ctx context.Context, p api.Principal, q client.AuditQuery) ([]client.AuditEntry, error) {
	tenant, err := b.scope(p)
	if err != nil {
		return nil, err
	}
	limit := q.Limit
	switch {
	case limit <= 0:
		limit = defaultListLimit
	case limit > maxListLimit:
		limit = maxListLimit
	}
	b.log.pruneMu.RLock()
	defer b.log.pruneMu.RUnlock()
	es, err := b.log.st.ListAudit(ctx, store.AuditFilter{AfterSeq: q.After, Since: q.Since, Tenant: tenant, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("list audit trail: %w", err)
	}
	out := make([]client.AuditEntry, len(es))
	for i, e := range es {
		out[i] = ToClient(e)
	}
	return out, nil
}

// ExportAudit writes the entries as JSONL.
func (b *Backend) ExportAudit(ctx context.Context, p api.Principal, q client.AuditQuery, w io.Writer) error {
	tenant, err := b.scope(p)
	if err != nil {
		return err
	}
	return b.log.Export(ctx, w, store.AuditFilter{AfterSeq: q.After, Since: q.Since, Tenant: tenant})
}

// VerifyAudit verifies the whole trail.
func (b *Backend) VerifyAudit(ctx context.Context, p api.Principal) (client.AuditReport, error) {
	if _, err := b.scope(p); err != nil {
		return client.AuditReport{}, err
	}
	return b.log.Verify(ctx)
}

// CheckpointAudit signs a checkpoint of the head.
func (b *Backend) CheckpointAudit(ctx context.Context, p api.Principal) (client.AuditCheckpoint, error) {
	if _, err := b.scope(p); err != nil {
		return client.AuditCheckpoint{}, err
	}
	c, err := b.log.Checkpoint(ctx)
	if err != nil {
		return client.AuditCheckpoint{}, err
	}
	return client.AuditCheckpoint{Seq: c.Seq, Hash: hex.EncodeToString(c.Hash), Start: c.Start, Time: c.Time,
		KeyID: c.KeyID, Signature: hex.EncodeToString(c.Signature)}, nil
}

// ToClient converts a stored entry to its wire form.
func ToClient(e store.AuditEntry) client.AuditEntry {
	return client.AuditEntry{Seq: e.Seq, Time: e.Time, Actor: e.Actor, Tenant: e.Tenant, Action: e.Action,
		Target: e.Target, Outcome: e.Outcome, PrevHash: hex.EncodeToString(e.PrevHash), Hash: hex.EncodeToString(e.Hash)}
}

// Export writes the entries f selects (its Limit ignored) to w as JSONL,
// one client.AuditEntry per line, by seq. A consumer can re-check each
// line's hash with HashEntry and the links between consecutive lines.
func (l *Log) Export(ctx context.Context, w io.Writer, f store.AuditFilter) error {
	l.pruneMu.RLock()
	defer l.pruneMu.RUnlock()
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for {
		f.Limit = verifyPage
		page, err := l.st.ListAudit(ctx, f)
		if err != nil {
			return fmt.Errorf("export audit trail: %w", err)
		}
		for _, e := range page {
			if err := enc.Encode(ToClient(e)); err != nil {
				return fmt.Errorf("export audit trail: %w", err)
			}
		}
		if len(page) < verifyPage {
			break
		}
		f.AfterSeq = page[len(page)-1].Seq
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("export audit trail: %w", err)
	}
	return nil
}
