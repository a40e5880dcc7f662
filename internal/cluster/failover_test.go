package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
)

// failoverWorld is a store with nodes and sandboxes, a test clock, and a
// record of the adoptions asked for.
type failoverWorld struct {
	t  *testing.T
	st store.Store
	c  *clock

	mu     sync.Mutex
	adopts map[string][]string // sandbox → the coordinators that asked
	evs    []events.Event
	audits []audit.Entry
}

const sbLeaseTTL = 35 * time.Second // shorter than lapse(): a lapsed node's leases lapse with it

func newFailoverWorld(t *testing.T) *failoverWorld {
	t.Helper()
	st := openStore(t)
	w := &failoverWorld{t: t, st: st, c: newClock(), adopts: map[string][]string{}}
	for _, n := range []string{"n1", "n2", "n3"} {
		w.heartbeat(n)
	}
	return w
}

func (w *failoverWorld) heartbeat(node string) {
	w.t.Helper()
	if _, err := w.st.HeartbeatNode(w.t.Context(), store.Node{Name: node, Address: "127.0.0.1:1", StartedAt: w.c.Now(), HeartbeatAt: w.c.Now()}); err != nil {
		w.t.Fatal(err)
	}
}

// sandbox stores a sandbox owned by node in state, with policy ("" for the
// default) and a push when pushed.
func (w *failoverWorld) sandbox(id, node string, state store.SandboxState, policy string, pushed bool) {
	w.t.Helper()
	ctx := w.t.Context()
	spec := map[string]any{"instance_type": "small"}
	if policy != "" {
		spec["failover"] = policy
	}
	if pushed {
		at := w.c.Now().Add(-time.Minute)
		spec["backup"] = map[string]any{"last_push": at, "last_push_id": fmt.Sprintf("%064x", len(id))}
	}
	b, _ := json.Marshal(spec)
	now := w.c.Now()
	if _, err := w.st.CreateSandbox(ctx, store.Sandbox{ID: id, TenantID: store.DefaultTenant, Name: id, TemplateID: "host",
		State: state, Spec: b, CreatedAt: now, UpdatedAt: now}); err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.st.AcquireOwnership(ctx, id, node, sbLeaseTTL, now); err != nil {
		w.t.Fatal(err)
	}
}

func (w *failoverWorld) get(id string) store.Sandbox {
	w.t.Helper()
	sb, err := w.st.GetSandbox(w.t.Context(), "", id)
	if err != nil {
		w.t.Fatal(err)
	}
	return sb
}

func (w *failoverWorld) adoptCount(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.adopts[id])
}

