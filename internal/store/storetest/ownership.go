package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const ownerTTL = 30 * time.Second

func wantFenced(t *testing.T, err error, what string) {
	t.Helper()
	var f *store.FencedError
	if !errors.As(err, &f) || !errors.Is(err, errs.ErrConflict) || !store.IsFenced(err) {
		t.Fatalf("%s: got error %v, want a *store.FencedError wrapping errs.ErrConflict", what, err)
	}
}

func wantOwner(t *testing.T, what string, got store.Ownership, sandbox, node string, epoch int64, acquired, expires time.Time) {
	t.Helper()
	if got.SandboxID != sandbox || got.Node != node || got.Epoch != epoch {
		t.Fatalf("%s: lease %+v, want sandbox %s node %s epoch %d", what, got, sandbox, node, epoch)
	}
	checkTime(t, what+": acquired_at", got.AcquiredAt, acquired)
	checkTime(t, what+": expires_at", got.ExpiresAt, expires)
}

func getOwner(t *testing.T, s store.Store, id string) store.Ownership {
	t.Helper()
	o, err := s.GetOwnership(t.Context(), id)
	noErr(t, err, "get lease of "+id)
	return o
}

// testOwnershipAcquireRenewTakeover walks one sandbox's lease through its
// life: a first acquire is epoch 1, re-acquiring one's own lease keeps the
// epoch, another node is refused while it is in force, a lapsed lease is
// taken over with the next epoch, and the old owner's renew and release are
// then fenced; a release keeps the epoch, so the next acquire bumps it.
func testOwnershipAcquireRenewTakeover(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := at(0)
	a, err := s.AcquireOwnership(ctx, "sb-1", "node-a", ownerTTL, t0)
	noErr(t, err, "first acquire")
	wantOwner(t, "first acquire", a, "sb-1", "node-a", 1, t0, t0.Add(ownerTTL))
	if a.ExpiresAt.Location() != time.UTC {
		t.Fatalf("expires_at returned in %v, want UTC", a.ExpiresAt.Location())
	}
	wantOwner(t, "get after acquire", getOwner(t, s, "sb-1"), "sb-1", "node-a", 1, t0, t0.Add(ownerTTL))

	a, err = s.AcquireOwnership(ctx, "sb-1", "node-a", ownerTTL, t0.Add(10*time.Second))
	noErr(t, err, "acquire own lease again")
	wantOwner(t, "acquire own lease again", a, "sb-1", "node-a", 1, t0, t0.Add(10*time.Second+ownerTTL))

	_, err = s.AcquireOwnership(ctx, "sb-1", "node-b", ownerTTL, t0.Add(20*time.Second))
	wantErr(t, err, errs.ErrConflict, "acquire by node-b while node-a's lease is in force")
	wantOwner(t, "after refused acquire", getOwner(t, s, "sb-1"), "sb-1", "node-a", 1, t0, t0.Add(10*time.Second+ownerTTL))

	t1 := t0.Add(30 * time.Second)
	a, err = s.RenewOwnership(ctx, "sb-1", "node-a", 1, ownerTTL, t1)
	noErr(t, err, "renew in force")
	wantOwner(t, "renew", a, "sb-1", "node-a", 1, t0, t1.Add(ownerTTL))
	_, err = s.RenewOwnership(ctx, "sb-1", "node-a", 2, ownerTTL, t1)
	wantFenced(t, err, "renew with an epoch that is not the lease's")
	_, err = s.RenewOwnership(ctx, "sb-1", "node-b", 1, ownerTTL, t1)
	wantFenced(t, err, "renew by a node that does not hold the lease")
	_, err = s.RenewOwnership(ctx, "sb-other", "node-a", 1, ownerTTL, t1)
	wantFenced(t, err, "renew of a sandbox without a lease")

	// The lease lapses at t1+ttl: a renew at that instant is too late.
	lapse := t1.Add(ownerTTL)
	_, err = s.RenewOwnership(ctx, "sb-1", "node-a", 1, ownerTTL, lapse)
	wantFenced(t, err, "renew at the expiry")
	wantOwner(t, "after a refused renew", getOwner(t, s, "sb-1"), "sb-1", "node-a", 1, t0, lapse)

	t2 := lapse.Add(time.Second)
	b, err := s.AcquireOwnership(ctx, "sb-1", "node-b", ownerTTL, t2)
	noErr(t, err, "takeover after expiry")
	wantOwner(t, "takeover", b, "sb-1", "node-b", 2, t2, t2.Add(ownerTTL))
	_, err = s.RenewOwnership(ctx, "sb-1", "node-a", 1, ownerTTL, t2)
	wantFenced(t, err, "old owner's renew after takeover")
	var f *store.FencedError
	if errors.As(err, &f) && (f.Current.Node != "node-b" || f.Current.Epoch != 2) {
		t.Fatalf("fenced error names the lease %+v, want node-b's epoch 2", f.Current)
	}
	err = s.ReleaseOwnership(ctx, "sb-1", "node-a", 1, t2)
	wantFenced(t, err, "old owner's release after takeover")
	wantOwner(t, "after refused release", getOwner(t, s, "sb-1"), "sb-1", "node-b", 2, t2, t2.Add(ownerTTL))

	t3 := t2.Add(time.Second)
	noErr(t, s.ReleaseOwnership(ctx, "sb-1", "node-b", 2, t3), "release")
	wantOwner(t, "released", getOwner(t, s, "sb-1"), "sb-1", "node-b", 2, t2, t3)
	noErr(t, s.ReleaseOwnership(ctx, "sb-1", "node-b", 2, t3.Add(time.Second)), "release again (idempotent)")
	wantOwner(t, "released twice", getOwner(t, s, "sb-1"), "sb-1", "node-b", 2, t2, t3)
	_, err = s.RenewOwnership(ctx, "sb-1", "node-b", 2, ownerTTL, t3)
	wantFenced(t, err, "renew after release")

	b, err = s.AcquireOwnership(ctx, "sb-1", "node-b", ownerTTL, t3)
	noErr(t, err, "acquire after release, same node")
	wantOwner(t, "re-acquire after release", b, "sb-1", "node-b", 3, t3, t3.Add(ownerTTL))
}

