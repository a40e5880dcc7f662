package budget

import (
	"context"
	"fmt"
	"strings"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// The budget API (api.BudgetBackend). Every method gets the caller's
// tenant; another tenant's budget or sandbox is errs.ErrNotFound, as an
// absent one.

// settings checks and applies the fields a create or an update names.
func settings(b *store.Budget, period, capUSD, action *string, warnAt *float64) error {
	if period != nil {
		p := strings.TrimSpace(*period)
		if p != store.BudgetDay && p != store.BudgetMonth {
			return fmt.Errorf("budget period %q: want day or month: %w", *period, errs.ErrInvalid)
		}
		b.Period = p
	}
	if capUSD != nil {
		m, err := ParseUSD(*capUSD)
		if err != nil {
			return fmt.Errorf("budget cap: %w", err)
		}
		if m <= 0 {
			return fmt.Errorf("budget cap %q: want more than 0 (delete the budget to lift it for good): %w", *capUSD, errs.ErrInvalid)
		}
		b.CapMicros = m
	}
	if action != nil {
		a := strings.TrimSpace(*action)
		if a != store.BudgetWarn && a != store.BudgetPause && a != store.BudgetStop {
			return fmt.Errorf("budget action %q: want warn, pause or stop: %w", *action, errs.ErrInvalid)
		}
		b.Action = a
	}
	if warnAt != nil {
		if !(*warnAt > 0 && *warnAt <= 1) {
			return fmt.Errorf("budget warn_at %v: want a fraction of the cap in (0, 1], such as 0.8: %w", *warnAt, errs.ErrInvalid)
		}
		b.WarnAt = *warnAt
	}
	return nil
}

// CreateBudget stores a new budget of tenant.
func (e *Enforcer) CreateBudget(ctx context.Context, tenant string, req client.CreateBudgetRequest) (client.Budget, error) {
	b := store.Budget{ID: newID(), TenantID: tenant, WarnAt: client.DefaultBudgetWarnAt}
	if req.Period == "" || req.Cap == "" || req.Action == "" {
		return client.Budget{}, fmt.Errorf("create budget: period (day or month), cap (US dollars) and action (warn, pause or stop) are required: %w", errs.ErrInvalid)
	}
	if err := settings(&b, &req.Period, &req.Cap, &req.Action, req.WarnAt); err != nil {
		return client.Budget{}, fmt.Errorf("create budget: %w", err)
	}
	if req.Sandbox != "" {
		sb, err := e.st.GetSandbox(ctx, tenant, req.Sandbox)
		if err != nil {
			return client.Budget{}, fmt.Errorf("create budget: %w", err)
		}
		b.SandboxID = sb.ID
	}
	now := e.now()
	b.CreatedAt, b.UpdatedAt = now, now
	stored, err := e.st.CreateBudget(ctx, b)
	if err != nil {
		return client.Budget{}, fmt.Errorf("create budget: %w", err)
	}
	e.log.Info("budget set", "budget", stored.ID, "tenant", tenant, "sandbox", stored.SandboxID, "period", stored.Period,
		"cap", FormatUSD(stored.CapMicros), "action", stored.Action)
	return e.view(ctx, stored)
}

// ListBudgets returns tenant's budgets with their spend.
func (e *Enforcer) ListBudgets(ctx context.Context, tenant string) ([]client.Budget, error) {
	list, err := e.st.ListBudgets(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("list budgets: %w", err)
	}
	out := make([]client.Budget, 0, len(list))
	for _, b := range list {
		v, err := e.view(ctx, b)
		if err != nil {
			return nil, fmt.Errorf("list budgets: %w", err)
		}
		out = append(out, v)
	}
	return out, nil
}

// GetBudget returns tenant's budget id with its spend.
func (e *Enforcer) GetBudget(ctx context.Context, tenant, id string) (client.Budget, error) {
	b, err := e.st.GetBudget(ctx, tenant, id)
	if err != nil {
		return client.Budget{}, err
	}
	return e.view(ctx, b)
}

// UpdateBudget changes the settings req names.
func (e *Enforcer) UpdateBudget(ctx context.Context, tenant, id string, req client.UpdateBudgetRequest) (client.Budget, error) {
	b, err := e.st.GetBudget(ctx, tenant, id)
	if err != nil {
		return client.Budget{}, err
	}
	if err := settings(&b, req.Period, req.Cap, req.Action, req.WarnAt); err != nil {
		return client.Budget{}, fmt.Errorf("update budget %s: %w", id, err)
	}
	b.UpdatedAt = e.now()
	stored, err := e.st.UpdateBudget(ctx, b)
	if err != nil {
		return client.Budget{}, err
	}
	e.log.Info("budget changed", "budget", id, "tenant", tenant, "period", stored.Period, "cap", FormatUSD(stored.CapMicros), "action", stored.Action)
	return e.view(ctx, stored)
}

// DeleteBudget removes tenant's budget id.
func (e *Enforcer) DeleteBudget(ctx context.Context, tenant, id string) error {
	return e.st.DeleteBudget(ctx, tenant, id)
}

// view is b as the API shows it, with its spend now.
func (e *Enforcer) view(ctx context.Context, b store.Budget) (client.Budget, error) {
	m, err := e.measure(ctx, b, e.now())
	if err != nil {
		return client.Budget{}, err
	}
	v := client.Budget{ID: b.ID, Tenant: b.TenantID, Sandbox: b.SandboxID, Period: b.Period, Cap: FormatUSD(b.CapMicros),
		Action: b.Action, WarnAt: b.WarnAt, Currency: "USD", Spend: FormatUSD(m.spend), Fraction: float64(m.spend) / float64(b.CapMicros),
		State: client.BudgetOK, PeriodStart: m.start, PeriodEnd: m.end, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt}
	switch {
	case m.exceeded(b):
		v.State = client.BudgetExceeded
	case m.warned(b):
		v.State = client.BudgetWarning
	}
	if b.SandboxID != "" {
		if sb, err := e.st.GetSandbox(ctx, b.TenantID, b.SandboxID); err == nil {
			v.SandboxName = sb.Name
		}
	}
	if st := b.State; st.WarnedAt != nil {
		v.LastWarning = &client.BudgetMark{Period: st.WarnedPeriod, At: *st.WarnedAt, Spend: FormatUSD(st.WarnedSpendMicros), Cap: FormatUSD(st.WarnedCapMicros)}
	}
	if st := b.State; st.ExceededAt != nil {
		v.LastExceeded = &client.BudgetMark{Period: st.ExceededPeriod, At: *st.ExceededAt, Spend: FormatUSD(st.ExceededSpendMicros), Cap: FormatUSD(st.ExceededCapMicros)}
	}
	return v, nil
}
