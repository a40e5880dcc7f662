package budget

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/metering"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// clock is a test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// perSecond is the price of a second of the "test" instance type: $0.01
// ($36 an hour), so spend is easy to reckon in the tests.
const perSecond = 0.01

// rig is the daemon's wiring in small: a real store observed by a real
// meter (lifecycle transitions open and close its intervals), the
// enforcer over both with a real audit trail, and sandboxes moved the way
// the service moves them (svc: the service-shaped side of the enforcer).
type rig struct {
	t      *testing.T
	c      *clock
	raw    *sqlite.Store
	obs    store.Store
	enf    *Enforcer
	mu     sync.Mutex
	events []events.Event
}

func newRig(t *testing.T, c *clock) *rig {
	t.Helper()
	raw, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	log := slog.New(slog.DiscardHandler)
	prices := metering.DefaultPrices()
	prices.ComputePerHour["test"] = perSecond * 3600
	meter := metering.New(metering.Options{Store: raw, Now: c.now, Prices: &prices, Logger: log})
	if err := meter.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	trail, err := audit.Open(t.Context(), raw, filepath.Join(t.TempDir(), "audit.key"), audit.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, c: c, raw: raw, obs: events.ObserveStore(raw, meter, c.now)}
	sink := events.SinkFunc(func(_ context.Context, e events.Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
	})
	r.enf = New(Options{Store: raw, Spend: meter, Sandboxes: (*svc)(r), Events: sink, Audit: trail, Now: c.now, Logger: log})
	if err := raw.CreateTenant(t.Context(), store.Tenant{ID: "other", Name: "other"}); err != nil {
		t.Fatal(err)
	}
	return r
}

// svc moves sandboxes as the sandbox service does for a budget.
type svc rig

func (s *svc) to(ctx context.Context, tenant, id string, st store.SandboxState) (bool, error) {
	sb, err := s.raw.GetSandbox(ctx, tenant, id)
	if err != nil {
		return false, err
	}
	if sb.State != store.StateRunning {
		return false, nil
	}
	sb.State, sb.StopReason = st, StopReason
	_, err = s.obs.UpdateSandbox(ctx, sb)
	return err == nil, err
}

func (s *svc) BudgetPause(ctx context.Context, tenant, id string) (bool, error) {
	return s.to(ctx, tenant, id, store.StatePaused)
}

func (s *svc) BudgetStop(ctx context.Context, tenant, id string) (bool, error) {
	return s.to(ctx, tenant, id, store.StateStopped)
}

// create makes a stopped sandbox of tenant priced at perSecond.
func (r *rig) create(tenant, id string) {
	r.t.Helper()
	spec, _ := json.Marshal(map[string]any{"instance_type": "test", "limits": client.Limits{CPUs: 1, MemoryBytes: 1 << 30}})
	if _, err := r.obs.CreateSandbox(r.t.Context(), store.Sandbox{ID: id, TenantID: tenant, Name: id, TemplateID: "host",
		State: store.StateStopped, Spec: spec, CreatedAt: r.c.now(), UpdatedAt: r.c.now()}); err != nil {
		r.t.Fatal(err)
	}
}

// start starts (or resumes) a sandbox as the service does: the budgets
// are asked first.
func (r *rig) start(tenant, id string) error {
	r.t.Helper()
	if err := r.enf.MayRun(r.t.Context(), tenant, id); err != nil {
		return err
	}
	sb, err := r.raw.GetSandbox(r.t.Context(), tenant, id)
	if err != nil {
		r.t.Fatal(err)
	}
	sb.State, sb.StopReason = store.StateRunning, ""
	if _, err := r.obs.UpdateSandbox(r.t.Context(), sb); err != nil {
		r.t.Fatal(err)
	}
	return nil
}

func (r *rig) state(id string) (store.SandboxState, string) {
	r.t.Helper()
	sb, err := r.raw.GetSandbox(r.t.Context(), "", id)
	if err != nil {
		r.t.Fatal(err)
	}
	return sb.State, sb.StopReason
}

func (r *rig) tick() {
	r.t.Helper()
	if err := r.enf.Tick(r.t.Context()); err != nil {
		r.t.Fatal(err)
	}
}

