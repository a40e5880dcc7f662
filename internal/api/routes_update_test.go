package api

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
)

// updateFake serves PATCH /v1/sandboxes/{id} on top of fakeBackend,
// keeping the last request.
type updateFake struct {
	*fakeBackend
	mu   sync.Mutex
	last client.UpdateSandboxRequest
}

var _ UpdateBackend = (*updateFake)(nil)

func (f *updateFake) UpdateSandbox(_ context.Context, tenant, id string, req client.UpdateSandboxRequest) (client.Sandbox, error) {
	f.record("UpdateSandbox", tenant, id)
	f.mu.Lock()
	f.last = req
	f.mu.Unlock()
	sb, err := f.sandbox(tenant, id)
	if req.IdleTimeout != nil {
		sb.IdleTimeout = *req.IdleTimeout
	}
	return sb, err
}

// TestUpdateRoutePassesOnlyTheGivenFields: the caller's tenant and only
// the fields given reach the backend; an on_idle that is neither stop
// nor pause is refused before it.
func TestUpdateRoutePassesOnlyTheGivenFields(t *testing.T) {
	f := &updateFake{fakeBackend: &fakeBackend{}}
	c, _ := newTestServer(t, f, aliceKey)
	ctx := testCtx(t)
	five := "5m"
	sb, err := c.UpdateSandbox(ctx, "sb-1", client.UpdateSandboxRequest{IdleTimeout: &five})
	if err != nil || sb.IdleTimeout != "5m" {
		t.Fatalf("update: %+v %v", sb, err)
	}
	calls := f.Calls()
	if len(calls) != 1 || calls[0] != (fakeCall{"UpdateSandbox", "t-alice", "sb-1"}) {
		t.Fatalf("backend calls %+v", calls)
	}
	if f.last.IdleTimeout == nil || *f.last.IdleTimeout != "5m" || f.last.OnIdle != nil {
		t.Fatalf("the backend got %+v", f.last)
	}
	bad := "destroy"
	_, err = c.UpdateSandbox(ctx, "sb-1", client.UpdateSandboxRequest{OnIdle: &bad})
	if st := client.StatusCode(err); st != http.StatusUnprocessableEntity && st != http.StatusBadRequest {
		t.Fatalf("on_idle destroy: %v, want 400 or 422", err)
	}
	if len(f.Calls()) != 1 {
		t.Fatalf("a refused update reached the backend: %+v", f.Calls())
	}
}
