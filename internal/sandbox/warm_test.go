package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/pool"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/store"
)

// runWarm starts the warm pool of s with specs and waits until want
// sandboxes are ready; the pool drains when the test ends.
func runWarm(t *testing.T, s *Service, want int, specs ...WarmSpec) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.RunWarm(ctx, specs); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the warm pool to fill", func() bool { return s.WarmStats().Ready == want })
}

// warmIDs returns the ids of the warm sandboxes held.
func (s *Service) warmIDs() []string {
	s.warm.mu.Lock()
	defer s.warm.mu.Unlock()
	var ids []string
	for _, l := range s.warm.ready {
		ids = append(ids, l...)
	}
	return ids
}

// checkInvisible fails unless no tenant's list, get or quota usage shows
// any of ids; running is the number of each tenant's real running
// sandboxes.
func checkInvisible(t *testing.T, s *Service, ids []string, running map[string]int64) {
	t.Helper()
	ctx := context.Background()
	all, err := s.st.ListSandboxes(ctx, store.SandboxFilter{IncludeDeleted: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range all {
		if slices.Contains(ids, sb.ID) {
			t.Fatalf("warm sandbox %s is in the store under tenant %s", sb.ID, sb.TenantID)
		}
	}
	tenants, err := s.st.ListTenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range tenants {
		list, err := s.ListSandboxes(ctx, tn.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range list {
			if slices.Contains(ids, sb.ID) {
				t.Fatalf("warm sandbox %s listed for tenant %s", sb.ID, tn.ID)
			}
		}
		for _, id := range ids {
			if _, err := s.GetSandbox(ctx, tn.ID, id); !errors.Is(err, errs.ErrNotFound) {
				t.Fatalf("get warm sandbox %s as tenant %s: %v", id, tn.ID, err)
			}
		}
		use, err := s.quotaUsage(ctx, tn.ID)
		if err != nil {
			t.Fatal(err)
		}
		if use.running != running[tn.ID] {
			t.Fatalf("tenant %s is charged for warm sandboxes: %+v", tn.ID, use)
		}
	}
}

func TestWarmCreateTakesAPooledSandboxAndRefills(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := s.template(ctx, tn, "host"); err != nil {
		t.Fatal(err)
	}
	runWarm(t, s, 2, WarmSpec{Template: "host", Size: 2})
	warm := s.warmIDs()
	checkInvisible(t, s, warm, nil)
	// Each was warmed up (one exec) before it was offered.
	if n := s.warm.warmedUp.Load(); n != 2 {
		t.Fatalf("%d of 2 warm sandboxes were warmed up", n)
	}

	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "quick", Env: map[string]string{"GREETING": "hello"},
		Labels: map[string]string{"team": "a"}, Network: &client.NetworkPolicy{Internet: new(false)}})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.WarmStats(); st.Taken != 1 {
		t.Fatalf("the create did not take a warm sandbox: %+v", st)
	}
	if !slices.Contains(warm, sb.ID) || sb.Name != "quick" || sb.State != "running" || sb.Labels["team"] != "a" {
		t.Fatalf("created %+v; warm were %v", sb, warm)
	}
	if _, err := os.Stat(filepath.Join(s.opts.WarmDir, sb.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the taken sandbox is still marked warm (a restart would remove it): %v", err)
	}
	got, err := s.GetSandbox(ctx, tn, "quick")
	if err != nil || got.ID != sb.ID {
		t.Fatalf("get by name: %+v %v", got, err)
	}
	res, err := s.Exec(ctx, tn, "quick", client.ExecRequest{Command: []string{"sh", "-c", "echo $GREETING; echo $STEAD_SANDBOX"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "hello\n"+sb.ID+"\n" {
		t.Fatalf("exec in a taken sandbox printed %q", res.Stdout)
	}
	// The request's own variable wins over the sandbox's.
	res, err = s.Exec(ctx, tn, "quick", client.ExecRequest{Command: []string{"sh", "-c", "echo $GREETING"}, Env: map[string]string{"GREETING": "bye"}}, nil)
	if err != nil || string(res.Stdout) != "bye\n" {
		t.Fatalf("exec env override: %q %v", res.Stdout, err)
	}
	var sp spec
	if rec, err := s.get(ctx, tn, sb.ID); err != nil {
		t.Fatal(err)
	} else if sp, err = decodeSpec(rec); err != nil {
		t.Fatal(err)
	}
	if sp.Network == nil || sp.Network.Internet == nil || *sp.Network.Internet {
		t.Fatalf("network policy not kept: %+v", sp.Network)
	}
	if use, _ := s.quotaUsage(ctx, tn); use.running != 1 {
		t.Fatalf("the taken sandbox is not counted: %+v", use)
	}

	waitFor(t, "the pool to refill", func() bool { st := s.WarmStats(); return st.Ready == 2 && st.Made == 3 })
	checkInvisible(t, s, s.warmIDs(), map[string]int64{store.DefaultTenant: 1})

	// A file left by one taker is not seen by the next.
	s.testWrite(t, sb.ID, "/workspace/secret", "tenant a's")
	next, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if s.WarmStats().Taken != 2 || next.Name != next.ID {
		t.Fatalf("second create: %+v %+v", next, s.WarmStats())
	}
	res, err = s.Exec(ctx, tn, next.ID, client.ExecRequest{Command: []string{"sh", "-c", "ls /workspace; echo ${GREETING:-unset}"}}, nil)
	if err != nil || strings.Contains(string(res.Stdout), "secret") || !strings.HasSuffix(string(res.Stdout), "unset\n") {
		t.Fatalf("second taker sees %q %v", res.Stdout, err)
	}

	// A taken name is refused and the warm sandbox stays in the pool.
	waitFor(t, "the pool to refill", func() bool { return s.WarmStats().Ready == 2 })
	if _, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "quick"}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("create with a taken name: %v", err)
	}
	if st := s.WarmStats(); st.Ready != 2 || st.Taken != 2 {
		t.Fatalf("after a refused create: %+v", st)
	}
}

func TestWarmPoolNeverServesSnapshotsForksOrBootTimeNeeds(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := s.template(ctx, tn, "host"); err != nil {
		t.Fatal(err)
	}
	runWarm(t, s, 1, WarmSpec{Template: "host", Size: 1})
	// Creates that need something at boot, or another size, go cold.
	for _, req := range []client.CreateSandboxRequest{
		{Name: "stopped", NoStart: true},
		{Name: "bigger", InstanceType: "large"},
		{Name: "disk", DiskBytes: 2 << 30},
		{Name: "svc", Service: &client.Service{Command: []string{"sleep", "1000"}}},
	} {
		if _, err := s.CreateSandbox(ctx, tn, req); err != nil {
			t.Fatalf("create %s: %v", req.Name, err)
		}
		if st := s.WarmStats(); st.Taken != 0 {
			t.Fatalf("create %s took a warm sandbox", req.Name)
		}
	}
	snap, err := s.CreateSnapshot(ctx, tn, "stopped", client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fork(ctx, tn, snap.ID, client.ForkRequest{Name: "forked"}); err != nil {
		t.Fatal(err)
	}
	if st := s.WarmStats(); st.Taken != 0 || st.Ready != 1 {
		t.Fatalf("a fork took a warm sandbox: %+v", st)
	}
	if _, err := s.Fork(ctx, tn, snap.ID, client.ForkRequest{Name: "forked-stopped", NoStart: true}); err != nil {
		t.Fatal(err)
	}
	if st := s.WarmStats(); st.Taken != 0 || st.Ready != 1 {
		t.Fatalf("a fork took a warm sandbox: %+v", st)
	}
}

// TestWarmSandboxesOfADeadDaemonAreCleaned: a daemon that dies holding
// warm sandboxes leaves containers and datasets without records; the next
// one removes them and shows none.
func TestWarmSandboxesOfADeadDaemonAreCleaned(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	tn := store.DefaultTenant
	tmpl, err := s.template(ctx, tn, "host")
	if err != nil {
		t.Fatal(err)
	}
	kept, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	// A sandbox dataset the store does not know and no mark names (as
	// after a lost or replaced metadata store) is never taken for a warm
	// leftover: it stays.
	stray := newID()
	if err := s.pool.Clone(ctx, templateDataset(tn, tmpl.ID), datasetName(stray), pool.CloneOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.pool.Delete(context.Background(), datasetName(stray)) })
	// The first daemon makes two warm sandboxes and dies without draining
	// (its pool state is simply forgotten).
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.RunWarm(wctx, []WarmSpec{{Template: "host", Size: 2}}); close(done) }()
	waitFor(t, "the warm pool to fill", func() bool { return s.WarmStats().Ready == 2 })
	warm := s.warmIDs()
	s.warm.mu.Lock()
	s.warm.specs = nil
	s.warm.ready = nil
	s.warm.mu.Unlock()
	cancel()
	<-done

	s2 := New(s.opts)
	if err := s2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	runWarm(t, s2, 1, WarmSpec{Template: "host", Size: 1})
	ids, err := s2.pool.List(ctx, pool.KindSandbox)
	if err != nil {
		t.Fatal(err)
	}
	live, err := s2.rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range warm {
		if slices.Contains(ids, id) || slices.Contains(live, id) {
			t.Fatalf("warm sandbox %s of the dead daemon leaked (datasets %v, runtime %v)", id, ids, live)
		}
	}
	if !slices.Contains(live, kept.ID) || !slices.Contains(ids, kept.ID) {
		t.Fatalf("the real sandbox was lost: datasets %v, runtime %v", ids, live)
	}
	if !slices.Contains(ids, stray) {
		t.Fatalf("an unmarked dataset without a record (%s) was removed: datasets %v", stray, ids)
	}
	if marks, err := os.ReadDir(s.opts.WarmDir); err != nil || len(marks) != 1 {
		t.Fatalf("warm marks after the restart: %v %v (want only the new pool's one)", marks, err)
	}
	checkInvisible(t, s2, append(warm, s2.warmIDs()...), map[string]int64{store.DefaultTenant: 1})
	if got, err := s2.GetSandbox(ctx, tn, "kept"); err != nil || got.State != "running" {
		t.Fatalf("kept sandbox after restart: %+v %v", got, err)
	}
}

func TestParseWarmSpec(t *testing.T) {
	for in, want := range map[string]WarmSpec{
		"host=4":        {Tenant: store.DefaultTenant, Template: "host", Size: 4},
		"acme/python=0": {Tenant: "acme", Template: "python", Size: 0},
	} {
		if got, err := ParseWarmSpec(in); err != nil || got != want {
			t.Errorf("ParseWarmSpec(%q) = %+v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "host", "host=", "host=-1", "host=x", "=3", "/host=1", "host=1001", "a b=1"} {
		if _, err := ParseWarmSpec(in); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("ParseWarmSpec(%q): %v, want invalid", in, err)
		}
	}
}

// TestWarmPoolOfATenantServesThatTenantOnly: a pool of one tenant's
// template is taken by that tenant's creates, never by another's, and the
// taken sandbox is the tenant's alone.
func TestWarmPoolOfATenantServesThatTenantOnly(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	if _, err := s.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.template(ctx, "acme", "host"); err != nil {
		t.Fatal(err)
	}
	runWarm(t, s, 1, WarmSpec{Tenant: "acme", Template: "host", Size: 1})
	checkInvisible(t, s, s.warmIDs(), nil)
	other, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.WarmStats(); st.Taken != 0 || st.Ready != 1 {
		t.Fatalf("another tenant's create took acme's warm sandbox: %+v", st)
	}
	sb, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.WarmStats(); st.Taken != 1 || sb.ID == other.ID {
		t.Fatalf("acme's create did not take its warm sandbox: %+v", st)
	}
	if _, err := s.GetSandbox(ctx, store.DefaultTenant, sb.ID); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("acme's sandbox seen by the default tenant: %v", err)
	}
	if got, err := s.GetSandbox(ctx, "acme", "mine"); err != nil || got.ID != sb.ID {
		t.Fatalf("acme get: %+v %v", got, err)
	}
	// A create over the tenant's quota is refused and takes nothing: the
	// warm sandbox stays in the pool, no record is made.
	waitFor(t, "the pool to refill", func() bool { return s.WarmStats().Ready == 1 })
	held := s.warmIDs()
	if _, err := s.SetTenantQuotas(ctx, "acme", client.SetQuotasRequest{RunningSandboxes: qi(1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "over"}); !errors.As(err, new(*errs.QuotaError)) {
		t.Fatalf("create over the quota: %v", err)
	}
	if st := s.WarmStats(); st.Taken != 1 || !slices.Equal(s.warmIDs(), held) {
		t.Fatalf("a refused create changed the pool: %+v %v, held %v", st, s.warmIDs(), held)
	}
	if _, err := s.GetSandbox(ctx, "acme", "over"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("a refused create left a record: %v", err)
	}
	checkInvisible(t, s, held, map[string]int64{store.DefaultTenant: 1, "acme": 1})
}

// FuzzParseWarmSpec: any input parses to a valid spec that prints back to
// itself, or is refused as invalid.
func FuzzParseWarmSpec(f *testing.F) {
	for _, s := range []string{"host=4", "acme/python=0", "host", "=1", "a/b/c=1", "host=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		w, err := ParseWarmSpec(in)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalid) {
				t.Fatalf("ParseWarmSpec(%q): %v is not ErrInvalid", in, err)
			}
			return
		}
		if w.Size < 0 || w.Size > 1000 || w.Tenant == "" || checkName("template", w.Template) != nil {
			t.Fatalf("ParseWarmSpec(%q) = %+v", in, w)
		}
		again, err := ParseWarmSpec(w.Tenant + "/" + w.Template + "=" + strconv.Itoa(w.Size))
		if err != nil || again != w {
			t.Fatalf("ParseWarmSpec(%q) = %+v does not print back: %+v %v", in, w, again, err)
		}
	})
}

