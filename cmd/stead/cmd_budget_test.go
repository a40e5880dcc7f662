package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/budget"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/metering"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// budgetCLIBackend serves the budget routes with the real enforcer over a
// real store and meter, to a tenant-admin key "k" of the default tenant.
type budgetCLIBackend struct {
	*cliBackend
	*budget.Enforcer
}

var _ api.BudgetBackend = budgetCLIBackend{}

func (budgetCLIBackend) Authenticate(_ context.Context, secret string) (api.Principal, error) {
	if secret != "k" {
		return api.Principal{}, errs.ErrUnauthenticated
	}
	return api.Principal{TenantID: store.DefaultTenant, KeyID: "k1", Role: client.RoleTenantAdmin}, nil
}

// TestBudgetCommands: set creates (the three settings required), ls shows
// spend, cap and state, set ID changes only the flags given, a bad cap is
// refused saying what is wanted, rm removes and a second rm exits 3.
func TestBudgetCommands(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	enf := budget.New(budget.Options{Store: st, Spend: metering.New(metering.Options{Store: st, Logger: log}), Logger: log})
	srv := httptest.NewServer(api.NewHandler(budgetCLIBackend{&cliBackend{}, enf}, api.Options{Logger: log}))
	t.Cleanup(srv.Close)

	if code, _, errOut := stead(t, srv, "budget", "set", "--cap", "5"); code != exitUsage || !strings.Contains(errOut, "--period") {
		t.Fatalf("set without period and action: exit %d %q", code, errOut)
	}
	code, out, errOut := stead(t, srv, "budget", "set", "--period", "day", "--cap", "5.00", "--action", "pause", "--warn-at", "0.9")
	if code != exitOK || !strings.Contains(out, "5.00 per day on tenant default, action pause; spent 0.00") {
		t.Fatalf("set: exit %d %q %q", code, out, errOut)
	}
	list, _ := enf.ListBudgets(t.Context(), store.DefaultTenant)
	if len(list) != 1 || list[0].WarnAt != 0.9 || list[0].Cap != "5.00" {
		t.Fatalf("stored %+v", list)
	}
	id := list[0].ID
	code, out, _ = stead(t, srv, "budget", "ls")
	if code != exitOK || !strings.Contains(out, id) || !strings.Contains(out, "$0.00") || !strings.Contains(out, "$5.00") || !strings.Contains(out, "ok") {
		t.Fatalf("ls: exit %d %q", code, out)
	}
	if code, out, _ := stead(t, srv, "budget", "set", id, "--cap", "12.5"); code != exitOK || !strings.Contains(out, "12.50 per day") || !strings.Contains(out, "action pause") {
		t.Fatalf("set ID --cap: exit %d %q", code, out)
	}
	if code, _, errOut := stead(t, srv, "budget", "set", id, "--cap", "1.2345678"); code != exitError || !strings.Contains(errOut, "6 decimals") {
		t.Fatalf("a 7-decimal cap: exit %d %q", code, errOut)
	}
	if code, _, errOut := stead(t, srv, "budget", "set", "--sandbox", "nosuch", "--period", "day", "--cap", "1", "--action", "stop"); code != exitNotFound {
		t.Fatalf("a budget of an absent sandbox: exit %d %q", code, errOut)
	}
	if code, out, _ := stead(t, srv, "budget", "rm", id); code != exitOK || out != "budget "+id+" removed\n" {
		t.Fatalf("rm: exit %d %q", code, out)
	}
	if code, _, _ := stead(t, srv, "budget", "rm", id); code != exitNotFound {
		t.Fatalf("rm twice: exit %d", code)
	}
}
