package sandbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// TestUpdateSandboxChangesTheIdlePolicyFromNow: a new idle timeout and
// on_idle apply to a running sandbox, counted from the update (E2B's
// setTimeout); bad values and another tenant's calls change nothing.
func TestUpdateSandboxChangesTheIdlePolicyFromNow(t *testing.T) {
	s := newService(t)
	clock := &testClock{t: time.Now()}
	s.opts.Now = clock.now
	ctx := context.Background()
	tn := store.DefaultTenant
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "idle", IdleTimeout: "10m"})
	if err != nil {
		t.Fatal(err)
	}
	s.IdleCheck(ctx) // the first cpu sample
	clock.add(8 * time.Minute)
	s.IdleCheck(ctx)

	str := func(v string) *string { return &v }
	for _, bad := range []client.UpdateSandboxRequest{
		{OnIdle: str("destroy")}, {IdleTimeout: str("soon")}, {IdleTimeout: str("")}, {IdleTimeout: str("-5m")},
	} {
		if _, err := s.UpdateSandbox(ctx, tn, sb.ID, bad); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("update %+v: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := s.UpdateSandbox(ctx, "someone-else", sb.ID, client.UpdateSandboxRequest{IdleTimeout: str("1s")}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's update: %v, want ErrNotFound", err)
	}
	if got, _ := s.GetSandbox(ctx, tn, sb.ID); got.IdleTimeout != "10m0s" || got.OnIdle != "stop" {
		t.Fatalf("refused updates changed the sandbox: %s %s", got.IdleTimeout, got.OnIdle)
	}

	got, err := s.UpdateSandbox(ctx, tn, "idle", client.UpdateSandboxRequest{IdleTimeout: str("5m"), OnIdle: str("pause")})
	if err != nil || got.IdleTimeout != "5m0s" || got.OnIdle != "pause" || got.State != "running" {
		t.Fatalf("update: %+v %v", got, err)
	}
	clock.add(4 * time.Minute) // 12 min after create, 4 after the update
	if acted := s.IdleCheck(ctx); len(acted) > 0 {
		t.Fatal("the new idle timeout ran from before the update")
	}
	clock.add(2 * time.Minute)
	s.IdleCheck(ctx)
	if got, _ := s.GetSandbox(ctx, tn, sb.ID); got.State != "paused" {
		t.Fatalf("6 min idle with a 5 min timeout and on_idle pause: %s", got.State)
	}
	// An absent field keeps its value.
	if got, err := s.UpdateSandbox(ctx, tn, sb.ID, client.UpdateSandboxRequest{IdleTimeout: str("0")}); err != nil || got.IdleTimeout != "0s" || got.OnIdle != "pause" {
		t.Fatalf("update of the timeout alone: %+v %v", got, err)
	}
	if _, err := s.DeleteSandbox(ctx, tn, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateSandbox(ctx, tn, sb.ID, client.UpdateSandboxRequest{IdleTimeout: str("1m")}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("update of a deleted sandbox: %v, want ErrConflict", err)
	}
}
