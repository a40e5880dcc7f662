package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/store"
)

// A deleted tenant's node-local data. In a cluster the node deleting a
// tenant purges its records (and, through RelayTenant, each sandbox on
// the node that holds it), but volumes, local snapshots, templates and
// lost copies are datasets in each node's own pool. Once the records are
// gone, DeleteTenant sends cluster.TenantLocal to every live node
// (TenantPurgeLocal here, through the relay), and each deletes its own
// datasets of the tenant, through the pool only (a tenant's files are
// never walked by the daemon). A node that was dead then deletes them
// when it starts again: Reconcile deletes unrecorded volume and snapshot
// datasets, and the template datasets of tenants that no longer exist
// (cleanTemplateLeftovers).

// tenantLocalOf lists the ids of what tenant has that a node's pool may
// hold, read before its records are purged.
func (s *Service) tenantLocalOf(ctx context.Context, tenant string, sbs []store.Sandbox) (cluster.TenantLocal, error) {
	p := cluster.TenantLocal{Tenant: tenant}
	for _, sb := range sbs {
		p.Sandboxes = append(p.Sandboxes, sb.ID)
	}
	vols, err := s.st.ListVolumes(ctx, tenant, true)
	if err != nil {
		return p, fmt.Errorf("list volumes of tenant %s: %w", tenant, err)
	}
	for _, v := range vols {
		p.Volumes = append(p.Volumes, v.ID)
	}
	snaps, err := s.st.ListSnapshots(ctx, tenant, "")
	if err != nil {
		return p, fmt.Errorf("list snapshots of tenant %s: %w", tenant, err)
	}
	for _, sn := range snaps {
		p.Snapshots = append(p.Snapshots, sn.ID)
	}
	return p, nil
}

// TenantPurgeLocal deletes from this node's pool what it holds of a
// deleted tenant (cluster.TenantActions; cluster.HandleTenant serves the
// node call of the node that deleted it): the datasets of p's volumes and
// snapshots that have no record, the kept lost copies of p's sandboxes,
// and every template dataset of the tenant, with its spare clones. The
// tenant must be gone from the store (errs.ErrConflict while it exists:
// nothing is deleted), so the call cannot take data a tenant still has.
// Already gone is no error.
func (s *Service) TenantPurgeLocal(ctx context.Context, p cluster.TenantLocal) error {
	if p.Tenant == "" || p.Tenant == store.DefaultTenant {
		return fmt.Errorf("purge the local data of tenant %q: not a deletable tenant: %w", p.Tenant, errs.ErrInvalid)
	}
	if _, err := s.st.GetTenant(ctx, p.Tenant); err == nil {
		return fmt.Errorf("purge the local data of tenant %s: the tenant still exists (its datasets go once its records are purged): %w", p.Tenant, errs.ErrConflict)
	} else if !errors.Is(err, errs.ErrNotFound) {
		return fmt.Errorf("purge the local data of tenant %s: %w", p.Tenant, err)
	}
	// What some record still names is never deleted (ids are unique
	// across tenants: a listed id with a record is not the tenant's).
	vols, err := s.st.ListVolumes(ctx, "", true)
	if err != nil {
		return fmt.Errorf("purge the local data of tenant %s: list volumes: %w", p.Tenant, err)
	}
	recorded := map[string]bool{}
	for _, v := range vols {
		recorded[volumeDataset(v.ID)] = true
	}
	tenants, err := s.st.ListTenants(ctx)
	if err != nil {
		return fmt.Errorf("purge the local data of tenant %s: list tenants: %w", p.Tenant, err)
	}
	for _, t := range tenants {
		snaps, err := s.st.ListSnapshots(ctx, t.ID, "")
		if err != nil {
			return fmt.Errorf("purge the local data of tenant %s: list snapshots: %w", p.Tenant, err)
		}
		for _, sn := range snaps {
			recorded[snapshotDataset(sn.ID)] = true
		}
	}

	var errList []error
	n := 0
	drop := func(kind, id, lockKey string) {
		ds, err := pool.Name(kind, id)
		if err != nil {
			errList = append(errList, err)
			return
		}
		if recorded[ds] {
			return
		}
		unlock := s.lock(lockKey)
		defer unlock()
		if kind == pool.KindTemplate {
			defer s.templateChanging(ctx, ds)() // its spares go first (spares.go)
		}
		err = s.pool.Delete(ctx, ds)
		switch {
		case err == nil:
			n++
		case !errors.Is(err, errs.ErrNotFound):
			errList = append(errList, fmt.Errorf("delete %s: %w", ds, err))
		}
	}
	for _, id := range p.Volumes {
		drop(pool.KindVolume, id, id)
	}
	for _, id := range p.Snapshots {
		drop(pool.KindSnapshot, id, id)
	}

	sbs := make(map[string]bool, len(p.Sandboxes))
	for _, id := range p.Sandboxes {
		sbs[id] = true
	}
	ids, err := s.pool.List(ctx, pool.KindSandbox)
	if err != nil {
		errList = append(errList, fmt.Errorf("list sandbox datasets: %w", err))
	}
	for _, name := range ids {
		_, id, err := lostCopyName(name)
		if err != nil || !sbs[id] {
			continue
		}
		if sb, err := s.st.GetSandbox(ctx, "", id); err == nil && sb.ID == id {
			continue // its record is back (it cannot be: ids are not reused)
		}
		drop(pool.KindSandbox, name, "lost/"+name)
	}

	prefix := cluster.TemplateDataset(p.Tenant, "")
	tmpls, err := s.pool.List(ctx, pool.KindTemplate)
	if err != nil {
		errList = append(errList, fmt.Errorf("list template datasets: %w", err))
	}
	for _, id := range tmpls {
		if strings.HasPrefix(id, prefix) {
			drop(pool.KindTemplate, id, "template/"+p.Tenant+"/"+strings.TrimPrefix(id, prefix))
		}
	}
	if n > 0 {
		s.log.Info("deleted tenant: this node's datasets of it deleted", "tenant", p.Tenant, "datasets", n)
	}
	if len(errList) > 0 {
		return fmt.Errorf("purge the local data of tenant %s: %w", p.Tenant, errors.Join(errList...))
	}
	return nil
}

// cleanTemplateLeftovers deletes, at start-up, the template datasets of
// tenants that no longer exist: a tenant deleted while this node was away
// (or whose local purge call failed) leaves its templates here. The
// default tenant's datasets (plain ids) are never touched.
func (s *Service) cleanTemplateLeftovers(ctx context.Context) error {
	tenants, err := s.st.ListTenants(ctx)
	if err != nil {
		return err
	}
	known := make(map[string]bool, len(tenants))
	for _, t := range tenants {
		known[cluster.TemplateDataset(t.ID, "")] = true
	}
	ids, err := s.pool.List(ctx, pool.KindTemplate)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if !tenantTemplatePrefix(id) || known[id[:18]] {
			continue
		}
		s.log.Warn("deleting the template dataset of a deleted tenant", "dataset", id)
		done := s.templateChanging(ctx, pool.KindTemplate+"/"+id) // spares.go
		if err := s.pool.Delete(ctx, pool.KindTemplate+"/"+id); err != nil && !errors.Is(err, errs.ErrNotFound) {
			s.log.Error("delete the template dataset of a deleted tenant", "dataset", id, "err", err)
		}
		done()
	}
	return nil
}
