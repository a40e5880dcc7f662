package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// handOff plays sandbox.Service.HandOff on source for sandbox id (which
// source holds at epoch 1): paused for the evacuation, the hand-over mark
// written under the source's lease, the lease released.
func (w *failoverWorld) handOff(id, source string) HandOffMark {
	w.t.Helper()
	ctx := w.t.Context()
	sb := w.get(id)
	now := w.c.Now()
	m := HandOffMark{Node: source, Epoch: 1, Push: "push-" + id, Was: sb.State, PausedAt: now, At: now}
	var err error
	if sb.Spec, err = SetHandOffMark(sb.Spec, m); err != nil {
		w.t.Fatal(err)
	}
	sb.State, sb.StopReason = store.StatePaused, "evacuate"
	fenced := store.WithFence(ctx, store.Fence{SandboxID: id, Node: source, Epoch: 1, At: now})
	if _, err := w.st.UpdateSandbox(fenced, sb); err != nil {
		w.t.Fatal(err)
	}
	if err := w.st.ReleaseOwnership(ctx, id, source, 1, now); err != nil {
		w.t.Fatal(err)
	}
	return m
}

// finishCall is a call of the coordinator's Finish.
type finishCall struct {
	source, id string
	h          HandOffResult
	moved      bool
}

// takeBack gives node a Finish that plays sandbox.Service.FinishHandOff
// (not moved) on the source: it takes the lease, clears the mark and
// resumes the sandbox; fail[id], while positive, fails a call of id.
func (w *failoverWorld) takeBack(f *Failover, calls *[]finishCall, fail map[string]int) {
	var mu sync.Mutex
	f.o.Finish = func(ctx context.Context, source store.Node, id string, h HandOffResult, moved bool) error {
		mu.Lock()
		*calls = append(*calls, finishCall{source.Name, id, h, moved})
		failing := fail[id] > 0
		if failing {
			fail[id]--
		}
		mu.Unlock()
		if failing {
			return errors.New("source unreachable")
		}
		own, err := w.st.AcquireOwnership(ctx, id, source.Name, sbLeaseTTL, w.c.Now())
		if err != nil {
			return err
		}
		sb := w.get(id)
		if sb.Spec, err = ClearHandOffMark(sb.Spec); err != nil {
			return err
		}
		sb.State, sb.StopReason = store.StateRunning, ""
		_, err = w.st.UpdateSandbox(store.WithFence(ctx, store.Fence{SandboxID: id, Node: source.Name, Epoch: own.Epoch, At: w.c.Now()}), sb)
		return err
	}
}

