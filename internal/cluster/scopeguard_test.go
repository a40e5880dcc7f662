package cluster

import (
	"context"
	"errors"
	"testing"
	"time"
)

// held reports whether the goroutine's hold came within d.
func held(ch <-chan func(), d time.Duration) (func(), bool) {
	select {
	case rel := <-ch:
		return rel, true
	case <-time.After(d):
		return nil, false
	}
}

func guardPair(t *testing.T) (a, b *ScopeGuard) {
	t.Helper()
	st := openStore(t)
	c := newClock()
	la := newLeases(t, st, "node-a", c, nil)
	lb := newLeases(t, st, "node-b", c, nil)
	return NewScopeGuard(st, la, 10*time.Millisecond, nil), NewScopeGuard(st, lb, 10*time.Millisecond, nil)
}

// TestScopeGuardPruneWaitsForOtherNodesPushesAndPushesWaitForIt: a prune
// on one node starts only once the other node's pushes into the scope
// ended, and a push waits while another node prunes; a node never waits
// for itself; other scopes are not held up.
func TestScopeGuardPruneWaitsForOtherNodesPushesAndPushesWaitForIt(t *testing.T) {
	ctx := t.Context()
	a, b := guardPair(t)

	// b pushes twice into t-acme; a's prune waits for both to end.
	relB1, err := b.Shared(ctx, "t-acme")
	if err != nil {
		t.Fatal(err)
	}
	relB2, err := b.Shared(ctx, "t-acme")
	if err != nil {
		t.Fatal(err)
	}
	prune := make(chan func(), 1)
	go func() {
		_, rel, err := a.Exclusive(ctx, "t-acme")
		if err != nil {
			t.Error(err)
		}
		prune <- rel
	}()
	if _, ok := held(prune, 150*time.Millisecond); ok {
		t.Fatal("a's prune began while b pushed into the scope")
	}
	// Another scope is free meanwhile, on either node.
	if _, rel, err := a.Exclusive(ctx, "t-other"); err != nil {
		t.Fatal(err)
	} else {
		rel()
	}
	relB1()
	if _, ok := held(prune, 150*time.Millisecond); ok {
		t.Fatal("a's prune began while b's second push still ran")
	}
	relB2()
	relA, ok := held(prune, 2*time.Second)
	if !ok {
		t.Fatal("a's prune never began after b's pushes ended")
	}

	// While a prunes, b's push waits; a's own push does not.
	push := make(chan func(), 1)
	go func() {
		rel, err := b.Shared(ctx, "t-acme")
		if err != nil {
			t.Error(err)
		}
		push <- rel
	}()
	if _, ok := held(push, 150*time.Millisecond); ok {
		t.Fatal("b pushed while a pruned the scope")
	}
	own, err := a.Shared(ctx, "t-acme")
	if err != nil {
		t.Fatal(err)
	}
	own()
	// A second prune elsewhere waits too.
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, _, err := b.Exclusive(sctx, "t-acme"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b's prune while a prunes: %v, want to wait", err)
	}
	relA()
	rel, ok := held(push, 2*time.Second)
	if !ok {
		t.Fatal("b's push never began after a's prune ended")
	}
	rel()
}
