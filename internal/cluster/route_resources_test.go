package cluster

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/store"
)

// resourceBackend is a node's backend with volumes and operations: each
// answer names the node that served it.
type resourceBackend struct {
	*nodeBackend
	api.VolumeBackend
	api.BackupBackend
}

func (b resourceBackend) GetVolume(_ context.Context, _, id string) (client.Volume, error) {
	b.record("GetVolume " + id)
	return client.Volume{ID: id, Name: b.node}, nil
}

func (b resourceBackend) GetOperation(_ context.Context, _ api.Principal, id string) (client.Operation, error) {
	b.record("GetOperation " + id)
	return client.Operation{ID: id, Kind: "push", Target: b.node, State: client.OperationSucceeded}, nil
}

func (b resourceBackend) WatchOperation(_ context.Context, _ api.Principal, id string) (<-chan client.Operation, error) {
	b.record("WatchOperation " + id)
	ch := make(chan client.Operation, 2)
	ch <- client.Operation{ID: id, Kind: "push", Target: b.node, State: client.OperationRunning}
	ch <- client.Operation{ID: id, Kind: "push", Target: b.node, State: client.OperationSucceeded}
	close(ch)
	return ch, nil
}

func newResourceCluster(t *testing.T, st store.Store, names ...string) map[string]*testNode {
	t.Helper()
	nodes := map[string]*testNode{}
	for _, name := range names {
		nodes[name] = newNodeWith(t, st, name, roomy, func(b *nodeBackend) api.Backend { return resourceBackend{nodeBackend: b} })
	}
	return nodes
}

