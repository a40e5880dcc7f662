package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const budgetCols = "id, tenant_id, sandbox_id, period, cap_micros, action, warn_at, " +
	"warned_period, warned_at, warned_spend_micros, warned_cap_micros, " +
	"exceeded_period, exceeded_at, exceeded_spend_micros, exceeded_cap_micros, created_at, updated_at"

// checkBudget applies the settings checks of the BudgetStore contract.
func checkBudget(b store.Budget) error {
	switch {
	case b.Period != store.BudgetDay && b.Period != store.BudgetMonth:
		return fmt.Errorf("period %q (want day or month): %w", b.Period, errs.ErrInvalid)
	case b.Action != store.BudgetWarn && b.Action != store.BudgetPause && b.Action != store.BudgetStop:
		return fmt.Errorf("action %q (want warn, pause or stop): %w", b.Action, errs.ErrInvalid)
	case b.CapMicros <= 0:
		return fmt.Errorf("cap %d micro-dollars (want > 0): %w", b.CapMicros, errs.ErrInvalid)
	case !(b.WarnAt > 0 && b.WarnAt <= 1):
		return fmt.Errorf("warn_at %v (want a fraction in (0, 1]): %w", b.WarnAt, errs.ErrInvalid)
	}
	return nil
}

// CreateBudget stores a new budget.
func (s *Store) CreateBudget(ctx context.Context, b store.Budget) (store.Budget, error) {
	if b.ID == "" || b.TenantID == "" {
		return store.Budget{}, fmt.Errorf("create budget %q: empty id or tenant: %w", b.ID, errs.ErrInvalid)
	}
	if err := checkBudget(b); err != nil {
		return store.Budget{}, fmt.Errorf("create budget %s: %w", b.ID, err)
	}
	if b.CreatedAt.IsZero() {
		b.CreatedAt = now()
	}
	if b.UpdatedAt.IsZero() {
		b.UpdatedAt = b.CreatedAt
	}
	b.CreatedAt, b.UpdatedAt = normTime(b.CreatedAt), normTime(b.UpdatedAt)
	b.State = normBudgetState(b.State)
	created, err := FormatTime(b.CreatedAt)
	if err != nil {
		return store.Budget{}, fmt.Errorf("create budget %s: %w", b.ID, err)
	}
	updated, err := FormatTime(b.UpdatedAt)
	if err != nil {
		return store.Budget{}, fmt.Errorf("create budget %s: %w", b.ID, err)
	}
	warnedAt, err := formatTimePtr(b.State.WarnedAt)
	if err != nil {
		return store.Budget{}, fmt.Errorf("create budget %s: %w", b.ID, err)
	}
	exceededAt, err := formatTimePtr(b.State.ExceededAt)
	if err != nil {
		return store.Budget{}, fmt.Errorf("create budget %s: %w", b.ID, err)
	}
	err = s.writeTx(ctx, func(tx *txn) error {
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM tenants WHERE id = ?", b.TenantID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("tenant %s: %w", b.TenantID, errs.ErrNotFound)
		}
		var sandbox any
		if b.SandboxID != "" {
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM sandboxes WHERE id = ? AND tenant_id = ?", b.SandboxID, b.TenantID).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("sandbox %s: %w", b.SandboxID, errs.ErrNotFound)
			}
			sandbox = b.SandboxID
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO budgets ("+budgetCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			b.ID, b.TenantID, sandbox, b.Period, b.CapMicros, b.Action, b.WarnAt,
			b.State.WarnedPeriod, warnedAt, b.State.WarnedSpendMicros, b.State.WarnedCapMicros,
			b.State.ExceededPeriod, exceededAt, b.State.ExceededSpendMicros, b.State.ExceededCapMicros, created, updated)
		switch {
		case s.isUnique(err):
			return fmt.Errorf("id taken: %w", errs.ErrConflict)
		case s.isForeignKey(err):
			return fmt.Errorf("tenant %s or sandbox %s: %w", b.TenantID, b.SandboxID, errs.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return store.Budget{}, fmt.Errorf("create budget %s: %w", b.ID, err)
	}
	return b, nil
}

// GetBudget returns the tenant's budget id.
func (s *Store) GetBudget(ctx context.Context, tenantID, id string) (store.Budget, error) {
	b, err := scanBudget(s.r.QueryRowContext(ctx, "SELECT "+budgetCols+" FROM budgets WHERE tenant_id = ? AND id = ?", tenantID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Budget{}, fmt.Errorf("get budget %s: %w", id, errs.ErrNotFound)
	}
	if err != nil {
		return store.Budget{}, fmt.Errorf("get budget %s: %w", id, err)
	}
	return b, nil
}

// ListBudgets returns the tenant's budgets ("" for all) by creation.
func (s *Store) ListBudgets(ctx context.Context, tenantID string) ([]store.Budget, error) {
	q := "SELECT " + budgetCols + " FROM budgets"
	var args []any
	if tenantID != "" {
		q += " WHERE tenant_id = ?"
		args = append(args, tenantID)
	}
	return queryAll(ctx, s.r, "list budgets", scanBudget, q+" ORDER BY created_at, id", args...)
}

// UpdateBudget stores b's settings.
func (s *Store) UpdateBudget(ctx context.Context, b store.Budget) (store.Budget, error) {
	if err := checkBudget(b); err != nil {
		return store.Budget{}, fmt.Errorf("update budget %s: %w", b.ID, err)
	}
	if b.UpdatedAt.IsZero() {
		b.UpdatedAt = now()
	}
	updated, err := FormatTime(normTime(b.UpdatedAt))
	if err != nil {
		return store.Budget{}, fmt.Errorf("update budget %s: %w", b.ID, err)
	}
	out, err := updateOne(ctx, s, scanBudget,
		"UPDATE budgets SET period = ?, cap_micros = ?, action = ?, warn_at = ?, updated_at = ? WHERE tenant_id = ? AND id = ?",
		[]any{b.Period, b.CapMicros, b.Action, b.WarnAt, updated, b.TenantID, b.ID},
		"SELECT "+budgetCols+" FROM budgets WHERE id = ?", b.ID)
	if err != nil {
		return store.Budget{}, fmt.Errorf("update budget %s: %w", b.ID, err)
	}
	return out, nil
}

// SetBudgetState stores the enforcement state of the tenant's budget id.
func (s *Store) SetBudgetState(ctx context.Context, tenantID, id string, st store.BudgetState) error {
	st = normBudgetState(st)
	warnedAt, err := formatTimePtr(st.WarnedAt)
	if err != nil {
		return fmt.Errorf("set budget state %s: %w", id, err)
	}
	exceededAt, err := formatTimePtr(st.ExceededAt)
	if err != nil {
		return fmt.Errorf("set budget state %s: %w", id, err)
	}
	res, err := s.w.ExecContext(ctx, "UPDATE budgets SET warned_period = ?, warned_at = ?, warned_spend_micros = ?, warned_cap_micros = ?, "+
		"exceeded_period = ?, exceeded_at = ?, exceeded_spend_micros = ?, exceeded_cap_micros = ? WHERE tenant_id = ? AND id = ?",
		st.WarnedPeriod, warnedAt, st.WarnedSpendMicros, st.WarnedCapMicros,
		st.ExceededPeriod, exceededAt, st.ExceededSpendMicros, st.ExceededCapMicros, tenantID, id)
	if err != nil {
		return fmt.Errorf("set budget state %s: %w", id, err)
	}
	return deleted(res, "set budget state", id)
}

// DeleteBudget removes the tenant's budget id.
func (s *Store) DeleteBudget(ctx context.Context, tenantID, id string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM budgets WHERE tenant_id = ? AND id = ?", tenantID, id)
	if err != nil {
		return fmt.Errorf("delete budget %s: %w", id, err)
	}
	return deleted(res, "delete budget", id)
}

func normBudgetState(st store.BudgetState) store.BudgetState {
	st.WarnedAt = normTimePtr(st.WarnedAt)
	st.ExceededAt = normTimePtr(st.ExceededAt)
	return st
}

func scanBudget(sc scanner) (store.Budget, error) {
	var b store.Budget
	var sandbox, warnedAt, exceededAt sql.NullString
	var created, updated string
	if err := sc.Scan(&b.ID, &b.TenantID, &sandbox, &b.Period, &b.CapMicros, &b.Action, &b.WarnAt,
		&b.State.WarnedPeriod, &warnedAt, &b.State.WarnedSpendMicros, &b.State.WarnedCapMicros,
		&b.State.ExceededPeriod, &exceededAt, &b.State.ExceededSpendMicros, &b.State.ExceededCapMicros, &created, &updated); err != nil {
		return store.Budget{}, err
	}
	b.SandboxID = sandbox.String
	var err error
	if b.State.WarnedAt, err = parseTimePtr(warnedAt); err != nil {
		return store.Budget{}, err
	}
	if b.State.ExceededAt, err = parseTimePtr(exceededAt); err != nil {
		return store.Budget{}, err
	}
	if b.CreatedAt, err = parseTime(created); err != nil {
		return store.Budget{}, err
	}
	if b.UpdatedAt, err = parseTime(updated); err != nil {
		return store.Budget{}, err
	}
	return b, nil
}
