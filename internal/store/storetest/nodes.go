package storetest

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// testNodesRegisterRefreshAndKeepState checks the NodeStore contract: a
// first heartbeat registers an active node, later ones replace address,
// capacity and times but keep CreatedAt and an operator's state.
func testNodesRegisterRefreshAndKeepState(t *testing.T, s store.Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 4, 5, 6, 789000000, time.UTC)
	got, err := s.HeartbeatNode(ctx, store.Node{Name: "node-b", Address: "10.0.0.2:7879", CPUs: 2, MemoryBytes: 8 << 30,
		PoolFreeBytes: 100 << 30, Version: "v1", State: store.NodeDraining, StartedAt: t0, HeartbeatAt: t0,
		Templates: []string{"host", "alpine", "host"}})
	noErr(t, err, "register node-b")
	if got.State != store.NodeActive || !got.CreatedAt.Equal(t0) || !got.HeartbeatAt.Equal(t0) || !got.StartedAt.Equal(t0) ||
		got.Address != "10.0.0.2:7879" || got.CPUs != 2 || got.MemoryBytes != 8<<30 || got.PoolFreeBytes != 100<<30 || got.Version != "v1" ||
		!slices.Equal(got.Templates, []string{"alpine", "host"}) {
		t.Fatalf("registered node %+v (templates sorted, once each)", got)
	}
	_, err = s.HeartbeatNode(ctx, store.Node{Name: "node-a", Address: "10.0.0.1:7879", CPUs: 4, StartedAt: t0, HeartbeatAt: t0})
	noErr(t, err, "register node-a")

	c, err := s.SetNodeState(ctx, "node-b", store.NodeCordoned)
	noErr(t, err, "cordon")
	if c.State != store.NodeCordoned {
		t.Fatalf("cordoned node %+v", c)
	}
	_, err = s.SetNodeState(ctx, "node-b", store.NodeCordoned)
	noErr(t, err, "cordon again (idempotent)")

	t1 := t0.Add(time.Minute)
	got, err = s.HeartbeatNode(ctx, store.Node{Name: "node-b", Address: "10.0.0.9:7879", CPUs: 8, MemoryBytes: 16 << 30,
		PoolFreeBytes: 50 << 30, Version: "v2", State: store.NodeActive, StartedAt: t1, HeartbeatAt: t1, Templates: []string{"host"}})
	noErr(t, err, "heartbeat node-b")
	if got.State != store.NodeCordoned || !got.CreatedAt.Equal(t0) || !got.HeartbeatAt.Equal(t1) || !got.StartedAt.Equal(t1) ||
		got.Address != "10.0.0.9:7879" || got.CPUs != 8 || got.MemoryBytes != 16<<30 || got.PoolFreeBytes != 50<<30 || got.Version != "v2" ||
		!slices.Equal(got.Templates, []string{"host"}) {
		t.Fatalf("node after heartbeat %+v (want the new address, capacity and times, the cordon and the first CreatedAt)", got)
	}
	again, err := s.GetNode(ctx, "node-b")
	noErr(t, err, "get node-b")
	if !reflect.DeepEqual(again, got) {
		t.Fatalf("get %+v, heartbeat returned %+v", again, got)
	}
	list, err := s.ListNodes(ctx)
	noErr(t, err, "list")
	if len(list) != 2 || list[0].Name != "node-a" || list[1].Name != "node-b" || !reflect.DeepEqual(list[1], got) || list[0].Templates == nil {
		t.Fatalf("list %+v, want node-a then node-b", list)
	}
	d, err := s.SetNodeState(ctx, "node-b", store.NodeDraining)
	noErr(t, err, "drain")
	u, err := s.SetNodeState(ctx, "node-b", store.NodeActive)
	noErr(t, err, "uncordon")
	if d.State != store.NodeDraining || u.State != store.NodeActive {
		t.Fatalf("drain %s then uncordon %s", d.State, u.State)
	}
}

// testNodesHeartbeatZeroTimesMeanNow: a heartbeat without times is now.
func testNodesHeartbeatZeroTimesMeanNow(t *testing.T, s store.Store) {
	before := time.Now().Add(-time.Second)
	got, err := s.HeartbeatNode(context.Background(), store.Node{Name: "n", Address: "127.0.0.1:1"})
	noErr(t, err, "heartbeat")
	after := time.Now().Add(time.Second)
	if got.HeartbeatAt.Before(before) || got.HeartbeatAt.After(after) || got.HeartbeatAt.Location() != time.UTC ||
		!got.StartedAt.Equal(got.HeartbeatAt) || !got.CreatedAt.Equal(got.HeartbeatAt) {
		t.Fatalf("node %+v, want times of now in UTC", got)
	}
}

// testNodesRejectBadInputAndStoreNothing: bad heartbeats and states are
// errs.ErrInvalid, unknown names errs.ErrNotFound, and nothing changes.
func testNodesRejectBadInputAndStoreNothing(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, n := range []store.Node{
		{Name: "", Address: "127.0.0.1:1"},
		{Name: "x", Address: ""},
		{Name: "x", Address: "127.0.0.1:1", CPUs: -1},
		{Name: "x", Address: "127.0.0.1:1", MemoryBytes: -1},
		{Name: "x", Address: "127.0.0.1:1", PoolFreeBytes: -1},
	} {
		_, err := s.HeartbeatNode(ctx, n)
		wantErr(t, err, errs.ErrInvalid, "heartbeat of a bad node")
	}
	_, err := s.GetNode(ctx, "x")
	wantErr(t, err, errs.ErrNotFound, "get unknown node")
	_, err = s.SetNodeState(ctx, "x", store.NodeCordoned)
	wantErr(t, err, errs.ErrNotFound, "cordon unknown node")
	_, err = s.HeartbeatNode(ctx, store.Node{Name: "x", Address: "127.0.0.1:1"})
	noErr(t, err, "register x")
	_, err = s.SetNodeState(ctx, "x", "sleeping")
	wantErr(t, err, errs.ErrInvalid, "unknown state")
	got, err := s.GetNode(ctx, "x")
	noErr(t, err, "get x")
	if got.State != store.NodeActive {
		t.Fatalf("state %q after a refused change, want active", got.State)
	}
	list, err := s.ListNodes(ctx)
	noErr(t, err, "list")
	if len(list) != 1 {
		t.Fatalf("%d nodes, want only x", len(list))
	}
}

// testNodesEmptyRegistryListsNone: a new store has no nodes.
func testNodesEmptyRegistryListsNone(t *testing.T, s store.Store) {
	list, err := s.ListNodes(context.Background())
	noErr(t, err, "list")
	if list == nil || len(list) != 0 {
		t.Fatalf("list of a new store %#v, want an empty list", list)
	}
}
