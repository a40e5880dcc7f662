package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/tenancy"
)

// The node-local half of tenants: what acts on a tenant's sandboxes,
// volumes, snapshots, templates and pushed data. The tenant records
// themselves are internal/tenancy's (cluster-wide).
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
//  4. remove the tenant with its keys from the store;
//  5. in a cluster, have every live node delete its own datasets of the
//     tenant (volumes, local snapshots, templates, lost copies:
//     tenant_local.go); a dead node does when it starts again.

// SuspendTenant refuses the tenant's keys and stops its running and
// paused sandboxes. The default tenant cannot be suspended (it holds the
// daemon's admin key).
func (s *Service) SuspendTenant(ctx context.Context, id string) (client.Tenant, error) {
	if id == store.DefaultTenant {
		return client.Tenant{}, fmt.Errorf("the default tenant holds the daemon's admin key and cannot be suspended: %w", errs.ErrForbidden)
	}
	t, err := s.SetTenantState(ctx, id, store.TenantSuspended)
	if err != nil {
		return client.Tenant{}, err
	}
	return tenancy.View(t), s.stopTenant(context.WithoutCancel(ctx), id)
}

// stopTenant stops every running or paused sandbox of the tenant, each
// through the node that holds it (tenantActs).
func (s *Service) stopTenant(ctx context.Context, tenant string) error {
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: tenant,
		States: []store.SandboxState{store.StateRunning, store.StatePaused, store.StateError}})
	if err != nil {
		return fmt.Errorf("list sandboxes of tenant %s: %w", tenant, err)
	}
	acts := s.tenantActs()
	var errList []error
	for _, sb := range list {
		if err := acts.TenantStop(ctx, tenant, sb.ID); err != nil && !errors.Is(err, errs.ErrNotFound) {
			errList = append(errList, fmt.Errorf("stop sandbox %s: %w", sb.Name, err))
		}
	}
	return errors.Join(errList...)
}

// SetTenantRelay sets what a tenant's suspension and deletion act on each
// sandbox through: in a cluster, cluster.Router.RelayTenant of this
// service, which sends the stop or purge of a sandbox another live node
// holds to that node. Unset (a single node), the service acts itself.
// Call it before serving.
func (s *Service) SetTenantRelay(r cluster.TenantActions) { s.tenantRelay = r }

// tenantActs is what a tenant's suspension and deletion act through.
func (s *Service) tenantActs() cluster.TenantActions {
	if s.tenantRelay != nil {
		return s.tenantRelay
	}
	return s
}

// TenantStop stops a running or paused sandbox of a suspended tenant on
// this node (cluster.TenantActions; a node call from the node suspending
// the tenant reaches it through cluster.HandleTenant). A sandbox already
// stopped or gone is no error. One this node serves without holding its
// lease has a dead owner: nothing of it runs on a live node, and while
// its lease is in force nothing may be done (errs.ErrConflict: run the
// suspension again once it lapsed); once it lapsed, failover marks it
// lost, and an adoption leaves it stopped while the tenant is suspended.
func (s *Service) TenantStop(ctx context.Context, tenant, id string) error {
	if s.clustered() && !s.holds(id) {
		own, err := s.st.GetOwnership(ctx, id)
		switch {
		case errors.Is(err, errs.ErrNotFound):
			return nil // it never had a lease: nothing of it runs anywhere
		case err != nil:
			return fmt.Errorf("stop sandbox %s: %w", id, err)
		case s.now().Before(own.ExpiresAt):
			return fmt.Errorf("stop sandbox %s: its node %s is not alive, and its lease is in force until %s; run the suspension again once it lapsed: %w",
				id, own.Node, own.ExpiresAt.UTC().Format(time.RFC3339), errs.ErrConflict)
		}
		s.log.Info("tenant suspended: a sandbox of a dead node is not stopped here (failover adopts it stopped)", "sandbox", id, "tenant", tenant, "node", own.Node)
		return nil
	}
	if _, err := s.stop(ctx, tenant, id, "tenant_suspended"); err != nil && !isAlready(err) && !errors.Is(err, errs.ErrNotFound) {
		return err
	}
	return nil
}

// TenantPurge destroys one sandbox of a tenant being deleted, from any
// state (cluster.TenantActions; cluster.HandleTenant serves the node call
// of the node deleting the tenant). A sandbox already gone is no error.
func (s *Service) TenantPurge(ctx context.Context, tenant, id string) error {
	sb, err := s.st.GetSandbox(ctx, tenant, id)
	if errors.Is(err, errs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.purgeForTenant(ctx, sb)
}

// DeleteTenant purges everything the tenant owns and erases its pushed
// data cryptographically (see the order above).
func (s *Service) DeleteTenant(ctx context.Context, id string) (client.TenantDeletion, error) {
	if id == store.DefaultTenant {
		return client.TenantDeletion{}, fmt.Errorf("the default tenant cannot be deleted: %w", errs.ErrForbidden)
	}
	ctx = context.WithoutCancel(ctx) // once begun, it runs to the end
	if _, err := s.SetTenantState(ctx, id, store.TenantSuspended); err != nil {
		return client.TenantDeletion{}, err
	}
	d := client.TenantDeletion{Tenant: id}
	fail := func(err error) (client.TenantDeletion, error) {
		s.record(ctx, id, "tenant.delete", id, err)
		return d, fmt.Errorf("delete tenant %s (run it again to finish): %w", id, err)
	}

	sbs, err := s.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: id, IncludeDeleted: true,
		States: []store.SandboxState{store.StateCreating, store.StateRunning, store.StatePaused, store.StateStopped,
			store.StateDeleted, store.StateError, store.StateArchived, store.StateLost}})
	if err != nil {
		return fail(err)
	}
	local, err := s.tenantLocalOf(ctx, id, sbs)
	if err != nil {
		return fail(err)
	}
	acts := s.tenantActs()
	for _, sb := range sbs {
		if err := acts.TenantPurge(ctx, id, sb.ID); err != nil && !errors.Is(err, errs.ErrNotFound) {
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
	// Its records are gone: every live node deletes its own datasets of
	// it (a node that fails here, or is dead, does at its next start).
	if err := acts.TenantPurgeLocal(ctx, local); err != nil {
		s.record(ctx, id, "tenant.purge_local", id, err)
		s.log.Error("tenant deleted; some node's datasets of it stay until that node starts again", "tenant", id, "err", err)
	}
	s.log.Info("tenant deleted", "tenant", id, "sandboxes", d.Sandboxes, "volumes", d.Volumes,
		"snapshots", d.Snapshots, "keys", d.Keys, "erased_scopes", d.ErasedScopes)
	return d, nil
}

// purgeForTenant destroys one sandbox of a tenant being deleted, from any
// state, through the sandbox's own purge path. A sandbox this node serves
// without holding its lease (its owner is dead, or it never had one) is
// purged here as a stopped sandbox: its lease is taken (once lapsed; in
// force, it is errs.ErrConflict: run the delete again later) and its
// record purged under it; nothing of it runs here. Its root on the dead
// node becomes a lost copy there when that node returns (Reconcile:
// keepPurgedRoots).
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
	if !s.holds(cur.ID) {
		if _, err := s.opts.Owner.Acquire(ctx, cur.ID); err != nil {
			return fmt.Errorf("take its lease (its node is not alive; run the delete again once the lease lapsed): %w", err)
		}
		return s.purgeLocked(ctx, cur)
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