// testOwnershipRacingAcquiresHaveOneWinner: nodes racing for one sandbox at
// one instant get exactly one winner; the losers see errs.ErrConflict.
func testOwnershipRacingAcquiresHaveOneWinner(t *testing.T, s store.Store) {
	ctx := t.Context()
	const nodes = 8
	for round, now := range []time.Time{at(0), at(100)} {
		// Round 0 races for a fresh sandbox; round 1 for the same one
		// after its lease lapsed, so the winner takes epoch 2.
		var wg sync.WaitGroup
		won := make([]store.Ownership, nodes)
		errsOut := make([]error, nodes)
		for i := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				won[i], errsOut[i] = s.AcquireOwnership(ctx, "sb-race", fmt.Sprintf("node-%d-%d", round, i), ownerTTL, now)
			}()
		}
		wg.Wait()
		var winner store.Ownership
		wins := 0
		for i, err := range errsOut {
			if err == nil {
				wins++
				winner = won[i]
				continue
			}
			wantErr(t, err, errs.ErrConflict, fmt.Sprintf("round %d: losing acquire of node %d", round, i))
		}
		if wins != 1 {
			t.Fatalf("round %d: %d nodes acquired the lease, want exactly 1", round, wins)
		}
		if winner.Epoch != int64(round+1) {
			t.Fatalf("round %d: winner's epoch %d, want %d", round, winner.Epoch, round+1)
		}
		wantOwner(t, "stored winner", getOwner(t, s, "sb-race"), "sb-race", winner.Node, winner.Epoch, now, now.Add(ownerTTL))
	}
}

