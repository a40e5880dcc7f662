package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const sandboxCols = "id, tenant_id, name, template_id, state, spec, stop_reason, " +
	"created_at, updated_at, started_at, stopped_at, deleted_at, purge_at, version"

// sandboxTimes is a sandbox's timestamps in stored form.
type sandboxTimes struct {
	created, updated                     string
	started, stopped, deletedAt, purgeAt any
}

func formatSandboxTimes(s store.Sandbox) (sandboxTimes, error) {
	var st sandboxTimes
	var err error
	if st.created, err = FormatTime(s.CreatedAt); err != nil {
		return st, fmt.Errorf("created_at: %w", err)
	}
	if st.updated, err = FormatTime(s.UpdatedAt); err != nil {
		return st, fmt.Errorf("updated_at: %w", err)
	}
	if st.started, err = formatTimePtr(s.StartedAt); err != nil {
		return st, fmt.Errorf("started_at: %w", err)
	}
	if st.stopped, err = formatTimePtr(s.StoppedAt); err != nil {
		return st, fmt.Errorf("stopped_at: %w", err)
	}
	if st.deletedAt, err = formatTimePtr(s.DeletedAt); err != nil {
		return st, fmt.Errorf("deleted_at: %w", err)
	}
	if st.purgeAt, err = formatTimePtr(s.PurgeAt); err != nil {
		return st, fmt.Errorf("purge_at: %w", err)
	}
	return st, nil
}

// normSandbox gives s's timestamps the form they have after a round trip
// through the database.
func normSandbox(s store.Sandbox) store.Sandbox {
	s.CreatedAt = normTime(s.CreatedAt)
	s.UpdatedAt = normTime(s.UpdatedAt)
	s.StartedAt = normTimePtr(s.StartedAt)
	s.StoppedAt = normTimePtr(s.StoppedAt)
	s.DeletedAt = normTimePtr(s.DeletedAt)
	s.PurgeAt = normTimePtr(s.PurgeAt)
	return s
}

func validateSandbox(s store.Sandbox) error {
	switch {
	case s.ID == "":
		return fmt.Errorf("empty id: %w", errs.ErrInvalid)
	case s.TenantID == "":
		return fmt.Errorf("empty tenant: %w", errs.ErrInvalid)
	case s.Name == "":
		return fmt.Errorf("empty name: %w", errs.ErrInvalid)
	case s.State == "":
		return fmt.Errorf("empty state: %w", errs.ErrInvalid)
	}
	return nil
}

// CreateSandbox stores s with Version 1 and returns the stored record. A zero
// CreatedAt is set to the current time and a zero UpdatedAt to CreatedAt. It
// returns errs.ErrConflict when the id, or the name within the tenant, is
// taken (soft-deleted sandboxes keep their names until purged),
// errs.ErrNotFound when the tenant does not exist and errs.ErrInvalid for an
// empty id, tenant, name or state.
func (s *Store) CreateSandbox(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	return s.createSandbox(ctx, sb, nil)
}

// CreateSandboxEvent is CreateSandbox appending e in the same transaction
// (store.SandboxEventWriter).
func (s *Store) CreateSandboxEvent(ctx context.Context, sb store.Sandbox, e store.DaemonEvent, open *store.MeterInterval) (store.Sandbox, store.DaemonEvent, error) {
	row, err := eventRow(e, open)
	if err != nil {
		return store.Sandbox{}, store.DaemonEvent{}, err
	}
	out, err := s.createSandbox(ctx, sb, row)
	if err != nil {
		return store.Sandbox{}, store.DaemonEvent{}, err
	}
	return out, row.e, nil
}

