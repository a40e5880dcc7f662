package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
)

func qi(v int64) *int64     { return &v }
func qf(v float64) *float64 { return &v }

// quotaRig is a real service with a tenant "acme" whose quota refusals
// are collected from the service's event sink.
type quotaRig struct {
	s  *Service
	mu sync.Mutex
	ev []events.Event
}

func newQuotaRig(t *testing.T, req client.SetQuotasRequest) *quotaRig {
	t.Helper()
	r := &quotaRig{s: newService(t)}
	r.s.opts.Events = events.SinkFunc(func(_ context.Context, e events.Event) {
		if e.Type == events.QuotaExceeded {
			r.mu.Lock()
			r.ev = append(r.ev, e)
			r.mu.Unlock()
		}
	})
	ctx := context.Background()
	if _, err := r.s.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.s.SetTenantQuotas(ctx, "acme", req); err != nil {
		t.Fatal(err)
	}
	return r
}

// refused fails unless err is a QuotaError of quota with this limit,
// usage and request, whose message says all four, and a quota.exceeded
// event says the same.
func (r *quotaRig) refused(t *testing.T, what string, err error, quota string, limit, usage, requested float64) {
	t.Helper()
	qe, ok := errs.AsQuota(err)
	if !ok {
		t.Fatalf("%s: %v, want a quota error", what, err)
	}
	if qe.Quota != quota || qe.Limit != limit || qe.Usage != usage || qe.Requested != requested {
		t.Fatalf("%s: %+v, want %s limit %g usage %g requested %g", what, qe, quota, limit, usage, requested)
	}
	if !strings.Contains(err.Error(), "quota "+quota+": limit ") {
		t.Fatalf("%s: message %q does not name the quota", what, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ev) == 0 {
		t.Fatalf("%s: no quota.exceeded event", what)
	}
	e := r.ev[len(r.ev)-1]
	if e.Tenant != "acme" || e.Data["quota"] != quota || e.Data["op"] == "" || e.Data["limit"] == "" || e.Data["usage"] == "" || e.Data["requested"] == "" {
		t.Fatalf("%s: event %+v", what, e)
	}
	r.ev = nil
}

// states returns the tenant's sandboxes' states by name.
func (r *quotaRig) states(t *testing.T) map[string]string {
	t.Helper()
	list, err := r.s.ListSandboxes(context.Background(), "acme", true)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, sb := range list {
		out[sb.Name] = sb.State
	}
	return out
}

// TestRunningQuotaRefusesCreateAndStartButNotResume: with one running
// sandbox allowed, a second started create and a start are refused (429,
// an event, nothing made or started); a paused sandbox counts and its
// resume adds nothing; after a stop the start goes through.
func TestRunningQuotaRefusesCreateAndStartButNotResume(t *testing.T) {
	r := newQuotaRig(t, client.SetQuotasRequest{RunningSandboxes: qi(1)})
	s, ctx := r.s, context.Background()
	if _, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "b"})
	r.refused(t, "started create", err, errs.QuotaRunningSandboxes, 1, 1, 1)
	if got := r.states(t); len(got) != 1 {
		t.Fatalf("a refused create left %v", got)
	}
	if _, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "b", NoStart: true}); err != nil {
		t.Fatalf("a stopped create is not a running sandbox: %v", err)
	}
	_, err = s.StartSandbox(ctx, "acme", "b")
	r.refused(t, "start", err, errs.QuotaRunningSandboxes, 1, 1, 1)
	if _, err := s.PauseSandbox(ctx, "acme", "a"); err != nil {
		t.Fatal(err)
	}
	_, err = s.StartSandbox(ctx, "acme", "b")
	r.refused(t, "start beside a paused one", err, errs.QuotaRunningSandboxes, 1, 1, 1)
	if _, err := s.ResumeSandbox(ctx, "acme", "a"); err != nil {
		t.Fatalf("resume adds nothing: %v", err)
	}
	if _, err := s.PauseSandbox(ctx, "acme", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartSandbox(ctx, "acme", "a"); err != nil { // start of a paused one resumes it
		t.Fatalf("start of a paused sandbox: %v", err)
	}
	if got := r.states(t); got["a"] != "running" || got["b"] != "stopped" {
		t.Fatalf("states %v", got)
	}
	// Another tenant's sandboxes count for it alone.
	if _, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "free"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StopSandbox(ctx, "acme", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartSandbox(ctx, "acme", "b"); err != nil {
		t.Fatalf("start after a stop: %v", err)
	}
	q, err := s.TenantQuotas(ctx, "acme")
	if err != nil || q.Limits.RunningSandboxes != 1 || q.Usage.RunningSandboxes != 1 || q.Usage.CPUs != 1 || q.Usage.MemoryBytes != 2<<30 {
		t.Fatalf("quotas: %+v %v", q, err)
	}
}

// TestCPUAndMemoryQuotasAtStartAndResize: the sizes of running sandboxes
// add up against cpus and memory_bytes at create and start; a resize to a
// size that alone exceeds a limit is refused and changes nothing (such a
// sandbox could never start).
func TestCPUAndMemoryQuotasAtStartAndResize(t *testing.T) {
	r := newQuotaRig(t, client.SetQuotasRequest{CPUs: qf(1.5), MemoryBytes: qi(3 << 30)})
	s, ctx := r.s, context.Background()
	if _, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "a"}); err != nil { // small: 1 cpu, 2 GiB
		t.Fatal(err)
	}
	if _, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "b", InstanceType: "micro", NoStart: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "c", NoStart: true}); err != nil {
		t.Fatal(err)
	}
	_, err := s.StartSandbox(ctx, "acme", "c")
	r.refused(t, "start of a second small", err, errs.QuotaCPUs, 1.5, 1, 1)
	if _, err := s.StartSandbox(ctx, "acme", "b"); err != nil { // micro: 0.5 cpu, 512 MiB fits
		t.Fatalf("start micro: %v", err)
	}
	_, err = s.ResizeSandbox(ctx, "acme", "c", client.ResizeRequest{CPUs: 2})
	r.refused(t, "resize beyond cpus", err, errs.QuotaCPUs, 1.5, 1.5, 2)
	_, err = s.ResizeSandbox(ctx, "acme", "c", client.ResizeRequest{MemoryBytes: 4 << 30})
	r.refused(t, "resize beyond memory", err, errs.QuotaMemoryBytes, 3<<30, 2<<30+512<<20, 4<<30)
	c, _ := s.GetSandbox(ctx, "acme", "c")
	if c.Limits.CPUs != 1 || c.Limits.MemoryBytes != 2<<30 || c.InstanceType != "small" {
		t.Fatalf("a refused resize changed %+v", c)
	}
	if _, err := s.StopSandbox(ctx, "acme", "a"); err != nil {
		t.Fatal(err)
	}
	_, err = s.ResizeSandbox(ctx, "acme", "c", client.ResizeRequest{MemoryBytes: 3 << 30})
	if err != nil {
		t.Fatalf("resize within the limit: %v", err)
	}
	_, err = s.StartSandbox(ctx, "acme", "c")
	r.refused(t, "start beside the micro", err, errs.QuotaMemoryBytes, 3<<30, 512<<20, 3<<30)
}