// coordinator returns node's coordinator. Its Adopt plays the target
// node: it takes the lease (as sandbox.Service.Adopt does), runs during
// (when set) and writes the record back in the state the mark names.
func (w *failoverWorld) coordinator(node string, st store.Store, during func(id string)) *Failover {
	w.t.Helper()
	f, err := NewFailover(FailoverOptions{Store: st, Node: node, Grace: 30 * time.Second, JobTTL: 30 * time.Second,
		Every: 10 * time.Second, Clock: w.c.Now,
		Pick: func(ctx context.Context, sb store.Sandbox, exclude string) (store.Node, error) {
			ns, err := w.st.ListNodes(ctx)
			if err != nil {
				return store.Node{}, err
			}
			for _, n := range ns {
				if n.Name != exclude && n.Name != "n1" && w.c.Now().Sub(n.HeartbeatAt) <= 30*time.Second {
					return n, nil
				}
			}
			return store.Node{}, fmt.Errorf("no node: %w", errs.ErrConflict)
		},
		Adopt: func(ctx context.Context, target store.Node, id string) error {
			if _, ok := store.FenceFrom(ctx); ok {
				return errors.New("adopt called with the coordinator's fence")
			}
			w.mu.Lock()
			w.adopts[id] = append(w.adopts[id], node)
			w.mu.Unlock()
			own, err := w.st.AcquireOwnership(ctx, id, target.Name, sbLeaseTTL, w.c.Now())
			if err != nil {
				return err
			}
			if during != nil {
				during(id)
			}
			sb := w.get(id)
			mark, _ := LostMarkOf(sb)
			if sb.Spec, err = ClearLostMark(sb.Spec); err != nil {
				return err
			}
			if sb.Spec, err = ClearHandOffMark(sb.Spec); err != nil {
				return err
			}
			sb.State = mark.State
			fenced := store.WithFence(ctx, store.Fence{SandboxID: id, Node: target.Name, Epoch: own.Epoch, At: w.c.Now()})
			_, err = w.st.UpdateSandbox(fenced, sb)
			return err
		},
		Events: events.SinkFunc(func(_ context.Context, e events.Event) {
			w.mu.Lock()
			w.evs = append(w.evs, e)
			w.mu.Unlock()
		}),
		Audit: recorderFunc(func(e audit.Entry) {
			w.mu.Lock()
			w.audits = append(w.audits, e)
			w.mu.Unlock()
		}),
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return f
}

type recorderFunc func(audit.Entry)

func (f recorderFunc) Record(_ context.Context, e audit.Entry) error { f(e); return nil }

// lapse moves the clock past the grace with n2 and n3 heartbeating and n1
// silent.
func (w *failoverWorld) lapse() {
	w.c.Add(40 * time.Second)
	w.heartbeat("n2")
	w.heartbeat("n3")
}

func TestFailoverMarksALapsedNodesSandboxesLostAndAdoptsEachRestorableOnce(t *testing.T) {
	w := newFailoverWorld(t)
	ctx := t.Context()
	w.sandbox("sb-run", "n1", store.StateRunning, "", true)
	w.sandbox("sb-stopped", "n1", store.StateStopped, "restore", true)
	w.sandbox("sb-none", "n1", store.StateRunning, "none", true)
	w.sandbox("sb-nopush", "n1", store.StateRunning, "", false)
	w.sandbox("sb-deleted", "n1", store.StateDeleted, "", true)
	w.sandbox("sb-live", "n2", store.StateRunning, "", true)
	f := w.coordinator("n3", w.st, nil)

	// Nobody lapsed yet: nothing happens.
	res, err := f.Pass(ctx)
	if err != nil || !res.Leader || len(res.Lapsed)+len(res.Marked)+len(res.Adopted) != 0 {
		t.Fatalf("pass with every node alive: %+v %v", res, err)
	}

	w.lapse()
	res, err = f.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.Marked)
	slices.Sort(res.Adopted)
	if !slices.Equal(res.Lapsed, []string{"n1"}) || !slices.Equal(res.Marked, []string{"sb-none", "sb-nopush", "sb-run", "sb-stopped"}) ||
		!slices.Equal(res.Adopted, []string{"sb-run", "sb-stopped"}) || len(res.Failed) != 0 {
		t.Fatalf("pass after n1 lapsed: %+v", res)
	}
	for id, want := range map[string]store.SandboxState{"sb-run": store.StateRunning, "sb-stopped": store.StateStopped,
		"sb-none": store.StateLost, "sb-nopush": store.StateLost, "sb-deleted": store.StateDeleted, "sb-live": store.StateRunning} {
		if got := w.get(id); got.State != want {
			t.Errorf("%s is %s, want %s", id, got.State, want)
		}
	}
	lost := w.get("sb-none")
	if mark, ok := LostMarkOf(lost); !ok || mark.Node != "n1" || mark.State != store.StateRunning || mark.Epoch != 1 || lost.StopReason != StopReasonNodeLost {
		t.Fatalf("lost mark of sb-none: %+v %v, reason %q", mark, ok, lost.StopReason)
	}
	for _, id := range []string{"sb-run", "sb-stopped"} {
		own, err := w.st.GetOwnership(ctx, id)
		if err != nil || own.Node != "n2" || own.Epoch != 2 {
			t.Fatalf("lease of adopted %s: %+v %v", id, own, err)
		}
	}
	// The live node's sandbox and lease are untouched.
	if own, _ := w.st.GetOwnership(ctx, "sb-live"); own.Node != "n2" || own.Epoch != 1 {
		t.Fatalf("live node's lease: %+v", own)
	}

	// Later passes change nothing: each restorable sandbox was adopted once.
	for range 3 {
		w.c.Add(10 * time.Second)
		w.heartbeat("n2")
		w.heartbeat("n3")
		res, err := f.Pass(ctx)
		if err != nil || len(res.Marked)+len(res.Adopted)+len(res.Failed) != 0 {
			t.Fatalf("later pass: %+v %v", res, err)
		}
	}
	for id, want := range map[string]int{"sb-run": 1, "sb-stopped": 1, "sb-none": 0, "sb-nopush": 0, "sb-deleted": 0, "sb-live": 0} {
		if got := w.adoptCount(id); got != want {
			t.Errorf("%s adopted %d times, want %d", id, got, want)
		}
	}
	w.mu.Lock()
	var lostEvents, lostAudits int
	for _, e := range w.evs {
		if e.Type == events.SandboxLost {
			lostEvents++
		}
	}
	for _, a := range w.audits {
		if a.Action == "sandbox.lost" {
			lostAudits++
		}
	}
	w.mu.Unlock()
	if lostEvents != 4 || lostAudits != 4 {
		t.Fatalf("%d sandbox.lost events and %d audit entries, want 4 each", lostEvents, lostAudits)
	}
}

func TestFailoverRetriesAFailedAdoptionAfterABackoffAndRecordsIt(t *testing.T) {
	w := newFailoverWorld(t)
	ctx := t.Context()
	w.sandbox("sb-a", "n1", store.StateRunning, "", true)
	fails := 2
	f := w.coordinator("n3", w.st, nil)
	adopt := f.o.Adopt
	f.o.Adopt = func(ctx context.Context, n store.Node, id string) error {
		if fails > 0 {
			fails--
			return fmt.Errorf("target unreachable: %w", errs.ErrConflict)
		}
		return adopt(ctx, n, id)
	}
	w.lapse()
	res, err := f.Pass(ctx)
	if err != nil || !slices.Equal(res.Failed, []string{"sb-a"}) {
		t.Fatalf("first pass: %+v %v", res, err)
	}
	// Within the backoff (10 s, then 20 s) the sandbox waits.
	res, _ = f.Pass(ctx)
	if !slices.Equal(res.Waiting, []string{"sb-a"}) {
		t.Fatalf("pass within the backoff: %+v", res)
	}
	w.c.Add(10 * time.Second)
	w.heartbeat("n2")
	if res, _ = f.Pass(ctx); !slices.Equal(res.Failed, []string{"sb-a"}) {
		t.Fatalf("second try: %+v", res)
	}
	w.c.Add(10 * time.Second)
	w.heartbeat("n2")
	if res, _ = f.Pass(ctx); !slices.Equal(res.Waiting, []string{"sb-a"}) {
		t.Fatalf("the backoff doubled: %+v", res)
	}
	w.c.Add(10 * time.Second)
	w.heartbeat("n2")
	if res, _ = f.Pass(ctx); !slices.Equal(res.Adopted, []string{"sb-a"}) {
		t.Fatalf("third try: %+v", res)
	}
	var failed int
	for _, e := range w.evs {
		if e.Type == events.FailoverFailed && e.Sandbox == "sb-a" && e.Data["error"] != "" {
			failed++
		}
	}
	if failed != 2 {
		t.Fatalf("%d failover.failed events, want 2", failed)
	}
}

func TestTwoFailoverCoordinatorsNeverActAtOnce(t *testing.T) {
	w := newFailoverWorld(t)
	ctx := t.Context()
	for i := range 4 {
		w.sandbox(fmt.Sprintf("sb-%d", i), "n1", store.StateRunning, "", true)
	}
	var a, b *Failover
	stalled := false
	// a stalls in its first adoption past its job lease; b takes the job
	// over meanwhile and does the rest.
	a = w.coordinator("n2", w.st, func(id string) {
		if stalled {
			return
		}
		stalled = true
		w.c.Add(31 * time.Second)
		w.heartbeat("n2")
		w.heartbeat("n3")
		res, err := b.Pass(ctx)
		if err != nil || !res.Leader || len(res.Adopted) != 3 {
			t.Errorf("b's pass while a stalls: %+v %v", res, err)
		}
	})
	b = w.coordinator("n3", w.st, nil)

	// While a holds the job lease, b's passes do nothing, even at once.
	if res, err := a.Pass(ctx); err != nil || !res.Leader {
		t.Fatalf("a's first pass: %+v %v", res, err)
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res, err := b.Pass(ctx); err != nil || res.Leader {
				t.Errorf("b's pass while a leads: %+v %v", res, err)
			}
		}()
	}
	wg.Wait()

	w.lapse()
	res, err := a.Pass(ctx)
	if err != nil || !slices.Equal(res.Adopted, []string{"sb-0"}) {
		t.Fatalf("a's pass, stalled in its first adoption: %+v %v; want sb-0 adopted and the rest left to b", res, err)
	}
	if res, err := a.Pass(ctx); err != nil || res.Leader {
		t.Fatalf("a's pass after b took the job: %+v %v", res, err)
	}
	for i := range 4 {
		id := fmt.Sprintf("sb-%d", i)
		w.mu.Lock()
		by := w.adopts[id]
		w.mu.Unlock()
		if len(by) != 1 {
			t.Errorf("%s adopted by %v, want exactly one coordinator", id, by)
		}
		if got := w.get(id); got.State != store.StateRunning {
			t.Errorf("%s is %s", id, got.State)
		}
	}
	// A stale coordinator's write is fenced: a mark under a's old epoch
	// commits nothing.
	old := store.WithFence(ctx, store.Fence{SandboxID: FailoverJobKey, Node: "n2", Epoch: 2, At: w.c.Now()})
	if _, err := w.st.ExpireNodeOwnerships(old, "n3", w.c.Now()); !store.IsFenced(err) {
		t.Fatalf("a write under a's lost job lease: %v, want fenced", err)
	}
}