// TestWarmPoolSizeSetThroughTheAPIAppliesWithoutARestart: a size set
// overrides the --warm default and the pool grows to it; a smaller size
// destroys the extra sandboxes; unsetting brings the default back; bad
// sizes and unknown templates are refused and change nothing.
func TestWarmPoolSizeSetThroughTheAPIAppliesWithoutARestart(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := s.template(ctx, tn, "host"); err != nil {
		t.Fatal(err)
	}
	runWarm(t, s, 1, WarmSpec{Template: "host", Size: 1})
	list, err := s.ListWarmPools(ctx)
	if err != nil || len(list) != 1 || list[0].Source != "default" || list[0].Size != 1 || list[0].Ready != 1 {
		t.Fatalf("pools from the flag: %+v %v", list, err)
	}

	p, err := s.SetWarmPool(ctx, tn, "host", 3)
	if err != nil || p.Size != 3 || p.Source != "api" {
		t.Fatalf("set: %+v %v", p, err)
	}
	waitFor(t, "the pool to grow to the size set", func() bool { return s.WarmStats().Ready == 3 })
	three := s.warmIDs()

	if _, err := s.SetWarmPool(ctx, tn, "host", 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool to shrink", func() bool { return s.WarmStats().Ready == 1 })
	for _, id := range three {
		if slices.Contains(s.warmIDs(), id) {
			continue
		}
		waitFor(t, "the extra warm sandbox's dataset to go", func() bool {
			ok, _ := s.pool.Exists(ctx, datasetName(id))
			return !ok
		})
		if st, err := s.rt.Status(ctx, id); err == nil && (st == steadrt.StatusRunning || st == steadrt.StatusPaused) {
			t.Fatalf("a warm sandbox beyond the new size still runs: %s %s", id, st)
		}
	}

	for _, bad := range []struct {
		template string
		size     int
	}{{"host", -1}, {"host", store.MaxWarmPoolSize + 1}, {"no-such-template", 1}} {
		if _, err := s.SetWarmPool(ctx, tn, bad.template, bad.size); err == nil {
			t.Fatalf("set %s=%d was accepted", bad.template, bad.size)
		}
	}
	if _, err := s.SetWarmPool(ctx, "no-such-tenant", "host", 1); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("set for an unknown tenant: %v", err)
	}
	if set, _ := s.st.ListWarmPools(ctx, ""); len(set) != 1 || set[0].Size != 1 {
		t.Fatalf("refused sets changed the store: %+v", set)
	}

	// Unset: the default (1) applies again; a 0 from the API empties it.
	if err := s.DeleteWarmPool(ctx, tn, "host"); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.ListWarmPools(ctx); len(list) != 1 || list[0].Source != "default" {
		t.Fatalf("after unset: %+v", list)
	}
	if _, err := s.SetWarmPool(ctx, tn, "host", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool to empty", func() bool { return s.WarmStats().Ready == 0 })
}