// TestDiskAndVolumeQuotasAtCreate: disk_bytes bounds the disk quotas of
// live sandboxes and the sizes of live volumes together; volumes bounds
// the live volumes; a refused create makes nothing; a delete frees room,
// and an undelete is refused when it no longer fits.
func TestDiskAndVolumeQuotasAtCreate(t *testing.T) {
	r := newQuotaRig(t, client.SetQuotasRequest{DiskBytes: qi(12 << 30), Volumes: qi(1)})
	s, ctx := r.s, context.Background()
	if _, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "a", NoStart: true}); err != nil { // 10 GiB
		t.Fatal(err)
	}
	_, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "b", NoStart: true, DiskBytes: 4 << 30})
	r.refused(t, "create beyond disk", err, errs.QuotaDiskBytes, 12<<30, 10<<30, 4<<30)
	_, err = s.CreateVolume(ctx, "acme", client.CreateVolumeRequest{Name: "big", SizeBytes: 3 << 30})
	r.refused(t, "volume beyond disk", err, errs.QuotaDiskBytes, 12<<30, 10<<30, 3<<30)
	if _, err := s.CreateVolume(ctx, "acme", client.CreateVolumeRequest{Name: "v1", SizeBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateVolume(ctx, "acme", client.CreateVolumeRequest{Name: "v2", SizeBytes: 1 << 20})
	r.refused(t, "second volume", err, errs.QuotaVolumes, 1, 1, 1)
	_, err = s.ResizeSandbox(ctx, "acme", "a", client.ResizeRequest{DiskBytes: 12 << 30})
	r.refused(t, "resize beyond disk", err, errs.QuotaDiskBytes, 12<<30, 11<<30, 2<<30)
	vols, _ := s.ListVolumes(ctx, "acme", true)
	if got := r.states(t); len(got) != 1 || len(vols) != 1 {
		t.Fatalf("refusals left sandboxes %v, volumes %+v", got, vols)
	}
	// A deleted sandbox promises nothing; its undelete promises again.
	if _, err := s.DeleteSandbox(ctx, "acme", "a", false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "b", NoStart: true, DiskBytes: 4 << 30}); err != nil {
		t.Fatalf("create after a delete: %v", err)
	}
	_, err = s.UndeleteSandbox(ctx, "acme", "a")
	r.refused(t, "undelete", err, errs.QuotaDiskBytes, 12<<30, 5<<30, 10<<30)
	if got := r.states(t); got["a"] != "deleted" {
		t.Fatalf("a refused undelete changed a: %v", got)
	}
	q, err := s.TenantQuotas(ctx, "acme")
	if err != nil || q.Usage.DiskBytes != 5<<30 || q.Usage.Volumes != 1 {
		t.Fatalf("usage: %+v %v", q.Usage, err)
	}
}

