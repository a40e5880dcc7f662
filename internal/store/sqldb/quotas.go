package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const quotaCols = "running_sandboxes, cpus, memory_bytes, disk_bytes, volumes, repository_bytes, snapshots, state_bytes, updated_at"

// GetTenantQuota returns the tenant's quota record; see store.QuotaStore.
func (s *Store) GetTenantQuota(ctx context.Context, tenantID string) (store.TenantQuota, error) {
	q := store.TenantQuota{TenantID: tenantID}
	var running, memory, disk, volumes, repo, snapshots, state sql.NullInt64
	var cpus sql.NullFloat64
	var updated string
	err := s.r.QueryRowContext(ctx, "SELECT "+quotaCols+" FROM tenant_quotas WHERE tenant_id = ?", tenantID).
		Scan(&running, &cpus, &memory, &disk, &volumes, &repo, &snapshots, &state, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		// No record: no limits, if the tenant exists.
		if _, err := s.GetTenant(ctx, tenantID); err != nil {
			return store.TenantQuota{}, fmt.Errorf("get quotas of tenant %s: %w", tenantID, err)
		}
		return q, nil
	}
	if err != nil {
		return store.TenantQuota{}, fmt.Errorf("get quotas of tenant %s: %w", tenantID, err)
	}
	if q.UpdatedAt, err = parseTime(updated); err != nil {
		return store.TenantQuota{}, fmt.Errorf("get quotas of tenant %s: %w", tenantID, err)
	}
	q.RunningSandboxes, q.MemoryBytes, q.DiskBytes = nullInt(running), nullInt(memory), nullInt(disk)
	q.Volumes, q.RepositoryBytes, q.Snapshots, q.StateBytes = nullInt(volumes), nullInt(repo), nullInt(snapshots), nullInt(state)
	if cpus.Valid {
		c := cpus.Float64
		q.CPUs = &c
	}
	return q, nil
}

// SetTenantQuota replaces the tenant's quota record; see store.QuotaStore.
func (s *Store) SetTenantQuota(ctx context.Context, q store.TenantQuota) (store.TenantQuota, error) {
	if q.TenantID == "" {
		return store.TenantQuota{}, fmt.Errorf("set quotas: empty tenant: %w", errs.ErrInvalid)
	}
	for name, v := range map[string]*int64{"running_sandboxes": q.RunningSandboxes, "memory_bytes": q.MemoryBytes,
		"disk_bytes": q.DiskBytes, "volumes": q.Volumes, "repository_bytes": q.RepositoryBytes, "snapshots": q.Snapshots, "state_bytes": q.StateBytes} {
		if v != nil && *v < 0 {
			return store.TenantQuota{}, fmt.Errorf("set quotas of tenant %s: %s %d is negative: %w", q.TenantID, name, *v, errs.ErrInvalid)
		}
	}
	if q.CPUs != nil && (*q.CPUs < 0 || math.IsNaN(*q.CPUs) || math.IsInf(*q.CPUs, 0)) {
		return store.TenantQuota{}, fmt.Errorf("set quotas of tenant %s: cpus %g is not a non-negative number: %w", q.TenantID, *q.CPUs, errs.ErrInvalid)
	}
	if q.UpdatedAt.IsZero() {
		q.UpdatedAt = now()
	}
	q.UpdatedAt = normTime(q.UpdatedAt)
	updated, err := FormatTime(q.UpdatedAt)
	if err != nil {
		return store.TenantQuota{}, fmt.Errorf("set quotas of tenant %s: updated_at: %w", q.TenantID, err)
	}
	var cpus any
	if q.CPUs != nil {
		cpus = *q.CPUs
	}
	_, err = s.w.ExecContext(ctx, "INSERT INTO tenant_quotas (tenant_id, "+quotaCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "+
		"ON CONFLICT (tenant_id) DO UPDATE SET running_sandboxes = excluded.running_sandboxes, cpus = excluded.cpus, "+
		"memory_bytes = excluded.memory_bytes, disk_bytes = excluded.disk_bytes, volumes = excluded.volumes, "+
		"repository_bytes = excluded.repository_bytes, snapshots = excluded.snapshots, state_bytes = excluded.state_bytes, "+
		"updated_at = excluded.updated_at",
		q.TenantID, intOrNull(q.RunningSandboxes), cpus, intOrNull(q.MemoryBytes), intOrNull(q.DiskBytes),
		intOrNull(q.Volumes), intOrNull(q.RepositoryBytes), intOrNull(q.Snapshots), intOrNull(q.StateBytes), updated)
	if s.isForeignKey(err) {
		return store.TenantQuota{}, fmt.Errorf("set quotas: tenant %s: %w", q.TenantID, errs.ErrNotFound)
	}
	if err != nil {
		return store.TenantQuota{}, fmt.Errorf("set quotas of tenant %s: %w", q.TenantID, err)
	}
	return q, nil
}

// nullInt is the pointer form of a nullable integer column.
func nullInt(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	v := n.Int64
	return &v
}

// intOrNull is the column value of an optional integer: nil is NULL.
func intOrNull(v *int64) any {
	if v == nil {
		return nil
	}
	return *v
}

// StateBytes adds up the tenant's state outside its sandboxes; see
// store.QuotaStore.
func (s *Store) StateBytes(ctx context.Context, tenantID string) (int64, error) {
	var n int64
	err := s.r.QueryRowContext(ctx, `SELECT
		(SELECT COALESCE(SUM(length(v.body)), 0) FROM checkpoint_versions v JOIN checkpoint_docs d
			ON d.sandbox_id = v.sandbox_id AND d.agent = v.agent AND d.name = v.name WHERE d.tenant_id = ?1)
		+ (SELECT COALESCE(SUM(length(payload)), 0) FROM tasks WHERE tenant_id = ?1)
		+ (SELECT COALESCE(SUM(length(payload)), 0) FROM observations WHERE tenant_id = ?1)
		+ (SELECT COALESCE(SUM(length(value)), 0) FROM kv_entries WHERE tenant_id = ?1)
		+ (SELECT COALESCE(SUM(length(e.payload)), 0) FROM session_events e JOIN session_runs r ON r.id = e.run_id WHERE r.tenant_id = ?1)`,
		tenantID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("state bytes of tenant %s: %w", tenantID, err)
	}
	return n, nil
}
