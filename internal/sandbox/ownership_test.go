package sandbox

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/testutil"
)

// clusterRig is two nodes, a and b, on one store: each its own pool and
// runtime, its own owner leases on a clock the test moves.
type clusterRig struct {
	st    store.Store
	clock *testClock
	a, b  *clusterNodeRig
}

type clusterNodeRig struct {
	base   string
	leases *cluster.Leases
	svc    *Service
}

const rigTTL = 10 * time.Second

func newClusterRig(t *testing.T) *clusterRig {
	t.Helper()
	testutil.RequireRoot(t)
	ctx := context.Background()
	base := t.TempDir()
	r := &clusterRig{st: openStore(t, base), clock: &testClock{t: time.Now()}}
	r.a = r.node(t, filepath.Join(base, "a"), "a")
	r.b = r.node(t, filepath.Join(base, "b"), "b")
	if _, err := r.a.svc.Bootstrap(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return r
}

// node starts (or restarts, on the same base) node name's service.
func (r *clusterRig) node(t *testing.T, base, name string) *clusterNodeRig {
	t.Helper()
	ctx := context.Background()
	n := &clusterNodeRig{base: base}
	var err error
	n.leases, err = cluster.NewLeases(cluster.LeaseOptions{Store: r.st, Node: name, TTL: rigTTL, Clock: r.clock.now,
		OnLost: func(id string, err error) { n.svc.LeaseLost(ctx, id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	n.svc = serviceOn(t, r.st, base, Options{Owner: n.leases, Now: r.clock.now})
	return n
}

func wantNotOwned(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("%s on a node without the lease: %v, want a conflict", what, err)
	}
}

// TestClusterNodeActsOnlyOnSandboxesItHolds: a node refuses every verb on
// another node's sandbox and cannot write its record; after a takeover the
// old owner stops its copy without touching the record, keeps its root as
// a lost copy, and cannot write any more.
func TestClusterNodeActsOnlyOnSandboxesItHolds(t *testing.T) {
	r := newClusterRig(t)
	ctx := context.Background()
	sb, err := r.a.svc.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "one"})
	if err != nil {
		t.Fatal(err)
	}
	own, err := r.st.GetOwnership(ctx, sb.ID)
	if err != nil || own.Node != "a" || own.Epoch != 1 {
		t.Fatalf("lease after create: %+v %v", own, err)
	}
	if res, err := r.a.svc.Exec(ctx, store.DefaultTenant, "one", client.ExecRequest{Command: []string{"sh", "-c", "echo mine > /workspace/f"}}, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec on the owner: %+v %v", res, err)
	}

	// Node b sees the record (the store is shared) but may not act.
	if got, err := r.b.svc.GetSandbox(ctx, store.DefaultTenant, "one"); err != nil || got.State != "running" {
		t.Fatalf("read on another node: %+v %v", got, err)
	}
	_, err = r.b.svc.Exec(ctx, store.DefaultTenant, "one", client.ExecRequest{Command: []string{"true"}}, nil)
	wantNotOwned(t, "exec", err)
	if err != nil && !strings.Contains(err.Error(), "does not hold its lease") {
		t.Fatalf("exec refusal does not say why: %v", err)
	}
	_, err = r.b.svc.StopSandbox(ctx, store.DefaultTenant, "one")
	wantNotOwned(t, "stop", err)
	_, err = r.b.svc.PauseSandbox(ctx, store.DefaultTenant, "one")
	wantNotOwned(t, "pause", err)
	_, err = r.b.svc.DeleteSandbox(ctx, store.DefaultTenant, "one", true)
	wantNotOwned(t, "delete", err)
	_, _, err = r.b.svc.ReadFile(ctx, store.DefaultTenant, "one", "/workspace/f")
	wantNotOwned(t, "read a file", err)
	rec, err := r.st.GetSandbox(ctx, store.DefaultTenant, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec.StopReason = "b was here"
	if _, err := r.b.svc.st.UpdateSandbox(ctx, rec); !store.IsFenced(err) {
		t.Fatalf("b's write of a's sandbox record: %v, want fenced", err)
	}
	if got, _ := r.st.GetSandbox(ctx, store.DefaultTenant, sb.ID); got.State != store.StateRunning || got.StopReason == "b was here" {
		t.Fatalf("record changed by a node without the lease: %+v", got)
	}

	// a goes quiet past the lease; b takes the sandbox over.
	r.clock.add(rigTTL + time.Second)
	taken, err := r.b.leases.Acquire(ctx, sb.ID)
	if err != nil || taken.Epoch != 2 {
		t.Fatalf("takeover: %+v %v", taken, err)
	}
	if lost := r.a.leases.RenewAll(ctx); lost != 1 {
		t.Fatalf("a's renew after the takeover lost %d leases, want 1", lost)
	}
	// a stopped its copy and kept its root; the record is untouched.
	if ids, _ := r.a.svc.rt.List(ctx); len(ids) != 0 {
		t.Fatalf("a still runs %v after losing the lease", ids)
	}
	if ok, _ := r.a.svc.pool.Exists(ctx, datasetName(sb.ID)); ok {
		t.Fatal("a's copy of the root is still in place")
	}
	kept := pool.KindSandbox + "/" + lostPrefix + "2-" + sb.ID
	if ok, _ := r.a.svc.pool.Exists(ctx, kept); !ok {
		ids, _ := r.a.svc.pool.List(ctx, pool.KindSandbox)
		t.Fatalf("a's lost copy %s not kept (sandbox datasets: %v)", kept, ids)
	}
	if got, _ := r.st.GetSandbox(ctx, store.DefaultTenant, sb.ID); got.State != store.StateRunning {
		t.Fatalf("the old owner changed the record when it lost the lease: %+v", got)
	}
	_, err = r.a.svc.StartSandbox(ctx, store.DefaultTenant, "one")
	wantNotOwned(t, "start on the old owner", err)
	if _, err := r.a.svc.st.UpdateSandbox(ctx, rec); !store.IsFenced(err) {
		t.Fatalf("the old owner's write after the takeover: %v, want fenced", err)
	}

	// The old owner restarted: its Reconcile leaves b's sandbox alone.
	a2 := r.node(t, r.a.base, "a")
	if err := a2.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := a2.leases.Held(sb.ID); ok {
		t.Fatal("a restarted took the lease b holds")
	}
	if got, _ := r.st.GetOwnership(ctx, sb.ID); got.Node != "b" || got.Epoch != 2 {
		t.Fatalf("lease after a's restart: %+v", got)
	}
}

// TestClusterRestartWithinTheLeaseKeepsTheSandbox: a node that restarts
// before its leases lapse takes them again at the same epoch and adopts
// its running sandboxes, as a single node does.
func TestClusterRestartWithinTheLeaseKeepsTheSandbox(t *testing.T) {
	r := newClusterRig(t)
	ctx := context.Background()
	sb, err := r.a.svc.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	r.clock.add(rigTTL / 2)
	a2 := r.node(t, r.a.base, "a")
	if err := a2.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if epoch, ok := a2.leases.Held(sb.ID); !ok || epoch != 1 {
		t.Fatalf("lease after a restart within its TTL: epoch %d held %v, want 1 true", epoch, ok)
	}
	if res, err := a2.svc.Exec(ctx, store.DefaultTenant, "kept", client.ExecRequest{Command: []string{"true"}}, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec after the restart: %+v %v", res, err)
	}
	// And b never takes a lease in force.
	if _, err := r.b.leases.Acquire(ctx, sb.ID); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("b acquired a lease in force: %v", err)
	}
}

// TestClusterReturningNodeTakesBackALostSandboxNobodyRestored: failover
// marked the node's sandbox lost, but no node restored it (policy none):
// the node, back, takes it again (a new epoch) with its processes, and the
// lost mark is gone. Had another node taken it, the copy would be kept.
func TestClusterReturningNodeTakesBackALostSandboxNobodyRestored(t *testing.T) {
	r := newClusterRig(t)
	ctx := context.Background()
	sb, err := r.a.svc.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "back", Failover: client.FailoverNone})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := r.a.svc.Exec(ctx, store.DefaultTenant, "back", client.ExecRequest{Command: []string{"sh", "-c", "echo newer-than-any-push > /workspace/f"}}, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	// a goes quiet; failover expires its leases and marks the sandbox lost.
	r.clock.add(rigTTL + time.Second)
	if _, err := r.st.ExpireNodeOwnerships(ctx, "a", r.clock.now()); err != nil {
		t.Fatal(err)
	}
	rec, _ := r.st.GetSandbox(ctx, store.DefaultTenant, sb.ID)
	lost, err := cluster.MarkLost(rec, cluster.LostMark{Node: "a", Epoch: 1, State: rec.State, At: r.clock.now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.UpdateSandbox(ctx, lost); err != nil {
		t.Fatal(err)
	}
	a2 := r.node(t, r.a.base, "a")
	if err := a2.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if epoch, ok := a2.leases.Held(sb.ID); !ok || epoch != 2 {
		t.Fatalf("lease after taking back: epoch %d held %v, want 2 true", epoch, ok)
	}
	got, err := a2.svc.GetSandbox(ctx, store.DefaultTenant, "back")
	if err != nil || got.State != "running" {
		t.Fatalf("taken back: %+v %v", got, err)
	}
	if rec, _ := r.st.GetSandbox(ctx, store.DefaultTenant, sb.ID); func() bool { _, ok := cluster.LostMarkOf(rec); return ok }() {
		t.Fatal("the lost mark stayed")
	}
	res, err := a2.svc.Exec(ctx, store.DefaultTenant, "back", client.ExecRequest{Command: []string{"cat", "/workspace/f"}}, nil)
	if err != nil || string(res.Stdout) != "newer-than-any-push\n" {
		t.Fatalf("the taken-back sandbox lost its files: %q %v", res.Stdout, err)
	}
}
