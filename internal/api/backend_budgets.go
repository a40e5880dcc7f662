package api

import (
	"context"

	"github.com/stead-dev/stead/client"
)

// BudgetBackend keeps a tenant's budgets: spend caps on the tenant or on
// one of its sandboxes, per UTC day or month, with an action at the cap.
// NewHandler registers the /v1/budgets routes only when its Backend also
// implements this interface. Those routes are closed to sandbox-scoped
// tokens and to scoped keys (a budget is the tenant's matter); GET is open
// to every other key of the tenant, writes need an unscoped tenant-admin
// or admin key (authz.go).
//
// As with Backend, every method gets the caller's tenant; another tenant's
// budget, and a sandbox of another tenant named in a create, are absent
// (errs.ErrNotFound). Every answer carries the budget's current spend and
// state.
type BudgetBackend interface {
	// CreateBudget stores a new budget. A bad period, action, cap (not a
	// positive decimal of at most 6 decimals) or warn_at (outside (0, 1])
	// is errs.ErrInvalid and stores nothing.
	CreateBudget(ctx context.Context, tenant string, req client.CreateBudgetRequest) (client.Budget, error)
	// ListBudgets returns the tenant's budgets by creation (never nil).
	ListBudgets(ctx context.Context, tenant string) ([]client.Budget, error)
	// GetBudget returns the budget id.
	GetBudget(ctx context.Context, tenant, id string) (client.Budget, error)
	// UpdateBudget changes the settings the request names, with the
	// checks of CreateBudget; a refused update changes nothing.
	UpdateBudget(ctx context.Context, tenant, id string, req client.UpdateBudgetRequest) (client.Budget, error)
	// DeleteBudget removes the budget id (a sandbox it held back may run
	// again at once).
	DeleteBudget(ctx context.Context, tenant, id string) error
}
