package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
)

// TestSandboxSnapshotsRouteListsOneSandboxsForAScopedKey: a key scoped to
// sandbox web lists web's snapshots through GET /v1/sandboxes/{id}/snapshots
// (GET /v1/snapshots is refused to it); another sandbox of its tenant
// answers 404 without reaching the backend's list.
func TestSandboxSnapshotsRouteListsOneSandboxsForAScopedKey(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	fb := authzWorldBackend(&fakeBackend{
		ListSnapshotsFunc: func(_ context.Context, tenant, sb string) ([]client.Snapshot, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, tenant+"/"+sb)
			return []client.Snapshot{{ID: "snap-1", Sandbox: "sb-in", Kind: "user"}}, nil
		},
	})
	c, _ := newTestServer(t, fb, "scoped-name")
	ctx := testCtx(t)
	list, err := c.SandboxSnapshots(ctx, "web")
	if err != nil || len(list) != 1 || list[0].ID != "snap-1" {
		t.Fatalf("list of its own sandbox: %+v, %v", list, err)
	}
	if _, err := c.ListSnapshots(ctx, "web"); !snapshotsStatus(err, http.StatusForbidden) {
		t.Errorf("GET /v1/snapshots with a scoped key: %v, want 403", err)
	}
	if _, err := c.SandboxSnapshots(ctx, "ops-box"); !snapshotsStatus(err, http.StatusNotFound) {
		t.Errorf("another sandbox of the tenant: %v, want 404", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(asked, []string{"t-alice/web"}) {
		t.Errorf("backend asked for %v", asked)
	}
}

// snapshotsStatus reports whether err is an API error of status code.
func snapshotsStatus(err error, code int) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == code
}