// count returns how many events of type typ were emitted.
func (r *rig) count(typ string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// audited returns the audit entries with action.
func (r *rig) audited(action string) []store.AuditEntry {
	r.t.Helper()
	all, err := r.raw.ListAudit(r.t.Context(), store.AuditFilter{})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []store.AuditEntry
	for _, e := range all {
		if e.Action == action {
			out = append(out, e)
		}
	}
	return out
}

func (r *rig) budget(req client.CreateBudgetRequest) client.Budget {
	r.t.Helper()
	b, err := r.enf.CreateBudget(r.t.Context(), store.DefaultTenant, req)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

func ptr[T any](v T) *T { return &v }

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// TestBudgetWarnsOnceThenPausesAtTheCapAndRefusesStart is the issue's
// test: a sandbox budget of $1.00 per day with action pause warns once at
// 80%, pauses the sandbox (reason budget) at the cap with one
// budget.exceeded event and audit records, refuses its start while the
// cap stays reached, and lets it run again once the cap is raised; a new
// crossing of the raised cap acts again.
func TestBudgetWarnsOnceThenPausesAtTheCapAndRefusesStart(t *testing.T) {
	c := &clock{t: t0}
	r := newRig(t, c)
	r.create(store.DefaultTenant, "sb-a")
	r.create(store.DefaultTenant, "sb-b") // runs on: the budget is sb-a's
	b := r.budget(client.CreateBudgetRequest{Sandbox: "sb-a", Period: "day", Cap: "1.00", Action: "pause"})
	if b.WarnAt != client.DefaultBudgetWarnAt || b.State != client.BudgetOK || b.Spend != "0.00" || b.Sandbox != "sb-a" {
		t.Fatalf("new budget: %+v", b)
	}
	if err := r.start(store.DefaultTenant, "sb-a"); err != nil {
		t.Fatal(err)
	}
	if err := r.start(store.DefaultTenant, "sb-b"); err != nil {
		t.Fatal(err)
	}

	c.add(60 * time.Second) // $0.60
	r.tick()
	if n := r.count(events.BudgetWarning); n != 0 {
		t.Fatalf("%d warnings at 60%%", n)
	}
	c.add(25 * time.Second) // $0.85
	r.tick()
	c.add(5 * time.Second) // $0.90
	r.tick()
	if n := r.count(events.BudgetWarning); n != 1 {
		t.Fatalf("%d warnings after two ticks past 80%%, want 1", n)
	}
	if st, _ := r.state("sb-a"); st != store.StateRunning {
		t.Fatalf("sandbox %s below the cap", st)
	}

	c.add(15 * time.Second) // $1.05
	r.tick()
	if st, reason := r.state("sb-a"); st != store.StatePaused || reason != StopReason {
		t.Fatalf("at the cap the sandbox is %s (%q), want paused (budget)", st, reason)
	}
	if st, _ := r.state("sb-b"); st != store.StateRunning {
		t.Fatalf("another sandbox of the tenant is %s: a sandbox budget must leave it running", st)
	}
	r.tick()
	if n := r.count(events.BudgetExceeded); n != 1 {
		t.Fatalf("%d budget.exceeded events after two ticks past the cap, want 1", n)
	}
	ex := r.audited("budget.exceeded")
	if len(ex) != 1 || ex[0].Target != b.ID || !strings.Contains(ex[0].Outcome, "1.05") || !strings.Contains(ex[0].Outcome, "1.00") {
		t.Fatalf("budget.exceeded audit records: %+v", ex)
	}
	if p := r.audited("budget.pause"); len(p) != 1 || p[0].Target != "sb-a" || !strings.Contains(p[0].Outcome, b.ID) {
		t.Fatalf("budget.pause audit records: %+v", p)
	}

	err := r.start(store.DefaultTenant, "sb-a")
	if !errors.Is(err, errs.ErrBudget) {
		t.Fatalf("start past the cap: %v, want errs.ErrBudget", err)
	}
	for _, want := range []string{b.ID, "1.00 USD", "1.05 USD", "per day"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %q", err, want)
		}
	}
	if err := r.enf.MayRun(t.Context(), store.DefaultTenant, "sb-b"); err != nil {
		t.Fatalf("another sandbox of the tenant is refused: %v", err)
	}
	got, err := r.enf.GetBudget(t.Context(), store.DefaultTenant, b.ID)
	if err != nil || got.State != client.BudgetExceeded || got.Spend != "1.05" || got.Fraction < 1 || got.LastExceeded == nil ||
		got.LastExceeded.Spend != "1.05" || got.LastWarning == nil || got.PeriodStart != time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC) {
		t.Fatalf("exceeded budget reads %+v, %v", got, err)
	}

	// Paused, it spends nothing more; raising the cap lifts it.
	c.add(time.Hour)
	if _, err := r.enf.UpdateBudget(t.Context(), store.DefaultTenant, b.ID, client.UpdateBudgetRequest{Cap: ptr("2.00")}); err != nil {
		t.Fatal(err)
	}
	if err := r.start(store.DefaultTenant, "sb-a"); err != nil {
		t.Fatalf("resume after the cap was raised: %v", err)
	}
	r.tick()
	if st, _ := r.state("sb-a"); st != store.StateRunning {
		t.Fatalf("after raising the cap a tick left the sandbox %s", st)
	}
	if got, _ := r.enf.GetBudget(t.Context(), store.DefaultTenant, b.ID); got.State != client.BudgetOK || got.Cap != "2.00" {
		t.Fatalf("raised budget reads %+v", got)
	}

	c.add(100 * time.Second) // $2.05 against the new cap: a new crossing
	r.tick()
	if st, _ := r.state("sb-a"); st != store.StatePaused {
		t.Fatalf("past the raised cap the sandbox is %s", st)
	}
	if n := r.count(events.BudgetExceeded); n != 2 {
		t.Fatalf("%d budget.exceeded events after crossing a raised cap, want 2", n)
	}
}

