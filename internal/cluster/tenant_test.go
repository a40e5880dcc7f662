package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// tenantActs records the tenant actions a node did, answering err.
type tenantActs struct {
	mu    sync.Mutex
	calls []string
	err   error
}

func (a *tenantActs) do(verb, tenant, id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, verb+" "+tenant+" "+id)
	return a.err
}

func (a *tenantActs) TenantStop(_ context.Context, tenant, id string) error {
	return a.do("stop", tenant, id)
}

func (a *tenantActs) TenantPurge(_ context.Context, tenant, id string) error {
	return a.do("purge", tenant, id)
}

func (a *tenantActs) TenantPurgeLocal(_ context.Context, p TenantLocal) error {
	return a.do("purge-local", p.Tenant, strings.Join(append(append(append([]string(nil), p.Sandboxes...), p.Volumes...), p.Snapshots...), ","))
}

func (a *tenantActs) took() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls...)
}

// TestRelayTenantSendsEachActionToTheOwner: a tenant's stop or purge of a
// sandbox another live node owns is done by that node (a signed node
// call), one of a sandbox with no lease or a dead owner here; the owner's
// refusal comes back with its detail (a 404 as errs.ErrNotFound); the
// route refuses unsigned calls, unknown verbs and a body without a tenant.
func TestRelayTenantSendsEachActionToTheOwner(t *testing.T) {
	ctx := testCtx(t)
	st := openStore(t)
	log := slog.New(slog.DiscardHandler)
	newR := func(name string) *Router {
		r, err := NewRouter(RouterOptions{Store: st, Node: name, Secret: testSecret, Grace: 30 * time.Second,
			InstanceTypes: testTypes, DefaultInstanceType: "small", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	}
	ra, rb := newR("a"), newR("b")
	localA, localB := &tenantActs{}, &tenantActs{}
	mux := http.NewServeMux()
	HandleTenant(mux, localB)
	srv := httptest.NewServer(rb.Auth().RequireNode(mux))
	t.Cleanup(srv.Close)
	heartbeat(t, st, "b", srv.Listener.Addr().String(), roomy, time.Now())
	heartbeat(t, st, "dead", "127.0.0.1:1", roomy, time.Now().Add(-time.Hour))
	addSandbox(t, st, "sb-onb", "onb", "b")
	addSandbox(t, st, "sb-free", "free", "")
	addSandbox(t, st, "sb-ondead", "ondead", "dead")
	relay := ra.RelayTenant(localA)
	tn := store.DefaultTenant

	for _, c := range []struct {
		verb string
		fn   func(context.Context, string, string) error
	}{{"stop", relay.TenantStop}, {"purge", relay.TenantPurge}} {
		for _, id := range []string{"sb-onb", "sb-free", "sb-ondead"} {
			if err := c.fn(ctx, tn, id); err != nil {
				t.Fatalf("%s %s: %v", c.verb, id, err)
			}
		}
	}
	if got, want := fmt.Sprint(localB.took()), fmt.Sprint([]string{"stop default sb-onb", "purge default sb-onb"}); got != want {
		t.Fatalf("b did %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(localA.took()), fmt.Sprint([]string{"stop default sb-free", "stop default sb-ondead",
		"purge default sb-free", "purge default sb-ondead"}); got != want {
		t.Fatalf("a did %s, want %s", got, want)
	}

	localB.err = fmt.Errorf("sandbox sb-onb is busy: %w", errs.ErrConflict)
	err := relay.TenantPurge(ctx, tn, "sb-onb")
	if err == nil || !strings.Contains(err.Error(), "sandbox sb-onb is busy") || !strings.Contains(err.Error(), "node b") || !strings.Contains(err.Error(), "409") {
		t.Fatalf("the owner's refusal came back as %v", err)
	}
	localB.err = fmt.Errorf("sandbox sb-onb: %w", errs.ErrNotFound)
	if err := relay.TenantStop(ctx, tn, "sb-onb"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("the owner's 404 came back as %v", err)
	}

	n := len(localB.took())
	post := func(path, body string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := post(tenantPath("sb-onb", "purge"), `{"tenant":"default"}`); code != http.StatusUnauthorized {
		t.Fatalf("an unsigned tenant purge: %d, want 401", code)
	}
	signed := func(path, body string) int {
		res, err := ra.Client().Do(ctx, srv.Listener.Addr().String(), http.MethodPost, path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := signed(tenantPath("sb-onb", "pause"), `{"tenant":"default"}`); code != http.StatusNotFound {
		t.Fatalf("an unknown verb: %d, want 404", code)
	}
	if code := signed(tenantPath("sb-onb", "stop"), `{}`); code != http.StatusBadRequest {
		t.Fatalf("no tenant: %d, want 400", code)
	}
	if len(localB.took()) != n {
		t.Fatalf("refused calls reached the service: %v", localB.took()[n:])
	}
}

// TestRelayTenantPurgeLocalReachesEveryLiveNode: a deleted tenant's local
// purge is done here and sent to every other live node (a signed node
// call), not to a dead one; a node's refusal comes back naming it while
// the others still ran; the route refuses unsigned calls and a body whose
// tenant is not the path's.
func TestRelayTenantPurgeLocalReachesEveryLiveNode(t *testing.T) {
	ctx := testCtx(t)
	st := openStore(t)
	log := slog.New(slog.DiscardHandler)
	newR := func(name string) *Router {
		r, err := NewRouter(RouterOptions{Store: st, Node: name, Secret: testSecret, Grace: 30 * time.Second,
			InstanceTypes: testTypes, DefaultInstanceType: "small", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	}
	ra := newR("a")
	serve := func(name string) (*tenantActs, *httptest.Server) {
		acts := &tenantActs{}
		mux := http.NewServeMux()
		HandleTenant(mux, acts)
		srv := httptest.NewServer(newR(name).Auth().RequireNode(mux))
		t.Cleanup(srv.Close)
		heartbeat(t, st, name, srv.Listener.Addr().String(), roomy, time.Now())
		return acts, srv
	}
	localA := &tenantActs{}
	heartbeat(t, st, "a", "127.0.0.1:1", roomy, time.Now())
	localB, srvB := serve("b")
	localC, _ := serve("c")
	deadActs, _ := serve("dead")
	heartbeat(t, st, "dead", "127.0.0.1:1", roomy, time.Now().Add(-time.Hour))

	p := TenantLocal{Tenant: "gone", Sandboxes: []string{"sb-1"}, Volumes: []string{"vol-1"}, Snapshots: []string{"snap-1"}}
	if err := ra.RelayTenant(localA).TenantPurgeLocal(ctx, p); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]string{"purge-local gone sb-1,vol-1,snap-1"})
	for name, acts := range map[string]*tenantActs{"a": localA, "b": localB, "c": localC} {
		if got := fmt.Sprint(acts.took()); got != want {
			t.Fatalf("node %s did %s, want %s", name, got, want)
		}
	}
	if got := deadActs.took(); len(got) != 0 {
		t.Fatalf("the dead node was called: %v", got)
	}

	localB.err = fmt.Errorf("pool is busy: %w", errs.ErrConflict)
	err := ra.RelayTenant(localA).TenantPurgeLocal(ctx, p)
	if err == nil || !strings.Contains(err.Error(), "node b: pool is busy") || !strings.Contains(err.Error(), "409") {
		t.Fatalf("b's refusal came back as %v", err)
	}
	if len(localC.took()) != 2 {
		t.Fatalf("c was not called after b refused: %v", localC.took())
	}

	n := len(localB.took())
	res, err := http.Post(srvB.URL+tenantLocalPath("gone"), "application/json", strings.NewReader(`{"tenant":"gone"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an unsigned local purge: %d, want 401", res.StatusCode)
	}
	res, err = ra.Client().Do(ctx, srvB.Listener.Addr().String(), http.MethodPost, tenantLocalPath("gone"), strings.NewReader(`{"tenant":"other"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("a body naming another tenant: %d, want 400", res.StatusCode)
	}
	if len(localB.took()) != n {
		t.Fatalf("refused calls reached the service: %v", localB.took()[n:])
	}
}