// testOwnershipFencedWrites: a write made under store.WithFence commits
// while the fence's lease is in force and is refused, changing nothing,
// once another node took the sandbox over (or the lease lapsed).
func testOwnershipFencedWrites(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := time.Now().UTC()
	sb := createSandbox(t, s, newSandbox("sb-f", store.DefaultTenant, "fenced", at(0)))
	_, err := s.AcquireOwnership(ctx, "sb-f", "node-a", time.Hour, t0)
	noErr(t, err, "acquire")

	fa := store.WithFence(ctx, store.Fence{SandboxID: "sb-f", Node: "node-a", Epoch: 1, At: t0.Add(time.Minute)})
	sb.State = store.StateRunning
	sb, err = s.UpdateSandbox(fa, sb)
	noErr(t, err, "fenced update by the owner")
	if sb.Version != 2 {
		t.Fatalf("version after the owner's fenced update %d, want 2", sb.Version)
	}
	if f, ok := store.FenceFrom(fa); !ok || f.Epoch != 1 {
		t.Fatalf("FenceFrom = %+v, %v", f, ok)
	}

	// A fence whose epoch or node is wrong, or whose lease lapsed at the
	// fence's time, commits nothing.
	for _, bad := range []store.Fence{
		{SandboxID: "sb-f", Node: "node-a", Epoch: 2, At: t0},
		{SandboxID: "sb-f", Node: "node-b", Epoch: 1, At: t0},
		{SandboxID: "sb-f", Node: "node-a", Epoch: 1, At: t0.Add(time.Hour)},
		{SandboxID: "sb-none", Node: "node-a", Epoch: 1, At: t0},
	} {
		up := sb
		up.State = store.StateStopped
		_, err := s.UpdateSandbox(store.WithFence(ctx, bad), up)
		wantFenced(t, err, fmt.Sprintf("update under fence %+v", bad))
	}
	checkSandbox(t, getSandbox(t, s, store.DefaultTenant, "sb-f"), sb)

	// Node-b takes the lapsed lease over: node-a's writes, a
	// multi-statement one and a single-statement one, are refused.
	t1 := t0.Add(time.Hour + time.Second)
	_, err = s.AcquireOwnership(ctx, "sb-f", "node-b", time.Hour, t1)
	noErr(t, err, "takeover")
	stale := store.WithFence(ctx, store.Fence{SandboxID: "sb-f", Node: "node-a", Epoch: 1, At: t0.Add(time.Minute)})
	up := sb
	up.State = store.StateStopped
	_, err = s.UpdateSandbox(stale, up)
	wantFenced(t, err, "old owner's fenced update after the takeover")
	wantFenced(t, s.DeleteSandbox(stale, store.DefaultTenant, "sb-f"), "old owner's fenced delete after the takeover")
	_, err = s.PutCheckpoint(stale, store.CheckpointWrite{CheckpointKey: store.CheckpointKey{TenantID: store.DefaultTenant,
		SandboxID: "sb-f", Agent: "a", Name: "n"}, IfVersion: store.AnyVersion, Body: []byte(`{"x":1}`), CreatedAt: at(1)})
	wantFenced(t, err, "old owner's fenced checkpoint put after the takeover")
	checkSandbox(t, getSandbox(t, s, store.DefaultTenant, "sb-f"), sb)
	if cps, err := s.ListCheckpoints(ctx, store.DefaultTenant, "sb-f"); err != nil || len(cps) != 0 {
		t.Fatalf("checkpoints after a fenced put: %v, %v", cps, err)
	}

	fb := store.WithFence(ctx, store.Fence{SandboxID: "sb-f", Node: "node-b", Epoch: 2, At: t1})
	_, err = s.UpdateSandbox(fb, up)
	noErr(t, err, "new owner's fenced update")
	noErr(t, s.DeleteSandbox(fb, store.DefaultTenant, "sb-f"), "new owner's fenced delete")
	_, err = s.GetSandbox(ctx, store.DefaultTenant, "sb-f")
	wantErr(t, err, errs.ErrNotFound, "get after the new owner's delete")
}