// TestBudgetOfATenantStopsEveryRunningSandboxOfIt: a tenant budget with
// action stop stops all the tenant's running sandboxes and refuses to
// start any of them, a new one included; another tenant's run on.
func TestBudgetOfATenantStopsEveryRunningSandboxOfIt(t *testing.T) {
	c := &clock{t: t0}
	r := newRig(t, c)
	for _, id := range []string{"sb-1", "sb-2", "sb-3"} {
		r.create(store.DefaultTenant, id)
	}
	r.create("other", "sb-x")
	b := r.budget(client.CreateBudgetRequest{Period: "month", Cap: "0.50", Action: "stop", WarnAt: ptr(0.5)})
	for _, id := range []string{"sb-1", "sb-2"} {
		if err := r.start(store.DefaultTenant, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.start("other", "sb-x"); err != nil {
		t.Fatal(err)
	}
	c.add(30 * time.Second) // two sandboxes: $0.60
	r.tick()
	for _, id := range []string{"sb-1", "sb-2"} {
		if st, reason := r.state(id); st != store.StateStopped || reason != StopReason {
			t.Fatalf("%s is %s (%q), want stopped (budget)", id, st, reason)
		}
	}
	if st, _ := r.state("sb-x"); st != store.StateRunning {
		t.Fatalf("another tenant's sandbox is %s", st)
	}
	if n := len(r.audited("budget.stop")); n != 2 {
		t.Fatalf("%d budget.stop audit records, want 2", n)
	}
	if n := r.count(events.BudgetWarning); n != 1 {
		t.Fatalf("%d warnings, want 1", n)
	}
	if err := r.start(store.DefaultTenant, "sb-3"); !errors.Is(err, errs.ErrBudget) || !strings.Contains(err.Error(), b.ID) {
		t.Fatalf("start of another sandbox of the tenant: %v, want the budget's refusal", err)
	}
	if err := r.enf.MayRun(t.Context(), "other", "sb-x"); err != nil {
		t.Fatalf("another tenant is held back: %v", err)
	}
	list, err := r.enf.ListBudgets(t.Context(), "other")
	if err != nil || len(list) != 0 {
		t.Fatalf("another tenant lists %+v, %v", list, err)
	}
	if _, err := r.enf.GetBudget(t.Context(), "other", b.ID); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant gets the budget: %v", err)
	}
	if err := r.enf.DeleteBudget(t.Context(), "other", b.ID); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant deletes the budget: %v", err)
	}
	// Deleting the budget lifts it.
	if err := r.enf.DeleteBudget(t.Context(), store.DefaultTenant, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := r.start(store.DefaultTenant, "sb-3"); err != nil {
		t.Fatalf("start after the budget was deleted: %v", err)
	}
}

// TestBudgetResetsOnANewPeriod: a daily budget crossed just before
// midnight holds its sandbox back until the next UTC day starts, then
// lets it run, and warns and acts again in the new day.
func TestBudgetResetsOnANewPeriod(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 2, 23, 58, 0, 0, time.UTC)}
	r := newRig(t, c)
	r.create(store.DefaultTenant, "sb-a")
	b := r.budget(client.CreateBudgetRequest{Sandbox: "sb-a", Period: "day", Cap: "1", Action: "pause"})
	if err := r.start(store.DefaultTenant, "sb-a"); err != nil {
		t.Fatal(err)
	}
	c.add(110 * time.Second) // 23:59:50, $1.10
	r.tick()
	if st, _ := r.state("sb-a"); st != store.StatePaused {
		t.Fatalf("sandbox %s at the cap", st)
	}
	if err := r.start(store.DefaultTenant, "sb-a"); !errors.Is(err, errs.ErrBudget) {
		t.Fatalf("start before midnight: %v", err)
	}
	c.add(20 * time.Second) // 00:00:10 the next day
	if err := r.start(store.DefaultTenant, "sb-a"); err != nil {
		t.Fatalf("start in a new day: %v", err)
	}
	got, _ := r.enf.GetBudget(t.Context(), store.DefaultTenant, b.ID)
	if got.State != client.BudgetOK || got.PeriodStart != time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC) || got.LastExceeded == nil || got.LastExceeded.Period != "2026-12-02" {
		t.Fatalf("budget in the new day: %+v", got)
	}
	r.tick()
	if st, _ := r.state("sb-a"); st != store.StateRunning {
		t.Fatalf("sandbox %s in a new day under the cap", st)
	}
	c.add(100 * time.Second) // $1.00 of the new day (00:00:00 to 00:01:50 counts from midnight)
	r.tick()
	if st, _ := r.state("sb-a"); st != store.StatePaused {
		t.Fatalf("sandbox %s at the cap of the new day", st)
	}
	if w, x := r.count(events.BudgetWarning), r.count(events.BudgetExceeded); w != 2 || x != 2 {
		t.Fatalf("%d warnings and %d crossings over two days, want 2 and 2", w, x)
	}
}

