package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/postgres"
	"github.com/stead-dev/stead/internal/store/postgres/pgtest"
	"github.com/stead-dev/stead/internal/testutil"
)

// tenantNode is one node of the tenant cluster tests: its real service,
// leases and router, with the signed node-call server of the tenant
// actions, wired as the daemon wires them.
type tenantNode struct {
	name   string
	svc    *Service
	leases *cluster.Leases
	stop   context.CancelFunc
}

// newTenantNodes makes one node per name on st, each registered with a
// fresh heartbeat and renewing its leases.
func newTenantNodes(t *testing.T, st store.Store, ttl time.Duration, names ...string) []*tenantNode {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	secret := []byte("0123456789abcdef0123456789abcdef-tenant-test")
	var out []*tenantNode
	for _, name := range names {
		n := &tenantNode{name: name}
		var err error
		n.leases, err = cluster.NewLeases(cluster.LeaseOptions{Store: st, Node: name, TTL: ttl, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		n.svc = newNodeService(t, st, n.leases)
		router, err := cluster.NewRouter(cluster.RouterOptions{Store: st, Node: name, Secret: secret, Grace: time.Minute,
			InstanceTypes: InstanceTypes(), DefaultInstanceType: DefaultInstanceType, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(router.Close)
		n.svc.SetTenantRelay(router.RelayTenant(n.svc))
		mux := http.NewServeMux()
		cluster.HandleTenant(mux, n.svc)
		hs := httptest.NewServer(router.Auth().RequireNode(mux))
		t.Cleanup(hs.Close)
		hb := time.Now()
		if _, err := st.HeartbeatNode(ctx, store.Node{Name: name, Address: hs.Listener.Addr().String(), HeartbeatAt: hb, StartedAt: hb}); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		n.stop = cancel
		t.Cleanup(cancel)
		go n.leases.Run(rctx)
		out = append(out, n)
	}
	return out
}

// TestTenantSuspendAndDeleteReachEveryNode: a tenant with running
// sandboxes on two nodes (real services on a real PostgreSQL store) is
// suspended through node a: both sandboxes stop, n2's on n2 (a signed node
// call to its owner). It is then deleted through a: every sandbox is
// purged on the node that holds it (n2's root is gone from n2's pool) and
// the tenant's records are gone.
func TestTenantSuspendAndDeleteReachEveryNode(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	st := pgStore(t)
	nodes := newTenantNodes(t, st, time.Minute, "a", "b")
	a, b := nodes[0], nodes[1]
	const tn = "acme"
	if _, err := a.svc.CreateTenant(ctx, client.CreateTenantRequest{ID: tn}); err != nil {
		t.Fatal(err)
	}
	onA, err := a.svc.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "on-a"})
	if err != nil {
		t.Fatal(err)
	}
	onB, err := b.svc.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "on-b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.PauseSandbox(ctx, tn, onB.ID); err != nil { // paused: stopped too
		t.Fatal(err)
	}
	if _, ok := b.leases.Held(onB.ID); !ok {
		t.Fatal("b does not hold its sandbox's lease")
	}

	if _, err := a.svc.SuspendTenant(ctx, tn); err != nil {
		t.Fatalf("suspend through a: %v", err)
	}
	for _, sb := range []client.Sandbox{onA, onB} {
		got, err := a.svc.GetSandbox(ctx, tn, sb.ID)
		if err != nil || got.State != "stopped" || got.StopReason != "tenant_suspended" {
			t.Fatalf("sandbox %s after the suspension: %s (%s) %v", sb.Name, got.State, got.StopReason, err)
		}
	}
	if _, ok := b.leases.Held(onB.ID); !ok {
		t.Fatal("the suspension moved b's sandbox off b")
	}
	// Suspending again is no error: nothing is left to stop.
	if _, err := a.svc.SuspendTenant(ctx, tn); err != nil {
		t.Fatalf("suspend again: %v", err)
	}

	d, err := a.svc.DeleteTenant(ctx, tn)
	if err != nil {
		t.Fatalf("delete through a: %v", err)
	}
	if d.Sandboxes != 2 {
		t.Fatalf("deletion counted %d sandboxes, want 2", d.Sandboxes)
	}
	for _, n := range nodes {
		for _, sb := range []client.Sandbox{onA, onB} {
			if ok, err := n.svc.pool.Exists(ctx, datasetName(sb.ID)); err != nil || ok {
				t.Fatalf("node %s still has the root of %s (%v)", n.name, sb.Name, err)
			}
			if _, ok := n.leases.Held(sb.ID); ok {
				t.Fatalf("node %s still holds the lease of purged %s", n.name, sb.Name)
			}
		}
	}
	if list, err := st.ListSandboxes(ctx, store.SandboxFilter{TenantID: tn, IncludeDeleted: true}); err != nil || len(list) != 0 {
		t.Fatalf("records left: %d %v", len(list), err)
	}
	if _, err := a.svc.ReadTenant(ctx, tn); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("tenant after delete: %v", err)
	}
}