// failingStore fails the nth sandbox update (a coordinator dying half-way
// through a pass).
type failingStore struct {
	store.Store
	mu      sync.Mutex
	updates int
	failAt  int
}

func (f *failingStore) UpdateSandbox(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	f.mu.Lock()
	f.updates++
	n := f.updates
	f.mu.Unlock()
	if n == f.failAt {
		return store.Sandbox{}, errors.New("the coordinator died here")
	}
	return f.Store.UpdateSandbox(ctx, sb)
}

func TestFailoverPassThatDiesHalfWayIsFinishedByTheNext(t *testing.T) {
	w := newFailoverWorld(t)
	ctx := t.Context()
	for i := range 3 {
		w.sandbox(fmt.Sprintf("sb-%d", i), "n1", store.StateRunning, "", true)
	}
	fs := &failingStore{Store: w.st, failAt: 2}
	dying := w.coordinator("n3", fs, nil)
	w.lapse()
	res, err := dying.Pass(ctx)
	if err == nil || len(res.Marked) != 1 || len(res.Adopted) != 0 {
		t.Fatalf("the dying pass: %+v %v", res, err)
	}
	// Another node's coordinator takes the job once the dead one's lease
	// lapsed, and finishes.
	w.c.Add(31 * time.Second)
	w.heartbeat("n2")
	next := w.coordinator("n2", w.st, nil)
	res, err = next.Pass(ctx)
	if err != nil || len(res.Marked) != 2 || len(res.Adopted) != 3 {
		t.Fatalf("the next pass: %+v %v", res, err)
	}
	for i := range 3 {
		id := fmt.Sprintf("sb-%d", i)
		if n := w.adoptCount(id); n != 1 {
			t.Errorf("%s adopted %d times", id, n)
		}
		if sb := w.get(id); sb.State != store.StateRunning {
			t.Errorf("%s is %s", id, sb.State)
		}
	}
}

