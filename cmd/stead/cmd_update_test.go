package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/e2b"
)

// updateCLIBackend records the update it gets and answers key creates.
type updateCLIBackend struct {
	cliBackend
	got   *client.UpdateSandboxRequest
	calls int
}

func (b *updateCLIBackend) UpdateSandbox(_ context.Context, tenant, id string, req client.UpdateSandboxRequest) (client.Sandbox, error) {
	b.calls++
	b.got = &req
	sb := client.Sandbox{ID: id, Name: id, Tenant: tenant, State: "running", IdleTimeout: "15m0s", OnIdle: "stop"}
	if req.IdleTimeout != nil {
		sb.IdleTimeout = *req.IdleTimeout
	}
	if req.OnIdle != nil {
		sb.OnIdle = *req.OnIdle
	}
	return sb, nil
}

func (b *updateCLIBackend) Authenticate(_ context.Context, secret string) (api.Principal, error) {
	p, err := b.cliBackend.Authenticate(context.Background(), secret)
	p.Role = client.RoleTenantAdmin
	return p, err
}

func (b *updateCLIBackend) CreateAPIKey(_ context.Context, p api.Principal, req client.CreateAPIKeyRequest) (client.APIKey, error) {
	return client.APIKey{ID: "key-1", Name: req.Name, Role: client.RoleTenantUser, Tenant: p.TenantID, Secret: "stead_secret"}, nil
}

// TestUpdateSendsOnlyTheGivenFlags: `stead update` sends the flags given
// and nothing else; no flag, or a bad --on-idle, is a usage error (exit
// 2) before any request.
func TestUpdateSendsOnlyTheGivenFlags(t *testing.T) {
	b := &updateCLIBackend{}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	code, out, stderr := stead(t, srv, "update", "agent-1", "--idle-timeout", "2h", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if b.got == nil || b.got.IdleTimeout == nil || *b.got.IdleTimeout != "2h" || b.got.OnIdle != nil {
		t.Fatalf("the backend got %+v", b.got)
	}
	if !strings.Contains(out, `"idle_timeout": "2h"`) && !strings.Contains(out, `"idle_timeout":"2h"`) {
		t.Fatalf("output: %s", out)
	}
	for _, a := range [][]string{{"update", "agent-1"}, {"update", "agent-1", "--on-idle", "destroy"}} {
		if code, _, _ := stead(t, srv, a...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", a, code, exitUsage)
		}
	}
	if b.calls != 1 {
		t.Fatalf("usage errors reached the daemon: %d calls", b.calls)
	}
}

// TestKeyCreateE2BPrintsTheE2BForm: `stead key create --e2b` prints the
// secret as e2b_<hex>, which decodes to the stead secret.
func TestKeyCreateE2BPrintsTheE2BForm(t *testing.T) {
	b := &updateCLIBackend{}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	code, out, stderr := stead(t, srv, "key", "create", "agents", "--e2b")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.TrimSpace(out) != e2b.EncodeKey("stead_secret") {
		t.Fatalf("printed %q, want %q", out, e2b.EncodeKey("stead_secret"))
	}
}