// TestSnapshotQuotaAtSnapshotVolumeSnapshotAndFork: snapshots a user asks
// for (of a sandbox, of a volume, a fork's of its source) are refused at
// the limit and leave nothing; a push's own snapshot is exempt.
func TestSnapshotQuotaAtSnapshotVolumeSnapshotAndFork(t *testing.T) {
	r := newQuotaRig(t, client.SetQuotasRequest{Snapshots: qi(1)})
	s, ctx := r.s, context.Background()
	if _, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "a", NoStart: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateVolume(ctx, "acme", client.CreateVolumeRequest{Name: "v", SizeBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	first, err := s.CreateSnapshot(ctx, "acme", "a", client.CreateSnapshotRequest{Label: "one"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateSnapshot(ctx, "acme", "a", client.CreateSnapshotRequest{Label: "two"})
	r.refused(t, "second snapshot", err, errs.QuotaSnapshots, 1, 1, 1)
	_, err = s.CreateVolumeSnapshot(ctx, "acme", "v", client.CreateSnapshotRequest{})
	r.refused(t, "volume snapshot", err, errs.QuotaSnapshots, 1, 1, 1)
	_, err = s.Fork(ctx, "acme", "a", client.ForkRequest{NoStart: true})
	r.refused(t, "fork of a sandbox", err, errs.QuotaSnapshots, 1, 1, 1)
	_, err = s.Rollback(ctx, "acme", "a", client.RollbackRequest{Snapshot: first.ID})
	r.refused(t, "rollback (its safety snapshot)", err, errs.QuotaSnapshots, 1, 1, 1)
	if list, _ := s.ListSnapshots(ctx, "acme", ""); len(list) != 1 {
		t.Fatalf("refusals left snapshots %+v", list)
	}
	if got := r.states(t); len(got) != 1 {
		t.Fatalf("a refused fork made %v", got)
	}
	// A fork of a snapshot takes none.
	if _, err := s.Fork(ctx, "acme", first.ID, client.ForkRequest{NoStart: true, Name: "f"}); err != nil {
		t.Fatalf("fork of a snapshot: %v", err)
	}
}

// TestConcurrentStartsCannotBothTakeTheLastSlot: N starts at once against
// a running_sandboxes limit of 1: exactly one wins, the others are
// refused, and one sandbox runs.
func TestConcurrentStartsCannotBothTakeTheLastSlot(t *testing.T) {
	r := newQuotaRig(t, client.SetQuotasRequest{RunningSandboxes: qi(1)})
	s, ctx := r.s, context.Background()
	const n = 6
	for i := range n {
		if _, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "c" + string(rune('0'+i)), NoStart: true}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errsBy := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errsBy[i] = s.StartSandbox(ctx, "acme", "c"+string(rune('0'+i)))
		}()
	}
	close(start)
	wg.Wait()
	won := 0
	for i, err := range errsBy {
		switch _, isQuota := errs.AsQuota(err); {
		case err == nil:
			won++
		case !isQuota:
			t.Fatalf("start %d: %v, want success or a quota refusal", i, err)
		}
	}
	running := 0
	for _, st := range r.states(t) {
		if st == "running" {
			running++
		}
	}
	if won != 1 || running != 1 {
		t.Fatalf("%d starts won, %d sandboxes run; want 1 and 1", won, running)
	}
	// And the same for creates that start.
	if _, err := s.StopSandbox(ctx, "acme", func() string {
		for name, st := range r.states(t) {
			if st == "running" {
				return name
			}
		}
		return ""
	}()); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errsBy[i] = s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "n" + string(rune('0'+i))})
		}()
	}
	wg.Wait()
	won = 0
	for _, err := range errsBy {
		if err == nil {
			won++
		} else if _, ok := errs.AsQuota(err); !ok {
			t.Fatalf("create: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d started creates won, want 1", won)
	}
}

