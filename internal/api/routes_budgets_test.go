package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// budgetFake serves budgets on top of fakeBackend: one budget b-1 in
// tenant t-alice; anything else is absent.
type budgetFake struct{ *fakeBackend }

var _ BudgetBackend = budgetFake{}

func newBudgetFake() budgetFake { return budgetFake{&fakeBackend{}} }

func (f budgetFake) CreateBudget(_ context.Context, tenant string, req client.CreateBudgetRequest) (client.Budget, error) {
	f.record("CreateBudget", tenant, req.Sandbox)
	if req.Cap == "" {
		return client.Budget{}, fmt.Errorf("budget cap %q: want a decimal number of US dollars: %w", req.Cap, errs.ErrInvalid)
	}
	return client.Budget{ID: "b-1", Tenant: tenant, Sandbox: req.Sandbox, Cap: req.Cap, Period: req.Period, Action: req.Action}, nil
}

func (f budgetFake) ListBudgets(_ context.Context, tenant string) ([]client.Budget, error) {
	f.record("ListBudgets", tenant, "")
	return nil, nil
}

func (f budgetFake) get(tenant, id string) (client.Budget, error) {
	if tenant != "t-alice" || id != "b-1" {
		return client.Budget{}, fmt.Errorf("budget %s: %w", id, errs.ErrNotFound)
	}
	return client.Budget{ID: "b-1", Tenant: tenant, Cap: "5.00", Spend: "6.00", State: client.BudgetExceeded}, nil
}

func (f budgetFake) GetBudget(_ context.Context, tenant, id string) (client.Budget, error) {
	f.record("GetBudget", tenant, id)
	return f.get(tenant, id)
}

func (f budgetFake) UpdateBudget(_ context.Context, tenant, id string, req client.UpdateBudgetRequest) (client.Budget, error) {
	f.record("UpdateBudget", tenant, id)
	b, err := f.get(tenant, id)
	if err == nil && req.Cap != nil {
		b.Cap = *req.Cap
	}
	return b, err
}

func (f budgetFake) DeleteBudget(_ context.Context, tenant, id string) error {
	f.record("DeleteBudget", tenant, id)
	_, err := f.get(tenant, id)
	return err
}

// TestBudgetRoutesPassTheCallersTenantAndMapErrors: every route reaches
// the backend with the caller's tenant; another tenant's budget is a 404;
// a bad cap is a 400 that says what is wanted; an empty list is []; a
// tenant-user key reads budgets but sets none.
func TestBudgetRoutesPassTheCallersTenantAndMapErrors(t *testing.T) {
	f := newBudgetFake()
	c, srv := newTestServer(t, f, aliceAdminKey)
	ctx := testCtx(t)
	user, err := client.New(srv.URL, aliceKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := user.ListBudgets(ctx); err != nil {
		t.Fatalf("a tenant-user key lists budgets: %v", err)
	}
	if _, err := user.CreateBudget(ctx, client.CreateBudgetRequest{Period: "day", Cap: "5", Action: "warn"}); client.StatusCode(err) != http.StatusForbidden {
		t.Fatalf("a tenant-user key creates a budget: %v, want 403", err)
	}
	b, err := c.CreateBudget(ctx, client.CreateBudgetRequest{Period: "day", Cap: "5.00", Action: "pause", Sandbox: "web"})
	if err != nil || b.ID != "b-1" || b.Tenant != "t-alice" || b.Sandbox != "web" {
		t.Fatalf("create: %+v %v", b, err)
	}
	_, err = c.CreateBudget(ctx, client.CreateBudgetRequest{Period: "day", Action: "pause"})
	if client.StatusCode(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "want a decimal") {
		t.Fatalf("create with no cap: %v, want 400 saying what is wanted", err)
	}
	if body := doRaw(t, srv, http.MethodGet, "/v1/budgets", "", http.StatusOK); strings.TrimSpace(body) != emptyPage {
		t.Fatalf("empty list: %q, want []", body)
	}
	capv := "9.00"
	if b, err := c.UpdateBudget(ctx, "b-1", client.UpdateBudgetRequest{Cap: &capv}); err != nil || b.Cap != "9.00" {
		t.Fatalf("update: %+v %v", b, err)
	}
	if _, err := c.GetBudget(ctx, "b-2"); !client.IsNotFound(err) {
		t.Fatalf("get an absent budget: %v, want 404", err)
	}
	if err := c.DeleteBudget(ctx, "b-1"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	for _, call := range f.Calls() {
		if call.Tenant != "t-alice" {
			t.Errorf("backend %s called for tenant %s", call.Method, call.Tenant)
		}
	}
}

// TestBudgetRefusalIs402: errs.ErrBudget reaches a client as 402 Payment
// Required with the backend's explanation.
func TestBudgetRefusalIs402(t *testing.T) {
	err := fmt.Errorf("start sandbox web: budget b-1 (per day, pause): spend $6.00 reached its cap $5.00: %w", errs.ErrBudget)
	if got := HTTPStatus(err); got != http.StatusPaymentRequired {
		t.Fatalf("HTTPStatus = %d, want 402", got)
	}
	if msg := errs.Message(err); !strings.Contains(msg, "cap $5.00") || !errors.Is(err, errs.ErrBudget) {
		t.Fatalf("message %q", msg)
	}
}
