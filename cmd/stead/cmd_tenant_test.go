package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
)

// tenantCLIBackend answers as an admin key and records the tenant and key
// calls it gets.
type tenantCLIBackend struct {
	*cliBackend
	mu      sync.Mutex
	calls   []string
	keyReqs []client.CreateAPIKeyRequest
	creates []client.CreateSandboxRequest
}

var _ api.TenantBackend = (*tenantCLIBackend)(nil)

func (b *tenantCLIBackend) note(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, s)
}

func (b *tenantCLIBackend) Authenticate(context.Context, string) (api.Principal, error) {
	return api.Principal{TenantID: "default", KeyID: "key-admin", Admin: true, Role: client.RoleAdmin}, nil
}

func (b *tenantCLIBackend) CreateAPIKey(_ context.Context, p api.Principal, req client.CreateAPIKeyRequest) (client.APIKey, error) {
	b.note("CreateAPIKey " + p.TenantID)
	b.mu.Lock()
	b.keyReqs = append(b.keyReqs, req)
	b.mu.Unlock()
	return client.APIKey{ID: "key-new", Tenant: p.TenantID, Name: req.Name, Role: req.Role, Secret: "stead_secret"}, nil
}

func (b *tenantCLIBackend) CreateSandbox(_ context.Context, tenant string, req client.CreateSandboxRequest) (client.Sandbox, error) {
	b.mu.Lock()
	b.creates = append(b.creates, req)
	b.mu.Unlock()
	return client.Sandbox{ID: "sb-1", Name: req.Name, Tenant: tenant, Labels: req.Labels}, nil
}

func (b *tenantCLIBackend) ListAPIKeys(_ context.Context, p api.Principal) ([]client.APIKey, error) {
	b.note("ListAPIKeys " + p.TenantID)
	return []client.APIKey{{ID: "key-1", Name: "bot", Role: client.RoleReadOnly, Labels: map[string]string{"team": "research"}}}, nil
}

func (b *tenantCLIBackend) RotateAPIKey(_ context.Context, p api.Principal, id string, req client.RotateAPIKeyRequest) (client.APIKey, error) {
	b.note("RotateAPIKey " + id + " " + req.Overlap)
	return client.APIKey{ID: "key-2", Secret: "stead_rotated"}, nil
}

func (b *tenantCLIBackend) RevokeAPIKey(_ context.Context, p api.Principal, id string) error {
	b.note("RevokeAPIKey " + id)
	return nil
}

func (b *tenantCLIBackend) CreateTenant(_ context.Context, req client.CreateTenantRequest) (client.Tenant, error) {
	b.note("CreateTenant " + req.ID + " " + req.Name)
	return client.Tenant{ID: req.ID, Name: req.Name, State: "active"}, nil
}

func (b *tenantCLIBackend) ListTenants(context.Context) ([]client.Tenant, error) {
	return []client.Tenant{{ID: "default", Name: "default", State: "active"}, {ID: "acme", Name: "Acme", State: "suspended"}}, nil
}

func (b *tenantCLIBackend) GetTenant(_ context.Context, id string) (client.Tenant, error) {
	return client.Tenant{ID: id, Name: id, State: "active"}, nil
}

func (b *tenantCLIBackend) SuspendTenant(_ context.Context, id string) (client.Tenant, error) {
	b.note("SuspendTenant " + id)
	return client.Tenant{ID: id, State: "suspended"}, nil
}

func (b *tenantCLIBackend) UnsuspendTenant(_ context.Context, id string) (client.Tenant, error) {
	b.note("UnsuspendTenant " + id)
	return client.Tenant{ID: id, State: "active"}, nil
}

func (b *tenantCLIBackend) DeleteTenant(_ context.Context, id string) (client.TenantDeletion, error) {
	b.note("DeleteTenant " + id)
	return client.TenantDeletion{Tenant: id, Sandboxes: 2, ErasedScopes: []string{"t-" + id}}, nil
}

// TestTenantAndKeyVerbsSendWhatTheFlagsSay: the tenant and key verbs
// call the API as their flags say; key --tenant acts in that tenant;
// tenant rm without --yes is a usage error that calls nothing.
func TestTenantAndKeyVerbsSendWhatTheFlagsSay(t *testing.T) {
	b := &tenantCLIBackend{cliBackend: &cliBackend{}}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)

	if code, _, errOut := stead(t, srv, "tenant", "rm", "acme"); code != exitUsage || !strings.Contains(errOut, "--yes") {
		t.Fatalf("tenant rm without --yes: exit %d %q", code, errOut)
	}
	if out, _ := mustStead(t, srv, "tenant", "create", "acme", "--name", "Acme"); out != "acme\n" {
		t.Fatalf("tenant create printed %q", out)
	}
	if out, _ := mustStead(t, srv, "tenant", "ls"); !strings.Contains(out, "acme") || !strings.Contains(out, "suspended") {
		t.Fatalf("tenant ls: %q", out)
	}
	mustStead(t, srv, "tenant", "suspend", "acme")
	mustStead(t, srv, "tenant", "unsuspend", "acme")
	if out, _ := mustStead(t, srv, "tenant", "rm", "acme", "--yes"); !strings.Contains(out, "t-acme") {
		t.Fatalf("tenant rm: %q", out)
	}
	out, _ := mustStead(t, srv, "key", "create", "bot", "--tenant", "acme", "--role", "read-only", "--label", "team=research", "--expires-in", "24h")
	if out != "stead_secret\n" {
		t.Fatalf("key create printed %q, want the secret alone", out)
	}
	if out, _ := mustStead(t, srv, "key", "ls"); !strings.Contains(out, "labels team=research") {
		t.Fatalf("key ls: %q", out)
	}
	if out, _ := mustStead(t, srv, "key", "rotate", "key-1", "--overlap", "1h"); out != "stead_rotated\n" {
		t.Fatalf("key rotate printed %q", out)
	}
	mustStead(t, srv, "key", "revoke", "key-1")
	if code, _, _ := stead(t, srv, "key", "create", "x", "--label", "novalue"); code != exitUsage {
		t.Fatalf("--label without = : exit %d", code)
	}
	mustStead(t, srv, "create", "w", "--label", "team=research", "--label", "tier=1")

	want := []string{"CreateTenant acme Acme", "SuspendTenant acme", "UnsuspendTenant acme", "DeleteTenant acme",
		"CreateAPIKey acme", "ListAPIKeys default", "RotateAPIKey key-1 1h", "RevokeAPIKey key-1"}
	if strings.Join(b.calls, "|") != strings.Join(want, "|") {
		t.Fatalf("calls\n%v\nwant\n%v", b.calls, want)
	}
	if r := b.keyReqs[0]; r.Role != "read-only" || r.Labels["team"] != "research" || r.ExpiresIn != "24h" {
		t.Fatalf("key request %+v", r)
	}
	if l := b.creates[0].Labels; l["team"] != "research" || l["tier"] != "1" {
		t.Fatalf("create labels %v", l)
	}
}