// createSandbox is CreateSandbox, inserting ev too when it is not nil.
func (s *Store) createSandbox(ctx context.Context, sb store.Sandbox, ev *pendingEvent) (store.Sandbox, error) {
	if err := validateSandbox(sb); err != nil {
		return store.Sandbox{}, fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	if sb.CreatedAt.IsZero() {
		sb.CreatedAt = now()
	}
	if sb.UpdatedAt.IsZero() {
		sb.UpdatedAt = sb.CreatedAt
	}
	sb.Version = 1
	sb = normSandbox(sb)
	st, err := formatSandboxTimes(sb)
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	var subnets []netip.Prefix
	if len(sb.LeaseIn) > 0 {
		if subnets, err = leaseSubnets(sb.ID, sb.LeaseIn); err != nil {
			return store.Sandbox{}, fmt.Errorf("create sandbox %s: %w", sb.ID, err)
		}
	}
	sb.LeaseIn = nil
	leased := make([]netip.Addr, len(subnets))
	err = s.writeTx(ctx, func(tx *txn) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO sandboxes ("+sandboxCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			sb.ID, sb.TenantID, sb.Name, sb.TemplateID, string(sb.State), sb.Spec, sb.StopReason,
			st.created, st.updated, st.started, st.stopped, st.deletedAt, st.purgeAt, sb.Version)
		switch {
		case s.isUnique(err):
			var one int
			err := tx.QueryRowContext(ctx, "SELECT 1 FROM sandboxes WHERE id = ?", sb.ID).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("name %q already taken: %w", sb.Name, errs.ErrConflict)
			}
			return fmt.Errorf("id already taken: %w", errs.ErrConflict)
		case s.isForeignKey(err):
			return fmt.Errorf("tenant %s: %w", sb.TenantID, errs.ErrNotFound)
		case err != nil:
			return err
		}
		if err := s.leaseAllIn(ctx, tx, sb.ID, subnets, leased); err != nil {
			return err
		}
		if ev != nil {
			return ev.insert(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	s.setLeaseHints(subnets, leased)
	return sb, nil
}

// GetSandbox finds a sandbox by id, or else by name within the tenant. With
// tenantID "" it matches an id in any tenant and never a name. Soft-deleted
// sandboxes are found too. It returns errs.ErrNotFound when nothing matches.
func (s *Store) GetSandbox(ctx context.Context, tenantID, idOrName string) (store.Sandbox, error) {
	var row *sql.Row
	if tenantID == "" {
		row = s.r.QueryRowContext(ctx, "SELECT "+sandboxCols+" FROM sandboxes WHERE id = ?", idOrName)
	} else {
		// One statement, so id and name are matched against the same
		// snapshot; an id match sorts first.
		row = s.r.QueryRowContext(ctx, "SELECT "+sandboxCols+" FROM sandboxes"+
			" WHERE tenant_id = ? AND (id = ? OR name = ?)"+
			" ORDER BY CASE WHEN id = ? THEN 0 ELSE 1 END LIMIT 1",
			tenantID, idOrName, idOrName, idOrName)
	}
	sb, err := scanSandbox(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Sandbox{}, fmt.Errorf("get sandbox %s: %w", idOrName, errs.ErrNotFound)
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("get sandbox %s: %w", idOrName, err)
	}
	return sb, nil
}

// ListSandboxes returns the sandboxes f selects, ordered by CreatedAt, then
// ID.
func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]store.Sandbox, error) {
	var where []string
	var args []any
	if f.TenantID != "" {
		where = append(where, "tenant_id = ?")
		args = append(args, f.TenantID)
	}
	switch {
	case len(f.States) > 0:
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	case !f.IncludeDeleted:
		where = append(where, "state <> ?")
		args = append(args, string(store.StateDeleted))
	}
	q := "SELECT " + sandboxCols + " FROM sandboxes"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at, id"

	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	defer rows.Close()
	out, err := scanAll(rows, scanSandbox)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

// UpdateSandbox stores sb if the stored record of sb.ID in sb.TenantID has
// Version sb.Version, setting Version to sb.Version+1 and UpdatedAt to the
// current time, and returns the stored record. ID, TenantID and CreatedAt
// are immutable: sb's values for them select the record or are ignored. It
// returns errs.ErrNotFound when the sandbox is absent or another tenant's,
// errs.ErrConflict when the version is stale or the new name is taken (and
// then changes nothing), and errs.ErrInvalid for an empty name or state.
func (s *Store) UpdateSandbox(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	return s.updateSandbox(ctx, sb, nil)
}

// UpdateSandboxEvent is UpdateSandbox appending e in the same transaction
// (store.SandboxEventWriter).
func (s *Store) UpdateSandboxEvent(ctx context.Context, sb store.Sandbox, e store.DaemonEvent, open *store.MeterInterval) (store.Sandbox, store.DaemonEvent, error) {
	row, err := eventRow(e, open)
	if err != nil {
		return store.Sandbox{}, store.DaemonEvent{}, err
	}
	out, err := s.updateSandbox(ctx, sb, row)
	if err != nil {
		return store.Sandbox{}, store.DaemonEvent{}, err
	}
	return out, row.e, nil
}

// updateSandbox is UpdateSandbox, inserting ev too when it is not nil.
func (s *Store) updateSandbox(ctx context.Context, sb store.Sandbox, ev *pendingEvent) (store.Sandbox, error) {
	if err := validateSandbox(sb); err != nil {
		return store.Sandbox{}, fmt.Errorf("update sandbox %s: %w", sb.ID, err)
	}
	sb.UpdatedAt = now()
	sb = normSandbox(sb)
	st, err := formatSandboxTimes(sb)
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("update sandbox %s: %w", sb.ID, err)
	}
	var out store.Sandbox
	err = s.writeTx(ctx, func(tx *txn) error {
		var cur int64
		err := tx.QueryRowContext(ctx, "SELECT version FROM sandboxes WHERE id = ? AND tenant_id = ?",
			sb.ID, sb.TenantID).Scan(&cur)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.ErrNotFound
		}
		if err != nil {
			return err
		}
		if cur != sb.Version {
			return fmt.Errorf("version %d is stale, stored version is %d: %w", sb.Version, cur, errs.ErrConflict)
		}
		// The version predicate repeats the check above so the statement is
		// a compare-and-swap on its own.
		res, err := tx.ExecContext(ctx, "UPDATE sandboxes SET name = ?, template_id = ?, state = ?, spec = ?,"+
			" stop_reason = ?, updated_at = ?, started_at = ?, stopped_at = ?, deleted_at = ?, purge_at = ?,"+
			" version = version + 1 WHERE id = ? AND tenant_id = ? AND version = ?",
			sb.Name, sb.TemplateID, string(sb.State), sb.Spec, sb.StopReason,
			st.updated, st.started, st.stopped, st.deletedAt, st.purgeAt,
			sb.ID, sb.TenantID, sb.Version)
		if s.isUnique(err) {
			return fmt.Errorf("name %q already taken: %w", sb.Name, errs.ErrConflict)
		}
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("version %d is stale: %w", sb.Version, errs.ErrConflict)
		}
		out, err = scanSandbox(tx.QueryRowContext(ctx, "SELECT "+sandboxCols+" FROM sandboxes WHERE id = ?", sb.ID))
		if err != nil || ev == nil {
			return err
		}
		return ev.insert(ctx, tx)
	})
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("update sandbox %s: %w", sb.ID, err)
	}
	return out, nil
}

