package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const ownerCols = "sandbox_id, node, epoch, acquired_at, expires_at"

// checkFence returns a *store.FencedError when ctx carries a fence that
// the lease stored in tx does not honour. writeTx calls it under the write
// lock, so no takeover can commit between the check and the write.
func checkFence(ctx context.Context, tx *txn) error {
	f, ok := store.FenceFrom(ctx)
	if !ok {
		return nil
	}
	cur, err := getOwner(ctx, tx, f.SandboxID)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("check fence of sandbox %s: %w", f.SandboxID, err)
	}
	if !f.Holds(cur, now()) {
		return &store.FencedError{SandboxID: f.SandboxID, Node: f.Node, Epoch: f.Epoch, Current: cur}
	}
	return nil
}

func getOwner(ctx context.Context, tx *txn, sandboxID string) (store.Ownership, error) {
	return scanOwner(tx.QueryRowContext(ctx, "SELECT "+ownerCols+" FROM sandbox_owners WHERE sandbox_id = ?", sandboxID))
}

func putOwner(ctx context.Context, tx *txn, o store.Ownership) error {
	acq, err := FormatTime(o.AcquiredAt)
	if err != nil {
		return err
	}
	exp, err := FormatTime(o.ExpiresAt)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO sandbox_owners ("+ownerCols+") VALUES (?, ?, ?, ?, ?)"+
		" ON CONFLICT (sandbox_id) DO UPDATE SET node = excluded.node, epoch = excluded.epoch,"+
		" acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
		o.SandboxID, o.Node, o.Epoch, acq, exp)
	return err
}

func checkOwnerArgs(sandboxID, node string, ttl time.Duration) error {
	if sandboxID == "" || node == "" {
		return fmt.Errorf("empty sandbox id or node: %w", errs.ErrInvalid)
	}
	if ttl <= 0 {
		return fmt.Errorf("lease ttl %s is not positive: %w", ttl, errs.ErrInvalid)
	}
	return nil
}

// AcquireOwnership gives node the sandbox's lease; see store.OwnershipStore.
func (s *Store) AcquireOwnership(ctx context.Context, sandboxID, node string, ttl time.Duration, now time.Time) (store.Ownership, error) {
	if err := checkOwnerArgs(sandboxID, node, ttl); err != nil {
		return store.Ownership{}, fmt.Errorf("acquire sandbox %s for node %s: %w", sandboxID, node, err)
	}
	now = normTime(now)
	var out store.Ownership
	err := s.writeTx(ctx, func(tx *txn) error {
		cur, err := getOwner(ctx, tx, sandboxID)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			out = store.Ownership{SandboxID: sandboxID, Node: node, Epoch: 1, AcquiredAt: now}
		case err != nil:
			return err
		case !cur.ValidAt(now):
			out = store.Ownership{SandboxID: sandboxID, Node: node, Epoch: cur.Epoch + 1, AcquiredAt: now}
		case cur.Node == node:
			out = cur
		default:
			return fmt.Errorf("node %s holds it at epoch %d until %s: %w", cur.Node, cur.Epoch,
				cur.ExpiresAt.Format(time.RFC3339Nano), errs.ErrConflict)
		}
		out.ExpiresAt = now.Add(ttl)
		return putOwner(ctx, tx, out)
	})
	if err != nil {
		return store.Ownership{}, fmt.Errorf("acquire sandbox %s for node %s: %w", sandboxID, node, err)
	}
	return out, nil
}

// RenewOwnership extends node's lease under epoch; see store.OwnershipStore.
func (s *Store) RenewOwnership(ctx context.Context, sandboxID, node string, epoch int64, ttl time.Duration, now time.Time) (store.Ownership, error) {
	if err := checkOwnerArgs(sandboxID, node, ttl); err != nil {
		return store.Ownership{}, fmt.Errorf("renew sandbox %s for node %s: %w", sandboxID, node, err)
	}
	now = normTime(now)
	var out store.Ownership
	err := s.writeTx(ctx, func(tx *txn) error {
		cur, err := getOwner(ctx, tx, sandboxID)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		f := store.Fence{SandboxID: sandboxID, Node: node, Epoch: epoch, At: now}
		if !f.Holds(cur, now) {
			return &store.FencedError{SandboxID: sandboxID, Node: node, Epoch: epoch, Current: cur}
		}
		out = cur
		out.ExpiresAt = now.Add(ttl)
		return putOwner(ctx, tx, out)
	})
	if err != nil {
		return store.Ownership{}, fmt.Errorf("renew sandbox %s for node %s: %w", sandboxID, node, err)
	}
	return out, nil
}

