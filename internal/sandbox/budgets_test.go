package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/budget"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/metering"
	"github.com/stead-dev/stead/internal/store"
)

// TestBudgetStopsSandboxesAndGatesStartsOfTheRealService wires the real
// service, meter and enforcer as the daemon does, on a test clock: a
// tenant budget with action stop stops the running sandbox with reason
// budget; start, and a create that would start, are refused with
// errs.ErrBudget naming the budget; raising the cap lets it start.
func TestBudgetStopsSandboxesAndGatesStartsOfTheRealService(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Now().UTC().Truncate(time.Hour).Add(10 * time.Minute) // never across midnight
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s.opts.Now = clock
	log := slog.New(slog.DiscardHandler)
	prices := metering.DefaultPrices()
	prices.ComputePerHour["micro"] = 36 // $0.01 a second
	raw := s.st
	meter := metering.New(metering.Options{Store: raw, Now: clock, Prices: &prices, Logger: log})
	if err := meter.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	s.st = events.ObserveStore(raw, meter, clock) // as the daemon wires it: transitions reach the meter
	trail, err := audit.Open(ctx, raw, filepath.Join(t.TempDir(), "audit.key"), audit.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	enf := budget.New(budget.Options{Store: raw, Spend: meter, Sandboxes: s, Audit: trail, Now: clock, Logger: log})
	s.SetBudgets(enf)

	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "spender", InstanceType: "micro"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateBudget(ctx, store.DefaultTenant, client.CreateBudgetRequest{Period: "month", Cap: "0.10", Action: "stop"})
	if err != nil {
		t.Fatal(err)
	}
	advance(5 * time.Second)
	if err := enf.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSandbox(ctx, store.DefaultTenant, sb.ID); got.State != "running" {
		t.Fatalf("below the cap the sandbox is %s", got.State)
	}
	advance(10 * time.Second) // $0.15
	if err := enf.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := s.GetSandbox(ctx, store.DefaultTenant, sb.ID)
	if got.State != "stopped" || got.StopReason != "budget" {
		t.Fatalf("past the cap the sandbox is %s (%q), want stopped (budget)", got.State, got.StopReason)
	}
	_, err = s.StartSandbox(ctx, store.DefaultTenant, sb.ID)
	if !errors.Is(err, errs.ErrBudget) || !strings.Contains(err.Error(), b.ID) || !strings.Contains(err.Error(), "0.10 USD") {
		t.Fatalf("start past the cap: %v, want the budget's refusal", err)
	}
	if _, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "another", InstanceType: "micro"}); !errors.Is(err, errs.ErrBudget) {
		t.Fatalf("create (and start) past the tenant's cap: %v", err)
	}
	if got, _ := s.GetSandbox(ctx, store.DefaultTenant, sb.ID); got.State != "stopped" {
		t.Fatalf("a refused start left the sandbox %s", got.State)
	}
	capv := "1.00"
	if _, err := s.UpdateBudget(ctx, store.DefaultTenant, b.ID, client.UpdateBudgetRequest{Cap: &capv}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.StartSandbox(ctx, store.DefaultTenant, sb.ID); err != nil || got.State != "running" {
		t.Fatalf("start after raising the cap: %+v %v", got, err)
	}
	if err := enf.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSandbox(ctx, store.DefaultTenant, sb.ID); got.State != "running" {
		t.Fatalf("under the raised cap the sandbox is %s", got.State)
	}
}
