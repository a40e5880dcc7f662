package sandbox

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/testutil"
)

// tenantDatasets lists the datasets of s's pool that belong to tenant:
// its template datasets (by the tenant's prefix) and every dataset whose
// id contains one of ids (its volumes, snapshots, sandboxes and the lost
// copies of them).
func tenantDatasets(t *testing.T, s *Service, tenant string, ids ...string) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, kind := range []string{pool.KindTemplate, pool.KindSandbox, pool.KindSnapshot, pool.KindVolume} {
		list, err := s.pool.List(ctx, kind)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range list {
			mine := kind == pool.KindTemplate && strings.HasPrefix(id, cluster.TemplateDataset(tenant, ""))
			for _, x := range ids {
				mine = mine || strings.Contains(id, x)
			}
			if mine {
				out = append(out, kind+"/"+id)
			}
		}
	}
	return out
}

// TestTenantDeleteClearsEveryLiveNodesPool: a tenant has a sandbox on
// each of two nodes (real services on a real PostgreSQL store), so each
// built its host template; on b a volume, a volume snapshot, a local
// snapshot of its sandbox and a kept lost copy of a's sandbox. It is
// deleted through a: afterwards nothing of the tenant is in b's pool (nor
// a's), while another tenant's template and volume on b stay.
func TestTenantDeleteClearsEveryLiveNodesPool(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	st := pgStore(t)
	nodes := newTenantNodes(t, st, time.Minute, "a", "b")
	a, b := nodes[0], nodes[1]
	const tn, other = "acme", "other"
	for _, id := range []string{tn, other} {
		if _, err := a.svc.CreateTenant(ctx, client.CreateTenantRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	onA, err := a.svc.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "on-a", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	onB, err := b.svc.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "on-b", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	vol, err := b.svc.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: "data", SizeBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	vsnap, err := b.svc.CreateVolumeSnapshot(ctx, tn, vol.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := b.svc.CreateSnapshot(ctx, tn, onB.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// b once held a's sandbox and kept the root it ran as a lost copy.
	lost := lostCopyDataset(1, onA.ID)
	if err := b.svc.pool.Create(ctx, lost); err != nil {
		t.Fatal(err)
	}
	// Another tenant's data on b, which must stay.
	if _, err := b.svc.ensureHostTemplate(ctx, other); err != nil {
		t.Fatal(err)
	}
	otherVol, err := b.svc.CreateVolume(ctx, other, client.CreateVolumeRequest{Name: "keep", SizeBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{onA.ID, onB.ID, vol.ID, vsnap.ID, snap.ID}
	before := tenantDatasets(t, b.svc, tn, ids...)
	for _, want := range []string{templateDataset(tn, "host"), volumeDataset(vol.ID), snapshotDataset(vsnap.ID), snapshotDataset(snap.ID), lost} {
		if !slices.Contains(before, want) {
			t.Fatalf("b's pool before the deletion lacks %s: %v", want, before)
		}
	}

	if _, err := a.svc.DeleteTenant(ctx, tn); err != nil {
		t.Fatalf("delete through a: %v", err)
	}
	for _, n := range nodes {
		if left := tenantDatasets(t, n.svc, tn, ids...); len(left) != 0 {
			t.Fatalf("node %s's pool still holds the deleted tenant's %v", n.name, left)
		}
	}
	for _, ds := range []string{templateDataset(other, "host"), volumeDataset(otherVol.ID)} {
		if ok, err := b.svc.pool.Exists(ctx, ds); err != nil || !ok {
			t.Fatalf("another tenant's %s went with the deletion (%v)", ds, err)
		}
	}

	// The call is refused while the tenant exists: nothing of it goes.
	err = b.svc.TenantPurgeLocal(ctx, cluster.TenantLocal{Tenant: other, Volumes: []string{otherVol.ID}})
	if err == nil || !strings.Contains(err.Error(), "still exists") {
		t.Fatalf("a local purge of a live tenant: %v", err)
	}
	if ok, _ := b.svc.pool.Exists(ctx, volumeDataset(otherVol.ID)); !ok {
		t.Fatal("a refused local purge deleted a volume")
	}
}

// TestTenantDeleteClearsADeadNodesPoolWhenItReturns: node c holds a
// tenant's host template, a volume and a snapshot of it when c dies. The
// deletion through a leaves them on c (it is not called); when c starts
// again its Reconcile deletes them, and leaves another tenant's template.
func TestTenantDeleteClearsADeadNodesPoolWhenItReturns(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	st := pgStore(t)
	nodes := newTenantNodes(t, st, time.Minute, "a", "c")
	a, c := nodes[0], nodes[1]
	const tn, other = "acme", "other"
	for _, id := range []string{tn, other} {
		if _, err := a.svc.CreateTenant(ctx, client.CreateTenantRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.svc.ensureHostTemplate(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	vol, err := c.svc.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: "data", SizeBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	vsnap, err := c.svc.CreateVolumeSnapshot(ctx, tn, vol.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// c dies.
	c.stop()
	old := time.Now().Add(-time.Hour)
	if _, err := st.HeartbeatNode(ctx, store.Node{Name: "c", Address: "127.0.0.1:1", HeartbeatAt: old, StartedAt: old}); err != nil {
		t.Fatal(err)
	}

	if _, err := a.svc.DeleteTenant(ctx, tn); err != nil {
		t.Fatalf("delete through a with c dead: %v", err)
	}
	ids := []string{vol.ID, vsnap.ID}
	if left := tenantDatasets(t, c.svc, tn, ids...); len(left) != 3 {
		t.Fatalf("the dead node's pool before it returned: %v (want its template, volume and snapshot)", left)
	}
	if err := c.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if left := tenantDatasets(t, c.svc, tn, ids...); len(left) != 0 {
		t.Fatalf("the returning node kept the deleted tenant's %v", left)
	}
	if ok, err := c.svc.pool.Exists(ctx, templateDataset(other, "host")); err != nil || !ok {
		t.Fatalf("the returning node deleted another tenant's template (%v)", err)
	}
}
