package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/bench/cluster/rig"
	"github.com/stead-dev/stead/client"
	icluster "github.com/stead-dev/stead/internal/cluster"
)

// TestClusterTenantSuspendAndDeleteReachEveryNode: a tenant's sandboxes,
// created through node1, spread over the three nodes. Suspending the
// tenant through node1 stops every one of them on its own node; deleting
// it through node1 purges them all: no record, no process, no root and no
// template dataset of the tenant is left on any node.
func TestClusterTenantSuspendAndDeleteReachEveryNode(t *testing.T) {
	c := newCluster(t, rig.Options{})
	ctx := ctxT(t)
	admin := c.Nodes[0].Client
	if _, err := admin.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	acme := admin.WithTenant("acme")
	where := map[string][]string{}
	var ids []string
	for i := range 6 {
		sb, err := acme.CreateSandbox(ctx, client.CreateSandboxRequest{Name: fmt.Sprintf("t-%d", i), InstanceType: "micro"})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		on := c.chk.WaitRunning(ctx, sb.ID, 30*time.Second)
		if on == "" {
			t.Fatalf("sandbox %s runs on no single node", sb.ID)
		}
		where[on] = append(where[on], sb.ID)
		ids = append(ids, sb.ID)
	}
	t.Logf("the tenant's sandboxes: %v", where)
	if len(where) < 2 {
		t.Fatalf("the tenant's sandboxes are all on one node %v: the test needs several", where)
	}

	if _, err := admin.SuspendTenant(ctx, "acme"); err != nil {
		t.Fatalf("suspend through node1: %v", err)
	}
	for _, id := range ids {
		sb, err := acme.GetSandbox(ctx, id)
		if err != nil || sb.State != "stopped" || sb.StopReason != "tenant_suspended" {
			t.Fatalf("sandbox %s after the suspension: %s (%s) %v", id, sb.State, sb.StopReason, err)
		}
		if on := c.chk.WaitStopped(ctx, id, 5*time.Second); len(on) != 0 {
			t.Fatalf("sandbox %s still runs on %v after the suspension", id, on)
		}
	}

	// Each node that ran one built the tenant's host template in its pool.
	tmpl := func(n *rig.Node) string {
		return filepath.Join(n.DataDir, "pool", "templates", icluster.TemplateDataset("acme", "host"))
	}
	for on := range where {
		for _, n := range c.Nodes {
			if _, err := os.Stat(tmpl(n)); n.Name == on && err != nil {
				t.Fatalf("node %s ran the tenant's sandboxes without its host template: %v", on, err)
			}
		}
	}

	d, err := admin.DeleteTenant(ctx, "acme")
	if err != nil || d.Sandboxes != len(ids) {
		t.Fatalf("delete through node1: %+v %v", d, err)
	}
	for _, n := range c.Nodes {
		if _, err := os.Stat(tmpl(n)); !os.IsNotExist(err) {
			t.Fatalf("node %s still has the deleted tenant's host template (%v)", n.Name, err)
		}
	}
	for _, id := range ids {
		for _, n := range c.Nodes {
			if _, err := os.Stat(rootOn(n, id)); !os.IsNotExist(err) {
				t.Fatalf("node %s still has the root of %s (%v)", n.Name, id, err)
			}
		}
	}
	if _, err := admin.WithTenant("acme").GetSandbox(ctx, ids[0]); err == nil {
		t.Fatal("a sandbox of the deleted tenant is still found")
	}
}

// TestClusterQuotaLastSlotHasOneWinner: a tenant with room for one running
// sandbox creates twelve at once, four through each node, several times:
// exactly one create wins each time (admission holds across the nodes),
// the others are refused with 429.
func TestClusterQuotaLastSlotHasOneWinner(t *testing.T) {
	c := newCluster(t, rig.Options{})
	ctx := ctxT(t)
	admin := c.Nodes[0].Client
	if _, err := admin.CreateTenant(ctx, client.CreateTenantRequest{ID: "beta"}); err != nil {
		t.Fatal(err)
	}
	one := int64(1)
	if _, err := admin.SetTenantQuotas(ctx, "beta", client.SetQuotasRequest{RunningSandboxes: &one}); err != nil {
		t.Fatal(err)
	}
	// The tenant's first create makes its host template record; creates
	// racing for that are another matter.
	first, err := admin.WithTenant("beta").CreateSandbox(ctx, client.CreateSandboxRequest{Name: "first", InstanceType: "micro"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.WithTenant("beta").DeleteSandbox(ctx, first.ID, true); err != nil {
		t.Fatal(err)
	}
	for round := range 6 {
		var mu sync.Mutex
		var won []client.Sandbox
		var wg sync.WaitGroup
		for i := range 12 {
			n := c.Nodes[i%len(c.Nodes)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb, err := n.Client.WithTenant("beta").CreateSandbox(ctx, client.CreateSandboxRequest{
					Name: fmt.Sprintf("q%d-%d", round, i), InstanceType: "micro"})
				switch {
				case err == nil:
					mu.Lock()
					won = append(won, sb)
					mu.Unlock()
				case client.IsQuotaExceeded(err):
				default:
					t.Errorf("round %d: create through %s: %v", round, n.Name, err)
				}
			}()
		}
		wg.Wait()
		if len(won) != 1 {
			t.Errorf("round %d: %d creates won the tenant's one running slot across the nodes, want 1", round, len(won))
		}
		for _, sb := range won {
			if _, err := admin.WithTenant("beta").DeleteSandbox(ctx, sb.ID, true); err != nil {
				t.Fatalf("round %d: purge the winner: %v", round, err)
			}
		}
	}
}
