package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// TestEvacuateLeavesASandboxWhoseHandOffFailsOnItsNode: the node is set
// draining; a sandbox whose hand-over fails is never adopted nor finished
// (it stays where it runs); the others are handed over, adopted on a node
// other than the source and finished as moved; deleted sandboxes, other
// nodes' sandboxes and lapsed leases are not touched.
func TestEvacuateLeavesASandboxWhoseHandOffFailsOnItsNode(t *testing.T) {
	w := newFailoverWorld(t)
	ctx := t.Context()
	w.sandbox("sb-a", "n1", store.StateRunning, "", true)
	w.sandbox("sb-b", "n1", store.StateRunning, "", true)
	w.sandbox("sb-c", "n1", store.StateStopped, "", true)
	w.sandbox("sb-gone", "n1", store.StateDeleted, "", true)
	w.sandbox("sb-other", "n2", store.StateRunning, "", true)
	var calls []string
	ev, err := NewEvacuator(EvacuateOptions{Store: w.st, Clock: w.c.Now,
		Pick: func(ctx context.Context, sb store.Sandbox, exclude string) (store.Node, error) {
			if exclude != "n1" {
				t.Errorf("pick excludes %q", exclude)
			}
			return w.st.GetNode(ctx, "n3")
		},
		HandOff: func(ctx context.Context, n store.Node, id string) (HandOffResult, error) {
			calls = append(calls, "handoff "+n.Name+" "+id)
			if id == "sb-b" {
				return HandOffResult{}, errors.New("push failed")
			}
			return HandOffResult{Push: "p-" + id, PausedAt: w.c.Now()}, nil
		},
		Adopt: func(ctx context.Context, n store.Node, id string) error {
			calls = append(calls, "adopt "+n.Name+" "+id)
			return nil
		},
		Finish: func(ctx context.Context, n store.Node, id string, h HandOffResult, moved bool) error {
			if !moved || h.Push != "p-"+id {
				t.Errorf("finish %s: moved %v, hand-over %+v", id, moved, h)
			}
			calls = append(calls, "finish "+n.Name+" "+id)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ev.Evacuate(ctx, "nope", nil); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("evacuate an unknown node: %v", err)
	}
	res, err := ev.Evacuate(ctx, "n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"handoff n1 sb-a", "adopt n3 sb-a", "finish n1 sb-a", "handoff n1 sb-b", "handoff n1 sb-c", "adopt n3 sb-c", "finish n1 sb-c"}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls:\n%q\nwant\n%q", calls, want)
	}
	if len(res.Moved) != 2 || len(res.Failed) != 1 || res.Failed[0].Sandbox != "sb-b" || res.Failed[0].Error == "" {
		t.Fatalf("result: %+v", res)
	}
	if n, _ := w.st.GetNode(ctx, "n1"); n.State != store.NodeDraining {
		t.Fatalf("n1 is %s, want draining", n.State)
	}
}

// TestEvacuatePicksTargetsWithRoomAndLeavesTheRestInPlace: evacuate's
// target is picked by placement's rule (Router.PickMove): a sandbox no node
// has room for is never handed over (it runs on where it is, listed with
// the reason), and one that fits goes to a node with its template first.
func TestEvacuatePicksTargetsWithRoomAndLeavesTheRestInPlace(t *testing.T) {
	w := newFailoverWorld(t)
	ctx := t.Context()
	if err := w.st.CreateTemplate(ctx, store.Template{ID: "alpine", TenantID: store.DefaultTenant, Kind: "oci", Source: "alpine", CreatedAt: w.c.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		id, tmpl string
		cpus     float64
	}{{"sb-big", "host", 16}, {"sb-fit", "alpine", 1}} {
		w.sandbox(s.id, "n1", store.StateRunning, "", true)
		sb := w.get(s.id)
		sb.TemplateID = s.tmpl
		sb.Spec = fmt.Appendf(nil, `{"instance_type":"small","limits":{"cpus":%g,"memory_bytes":1073741824,"disk_bytes":1073741824}}`, s.cpus)
		if _, err := w.st.UpdateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []store.Node{{Name: "n2", CPUs: 2}, {Name: "n3", CPUs: 2, Templates: []string{"alpine"}}} {
		n.Address, n.MemoryBytes, n.PoolFreeBytes, n.StartedAt, n.HeartbeatAt = "127.0.0.1:1", 64<<30, 100<<30, w.c.Now(), w.c.Now()
		if _, err := w.st.HeartbeatNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewRouter(RouterOptions{Store: w.st, Node: "n2", Secret: testSecret, Grace: 30 * time.Second, Clock: w.c.Now,
		InstanceTypes: testTypes, DefaultInstanceType: "small"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	var calls []string
	ev, err := NewEvacuator(EvacuateOptions{Store: w.st, Clock: w.c.Now, Pick: r.PickMove,
		HandOff: func(ctx context.Context, n store.Node, id string) (HandOffResult, error) {
			calls = append(calls, "handoff "+id)
			return HandOffResult{Push: "p-" + id}, nil
		},
		Adopt: func(ctx context.Context, n store.Node, id string) error {
			calls = append(calls, "adopt "+n.Name+" "+id)
			return nil
		},
		Finish: func(ctx context.Context, n store.Node, id string, h HandOffResult, moved bool) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	res, err := ev.Evacuate(ctx, "n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"handoff sb-fit", "adopt n3 sb-fit"}; !slices.Equal(calls, want) {
		t.Fatalf("calls %q, want %q", calls, want)
	}
	if len(res.Failed) != 1 || res.Failed[0].Sandbox != "sb-big" || !strings.Contains(res.Failed[0].Error, "no node has room") {
		t.Fatalf("result %+v", res)
	}
}
