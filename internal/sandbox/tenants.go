package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/store"
)

// Tenants.
//
// A tenant owns sandboxes, volumes, snapshots, templates and keys; the
// store answers another tenant's ids as absent ones. Who may call these
// methods (admin keys) is decided by the API (api/authz.go).
//
// Deleting a tenant, in this order (a crash part way leaves a suspended
// tenant whose delete can simply be run again):
//  1. suspend it, so none of its keys can add anything while it goes;
//  2. purge its sandboxes (stopping running ones), then its volumes (each
//     volume's repository scope erased first, see purgeVolume), then its
//     remaining local snapshots and its templates;
//  3. destroy its repository data key (Repository.Erase of "t-<tenant>"):
//     from then on nothing it pushed can be decrypted, whatever copies of
//     the objects survive; the audit trail records each erased scope;
//  4. remove the tenant with its keys from the store.

// tenantView is the API's view of a tenant.
func tenantView(t store.Tenant) client.Tenant {
	st := t.State
	if st == "" {
		st = store.TenantActive
	}
	return client.Tenant{ID: t.ID, Name: t.Name, State: st, CreatedAt: t.CreatedAt, SuspendedAt: t.SuspendedAt}
}

// getTenant reads a tenant, saying so as a user reads it when absent.
func (s *Service) getTenant(ctx context.Context, id string) (store.Tenant, error) {
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
	return tenantView(t), nil
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
		out = append(out, tenantView(t))
	}
	return out, nil
}

// GetTenant describes one tenant.
func (s *Service) GetTenant(ctx context.Context, id string) (client.Tenant, error) {
	t, err := s.getTenant(ctx, id)
	if err != nil {
		return client.Tenant{}, err
	}
	return tenantView(t), nil
}

// SuspendTenant refuses the tenant's keys and stops its running and
// paused sandboxes. The default tenant cannot be suspended (it holds the
// daemon's admin key).
func (s *Service) SuspendTenant(ctx context.Context, id string) (client.Tenant, error) {
	if id == store.DefaultTenant {
		return client.Tenant{}, fmt.Errorf("the default tenant holds the daemon's admin key and cannot be suspended: %w", errs.ErrForbidden)
	}
	t, err := s.setTenantState(ctx, id, store.TenantSuspended)
	if err != nil {
		return client.Tenant{}, err
	}
	return tenantView(t), s.stopTenant(context.WithoutCancel(ctx), id)
}

// UnsuspendTenant lets the tenant's keys work again; its sandboxes stay
// stopped until started.
func (s *Service) UnsuspendTenant(ctx context.Context, id string) (client.Tenant, error) {
	t, err := s.setTenantState(ctx, id, store.TenantActive)
	if err != nil {
		return client.Tenant{}, err
	}
	return tenantView(t), nil
}

// setTenantState stores the tenant's state (a no-op when it has it).
func (s *Service) setTenantState(ctx context.Context, id, state string) (store.Tenant, error) {
	t, err := s.getTenant(ctx, id)
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

// tenantMayRun refuses to start or resume a sandbox of a suspended tenant,
// whoever asks (a wake on a port request, a schedule, a rollback's
// restart): errs.ErrForbidden.
func (s *Service) tenantMayRun(ctx context.Context, tenant string) error {
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

// stopTenant stops every running or paused sandbox of the tenant.
func (s *Service) stopTenant(ctx context.Context, tenant string) error {
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: tenant,
		States: []store.SandboxState{store.StateRunning, store.StatePaused, store.StateError}})
	if err != nil {
		return fmt.Errorf("list sandboxes of tenant %s: %w", tenant, err)
	}
	var errList []error
	for _, sb := range list {
		if _, err := s.stop(ctx, tenant, sb.ID, "tenant_suspended"); err != nil && !isAlready(err) && !errors.Is(err, errs.ErrNotFound) {
			errList = append(errList, fmt.Errorf("stop sandbox %s: %w", sb.Name, err))
		}
	}
	return errors.Join(errList...)
}