// TestFailoverWaitsForANodeWithRoomAndPrefersTheTemplate: the target of an
// adoption is picked by placement's rule (room on the live nodes, never the
// lost one). With no room anywhere the sandbox stays lost with one
// failover.no_room event, no backoff, and is adopted at the first pass
// after room appears, on the node that has its template.
func TestFailoverWaitsForANodeWithRoomAndPrefersTheTemplate(t *testing.T) {
	w := newFailoverWorld(t)
	ctx := t.Context()
	if err := w.st.CreateTemplate(ctx, store.Template{ID: "alpine", TenantID: store.DefaultTenant, Kind: "oci", Source: "alpine", CreatedAt: w.c.Now()}); err != nil {
		t.Fatal(err)
	}
	w.sandbox("sb-a", "n1", store.StateRunning, "", true)
	sb := w.get("sb-a")
	sb.TemplateID = "alpine"
	sb.Spec = []byte(`{"instance_type":"small","limits":{"cpus":2,"memory_bytes":4294967296,"disk_bytes":1073741824},` +
		`"backup":{"last_push_id":"` + fmt.Sprintf("%064x", 4) + `"}}`)
	if _, err := w.st.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	r, err := NewRouter(RouterOptions{Store: w.st, Node: "n3", Secret: testSecret, Grace: 30 * time.Second, Clock: w.c.Now,
		InstanceTypes: testTypes, DefaultInstanceType: "small"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	f := w.coordinator("n3", w.st, nil)
	var targets []string
	adopt := f.o.Adopt
	f.o.Pick = r.PickMove
	f.o.Adopt = func(ctx context.Context, n store.Node, id string) error {
		targets = append(targets, n.Name)
		return adopt(ctx, n, id)
	}
	beat := func(name string, cpus float64, tmpls ...string) {
		t.Helper()
		if _, err := w.st.HeartbeatNode(ctx, store.Node{Name: name, Address: "127.0.0.1:1", CPUs: cpus, MemoryBytes: 64 << 30,
			PoolFreeBytes: 100 << 30, Templates: tmpls, StartedAt: w.c.Now(), HeartbeatAt: w.c.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// n1 lapses; n2 and n3 have 0.25 cpus each (x4: 1 cpu), the sandbox
	// needs 2.
	w.c.Add(40 * time.Second)
	beat("n2", 0.25)
	beat("n3", 0.25, "alpine")
	noRoom := func() int {
		n := 0
		for _, e := range w.evs {
			if e.Type == events.FailoverNoRoom && e.Sandbox == "sb-a" && e.Data["reason"] != "" {
				n++
			}
		}
		return n
	}
	for i := range 3 {
		res, err := f.Pass(ctx)
		if err != nil || !slices.Equal(res.NoRoom, []string{"sb-a"}) || len(res.Failed) != 0 || len(res.Waiting) != 0 {
			t.Fatalf("pass %d without room: %+v %v", i, res, err)
		}
		if st := w.get("sb-a").State; st != store.StateLost {
			t.Fatalf("pass %d: state %s, want lost", i, st)
		}
	}
	if n := noRoom(); n != 1 {
		t.Fatalf("%d failover.no_room events over three passes, want 1 (once per reason)", n)
	}
	if len(targets) != 0 {
		t.Fatalf("adoptions asked without room: %v", targets)
	}
	// Room on both; n3 has the template: the very next pass adopts there.
	w.c.Add(5 * time.Second)
	beat("n2", 8)
	beat("n3", 8, "alpine")
	res, err := f.Pass(ctx)
	if err != nil || !slices.Equal(res.Adopted, []string{"sb-a"}) || !slices.Equal(targets, []string{"n3"}) {
		t.Fatalf("pass with room: %+v %v, targets %v", res, err, targets)
	}
}
