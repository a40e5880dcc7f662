package tenancy

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/postgres"
	"github.com/stead-dev/stead/internal/store/postgres/pgtest"
)

// TestQuotaAdmissionHoldsAcrossNodes: two nodes' tenancy services on one
// real PostgreSQL store race, many times, for a tenant's last running
// slot (two racers on each node): exactly one is admitted each time, the
// others refused with a quota error. Once the winner's record is stored
// and its rise released, neither node admits another.
func TestQuotaAdmissionHoldsAcrossNodes(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Start(t)
	st, err := postgres.Open(ctx, srv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	a := New(Options{Store: st, Node: "a", Logger: log})
	if _, err := a.Bootstrap(ctx, nil); err != nil {
		t.Fatal(err)
	}
	b := New(Options{Store: st, Node: "b", Logger: log})
	if _, err := a.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetTenantQuotas(ctx, "acme", client.SetQuotasRequest{RunningSandboxes: qi(2)}); err != nil {
		t.Fatal(err)
	}
	putSandbox(t, a, "acme", "one", store.StateRunning, client.Limits{CPUs: 1, MemoryBytes: 1 << 30})
	one := Use{Running: 1, CPUs: 1, Memory: 1 << 30}

	// What an admission costs in a cluster, uncontended (logged).
	t0 := time.Now()
	const seq = 50
	for range seq {
		release, err := a.AdmitQuota(ctx, "acme", "start sandbox", one)
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	t.Logf("an admission and its release, uncontended, on PostgreSQL: %s", (time.Since(t0) / seq).Round(time.Microsecond))

	const rounds = 40
	t0 = time.Now()
	for round := range rounds {
		var won atomic.Int64
		var mu sync.Mutex
		var releases []func()
		var wg sync.WaitGroup
		for i, s := range []*Service{a, b, a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				release, err := s.AdmitQuota(ctx, "acme", "start sandbox", one)
				var qe *errs.QuotaError
				switch {
				case err == nil:
					won.Add(1)
					mu.Lock()
					releases = append(releases, release)
					mu.Unlock()
				case errors.As(err, &qe) && qe.Quota == errs.QuotaRunningSandboxes:
				default:
					t.Errorf("round %d racer %d: %v", round, i, err)
				}
			}()
		}
		wg.Wait()
		if n := won.Load(); n != 1 {
			t.Fatalf("round %d: %d admissions for the last slot across two nodes, want 1", round, n)
		}
		if round == rounds-1 {
			// The winner stores its record, then releases its rise.
			putSandbox(t, a, "acme", "two", store.StateRunning, client.Limits{CPUs: 1, MemoryBytes: 1 << 30})
		}
		for _, r := range releases {
			r()
		}
	}
	t.Logf("%d rounds of 4 racers on 2 nodes: %s a round", rounds, (time.Since(t0) / rounds).Round(time.Microsecond))
	for _, s := range []*Service{a, b} {
		var qe *errs.QuotaError
		if _, err := s.AdmitQuota(ctx, "acme", "start sandbox", one); !errors.As(err, &qe) {
			t.Fatalf("node %s admitted past the limit once the winner's record was stored: %v", s.opts.Node, err)
		}
	}
	// A rise released leaves no row behind.
	if err := st.AdmitQuotaRise(ctx, store.QuotaRise{ID: "probe", TenantID: "acme", ExpiresAt: a.now().Add(DefaultRiseTTL)}, a.now(),
		func(_ context.Context, p []store.QuotaRise) error {
			if len(p) != 0 {
				t.Errorf("rises left after their release: %+v", p)
			}
			return errs.ErrQuota
		}); !errors.Is(err, errs.ErrQuota) {
		t.Fatal(err)
	}
}

// TestARestartedNodeForgetsItsUnreleasedRises: a rise node a admitted and
// never released (a died mid-create) keeps the tenant's last slot from
// node b; once a starts again (ForgetNodeRises), the slot is free.
func TestARestartedNodeForgetsItsUnreleasedRises(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Start(t)
	st, err := postgres.Open(ctx, srv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	a := New(Options{Store: st, Node: "a", Logger: log})
	if _, err := a.Bootstrap(ctx, nil); err != nil {
		t.Fatal(err)
	}
	b := New(Options{Store: st, Node: "b", Logger: log})
	if _, err := a.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetTenantQuotas(ctx, "acme", client.SetQuotasRequest{RunningSandboxes: qi(1)}); err != nil {
		t.Fatal(err)
	}
	one := Use{Running: 1}
	if _, err := a.AdmitQuota(ctx, "acme", "start sandbox", one); err != nil { // never released: a dies
		t.Fatal(err)
	}
	var qe *errs.QuotaError
	if _, err := b.AdmitQuota(ctx, "acme", "start sandbox", one); !errors.As(err, &qe) {
		t.Fatalf("b admitted while a's rise was pending: %v", err)
	}
	if err := b.ForgetNodeRises(ctx); err != nil { // b's own: none
		t.Fatal(err)
	}
	if _, err := b.AdmitQuota(ctx, "acme", "start sandbox", one); !errors.As(err, &qe) {
		t.Fatalf("b forgot a's rise: %v", err)
	}
	a2 := New(Options{Store: st, Node: "a", Logger: log}) // a starts again
	if err := a2.ForgetNodeRises(ctx); err != nil {
		t.Fatal(err)
	}
	release, err := b.AdmitQuota(ctx, "acme", "start sandbox", one)
	if err != nil {
		t.Fatalf("the slot of a's rise from before its restart: %v", err)
	}
	release()
}
