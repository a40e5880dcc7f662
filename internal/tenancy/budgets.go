package tenancy

import (
	"context"
	"fmt"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// Budgets is what the service needs of the budget enforcer
// (budget.Enforcer): it serves the budget API and says whether a sandbox
// may start or resume. The enforcer's actions on running sandboxes
// (pause, stop) go to internal/sandbox (BudgetPause, BudgetStop).
type Budgets interface {
	api.BudgetBackend
	// MayRun returns nil when the tenant's sandbox id may start or
	// resume, else an error wrapping errs.ErrBudget that names the budget,
	// its cap and the spend.
	MayRun(ctx context.Context, tenant, id string) error
}

// SetBudgets sets the budget enforcer (the daemon makes it after the
// services: it acts through the sandbox service). Call it before serving.
func (s *Service) SetBudgets(b Budgets) { s.budgets = b }

// BudgetMayRun refuses to start or resume the tenant's sandbox id while a
// budget over it is exceeded (internal/sandbox asks at every start,
// resume, wake and auto-resume: startLocked and resumeLocked call it). With
// no enforcer set, everything may run.
func (s *Service) BudgetMayRun(ctx context.Context, tenant, id string) error {
	if s.budgets == nil {
		return nil
	}
	return s.budgets.MayRun(ctx, tenant, id)
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
