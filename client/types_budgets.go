package client

import "time"

// Budget periods, actions and states.
const (
	BudgetPeriodDay   = "day"
	BudgetPeriodMonth = "month"

	BudgetActionWarn  = "warn"
	BudgetActionPause = "pause"
	BudgetActionStop  = "stop"

	// BudgetOK: spend is below the warning threshold.
	BudgetOK = "ok"
	// BudgetWarning: spend reached warn_at x cap.
	BudgetWarning = "warning"
	// BudgetExceeded: spend reached the cap.
	BudgetExceeded = "exceeded"
)

// DefaultBudgetWarnAt is the fraction of the cap at which a budget warns
// when its request names none.
const DefaultBudgetWarnAt = 0.8

// CreateBudgetRequest sets a spend cap on the tenant or one of its
// sandboxes.
type CreateBudgetRequest struct {
	Sandbox string   `json:"sandbox,omitempty" doc:"Sandbox (id or name) the budget caps; empty caps the whole tenant"`
	Period  string   `json:"period" doc:"day or month: spend is summed over the current UTC day or UTC calendar month"`
	Cap     string   `json:"cap" doc:"The cap in US dollars, a decimal such as 5.00 (at most 6 decimals)"`
	Action  string   `json:"action" doc:"What happens at the cap: warn (event and audit only), pause or stop the subject's running sandboxes"`
	WarnAt  *float64 `json:"warn_at,omitempty" doc:"Fraction of the cap at which a budget.warning is given, in (0, 1] (default 0.8)"`
}

// UpdateBudgetRequest changes a budget's settings; absent fields stay.
// Raising the cap above the spend lifts an exceeded budget at once.
type UpdateBudgetRequest struct {
	Period *string  `json:"period,omitempty" doc:"day or month"`
	Cap    *string  `json:"cap,omitempty" doc:"The cap in US dollars, such as 10.00"`
	Action *string  `json:"action,omitempty" doc:"warn, pause or stop"`
	WarnAt *float64 `json:"warn_at,omitempty" doc:"Fraction of the cap at which a warning is given, in (0, 1]"`
}

// BudgetMark is a moment a budget's enforcer acted on: its last warning or
// its last crossing of the cap.
type BudgetMark struct {
	Period string    `json:"period" doc:"The period it fell in: 2026-12-02 for a day, 2026-12 for a month"`
	At     time.Time `json:"at" doc:"When (RFC 3339)"`
	Spend  string    `json:"spend" doc:"Spend then, in US dollars"`
	Cap    string    `json:"cap" doc:"The cap then, in US dollars"`
}

// Budget is a spend cap with its current spend.
type Budget struct {
	ID          string  `json:"id" doc:"Unique id"`
	Tenant      string  `json:"tenant" doc:"Id of the tenant that owns it"`
	Sandbox     string  `json:"sandbox,omitempty" doc:"The capped sandbox's id; empty for a budget of the whole tenant"`
	SandboxName string  `json:"sandbox_name,omitempty" doc:"Name of the sandbox"`
	Period      string  `json:"period" doc:"Period"`
	Cap         string  `json:"cap" doc:"US dollars"`
	Action      string  `json:"action" doc:"What was done"`
	WarnAt      float64 `json:"warn_at" doc:"Fraction of the cap at which a warning event is sent (e.g. 0.8)"`
	Currency    string  `json:"currency" doc:"Currency of the amounts (e.g. USD)"`
	// Spend is what the subject cost in the current period (metered and
	// priced as GET /v1/usage does); Fraction is Spend / Cap.
	Spend    string  `json:"spend" doc:"US dollars spent in the current period"`
	Fraction float64 `json:"fraction" doc:"spend / cap"`
	State    string  `json:"state" doc:"ok, warning (spend >= warn_at x cap) or exceeded (spend >= cap)"`
	// PeriodStart and PeriodEnd bound the current period [start, end).
	PeriodStart  time.Time   `json:"period_start" doc:"PeriodStart and PeriodEnd bound the current period [start, end)."`
	PeriodEnd    time.Time   `json:"period_end" doc:"When the current period ends (RFC 3339)"`
	LastWarning  *BudgetMark `json:"last_warning,omitempty" doc:"When the last warning was sent (RFC 3339)"`
	LastExceeded *BudgetMark `json:"last_exceeded,omitempty" doc:"When the cap was last exceeded (RFC 3339)"`
	CreatedAt    time.Time   `json:"created_at" doc:"When it was created (RFC 3339)"`
	UpdatedAt    time.Time   `json:"updated_at" doc:"When it last changed (RFC 3339)"`
}
