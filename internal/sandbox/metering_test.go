package sandbox

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/metering"
	"github.com/stead-dev/stead/internal/store"
)

// TestMeteredServiceBillsExactlyTheRunningSeconds is issue 12's metering
// proof on the real service (runtime, pool, SQLite): a sandbox run for
// 90 s, paused for 10 min, resumed for 40 s, stopped for an hour, started
// again for 25 s and stopped is billed exactly 155 running seconds, to
// the second, by the injected clock.
func TestMeteredServiceBillsExactlyTheRunningSeconds(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	clock := &testClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	meter := metering.New(metering.Options{Store: s.st, Now: clock.now, Logger: slog.New(slog.DiscardHandler)})
	s.opts.Now = clock.now
	s.st = events.ObserveStore(s.st, meter, clock.now)
	if err := meter.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	tn := store.DefaultTenant
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "metered", InstanceType: "micro"})
	if err != nil {
		t.Fatal(err)
	}
	step := func(d time.Duration, verb func(context.Context, string, string) (client.Sandbox, error)) {
		t.Helper()
		for d > 0 { // the meter ticks every minute meanwhile
			m := min(d, time.Minute)
			clock.add(m)
			d -= m
			if err := meter.Tick(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := verb(ctx, tn, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	step(90*time.Second, s.PauseSandbox)
	step(10*time.Minute, s.ResumeSandbox)
	step(40*time.Second, s.StopSandbox)
	step(time.Hour, s.StartSandbox)
	step(25*time.Second, s.StopSandbox)
	clock.add(time.Hour)
	rep, err := meter.Report(ctx, tn, client.UsageQuery{Since: clock.now().Add(-24 * time.Hour), Sandbox: "metered", By: "sandbox"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total.RunningSeconds != 155 || rep.Total.ComputeSeconds["micro"] != 155 {
		t.Fatalf("billed %v running seconds (%v), want exactly 155", rep.Total.RunningSeconds, rep.Total.ComputeSeconds)
	}
	if want := 155 * 0.5; rep.Total.MemoryGiBSeconds != want {
		t.Fatalf("memory GiB-seconds %v, want %v (512 MiB x 155 s)", rep.Total.MemoryGiBSeconds, want)
	}
	t.Logf("always-on %+v", rep.AlwaysOn)
}
