package sandbox

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
)

// TestSnapshotForkRollbackEmitEvents: the service tells its event sink of
// a snapshot taken and deleted, a fork and a rollback, with their ids.
func TestSnapshotForkRollbackEmitEvents(t *testing.T) {
	s := newService(t)
	var mu sync.Mutex
	var got []events.Event
	s.opts.Events = events.SinkFunc(func(_ context.Context, e events.Event) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, e)
	})
	ctx := context.Background()
	tn := store.DefaultTenant
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "ev", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.CreateSnapshot(ctx, tn, sb.ID, client.CreateSnapshotRequest{Label: "l1"})
	if err != nil {
		t.Fatal(err)
	}
	forks, err := s.Fork(ctx, tn, snap.ID, client.ForkRequest{NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Rollback(ctx, tn, sb.ID, client.RollbackRequest{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSnapshot(ctx, tn, snap.ID); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var lines []string
	for _, e := range got {
		if e.Tenant != tn || e.Sandbox != sb.ID {
			t.Fatalf("event %+v: want tenant %s, sandbox %s", e, tn, sb.ID)
		}
		lines = append(lines, e.Type+" "+e.Data["snapshot"])
	}
	want := []string{
		"snapshot.created " + snap.ID,
		"sandbox.forked " + snap.ID,
		"snapshot.created " + res.Safety.ID, // the safety snapshot
		"sandbox.rolled_back " + snap.ID,
		"snapshot.deleted " + snap.ID,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if got[1].Data["forks"] != forks[0].ID || got[3].Data["safety"] != res.Safety.ID || got[0].Data["label"] != "l1" {
		t.Fatalf("event data: %v", fmt.Sprint(got))
	}
}
