package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/metrics"
)

type usageFunc func(ctx context.Context, tenant string, q client.UsageQuery) (client.UsageReport, error)

func (f usageFunc) Report(ctx context.Context, tenant string, q client.UsageQuery) (client.UsageReport, error) {
	return f(ctx, tenant, q)
}

// TestUsageIsTenantScopedAndAdminsMayAskForATenant: a key gets its own
// tenant's report; only an admin key may name another tenant; since and
// until reach the backend parsed.
func TestUsageIsTenantScopedAndAdminsMayAskForATenant(t *testing.T) {
	var got []string
	var gotQ client.UsageQuery
	u := usageFunc(func(ctx context.Context, tenant string, q client.UsageQuery) (client.UsageReport, error) {
		got = append(got, tenant)
		gotQ = q
		return client.UsageReport{Tenant: tenant, Rows: []client.UsageLine{}}, nil
	})
	h := NewHandler(&fakeBackend{}, Options{Logger: slog.New(slog.DiscardHandler), Usage: u})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	alice, _ := client.New(srv.URL, aliceKey)
	admin, _ := client.New(srv.URL, adminKey)
	ctx := testCtx(t)
	since := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if r, err := alice.Usage(ctx, client.UsageQuery{By: "day", Since: since}); err != nil || r.Tenant != "t-alice" {
		t.Fatalf("own usage: %+v %v", r, err)
	}
	if !gotQ.Since.Equal(since) || gotQ.By != "day" {
		t.Fatalf("query reached the backend as %+v", gotQ)
	}
	if _, err := alice.Usage(ctx, client.UsageQuery{Tenant: "t-bob"}); !client.IsForbidden(err) {
		t.Fatalf("a tenant key asking for another tenant: %v, want 403", err)
	}
	if r, err := admin.Usage(ctx, client.UsageQuery{Tenant: "t-bob"}); err != nil || r.Tenant != "t-bob" {
		t.Fatalf("admin asking for t-bob: %+v %v", r, err)
	}
	if strings.Join(got, ",") != "t-alice,t-bob" {
		t.Fatalf("backend asked for %v", got)
	}
	resp, err := http.Get(srv.URL + "/v1/usage?since=yesterday")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no key: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/usage?since=yesterday", nil)
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("since=yesterday: %d, want 400", resp.StatusCode)
	}
}

// TestRequestMetricsUseRouteTemplates: requests are counted by method,
// route template and status; the raw path (a sandbox's name) never
// becomes a label.
func TestRequestMetricsUseRouteTemplates(t *testing.T) {
	reg := prometheus.NewRegistry()
	met := metrics.New(reg, reg)
	h := NewHandler(&fakeBackend{}, Options{Logger: slog.New(slog.DiscardHandler), Metrics: met})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, _ := client.New(srv.URL, aliceKey)
	ctx := testCtx(t)
	for _, name := range []string{"secret-project-1", "secret-project-2"} {
		c.GetSandbox(ctx, name)
		c.StopSandbox(ctx, name)
	}
	http.Get(srv.URL + "/no/such/route/secret-project-3")
	rec := httptest.NewRecorder()
	met.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`stead_api_requests_total{method="GET",route="/v1/sandboxes/{id}",status="200"} 2`,
		`stead_api_requests_total{method="POST",route="/v1/sandboxes/{id}/stop",status="200"} 2`,
		`stead_api_requests_total{method="GET",route="unmatched",status="404"} 1`,
		`stead_api_request_seconds_bucket{method="GET",route="/v1/sandboxes/{id}"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(text, "secret-project") {
		t.Errorf("a raw path leaked into the metrics")
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", text)
	}
}
