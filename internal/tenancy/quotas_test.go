package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
)

func qi(v int64) *int64 { return &v }

// putSandbox stores a sandbox record of tenant in state with limits l, in
// the JSON internal/sandbox writes (its spec's "limits").
func putSandbox(t *testing.T, s *Service, tenant, name string, state store.SandboxState, l client.Limits) store.Sandbox {
	t.Helper()
	sp, _ := json.Marshal(map[string]any{"limits": l, "instance_type": "small"})
	sb, err := s.st.CreateSandbox(t.Context(), store.Sandbox{ID: "sb-" + name, TenantID: tenant, Name: name,
		State: state, Spec: sp, CreatedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// TestAdmittedRisesCountUntilReleasedAndRefusalsChangeNothing: a rise
// admitted and not yet stored counts against the quota, so a second one
// past the limit is refused (an *errs.QuotaError naming the quota, with a
// quota.exceeded event) and holds nothing; releasing the first makes room;
// CheckQuota holds nothing; the usage read from the store counts running
// and paused sandboxes of the tenant only, by the limits in their specs.
func TestAdmittedRisesCountUntilReleasedAndRefusalsChangeNothing(t *testing.T) {
	s := newTenancy(t, nil)
	var mu sync.Mutex
	var seen []events.Event
	s.opts.Events = events.SinkFunc(func(_ context.Context, e events.Event) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, e)
	})
	ctx := context.Background()
	for _, id := range []string{"acme", "other"} {
		if _, err := s.CreateTenant(ctx, client.CreateTenantRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.SetTenantQuotas(ctx, "acme", client.SetQuotasRequest{RunningSandboxes: qi(2), Volumes: qi(2)}); err != nil {
		t.Fatal(err)
	}
	l := client.Limits{CPUs: 1, MemoryBytes: 1 << 30, DiskBytes: 4 << 30}
	putSandbox(t, s, "acme", "up", store.StateRunning, l)
	putSandbox(t, s, "acme", "down", store.StateStopped, l)
	putSandbox(t, s, "other", "up2", store.StateRunning, l)
	use, err := s.QuotaUsage(ctx, "acme")
	if err != nil || use != (Use{Running: 1, CPUs: 1, Memory: 1 << 30, Disk: 8 << 30}) {
		t.Fatalf("usage %+v %v", use, err)
	}

	release, err := s.AdmitQuota(ctx, "acme", "start sandbox down", RunUse(l))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.AdmitQuota(ctx, "acme", "start sandbox third", RunUse(l))
	var qe *errs.QuotaError
	if !errors.As(err, &qe) || qe.Quota != errs.QuotaRunningSandboxes || qe.Limit != 2 || qe.Usage != 2 || qe.Requested != 1 || qe.Op != "start sandbox third" {
		t.Fatalf("a rise past a pending one: %v (%+v)", err, qe)
	}
	mu.Lock()
	if len(seen) != 1 || seen[0].Type != events.QuotaExceeded || seen[0].Tenant != "acme" || seen[0].Data["quota"] != errs.QuotaRunningSandboxes {
		t.Fatalf("events %+v", seen)
	}
	mu.Unlock()
	if err := s.CheckQuota(ctx, "acme", "check", RunUse(l)); err == nil {
		t.Fatal("a check past a pending rise passed")
	}
	release()
	release() // idempotent
	if err := s.CheckQuota(ctx, "acme", "check", RunUse(l)); err != nil {
		t.Fatalf("after the release: %v", err)
	}
	// A check held nothing: two volumes still fit.
	for i := range 2 {
		if _, err := s.AdmitQuota(ctx, "acme", "create volume", Use{Volumes: 1}); err != nil {
			t.Fatalf("volume %d: %v", i, err)
		}
	}
	// A tenant without quotas is never refused.
	if _, err := s.AdmitQuota(ctx, "other", "start", Use{Running: 100}); err != nil {
		t.Fatal(err)
	}
}

// TestSandboxTokenOpensOnlyItsOwnLiveSandbox: a token authenticates as its
// sandbox, confined to it; a token altered, made under another key, of a
// deleted sandbox, or presented to a service without a key is refused.
func TestSandboxTokenOpensOnlyItsOwnLiveSandbox(t *testing.T) {
	s := newTenancy(t, nil)
	s.opts.TokenKey = []byte("tenancy-test-token-key-012345678")
	ctx := context.Background()
	sb := putSandbox(t, s, store.DefaultTenant, "agent", store.StateRunning, client.Limits{})
	tok := s.SandboxToken(sb.ID)
	p, err := s.Authenticate(ctx, tok)
	if err != nil || p.Sandbox != sb.ID || p.TenantID != store.DefaultTenant || p.Admin {
		t.Fatalf("token: %+v %v", p, err)
	}
	other := New(Options{Store: s.st, TokenKey: []byte("another-key-of-32-bytes-45678901")})
	nokey := New(Options{Store: s.st})
	for what, c := range map[string]struct {
		s   *Service
		tok string
	}{
		"altered":       {s, tok[:len(tok)-1] + "x"},
		"another key":   {s, other.SandboxToken(sb.ID)},
		"another id":    {s, "stead_sbx_sb-ghost_" + tok[len("stead_sbx_"+sb.ID+"_"):]},
		"no key at all": {nokey, tok},
	} {
		if _, err := c.s.Authenticate(ctx, c.tok); !errors.Is(err, errs.ErrUnauthenticated) {
			t.Errorf("%s: %v, want unauthenticated", what, err)
		}
	}
	if nokey.SandboxToken(sb.ID) != "" {
		t.Error("a service without a token key makes tokens")
	}
	sb.State = store.StateDeleted
	if _, err := s.st.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, tok); !errors.Is(err, errs.ErrUnauthenticated) {
		t.Fatalf("token of a deleted sandbox: %v", err)
	}
}