// TestRepositoryQuotaRefusesPushOnceReached: a push is refused once the
// tenant's pushes keep at least repository_bytes in the repository (its
// usage read as the meter reads it), and nothing is pushed; raising the
// limit lets it through.
func TestRepositoryQuotaRefusesPushOnceReached(t *testing.T) {
	r := newQuotaRig(t, client.SetQuotasRequest{RepositoryBytes: qi(1)})
	s, ctx := r.s, context.Background()
	withRepo(t, s, t.TempDir())
	if _, err := s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "a", NoStart: true}); err != nil {
		t.Fatal(err)
	}
	// Below the limit (nothing pushed yet): the push goes through, and
	// takes the tenant past it.
	op, err := s.PushSandbox(ctx, "acme", "a", client.PushRequest{Wait: true})
	opDone(t, op, err, nil)
	q, err := s.TenantQuotas(ctx, "acme")
	if err != nil || !q.RepositoryKnown || q.Usage.RepositoryBytes < 1 {
		t.Fatalf("quotas after a push: %+v %v", q, err)
	}
	_, err = s.PushSandbox(ctx, "acme", "a", client.PushRequest{Wait: true})
	r.refused(t, "push at the limit", err, errs.QuotaRepositoryBytes, 1, float64(q.Usage.RepositoryBytes), 0)
	if list, _ := s.ListRemoteSnapshots(ctx, "acme", "a"); len(list) != 1 {
		t.Fatalf("a refused push left %d pushes", len(list))
	}
	if _, err := s.SetTenantQuotas(ctx, "acme", client.SetQuotasRequest{RepositoryBytes: qi(0)}); err != nil {
		t.Fatal(err)
	}
	op, err = s.PushSandbox(ctx, "acme", "a", client.PushRequest{Wait: true})
	var pushed client.PushResult
	opDone(t, op, err, &pushed)

	// A restore into a new sandbox and a pull into a local snapshot are
	// refused before any data moves.
	if _, err := s.SetTenantQuotas(ctx, "acme", client.SetQuotasRequest{DiskBytes: qi(15 << 30), Snapshots: qi(1)}); err != nil {
		t.Fatal(err)
	}
	_, err = s.RestoreRemote(ctx, "acme", client.RestoreRequest{Sandbox: "a", Name: "copy", NoStart: true, Wait: true})
	r.refused(t, "restore", err, errs.QuotaDiskBytes, 15<<30, 10<<30, 10<<30)
	_, err = s.PullRemote(ctx, "acme", client.PullRequest{Snapshot: pushed.RemoteSnapshot.ID, Wait: true})
	r.refused(t, "pull", err, errs.QuotaSnapshots, 1, 1, 1) // the push's own snapshot is kept
	if got := r.states(t); len(got) != 1 {
		t.Fatalf("a refused restore made %v", got)
	}
	if list, _ := s.ListSnapshots(ctx, "acme", ""); len(list) != 1 {
		t.Fatalf("a refused pull left snapshots %+v", list)
	}
}

