package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/blobstore/local"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// onDelete wraps a blob store to run a hook after each Delete: the fault
// injected here is another node taking the scope over mid-prune.
type onDelete struct {
	blobstore.BlobStore
	mu      sync.Mutex
	deleted []string
	hook    func(n int)
}

func (s *onDelete) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	s.deleted = append(s.deleted, key)
	n, hook := len(s.deleted), s.hook
	s.mu.Unlock()
	err := s.BlobStore.Delete(ctx, key)
	if hook != nil {
		hook(n)
	}
	return err
}

// TestPruneStopsWhenItsScopeLeaseIsTakenOver: node-a prunes a scope
// holding its lease; after its first deletion the lease lapses and node-b
// takes the scope (node-a learns it at its next renew). node-a's prune
// deletes nothing more and fails naming the lost lease; the repository
// checks clean, and node-b's own prune then finishes the job.
func TestPruneStopsWhenItsScopeLeaseIsTakenOver(t *testing.T) {
	ctx := t.Context()
	st := openStore(t)
	c := newClock()
	la := newLeases(t, st, "node-a", c, nil)
	lb := newLeases(t, st, "node-b", c, nil)
	inner, err := local.New(filepath.Join(t.TempDir(), "repo"))
	if err != nil {
		t.Fatal(err)
	}
	bs := &onDelete{BlobStore: inner}
	master, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Init(ctx, bs, master); err != nil {
		t.Fatal(err)
	}
	open := func(l *Leases) *repo.Scope {
		r, err := repo.Open(ctx, bs, master, repo.Options{PackSize: 64 << 10, Guard: NewScopeGuard(st, l, 10*time.Millisecond, nil)})
		if err != nil {
			t.Fatal(err)
		}
		sc, err := r.Scope(ctx, "t-acme", true)
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	a := open(la)
	// Four pushes of different data (several packs each), three forgotten:
	// a prune has index files and packs to delete.
	var ids []seal.ID
	for i := range 4 {
		src := t.TempDir()
		data := make([]byte, 256<<10)
		for j := range data {
			data[j] = byte((j*7 + i*131 + j/977) ^ (j >> 5) ^ i)
		}
		if err := os.WriteFile(filepath.Join(src, "f"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		m, _, err := a.Push(ctx, src, repo.PushOptions{Source: fmt.Sprintf("sandbox/sb-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	if err := a.Forget(ctx, ids[:3]...); err != nil {
		t.Fatal(err)
	}
	bs.mu.Lock()
	bs.deleted = nil
	bs.mu.Unlock()
	if plan, err := a.Prune(ctx, repo.PruneOptions{DryRun: true}); err != nil || plan.PacksDeleted < 2 {
		t.Fatalf("the prune would delete %d packs (%v): the test needs several", plan.PacksDeleted, err)
	}

	bs.hook = func(n int) {
		if n != 1 {
			return
		}
		c.Add(31 * time.Second) // node-a's lease lapses (TTL 30 s)...
		if _, err := lb.Acquire(ctx, ScopeKey("t-acme")); err != nil {
			t.Errorf("node-b takes the scope: %v", err)
		}
		la.RenewAll(ctx) // ...and node-a learns it lost the scope
	}
	_, err = a.Prune(ctx, repo.PruneOptions{})
	if err == nil || !errors.Is(err, errs.ErrConflict) || !strings.Contains(err.Error(), "scope/t-acme") || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("prune after losing its scope lease: %v, want an error naming the lost lease", err)
	}
	bs.mu.Lock()
	deleted := append([]string(nil), bs.deleted...)
	bs.hook = nil
	bs.mu.Unlock()
	if len(deleted) != 1 || !strings.Contains(err.Error(), "stopped before deleting") {
		t.Fatalf("node-a deleted %d objects (%v), want only the one before it learnt of the takeover", len(deleted), deleted)
	}
	t.Logf("stopped: %v", err)

	b := open(lb)
	check := func(when string) {
		t.Helper()
		res, err := b.Check(ctx, repo.CheckOptions{ReadData: true})
		if err != nil || len(res.Errors) != 0 {
			t.Fatalf("check %s: %v, errors %v", when, err, res.Errors)
		}
	}
	check("after the stopped prune")
	st2, err := b.Prune(ctx, repo.PruneOptions{})
	if err != nil || st2.PacksDeleted == 0 {
		t.Fatalf("node-b's prune: %+v, %v", st2, err)
	}
	check("after node-b's prune")
	if _, err := b.Manifest(ctx, ids[3]); err != nil {
		t.Fatalf("the kept snapshot: %v", err)
	}
}

// TestForgetHoldsTheScopeAloneAndStopsWhenItsLeaseGoes: forget takes the
// scope's lease as a prune does (another node's push holds it up), and
// when that lease is taken over after its first deletion it deletes no
// more manifests and names the lost lease.
func TestForgetHoldsTheScopeAloneAndStopsWhenItsLeaseGoes(t *testing.T) {
	ctx := t.Context()
	st := openStore(t)
	c := newClock()
	la := newLeases(t, st, "node-a", c, nil)
	lb := newLeases(t, st, "node-b", c, nil)
	inner, err := local.New(filepath.Join(t.TempDir(), "repo"))
	if err != nil {
		t.Fatal(err)
	}
	bs := &onDelete{BlobStore: inner}
	master, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Init(ctx, bs, master); err != nil {
		t.Fatal(err)
	}
	r, err := repo.Open(ctx, bs, master, repo.Options{Guard: NewScopeGuard(st, la, 10*time.Millisecond, nil)})
	if err != nil {
		t.Fatal(err)
	}
	a, err := r.Scope(ctx, "t-acme", true)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	var ids []seal.ID
	for i := range 3 {
		if err := os.WriteFile(filepath.Join(src, "f"), []byte(fmt.Sprint("version ", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		m, _, err := a.Push(ctx, src, repo.PushOptions{Source: "sandbox/sb-1"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	// node-b pushes into the scope: node-a's forget waits for it.
	gb := NewScopeGuard(st, lb, 10*time.Millisecond, nil)
	relB, err := gb.Shared(ctx, "t-acme")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := a.Forget(wctx, ids[0]); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("forget while node-b pushes: %v, want it to wait", err)
	}
	relB()
	bs.hook = func(n int) {
		if n != 1 {
			return
		}
		c.Add(31 * time.Second)
		if _, err := lb.Acquire(ctx, ScopeKey("t-acme")); err != nil {
			t.Errorf("node-b takes the scope: %v", err)
		}
		la.RenewAll(ctx)
	}
	err = a.Forget(ctx, ids...)
	if err == nil || !strings.Contains(err.Error(), "scope/t-acme") || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("forget after losing its scope lease: %v, want an error naming the lost lease", err)
	}
	bs.mu.Lock()
	n := len(bs.deleted)
	bs.mu.Unlock()
	if n != 1 {
		t.Fatalf("forget deleted %d manifests, want 1", n)
	}
	left, err := a.Snapshots(ctx)
	if err != nil || len(left) != 2 {
		t.Fatalf("manifests left: %d, %v", len(left), err)
	}
}
