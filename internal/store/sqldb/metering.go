package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const meterCols = "id, tenant_id, sandbox_id, instance_type, cpus, memory_bytes, start_at, checkpoint_at, open"

type rowScanner interface{ Scan(dest ...any) error }

func scanInterval(r rowScanner) (store.MeterInterval, error) {
	var iv store.MeterInterval
	var start, cp string
	var open int
	if err := r.Scan(&iv.ID, &iv.TenantID, &iv.SandboxID, &iv.InstanceType, &iv.CPUs, &iv.MemoryBytes, &start, &cp, &open); err != nil {
		return iv, err
	}
	var err error
	if iv.Start, err = parseTime(start); err != nil {
		return iv, err
	}
	if iv.Checkpoint, err = parseTime(cp); err != nil {
		return iv, err
	}
	iv.Open = open == 1
	return iv, nil
}

// OpenMeterInterval opens a running interval (see store.MeterStore).
func (s *Store) OpenMeterInterval(ctx context.Context, iv store.MeterInterval) (store.MeterInterval, error) {
	p, err := intervalRow(iv)
	if err != nil {
		return iv, err
	}
	var out store.MeterInterval
	err = s.writeTx(ctx, func(tx *txn) error {
		out, err = p.insert(ctx, tx)
		return err
	})
	if err != nil {
		return store.MeterInterval{}, fmt.Errorf("open meter interval of sandbox %s: %w", iv.SandboxID, err)
	}
	return out, nil
}

// pendingInterval is a meter interval ready to be opened.
type pendingInterval struct {
	iv    store.MeterInterval
	start string
}

// intervalRow checks iv and encodes its start.
func intervalRow(iv store.MeterInterval) (*pendingInterval, error) {
	if iv.TenantID == "" || iv.SandboxID == "" || iv.Start.IsZero() {
		return nil, fmt.Errorf("open meter interval of sandbox %q: empty tenant, sandbox or start: %w", iv.SandboxID, errs.ErrInvalid)
	}
	start, err := FormatTime(iv.Start)
	if err != nil {
		return nil, fmt.Errorf("open meter interval of sandbox %s: %w", iv.SandboxID, err)
	}
	return &pendingInterval{iv: iv, start: start}, nil
}

// insert opens the interval in tx, or returns the sandbox's open one.
func (p *pendingInterval) insert(ctx context.Context, tx *txn) (store.MeterInterval, error) {
	iv := p.iv
	got, err := scanInterval(tx.QueryRowContext(ctx, "SELECT "+meterCols+" FROM meter_intervals WHERE sandbox_id = ? AND open = 1", iv.SandboxID))
	if err == nil {
		return got, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return store.MeterInterval{}, err
	}
	id, err := insertID(ctx, tx, "meter_intervals", "tenant_id, sandbox_id, instance_type, cpus, memory_bytes, start_at, checkpoint_at, open",
		"?, ?, ?, ?, ?, ?, ?, 1", iv.TenantID, iv.SandboxID, iv.InstanceType, iv.CPUs, iv.MemoryBytes, p.start, p.start)
	if err != nil {
		return store.MeterInterval{}, err
	}
	iv.ID = id
	iv.Start, iv.Checkpoint, iv.Open = normTime(iv.Start), normTime(iv.Start), true
	return iv, nil
}

