package sandbox

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/budget"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/metering"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/testutil"
)

// budgetNode is one node of TestBudgetChecksRunOncePerCluster: its real
// service, leases, router, node-call server and budget enforcer, wired as
// the daemon wires them.
type budgetNode struct {
	name   string
	svc    *Service
	leases *cluster.Leases
	enf    *budget.Enforcer
	ticks  atomic.Int64 // ticks this node led
	stop   context.CancelFunc
}

// TestBudgetChecksRunOncePerCluster: two nodes on a real PostgreSQL store
// each run the budget enforcer, but only the node holding the budget job
// lease checks; a budget over a sandbox of the other node pauses it there
// (the action is relayed to its owner by a signed node call). When the
// checking node dies (its leases stop being renewed), the other takes the
// checks over within a lease TTL.
func TestBudgetChecksRunOncePerCluster(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	st := pgStore(t)
	log := slog.New(slog.DiscardHandler)
	secret := []byte("0123456789abcdef0123456789abcdef-budget-test")
	const ttl = 3 * time.Second
	prices := metering.DefaultPrices()
	prices.ComputePerHour["micro"] = 36000 // $10 a second: a cent is spent at once

	newNode := func(name string) *budgetNode {
		n := &budgetNode{name: name}
		var err error
		n.leases, err = cluster.NewLeases(cluster.LeaseOptions{Store: st, Node: name, TTL: ttl, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		meter := metering.New(metering.Options{Store: st, Prices: &prices, Logger: log})
		if err := meter.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		n.svc = newNodeService(t, events.ObserveStore(st, meter, nil), n.leases)
		router, err := cluster.NewRouter(cluster.RouterOptions{Store: st, Node: name, Secret: secret, Grace: time.Minute,
			InstanceTypes: InstanceTypes(), DefaultInstanceType: DefaultInstanceType, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		cluster.HandleBudget(mux, n.svc)
		hs := httptest.NewServer(router.Auth().RequireNode(mux))
		t.Cleanup(hs.Close)
		now := time.Now()
		if _, err := st.HeartbeatNode(ctx, store.Node{Name: name, Address: hs.Listener.Addr().String(), HeartbeatAt: now, StartedAt: now}); err != nil {
			t.Fatal(err)
		}
		job := cluster.NewJob(n.leases, cluster.BudgetJobKey, log)
		n.enf = budget.New(budget.Options{Store: st, Spend: meter, Sandboxes: router.RelayBudget(n.svc), Interval: 50 * time.Millisecond, Logger: log,
			Leader: func(ctx context.Context) (context.Context, bool) {
				f, ok := job.Lead(ctx)
				if ok {
					n.ticks.Add(1)
				}
				return f, ok
			}})
		n.svc.SetBudgets(n.enf)
		rctx, cancel := context.WithCancel(ctx)
		n.stop = cancel
		t.Cleanup(cancel)
		go n.leases.Run(rctx)
		return n
	}
	n1, n2 := newNode("n1"), newNode("n2")
	tn := store.DefaultTenant
	sb, err := n2.svc.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "on-n2", InstanceType: "micro"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n2.leases.Held(sb.ID); !ok {
		t.Fatal("n2 does not hold its sandbox's lease")
	}

	// n1 starts checking first and takes the job; n2 then stands by.
	rctx1, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	go n1.enf.Run(rctx1)
	waitWithin(t, 5*time.Second, "n1 leads the budget checks", func() bool { return n1.ticks.Load() > 0 })
	rctx2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	go n2.enf.Run(rctx2)

	if _, err := n1.svc.CreateBudget(ctx, tn, client.CreateBudgetRequest{Sandbox: sb.ID, Period: "month", Cap: "0.01", Action: "pause"}); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 10*time.Second, "the budget pauses n2's sandbox", func() bool {
		got, err := n2.svc.GetSandbox(ctx, tn, sb.ID)
		return err == nil && got.State == "paused" && got.StopReason == budget.StopReason
	})
	time.Sleep(300 * time.Millisecond) // several more ticks
	if n := n2.ticks.Load(); n != 0 {
		t.Fatalf("n2 checked budgets %d times while n1 held the job", n)
	}
	if _, ok := n2.leases.Held(sb.ID); !ok {
		t.Fatal("the pause moved the sandbox off n2")
	}

	// n1 dies: no more renews, no more ticks. n2 takes over within a TTL
	// (and room for the lease renewals, the ticks and a loaded machine:
	// one bound, the wait's).
	died := time.Now()
	n1.stop()
	cancel1()
	waitWithin(t, ttl+3*time.Second, "n2 takes the budget checks over within a lease TTL", func() bool { return n2.ticks.Load() > 0 })
	t.Logf("n2 took the budget checks over %s after n1 died (lease TTL %s)", time.Since(died).Round(time.Millisecond), ttl)
	// n2 checks now: the budget still holds its sandbox paused (a resume
	// is refused while the cap is reached).
	if got, err := n2.svc.ResumeSandbox(ctx, tn, sb.ID); err == nil {
		t.Fatalf("a resume past the cap was allowed: %+v", got)
	}
}

// waitWithin polls cond every 20 ms until it holds, failing after d.
func waitWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
