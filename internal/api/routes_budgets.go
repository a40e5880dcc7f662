package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// BudgetID is the {id} path parameter of the /v1/budgets/{id} routes
// (exported only because huma ignores unexported embedded fields).
type BudgetID struct {
	ID string `path:"id" minLength:"1" maxLength:"64" doc:"Budget id"`
}

// budgetIntro opens the description of every budget route.
const budgetIntro = "A budget caps what the tenant, or one of its sandboxes, spends per UTC day or calendar month " +
	"(metered and priced as GET /v1/usage reports it). At warn_at x cap (default 80%) a budget.warning event is " +
	"given once per period; at the cap a budget.exceeded event and an audit record, and with action pause or stop " +
	"the subject's running sandboxes are paused or stopped (stop reason \"budget\") within a minute. While the cap " +
	"stays reached, starting or resuming them is refused with 402 naming the budget, the cap and the spend. Raising " +
	"the cap above the spend, or the next period, lifts it; nothing needs clearing by hand. "

// registerBudgets adds the /v1/budgets routes; s.op keeps them closed to
// sandbox-scoped tokens, authorize to scoped keys and, for writes, to
// keys below tenant-admin.
func (s *server) registerBudgets(b BudgetBackend) {
	const tag = "budgets"

	create := s.op(http.MethodPost, "/v1/budgets", "create-budget", "Set a spend cap on the tenant or a sandbox", tag, http.StatusCreated)
	create.Description = budgetIntro + "Needs an unscoped tenant-admin or admin key."
	huma.Register(s.api, create, func(ctx context.Context, in *struct {
		Body client.CreateBudgetRequest
	}) (*out[client.Budget], error) {
		const op = "create budget"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		bg, err := b.CreateBudget(ctx, p.TenantID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Budget]{Body: bg}, nil
	})

	list := s.op(http.MethodGet, "/v1/budgets", "list-budgets", "List the tenant's budgets with their spend", tag, 0)
	list.Description = budgetIntro + "Each with its current spend, spend/cap, state (ok, warning, exceeded) and period."
	huma.Register(s.api, list, func(ctx context.Context, in *struct{ PageQuery }) (*out[client.Page[client.Budget]], error) {
		const op = "list budgets"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		list, err := b.ListBudgets(ctx, p.TenantID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if list == nil {
			list = []client.Budget{}
		}
		return pageOf(list, in.PageQuery)
	})

	get := s.op(http.MethodGet, "/v1/budgets/{id}", "get-budget", "A budget with its spend", tag, 0)
	get.Description = budgetIntro
	huma.Register(s.api, get, func(ctx context.Context, in *BudgetID) (*out[client.Budget], error) {
		const op = "get budget"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		bg, err := b.GetBudget(ctx, p.TenantID, in.ID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Budget]{Body: bg}, nil
	})

	patch := s.op(http.MethodPatch, "/v1/budgets/{id}", "update-budget", "Change a budget (raise its cap to lift it)", tag, 0)
	patch.Description = budgetIntro + "Fields left out stay. Needs an unscoped tenant-admin or admin key."
	huma.Register(s.api, patch, func(ctx context.Context, in *struct {
		BudgetID
		Body client.UpdateBudgetRequest
	}) (*out[client.Budget], error) {
		const op = "update budget"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		bg, err := b.UpdateBudget(ctx, p.TenantID, in.ID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Budget]{Body: bg}, nil
	})

	del := s.op(http.MethodDelete, "/v1/budgets/{id}", "delete-budget", "Remove a budget", tag, http.StatusNoContent)
	del.Description = budgetIntro + "Needs an unscoped tenant-admin or admin key."
	huma.Register(s.api, del, func(ctx context.Context, in *BudgetID) (*struct{}, error) {
		const op = "delete budget"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if err := b.DeleteBudget(ctx, p.TenantID, in.ID); err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return nil, nil
	})
}
