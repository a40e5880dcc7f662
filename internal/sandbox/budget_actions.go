package sandbox

import (
	"context"
	"errors"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/tenancy"
)

// Budgets is what the services need of the budget enforcer; the budget
// API and the may-run check are internal/tenancy's (budgets.go), the
// actions on this node's running sandboxes are here.
type Budgets = tenancy.Budgets

// budgetReason is the stop reason of a sandbox a budget paused or
// stopped (budget.StopReason).
const budgetReason = "budget"

// BudgetPause pauses the tenant's running sandbox id for a budget (stop
// reason "budget"); acted is false when it was not running.
func (s *Service) BudgetPause(ctx context.Context, tenant, id string) (bool, error) {
	_, err := s.pause(ctx, tenant, id, budgetReason)
	return budgetActed(err)
}

// BudgetStop stops the tenant's running sandbox id for a budget (stop
// reason "budget"); acted is false when it was not running.
func (s *Service) BudgetStop(ctx context.Context, tenant, id string) (bool, error) {
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return budgetActed(err)
	}
	if sb.State != store.StateRunning {
		return false, nil
	}
	_, err = s.stop(ctx, tenant, id, budgetReason)
	return budgetActed(err)
}

// budgetActed reads a pause's or a stop's error: a sandbox that was
// already there, gone, or in a state the verb does not leave (someone else
// acted meanwhile) is not acted on and not an error.
func budgetActed(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case isAlready(err), errors.Is(err, errs.ErrNotFound), errors.Is(err, errs.ErrConflict):
		return false, nil
	}
	return false, err
}
