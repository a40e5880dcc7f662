package sandbox

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/tenancy"
)

// Tenant quotas are internal/tenancy's (quotas.go: the limits, the usage
// read from the shared store, the admission and its refusals). What is
// here is what this node's operations add to a tenant's usage, worked out
// from their specs and manifests, and the calls that admit it.

// quotaUse is an amount of each quota but the repository's, as the
// operations here write it (tenancy.Use, with the package's own short
// field names).
type quotaUse struct {
	running   int64
	cpus      float64
	memory    int64
	disk      int64
	volumes   int64
	snapshots int64
}

func (u quotaUse) use() tenancy.Use {
	return tenancy.Use{Running: u.running, CPUs: u.cpus, Memory: u.memory, Disk: u.disk, Volumes: u.volumes, Snapshots: u.snapshots}
}

func fromUse(u tenancy.Use) quotaUse {
	return quotaUse{running: u.Running, cpus: u.CPUs, memory: u.Memory, disk: u.Disk, volumes: u.Volumes, snapshots: u.Snapshots}
}

func (u quotaUse) plus(v quotaUse) quotaUse { return fromUse(u.use().Plus(v.use())) }

// admitQuota admits a rise of the tenant's usage by more for op
// (tenancy.Service.AdmitQuota); release once the records carrying it are
// stored or the operation failed.
func (s *Service) admitQuota(ctx context.Context, tenant, op string, more quotaUse) (release func(), err error) {
	return s.Tenancy.AdmitQuota(ctx, tenant, op, more.use())
}

// checkQuota checks a rise without holding it (tenancy.Service.CheckQuota).
func (s *Service) checkQuota(ctx context.Context, tenant, op string, more quotaUse) error {
	return s.Tenancy.CheckQuota(ctx, tenant, op, more.use())
}

// checkRunSize refuses limits whose cpus or memory alone exceed the
// tenant's limit (tenancy.Service.CheckRunSize).
func (s *Service) checkRunSize(ctx context.Context, tenant, op string, l client.Limits) error {
	return s.Tenancy.CheckRunSize(ctx, tenant, op, l)
}

// checkRepoQuota refuses a push once the tenant's repository usage has
// reached its limit (tenancy.Service.CheckRepoQuota).
func (s *Service) checkRepoQuota(ctx context.Context, tenant, op string) error {
	return s.Tenancy.CheckRepoQuota(ctx, tenant, op)
}

// quotaUsage counts what the tenant holds, from the store (for tests).
func (s *Service) quotaUsage(ctx context.Context, tenant string) (quotaUse, error) {
	u, err := s.Tenancy.QuotaUsage(ctx, tenant)
	return fromUse(u), err
}

// runUse is what running sb's limits adds to the running quotas.
func runUse(l client.Limits) quotaUse { return fromUse(tenancy.RunUse(l)) }

// admitStart admits the start of a stopped (or archived, or failed)
// sandbox: one more running sandbox of its size.
func (s *Service) admitStart(ctx context.Context, sb store.Sandbox) (release func(), err error) {
	sp, err := decodeSpec(sb)
	if err != nil {
		return nil, err
	}
	return s.admitQuota(ctx, sb.TenantID, "start sandbox "+sb.Name, runUse(sp.Limits))
}

// snapshotCount is how many local snapshots a snapshot of sb makes: one,
// and one per volume it mounts when they go with it.
func snapshotCount(sb store.Sandbox, withVolumes bool) int64 {
	n := int64(1)
	if sp, err := decodeSpec(sb); err == nil && withVolumes {
		seen := map[string]bool{}
		for _, vm := range sp.Volumes {
			if !seen[vm.Volume] {
				seen[vm.Volume] = true
				n++
			}
		}
	}
	return n
}

// forkUse is what n forks of limits l add (started unless noStart), with
// snaps snapshots taken for them.
func forkUse(n int, l client.Limits, noStart bool, snaps int64) quotaUse {
	one := quotaUse{disk: l.DiskBytes}
	if !noStart {
		one = one.plus(runUse(l))
	}
	u := quotaUse{snapshots: snaps}
	for range n {
		u = u.plus(one)
	}
	return u
}

// restoreUse is what restoring push m into a new sandbox adds (started
// unless noStart), with the volumes of pushes restored beside it: checked
// before any data moves; each part is admitted again as it is made.
func restoreUse(m *repo.Manifest, pushes map[string]volumePush, noStart bool) quotaUse {
	var sp spec
	_ = json.Unmarshal([]byte(m.Labels["spec"]), &sp)
	l := sp.Limits
	if l.DiskBytes <= 0 {
		it, _ := lookupInstanceType("")
		l.DiskBytes = it.Limits.DiskBytes
	}
	u := quotaUse{disk: l.DiskBytes}
	if !noStart {
		u = u.plus(runUse(l))
	}
	for _, vp := range pushes {
		u = u.plus(volumeRestoreUse(vp.m))
	}
	return u
}

// volumeRestoreUse is what restoring pushed volume m into a new volume
// adds.
func volumeRestoreUse(m *repo.Manifest) quotaUse {
	size, _ := strconv.ParseInt(m.Labels["size_bytes"], 10, 64)
	if size <= 0 {
		size = defaultVolumeBytes
	}
	return quotaUse{volumes: 1, disk: size}
}
