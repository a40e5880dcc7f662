package sandbox

import (
	"context"

	"github.com/stead-dev/stead/internal/audit"
)

// auditScope is the repository scope that keeps the audit trail's
// witnesses (one record per daemon), apart from every tenant's data.
const auditScope = "audit"

// AuditRecords opens the repository scope that keeps the audit trail's
// witness, creating it on first use; errors as the repository verbs return
// them (no repository configured or initialised, wrong key, ...).
func (s *Service) AuditRecords(ctx context.Context) (audit.RecordStore, error) {
	r, err := s.repository(ctx)
	if err != nil {
		return nil, err
	}
	return r.Scope(ctx, auditScope, true)
}