// TestFailoverGivesAnOrphanedHandOffBackToItsLiveSource: a sandbox whose
// evacuation stopped between the release and the finish (its evacuating
// node died) is given back to its source once the grace has passed with
// no lease holder, and only then; a failed give-back backs off; a
// hand-over whose target holds the lease (an adoption running) is left
// alone.
func TestFailoverGivesAnOrphanedHandOffBackToItsLiveSource(t *testing.T) {
	w := newFailoverWorld(t)
	ctx := t.Context()
	w.sandbox("sb-h", "n1", store.StateRunning, "", true)
	w.sandbox("sb-retry", "n1", store.StateRunning, "", true)
	w.sandbox("sb-adopting", "n1", store.StateRunning, "", true)
	w.sandbox("sb-plain", "n1", store.StateRunning, "", true)
	w.sandbox("sb-nocopy", "n1", store.StateRunning, "", true)
	mark := w.handOff("sb-h", "n1")
	w.handOff("sb-retry", "n1")
	w.handOff("sb-nocopy", "n1")
	w.handOff("sb-adopting", "n1")
	// A target adopts sb-adopting: it holds the lease (epoch 2).
	if _, err := w.st.AcquireOwnership(ctx, "sb-adopting", "n2", sbLeaseTTL, w.c.Now()); err != nil {
		t.Fatal(err)
	}
	f := w.coordinator("n3", w.st, nil)
	var calls []finishCall
	w.takeBack(f, &calls, map[string]int{"sb-retry": 1})
	takeBack := f.o.Finish
	f.o.Finish = func(ctx context.Context, source store.Node, id string, h HandOffResult, moved bool) error {
		if id == "sb-nocopy" {
			return fmt.Errorf("no copy here any more: %w", errs.ErrNotFound)
		}
		return takeBack(ctx, source, id, h, moved)
	}

	// renew plays the holders of sb-adopting and sb-plain renewing.
	renew := func() {
		t.Helper()
		for _, id := range []string{"sb-adopting", "sb-plain"} {
			own, _ := w.st.GetOwnership(ctx, id)
			if _, err := w.st.RenewOwnership(ctx, id, own.Node, own.Epoch, sbLeaseTTL, w.c.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Within the grace the evacuation may still finish: nothing happens.
	w.c.Add(20 * time.Second)
	for _, n := range []string{"n1", "n2", "n3"} {
		w.heartbeat(n)
	}
	renew()
	if res, err := f.Pass(ctx); err != nil || len(res.TakenBack)+len(res.Failed)+len(res.Marked) != 0 || len(calls) != 0 {
		t.Fatalf("pass within the grace: %+v %v, calls %+v", res, err, calls)
	}

	// Past it, with every node alive: the sources take them back, one
	// after a failed call and its backoff.
	w.c.Add(15 * time.Second)
	for _, n := range []string{"n1", "n2", "n3"} {
		w.heartbeat(n)
	}
	renew()
	// The source without a copy: adopted elsewhere from the push.
	res, err := f.Pass(ctx)
	if err != nil || !slices.Equal(res.TakenBack, []string{"sb-h"}) || !slices.Equal(res.Failed, []string{"sb-retry"}) ||
		!slices.Equal(res.Marked, []string{"sb-nocopy"}) || !slices.Equal(res.Adopted, []string{"sb-nocopy"}) {
		t.Fatalf("pass past the grace: %+v %v", res, err)
	}
	if own, _ := w.st.GetOwnership(ctx, "sb-nocopy"); own.Node != "n2" || own.Epoch != 2 || w.adoptCount("sb-nocopy") != 1 {
		t.Fatalf("sb-nocopy's lease: %+v, adopted %d times", own, w.adoptCount("sb-nocopy"))
	}
	if len(calls) != 2 || !slices.Contains(calls, finishCall{"n1", "sb-h", mark.Result(), false}) {
		t.Fatalf("finish calls: %+v, want sb-h's first with %+v", calls, mark.Result())
	}
	if own, err := w.st.GetOwnership(ctx, "sb-h"); err != nil || own.Node != "n1" || own.Epoch != 2 || !own.ValidAt(w.c.Now()) {
		t.Fatalf("sb-h's lease: %+v %v", own, err)
	}
	if sb := w.get("sb-h"); sb.State != store.StateRunning {
		t.Fatalf("sb-h is %s", sb.State)
	} else if _, ok := HandOffMarkOf(sb); ok {
		t.Fatal("sb-h keeps its hand-over mark")
	}
	if res, _ := f.Pass(ctx); !slices.Equal(res.Waiting, []string{"sb-retry"}) || len(res.TakenBack) != 0 {
		t.Fatalf("pass within the backoff: %+v", res)
	}
	w.c.Add(10 * time.Second)
	for _, n := range []string{"n1", "n2", "n3"} {
		w.heartbeat(n)
	}
	renew()
	if res, _ := f.Pass(ctx); !slices.Equal(res.TakenBack, []string{"sb-retry"}) {
		t.Fatalf("retry after the backoff: %+v", res)
	}
	// The adoption in progress was never touched, nor adopted again.
	if own, _ := w.st.GetOwnership(ctx, "sb-adopting"); own.Node != "n2" || own.Epoch != 2 {
		t.Fatalf("sb-adopting's lease: %+v", own)
	}
	for _, c := range calls {
		if c.id == "sb-adopting" || c.id == "sb-plain" {
			t.Fatalf("finish called for %s", c.id)
		}
	}
	if w.adoptCount("sb-h")+w.adoptCount("sb-retry")+w.adoptCount("sb-adopting") != 0 {
		t.Fatal("a handed-over sandbox with a live source was adopted")
	}
	// Later passes change nothing.
	n := len(calls)
	w.c.Add(10 * time.Second)
	for _, nd := range []string{"n1", "n2", "n3"} {
		w.heartbeat(nd)
	}
	renew()
	if res, err := f.Pass(ctx); err != nil || len(res.TakenBack)+len(res.Failed)+len(res.Marked)+len(res.Adopted) != 0 || len(calls) != n {
		t.Fatalf("later pass: %+v %v", res, err)
	}
}

// TestFailoverAdoptsAnOrphanedHandOffElsewhereWhenItsSourceIsGone: when
// the source of an orphaned hand-over lapsed too, the sandbox is marked
// lost with the source and adopted on another node from the hand-over's
// push, in the state the hand-over left (started again); the source is
// never asked to take it back. This holds also when the last to release
// the lease was a target whose adoption failed (the lease row names it,
// not the source).
func TestFailoverAdoptsAnOrphanedHandOffElsewhereWhenItsSourceIsGone(t *testing.T) {
	w := newFailoverWorld(t)
	ctx := t.Context()
	w.sandbox("sb-h", "n1", store.StateRunning, "", true)
	w.sandbox("sb-failed", "n1", store.StateStopped, "", true)
	w.handOff("sb-h", "n1")
	w.handOff("sb-failed", "n1")
	// A target's adoption of sb-failed failed: it took the lease and
	// released it again.
	own, err := w.st.AcquireOwnership(ctx, "sb-failed", "n3", sbLeaseTTL, w.c.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.st.ReleaseOwnership(ctx, "sb-failed", "n3", own.Epoch, w.c.Now()); err != nil {
		t.Fatal(err)
	}
	f := w.coordinator("n3", w.st, nil)
	var calls []finishCall
	w.takeBack(f, &calls, nil)

	w.lapse() // n1 silent: the source is gone
	res, err := f.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.Marked)
	slices.Sort(res.Adopted)
	if !slices.Equal(res.Marked, []string{"sb-failed", "sb-h"}) || !slices.Equal(res.Adopted, []string{"sb-failed", "sb-h"}) ||
		len(res.TakenBack)+len(res.Failed) != 0 || len(calls) != 0 {
		t.Fatalf("pass with the source lapsed: %+v, finish calls %+v", res, calls)
	}
	for id, epoch := range map[string]int64{"sb-h": 2, "sb-failed": 3} {
		own, err := w.st.GetOwnership(ctx, id)
		if err != nil || own.Node != "n2" || own.Epoch != epoch {
			t.Fatalf("lease of %s: %+v %v, want n2 at epoch %d", id, own, err, epoch)
		}
		sb := w.get(id)
		if _, ok := HandOffMarkOf(sb); ok {
			t.Fatalf("%s keeps its hand-over mark after its adoption", id)
		}
		if _, ok := LostMarkOf(sb); ok {
			t.Fatalf("%s keeps its lost mark after its adoption", id)
		}
		// Paused by the hand-over: adopted to run again.
		if sb.State != store.StatePaused {
			t.Fatalf("%s is %s, want the hand-over's state (paused) for the adoption to start it", id, sb.State)
		}
		if w.adoptCount(id) != 1 {
			t.Fatalf("%s adopted %d times", id, w.adoptCount(id))
		}
	}
	w.c.Add(10 * time.Second)
	w.heartbeat("n2")
	w.heartbeat("n3")
	if res, err := f.Pass(ctx); err != nil || len(res.Marked)+len(res.Adopted)+len(res.TakenBack) != 0 {
		t.Fatalf("later pass: %+v %v", res, err)
	}
}
