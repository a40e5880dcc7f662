package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// testQuotaRisesAdmitPendingAndExpire checks the QuotaAdmissionStore
// contract: an admitted rise is stored and shown to the next check of its
// tenant only, until it is deleted or expires; a refused check stores
// nothing and its error comes back as it is; bad input stores nothing.
func testQuotaRisesAdmitPendingAndExpire(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := at(0)
	rise := func(id, tenant string, exp time.Time) store.QuotaRise {
		return store.QuotaRise{ID: id, TenantID: tenant, Node: "n1", Running: 1, CPUs: 0.5, MemoryBytes: 1 << 30,
			DiskBytes: 2 << 30, Volumes: 1, Snapshots: 2, ExpiresAt: exp}
	}
	var seen []store.QuotaRise
	look := func(_ context.Context, p []store.QuotaRise) error { seen = p; return nil }

	noErr(t, s.AdmitQuotaRise(ctx, rise("r1", "acme", now.Add(time.Minute)), now, look), "admit r1")
	if len(seen) != 0 {
		t.Fatalf("first check saw %+v, want nothing pending", seen)
	}
	noErr(t, s.AdmitQuotaRise(ctx, rise("r2", "acme", now.Add(time.Second)), now, look), "admit r2")
	want := rise("r1", "acme", now.Add(time.Minute))
	if len(seen) != 1 || seen[0].ID != "r1" || seen[0].Node != "n1" || seen[0].CPUs != 0.5 || seen[0].MemoryBytes != want.MemoryBytes ||
		seen[0].DiskBytes != want.DiskBytes || seen[0].Volumes != 1 || seen[0].Snapshots != 2 || seen[0].Running != 1 ||
		!seen[0].ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("second check saw %+v, want r1 as stored", seen)
	}
	// Another tenant's rises never reach a check.
	noErr(t, s.AdmitQuotaRise(ctx, rise("o1", "other", now.Add(time.Minute)), now, look), "admit another tenant's")
	if len(seen) != 0 {
		t.Fatalf("other tenant's check saw %+v", seen)
	}
	// A refusal stores nothing and returns the check's error itself.
	refuse := errors.New("over the limit")
	if err := s.AdmitQuotaRise(ctx, rise("r3", "acme", now.Add(time.Minute)), now, func(context.Context, []store.QuotaRise) error { return refuse }); err != refuse {
		t.Fatalf("refused admission: %v, want the check's error", err)
	}
	// r2 expired at now+1s; r3 was never stored.
	noErr(t, s.AdmitQuotaRise(ctx, rise("r4", "acme", now.Add(time.Hour)), now.Add(2*time.Second), look), "admit r4")
	if len(seen) != 1 || seen[0].ID != "r1" {
		t.Fatalf("after r2 expired and r3 was refused, the check saw %+v, want r1", seen)
	}
	// A deleted rise stops counting; deleting it again is no error.
	noErr(t, s.DeleteQuotaRise(ctx, "r1"), "delete r1")
	noErr(t, s.DeleteQuotaRise(ctx, "r1"), "delete r1 again")
	noErr(t, s.AdmitQuotaRise(ctx, rise("r5", "acme", now.Add(time.Hour)), now.Add(2*time.Second), look), "admit r5")
	if len(seen) != 1 || seen[0].ID != "r4" {
		t.Fatalf("after r1's delete the check saw %+v, want r4", seen)
	}

	called := false
	mark := func(context.Context, []store.QuotaRise) error { called = true; return nil }
	if err := s.AdmitQuotaRise(ctx, rise("r4", "acme", now.Add(time.Hour)), now, mark); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("a stored id again: %v, want ErrConflict", err)
	}
	called = false
	for name, r := range map[string]store.QuotaRise{
		"no id":         rise("", "acme", now.Add(time.Hour)),
		"no tenant":     rise("x1", "", now.Add(time.Hour)),
		"no expiry":     rise("x2", "acme", time.Time{}),
		"negative":      {ID: "x3", TenantID: "acme", Running: -1, ExpiresAt: now.Add(time.Hour)},
		"NaN cpus":      {ID: "x4", TenantID: "acme", CPUs: math.NaN(), ExpiresAt: now.Add(time.Hour)},
		"infinite cpus": {ID: "x5", TenantID: "acme", CPUs: math.Inf(1), ExpiresAt: now.Add(time.Hour)},
	} {
		if err := s.AdmitQuotaRise(ctx, r, now, mark); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if called {
		t.Fatal("a check ran for bad input")
	}
	noErr(t, s.AdmitQuotaRise(ctx, rise("r6", "acme", now.Add(time.Hour)), now.Add(2*time.Second), look), "admit r6")
	if len(seen) != 2 || seen[0].ID != "r4" || seen[1].ID != "r5" {
		t.Fatalf("bad input stored something: the check saw %+v, want r4 and r5", seen)
	}
}

