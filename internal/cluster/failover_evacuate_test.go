package cluster

import (
	"context"
	"errors"
	"slices"
	"testing"

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
