package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// quotaFake serves quotas on top of fakeBackend and keeps the last set.
// Like tenantFake, it records the tenant a call names as its id (the
// admin routes name any tenant); the answer carries it for the tests.
type quotaFake struct {
	*fakeBackend
	mu   sync.Mutex
	last client.SetQuotasRequest
}

var _ QuotaBackend = (*quotaFake)(nil)

func newQuotaFake() *quotaFake { return &quotaFake{fakeBackend: &fakeBackend{}} }

func (f *quotaFake) TenantQuotas(_ context.Context, tenant string) (client.TenantQuotas, error) {
	f.record("TenantQuotas", "", tenant)
	return client.TenantQuotas{Tenant: tenant, Limits: client.QuotaLimits{RunningSandboxes: 2}, Usage: client.QuotaUsage{RunningSandboxes: 1}}, f.Err
}

func (f *quotaFake) SetTenantQuotas(_ context.Context, tenant string, req client.SetQuotasRequest) (client.TenantQuotas, error) {
	f.record("SetTenantQuotas", "", tenant)
	f.mu.Lock()
	f.last = req
	f.mu.Unlock()
	return client.TenantQuotas{Tenant: tenant}, f.Err
}

// TestQuotaRefusalIs429NamingQuotaLimitUsageAndRequest: a backend's quota
// refusal is a 429 problem document whose detail and members name the
// quota, the limit, the usage and the request; the client reads it as
// IsQuotaExceeded with that detail. The pool's ErrQuota stays 507.
func TestQuotaRefusalIs429NamingQuotaLimitUsageAndRequest(t *testing.T) {
	fb := &fakeBackend{}
	fb.CreateSandboxFunc = func(context.Context, string, client.CreateSandboxRequest) (client.Sandbox, error) {
		return client.Sandbox{}, fmt.Errorf("create sandbox b: %w",
			&errs.QuotaError{Quota: errs.QuotaRunningSandboxes, Limit: 2, Usage: 2, Requested: 1, Op: "create sandbox b"})
	}
	c, srv := newTestServer(t, fb, aliceKey)
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodPost, srv.URL+"/v1/sandboxes", strings.NewReader(`{"name":"b"}`))
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d, type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
	}
	var p struct {
		Status    int     `json:"status"`
		Title     string  `json:"title"`
		Detail    string  `json:"detail"`
		Quota     string  `json:"quota"`
		Limit     float64 `json:"limit"`
		Usage     float64 `json:"usage"`
		Requested float64 `json:"requested"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	if p.Status != 429 || p.Title != "Too Many Requests" || p.Quota != "running_sandboxes" || p.Limit != 2 || p.Usage != 2 || p.Requested != 1 ||
		!strings.HasPrefix(p.Detail, "create sandbox b: quota running_sandboxes: limit 2, in use 2, requested 1") {
		t.Fatalf("problem %+v", p)
	}
	_, err = c.CreateSandbox(testCtx(t), client.CreateSandboxRequest{Name: "b"})
	if !client.IsQuotaExceeded(err) || !strings.Contains(err.Error(), "quota running_sandboxes: limit 2, in use 2, requested 1") {
		t.Fatalf("client error: %v", err)
	}
	if got := HTTPStatus(fmt.Errorf("x: %w", errs.ErrQuota)); got != http.StatusInsufficientStorage {
		t.Fatalf("the pool's ErrQuota is %d, want 507", got)
	}
}

// TestQuotaRoutesPassTheirArguments: GET /v1/quota reads the caller's own
// tenant; the admin routes read and set the named tenant's, a partial
// body reaching the backend as given (absent fields nil, 0 kept); a
// negative limit is refused before the backend; a tenant key may not set
// or read another tenant's.
func TestQuotaRoutesPassTheirArguments(t *testing.T) {
	f := newQuotaFake()
	c, srv := newTestServer(t, f, aliceKey)
	ctx := testCtx(t)
	q, err := c.Quota(ctx)
	if err != nil || q.Tenant != "t-alice" || q.Limits.RunningSandboxes != 2 {
		t.Fatalf("own quota: %+v %v", q, err)
	}
	admin, _ := client.New(srv.URL, adminKey)
	two, zero := 2.0, int64(0)
	if _, err := admin.SetTenantQuotas(ctx, "acme", client.SetQuotasRequest{CPUs: &two, Volumes: &zero}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	last := f.last
	f.mu.Unlock()
	if last.CPUs == nil || *last.CPUs != 2 || last.Volumes == nil || *last.Volumes != 0 || last.RunningSandboxes != nil || last.DiskBytes != nil {
		t.Fatalf("set reached the backend as %+v", last)
	}
	if q, err := admin.TenantQuotas(ctx, "acme"); err != nil || q.Tenant != "acme" {
		t.Fatalf("tenant quotas: %+v %v", q, err)
	}
	calls := len(f.Calls())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/v1/tenants/acme/quotas", strings.NewReader(`{"running_sandboxes":-1}`))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 4 || len(f.Calls()) != calls {
		t.Fatalf("a negative limit: %d, backend calls %v", resp.StatusCode, f.Calls()[calls:])
	}
	if _, err := c.SetTenantQuotas(ctx, "t-alice", client.SetQuotasRequest{Volumes: &zero}); client.StatusCode(err) != http.StatusForbidden {
		t.Fatalf("a tenant key sets quotas: %v", err)
	}
	if _, err := c.TenantQuotas(ctx, "t-alice"); client.StatusCode(err) != http.StatusForbidden {
		t.Fatalf("a tenant key reads the admin route: %v", err)
	}
}