// TestBudgetWarnOnlyReports: action warn emits and records the crossing
// and never pauses, stops or refuses.
func TestBudgetWarnOnlyReports(t *testing.T) {
	c := &clock{t: t0}
	r := newRig(t, c)
	r.create(store.DefaultTenant, "sb-a")
	r.budget(client.CreateBudgetRequest{Period: "day", Cap: "0.10", Action: "warn"})
	if err := r.start(store.DefaultTenant, "sb-a"); err != nil {
		t.Fatal(err)
	}
	c.add(20 * time.Second)
	r.tick()
	r.tick()
	if st, _ := r.state("sb-a"); st != store.StateRunning {
		t.Fatalf("a warn budget left the sandbox %s", st)
	}
	if r.count(events.BudgetExceeded) != 1 || len(r.audited("budget.exceeded")) != 1 {
		t.Fatalf("a warn budget's crossing: %d events, %d audit records", r.count(events.BudgetExceeded), len(r.audited("budget.exceeded")))
	}
	if err := r.enf.MayRun(t.Context(), store.DefaultTenant, "sb-a"); err != nil {
		t.Fatalf("a warn budget refuses: %v", err)
	}
}

// TestCreateBudgetRefusesBadInputAndOtherTenantsSandboxes: bad settings
// are errs.ErrInvalid, another tenant's sandbox errs.ErrNotFound as an
// absent one; nothing is stored.
func TestCreateBudgetRefusesBadInputAndOtherTenantsSandboxes(t *testing.T) {
	c := &clock{t: t0}
	r := newRig(t, c)
	r.create("other", "sb-x")
	for _, c := range []struct {
		req  client.CreateBudgetRequest
		want error
	}{
		{client.CreateBudgetRequest{Period: "week", Cap: "1", Action: "pause"}, errs.ErrInvalid},
		{client.CreateBudgetRequest{Period: "day", Cap: "-1", Action: "pause"}, errs.ErrInvalid},
		{client.CreateBudgetRequest{Period: "day", Cap: "0", Action: "pause"}, errs.ErrInvalid},
		{client.CreateBudgetRequest{Period: "day", Cap: "1", Action: "delete"}, errs.ErrInvalid},
		{client.CreateBudgetRequest{Period: "day", Cap: "1", Action: "pause", WarnAt: ptr(1.5)}, errs.ErrInvalid},
		{client.CreateBudgetRequest{Period: "day", Action: "pause"}, errs.ErrInvalid},
		{client.CreateBudgetRequest{Period: "day", Cap: "1", Action: "pause", Sandbox: "sb-x"}, errs.ErrNotFound},
		{client.CreateBudgetRequest{Period: "day", Cap: "1", Action: "pause", Sandbox: "sb-none"}, errs.ErrNotFound},
	} {
		if _, err := r.enf.CreateBudget(t.Context(), store.DefaultTenant, c.req); !errors.Is(err, c.want) {
			t.Errorf("create %+v: %v, want %v", c.req, err, c.want)
		}
	}
	if list, _ := r.raw.ListBudgets(t.Context(), ""); len(list) != 0 {
		t.Fatalf("refused creates stored %+v", list)
	}
	b := r.budget(client.CreateBudgetRequest{Period: "day", Cap: "1", Action: "pause"})
	if _, err := r.enf.UpdateBudget(t.Context(), store.DefaultTenant, b.ID, client.UpdateBudgetRequest{Cap: ptr("1.0000001")}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("update to 7 decimals: %v", err)
	}
	if got, _ := r.enf.GetBudget(t.Context(), store.DefaultTenant, b.ID); got.Cap != "1.00" {
		t.Fatalf("a refused update changed the cap to %s", got.Cap)
	}
}
