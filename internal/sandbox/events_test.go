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

// TestOperationsEmitTheirEvents: a push, a restore and a failed push each
// end with their event, carrying the result's ids and numbers or the error.
func TestOperationsEmitTheirEvents(t *testing.T) {
	s := newService(t)
	withRepo(t, s, t.TempDir())
	var mu sync.Mutex
	var got []events.Event
	s.opts.Events = events.SinkFunc(func(_ context.Context, e events.Event) {
		mu.Lock()
		defer mu.Unlock()
		// operation.finished is the metrics' view of every operation;
		// this test reads the named events.
		if !strings.HasPrefix(e.Type, "snapshot.") && e.Type != OperationFinished {
			got = append(got, e)
		}
	})
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "ops", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	var pr client.PushResult
	op, err := s.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Wait: true})
	opDone(t, op, err, &pr)
	var rr client.RestoreResult
	op, err = s.RestoreRemote(ctx, tn, client.RestoreRequest{Sandbox: sb.ID, Name: "ops-restored", NoStart: true, Wait: true})
	opDone(t, op, err, &rr)
	op, err = s.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Snapshot: "snap-absent", Wait: true})
	if err != nil || op.State != "failed" {
		t.Fatalf("push of an absent snapshot: %+v %v", op, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("events: %+v", got)
	}
	if e := got[0]; e.Type != events.BackupPushed || e.Sandbox != sb.ID || e.Data["remote_snapshot"] != pr.RemoteSnapshot.ID ||
		e.Data["bytes_uploaded"] != fmt.Sprint(pr.BytesUploaded) {
		t.Fatalf("push event %+v (result %+v)", e, pr)
	}
	if e := got[1]; e.Type != events.BackupRestored || e.Sandbox != rr.Sandbox.ID || e.Data["target"] != pr.RemoteSnapshot.ID {
		t.Fatalf("restore event %+v", e)
	}
	if e := got[2]; e.Type != "backup.push_failed" || e.Sandbox != sb.ID || !strings.Contains(e.Data["error"], "snap-absent") {
		t.Fatalf("failed push event %+v", e)
	}
}