// TestTenantDeletePurgesADeadNodesSandbox: a tenant's sandboxes on node
// c, one running and one stopped; c dies (its heartbeat is old, its leases
// are no longer renewed). The suspension through node a refuses (409)
// while c's lease of the running one is in force, naming the node. Once
// the leases lapsed, the deletion through a purges both as stopped
// sandboxes a does not hold: a takes each lapsed lease and purges the
// record under it. When c returns, its Reconcile keeps the roots it still
// has as lost copies (and kills what still ran there).
func TestTenantDeletePurgesADeadNodesSandbox(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	st := pgStore(t)
	const ttl = 6 * time.Second
	nodes := newTenantNodes(t, st, ttl, "a", "c")
	a, c := nodes[0], nodes[1]
	const tn = "acme"
	if _, err := a.svc.CreateTenant(ctx, client.CreateTenantRequest{ID: tn}); err != nil {
		t.Fatal(err)
	}
	running, err := c.svc.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "busy-c"})
	if err != nil {
		t.Fatal(err)
	}
	stopped, err := c.svc.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "idle-c", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	// c dies.
	c.stop()
	old := time.Now().Add(-time.Hour)
	if _, err := st.HeartbeatNode(ctx, store.Node{Name: "c", Address: "127.0.0.1:1", HeartbeatAt: old, StartedAt: old}); err != nil {
		t.Fatal(err)
	}
	_, err = a.svc.SuspendTenant(ctx, tn)
	if !errors.Is(err, errs.ErrConflict) || !strings.Contains(err.Error(), "node c is not alive") {
		t.Fatalf("suspend with a dead node's lease in force: %v", err)
	}
	waitWithin(t, ttl+3*time.Second, "c's leases lapse", func() bool {
		for _, id := range []string{running.ID, stopped.ID} {
			own, err := st.GetOwnership(ctx, id)
			if err != nil || !time.Now().After(own.ExpiresAt) {
				return false
			}
		}
		return true
	})
	// Nothing of c runs on a live node: the suspension has nothing to do.
	if _, err := a.svc.SuspendTenant(ctx, tn); err != nil {
		t.Fatalf("suspend once c's leases lapsed: %v", err)
	}

	d, err := a.svc.DeleteTenant(ctx, tn)
	if err != nil || d.Sandboxes != 2 {
		t.Fatalf("delete through a: %+v %v", d, err)
	}
	for _, sb := range []client.Sandbox{running, stopped} {
		if _, err := st.GetSandbox(ctx, "", sb.ID); !errors.Is(err, errs.ErrNotFound) {
			t.Fatalf("the dead node's sandbox %s: %v", sb.Name, err)
		}
		own, err := st.GetOwnership(ctx, sb.ID)
		if err != nil || own.Node != "a" {
			t.Fatalf("lease of %s after the purge: %+v %v (want a's, released)", sb.Name, own, err)
		}
		// c still has the root until it returns.
		if ok, _ := c.svc.pool.Exists(ctx, datasetName(sb.ID)); !ok {
			t.Fatalf("the dead node's root of %s went before it returned", sb.Name)
		}
	}
	if err := c.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	copies, err := c.svc.LostCopies(ctx)
	if err != nil || len(copies) != 2 {
		t.Fatalf("lost copies on the returning node: %+v %v", copies, err)
	}
	for _, sb := range []client.Sandbox{running, stopped} {
		if ok, _ := c.svc.pool.Exists(ctx, datasetName(sb.ID)); ok {
			t.Fatalf("the returning node kept the purged %s's root as its own", sb.Name)
		}
	}
	if ids, _ := c.svc.rt.List(ctx); len(ids) != 0 {
		t.Fatalf("the returning node still runs %v", ids)
	}
}

// pgStore opens a fresh database on a private PostgreSQL server for t,
// closed and dropped when t ends.
func pgStore(t *testing.T) store.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), pgtest.Start(t).NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
