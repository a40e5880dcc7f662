package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// secretFake serves secrets on top of fakeBackend, keeping the values it
// was given (a real backend seals them).
type secretFake struct {
	*fakeBackend
	mu     sync.Mutex
	values map[string]string // tenant/name → value
}

func newSecretFake() *secretFake {
	return &secretFake{fakeBackend: &fakeBackend{}, values: map[string]string{}}
}

var _ SecretBackend = (*secretFake)(nil)

func (f *secretFake) SetSecret(_ context.Context, tenant, name, value string) (client.Secret, error) {
	f.record("SetSecret", tenant, name)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.values[tenant+"/"+name] = value
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	return client.Secret{Name: name, CreatedAt: at, UpdatedAt: at, UsedBy: []string{}}, nil
}

func (f *secretFake) ListSecrets(_ context.Context, tenant string) ([]client.Secret, error) {
	f.record("ListSecrets", tenant, "")
	return []client.Secret{{Name: "A", UsedBy: []string{"agent-1"}}}, nil
}

func (f *secretFake) DeleteSecret(_ context.Context, tenant, name string) error {
	f.record("DeleteSecret", tenant, name)
	if name == "IN_USE" {
		return fmt.Errorf("secret IN_USE is referenced by sandbox agent-1: %w", errs.ErrConflict)
	}
	return nil
}

// TestSecretRoutesPassTheirArgumentsAndNeverAValue: the value reaches the
// backend with the caller's tenant and is in no answer; a name that is not
// an environment variable name is refused (422) before the backend; an in-use
// delete is a 409 naming the sandbox.
func TestSecretRoutesPassTheirArgumentsAndNeverAValue(t *testing.T) {
	f := newSecretFake()
	c, srv := newTestServer(t, f, aliceKey)
	ctx := testCtx(t)
	const value = "sk-routes-3f9d1c0a"
	s, err := c.SetSecret(ctx, "OPENAI_API_KEY", value)
	if err != nil || s.Name != "OPENAI_API_KEY" {
		t.Fatalf("set: %+v %v", s, err)
	}
	if f.values["t-alice/OPENAI_API_KEY"] != value {
		t.Fatalf("backend got %v", f.values)
	}
	body := doRaw(t, srv, http.MethodPut, "/v1/secrets/OPENAI_API_KEY", `{"value":"`+value+`"}`, http.StatusOK)
	if strings.Contains(body, value) {
		t.Fatalf("the set answer carries the value: %s", body)
	}
	list, err := c.ListSecrets(ctx)
	if err != nil || len(list) != 1 || list[0].UsedBy[0] != "agent-1" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := c.DeleteSecret(ctx, "OLD"); err != nil {
		t.Fatal(err)
	}
	err = c.DeleteSecret(ctx, "IN_USE")
	if !client.IsConflict(err) || !strings.Contains(err.Error(), "agent-1") {
		t.Fatalf("delete in use: %v", err)
	}
	before := len(f.Calls())
	for _, bad := range []string{"1X", "A-B", "a%20b", strings.Repeat("A", 129)} {
		doRaw(t, srv, http.MethodPut, "/v1/secrets/"+bad, `{"value":"x"}`, http.StatusUnprocessableEntity)
		doRaw(t, srv, http.MethodDelete, "/v1/secrets/"+bad, "", http.StatusUnprocessableEntity)
	}
	if calls := f.Calls(); len(calls) != before {
		t.Fatalf("bad names reached the backend: %v", calls[before:])
	}
}

// TestSecretRoutesAreClosedToSandboxTokens: the agent inside a sandbox
// uses its secrets and never lists, sets or deletes them.
func TestSecretRoutesAreClosedToSandboxTokens(t *testing.T) {
	f := newSecretFake()
	for r := range agentRoutes(t, f) {
		if strings.Contains(r, "/v1/secrets") {
			t.Errorf("%s is open to sandbox tokens", r)
		}
	}
	f.AuthenticateFunc = func(context.Context, string) (Principal, error) {
		return Principal{TenantID: "t-alice", KeyID: "sandbox:sb-1", Sandbox: "sb-1"}, nil
	}
	_, srv := newTestServer(t, f, aliceKey)
	doRaw(t, srv, http.MethodGet, "/v1/secrets", "", http.StatusForbidden)
	doRaw(t, srv, http.MethodPut, "/v1/secrets/KEY", `{"value":"x"}`, http.StatusForbidden)
	doRaw(t, srv, http.MethodDelete, "/v1/secrets/KEY", "", http.StatusForbidden)
	if calls := f.Calls(); len(calls) != 0 {
		t.Fatalf("a sandbox token reached the backend: %v", calls)
	}
}
