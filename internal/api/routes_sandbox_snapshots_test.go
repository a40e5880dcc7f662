package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
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

// TestScopedKeyRollsBackOnlyToItsOwnSandboxsSnapshots: a key scoped to
// web rolls web back to a snapshot of web; a snapshot of another sandbox
// of its tenant answers as an absent one (the same 404 and message but
// for the id) and rolls nothing back. An unscoped key is not confined.
func TestScopedKeyRollsBackOnlyToItsOwnSandboxsSnapshots(t *testing.T) {
	snaps := map[string]client.Snapshot{
		"snap-web": {ID: "snap-web", Sandbox: "sb-in", Kind: "user"},
		"snap-ops": {ID: "snap-ops", Sandbox: "sb-out", Kind: "user"},
	}
	var mu sync.Mutex
	var rolled []string
	fb := authzWorldBackend(&fakeBackend{
		GetSnapshotFunc: func(_ context.Context, tenant, id string) (client.Snapshot, error) {
			if sn, ok := snaps[id]; ok && tenant == "t-alice" {
				return sn, nil
			}
			return client.Snapshot{}, fmt.Errorf("snapshot %s: %w", id, errs.ErrNotFound)
		},
		RollbackFunc: func(_ context.Context, tenant, sb string, req client.RollbackRequest) (client.RollbackResult, error) {
			mu.Lock()
			defer mu.Unlock()
			rolled = append(rolled, sb+"<-"+req.Snapshot)
			return client.RollbackResult{Sandbox: client.Sandbox{ID: "sb-in", Name: sb}}, nil
		},
	})
	scoped, _ := newTestServer(t, fb, "scoped-name")
	ctx := testCtx(t)
	if _, err := scoped.Rollback(ctx, "web", "snap-web"); err != nil {
		t.Fatalf("rollback to its own sandbox's snapshot: %v", err)
	}
	_, errOther := scoped.Rollback(ctx, "web", "snap-ops")
	_, errAbsent := scoped.Rollback(ctx, "web", "snap-none")
	var other, absent *client.APIError
	if !errors.As(errOther, &other) || !errors.As(errAbsent, &absent) || other.Status != http.StatusNotFound ||
		strings.ReplaceAll(other.Detail, "snap-ops", "X") != strings.ReplaceAll(absent.Detail, "snap-none", "X") {
		t.Fatalf("another sandbox's snapshot %v, an absent one %v: want the same 404", errOther, errAbsent)
	}
	admin, _ := newTestServer(t, fb, "tenant-admin")
	if _, err := admin.Rollback(ctx, "web", "snap-ops"); err != nil {
		t.Fatalf("an unscoped key: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(rolled, []string{"web<-snap-web", "web<-snap-ops"}) {
		t.Errorf("rolled back %v", rolled)
	}
}
