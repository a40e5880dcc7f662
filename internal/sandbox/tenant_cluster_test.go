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
// fresh heartbeat (dead: an old one, and its leases not renewed).
func newTenantNodes(t *testing.T, st store.Store, ttl time.Duration, dead map[string]bool, names ...string) []*tenantNode {
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
		if dead[name] {
			hb = hb.Add(-time.Hour)
		}
		if _, err := st.HeartbeatNode(ctx, store.Node{Name: name, Address: hs.Listener.Addr().String(), HeartbeatAt: hb, StartedAt: hb}); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		n.stop = cancel
		t.Cleanup(cancel)
		if !dead[name] {
			go n.leases.Run(rctx)
		}
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
	srv := pgtest.Start(t)
	st, err := postgres.Open(ctx, srv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	nodes := newTenantNodes(t, st, time.Minute, nil, "a", "b")
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

// TestTenantDeletePurgesADeadNodesSandbox: a tenant's stopped sandbox on
// node c, which then dies (its heartbeat is old and its lease lapses), is
// purged by the deletion through node a as a stopped sandbox a does not
// hold: a takes its lapsed lease and purges the record under it. The
// suspension before it refuses (409) while the dead node's lease of a
// running sandbox is in force, naming it. When c returns, its Reconcile
// keeps the root it still has as a lost copy.
func TestTenantDeletePurgesADeadNodesSandbox(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	srv := pgtest.Start(t)
	st, err := postgres.Open(ctx, srv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	const ttl = 2 * time.Second
	nodes := newTenantNodes(t, st, ttl, map[string]bool{"c": true}, "a", "c")
	a, c := nodes[0], nodes[1]
	const tn = "acme"
	if _, err := a.svc.CreateTenant(ctx, client.CreateTenantRequest{ID: tn}); err != nil {
		t.Fatal(err)
	}
	onC, err := c.svc.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "on-c"})
	if err != nil {
		t.Fatal(err)
	}
	// c is dead (old heartbeat) but its lease of the running sandbox is in
	// force: the suspension cannot stop it yet, and says so.
	_, err = a.svc.SuspendTenant(ctx, tn)
	if !errors.Is(err, errs.ErrConflict) || !strings.Contains(err.Error(), "node c is not alive") {
		t.Fatalf("suspend with a dead node's lease in force: %v", err)
	}
	// What the dead node still runs is gone with it; its record says stopped.
	if _, err := c.svc.StopSandbox(ctx, tn, onC.ID); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, ttl+3*time.Second, "c's lease lapses", func() bool {
		own, err := st.GetOwnership(ctx, onC.ID)
		return err == nil && time.Now().After(own.ExpiresAt)
	})

	if _, err := a.svc.DeleteTenant(ctx, tn); err != nil {
		t.Fatalf("delete through a: %v", err)
	}
	if _, err := st.GetSandbox(ctx, "", onC.ID); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("the dead node's sandbox record: %v", err)
	}
	own, err := st.GetOwnership(ctx, onC.ID)
	if err != nil || own.Node != "a" {
		t.Fatalf("lease after the purge: %+v %v (want a's, released)", own, err)
	}
	// c still has the root; when it returns, the root is kept as a lost copy.
	if ok, _ := c.svc.pool.Exists(ctx, datasetName(onC.ID)); !ok {
		t.Fatal("the dead node's root went before it returned")
	}
	if err := c.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.svc.pool.Exists(ctx, datasetName(onC.ID)); ok {
		t.Fatal("the returning node kept the purged sandbox's root as its own")
	}
	copies, err := c.svc.LostCopies(ctx)
	if err != nil || len(copies) != 1 || copies[0].Sandbox != onC.ID {
		t.Fatalf("lost copies on the returning node: %+v %v", copies, err)
	}
}
