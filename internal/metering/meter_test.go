package metering

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// clock is a test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var t0 = time.Date(2026, 12, 1, 22, 45, 0, 0, time.UTC)

func openStore(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// rig is a store observed by a meter, as the daemon wires them, with
// transitions made the way the sandbox service makes them (through the
// observed store).
type rig struct {
	t   *testing.T
	raw store.Store
	obs store.Store
	m   *Meter
	c   *clock
}

func newRig(t *testing.T, raw store.Store, c *clock) *rig {
	m := New(Options{Store: raw, Now: c.now, Logger: slog.New(slog.DiscardHandler)})
	return &rig{t: t, raw: raw, obs: events.ObserveStore(raw, m, c.now), m: m, c: c}
}

func (r *rig) create(name, typ string, mem int64) store.Sandbox {
	r.t.Helper()
	spec, _ := json.Marshal(map[string]any{"instance_type": typ, "limits": client.Limits{CPUs: 1, MemoryBytes: mem}})
	sb, err := r.obs.CreateSandbox(r.t.Context(), store.Sandbox{ID: "sb-" + name, TenantID: store.DefaultTenant, Name: name, TemplateID: "host",
		State: store.StateStopped, Spec: spec, CreatedAt: r.c.now(), UpdatedAt: r.c.now()})
	if err != nil {
		r.t.Fatal(err)
	}
	return sb
}

func (r *rig) to(id string, st store.SandboxState) {
	r.t.Helper()
	sb, err := r.raw.GetSandbox(r.t.Context(), "", id)
	if err != nil {
		r.t.Fatal(err)
	}
	sb.State = st
	if _, err := r.obs.UpdateSandbox(r.t.Context(), sb); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) tick() {
	r.t.Helper()
	if err := r.m.Tick(r.t.Context()); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) report(q client.UsageQuery) client.UsageReport {
	r.t.Helper()
	rep, err := r.m.Report(r.t.Context(), store.DefaultTenant, q)
	if err != nil {
		r.t.Fatal(err)
	}
	return rep
}

// TestMeterBillsExactlyTheRunningSeconds: a sandbox run 10 min 7 s,
// paused 5 min, resumed for 3 min, stopped for 50 min, started again for
// 7 min (across midnight) and stopped is billed exactly 1207 + 180 + 420 running seconds,
// whatever the ticks in between, priced at its type; the paused and the
// stopped time cost nothing.
func TestMeterBillsExactlyTheRunningSeconds(t *testing.T) {
	c := &clock{t: t0}
	st := openStore(t, filepath.Join(t.TempDir(), "stead.db"))
	defer st.Close()
	r := newRig(t, st, c)
	if err := r.m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	sb := r.create("worker", "small", 2<<30)
	c.add(30 * time.Second) // created, not running: free
	r.to(sb.ID, store.StateRunning)
	for range 10 {
		c.add(time.Minute)
		r.tick()
	}
	c.add(7 * time.Second)
	r.to(sb.ID, store.StatePaused)
	c.add(2 * time.Minute)
	r.tick() // a tick while paused moves nothing
	c.add(3 * time.Minute)
	r.to(sb.ID, store.StateRunning)
	c.add(3 * time.Minute)
	r.to(sb.ID, store.StateStopped)
	c.add(50 * time.Minute)
	r.tick()
	r.to(sb.ID, store.StateRunning) // 23:53:37: crosses midnight while running
	c.add(7 * time.Minute)
	r.tick()
	r.to(sb.ID, store.StateStopped)
	c.add(10 * time.Minute)

	want := float64(10*60 + 7 + 3*60 + 7*60)
	rep := r.report(client.UsageQuery{Since: t0.Add(-time.Hour)})
	if rep.Total.RunningSeconds != want {
		t.Fatalf("running seconds = %v, want exactly %v", rep.Total.RunningSeconds, want)
	}
	if got := rep.Total.ComputeSeconds["small"]; got != want {
		t.Fatalf("compute seconds of small = %v, want %v", got, want)
	}
	if rep.Total.MemoryGiBSeconds != 2*want {
		t.Fatalf("memory GiB-seconds = %v, want %v (2 GiB x running seconds)", rep.Total.MemoryGiBSeconds, 2*want)
	}
	price := DefaultPrices().ComputePerHour["small"]
	if wantCost := round6(want / 3600 * price); rep.Total.ComputeCost != wantCost || rep.Total.Cost != wantCost {
		t.Fatalf("cost = %v / %v, want %v", rep.Total.ComputeCost, rep.Total.Cost, wantCost)
	}
	// Always-on: from creation to the end of the report.
	life := c.now().Sub(t0).Seconds()
	if rep.AlwaysOn.RunningSeconds != life {
		t.Fatalf("always-on seconds = %v, want the sandbox's life %v", rep.AlwaysOn.RunningSeconds, life)
	}
	if rep.AlwaysOn.Cost <= rep.AlwaysOn.ActualCost || rep.AlwaysOn.SavingPercent <= 0 {
		t.Fatalf("always-on %+v: want a saving", rep.AlwaysOn)
	}
	t.Logf("billed %v s of %v s alive: always-on $%.4f, auto-stop $%.4f, saving %.1f%%", want, life,
		rep.AlwaysOn.Cost, rep.AlwaysOn.ActualCost, rep.AlwaysOn.SavingPercent)

	byDay := r.report(client.UsageQuery{Since: t0.Add(-time.Hour), By: "day"})
	if len(byDay.Rows) != 2 || byDay.Rows[0].Day != "2026-12-01" || byDay.Rows[1].Day != "2026-12-02" {
		t.Fatalf("by day rows = %+v", byDay.Rows)
	}
	// The last run crossed midnight: the days add up to the total, to
	// the second.
	if sum := byDay.Rows[0].RunningSeconds + byDay.Rows[1].RunningSeconds; sum != want {
		t.Fatalf("days sum to %v, want %v", sum, want)
	}
	bySb := r.report(client.UsageQuery{By: "sandbox", Since: t0.Add(-time.Hour), Sandbox: "worker"})
	if len(bySb.Rows) != 1 || bySb.Rows[0].SandboxName != "worker" || bySb.Rows[0].RunningSeconds != want || bySb.Rows[0].InstanceType != "small" {
		t.Fatalf("by sandbox rows = %+v", bySb.Rows)
	}
	if _, err := r.m.Report(t.Context(), "other", client.UsageQuery{Sandbox: "worker"}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("a report of an unknown tenant: %v, want not found", err)
	}
	if err := st.CreateTenant(t.Context(), store.Tenant{ID: "other", Name: "other"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.m.Report(t.Context(), "other", client.UsageQuery{Sandbox: "worker"}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's report on this sandbox: %v, want not found", err)
	}
	if rep, err := r.m.Report(t.Context(), "other", client.UsageQuery{By: "sandbox"}); err != nil || len(rep.Rows) != 0 || rep.Total.Cost != 0 {
		t.Fatalf("another tenant's report shows this one's usage: %+v %v", rep, err)
	}
}

// TestMeterBillsASandboxCreatedRunning: a create from the warm pool
// stores its record running (no start event follows); it is billed from
// its create to its stop.
func TestMeterBillsASandboxCreatedRunning(t *testing.T) {
	c := &clock{t: t0}
	st := openStore(t, filepath.Join(t.TempDir(), "stead.db"))
	defer st.Close()
	r := newRig(t, st, c)
	if err := r.m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(map[string]any{"instance_type": "small", "limits": client.Limits{CPUs: 1, MemoryBytes: 1 << 30}})
	now := c.now()
	sb, err := r.obs.CreateSandbox(t.Context(), store.Sandbox{ID: "sb-warm", TenantID: store.DefaultTenant, Name: "warm", TemplateID: "host",
		State: store.StateRunning, Spec: spec, CreatedAt: now, UpdatedAt: now, StartedAt: &now})
	if err != nil {
		t.Fatal(err)
	}
	c.add(90 * time.Second)
	r.tick()
	c.add(30 * time.Second)
	r.to(sb.ID, store.StateStopped)
	if rep := r.report(client.UsageQuery{Since: t0.Add(-time.Hour)}); rep.Total.RunningSeconds != 120 {
		t.Fatalf("running seconds = %v, want 120 (created running, stopped 2 min later)", rep.Total.RunningSeconds)
	}
}

// TestMeterCrashLosesAtMostOneInterval: the daemon is killed (the meter
// and the store dropped without any flush) 50 s after a checkpoint. A
// sandbox that died with it is closed at its last checkpoint when the next
// daemon's reconciliation finds it dead: 50 s (less than one interval)
// lost, nothing invented. A sandbox that kept running is metered on from
// its last checkpoint, through the downtime, and its stop is billed to
// the second.
func TestMeterCrashLosesAtMostOneInterval(t *testing.T) {
	c := &clock{t: t0}
	path := filepath.Join(t.TempDir(), "stead.db")
	st := openStore(t, path)
	r := newRig(t, st, c)
	if err := r.m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	dead, alive := r.create("dead", "micro", 512<<20), r.create("alive", "micro", 512<<20)
	r.to(dead.ID, store.StateRunning)
	r.to(alive.ID, store.StateRunning)
	for range 3 {
		c.add(time.Minute)
		r.tick()
	}
	c.add(50 * time.Second)
	// kill -9: no flush, no close of the intervals. The store's last
	// commit is durable (WAL, synchronous FULL); reopening it is what a
	// new process sees.
	st.Close()
	c.add(5 * time.Minute) // the daemon is down

	st2 := openStore(t, path)
	defer st2.Close()
	r2 := newRig(t, st2, c)
	// Reconciliation finds "dead" gone and marks it stopped, through the
	// observed store, before the meter recovers.
	r2.to(dead.ID, store.StateStopped)
	if err := r2.m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.add(time.Minute)
	r2.tick()
	c.add(20 * time.Second)
	r2.to(alive.ID, store.StateStopped)

	rep := r2.report(client.UsageQuery{By: "sandbox", Since: t0})
	got := map[string]float64{}
	for _, l := range rep.Rows {
		got[l.SandboxName] = l.RunningSeconds
	}
	ran := 3*60 + 50.0
	if lost := ran - got["dead"]; got["dead"] != 180 || lost > DefaultInterval.Seconds() {
		t.Fatalf("dead sandbox billed %v s of %v s run: want its last checkpoint, 180 s (lost %v s, at most one interval)", got["dead"], ran, lost)
	}
	if want := (3*60 + 50 + 5*60 + 60 + 20.0); got["alive"] != want {
		t.Fatalf("alive sandbox billed %v s, want %v (it ran through the downtime)", got["alive"], want)
	}
}

// TestRecoverClosesIntervalsOfSandboxesNotRunning: a meter that recovers
// without any event (the sandbox was stopped by hand in the store, or
// purged) closes the open interval at its checkpoint; a running sandbox
// without an interval gets one from now.
func TestRecoverClosesIntervalsOfSandboxesNotRunning(t *testing.T) {
	c := &clock{t: t0}
	st := openStore(t, filepath.Join(t.TempDir(), "stead.db"))
	defer st.Close()
	r := newRig(t, st, c)
	r.m.Recover(t.Context())
	a := r.create("a", "small", 2<<30)
	r.to(a.ID, store.StateRunning)
	c.add(time.Minute)
	r.tick()
	c.add(30 * time.Second)
	// Behind the meter's back: a stopped in the raw store, b running.
	sb, _ := st.GetSandbox(t.Context(), "", a.ID)
	sb.State = store.StateStopped
	st.UpdateSandbox(t.Context(), sb)
	b := r.create("b", "small", 2<<30)
	sb, _ = st.GetSandbox(t.Context(), "", b.ID)
	sb.State = store.StateRunning
	st.UpdateSandbox(t.Context(), sb)

	r2 := newRig(t, st, c)
	if err := r2.m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.add(time.Minute)
	r2.tick()
	ivs, _ := st.ListMeterIntervals(t.Context(), store.MeterFilter{})
	if len(ivs) != 2 || ivs[0].Open || ivs[0].Checkpoint.Sub(ivs[0].Start) != time.Minute || !ivs[1].Open || ivs[1].SandboxID != b.ID {
		t.Fatalf("intervals after recovery: %+v", ivs)
	}
}

// fakeStorage reports fixed sizes.
type fakeStorage struct{ samples []store.StorageUsage }

func (f fakeStorage) StorageSamples(context.Context) ([]store.StorageUsage, error) {
	return append([]store.StorageUsage(nil), f.samples...), nil
}

// TestStorageIsMeteredInGBHoursAndPriced: 10 GB in the pool, 2 GB of
// snapshots and 100 GB in the repository for an hour.
func TestStorageIsMeteredInGBHoursAndPriced(t *testing.T) {
	c := &clock{t: t0}
	st := openStore(t, filepath.Join(t.TempDir(), "stead.db"))
	defer st.Close()
	m := New(Options{Store: st, Now: c.now, StorageInterval: time.Minute, Storage: fakeStorage{[]store.StorageUsage{
		{TenantID: store.DefaultTenant, Subject: "vol-1", Kind: store.StoragePool, Bytes: 10e9},
		{TenantID: store.DefaultTenant, Subject: "sb-x", Kind: store.StorageSnapshots, Bytes: 2e9},
		{TenantID: store.DefaultTenant, Kind: store.StorageRepository, Bytes: 100e9},
	}}})
	m.Recover(t.Context())
	for range 61 { // the first sample only sets the start
		if err := m.Tick(t.Context()); err != nil {
			t.Fatal(err)
		}
		c.add(time.Minute)
	}
	rep, err := m.Report(t.Context(), store.DefaultTenant, client.UsageQuery{Since: t0, By: "sandbox"})
	if err != nil {
		t.Fatal(err)
	}
	tot := rep.Total
	if tot.PoolGBHours != 10 || tot.SnapshotGBHours != 2 || tot.RepositoryGBHours != 100 {
		t.Fatalf("GB-hours = pool %v, snapshots %v, repository %v; want 10, 2, 100", tot.PoolGBHours, tot.SnapshotGBHours, tot.RepositoryGBHours)
	}
	if want := round6(12*0.10/HoursPerMonth + 100*0.023/HoursPerMonth); tot.StorageCost != want {
		t.Fatalf("storage cost = %v, want %v", tot.StorageCost, want)
	}
	if len(rep.Rows) != 3 {
		t.Fatalf("rows by subject: %+v", rep.Rows)
	}
}

func TestLoadPricesKeepsDefaultsItDoesNotName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prices.json")
	if err := writeFile(path, `{"compute_per_hour": {"small": 0.5, "gpu": 2}, "local_gb_month": 0.2}`); err != nil {
		t.Fatal(err)
	}
	p, err := LoadPrices(path)
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultPrices()
	if p.ComputePerHour["small"] != 0.5 || p.ComputePerHour["gpu"] != 2 || p.ComputePerHour["large"] != d.ComputePerHour["large"] ||
		p.LocalGBMonth != 0.2 || p.RepositoryGBMonth != 0.023 || p.CPUHour != d.CPUHour {
		t.Fatalf("prices = %+v", p)
	}
	if err := writeFile(path, `{"compute_per_hour": {"small": -1}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPrices(path); err == nil {
		t.Fatal("a negative price: want an error")
	}
}

// apartStore is a store that refuses to write an interval or an event on
// its own: each must commit with the sandbox change that makes it.
type apartStore struct{ *sqlite.Store }

func (apartStore) OpenMeterInterval(context.Context, store.MeterInterval) (store.MeterInterval, error) {
	return store.MeterInterval{}, errors.New("OpenMeterInterval called: the start and its interval were written apart")
}

func (apartStore) AppendDaemonEvent(context.Context, store.DaemonEvent) (store.DaemonEvent, error) {
	return store.DaemonEvent{}, errors.New("AppendDaemonEvent called: the change and its event were written apart")
}

// TestAStartAndItsIntervalCommitTogether: wired as the daemon wires it
// (the Hub's log first, in the same store), a start, a resume and a create
// from the warm pool open their running interval in the transaction of the
// change and its event (the store refuses OpenMeterInterval), and the
// running time is billed as before.
func TestAStartAndItsIntervalCommitTogether(t *testing.T) {
	c := &clock{t: t0}
	raw := openStore(t, filepath.Join(t.TempDir(), "stead.db"))
	defer raw.Close()
	st := apartStore{raw}
	m := New(Options{Store: st, Now: c.now, Logger: slog.New(slog.DiscardHandler)})
	sinks := events.Multi{events.New(st, events.Options{Now: c.now})}
	r := &rig{t: t, raw: st, obs: events.ObserveStore(st, &sinks, c.now), m: m, c: c}
	sinks = append(sinks, m)
	if err := m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	sb := r.create("worker", "small", 2<<30)
	c.add(30 * time.Second)
	r.to(sb.ID, store.StateRunning)
	c.add(2 * time.Minute)
	r.tick()
	r.to(sb.ID, store.StatePaused)
	c.add(time.Minute)
	r.to(sb.ID, store.StateRunning)
	c.add(time.Minute)
	r.to(sb.ID, store.StateStopped)
	// A create from the warm pool: made running.
	spec, _ := json.Marshal(map[string]any{"instance_type": "small", "limits": client.Limits{CPUs: 1, MemoryBytes: 2 << 30}})
	if _, err := r.obs.CreateSandbox(t.Context(), store.Sandbox{ID: "sb-warm", TenantID: store.DefaultTenant, Name: "warm", TemplateID: "host",
		State: store.StateRunning, Spec: spec, CreatedAt: c.now(), UpdatedAt: c.now()}); err != nil {
		t.Fatal(err)
	}
	c.add(45 * time.Second)
	r.to("sb-warm", store.StateStopped)
	ivs, err := raw.ListMeterIntervals(t.Context(), store.MeterFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ivs) != 3 {
		t.Fatalf("intervals: %+v", ivs)
	}
	rep := r.report(client.UsageQuery{Since: t0.Add(-time.Hour)})
	if got, want := rep.Total.RunningSeconds, float64(3*60+45); got != want {
		t.Fatalf("running seconds %v, want %v (report %+v)", got, want, rep.Total)
	}
}