// testOwnershipExpireNodeTogether: expiring a node's leases ends all of
// them at once and no other node's; the node's renews are then fenced and
// other nodes take its sandboxes with the next epoch.
func testOwnershipExpireNodeTogether(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := at(0)
	for _, id := range []string{"sb-c", "sb-a", "sb-b"} {
		_, err := s.AcquireOwnership(ctx, id, "node-a", ownerTTL, t0)
		noErr(t, err, "acquire "+id)
	}
	_, err := s.AcquireOwnership(ctx, "sb-x", "node-b", ownerTTL, t0)
	noErr(t, err, "acquire sb-x")
	// A lease of node-a that already lapsed is not counted again.
	_, err = s.AcquireOwnership(ctx, "sb-old", "node-a", time.Second, t0)
	noErr(t, err, "acquire sb-old")

	list, err := s.ListOwnerships(ctx, "node-a")
	noErr(t, err, "list node-a")
	var ids []string
	for _, o := range list {
		if o.Node != "node-a" {
			t.Fatalf("list of node-a holds %+v", o)
		}
		ids = append(ids, o.SandboxID)
	}
	wantIDs(t, "node-a's leases", ids, []string{"sb-a", "sb-b", "sb-c", "sb-old"})
	all, err := s.ListOwnerships(ctx, "")
	noErr(t, err, "list all")
	if len(all) != 5 || all[4].SandboxID != "sb-x" {
		t.Fatalf("every lease: %+v", all)
	}

	t1 := t0.Add(5 * time.Second)
	n, err := s.ExpireNodeOwnerships(ctx, "node-a", t1)
	noErr(t, err, "expire node-a")
	if n != 3 {
		t.Fatalf("expired %d leases of node-a, want 3", n)
	}
	for _, id := range []string{"sb-a", "sb-b", "sb-c"} {
		wantOwner(t, "expired "+id, getOwner(t, s, id), id, "node-a", 1, t0, t1)
		_, err := s.RenewOwnership(ctx, id, "node-a", 1, ownerTTL, t1)
		wantFenced(t, err, "node-a's renew of "+id+" after expiry")
		c, err := s.AcquireOwnership(ctx, id, "node-c", ownerTTL, t1)
		noErr(t, err, "node-c takes "+id)
		wantOwner(t, "node-c's "+id, c, id, "node-c", 2, t1, t1.Add(ownerTTL))
	}
	wantOwner(t, "node-b's lease", getOwner(t, s, "sb-x"), "sb-x", "node-b", 1, t0, t0.Add(ownerTTL))
	n, err = s.ExpireNodeOwnerships(ctx, "node-a", t1)
	noErr(t, err, "expire node-a again")
	if n != 0 {
		t.Fatalf("second expiry ended %d leases, want 0", n)
	}
	_, err = s.ExpireNodeOwnerships(ctx, "", t1)
	wantErr(t, err, errs.ErrInvalid, "expire of an empty node name")
}

