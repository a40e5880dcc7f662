package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

func newRegistry(t *testing.T, name string, st *sqlite.Store, interval time.Duration) *Registry {
	t.Helper()
	r, err := New(Options{Store: st, Name: name, Address: "127.0.0.1:7879", Version: "test", Interval: interval,
		Capacity: func(context.Context) (Capacity, error) {
			return Capacity{CPUs: 2, MemoryBytes: 4 << 30, PoolFreeBytes: 10 << 30}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestRunKeepsTheHeartbeatFreshAndCordonOutlivesIt(t *testing.T) {
	st := openStore(t)
	r := newRegistry(t, "node-1", st, 20*time.Millisecond)
	// Heartbeats every 20 ms, alive for a minute: the default grace of
	// three intervals (60 ms) can pass between a heartbeat and the read
	// below on a loaded machine.
	r.o.Grace = time.Minute
	first, err := r.Heartbeat(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if first.State != client.NodeActive || first.CPUs != 2 || first.MemoryBytes != 4<<30 || first.PoolFreeBytes != 10<<30 {
		t.Fatalf("registered %+v", first)
	}
	if _, err := r.SetNodeState(t.Context(), "node-1", client.NodeCordoned); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := r.GetNode(t.Context(), "node-1")
		if err != nil {
			t.Fatal(err)
		}
		if n.HeartbeatAt.After(first.HeartbeatAt) {
			if n.State != client.NodeCordoned || !n.Alive || !n.Self || !n.CreatedAt.Equal(first.CreatedAt) {
				t.Fatalf("node after a heartbeat %+v: want it cordoned, alive, self, first created", n)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run refreshed no heartbeat")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
}

func TestNodeWithAnOldHeartbeatIsNotAlive(t *testing.T) {
	st := openStore(t)
	other := newRegistry(t, "node-2", st, time.Hour)
	if _, err := other.Heartbeat(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Seen from a node whose grace is shorter than the other's age.
	me, err := New(Options{Store: st, Name: "node-1", Address: "127.0.0.1:1", Grace: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	ns, err := me.ListNodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(ns) != 1 || ns[0].Name != "node-2" || ns[0].Alive || ns[0].Self {
		t.Fatalf("nodes %+v: want node-2, not alive, not self", ns)
	}
}

func TestSetNodeStateRefusesUnknownNodeAndState(t *testing.T) {
	st := openStore(t)
	r := newRegistry(t, "node-1", st, time.Hour)
	if _, err := r.SetNodeState(t.Context(), "nope", client.NodeDraining); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("drain an unknown node: %v, want ErrNotFound", err)
	}
	if _, err := r.Heartbeat(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SetNodeState(t.Context(), "node-1", "asleep"); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("unknown state: %v, want ErrInvalid", err)
	}
	if _, err := New(Options{Store: st, Name: "", Address: "x:1"}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("registry without a name: %v, want ErrInvalid", err)
	}
}

func TestCheckAloneRefusesWhileAnotherNodeIsAlive(t *testing.T) {
	st := openStore(t)
	a := newRegistry(t, "node-a", st, time.Hour)
	if err := a.CheckAlone(t.Context()); err != nil {
		t.Fatalf("empty registry: %v", err)
	}
	if _, err := a.Heartbeat(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := a.CheckAlone(t.Context()); err != nil {
		t.Fatalf("only itself registered: %v", err)
	}
	b := newRegistry(t, "node-b", st, time.Hour)
	if err := b.CheckAlone(t.Context()); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("node-a alive: %v, want ErrConflict", err)
	}
	late, err := New(Options{Store: st, Name: "node-b", Address: "127.0.0.1:2", Grace: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	if err := late.CheckAlone(t.Context()); err != nil {
		t.Fatalf("node-a's heartbeat is past the grace: %v", err)
	}
}
