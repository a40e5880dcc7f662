package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
)

type usageBackend struct{ q client.UsageQuery }

func (u *usageBackend) Report(_ context.Context, tenant string, q client.UsageQuery) (client.UsageReport, error) {
	u.q = q
	return client.UsageReport{Tenant: tenant, By: q.By, Currency: "USD", Interval: "1m0s",
		Since: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC),
		Rows: []client.UsageLine{
			{Day: "2026-11-01", RunningSeconds: 7200, ComputeSeconds: map[string]float64{"small": 7200}, ComputeCost: 0.1656, Cost: 0.1656},
			{Day: "2026-11-02", RunningSeconds: 3600, ComputeSeconds: map[string]float64{"small": 3600}, ComputeCost: 0.0828, Cost: 0.0828},
		},
		Total:    client.UsageLine{RunningSeconds: 10800, ComputeSeconds: map[string]float64{"small": 10800}, ComputeCost: 0.2484, Cost: 0.2484},
		AlwaysOn: client.AlwaysOn{RunningSeconds: 172800, Cost: 3.9744, ActualCost: 0.2484, Saving: 3.726, SavingPercent: 93.8},
	}, nil
}

// TestUsagePrintsRowsAndTheAlwaysOnComparison: `stead usage --by day`
// prints a row per day, the total and the always-on comparison; bad
// flags are usage errors (exit 2) before any request.
func TestUsagePrintsRowsAndTheAlwaysOnComparison(t *testing.T) {
	ub := &usageBackend{}
	srv := httptest.NewServer(api.NewHandler(&cliBackend{}, api.Options{Logger: slog.New(slog.DiscardHandler), Usage: ub}))
	t.Cleanup(srv.Close)
	code, out, stderr := stead(t, srv, "usage", "--by", "day", "--since", "2026-11-01", "--sandbox", "agent-1")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if ub.q.By != "day" || ub.q.Sandbox != "agent-1" || !ub.q.Since.Equal(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("query %+v", ub.q)
	}
	for _, want := range []string{"2026-11-01", "2026-11-02", "2.00 h", "$0.2484", "Always-on would cost:  $3.9744", "saved $3.7260 (93.8%)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = stead(t, srv, "usage", "--json")
	var r client.UsageReport
	if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || r.AlwaysOn.SavingPercent != 93.8 {
		t.Fatalf("--json: exit %d, %q", code, out)
	}
	for _, bad := range [][]string{{"usage", "--by", "week"}, {"usage", "--since", "last tuesday"}, {"usage", "extra"}} {
		if code, _, _ := stead(t, srv, bad...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", bad, code, exitUsage)
		}
	}
}
