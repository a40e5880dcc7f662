package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// quotaCLIBackend answers as an admin key, keeps the quota sets it gets
// and refuses every create with a quota error.
type quotaCLIBackend struct {
	*cliBackend
	mu   sync.Mutex
	sets []client.SetQuotasRequest
	gets []string
}

var _ api.QuotaBackend = (*quotaCLIBackend)(nil)

func (b *quotaCLIBackend) Authenticate(context.Context, string) (api.Principal, error) {
	return api.Principal{TenantID: "default", KeyID: "key-admin", Admin: true, Role: client.RoleAdmin}, nil
}

func (b *quotaCLIBackend) CreateSandbox(context.Context, string, client.CreateSandboxRequest) (client.Sandbox, error) {
	return client.Sandbox{}, fmt.Errorf("create sandbox w: %w", &errs.QuotaError{Quota: errs.QuotaDiskBytes, Limit: 10 << 30, Usage: 8 << 30, Requested: 4 << 30})
}

func (b *quotaCLIBackend) TenantQuotas(_ context.Context, tenant string) (client.TenantQuotas, error) {
	b.mu.Lock()
	b.gets = append(b.gets, tenant)
	b.mu.Unlock()
	return client.TenantQuotas{Tenant: tenant, Limits: client.QuotaLimits{RunningSandboxes: 2, CPUs: 2.5, DiskBytes: 100 << 30},
		Usage: client.QuotaUsage{RunningSandboxes: 1, CPUs: 1, MemoryBytes: 2 << 30, DiskBytes: 10 << 30}}, nil
}

func (b *quotaCLIBackend) SetTenantQuotas(ctx context.Context, tenant string, req client.SetQuotasRequest) (client.TenantQuotas, error) {
	b.mu.Lock()
	b.sets = append(b.sets, req)
	b.mu.Unlock()
	return b.TenantQuotas(ctx, tenant)
}

// TestQuotaVerbsSendWhatTheFlagsSayAndPrintLimitAndUsage: tenant quota
// without flags shows; each flag sets its limit alone (sizes parsed, none
// and 0 clear); a bad value is a usage error that calls nothing; stead
// quota shows the own tenant's; a refused create prints the quota, the
// limit and the usage.
func TestQuotaVerbsSendWhatTheFlagsSayAndPrintLimitAndUsage(t *testing.T) {
	b := &quotaCLIBackend{cliBackend: &cliBackend{}}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)

	out, _ := mustStead(t, srv, "tenant", "quota", "acme")
	for _, want := range []string{"tenant acme", "running_sandboxes  2", "cpus               2.5", "disk_bytes         100 GiB", "10 GiB", "memory_bytes       none", "unknown"} {
		if !strings.Contains(out, want) {
			t.Fatalf("show lacks %q:\n%s", want, out)
		}
	}
	mustStead(t, srv, "tenant", "quota", "acme", "--running", "5", "--memory", "16GiB", "--cpus", "none", "--repository", "0")
	mustStead(t, srv, "tenant", "quota", "acme", "--disk", "100GB", "--volumes", "3", "--snapshots", "unlimited", "--state", "1GiB")
	for _, bad := range [][]string{{"--running", "-1"}, {"--cpus", "lots"}, {"--memory", "12 parsecs"}, {"--volumes", "1.5"}} {
		if code, _, errOut := stead(t, srv, append([]string{"tenant", "quota", "acme"}, bad...)...); code != exitUsage || !strings.Contains(errOut, bad[0]) {
			t.Fatalf("tenant quota %v: exit %d %q", bad, code, errOut)
		}
	}
	if len(b.sets) != 2 {
		t.Fatalf("sets %+v", b.sets)
	}
	s := b.sets[0]
	if *s.RunningSandboxes != 5 || *s.MemoryBytes != 16<<30 || *s.CPUs != 0 || *s.RepositoryBytes != 0 || s.DiskBytes != nil || s.Volumes != nil || s.Snapshots != nil {
		t.Fatalf("first set %+v", s)
	}
	s = b.sets[1]
	if *s.DiskBytes != 100_000_000_000 || *s.Volumes != 3 || *s.Snapshots != 0 || *s.StateBytes != 1<<30 || s.RunningSandboxes != nil || s.CPUs != nil {
		t.Fatalf("second set %+v", s)
	}
	if out, _ := mustStead(t, srv, "quota"); !strings.Contains(out, "tenant default") || !strings.Contains(out, "QUOTA") {
		t.Fatalf("stead quota:\n%s", out)
	}
	code, _, errOut := stead(t, srv, "create", "w")
	if code != exitRefused || !strings.Contains(errOut, "quota disk_bytes: limit 10737418240 (10 GiB), in use 8589934592 (8 GiB), requested 4294967296 (4 GiB)") ||
		!strings.Contains(errOut, "HTTP 429") {
		t.Fatalf("refused create: exit %d %q", code, errOut)
	}
}

// FuzzParseQuotaValues: whatever a user types as a limit, the parsers
// never panic, accept only non-negative finite limits, read none, 0 and
// unlimited as no limit, and read a count back as it was written.
func FuzzParseQuotaValues(f *testing.F) {
	for _, s := range []string{"0", "none", "Unlimited", "5", "-1", "2.5", "16GiB", "100GB", "1e3", "NaN", "+Inf", "9223372036854775808", " 3", "0x10", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if n, err := parseQuotaCount(v); err == nil {
			if n < 0 {
				t.Fatalf("count %q = %d", v, n)
			}
			if n > 0 && strconv.FormatInt(n, 10) != strings.TrimLeft(v, "+") && strings.TrimLeft(v, "+0") != strconv.FormatInt(n, 10) {
				t.Fatalf("count %q read as %d", v, n)
			}
		}
		if n, err := parseQuotaSize(v); err == nil && n < 0 {
			t.Fatalf("size %q = %d", v, n)
		}
		if c, err := parseQuotaCPUs(v); err == nil && (c < 0 || math.IsNaN(c) || math.IsInf(c, 0) || c > 1e6) {
			t.Fatalf("cpus %q = %g", v, c)
		}
		if isNone(v) {
			n, err1 := parseQuotaCount(v)
			s, err2 := parseQuotaSize(v)
			c, err3 := parseQuotaCPUs(v)
			if n != 0 || s != 0 || c != 0 || err1 != nil || err2 != nil || err3 != nil {
				t.Fatalf("%q is none but reads %d %d %g", v, n, s, c)
			}
		}
	})
}
