package sandbox

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/store"
)

func (s *Service) testRead(t *testing.T, id, path string) string {
	t.Helper()
	rc, _, err := s.ReadFile(context.Background(), store.DefaultTenant, id, path)
	if err != nil {
		return "ERR " + err.Error()
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

func (s *Service) testWrite(t *testing.T, id, path, content string) {
	t.Helper()
	if _, err := s.WriteFile(context.Background(), store.DefaultTenant, id, path, 0o644, strings.NewReader(content)); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotForkRollback(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	tn := store.DefaultTenant
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "work"})
	if err != nil {
		t.Fatal(err)
	}
	s.testWrite(t, sb.ID, "/workspace/plan.md", "hour 4")
	snap, err := s.CreateSnapshot(ctx, tn, sb.ID, client.CreateSnapshotRequest{Label: "hour 4"})
	if err != nil {
		t.Fatal(err)
	}
	if snap.FrozenFor == "" || snap.Kind != "user" || snap.Parent != "" {
		t.Fatalf("snapshot of a running sandbox: %+v", snap)
	}
	if got, _ := s.GetSandbox(ctx, tn, sb.ID); got.State != "running" {
		t.Fatalf("sandbox left %s by the snapshot", got.State)
	}
	s.testWrite(t, sb.ID, "/workspace/plan.md", "hour 6, went wrong")

	// Fork three variants from hour 4.
	forks, err := s.Fork(ctx, tn, snap.ID, client.ForkRequest{Count: 3, NoStart: true})
	if err != nil || len(forks) != 3 {
		t.Fatalf("fork: %d %v", len(forks), err)
	}
	for i, f := range forks {
		if got := s.testRead(t, f.ID, "/workspace/plan.md"); got != "hour 4" {
			t.Fatalf("fork %d reads %q", i, got)
		}
	}
	// Named forks: one by its name, several as name-1, name-2; a taken
	// or id-shaped name is refused and makes nothing.
	named, err := s.Fork(ctx, tn, snap.ID, client.ForkRequest{Name: "plan-b", NoStart: true})
	if err != nil || len(named) != 1 || named[0].Name != "plan-b" {
		t.Fatalf("fork --name: %+v %v", named, err)
	}
	named, err = s.Fork(ctx, tn, snap.ID, client.ForkRequest{Name: "try", Count: 2, NoStart: true})
	if err != nil || len(named) != 2 || named[0].Name != "try-1" || named[1].Name != "try-2" {
		t.Fatalf("fork --name --count 2: %+v %v", named, err)
	}
	before, _ := s.ListSandboxes(ctx, tn, true)
	if _, err := s.Fork(ctx, tn, snap.ID, client.ForkRequest{Name: "plan-b"}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("fork onto a taken name: %v", err)
	}
	if _, err := s.Fork(ctx, tn, snap.ID, client.ForkRequest{Name: "sb-abc"}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("fork with an id-shaped name: %v", err)
	}
	if after, _ := s.ListSandboxes(ctx, tn, true); len(after) != len(before) {
		t.Fatalf("a refused fork made %d sandboxes", len(after)-len(before))
	}
	s.testWrite(t, forks[0].ID, "/workspace/plan.md", "variant A")
	if got := s.testRead(t, forks[1].ID, "/workspace/plan.md"); got != "hour 4" {
		t.Fatalf("forks are not independent: %q", got)
	}
	// A snapshot of a fork has the forked-from snapshot as its parent.
	child, err := s.CreateSnapshot(ctx, tn, forks[0].ID, client.CreateSnapshotRequest{})
	if err != nil || child.Parent != snap.ID || child.FrozenFor != "" {
		t.Fatalf("child snapshot: %+v %v", child, err)
	}

	// Roll the original back in place, and undo the rollback.
	res, err := s.Rollback(ctx, tn, sb.ID, client.RollbackRequest{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.ID != sb.ID || res.Sandbox.State != "running" || res.Safety.Kind != "safety" {
		t.Fatalf("rollback result: %+v", res)
	}
	if got := s.testRead(t, sb.ID, "/workspace/plan.md"); got != "hour 4" {
		t.Fatalf("after rollback: %q", got)
	}
	if out, err := s.Exec(ctx, tn, sb.ID, client.ExecRequest{Command: []string{"cat", "/workspace/plan.md"}}, nil); err != nil || string(out.Stdout) != "hour 4" {
		t.Fatalf("the running sandbox sees %q %v", out.Stdout, err)
	}
	if _, err := s.Rollback(ctx, tn, sb.ID, client.RollbackRequest{Snapshot: res.Safety.ID}); err != nil {
		t.Fatal(err)
	}
	if got := s.testRead(t, sb.ID, "/workspace/plan.md"); got != "hour 6, went wrong" {
		t.Fatalf("undo of the rollback: %q", got)
	}
	if list, _ := s.ListSnapshots(ctx, tn, sb.ID); len(list) != 3 {
		t.Fatalf("snapshots of the sandbox: %+v", list)
	}
	// Bad input changes nothing.
	if _, err := s.Fork(ctx, tn, snap.ID, client.ForkRequest{Count: 51}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("fork of 51: %v", err)
	}
	if _, err := s.Rollback(ctx, tn, sb.ID, client.RollbackRequest{Snapshot: "snap-missing"}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("rollback to a missing snapshot: %v", err)
	}
	if _, err := s.GetSnapshot(ctx, "other", snap.ID); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's snapshot: %v", err)
	}
	// Leftovers of a crash go at reconcile; recorded snapshots stay.
	if err := s.pool.Clone(ctx, snapshotDataset(snap.ID), pool.KindSnapshot+"/snap-orphan", pool.CloneOptions{ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.pool.Clone(ctx, snapshotDataset(snap.ID), pool.KindSandbox+"/rb-"+sb.ID, pool.CloneOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ds := range []string{pool.KindSnapshot + "/snap-orphan", pool.KindSandbox + "/rb-" + sb.ID} {
		if ok, _ := s.pool.Exists(ctx, ds); ok {
			t.Fatalf("%s left after reconcile", ds)
		}
	}
	if ok, _ := s.pool.Exists(ctx, snapshotDataset(snap.ID)); !ok {
		t.Fatal("reconcile deleted a recorded snapshot")
	}
	if err := s.DeleteSnapshot(ctx, tn, snap.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fork(ctx, tn, snap.ID, client.ForkRequest{}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("fork of a deleted snapshot: %v", err)
	}
}
