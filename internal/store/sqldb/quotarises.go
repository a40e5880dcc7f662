package sqldb

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Quota rises (store.QuotaAdmissionStore). The tenant's admission lock is
// the dialect's TryKeyLock on "quota/<tenant>" in a transaction on Writer
// (on SQLite, the one writer connection is the lock): the caller's check
// reads the usage on Reader meanwhile, and the rise is inserted, under the
// write lock, in the same transaction, so the lock goes only once the rise
// is visible to the next admission. A waiter holds no connection while it
// waits (it retries the lock), so waiters never starve the holder's reads.

// maxKeyLockWait is the longest pause between tries of a held key lock.
const maxKeyLockWait = 20 * time.Millisecond

// AdmitQuotaRise admits r under the tenant's admission lock if check
// passes (see store.QuotaAdmissionStore).
func (s *Store) AdmitQuotaRise(ctx context.Context, r store.QuotaRise, now time.Time, check func(ctx context.Context, pending []store.QuotaRise) error) error {
	if err := validRise(r); err != nil {
		return err
	}
	exp, err := FormatTime(r.ExpiresAt)
	if err != nil {
		return err
	}
	nowS, err := FormatTime(now)
	if err != nil {
		return err
	}
	for wait := time.Millisecond; ; wait = min(2*wait, maxKeyLockWait) {
		done, err := s.admitOnce(ctx, r, exp, nowS, check)
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("admit a quota rise of tenant %s: %w", r.TenantID, ctx.Err())
		case <-time.After(wait/2 + rand.N(wait/2+1)):
		}
	}
}

// admitOnce is one try of AdmitQuotaRise: done is false when another
// process holds the tenant's lock.
func (s *Store) admitOnce(ctx context.Context, r store.QuotaRise, exp, now string, check func(context.Context, []store.QuotaRise) error) (done bool, err error) {
	tx, err := s.d.Writer.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if s.d.TryKeyLock != nil {
		got, err := s.d.TryKeyLock(ctx, tx, "quota/"+r.TenantID)
		if err != nil || !got {
			return false, err
		}
	}
	t := &txn{tx: tx, s: s}
	pending, err := riseRows(ctx, t, r.TenantID, now)
	if err != nil {
		return false, err
	}
	if err := check(ctx, pending); err != nil {
		return true, err
	}
	if s.d.WriteLock != nil {
		if err := s.d.WriteLock(ctx, tx); err != nil {
			return false, err
		}
	}
	if _, err := t.ExecContext(ctx, `DELETE FROM quota_rises WHERE tenant_id = ? AND expires_at <= ?`, r.TenantID, now); err != nil {
		return false, fmt.Errorf("delete expired quota rises: %w", err)
	}
	_, err = t.ExecContext(ctx, `INSERT INTO quota_rises (id, tenant_id, node, running, cpus, memory_bytes, disk_bytes, volumes, snapshots, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.ID, r.TenantID, r.Node, r.Running, r.CPUs, r.MemoryBytes, r.DiskBytes, r.Volumes, r.Snapshots, exp)
	if s.isUnique(err) {
		return true, fmt.Errorf("quota rise %s is stored already: %w", r.ID, errs.ErrConflict)
	}
	if err != nil {
		return false, fmt.Errorf("store quota rise %s: %w", r.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	return true, nil
}

// riseRows reads the tenant's rises that have not expired at now.
func riseRows(ctx context.Context, t *txn, tenant, now string) ([]store.QuotaRise, error) {
	rows, err := t.QueryContext(ctx, `SELECT id, node, running, cpus, memory_bytes, disk_bytes, volumes, snapshots, expires_at
		FROM quota_rises WHERE tenant_id = ? AND expires_at > ? ORDER BY id`, tenant, now)
	if err != nil {
		return nil, fmt.Errorf("read quota rises: %w", err)
	}
	defer rows.Close()
	var out []store.QuotaRise
	for rows.Next() {
		q := store.QuotaRise{TenantID: tenant}
		var exp string
		if err := rows.Scan(&q.ID, &q.Node, &q.Running, &q.CPUs, &q.MemoryBytes, &q.DiskBytes, &q.Volumes, &q.Snapshots, &exp); err != nil {
			return nil, fmt.Errorf("read quota rises: %w", err)
		}
		if q.ExpiresAt, err = parseTime(exp); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// validRise refuses a rise the store cannot keep.
func validRise(r store.QuotaRise) error {
	switch {
	case r.ID == "" || r.TenantID == "":
		return fmt.Errorf("quota rise: an id and a tenant are needed: %w", errs.ErrInvalid)
	case r.ExpiresAt.IsZero():
		return fmt.Errorf("quota rise %s: no expiry: %w", r.ID, errs.ErrInvalid)
	case r.Running < 0 || r.MemoryBytes < 0 || r.DiskBytes < 0 || r.Volumes < 0 || r.Snapshots < 0 ||
		r.CPUs < 0 || math.IsNaN(r.CPUs) || math.IsInf(r.CPUs, 0):
		return fmt.Errorf("quota rise %s: an amount is negative or not finite: %w", r.ID, errs.ErrInvalid)
	}
	return nil
}

// DeleteQuotaRise removes rise id (no error when it is gone).
func (s *Store) DeleteQuotaRise(ctx context.Context, id string) error {
	if _, err := s.w.ExecContext(ctx, `DELETE FROM quota_rises WHERE id = ?`, id); err != nil {
		return fmt.Errorf("delete quota rise %s: %w", id, err)
	}
	return nil
}

// DeleteNodeQuotaRises removes every rise node admitted.
func (s *Store) DeleteNodeQuotaRises(ctx context.Context, node string) error {
	if node == "" {
		return fmt.Errorf("delete a node's quota rises: no node: %w", errs.ErrInvalid)
	}
	if _, err := s.w.ExecContext(ctx, `DELETE FROM quota_rises WHERE node = ?`, node); err != nil {
		return fmt.Errorf("delete the quota rises of node %s: %w", node, err)
	}
	return nil
}