// testQuotaRisesRacingForTheLastSlotHaveOneWinner: callers racing to
// admit a rise whose check allows one pending rise in all: exactly one is
// admitted, every round.
func testQuotaRisesRacingForTheLastSlotHaveOneWinner(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := time.Now()
	const rounds, racers = 20, 8
	for round := range rounds {
		tenant := fmt.Sprintf("race%d", round)
		var won atomic.Int64
		var wg sync.WaitGroup
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := store.QuotaRise{ID: fmt.Sprintf("%s-%d", tenant, i), TenantID: tenant, Node: "n", Running: 1, ExpiresAt: now.Add(time.Hour)}
				err := s.AdmitQuotaRise(ctx, r, now, func(ctx context.Context, p []store.QuotaRise) error {
					// Read the store meanwhile, as the usage count does.
					if _, err := s.GetTenantQuota(ctx, store.DefaultTenant); err != nil {
						return err
					}
					if len(p) > 0 {
						return errs.ErrQuota
					}
					return nil
				})
				switch {
				case err == nil:
					won.Add(1)
				case !errors.Is(err, errs.ErrQuota):
					t.Errorf("racer %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		if n := won.Load(); n != 1 {
			t.Fatalf("round %d: %d racers admitted for one slot", round, n)
		}
	}
}

// testQuotaRisesOfANodeAreDeletedTogether: DeleteNodeQuotaRises removes
// every rise of one node, in every tenant, and no other node's.
func testQuotaRisesOfANodeAreDeletedTogether(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := at(0)
	for _, r := range []struct{ id, tenant, node string }{{"a1", "acme", "a"}, {"a2", "other", "a"}, {"b1", "acme", "b"}} {
		noErr(t, s.AdmitQuotaRise(ctx, store.QuotaRise{ID: r.id, TenantID: r.tenant, Node: r.node, Running: 1, ExpiresAt: now.Add(time.Hour)}, now,
			func(context.Context, []store.QuotaRise) error { return nil }), "admit "+r.id)
	}
	if err := s.DeleteNodeQuotaRises(ctx, ""); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("no node: %v, want ErrInvalid", err)
	}
	noErr(t, s.DeleteNodeQuotaRises(ctx, "a"), "delete node a's rises")
	for tenant, want := range map[string]string{"acme": "[b1]", "other": "[]"} {
		var ids []string
		noErr(t, s.AdmitQuotaRise(ctx, store.QuotaRise{ID: "probe-" + tenant, TenantID: tenant, Node: "c", ExpiresAt: now.Add(time.Hour)}, now,
			func(_ context.Context, p []store.QuotaRise) error {
				for _, r := range p {
					ids = append(ids, r.ID)
				}
				return nil
			}), "probe "+tenant)
		if got := fmt.Sprint(ids); got != want && !(want == "[]" && len(ids) == 0) {
			t.Fatalf("tenant %s's rises after node a's were deleted: %s, want %s", tenant, got, want)
		}
	}
}
