package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// clock is a test clock that moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// faultyOwners is the real store with RenewOwnership replaceable, to inject
// an unreachable store.
type faultyOwners struct {
	store.OwnershipStore
	mu        sync.Mutex
	renewFail error
}

func (f *faultyOwners) RenewOwnership(ctx context.Context, id, node string, epoch int64, ttl time.Duration, now time.Time) (store.Ownership, error) {
	f.mu.Lock()
	err := f.renewFail
	f.mu.Unlock()
	if err != nil {
		return store.Ownership{}, err
	}
	return f.OwnershipStore.RenewOwnership(ctx, id, node, epoch, ttl, now)
}

func newLeases(t *testing.T, st store.OwnershipStore, node string, c *clock, onLost func(string, error)) *Leases {
	t.Helper()
	l, err := NewLeases(LeaseOptions{Store: st, Node: node, TTL: 30 * time.Second, Clock: c.Now, OnLost: onLost})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func wantHeld(t *testing.T, l *Leases, id string, epoch int64) {
	t.Helper()
	got, ok := l.Held(id)
	if !ok || got != epoch {
		t.Fatalf("Held(%s) = %d, %v; want epoch %d", id, got, ok, epoch)
	}
}

func wantNotHeld(t *testing.T, l *Leases, id string) {
	t.Helper()
	if got, ok := l.Held(id); ok {
		t.Fatalf("Held(%s) = %d, true; want not held", id, got)
	}
}

func TestLeasesRenewKeepsASandboxAndTakeoverFencesTheOldOwner(t *testing.T) {
	ctx := t.Context()
	st := openStore(t)
	c := newClock()
	var lostMu sync.Mutex
	var lost []string
	a := newLeases(t, st, "node-a", c, func(id string, err error) {
		if !store.IsFenced(err) {
			t.Errorf("lost %s with %v, want a fenced error", id, err)
		}
		lostMu.Lock()
		lost = append(lost, id)
		lostMu.Unlock()
	})
	b := newLeases(t, st, "node-b", c, nil)

	o, err := a.Acquire(ctx, "sb-1")
	if err != nil || o.Epoch != 1 {
		t.Fatalf("acquire: %+v, %v", o, err)
	}
	wantHeld(t, a, "sb-1", 1)
	if _, err := b.Acquire(ctx, "sb-1"); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("node-b's acquire of a held sandbox: %v, want a conflict", err)
	}
	wantNotHeld(t, b, "sb-1")

	// Renewed every 10 s, the lease outlives its 30 s TTL many times.
	for range 9 {
		c.Add(10 * time.Second)
		if n := a.RenewAll(ctx); n != 0 {
			t.Fatalf("lost %d leases on a plain renew", n)
		}
		wantHeld(t, a, "sb-1", 1)
	}

	// The store write made under the lease's fence commits.
	sb, err := st.CreateSandbox(ctx, store.Sandbox{ID: "sb-1", TenantID: store.DefaultTenant, Name: "one", TemplateID: "host",
		State: store.StateCreating, Spec: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	fa, err := a.Fence(ctx, "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	sb.State = store.StateRunning
	if sb, err = st.UpdateSandbox(fa, sb); err != nil {
		t.Fatalf("fenced update by the owner: %v", err)
	}

	// Node-a stops renewing (it hangs, or is cut off): it stops counting
	// the lease as held Margin before the expiry, on its own clock.
	c.Add(26 * time.Second)
	wantHeld(t, a, "sb-1", 1)
	c.Add(time.Second)
	wantNotHeld(t, a, "sb-1")
	if _, err := a.Fence(ctx, "sb-1"); !store.IsFenced(err) {
		t.Fatalf("Fence of a lease within its margin: %v, want fenced", err)
	}
	if _, err := b.Acquire(ctx, "sb-1"); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("node-b's acquire before the expiry: %v, want a conflict", err)
	}
	c.Add(3 * time.Second)
	o, err = b.Acquire(ctx, "sb-1")
	if err != nil || o.Epoch != 2 {
		t.Fatalf("takeover after the expiry: %+v, %v; want epoch 2", o, err)
	}
	wantHeld(t, b, "sb-1", 2)

	// Node-a wakes up: its write under the old fence is refused, and its
	// next renew drops the lease and reports it lost.
	up := sb
	up.State = store.StateStopped
	if _, err := st.UpdateSandbox(fa, up); !store.IsFenced(err) {
		t.Fatalf("old owner's fenced update after takeover: %v, want fenced", err)
	}
	if n := a.RenewAll(ctx); n != 1 {
		t.Fatalf("RenewAll after takeover lost %d leases, want 1", n)
	}
	if len(lost) != 1 || lost[0] != "sb-1" || len(a.List()) != 0 {
		t.Fatalf("lost %v, still listed %v", lost, a.List())
	}
	wantNotHeld(t, a, "sb-1")
	if err := a.Release(ctx, "sb-1"); err != nil {
		t.Fatalf("release of a lost lease: %v", err)
	}
	if got, _ := st.GetOwnership(ctx, "sb-1"); got.Node != "node-b" || got.Epoch != 2 || !got.ValidAt(c.Now()) {
		t.Fatalf("lease after node-a's release of a lost lease %+v, want node-b's in force", got)
	}
	if cur, _ := st.GetSandbox(ctx, store.DefaultTenant, "sb-1"); cur.State != store.StateRunning || cur.Version != sb.Version {
		t.Fatalf("sandbox after the fenced-off write: %s v%d, want running v%d", cur.State, cur.Version, sb.Version)
	}
}

func TestLeasesStopActingTheMomentARenewFailsAndResumeIfItRecovers(t *testing.T) {
	ctx := t.Context()
	f := &faultyOwners{OwnershipStore: openStore(t)}
	c := newClock()
	lost := 0
	a := newLeases(t, f, "node-a", c, func(string, error) { lost++ })
	if _, err := a.Acquire(ctx, "sb-1"); err != nil {
		t.Fatal(err)
	}
	f.renewFail = fmt.Errorf("dial store: connection refused")
	c.Add(10 * time.Second)
	a.RenewAll(ctx)
	wantNotHeld(t, a, "sb-1")
	if _, err := a.Fence(ctx, "sb-1"); !store.IsFenced(err) {
		t.Fatalf("Fence while suspended: %v, want fenced", err)
	}

	f.renewFail = nil
	c.Add(10 * time.Second)
	if n := a.RenewAll(ctx); n != 0 {
		t.Fatalf("a recovered renew lost %d leases", n)
	}
	wantHeld(t, a, "sb-1", 1)

	// The store stays away past the expiry: the lease lapses (CheckLapse
	// reports it once, without a store), stays not held, and is not lost
	// while the store cannot say whether another node took it.
	f.renewFail = fmt.Errorf("dial store: connection refused")
	c.Add(10 * time.Second)
	a.RenewAll(ctx)
	if got := a.CheckLapse(); len(got) != 0 {
		t.Fatalf("CheckLapse before the margin: %v", got)
	}
	c.Add(25 * time.Second)
	if got := a.CheckLapse(); len(got) != 1 || got[0] != "sb-1" {
		t.Fatalf("CheckLapse past the expiry: %v, want sb-1", got)
	}
	if got := a.CheckLapse(); len(got) != 0 {
		t.Fatalf("CheckLapse reported a lapse twice: %v", got)
	}
	if n := a.RenewAll(ctx); n != 0 || lost != 0 {
		t.Fatalf("renew past the expiry with the store away lost %d (OnLost %d), want 0", n, lost)
	}
	wantNotHeld(t, a, "sb-1")
	// The store answers and nobody took the sandbox: regained, epoch + 1.
	f.renewFail = nil
	c.Add(10 * time.Second)
	if n := a.RenewAll(ctx); n != 0 || lost != 0 {
		t.Fatalf("regain lost %d (OnLost %d)", n, lost)
	}
	wantHeld(t, a, "sb-1", 2)
}

// TestALeaseTakenOverWhileTheNodeWasCutOffIsLostNotRegained: a node cut
// off from the store past its lease finds, back, another node's lease (in
// force or even lapsed again): it loses the sandbox, never regains it.
func TestALeaseTakenOverWhileTheNodeWasCutOffIsLostNotRegained(t *testing.T) {
	ctx := t.Context()
	st := openStore(t)
	f := &faultyOwners{OwnershipStore: st}
	c := newClock()
	var lost []string
	a := newLeases(t, f, "node-a", c, func(id string, _ error) { lost = append(lost, id) })
	b := newLeases(t, st, "node-b", c, nil)
	for _, id := range []string{"sb-1", "sb-2"} {
		if _, err := a.Acquire(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	f.renewFail = fmt.Errorf("dial store: i/o timeout")
	c.Add(31 * time.Second)
	a.CheckLapse()
	a.RenewAll(ctx)
	// b takes both; sb-2's lease then lapses again with b gone too.
	for _, id := range []string{"sb-1", "sb-2"} {
		if _, err := b.Acquire(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Release(ctx, "sb-2"); err != nil {
		t.Fatal(err)
	}
	f.renewFail = nil
	if n := a.RenewAll(ctx); n != 2 || len(lost) != 2 {
		t.Fatalf("back after a takeover: lost %d %v, want both", n, lost)
	}
	wantNotHeld(t, a, "sb-1")
	wantNotHeld(t, a, "sb-2")
	if got, _ := st.GetOwnership(ctx, "sb-1"); got.Node != "node-b" {
		t.Fatalf("sb-1's lease after a came back: %+v", got)
	}
	if got, _ := st.GetOwnership(ctx, "sb-2"); got.ValidAt(c.Now()) {
		t.Fatalf("a kept sb-2 after another node held it: %+v", got)
	}
}

func TestLeasesOfAFailedNodeAreExpiredTogetherAndTakenOver(t *testing.T) {
	ctx := t.Context()
	st := openStore(t)
	c := newClock()
	a := newLeases(t, st, "node-a", c, nil)
	b := newLeases(t, st, "node-b", c, nil)
	ids := []string{"sb-1", "sb-2", "sb-3"}
	for _, id := range ids {
		if _, err := a.Acquire(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// Failover: node-a's heartbeat lapsed, so the cluster expires its
	// leases at once and node-b restores its sandboxes.
	if n, err := st.ExpireNodeOwnerships(ctx, "node-a", c.Now()); err != nil || n != 3 {
		t.Fatalf("expire node-a: %d, %v", n, err)
	}
	for _, id := range ids {
		if o, err := b.Acquire(ctx, id); err != nil || o.Epoch != 2 {
			t.Fatalf("node-b takes %s: %+v, %v", id, o, err)
		}
	}
	// Node-a returns: one renew pass tells it that it lost them all.
	if n := a.RenewAll(ctx); n != 3 {
		t.Fatalf("returning node lost %d leases, want 3", n)
	}
	for _, id := range ids {
		wantNotHeld(t, a, id)
		wantHeld(t, b, id, 2)
	}
}

func TestLeasesRunRenewsOnItsTicker(t *testing.T) {
	st := openStore(t)
	c := newClock()
	l, err := NewLeases(LeaseOptions{Store: st, Node: "node-a", TTL: 30 * time.Second, RenewEvery: 5 * time.Millisecond, Clock: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	first, err := l.Acquire(t.Context(), "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(20 * time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		o, err := st.GetOwnership(t.Context(), "sb-1")
		if err != nil {
			t.Fatal(err)
		}
		if o.ExpiresAt.After(first.ExpiresAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Run did not renew the lease within 10 s (expires %s)", o.ExpiresAt)
		}
		time.Sleep(time.Millisecond)
	}
	wantHeld(t, l, "sb-1", 1)
}

func TestNewLeasesRejectsBadOptions(t *testing.T) {
	st := openStore(t)
	for _, o := range []LeaseOptions{
		{Node: "node-a"},
		{Store: st},
		{Store: st, Node: "node-a", TTL: 30 * time.Second, RenewEvery: 30 * time.Second},
	} {
		if _, err := NewLeases(o); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("NewLeases(%+v): %v, want invalid", o, err)
		}
	}
}

// TestWatchEndsWhenTheLeaseLapsesIsLostOrReleased: a watch of a held
// lease lasts while it holds and ends, naming the lease, when it lapses
// without a renew, when it is released, and at once when it is not held.
func TestWatchEndsWhenTheLeaseLapsesIsLostOrReleased(t *testing.T) {
	ctx := t.Context()
	st := openStore(t)
	c := newClock()
	l := newLeases(t, st, "node-a", c, nil)
	if _, err := l.Acquire(ctx, "job/x"); err != nil {
		t.Fatal(err)
	}
	w, stop := l.Watch(ctx, "job/x")
	defer stop()
	l.RenewAll(ctx)
	if w.Err() != nil {
		t.Fatalf("a renewed lease's watch ended: %v", context.Cause(w))
	}
	c.Add(28 * time.Second) // within the 3 s margin of the 30 s TTL
	l.CheckLapse()
	if cause := context.Cause(w); cause == nil || !strings.Contains(cause.Error(), "job/x") || !strings.Contains(cause.Error(), "lapsing") {
		t.Fatalf("watch after the lapse: %v", cause)
	}
	if _, err := l.Acquire(ctx, "job/y"); err != nil {
		t.Fatal(err)
	}
	wy, stopY := l.Watch(ctx, "job/y")
	defer stopY()
	if err := l.Release(ctx, "job/y"); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(wy); cause == nil || !strings.Contains(cause.Error(), "released") {
		t.Fatalf("watch after the release: %v", cause)
	}
	wz, _ := l.Watch(ctx, "job/z")
	if cause := context.Cause(wz); !errors.Is(cause, errs.ErrConflict) {
		t.Fatalf("watch of a lease not held: %v", cause)
	}
}