func TestVolumeRoutesGoToTheVolumesNode(t *testing.T) {
	st := openStore(t)
	nodes := newResourceCluster(t, st, "node-a", "node-b")
	ctx := testCtx(t)
	for _, v := range []store.Volume{
		{ID: "vol-b", TenantID: store.DefaultTenant, Name: "on-b", State: "available", Node: "node-b"},
		{ID: "vol-old", TenantID: store.DefaultTenant, Name: "old", State: "available"},
	} {
		if err := st.CreateVolume(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, ref := range []string{"vol-b", "on-b"} {
		v, err := nodes["node-a"].client(t).GetVolume(ctx, ref)
		if err != nil || v.Name != "node-b" {
			t.Fatalf("get volume %s via node-a: %+v, %v; want it served by node-b", ref, v, err)
		}
	}
	// A volume with no node recorded is served where it is asked.
	if v, err := nodes["node-a"].client(t).GetVolume(ctx, "vol-old"); err != nil || v.Name != "node-a" {
		t.Fatalf("get a volume of no node via node-a: %+v, %v", v, err)
	}
	if calls := nodes["node-a"].b.Calls(); len(calls) != 1 {
		t.Fatalf("node-a served %v, want only the volume of no node", calls)
	}
	// Its node dead: served here.
	heartbeat(t, st, "node-b", nodes["node-b"].srv.Listener.Addr().String(), roomy, time.Now().Add(-time.Hour))
	if v, err := nodes["node-a"].client(t).GetVolume(ctx, "vol-b"); err != nil || v.Name != "node-a" {
		t.Fatalf("get volume of a dead node via node-a: %+v, %v", v, err)
	}
}

func TestOperationRoutesGoToTheNodeTheIDNames(t *testing.T) {
	st := openStore(t)
	nodes := newResourceCluster(t, st, "node-a", "node-b", "node-c")
	ctx := testCtx(t)
	id := api.OperationID("node-b", "abcdefghijklm")
	for _, via := range []string{"node-a", "node-c", "node-b"} {
		o, err := nodes[via].client(t).GetOperation(ctx, id)
		if err != nil || o.Target != "node-b" {
			t.Fatalf("get operation via %s: %+v, %v; want it served by node-b", via, o, err)
		}
		// The event stream (what WaitOperation follows) too, to its end.
		var states []string
		o, err = nodes[via].client(t).WatchOperation(ctx, id, func(o client.Operation) { states = append(states, o.Target+":"+o.State) })
		if err != nil || o.State != client.OperationSucceeded || len(states) != 2 || states[0] != "node-b:running" {
			t.Fatalf("watch operation via %s: %+v, %v, states %v", via, o, err, states)
		}
	}
	// A single node's id, and a tag of no node: served here.
	for _, other := range []string{"op-abcdefghijklm", api.OperationID("node-z", "abcdefghijklm")} {
		if o, err := nodes["node-a"].client(t).GetOperation(ctx, other); err != nil || o.Target != "node-a" {
			t.Fatalf("get operation %s via node-a: %+v, %v", other, o, err)
		}
	}
	if calls := nodes["node-c"].b.Calls(); len(calls) != 0 {
		t.Fatalf("node-c served %v", calls)
	}
	// A forged node call for it is refused, not served.
	res := rawCall(t, nodes["node-b"], http.MethodGet, "/v1/operations/"+id, func(r *http.Request) { newAuth(t, "node-a", otherSecret, time.Now()).Sign(r) })
	wantProblem(t, res, http.StatusUnauthorized, "bad signature")
}

func TestCreateMountingAVolumeIsPlacedOnTheVolumesNode(t *testing.T) {
	c := newCluster(t, "node-a", "node-b", "node-c")
	ctx := testCtx(t)
	for _, v := range []store.Volume{
		{ID: "vol-c", TenantID: store.DefaultTenant, Name: "on-c", State: "available", Node: "node-c"},
		{ID: "vol-b", TenantID: store.DefaultTenant, Name: "on-b", State: "available", Node: "node-b"},
		{ID: "vol-old", TenantID: store.DefaultTenant, Name: "old", State: "available"},
	} {
		if err := c.st.CreateVolume(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		sb, err := c.nodes["node-a"].client(t).CreateSandbox(ctx, client.CreateSandboxRequest{Name: "v" + string(rune('0'+i)),
			Volumes: []client.VolumeMount{{Volume: "on-c", Path: "/data"}, {Volume: "old", Path: "/old"}}})
		if err != nil || sb.Labels["served-by"] != "node-c" {
			t.Fatalf("create mounting a volume of node-c via node-a: %+v, %v", sb, err)
		}
	}
	if _, err := c.nodes["node-a"].client(t).CreateSandbox(ctx, client.CreateSandboxRequest{Name: "two",
		Volumes: []client.VolumeMount{{Volume: "on-c", Path: "/c"}, {Volume: "on-b", Path: "/b"}}}); err == nil ||
		!strings.Contains(err.Error(), "on nodes node-c and node-b") {
		t.Fatalf("create mounting volumes of two nodes: %v", err)
	}
	// The volume's node cordoned: no other node will do.
	if _, err := c.st.SetNodeState(ctx, "node-c", store.NodeCordoned); err != nil {
		t.Fatal(err)
	}
	if sb, err := c.nodes["node-a"].client(t).CreateSandbox(ctx, client.CreateSandboxRequest{Name: "cordoned",
		Volumes: []client.VolumeMount{{Volume: "vol-c", Path: "/data"}}}); err == nil {
		t.Fatalf("create mounting a volume of a cordoned node: %+v", sb)
	}
}

func TestRouteSnapshotFindsThePoolThatHoldsIt(t *testing.T) {
	c := newCluster(t, "node-a", "node-b")
	ctx := testCtx(t)
	addSandbox(t, c.st, "sb-1", "one", "node-b")
	if err := c.st.CreateVolume(ctx, store.Volume{ID: "vol-b", TenantID: store.DefaultTenant, Name: "on-b", State: "available", Node: "node-b"}); err != nil {
		t.Fatal(err)
	}
	for _, sn := range []store.Snapshot{
		{ID: "snap-sb", TenantID: store.DefaultTenant, SandboxID: "sb-1", Kind: "user", TemplateID: "host", CreatedAt: time.Now()},
		{ID: "snap-vol", TenantID: store.DefaultTenant, SandboxID: "vol-b", Kind: "volume", CreatedAt: time.Now()},
	} {
		if err := c.st.CreateSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
	}
	ra := c.nodes["node-a"].router
	for id, want := range map[string]string{"snap-sb": "node-b", "snap-vol": "node-b", "snap-none": ""} {
		to, err := ra.RouteSnapshot(ctx, store.DefaultTenant, id)
		if err != nil || to.Node != want {
			t.Fatalf("RouteSnapshot(%s) via node-a: %+v, %v; want %q", id, to, err, want)
		}
	}
	if to, err := c.nodes["node-b"].router.RouteSnapshot(ctx, store.DefaultTenant, "snap-vol"); err != nil || !to.Here() {
		t.Fatalf("RouteSnapshot on node-b itself: %+v, %v", to, err)
	}
}
