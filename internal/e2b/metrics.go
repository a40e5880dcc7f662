package e2b

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/sandbox"
)

// sandboxMetric is E2B's SandboxMetric.
type sandboxMetric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// cpuWindow is the shortest span a CPU percentage is measured over: a
// first request for a sandbox reads its CPU time twice this far apart.
const cpuWindow = 200 * time.Millisecond

// metrics serves GET /sandboxes/{id}/metrics?start=&end= (Unix seconds):
// the sandbox's resource use now, from its cgroup (CPU, memory) and its
// dataset (disk), when now is in the window; stead keeps no history. A
// sandbox that is not running has none.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request, p api.Principal) {
	const op = "sandbox metrics"
	var bounds [2]int64
	for i, k := range []string{"start", "end"} {
		if v := r.URL.Query().Get(k); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				h.fail(w, r, op, fmt.Errorf("%s %q: want Unix seconds: %w", k, v, errs.ErrInvalid))
				return
			}
			bounds[i] = n
		}
	}
	if bounds[1] != 0 && bounds[0] > bounds[1] {
		h.fail(w, r, op, fmt.Errorf("start %d is after end %d: %w", bounds[0], bounds[1], errs.ErrInvalid))
		return
	}
	sb, err := h.get(r, p, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	out := []sandboxMetric{}
	now := h.opts.Now().Unix()
	if sb.State != "running" || (bounds[0] != 0 && now < bounds[0]) || (bounds[1] != 0 && now > bounds[1]+1) {
		writeJSON(w, http.StatusOK, out)
		return
	}
	key := target{p.TenantID, sb.ID}
	h.mu.Lock()
	prev, ok := h.samples[key]
	h.mu.Unlock()
	cur, err := h.b.SampleResources(r.Context(), p.TenantID, sb.ID)
	if err == nil && (!ok || cur.At.Sub(prev.At) < cpuWindow || cur.At.Sub(prev.At) > time.Minute) {
		prev = cur
		select {
		case <-time.After(cpuWindow):
		case <-r.Context().Done():
			return
		}
		cur, err = h.b.SampleResources(r.Context(), p.TenantID, sb.ID)
	}
	if errors.Is(err, errs.ErrConflict) { // stopped meanwhile
		writeJSON(w, http.StatusOK, out)
		return
	}
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	h.mu.Lock()
	h.samples[key] = cur
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, append(out, metricOf(prev, cur)))
}

// metricOf is the E2B metric of cur, its CPU use measured since prev.
func metricOf(prev, cur sandbox.ResourceSample) sandboxMetric {
	cpus := cur.CPUs
	if cpus <= 0 {
		cpus = float64(runtime.NumCPU())
	}
	m := sandboxMetric{Timestamp: cur.At.UTC(), TimestampUnix: cur.At.Unix(), CPUCount: int(math.Ceil(cpus)),
		MemUsed: cur.MemoryWorkingSetBytes, MemTotal: cur.MemoryLimitBytes, MemCache: cur.MemoryBytes - cur.MemoryWorkingSetBytes,
		DiskUsed: cur.DiskUsedBytes, DiskTotal: cur.DiskLimitBytes}
	if wall := cur.At.Sub(prev.At); wall > 0 && cur.CPUUsage >= prev.CPUUsage {
		pct := float64(cur.CPUUsage-prev.CPUUsage) / float64(wall) / cpus * 100
		m.CPUUsedPct = math.Round(min(pct, 100)*100) / 100
	}
	if m.MemTotal <= 0 {
		var si unix.Sysinfo_t
		if unix.Sysinfo(&si) == nil {
			m.MemTotal = int64(si.Totalram) * int64(si.Unit)
		}
	}
	if m.DiskTotal <= 0 {
		m.DiskTotal = m.DiskUsed
	}
	return m
}