// DeleteSandbox removes the tenant's sandbox record for good (purge), or
// returns errs.ErrNotFound. Its name becomes free again.
func (s *Store) DeleteSandbox(ctx context.Context, tenantID, id string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM sandboxes WHERE tenant_id = ? AND id = ?", tenantID, id)
	if err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	return deleted(res, "delete sandbox", id)
}

func scanSandbox(sc scanner) (store.Sandbox, error) {
	var sb store.Sandbox
	var state, created, updated string
	var started, stopped, deletedAt, purgeAt sql.NullString
	if err := sc.Scan(&sb.ID, &sb.TenantID, &sb.Name, &sb.TemplateID, &state, &sb.Spec, &sb.StopReason,
		&created, &updated, &started, &stopped, &deletedAt, &purgeAt, &sb.Version); err != nil {
		return store.Sandbox{}, err
	}
	sb.State = store.SandboxState(state)
	var err error
	if sb.CreatedAt, err = parseTime(created); err != nil {
		return store.Sandbox{}, err
	}
	if sb.UpdatedAt, err = parseTime(updated); err != nil {
		return store.Sandbox{}, err
	}
	if sb.StartedAt, err = parseTimePtr(started); err != nil {
		return store.Sandbox{}, err
	}
	if sb.StoppedAt, err = parseTimePtr(stopped); err != nil {
		return store.Sandbox{}, err
	}
	if sb.DeletedAt, err = parseTimePtr(deletedAt); err != nil {
		return store.Sandbox{}, err
	}
	if sb.PurgeAt, err = parseTimePtr(purgeAt); err != nil {
		return store.Sandbox{}, err
	}
	return sb, nil
}