// DeleteTenant purges everything the tenant owns and erases its pushed
// data cryptographically (see the order above).
func (s *Service) DeleteTenant(ctx context.Context, id string) (client.TenantDeletion, error) {
	if id == store.DefaultTenant {
		return client.TenantDeletion{}, fmt.Errorf("the default tenant cannot be deleted: %w", errs.ErrForbidden)
	}
	ctx = context.WithoutCancel(ctx) // once begun, it runs to the end
	if _, err := s.setTenantState(ctx, id, store.TenantSuspended); err != nil {
		return client.TenantDeletion{}, err
	}
	d := client.TenantDeletion{Tenant: id}
	fail := func(err error) (client.TenantDeletion, error) {
		s.record(ctx, id, "tenant.delete", id, err)
		return d, fmt.Errorf("delete tenant %s (run it again to finish): %w", id, err)
	}

	sbs, err := s.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: id, IncludeDeleted: true,
		States: []store.SandboxState{store.StateCreating, store.StateRunning, store.StatePaused, store.StateStopped,
			store.StateDeleted, store.StateError, store.StateArchived}})
	if err != nil {
		return fail(err)
	}
	for _, sb := range sbs {
		if err := s.purgeForTenant(ctx, sb); err != nil {
			return fail(fmt.Errorf("purge sandbox %s: %w", sb.Name, err))
		}
		d.Sandboxes++
	}

	vols, err := s.st.ListVolumes(ctx, id, true)
	if err != nil {
		return fail(err)
	}
	for _, v := range vols {
		unlock := s.lock(v.ID)
		err := s.purgeVolume(ctx, v)
		unlock()
		if err != nil {
			return fail(err)
		}
		d.Volumes++
		if s.opts.Repo != nil {
			d.ErasedScopes = append(d.ErasedScopes, volumeScope(v.ID))
			s.record(ctx, id, "repo.erase", volumeScope(v.ID), nil)
		}
	}

	snaps, err := s.st.ListSnapshots(ctx, id, "")
	if err != nil {
		return fail(err)
	}
	for _, sn := range snaps {
		if err := s.DeleteSnapshot(ctx, id, sn.ID); err != nil && !errors.Is(err, errs.ErrNotFound) {
			return fail(err)
		}
		d.Snapshots++
	}

	tmpls, err := s.st.ListTemplates(ctx, id)
	if err != nil {
		return fail(err)
	}
	for _, t := range tmpls {
		if err := s.DeleteTemplate(ctx, id, t.ID); err != nil && !errors.Is(err, errs.ErrNotFound) {
			return fail(err)
		}
		d.Templates++
	}

	scope, err := s.eraseTenantScope(ctx, id)
	if err != nil {
		return fail(err)
	}
	if scope != "" {
		s.record(ctx, id, "repo.erase", scope, nil)
		d.ErasedScopes = append(d.ErasedScopes, scope)
	}

	keys, err := s.st.ListAPIKeys(ctx, id)
	if err != nil {
		return fail(err)
	}
	d.Keys = len(keys)
	// Its events and webhooks (with their sealed secrets) go too.
	if err := s.st.PurgeTenantEvents(ctx, id); err != nil {
		return fail(err)
	}
	if err := s.st.DeleteTenant(ctx, id); err != nil {
		return fail(err)
	}
	s.record(ctx, id, "tenant.delete", id, nil)
	s.log.Info("tenant deleted", "tenant", id, "sandboxes", d.Sandboxes, "volumes", d.Volumes,
		"snapshots", d.Snapshots, "keys", d.Keys, "erased_scopes", d.ErasedScopes)
	return d, nil
}

// purgeForTenant destroys one sandbox of a tenant being deleted, from any
// state, through the sandbox's own purge path.
func (s *Service) purgeForTenant(ctx context.Context, sb store.Sandbox) error {
	unlock := s.lock(sb.ID)
	defer unlock()
	cur, err := s.st.GetSandbox(ctx, sb.TenantID, sb.ID)
	if errors.Is(err, errs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	switch cur.State {
	case store.StateRunning, store.StatePaused, store.StateError:
		if cur, err = s.stopLocked(ctx, cur, "deleted"); err != nil {
			return err
		}
	}
	return s.purgeLocked(ctx, cur)
}

// eraseTenantScope destroys the data key of the tenant's repository scope
// and returns the scope's name ("" when there is no repository or the
// tenant never pushed).
func (s *Service) eraseTenantScope(ctx context.Context, tenant string) (string, error) {
	if s.opts.Repo == nil {
		return "", nil
	}
	if _, err := s.opts.Repo.Store.Stat(ctx, "config"); errors.Is(err, errs.ErrNotFound) {
		return "", nil // no repository yet: nothing was pushed
	}
	r, err := s.repository(ctx)
	if errors.Is(err, repo.ErrNoRepository) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("erase pushed data of tenant %s: %w", tenant, err)
	}
	name := tenantScope(tenant)
	if err := r.Erase(ctx, name); err != nil {
		return "", fmt.Errorf("erase pushed data of tenant %s: %w", tenant, err)
	}
	return name, nil
}
