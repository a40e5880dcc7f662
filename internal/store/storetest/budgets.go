package storetest

import (
	"testing"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

func newBudget(id, tenant, sandbox string) store.Budget {
	return store.Budget{ID: id, TenantID: tenant, SandboxID: sandbox, Period: store.BudgetDay, CapMicros: 5_000_000,
		Action: store.BudgetPause, WarnAt: 0.8, CreatedAt: at(1), UpdatedAt: at(1)}
}

// testBudgetsCRUD checks the BudgetStore contract's round trip: a create
// returns what a get returns, the list is ordered and tenant-scoped, an
// update changes the settings only, a delete removes once; another
// tenant's budget is absent to every call.
func testBudgetsCRUD(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	b1 := newBudget("b1", store.DefaultTenant, "")
	b1.CreatedAt, b1.UpdatedAt = at(5), at(5)
	got, err := s.CreateBudget(ctx, b1)
	noErr(t, err, "create tenant budget")
	checkTime(t, "created_at", got.CreatedAt, at(5))
	b2 := newBudget("b2", store.DefaultTenant, "sb1")
	b2.Period, b2.Action, b2.WarnAt, b2.CapMicros = store.BudgetMonth, store.BudgetStop, 0.5, 1
	_, err = s.CreateBudget(ctx, b2)
	noErr(t, err, "create sandbox budget")
	_, err = s.CreateBudget(ctx, newBudget("b3", "acme", ""))
	noErr(t, err, "create other tenant's budget")
	_, err = s.CreateBudget(ctx, newBudget("b1", "acme", ""))
	wantErr(t, err, errs.ErrConflict, "create with a taken id")

	g, err := s.GetBudget(ctx, store.DefaultTenant, "b2")
	noErr(t, err, "get")
	if g.SandboxID != "sb1" || g.Period != store.BudgetMonth || g.Action != store.BudgetStop || g.WarnAt != 0.5 || g.CapMicros != 1 ||
		g.TenantID != store.DefaultTenant || g.State != (store.BudgetState{}) {
		t.Fatalf("get b2: %+v", g)
	}
	checkTime(t, "created_at", g.CreatedAt, at(1))
	_, err = s.GetBudget(ctx, "acme", "b2")
	wantErr(t, err, errs.ErrNotFound, "get another tenant's budget")

	list, err := s.ListBudgets(ctx, store.DefaultTenant)
	noErr(t, err, "list")
	if len(list) != 2 || list[0].ID != "b2" || list[1].ID != "b1" {
		t.Fatalf("list: %+v, want b2 then b1 (by created_at)", list)
	}
	all, err := s.ListBudgets(ctx, "")
	noErr(t, err, "list all")
	if len(all) != 3 {
		t.Fatalf("list of every tenant: %d budgets, want 3", len(all))
	}

	upd := g
	upd.CapMicros, upd.Period, upd.Action, upd.WarnAt, upd.UpdatedAt = 9_000_000, store.BudgetDay, store.BudgetWarn, 1, at(30)
	upd.SandboxID, upd.CreatedAt = "", at(99) // never changed by an update
	upd.State = store.BudgetState{ExceededPeriod: "2026-11"}
	got, err = s.UpdateBudget(ctx, upd)
	noErr(t, err, "update")
	if got.CapMicros != 9_000_000 || got.Period != store.BudgetDay || got.Action != store.BudgetWarn || got.WarnAt != 1 ||
		got.SandboxID != "sb1" || got.State != (store.BudgetState{}) {
		t.Fatalf("update returned %+v", got)
	}
	checkTime(t, "updated_at", got.UpdatedAt, at(30))
	checkTime(t, "created_at", got.CreatedAt, at(1))
	upd.TenantID = "acme"
	_, err = s.UpdateBudget(ctx, upd)
	wantErr(t, err, errs.ErrNotFound, "update another tenant's budget")
	upd.TenantID, upd.ID = store.DefaultTenant, "ghost"
	_, err = s.UpdateBudget(ctx, upd)
	wantErr(t, err, errs.ErrNotFound, "update an absent budget")

	wantErr(t, s.DeleteBudget(ctx, "acme", "b1"), errs.ErrNotFound, "delete another tenant's budget")
	noErr(t, s.DeleteBudget(ctx, store.DefaultTenant, "b1"), "delete")
	wantErr(t, s.DeleteBudget(ctx, store.DefaultTenant, "b1"), errs.ErrNotFound, "delete twice")
	_, err = s.GetBudget(ctx, store.DefaultTenant, "b1")
	wantErr(t, err, errs.ErrNotFound, "get after delete")
}

// testBudgetsRejectBadInput: each bad field, an unknown tenant and a
// sandbox of another tenant (or none) are refused and store nothing.
func testBudgetsRejectBadInput(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	createSandbox(t, s, newSandbox("sb-acme", "acme", "web", at(0)))
	for _, c := range []struct {
		what string
		mod  func(*store.Budget)
		want error
	}{
		{"empty id", func(b *store.Budget) { b.ID = "" }, errs.ErrInvalid},
		{"empty tenant", func(b *store.Budget) { b.TenantID = "" }, errs.ErrInvalid},
		{"unknown period", func(b *store.Budget) { b.Period = "week" }, errs.ErrInvalid},
		{"unknown action", func(b *store.Budget) { b.Action = "delete" }, errs.ErrInvalid},
		{"zero cap", func(b *store.Budget) { b.CapMicros = 0 }, errs.ErrInvalid},
		{"negative cap", func(b *store.Budget) { b.CapMicros = -1 }, errs.ErrInvalid},
		{"zero warn_at", func(b *store.Budget) { b.WarnAt = 0 }, errs.ErrInvalid},
		{"warn_at above 1", func(b *store.Budget) { b.WarnAt = 1.5 }, errs.ErrInvalid},
		{"unknown tenant", func(b *store.Budget) { b.TenantID = "ghost" }, errs.ErrNotFound},
		{"another tenant's sandbox", func(b *store.Budget) { b.SandboxID = "sb-acme" }, errs.ErrNotFound},
		{"absent sandbox", func(b *store.Budget) { b.SandboxID = "sb-ghost" }, errs.ErrNotFound},
	} {
		b := newBudget("bad", store.DefaultTenant, "")
		c.mod(&b)
		_, err := s.CreateBudget(ctx, b)
		wantErr(t, err, c.want, c.what)
	}
	all, err := s.ListBudgets(ctx, "")
	noErr(t, err, "list")
	if len(all) != 0 {
		t.Fatalf("refused creates stored %+v", all)
	}
	_, err = s.CreateBudget(ctx, newBudget("ok", store.DefaultTenant, ""))
	noErr(t, err, "create")
	bad := newBudget("ok", store.DefaultTenant, "")
	bad.CapMicros = 0
	_, err = s.UpdateBudget(ctx, bad)
	wantErr(t, err, errs.ErrInvalid, "update to a zero cap")
	g, err := s.GetBudget(ctx, store.DefaultTenant, "ok")
	noErr(t, err, "get")
	if g.CapMicros != 5_000_000 {
		t.Fatalf("a refused update changed the cap to %d", g.CapMicros)
	}
}

// testBudgetStateAndSettingsApart: SetBudgetState stores the state and
// keeps the settings; UpdateBudget keeps the state.
func testBudgetStateAndSettingsApart(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.CreateBudget(ctx, newBudget("b", store.DefaultTenant, ""))
	noErr(t, err, "create")
	st := store.BudgetState{WarnedPeriod: "2026-12-02", WarnedAt: ptr(at(10)), WarnedSpendMicros: 4_000_001, WarnedCapMicros: 5_000_000,
		ExceededPeriod: "2026-12-02", ExceededAt: ptr(at(20)), ExceededSpendMicros: 5_000_002, ExceededCapMicros: 5_000_000}
	noErr(t, s.SetBudgetState(ctx, store.DefaultTenant, "b", st), "set state")
	wantErr(t, s.SetBudgetState(ctx, "acme", "b", st), errs.ErrNotFound, "set state of another tenant's budget")
	wantErr(t, s.SetBudgetState(ctx, store.DefaultTenant, "ghost", st), errs.ErrNotFound, "set state of an absent budget")
	b, err := s.GetBudget(ctx, store.DefaultTenant, "b")
	noErr(t, err, "get")
	if b.CapMicros != 5_000_000 || b.State.WarnedPeriod != "2026-12-02" || b.State.WarnedSpendMicros != 4_000_001 || b.State.WarnedCapMicros != 5_000_000 ||
		b.State.ExceededPeriod != "2026-12-02" || b.State.ExceededSpendMicros != 5_000_002 || b.State.ExceededCapMicros != 5_000_000 ||
		b.State.WarnedAt == nil || b.State.ExceededAt == nil {
		t.Fatalf("state after set: %+v", b)
	}
	checkTime(t, "warned_at", *b.State.WarnedAt, at(10))
	checkTime(t, "exceeded_at", *b.State.ExceededAt, at(20))
	b.CapMicros = 7_000_000
	b.State = store.BudgetState{}
	_, err = s.UpdateBudget(ctx, b)
	noErr(t, err, "update")
	b, err = s.GetBudget(ctx, store.DefaultTenant, "b")
	noErr(t, err, "get")
	if b.CapMicros != 7_000_000 || b.State.ExceededPeriod != "2026-12-02" || b.State.ExceededSpendMicros != 5_000_002 {
		t.Fatalf("an update lost the state: %+v", b)
	}
	noErr(t, s.SetBudgetState(ctx, store.DefaultTenant, "b", store.BudgetState{}), "clear state")
	b, _ = s.GetBudget(ctx, store.DefaultTenant, "b")
	if b.State != (store.BudgetState{}) {
		t.Fatalf("cleared state reads %+v", b.State)
	}
}

// testBudgetsGoWithSandboxAndTenant: purging a sandbox removes its
// budgets (not the tenant's); deleting the tenant removes the rest.
func testBudgetsGoWithSandboxAndTenant(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	createSandbox(t, s, newSandbox("sb1", "acme", "web", at(0)))
	for _, b := range []store.Budget{newBudget("b-sb", "acme", "sb1"), newBudget("b-t", "acme", ""), newBudget("b-def", store.DefaultTenant, "")} {
		_, err := s.CreateBudget(ctx, b)
		noErr(t, err, "create "+b.ID)
	}
	noErr(t, s.DeleteSandbox(ctx, "acme", "sb1"), "purge sandbox")
	_, err := s.GetBudget(ctx, "acme", "b-sb")
	wantErr(t, err, errs.ErrNotFound, "the purged sandbox's budget")
	_, err = s.GetBudget(ctx, "acme", "b-t")
	noErr(t, err, "the tenant's budget stays")
	noErr(t, s.DeleteTenant(ctx, "acme"), "delete tenant")
	createTenant(t, s, "acme")
	list, err := s.ListBudgets(ctx, "acme")
	noErr(t, err, "list")
	if len(list) != 0 {
		t.Fatalf("a re-made tenant inherits budgets %+v", list)
	}
	if _, err := s.GetBudget(ctx, store.DefaultTenant, "b-def"); err != nil {
		t.Fatalf("another tenant's budget went with acme: %v", err)
	}
}