// ReleaseOwnership ends node's lease under epoch; see store.OwnershipStore.
func (s *Store) ReleaseOwnership(ctx context.Context, sandboxID, node string, epoch int64, now time.Time) error {
	now = normTime(now)
	err := s.writeTx(ctx, func(tx *txn) error {
		cur, err := getOwner(ctx, tx, sandboxID)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if cur.SandboxID != sandboxID || cur.Node != node || cur.Epoch != epoch {
			return &store.FencedError{SandboxID: sandboxID, Node: node, Epoch: epoch, Current: cur}
		}
		if !cur.ValidAt(now) {
			return nil
		}
		cur.ExpiresAt = now
		return putOwner(ctx, tx, cur)
	})
	if err != nil {
		return fmt.Errorf("release sandbox %s by node %s: %w", sandboxID, node, err)
	}
	return nil
}

// GetOwnership returns the sandbox's lease, lapsed or not.
func (s *Store) GetOwnership(ctx context.Context, sandboxID string) (store.Ownership, error) {
	o, err := scanOwner(s.r.QueryRowContext(ctx, "SELECT "+ownerCols+" FROM sandbox_owners WHERE sandbox_id = ?", sandboxID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Ownership{}, fmt.Errorf("get lease of sandbox %s: %w", sandboxID, errs.ErrNotFound)
	}
	if err != nil {
		return store.Ownership{}, fmt.Errorf("get lease of sandbox %s: %w", sandboxID, err)
	}
	return o, nil
}

// ListOwnerships returns node's leases ("" : every node's), by sandbox id.
func (s *Store) ListOwnerships(ctx context.Context, node string) ([]store.Ownership, error) {
	if node == "" {
		return queryAll(ctx, s.r, "list sandbox leases", scanOwner, "SELECT "+ownerCols+" FROM sandbox_owners ORDER BY sandbox_id")
	}
	return queryAll(ctx, s.r, "list sandbox leases of node "+node, scanOwner,
		"SELECT "+ownerCols+" FROM sandbox_owners WHERE node = ? ORDER BY sandbox_id", node)
}

// ExpireNodeOwnerships ends every lease of node in force at now.
func (s *Store) ExpireNodeOwnerships(ctx context.Context, node string, now time.Time) (int, error) {
	if node == "" {
		return 0, fmt.Errorf("expire leases: empty node: %w", errs.ErrInvalid)
	}
	now = normTime(now)
	var n int
	err := s.writeTx(ctx, func(tx *txn) error {
		rows, err := tx.QueryContext(ctx, "SELECT "+ownerCols+" FROM sandbox_owners WHERE node = ? ORDER BY sandbox_id", node)
		if err != nil {
			return err
		}
		var live []store.Ownership
		for rows.Next() {
			o, err := scanOwner(rows)
			if err != nil {
				rows.Close()
				return err
			}
			if o.ValidAt(now) {
				live = append(live, o)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, o := range live {
			o.ExpiresAt = now
			if err := putOwner(ctx, tx, o); err != nil {
				return err
			}
		}
		n = len(live)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("expire leases of node %s: %w", node, err)
	}
	return n, nil
}

func scanOwner(sc scanner) (store.Ownership, error) {
	var o store.Ownership
	var acq, exp string
	if err := sc.Scan(&o.SandboxID, &o.Node, &o.Epoch, &acq, &exp); err != nil {
		return store.Ownership{}, err
	}
	var err error
	if o.AcquiredAt, err = parseTime(acq); err != nil {
		return store.Ownership{}, err
	}
	if o.ExpiresAt, err = parseTime(exp); err != nil {
		return store.Ownership{}, err
	}
	return o, nil
}