// TestSetQuotasIsPartialAndRefusesNegativeLimits: absent fields keep
// their limits, 0 clears one, a negative limit changes nothing, a limit
// below the usage is accepted, and an unknown tenant is not found.
func TestSetQuotasIsPartialAndRefusesNegativeLimits(t *testing.T) {
	r := newQuotaRig(t, client.SetQuotasRequest{RunningSandboxes: qi(3), Volumes: qi(2)})
	s, ctx := r.s, context.Background()
	q, err := s.SetTenantQuotas(ctx, "acme", client.SetQuotasRequest{Snapshots: qi(4), Volumes: qi(0)})
	if err != nil || q.Limits != (client.QuotaLimits{RunningSandboxes: 3, Snapshots: 4}) || q.UpdatedAt == nil || q.Note == "" {
		t.Fatalf("partial set: %+v %v", q, err)
	}
	for _, bad := range []client.SetQuotasRequest{{RunningSandboxes: qi(-1)}, {CPUs: qf(-1)}, {DiskBytes: qi(-5), Snapshots: qi(9)}} {
		if _, err := s.SetTenantQuotas(ctx, "acme", bad); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("set %+v: %v", bad, err)
		}
	}
	if q, _ := s.TenantQuotas(ctx, "acme"); q.Limits != (client.QuotaLimits{RunningSandboxes: 3, Snapshots: 4}) {
		t.Fatalf("a refused set changed %+v", q.Limits)
	}
	if _, err := s.SetTenantQuotas(ctx, "ghost", client.SetQuotasRequest{Volumes: qi(1)}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("unknown tenant: %v", err)
	}
	if _, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetTenantQuotas(ctx, "acme", client.SetQuotasRequest{RunningSandboxes: qi(1), CPUs: qf(0.5)}); err != nil {
		t.Fatalf("a limit below the usage: %v", err)
	}
	if got := r.states(t); got["a"] != "running" {
		t.Fatalf("lowering a limit stopped %v", got)
	}
}

// TestScheduledSnapshotRefusedByQuotaIsRecordedAndTheStopStillFires: a
// scheduled snapshot past the snapshot quota fails its run (recorded, a
// schedule.failed and a quota.exceeded event) and takes nothing; a stop
// scheduled at the same minute still stops the sandbox; a scheduled
// start past running_sandboxes fails the same way and starts nothing.
func TestScheduledSnapshotRefusedByQuotaIsRecordedAndTheStopStillFires(t *testing.T) {
	r := newSchedRig(t, mustTime("2026-12-01T10:15:00Z"))
	s, ctx := r.s, context.Background()
	tn := store.DefaultTenant
	if _, err := s.SetTenantQuotas(ctx, tn, client.SetQuotasRequest{Snapshots: qi(1), RunningSandboxes: qi(1)}); err != nil {
		t.Fatal(err)
	}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSnapshot(ctx, tn, sb.ID, client.CreateSnapshotRequest{Label: "manual"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "other", NoStart: true}); err != nil {
		t.Fatal(err)
	}
	snapSc, err := s.CreateSchedule(ctx, tn, "busy", client.CreateScheduleRequest{Cron: "0 11 * * *", Action: "snapshot"})
	if err != nil {
		t.Fatal(err)
	}
	startSc, err := s.CreateSchedule(ctx, tn, "other", client.CreateScheduleRequest{Cron: "0 11 * * *", Action: "start"})
	if err != nil {
		t.Fatal(err)
	}
	stopSc, err := s.CreateSchedule(ctx, tn, "busy", client.CreateScheduleRequest{Cron: "1 11 * * *", Action: "stop"})
	if err != nil {
		t.Fatal(err)
	}
	r.tick(t, "2026-12-01T11:00:00Z", 2)
	for _, id := range []struct{ sb, sc, quota string }{{"busy", snapSc.ID, "quota snapshots"}, {"other", startSc.ID, "quota running_sandboxes"}} {
		if got := getSchedule(t, s, id.sb, id.sc); got.LastResult != store.ScheduleFailed || !strings.Contains(got.LastError, id.quota) {
			t.Fatalf("schedule %s: %+v", id.sc, got)
		}
	}
	if snaps, _ := s.ListSnapshots(ctx, tn, ""); len(snaps) != 1 {
		t.Fatalf("a refused scheduled snapshot left %+v", snaps)
	}
	r.tick(t, "2026-12-01T11:01:00Z", 1)
	if got := getSchedule(t, s, "busy", stopSc.ID); got.LastResult != "ok" {
		t.Fatalf("stop after a refused snapshot: %+v", got)
	}
	states := map[string]string{}
	list, _ := s.ListSandboxes(ctx, tn, false)
	for _, v := range list {
		states[v.Name] = v.State
	}
	if states["busy"] != "stopped" || states["other"] != "stopped" {
		t.Fatalf("states %v", states)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var quotas []string
	for _, e := range r.evs {
		if e.Type == events.QuotaExceeded {
			quotas = append(quotas, e.Data["quota"])
		}
	}
	if len(quotas) != 2 {
		t.Fatalf("quota events %v", quotas)
	}
}
