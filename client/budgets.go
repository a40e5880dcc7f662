package client

import (
	"context"
	"net/http"
	"net/url"
)

// budgetPath returns the escaped path of a budget.
func budgetPath(id string) string { return "/v1/budgets/" + url.PathEscape(id) }

// CreateBudget sets a spend cap on the tenant or one of its sandboxes.
func (c *Client) CreateBudget(ctx context.Context, req CreateBudgetRequest) (Budget, error) {
	var b Budget
	err := c.do(ctx, http.MethodPost, "/v1/budgets", nil, req, &b)
	return b, err
}

// ListBudgets lists the tenant's budgets, each with its current spend and
// state.
func (c *Client) ListBudgets(ctx context.Context) ([]Budget, error) {
	list, err := listAll[Budget](ctx, c, "/v1/budgets", nil)
	return list, err
}

// GetBudget returns one budget with its current spend and state.
func (c *Client) GetBudget(ctx context.Context, id string) (Budget, error) {
	var b Budget
	err := c.do(ctx, http.MethodGet, budgetPath(id), nil, nil, &b)
	return b, err
}

// UpdateBudget changes a budget's settings (raising its cap lifts it).
func (c *Client) UpdateBudget(ctx context.Context, id string, req UpdateBudgetRequest) (Budget, error) {
	var b Budget
	err := c.do(ctx, http.MethodPatch, budgetPath(id), nil, req, &b)
	return b, err
}

// DeleteBudget removes a budget.
func (c *Client) DeleteBudget(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, budgetPath(id), nil, nil, nil)
}
