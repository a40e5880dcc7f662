package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
)

// TestBudgetPausesTheSandboxAndRefusesResumeUntilTheCapIsRaised is the
// issue's proof on a real daemon: with micro sandboxes priced at $0.01 a
// second and budgets checked every second, a sandbox with a $0.05 daily
// budget and action pause is paused (stop reason budget) a few seconds
// after it starts; resume and start are refused with 402 naming the
// budget, the cap and the spend; the audit trail has the crossing and
// the pause, the event log budget.warning and budget.exceeded; another
// sandbox of the tenant runs on; raising the cap lets it resume.
func TestBudgetPausesTheSandboxAndRefusesResumeUntilTheCapIsRaised(t *testing.T) {
	prices := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(prices, []byte(`{"compute_per_hour": {"micro": 36}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, "--prices", prices, "--budget-interval", "1s", "--meter-interval", "1s")
	ctx := ctxT(t)

	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "spender", InstanceType: "micro"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "bystander", InstanceType: "micro"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.c.CreateBudget(ctx, client.CreateBudgetRequest{Sandbox: "spender", Period: "day", Cap: "0.05", Action: "pause"})
	if err != nil {
		t.Fatal(err)
	}
	if b.Sandbox != sb.ID || b.SandboxName != "spender" || b.Cap != "0.05" || b.State == client.BudgetExceeded {
		t.Fatalf("new budget: %+v", b)
	}
	start := time.Now()
	waitUntil(t, "the budget to pause the sandbox", func() bool {
		got, err := d.c.GetSandbox(ctx, sb.ID)
		return err == nil && got.State == "paused"
	})
	took := time.Since(start)
	got, _ := d.c.GetSandbox(ctx, sb.ID)
	if got.StopReason != "budget" {
		t.Fatalf("paused with reason %q, want budget", got.StopReason)
	}
	t.Logf("paused %s after the budget was set", took.Round(100*time.Millisecond))
	if bs, _ := d.c.GetSandbox(ctx, other.ID); bs.State != "running" {
		t.Fatalf("another sandbox of the tenant is %s", bs.State)
	}

	_, err = d.c.ResumeSandbox(ctx, sb.ID)
	if client.StatusCode(err) != http.StatusPaymentRequired {
		t.Fatalf("resume past the cap: %v, want 402", err)
	}
	for _, want := range []string{b.ID, "0.05 USD", "raise the cap"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %q", err, want)
		}
	}
	if _, err := d.c.StartSandbox(ctx, sb.ID); client.StatusCode(err) != http.StatusPaymentRequired {
		t.Fatalf("start past the cap: %v, want 402", err)
	}
	if got, _ := d.c.GetSandbox(ctx, sb.ID); got.State != "paused" {
		t.Fatalf("a refused resume left the sandbox %s", got.State)
	}
	list, err := d.c.ListBudgets(ctx)
	if err != nil || len(list) != 1 || list[0].State != client.BudgetExceeded || list[0].Fraction < 1 || list[0].LastExceeded == nil {
		t.Fatalf("budgets past the cap: %+v %v", list, err)
	}

	entries, err := d.c.ListAudit(ctx, client.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var exceeded, paused bool
	for _, e := range entries {
		exceeded = exceeded || (e.Action == "budget.exceeded" && e.Target == b.ID && strings.Contains(e.Outcome, "0.05 USD"))
		paused = paused || (e.Action == "budget.pause" && e.Target == sb.ID && strings.Contains(e.Outcome, b.ID))
	}
	if !exceeded || !paused {
		t.Fatalf("audit trail: budget.exceeded %v, budget.pause %v; entries %+v", exceeded, paused, entries)
	}
	page, err := d.c.ListDaemonEvents(ctx, client.EventQuery{Types: []string{"budget."}})
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]int{}
	for _, e := range page.Events {
		types[e.Type]++
		if e.Type == "budget.exceeded" && (e.Data["budget"] != b.ID || e.Data["cap"] != "0.05" || e.Sandbox != sb.ID) {
			t.Errorf("budget.exceeded event %+v", e)
		}
	}
	if types["budget.warning"] != 1 || types["budget.exceeded"] != 1 {
		t.Fatalf("budget events %v, want one warning and one exceeded", types)
	}

	capv := "100"
	if _, err := d.c.UpdateBudget(ctx, b.ID, client.UpdateBudgetRequest{Cap: &capv}); err != nil {
		t.Fatal(err)
	}
	if got, err := d.c.ResumeSandbox(ctx, sb.ID); err != nil || got.State != "running" {
		t.Fatalf("resume after raising the cap: %+v %v", got, err)
	}
	time.Sleep(2500 * time.Millisecond) // a few ticks under the raised cap
	if got, _ := d.c.GetSandbox(ctx, sb.ID); got.State != "running" {
		t.Fatalf("under the raised cap the sandbox is %s (%s)", got.State, got.StopReason)
	}
}