// CheckpointMeterIntervals moves every open interval's checkpoint to at.
func (s *Store) CheckpointMeterIntervals(ctx context.Context, at time.Time) (int, error) {
	t, err := FormatTime(at)
	if err != nil {
		return 0, fmt.Errorf("checkpoint meter intervals: %w", err)
	}
	n := 0
	err = s.writeTx(ctx, func(tx *txn) error {
		if _, err := tx.ExecContext(ctx, "UPDATE meter_intervals SET checkpoint_at = ? WHERE open = 1 AND checkpoint_at < ?", t, t); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM meter_intervals WHERE open = 1").Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("checkpoint meter intervals: %w", err)
	}
	return n, nil
}

// CloseMeterInterval closes the sandbox's open interval at at.
func (s *Store) CloseMeterInterval(ctx context.Context, sandboxID string, at time.Time) (store.MeterInterval, error) {
	var out store.MeterInterval
	err := s.writeTx(ctx, func(tx *txn) error {
		iv, err := scanInterval(tx.QueryRowContext(ctx, "SELECT "+meterCols+" FROM meter_intervals WHERE sandbox_id = ? AND open = 1", sandboxID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("no open interval: %w", errs.ErrNotFound)
		}
		if err != nil {
			return err
		}
		end := normTime(at)
		if end.Before(iv.Checkpoint) {
			end = iv.Checkpoint
		}
		t, err := FormatTime(end)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE meter_intervals SET checkpoint_at = ?, open = 0 WHERE id = ?", t, iv.ID); err != nil {
			return err
		}
		iv.Checkpoint, iv.Open = end, false
		out = iv
		return nil
	})
	if err != nil {
		return store.MeterInterval{}, fmt.Errorf("close meter interval of sandbox %s: %w", sandboxID, err)
	}
	return out, nil
}

// ListMeterIntervals lists intervals by f, ordered by start.
func (s *Store) ListMeterIntervals(ctx context.Context, f store.MeterFilter) ([]store.MeterInterval, error) {
	var where []string
	var args []any
	if f.TenantID != "" {
		where, args = append(where, "tenant_id = ?"), append(args, f.TenantID)
	}
	if f.SandboxID != "" {
		where, args = append(where, "sandbox_id = ?"), append(args, f.SandboxID)
	}
	if !f.Since.IsZero() {
		t, err := FormatTime(f.Since)
		if err != nil {
			return nil, fmt.Errorf("list meter intervals: %w", err)
		}
		where, args = append(where, "(checkpoint_at >= ? OR open = 1)"), append(args, t)
	}
	if f.OpenOnly {
		where = append(where, "open = 1")
	}
	q := "SELECT " + meterCols + " FROM meter_intervals"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := s.r.QueryContext(ctx, q+" ORDER BY start_at, id", args...)
	if err != nil {
		return nil, fmt.Errorf("list meter intervals: %w", err)
	}
	defer rows.Close()
	var out []store.MeterInterval
	for rows.Next() {
		iv, err := scanInterval(rows)
		if err != nil {
			return nil, fmt.Errorf("list meter intervals: %w", err)
		}
		out = append(out, iv)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list meter intervals: %w", err)
	}
	return out, nil
}

func utcDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// AddStorageUsage adds byte-seconds to the day rows of u, all or none.
func (s *Store) AddStorageUsage(ctx context.Context, u []store.StorageUsage) error {
	err := s.writeTx(ctx, func(tx *txn) error {
		for _, x := range u {
			if x.TenantID == "" || x.Kind == "" {
				return fmt.Errorf("storage usage without a tenant or kind: %w", errs.ErrInvalid)
			}
			day, err := FormatTime(utcDay(x.Day))
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO meter_storage (tenant_id, subject, kind, day, byte_seconds, bytes) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (tenant_id, day, kind, subject) DO UPDATE SET byte_seconds = meter_storage.byte_seconds + excluded.byte_seconds, bytes = excluded.bytes`,
				x.TenantID, x.Subject, x.Kind, day, x.ByteSeconds, x.Bytes); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("add storage usage: %w", err)
	}
	return nil
}

// ListStorageUsage lists storage day rows of a tenant ("" = all) from since's day.
func (s *Store) ListStorageUsage(ctx context.Context, tenantID string, since time.Time) ([]store.StorageUsage, error) {
	from, err := FormatTime(utcDay(since))
	if err != nil {
		return nil, fmt.Errorf("list storage usage: %w", err)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT tenant_id, subject, kind, day, byte_seconds, bytes FROM meter_storage
		WHERE (? = '' OR tenant_id = ?) AND day >= ? ORDER BY day, tenant_id, kind, subject`, tenantID, tenantID, from)
	if err != nil {
		return nil, fmt.Errorf("list storage usage: %w", err)
	}
	defer rows.Close()
	var out []store.StorageUsage
	for rows.Next() {
		var x store.StorageUsage
		var day string
		if err := rows.Scan(&x.TenantID, &x.Subject, &x.Kind, &day, &x.ByteSeconds, &x.Bytes); err != nil {
			return nil, fmt.Errorf("list storage usage: %w", err)
		}
		if x.Day, err = parseTime(day); err != nil {
			return nil, fmt.Errorf("list storage usage: %w", err)
		}
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list storage usage: %w", err)
	}
	return out, nil
}
