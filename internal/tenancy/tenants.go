package tenancy

import (
	"context"
	"errors"
	"fmt"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Tenants.
//
// A tenant owns sandboxes, volumes, snapshots, templates and keys; the
// store answers another tenant's ids as absent ones. Who may call these
// methods (admin keys) is decided by the API (api/authz.go). Suspending
// and deleting a tenant act on its sandboxes, so they are the sandbox
// service's (internal/sandbox/tenant_purge.go), which stores the state
// through SetTenantState.
// View is the API's view of a tenant record.
func View(t store.Tenant) client.Tenant {
	st := t.State
	if st == "" {
		st = store.TenantActive
	}
	return client.Tenant{ID: t.ID, Name: t.Name, State: st, CreatedAt: t.CreatedAt, SuspendedAt: t.SuspendedAt}
}

// ReadTenant reads a tenant's record, saying so as a user reads it when
// absent (errs.ErrNotFound).
func (s *Service) ReadTenant(ctx context.Context, id string) (store.Tenant, error) {
	t, err := s.st.GetTenant(ctx, id)
	if errors.Is(err, errs.ErrNotFound) {
		return t, fmt.Errorf("tenant %s: %w (stead tenant ls shows the tenants)", id, errs.ErrNotFound)
	}
	return t, err
}

// CreateTenant makes a tenant. Its id is a name: 1 to 48 lowercase
// letters, digits and inner dashes.
func (s *Service) CreateTenant(ctx context.Context, req client.CreateTenantRequest) (client.Tenant, error) {
	if !validTenantID(req.ID) {
		return client.Tenant{}, fmt.Errorf("tenant id %q: use 1 to 48 lowercase letters, digits and inner dashes: %w", req.ID, errs.ErrInvalid)
	}
	name := req.Name
	if name == "" {
		name = req.ID
	}
	t := store.Tenant{ID: req.ID, Name: name, State: store.TenantActive, CreatedAt: s.now()}
	if err := s.st.CreateTenant(ctx, t); err != nil {
		if errors.Is(err, errs.ErrConflict) {
			return client.Tenant{}, fmt.Errorf("tenant %s exists already: %w", req.ID, errs.ErrConflict)
		}
		return client.Tenant{}, err
	}
	s.log.Info("tenant created", "tenant", t.ID)
	return View(t), nil
}

// validTenantID reports whether id is a tenant id: 1 to 48 of a-z 0-9
// and inner dashes.
func validTenantID(id string) bool {
	if id == "" || len(id) > 48 || id[0] == '-' || id[len(id)-1] == '-' {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ListTenants lists every tenant.
func (s *Service) ListTenants(ctx context.Context) ([]client.Tenant, error) {
	list, err := s.st.ListTenants(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]client.Tenant, 0, len(list))
	for _, t := range list {
		out = append(out, View(t))
	}
	return out, nil
}

// GetTenant describes one tenant.
func (s *Service) GetTenant(ctx context.Context, id string) (client.Tenant, error) {
	t, err := s.ReadTenant(ctx, id)
	if err != nil {
		return client.Tenant{}, err
	}
	return View(t), nil
}

// UnsuspendTenant lets the tenant's keys work again; its sandboxes stay
// stopped until started.
func (s *Service) UnsuspendTenant(ctx context.Context, id string) (client.Tenant, error) {
	t, err := s.SetTenantState(ctx, id, store.TenantActive)
	if err != nil {
		return client.Tenant{}, err
	}
	return View(t), nil
}

// SetTenantState stores the tenant's state (a no-op when it has it),
// audited as "tenant.<state>".
func (s *Service) SetTenantState(ctx context.Context, id, state string) (store.Tenant, error) {
	t, err := s.ReadTenant(ctx, id)
	if err != nil {
		return t, err
	}
	if t.State == state {
		return t, nil
	}
	t.State, t.SuspendedAt = state, nil
	if state == store.TenantSuspended {
		now := s.now()
		t.SuspendedAt = &now
	}
	if err := s.st.UpdateTenant(ctx, t); err != nil {
		return t, fmt.Errorf("set tenant %s %s: %w", id, state, err)
	}
	s.log.Info("tenant state changed", "tenant", id, "state", state)
	s.record(ctx, id, "tenant."+state, id, nil)
	return t, nil
}

// TenantMayRun refuses to start or resume a sandbox of a suspended tenant,
// whoever asks (a wake on a port request, a schedule, a rollback's
// restart): errs.ErrForbidden.
func (s *Service) TenantMayRun(ctx context.Context, tenant string) error {
	t, err := s.st.GetTenant(ctx, tenant)
	if err != nil {
		return fmt.Errorf("tenant %s: %w", tenant, err)
	}
	if t.State == store.TenantSuspended {
		return fmt.Errorf("tenant %s is suspended: its sandboxes stay stopped until an admin runs `stead tenant unsuspend %s`: %w",
			tenant, tenant, errs.ErrForbidden)
	}
	return nil
}
