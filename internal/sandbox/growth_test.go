package sandbox

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
)

// TestDiskWarningsAt80And95PercentOnceEach: a sandbox filled to 81% and
// then 96% of its quota gets one limit.warning at each level (never a
// second for the same level), the warning shows in its view and in
// orient's text with the directory that did it, du names the file, and a
// large file under /data is reported as state to off-load.
func TestDiskWarningsAt80And95PercentOnceEach(t *testing.T) {
	var mu sync.Mutex
	var got []events.Event
	sink := events.SinkFunc(func(_ context.Context, e events.Event) {
		if e.Type == events.LimitWarning {
			mu.Lock()
			got = append(got, e)
			mu.Unlock()
		}
	})
	s, _, logs := newBtrfsService(t, 2<<30, Options{Events: sink, Growth: GrowthOptions{LargeStateFileBytes: 8 << 20}})
	ctx := context.Background()
	tn := store.DefaultTenant
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "filler", DiskBytes: 256 << 20, InstanceType: "micro"})
	if err != nil {
		t.Fatal(err)
	}
	warnings := func() []events.Event {
		mu.Lock()
		defer mu.Unlock()
		return append([]events.Event(nil), got...)
	}
	// The template's own files count too: fill to a share of the quota.
	fill := func(share float64) {
		t.Helper()
		used, err := s.pool.Usage(ctx, datasetName(sb.ID))
		if err != nil {
			t.Fatal(err)
		}
		need := int64(share*float64(256<<20)) - used
		if need <= 0 {
			t.Fatalf("already at %d bytes, over %.0f%%", used, 100*share)
		}
		if out, code := sh(t, s, sb.ID, "mkdir -p /workspace/cache && dd if=/dev/urandom of=/workspace/cache/blob bs=64K oflag=append conv=notrunc count="+strconv.Itoa(int(need>>16)+1)+" 2>&1 && sync"); code != 0 {
			t.Fatalf("fill to %.0f%%: %s", 100*share, out)
		}
	}

	s.CheckLimits(ctx)
	if w := warnings(); len(w) != 0 {
		t.Fatalf("warnings before any fill: %+v", w)
	}
	fill(0.81)
	s.CheckLimits(ctx)
	s.CheckLimits(ctx)
	w := warnings()
	if len(w) != 1 || w[0].Data["resource"] != "disk" || w[0].Data["level"] != "80" || w[0].Sandbox != sb.ID || w[0].Tenant != tn {
		t.Fatalf("after filling to 81%%: %+v, want one disk warning at 80", w)
	}
	fill(0.96)
	s.CheckLimits(ctx)
	s.CheckLimits(ctx)
	w = warnings()
	if len(w) != 2 || w[1].Data["level"] != "95" {
		t.Fatalf("after filling to 96%%: %+v, want a second warning, at 95", w)
	}
	if !strings.Contains(logs.String(), "% of its 256 MiB disk quota") {
		t.Errorf("no log line for the warning:\n%s", logs.String())
	}

	view, err := s.GetSandbox(ctx, tn, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(view.Warnings) != 1 || view.Warnings[0].Resource != client.LimitDisk || view.Warnings[0].Level != 95 || view.Warnings[0].Percent < 95 {
		t.Fatalf("view warnings %+v", view.Warnings)
	}
	or, err := s.Orient(ctx, tn, sb.ID, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(or.Text, "/ is 9") || !strings.Contains(or.Text, "% of its 256 MiB disk quota") ||
		!strings.Contains(or.Text, "the largest directories are /workspace/cache") {
		t.Fatalf("orient text does not tell the agent:\n%s", or.Text)
	}
	du, err := s.DiskUsage(ctx, tn, "filler", "/", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(du.LargestFiles) == 0 || du.LargestFiles[0].Path != "/workspace/cache/blob" || du.QuotaBytes != 256<<20 || du.UsedBytes < 240<<20 {
		t.Fatalf("du: %+v", du)
	}

	// Freeing the space re-arms the levels; filling again warns again.
	sh(t, s, sb.ID, "rm /workspace/cache/blob && sync")
	s.CheckLimits(ctx)
	if view, _ := s.GetSandbox(ctx, tn, sb.ID); len(view.Warnings) != 0 {
		t.Fatalf("warnings after freeing the space: %+v", view.Warnings)
	}

	// A large file in a state directory.
	if out, code := sh(t, s, sb.ID, "mkdir -p /data && dd if=/dev/urandom of=/data/history.jsonl bs=1M count=9 2>&1 && sync"); code != 0 {
		t.Fatal(out)
	}
	s.limits.mu.Lock()
	delete(s.limits.large, sb.ID) // the GetSandbox above cached a scan without it
	s.limits.mu.Unlock()
	view, _ = s.GetSandbox(ctx, tn, sb.ID)
	if len(view.LargeStateFiles) != 1 || view.LargeStateFiles[0].Path != "/data/history.jsonl" {
		t.Fatalf("large state files %+v", view.LargeStateFiles)
	}
	or, _ = s.Orient(ctx, tn, sb.ID, nil, 0)
	if !strings.Contains(or.Text, "/data/history.jsonl is 9 MiB") {
		t.Fatalf("orient does not name the large state file:\n%s", or.Text)
	}
}
