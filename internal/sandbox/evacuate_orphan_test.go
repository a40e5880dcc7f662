package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/testutil"
)

// TestAnOrphanedHandOffIsTakenBackAndACopyAdoptedElsewhereIsNeverResumed:
// node n1 hands two sandboxes over and the node running the evacuation
// dies (nobody adopts nor finishes; real services on one SQLite store and
// one repository). The first is given back to n1 by the failover
// coordinator (real, on n2) once the grace has passed: running again on
// n1, with its process (it was only frozen), at epoch 2, its mark gone.
// The second was adopted by n2 before the evacuator died: the coordinator
// leaves it, and a late take-back on n1 is refused and keeps n1's frozen
// copy as a lost copy, never resumed, while n2 runs the sandbox; so does
// a third's whose adopter lost the lease since. A fourth, whose copy n1
// no longer has (a restart kept it as a lost one), is adopted on n2 from
// the hand-over's push instead.
func TestAnOrphanedHandOffIsTakenBackAndACopyAdoptedElsewhereIsNeverResumed(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	st, l1, l2, s1, s2 := twoNodes(t, 0)
	tn := store.DefaultTenant
	var ids []string
	for _, name := range []string{"back", "adopted", "adopted-then-lost", "no-copy"} {
		sb, err := s1.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l1.Acquire(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		s1.testWrite(t, sb.ID, "/workspace/last.md", "written before the hand-over")
		if _, err := s1.Exec(ctx, tn, sb.ID, client.ExecRequest{Command: []string{"/bin/sleep", "300"}, Background: true}, nil); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	back, adopted, lapsed, noCopy := ids[0], ids[1], ids[2], ids[3]
	hs := map[string]cluster.HandOffResult{}
	for _, id := range ids {
		h, err := s1.HandOff(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		hs[id] = h
		sb, _ := st.GetSandbox(ctx, "", id)
		m, ok := cluster.HandOffMarkOf(sb)
		if !ok || m.Node != "n1" || m.Epoch != 1 || m.Push != h.Push || m.PausedAt.IsZero() || sb.State != store.StatePaused || sb.StopReason != StopReasonEvacuate {
			t.Fatalf("after the hand-over of %s: mark %+v %v, %s (%s)", id, m, ok, sb.State, sb.StopReason)
		}
	}
	// The target adopted the other two; then the evacuator died.
	for _, id := range []string{adopted, lapsed} {
		if _, err := s2.Adopt(ctx, id); err != nil {
			t.Fatal(err)
		}
		if sb, _ := st.GetSandbox(ctx, "", id); func() bool { _, ok := cluster.HandOffMarkOf(sb); return ok }() {
			t.Fatal("the adoption left the hand-over mark")
		}
	}

	// n1 restarted meanwhile and kept its copy of the fourth as a lost one
	// (as Reconcile does when a target's adoption held the lease then).
	if sb, err := st.GetSandbox(ctx, "", noCopy); err != nil {
		t.Fatal(err)
	} else {
		s1.keepLostCopy(ctx, sb, 1, "a restart while a target held the lease")
	}

	// The coordinator, on n2, past the grace (its clock ahead; leases last
	// a minute).
	ahead := func() time.Time { return time.Now().Add(45 * time.Second) }
	for _, n := range []string{"n1", "n2"} {
		if _, err := st.HeartbeatNode(ctx, store.Node{Name: n, Address: "127.0.0.1:1", HeartbeatAt: ahead(), StartedAt: ahead()}); err != nil {
			t.Fatal(err)
		}
	}
	nodes := map[string]*Service{"n1": s1, "n2": s2}
	var finished []string
	f, err := cluster.NewFailover(cluster.FailoverOptions{Store: st, Node: "n2", Grace: 30 * time.Second, Every: 10 * time.Second, Clock: ahead,
		Pick: func(ctx context.Context, _ store.Sandbox, _ string) (store.Node, error) { return st.GetNode(ctx, "n2") },
		Adopt: func(ctx context.Context, n store.Node, id string) error {
			if id != noCopy {
				return fmt.Errorf("no adoption expected (of %s)", id)
			}
			_, err := nodes[n.Name].Adopt(ctx, id)
			return err
		},
		Finish: func(ctx context.Context, n store.Node, id string, h cluster.HandOffResult, moved bool) error {
			finished = append(finished, n.Name+" "+id)
			return nodes[n.Name].FinishHandOff(ctx, id, h, moved)
		}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Pass(ctx)
	slices.Sort(finished)
	wantFinished := []string{"n1 " + back, "n1 " + noCopy}
	slices.Sort(wantFinished)
	if err != nil || !slices.Equal(res.TakenBack, []string{back}) || len(res.Failed) != 0 || !slices.Equal(res.Marked, []string{noCopy}) ||
		!slices.Equal(res.Adopted, []string{noCopy}) || !slices.Equal(finished, wantFinished) {
		t.Fatalf("coordinator's pass: %+v %v, finish calls %q", res, err, finished)
	}
	got, err := s1.GetSandbox(ctx, tn, back)
	if err != nil || got.State != "running" {
		t.Fatalf("the sandbox taken back: %+v %v", got, err)
	}
	if epoch, ok := l1.Held(back); !ok || epoch != 2 {
		t.Fatalf("n1's lease of the sandbox taken back: %d %v, want epoch 2", epoch, ok)
	}
	if sb, _ := st.GetSandbox(ctx, "", back); func() bool { _, ok := cluster.HandOffMarkOf(sb); return ok }() {
		t.Fatal("the sandbox taken back keeps its hand-over mark")
	}
	r, err := s1.Exec(ctx, tn, back, client.ExecRequest{Command: []string{"/bin/sh", "-c", "pgrep -x sleep >/dev/null && cat /workspace/last.md"}}, nil)
	if err != nil || r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "written before the hand-over") {
		t.Fatalf("the sandbox taken back: %+v %v", r, err)
	}
	// The one n1 had no copy of left runs on n2 from the hand-over's push.
	if sb, err := s2.GetSandbox(ctx, tn, noCopy); err != nil || sb.State != "running" {
		t.Fatalf("the hand-over without a copy on its source: %+v %v", sb, err)
	}
	if got := s2.testRead(t, noCopy, "/workspace/last.md"); got != "written before the hand-over" {
		t.Fatalf("last write on n2 = %q", got)
	}
	if epoch, ok := l2.Held(noCopy); !ok || epoch != 2 {
		t.Fatalf("n2's lease of the sandbox without a copy on n1: %d %v", epoch, ok)
	}

	// Taking back twice changes nothing.
	if err := s1.FinishHandOff(ctx, back, hs[back], false); err != nil {
		t.Fatalf("a second take-back: %v", err)
	}
	if epoch, ok := l1.Held(back); !ok || epoch != 2 {
		t.Fatalf("n1's lease after a second take-back: %d %v", epoch, ok)
	}

	// The adopted one: a late take-back on n1 never resumes its copy.
	if err := s1.FinishHandOff(ctx, adopted, hs[adopted], false); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("a take-back of a sandbox adopted elsewhere: %v", err)
	}
	if _, ok := l1.Held(adopted); ok {
		t.Fatal("n1 holds the lease of a sandbox n2 adopted")
	}
	if epoch, ok := l2.Held(adopted); !ok || epoch != 2 {
		t.Fatalf("n2's lease: %d %v", epoch, ok)
	}
	if st, _ := s1.rt.Status(ctx, adopted); st != steadrt.StatusAbsent {
		t.Fatalf("n1's copy of the adopted sandbox is %s, want gone", st)
	}
	if ok, _ := s1.pool.Exists(ctx, datasetName(adopted)); ok {
		t.Fatal("n1 kept the adopted sandbox's root under its own name")
	}
	if ok, _ := s1.pool.Exists(ctx, lostCopyDataset(2, adopted)); !ok {
		t.Fatalf("n1 did not keep its copy as %s", lostCopyDataset(2, adopted))
	}
	sb, err := s2.GetSandbox(ctx, tn, adopted)
	if err != nil || sb.State != "running" {
		t.Fatalf("the adopted sandbox on n2: %+v %v", sb, err)
	}
	if got := s2.testRead(t, adopted, "/workspace/last.md"); got != "written before the hand-over" {
		t.Fatalf("last write on n2 = %q", got)
	}

	// Even once the adopter's lease is gone (it lost it: nobody holds it
	// in force), a late take-back never runs n1's older copy, nor takes
	// the lease (failover finds the sandbox with its adopter).
	if err := l2.Release(ctx, lapsed); err != nil {
		t.Fatal(err)
	}
	if err := s1.FinishHandOff(ctx, lapsed, hs[lapsed], false); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("a take-back of a sandbox adopted elsewhere whose lease nobody holds: %v", err)
	}
	if own, err := st.GetOwnership(ctx, lapsed); err != nil || own.Node != "n2" || own.Epoch != 2 {
		t.Fatalf("the lease after a refused take-back: %+v %v", own, err)
	}
	if st, _ := s1.rt.Status(ctx, lapsed); st != steadrt.StatusAbsent {
		t.Fatalf("n1's copy is %s, want gone", st)
	}
	if ok, _ := s1.pool.Exists(ctx, lostCopyDataset(2, lapsed)); !ok {
		t.Fatalf("n1 did not keep its copy as %s", lostCopyDataset(2, lapsed))
	}
}
