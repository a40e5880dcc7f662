package e2b

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/e2b/envd"
	"github.com/stead-dev/stead/internal/sandbox"
)

func TestKeepalivesFollowTheClientsInterval(t *testing.T) {
	var n atomic.Int32
	stop := keepaliveWith("1", func() error { n.Add(1); return nil })
	time.Sleep(2500 * time.Millisecond)
	stop()
	if got := n.Load(); got < 1 || got > 3 {
		t.Fatalf("%d keepalives in 2.5 s at 1 s, want 2", got)
	}
	after := n.Load()
	time.Sleep(1200 * time.Millisecond)
	if n.Load() != after {
		t.Fatal("keepalives after stop")
	}
}

func TestPtySizeIsChecked(t *testing.T) {
	p := &envd.PTY{}
	if r, c, e := ptySize(p); e != nil || r != 24 || c != 80 {
		t.Fatalf("no size: %d %d %v", r, c, e)
	}
	p.Size = &struct {
		Cols envd.Uint32 `json:"cols"`
		Rows envd.Uint32 `json:"rows"`
	}{Cols: 100, Rows: 30}
	if r, c, e := ptySize(p); e != nil || r != 30 || c != 100 {
		t.Fatalf("100x30: %d %d %v", r, c, e)
	}
	for _, bad := range [][2]envd.Uint32{{0, 10}, {10, 0}, {1001, 10}, {10, 70000}} {
		p.Size.Cols, p.Size.Rows = bad[0], bad[1]
		if _, _, e := ptySize(p); e == nil || e.Code != envd.CodeInvalidArgument {
			t.Errorf("size %v accepted: %v", bad, e)
		}
	}
}

func TestMetricCPUPercentIsOverTheSampleSpan(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prev := sandbox.ResourceSample{At: t0, CPUUsage: time.Second, CPUs: 2}
	cur := sandbox.ResourceSample{At: t0.Add(time.Second), CPUUsage: 2 * time.Second, CPUs: 2,
		MemoryBytes: 300, MemoryWorkingSetBytes: 200, MemoryLimitBytes: 1000, DiskUsedBytes: 5, DiskLimitBytes: 50}
	m := metricOf(prev, cur)
	if m.CPUUsedPct != 50 || m.CPUCount != 2 || m.MemUsed != 200 || m.MemCache != 100 || m.MemTotal != 1000 || m.DiskUsed != 5 || m.DiskTotal != 50 {
		t.Fatalf("metric %+v", m)
	}
	// A counter that went back (a restart) gives no percentage, not a
	// negative one; no limits give the host's memory and used disk.
	cur.CPUUsage, cur.MemoryLimitBytes, cur.DiskLimitBytes = 0, 0, 0
	m = metricOf(prev, cur)
	if m.CPUUsedPct != 0 || m.MemTotal <= 0 || m.DiskTotal != 5 {
		t.Fatalf("metric %+v", m)
	}
}
