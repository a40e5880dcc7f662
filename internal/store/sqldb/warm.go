package sqldb

import (
	"context"
	"fmt"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// SetWarmPool stores a warm pool's size; see store.WarmPoolStore.
func (s *Store) SetWarmPool(ctx context.Context, p store.WarmPool) (store.WarmPool, error) {
	if p.TenantID == "" || p.TemplateID == "" {
		return store.WarmPool{}, fmt.Errorf("set warm pool: empty tenant or template: %w", errs.ErrInvalid)
	}
	if p.Size < 0 || p.Size > store.MaxWarmPoolSize {
		return store.WarmPool{}, fmt.Errorf("set warm pool %s/%s: size %d is not from 0 to %d: %w", p.TenantID, p.TemplateID, p.Size, store.MaxWarmPoolSize, errs.ErrInvalid)
	}
	if p.UpdatedAt.IsZero() {
		p.UpdatedAt = now()
	}
	p.UpdatedAt = normTime(p.UpdatedAt)
	updated, err := FormatTime(p.UpdatedAt)
	if err != nil {
		return store.WarmPool{}, fmt.Errorf("set warm pool %s/%s: updated_at: %w", p.TenantID, p.TemplateID, err)
	}
	_, err = s.w.ExecContext(ctx, "INSERT INTO warm_pools (tenant_id, template_id, size, updated_at) VALUES (?, ?, ?, ?) "+
		"ON CONFLICT (tenant_id, template_id) DO UPDATE SET size = excluded.size, updated_at = excluded.updated_at",
		p.TenantID, p.TemplateID, p.Size, updated)
	if s.isForeignKey(err) {
		return store.WarmPool{}, fmt.Errorf("set warm pool: tenant %s: %w", p.TenantID, errs.ErrNotFound)
	}
	if err != nil {
		return store.WarmPool{}, fmt.Errorf("set warm pool %s/%s: %w", p.TenantID, p.TemplateID, err)
	}
	return p, nil
}

// DeleteWarmPool removes a warm pool's size setting; see
// store.WarmPoolStore.
func (s *Store) DeleteWarmPool(ctx context.Context, tenantID, templateID string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM warm_pools WHERE tenant_id = ? AND template_id = ?", tenantID, templateID)
	if err != nil {
		return fmt.Errorf("delete warm pool %s/%s: %w", tenantID, templateID, err)
	}
	return deleted(res, "delete warm pool", tenantID+"/"+templateID)
}

// ListWarmPools lists the warm pool settings; see store.WarmPoolStore.
func (s *Store) ListWarmPools(ctx context.Context, tenantID string) ([]store.WarmPool, error) {
	const q = "SELECT tenant_id, template_id, size, updated_at FROM warm_pools"
	if tenantID != "" {
		return queryAll(ctx, s.r, "list warm pools", scanWarmPool, q+" WHERE tenant_id = ? ORDER BY tenant_id, template_id", tenantID)
	}
	return queryAll(ctx, s.r, "list warm pools", scanWarmPool, q+" ORDER BY tenant_id, template_id")
}

func scanWarmPool(sc scanner) (store.WarmPool, error) {
	var p store.WarmPool
	var updated string
	if err := sc.Scan(&p.TenantID, &p.TemplateID, &p.Size, &updated); err != nil {
		return store.WarmPool{}, err
	}
	var err error
	p.UpdatedAt, err = parseTime(updated)
	return p, err
}
