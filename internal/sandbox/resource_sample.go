package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// ResourceSample is a running sandbox's resource use at one moment, read
// from its cgroup and its dataset.
type ResourceSample struct {
	At time.Time
	// CPUUsage is the CPU time used since the sandbox started.
	CPUUsage time.Duration
	// CPUs is the sandbox's CPU quota in cores (0: none).
	CPUs float64
	// MemoryBytes is the cgroup's memory use, page cache included;
	// MemoryWorkingSetBytes is that less the inactive page cache.
	MemoryBytes           int64
	MemoryWorkingSetBytes int64
	// MemoryLimitBytes is the sandbox's memory limit (0: none).
	MemoryLimitBytes int64
	// DiskUsedBytes is the space its root's dataset uses; DiskLimitBytes
	// its disk quota (0: none).
	DiskUsedBytes  int64
	DiskLimitBytes int64
}

// SampleResources reads a running sandbox's resource use. A sandbox that
// is not running is errs.ErrConflict (it has no cgroup to read).
func (s *Service) SampleResources(ctx context.Context, tenant, id string) (ResourceSample, error) {
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return ResourceSample{}, err
	}
	if sb.State != store.StateRunning {
		return ResourceSample{}, fmt.Errorf("sandbox %s is %s, not running: %w", sb.Name, sb.State, errs.ErrConflict)
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		return ResourceSample{}, err
	}
	st, err := s.rt.Stats(ctx, sb.ID)
	if err != nil {
		return ResourceSample{}, fmt.Errorf("resource use of sandbox %s: %w", sb.Name, err)
	}
	out := ResourceSample{At: s.now(), CPUUsage: st.CPUUsage, CPUs: sp.Limits.CPUs, MemoryBytes: st.MemoryBytes,
		MemoryWorkingSetBytes: st.MemoryWorkingSetBytes, MemoryLimitBytes: sp.Limits.MemoryBytes, DiskLimitBytes: sp.Limits.DiskBytes}
	if used, err := s.pool.Usage(ctx, datasetName(sb.ID)); err == nil {
		out.DiskUsedBytes = used
	}
	return out, nil
}
