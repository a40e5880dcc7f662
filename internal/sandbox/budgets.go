package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Budgets is what the service needs of the budget enforcer
// (budget.Enforcer): it serves the budget API and says whether a sandbox
// may start or resume.
type Budgets interface {
	api.BudgetBackend
	// MayRun returns nil when the tenant's sandbox id may start or
	// resume, else an error wrapping errs.ErrBudget that names the budget,
	// its cap and the spend.
	MayRun(ctx context.Context, tenant, id string) error
}

// budgetReason is the stop reason of a sandbox a budget paused or
// stopped (budget.StopReason).
const budgetReason = "budget"

// SetBudgets sets the budget enforcer (the daemon makes it after the
// service: it acts through the service). Call it before serving.
func (s *Service) SetBudgets(b Budgets) { s.budgets = b }

// budgetMayRun refuses to start or resume sb while a budget over it is
// exceeded (every start, resume, wake and auto-resume goes through
// startLocked or resumeLocked, which call it).
func (s *Service) budgetMayRun(ctx context.Context, tenant, id string) error {
	if s.budgets == nil {
		return nil
	}
	return s.budgets.MayRun(ctx, tenant, id)
}

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

func (s *Service) budgetBackend() (Budgets, error) {
	if s.budgets == nil {
		return nil, fmt.Errorf("budgets are not enabled in this daemon: %w", errs.ErrUnsupported)
	}
	return s.budgets, nil
}

// CreateBudget implements api.BudgetBackend through the enforcer.
func (s *Service) CreateBudget(ctx context.Context, tenant string, req client.CreateBudgetRequest) (client.Budget, error) {
	b, err := s.budgetBackend()
	if err != nil {
		return client.Budget{}, err
	}
	return b.CreateBudget(ctx, tenant, req)
}

// ListBudgets implements api.BudgetBackend through the enforcer.
func (s *Service) ListBudgets(ctx context.Context, tenant string) ([]client.Budget, error) {
	b, err := s.budgetBackend()
	if err != nil {
		return nil, err
	}
	return b.ListBudgets(ctx, tenant)
}

// GetBudget implements api.BudgetBackend through the enforcer.
func (s *Service) GetBudget(ctx context.Context, tenant, id string) (client.Budget, error) {
	b, err := s.budgetBackend()
	if err != nil {
		return client.Budget{}, err
	}
	return b.GetBudget(ctx, tenant, id)
}

// UpdateBudget implements api.BudgetBackend through the enforcer.
func (s *Service) UpdateBudget(ctx context.Context, tenant, id string, req client.UpdateBudgetRequest) (client.Budget, error) {
	b, err := s.budgetBackend()
	if err != nil {
		return client.Budget{}, err
	}
	return b.UpdateBudget(ctx, tenant, id, req)
}

// DeleteBudget implements api.BudgetBackend through the enforcer.
func (s *Service) DeleteBudget(ctx context.Context, tenant, id string) error {
	b, err := s.budgetBackend()
	if err != nil {
		return err
	}
	return b.DeleteBudget(ctx, tenant, id)
}

var _ api.BudgetBackend = (*Service)(nil)
