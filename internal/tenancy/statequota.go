package tenancy

import (
	"context"
	"fmt"
	"time"

	"github.com/stead-dev/stead/internal/errs"
)

// The state_bytes quota bounds what a tenant keeps outside its sandboxes:
// every kept checkpoint version, task and observation payload, key-value
// value and session event payload (store.QuotaStore.StateBytes). The
// state, session and tasks services ask admitState before every write
// that adds bytes (api.StateAdmitFunc; internal/sandbox wires it); a refusal is the 429 of the other
// quotas and changes nothing.
//
// Counting every write with a query over all the tenant's state would put
// a table scan on the agents' hottest path (session appends), so the count
// is kept per tenant: read from the store at most every StateQuotaTTL,
// with each admitted write added to it in between. Deletions, prunes and
// versions a checkpoint's keep drops show at the next read; until then the
// count is too high, never too low (a write refused by the store after its
// admission also counts until then).

// StateQuotaTTL is how long a tenant's counted state bytes are reused.
const StateQuotaTTL = 10 * time.Second

// stateUse is a tenant's counted state bytes and when they were read.
type stateUse struct {
	at    time.Time
	bytes int64
}

// AdmitState admits a write adding n bytes of the tenant's state, or
// refuses it with an *errs.QuotaError for state_bytes.
func (s *Service) AdmitState(ctx context.Context, tenant string, n int64) error {
	q, err := s.st.GetTenantQuota(ctx, tenant)
	if err != nil {
		return fmt.Errorf("read the tenant's quotas: %w", err)
	}
	if q.StateBytes == nil || *q.StateBytes <= 0 {
		return nil
	}
	g := s.quota.get(tenant)
	g.mu.Lock()
	defer g.mu.Unlock()
	now := s.now()
	if g.state.at.IsZero() || now.Sub(g.state.at) >= StateQuotaTTL || now.Before(g.state.at) {
		b, err := s.st.StateBytes(ctx, tenant)
		if err != nil {
			return fmt.Errorf("count the tenant's state: %w", err)
		}
		g.state = stateUse{at: now, bytes: b}
	}
	if n > 0 && addSat(g.state.bytes, n) > *q.StateBytes {
		return s.refuseQuota(ctx, tenant, &errs.QuotaError{Quota: errs.QuotaStateBytes, Limit: float64(*q.StateBytes),
			Usage: float64(g.state.bytes), Requested: float64(n), Op: "write state"})
	}
	g.state.bytes = addSat(g.state.bytes, n)
	return nil
}
