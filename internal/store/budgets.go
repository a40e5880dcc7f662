package store

import (
	"context"
	"time"
)

// Budget periods (Budget.Period): spend is summed over the current UTC day
// or UTC calendar month.
const (
	BudgetDay   = "day"
	BudgetMonth = "month"
)

// Budget actions (Budget.Action): what happens when spend reaches the cap.
const (
	// BudgetWarn only reports (event and audit record).
	BudgetWarn = "warn"
	// BudgetPause pauses the subject's running sandboxes and refuses to
	// start or resume them while the cap stays reached.
	BudgetPause = "pause"
	// BudgetStop stops them, and refuses the same.
	BudgetStop = "stop"
)

// Budget is a spend cap on a tenant, or on one of its sandboxes, per day or
// per month. Money is in micro-dollars (USD x 10^6) so that sums and
// comparisons are exact.
type Budget struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	// SandboxID is the sandbox the budget caps (its id, never its name);
	// "" caps the whole tenant.
	SandboxID string `json:"sandbox_id,omitempty"`
	// Period is BudgetDay or BudgetMonth.
	Period string `json:"period"`
	// CapMicros is the cap in micro-dollars (> 0).
	CapMicros int64 `json:"cap_micros"`
	// Action is BudgetWarn, BudgetPause or BudgetStop.
	Action string `json:"action"`
	// WarnAt is the fraction of the cap at which a warning is given, in
	// (0, 1].
	WarnAt float64 `json:"warn_at"`
	// State is what the enforcer last did; it changes only through
	// SetBudgetState.
	State     BudgetState `json:"state"`
	CreatedAt time.Time   `json:"created_at"`
	UpdatedAt time.Time   `json:"updated_at"`
}

// BudgetState is a budget's enforcement record: the last warning and the
// last crossing of the cap, each with the period it fell in (a period key:
// "2026-12-02" for a day, "2026-12" for a month), when, the spend then and
// the cap it was measured against. A warning is given once per period and
// cap, an action once per crossing (period and cap): raising the cap, or a
// new period, needs nothing cleared by hand.
type BudgetState struct {
	WarnedPeriod      string     `json:"warned_period,omitempty"`
	WarnedAt          *time.Time `json:"warned_at,omitempty"`
	WarnedSpendMicros int64      `json:"warned_spend_micros,omitempty"`
	WarnedCapMicros   int64      `json:"warned_cap_micros,omitempty"`

	ExceededPeriod      string     `json:"exceeded_period,omitempty"`
	ExceededAt          *time.Time `json:"exceeded_at,omitempty"`
	ExceededSpendMicros int64      `json:"exceeded_spend_micros,omitempty"`
	ExceededCapMicros   int64      `json:"exceeded_cap_micros,omitempty"`
}

// BudgetStore keeps the tenants' budgets.
//
// Contract, checked by storetest:
//   - CreateBudget stores b (CreatedAt and UpdatedAt now when zero; State
//     as given) and returns the stored record. errs.ErrInvalid for an
//     empty id or tenant, an unknown period or action, a cap <= 0 or a
//     WarnAt outside (0, 1]; errs.ErrNotFound for an unknown tenant, or a
//     SandboxID that is not a sandbox of that tenant; errs.ErrConflict
//     for an id already taken. Nothing is stored then.
//   - GetBudget, UpdateBudget, SetBudgetState and DeleteBudget return
//     errs.ErrNotFound for an absent id and for another tenant's.
//   - UpdateBudget stores b's Period, CapMicros, Action and WarnAt (the
//     same checks as CreateBudget) and UpdatedAt (now when zero); tenant,
//     sandbox, State and CreatedAt never change through it. It returns the
//     stored record.
//   - SetBudgetState stores st alone: settings written meanwhile by
//     UpdateBudget are kept.
//   - ListBudgets returns the tenant's budgets ("" for every tenant's:
//     the enforcer's use, never an API caller's) ordered by CreatedAt,
//     then ID.
//   - A budget goes with its tenant (DeleteTenant) and with its sandbox
//     when the sandbox is purged (DeleteSandbox), in the same transaction.
//   - Every write is durable when it returns.
type BudgetStore interface {
	CreateBudget(ctx context.Context, b Budget) (Budget, error)
	GetBudget(ctx context.Context, tenantID, id string) (Budget, error)
	ListBudgets(ctx context.Context, tenantID string) ([]Budget, error)
	UpdateBudget(ctx context.Context, b Budget) (Budget, error)
	SetBudgetState(ctx context.Context, tenantID, id string, st BudgetState) error
	DeleteBudget(ctx context.Context, tenantID, id string) error
}
