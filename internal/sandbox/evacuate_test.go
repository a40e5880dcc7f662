package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/testutil"
)

// TestEvacuateMovesARunningSandboxWithItsLastWritesAndATakenBackFailure:
// node n1 runs two sandboxes; evacuating it moves the first to n2 (real
// services on one SQLite store and one repository): it runs there under
// the same id at epoch 2 with every file written up to the pause (the
// delta push), and n1 keeps neither its processes nor its root. The second
// sandbox's restore is made to fail: n1 takes it back, running, with its
// processes (it was only frozen) and its lease at a higher epoch.
func TestEvacuateMovesARunningSandboxWithItsLastWritesAndATakenBackFailure(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	st, l1, l2, s1, s2 := twoNodes(t, 0)
	tn := store.DefaultTenant
	now := time.Now()
	for _, n := range []string{"n1", "n2"} {
		if _, err := st.HeartbeatNode(ctx, store.Node{Name: n, Address: "127.0.0.1:1", HeartbeatAt: now, StartedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for _, name := range []string{"moves", "stays"} {
		sb, err := s1.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l1.Acquire(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		s1.testWrite(t, sb.ID, "/workspace/last.md", "written just before the evacuation")
		ids = append(ids, sb.ID)
	}
	moves, stays := ids[0], ids[1]
	// A process of the sandbox that stays: it must survive the failed move.
	if _, err := s1.Exec(ctx, tn, stays, client.ExecRequest{Command: []string{"/bin/sleep", "300"}, Background: true}, nil); err != nil {
		t.Fatal(err)
	}

	nodes := map[string]*Service{"n1": s1, "n2": s2}
	ev, err := cluster.NewEvacuator(cluster.EvacuateOptions{Store: st,
		Pick: func(ctx context.Context, _ store.Sandbox, exclude string) (store.Node, error) {
			if exclude != "n1" {
				t.Errorf("pick excludes %q", exclude)
			}
			return st.GetNode(ctx, "n2")
		},
		HandOff: func(ctx context.Context, n store.Node, id string) (cluster.HandOffResult, error) {
			return nodes[n.Name].HandOff(ctx, id)
		},
		Adopt: func(ctx context.Context, n store.Node, id string) error {
			if id == stays {
				return errors.New("restore failed on the target")
			}
			_, err := nodes[n.Name].Adopt(ctx, id)
			return err
		},
		Finish: func(ctx context.Context, n store.Node, id string, h cluster.HandOffResult, moved bool) error {
			return nodes[n.Name].FinishHandOff(ctx, id, h, moved)
		}})
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	op, err := NodeEvacuation{Service: s1, Evacuate: func(ctx context.Context, node string, phase func(string)) (client.EvacuateResult, error) {
		return ev.Evacuate(ctx, node, func(p string) { phases = append(phases, p); phase(p) })
	}}.EvacuateNode(ctx, api.Principal{TenantID: tn, Admin: true}, "n1", client.EvacuateRequest{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if op.State != client.OperationFailed || op.Kind != "evacuate" {
		t.Fatalf("evacuate operation: %s %s (one sandbox stayed: want failed)", op.State, op.Error)
	}
	var res client.EvacuateResult
	if err := json.Unmarshal(op.Result, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Moved) != 1 || res.Moved[0].Sandbox != moves || res.Moved[0].Target != "n2" || res.Moved[0].PauseSeconds <= 0 ||
		len(res.Failed) != 1 || res.Failed[0].Sandbox != stays {
		t.Fatalf("evacuate result: %+v (phases %q)", res, phases)
	}
	if n, _ := st.GetNode(ctx, "n1"); n.State != store.NodeDraining {
		t.Fatalf("n1 is %s after the evacuation, want draining", n.State)
	}

	// The moved sandbox runs on n2 with its last writes, at epoch 2.
	got, err := s2.GetSandbox(ctx, tn, moves)
	if err != nil || got.State != "running" || got.Name != "moves" {
		t.Fatalf("moved sandbox: %+v %v", got, err)
	}
	if epoch, ok := l2.Held(moves); !ok || epoch != 2 {
		t.Fatalf("n2's lease of the moved sandbox: %d %v", epoch, ok)
	}
	if _, ok := l1.Held(moves); ok {
		t.Fatal("n1 still holds the moved sandbox's lease")
	}
	if got := s2.testRead(t, moves, "/workspace/last.md"); got != "written just before the evacuation" {
		t.Fatalf("last write on n2 = %q", got)
	}
	if st, _ := s1.rt.Status(ctx, moves); st != steadrt.StatusAbsent {
		t.Fatalf("n1's copy of the moved sandbox is %s, want gone", st)
	}
	if ok, _ := s1.pool.Exists(ctx, datasetName(moves)); ok {
		t.Fatal("n1 kept the moved sandbox's root")
	}

	// The sandbox whose restore failed is back on n1, running, with its
	// process, at a higher epoch.
	back, err := s1.GetSandbox(ctx, tn, stays)
	if err != nil || back.State != "running" {
		t.Fatalf("sandbox taken back: %+v %v", back, err)
	}
	if epoch, ok := l1.Held(stays); !ok || epoch != 2 {
		t.Fatalf("n1's lease of the sandbox it took back: %d %v, want epoch 2", epoch, ok)
	}
	if ok, _ := s2.pool.Exists(ctx, datasetName(stays)); ok {
		t.Fatal("the failed move left a root on n2")
	}
	r, err := s1.Exec(ctx, tn, stays, client.ExecRequest{Command: []string{"/bin/sh", "-c", "pgrep -x sleep >/dev/null"}}, nil)
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("the process of the sandbox taken back: %+v %v", r, err)
	}

	// Handing over a sandbox this node does not own is refused.
	if _, err := s1.HandOff(ctx, moves); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("hand over of a sandbox n1 no longer owns: %v", err)
	}
}