// testOwnershipRejectsBadInput: bad arguments are errs.ErrInvalid and store
// nothing; unknown leases are not found; no leases list empty.
func testOwnershipRejectsBadInput(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, c := range []struct {
		id, node string
		ttl      time.Duration
	}{{"", "node-a", ownerTTL}, {"sb-1", "", ownerTTL}, {"sb-1", "node-a", 0}, {"sb-1", "node-a", -time.Second}} {
		_, err := s.AcquireOwnership(ctx, c.id, c.node, c.ttl, at(0))
		wantErr(t, err, errs.ErrInvalid, fmt.Sprintf("acquire %+v", c))
		_, err = s.RenewOwnership(ctx, c.id, c.node, 1, c.ttl, at(0))
		wantErr(t, err, errs.ErrInvalid, fmt.Sprintf("renew %+v", c))
	}
	_, err := s.AcquireOwnership(ctx, "sb-1", "node-a", ownerTTL, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
	wantErr(t, err, errs.ErrInvalid, "acquire at a time out of range")
	_, err = s.GetOwnership(ctx, "sb-1")
	wantErr(t, err, errs.ErrNotFound, "get after refused acquires")
	list, err := s.ListOwnerships(ctx, "")
	noErr(t, err, "list")
	if list == nil {
		list = []store.Ownership{}
	}
	if len(list) != 0 {
		t.Fatalf("leases after refused acquires: %+v", list)
	}
}

// testOwnershipFencedWritesRacingATakeover: node-a writes a sandbox under
// its fence in a loop while node-b expires node-a's leases, takes the
// sandbox over and writes it under its own fence. Every node-a write that
// starts after the takeover is fenced, and none lands after node-b's write:
// the check and the write are one transaction.
func testOwnershipFencedWritesRacingATakeover(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb-r", store.DefaultTenant, "race", at(0)))
	_, err := s.AcquireOwnership(ctx, "sb-r", "node-a", time.Hour, time.Now())
	noErr(t, err, "node-a acquires")

	write := func(node string, epoch int64, reason string) error {
		cur, err := s.GetSandbox(ctx, store.DefaultTenant, "sb-r")
		if err != nil {
			return err
		}
		cur.StopReason = reason
		fctx := store.WithFence(ctx, store.Fence{SandboxID: "sb-r", Node: node, Epoch: epoch, At: time.Now()})
		_, err = s.UpdateSandbox(fctx, cur)
		return err
	}

	var (
		mu        sync.Mutex
		takenOver bool
		aWins     int
		lateWins  int
		lateTries int
	)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			mu.Lock()
			after := takenOver
			mu.Unlock()
			err := write("node-a", 1, fmt.Sprintf("a-%d", i))
			mu.Lock()
			switch {
			case err == nil && after:
				lateWins++
			case err == nil:
				aWins++
			case after && !store.IsFenced(err):
				mu.Unlock()
				done <- fmt.Errorf("node-a's write after the takeover: %v, want fenced", err)
				return
			case after:
				lateTries++
			case !errors.Is(err, errs.ErrConflict):
				mu.Unlock()
				done <- fmt.Errorf("node-a's write before the takeover: %v", err)
				return
			}
			mu.Unlock()
		}
	}()

	// Let node-a land some writes, then take the sandbox over.
	for {
		cur := getSandbox(t, s, store.DefaultTenant, "sb-r")
		if cur.Version >= 5 {
			break
		}
	}
	takeAt := time.Now()
	_, err = s.ExpireNodeOwnerships(ctx, "node-a", takeAt)
	noErr(t, err, "expire node-a")
	_, err = s.AcquireOwnership(ctx, "sb-r", "node-b", time.Hour, takeAt)
	noErr(t, err, "node-b takes over")
	mu.Lock()
	takenOver = true
	mu.Unlock()
	for {
		err := write("node-b", 2, "b")
		if err == nil {
			break
		}
		wantErr(t, err, errs.ErrConflict, "node-b's write (a version race with node-a is all it may lose)")
		if store.IsFenced(err) {
			t.Fatalf("node-b's write fenced: %v", err)
		}
	}
	for {
		cur := getSandbox(t, s, store.DefaultTenant, "sb-r")
		if cur.StopReason != "b" {
			t.Fatalf("a node-a write (%q) landed after node-b's", cur.StopReason)
		}
		mu.Lock()
		enough := lateTries >= 20
		mu.Unlock()
		if enough {
			break
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if aWins == 0 || lateWins != 0 {
		t.Fatalf("node-a landed %d writes before and %d after the takeover; want some, then none", aWins, lateWins)
	}
	if cur := getSandbox(t, s, store.DefaultTenant, "sb-r"); cur.StopReason != "b" {
		t.Fatalf("final stop reason %q, want node-b's", cur.StopReason)
	}
}
