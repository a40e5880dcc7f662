package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/tenancy"
)

// OperationFinished is the event of a background operation's end (push,
// restore, pull, archive...). Data: kind, state (succeeded or failed),
// seconds, and bytes (uploaded for a push, downloaded for a restore or a
// pull) when the operation moved any. It is internal (events.Internal):
// the metrics count it, tenants never see it (they get backup.pushed and
// its kin).
const OperationFinished = events.InternalPrefix + "operation.finished"

// opEventData describes a finished operation for OperationFinished.
func opEventData(v client.Operation) map[string]string {
	d := map[string]string{"kind": v.Kind, "state": v.State, "op": v.ID}
	if v.EndedAt != nil {
		d["seconds"] = strconv.FormatFloat(v.EndedAt.Sub(v.StartedAt).Seconds(), 'f', -1, 64)
	}
	if v.State != "succeeded" || len(v.Result) == 0 {
		return d
	}
	switch v.Kind {
	case "push", "volume-push":
		var r client.PushResult
		if json.Unmarshal(v.Result, &r) == nil {
			d["bytes"] = strconv.FormatInt(r.BytesUploaded, 10)
		}
	case "restore", "pull", "volume-restore":
		var r client.RestoreResult
		if json.Unmarshal(v.Result, &r) == nil {
			d["bytes"] = strconv.FormatInt(r.BytesDownloaded, 10)
		}
	}
	return d
}

// SandboxesByState counts sandboxes by state, for the metrics.
func (s *Service) SandboxesByState(ctx context.Context) (map[string]int, error) {
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{IncludeDeleted: true})
	if err != nil {
		return nil, fmt.Errorf("count sandboxes: %w", err)
	}
	out := map[string]int{}
	for _, sb := range list {
		out[string(sb.State)]++
	}
	return out, nil
}

// PoolUsage reports the pool's used and total bytes, for the metrics.
func (s *Service) PoolUsage(ctx context.Context) (used, size int64, err error) {
	c, err := s.pool.Capacity(ctx)
	if err != nil {
		return 0, 0, err
	}
	return c.UsedBytes, c.SizeBytes, nil
}

// StorageSampler returns what the meter samples storage from: pool space
// of every sandbox root and volume (deleted ones too: they hold their
// space until purged), of every local snapshot, and each tenant's bytes in
// the repository (the sum of what its pushes stored, read at most every
// repoEvery: listing the pushes may be slow on an S3 server).
func (s *Service) StorageSampler(repoEvery time.Duration) *StorageSampler {
	return &StorageSampler{s: s, every: repoEvery}
}

// StorageSampler samples storage for the meter (metering.StorageSource).
type StorageSampler struct {
	s     *Service
	every time.Duration
	lead  func(context.Context) (context.Context, bool)

	mu     sync.Mutex
	repoAt time.Time
	repo   map[string]int64 // tenant → bytes
}

// RepositoryOnlyWhen makes the sampler count the repository's bytes only
// while lead says this node leads (in a cluster: the holder of the
// cluster's repository-meter job lease; the repository is shared, the
// pools are not). nil: always (a single node). It returns ss.
func (ss *StorageSampler) RepositoryOnlyWhen(lead func(context.Context) (context.Context, bool)) *StorageSampler {
	ss.lead = lead
	return ss
}

// StorageSamples implements metering.StorageSource.
func (ss *StorageSampler) StorageSamples(ctx context.Context) ([]store.StorageUsage, error) {
	s := ss.s
	var out []store.StorageUsage
	usage := func(tenant, subject, kind, dataset string) {
		b, err := s.pool.Usage(ctx, dataset)
		if err != nil {
			if !errors.Is(err, errs.ErrNotFound) {
				s.log.Warn("meter: dataset usage", "dataset", dataset, "err", err)
			}
			return
		}
		out = append(out, store.StorageUsage{TenantID: tenant, Subject: subject, Kind: kind, Bytes: b})
	}
	sbs, err := s.st.ListSandboxes(ctx, store.SandboxFilter{IncludeDeleted: true})
	if err != nil {
		return nil, fmt.Errorf("sample storage: %w", err)
	}
	sbs = s.owned(sbs) // each node samples the datasets in its own pool
	for _, sb := range sbs {
		if sb.State == store.StateCreating || sb.State == store.StateArchived {
			continue
		}
		usage(sb.TenantID, sb.ID, store.StoragePool, datasetName(sb.ID))
	}
	vols, err := s.st.ListVolumes(ctx, "", true)
	if err != nil {
		return nil, fmt.Errorf("sample storage: %w", err)
	}
	for _, v := range vols {
		usage(v.TenantID, v.ID, store.StoragePool, volumeDataset(v.ID))
	}
	tenants, err := s.st.ListTenants(ctx)
	if err != nil {
		return nil, fmt.Errorf("sample storage: %w", err)
	}
	for _, t := range tenants {
		snaps, err := s.st.ListSnapshots(ctx, t.ID, "")
		if err != nil {
			return nil, fmt.Errorf("sample storage: %w", err)
		}
		for _, sn := range snaps {
			usage(t.ID, sn.SandboxID, store.StorageSnapshots, snapshotDataset(sn.ID))
		}
	}
	for tenant, b := range ss.repoBytes(ctx, tenants) {
		out = append(out, store.StorageUsage{TenantID: tenant, Kind: store.StorageRepository, Bytes: b})
	}
	return out, nil
}

// repoBytes returns each tenant's bytes in the repository, listed again
// when the last listing is older than every.
func (ss *StorageSampler) repoBytes(ctx context.Context, tenants []store.Tenant) map[string]int64 {
	s := ss.s
	if ss.lead != nil {
		if _, ok := ss.lead(ctx); !ok {
			return nil
		}
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s.opts.Repo == nil {
		return nil
	}
	if ss.repo != nil && time.Since(ss.repoAt) < ss.every {
		return ss.repo
	}
	r, err := s.repository(ctx)
	if err != nil {
		if !errors.Is(err, repo.ErrNoRepository) {
			s.log.Warn("meter: open the repository", "err", err)
		}
		return ss.repo
	}
	out := map[string]int64{}
	for _, t := range tenants {
		b, err := tenantRepoBytes(ctx, r, t.ID)
		if err != nil {
			s.log.Warn("meter: read a tenant's repository usage", "tenant", t.ID, "err", err)
			continue
		}
		if b > 0 {
			out[t.ID] = b
		}
	}
	ss.repo, ss.repoAt = out, time.Now()
	return out
}

// repoUsage is the repository as the tenant quotas read it
// (tenancy.RepoUsage).
type repoUsage struct{ s *Service }

var _ tenancy.RepoUsage = repoUsage{}

// RepoConfigured implements tenancy.RepoUsage.
func (u repoUsage) RepoConfigured() bool { return u.s.opts.Repo != nil }

// OpenRepoUsage implements tenancy.RepoUsage.
func (u repoUsage) OpenRepoUsage(ctx context.Context) (func(ctx context.Context, tenant string) (int64, error), error) {
	r, err := u.s.repository(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, tenant string) (int64, error) { return tenantRepoBytes(ctx, r, tenant) }, nil
}

// tenantRepoBytes returns what the tenant's pushes keep in the repository
// (the sum of what each stored): what the meter samples and the
// repository_bytes quota bounds. A tenant that never pushed has 0.
func tenantRepoBytes(ctx context.Context, r *repo.Repository, tenant string) (int64, error) {
	sc, err := r.Scope(ctx, tenantScope(tenant), false)
	if errors.Is(err, errs.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("open the repository scope: %w", err)
	}
	ms, err := sc.Snapshots(ctx)
	if err != nil {
		return 0, fmt.Errorf("list the pushes: %w", err)
	}
	var n int64
	for _, m := range ms {
		n += m.Stats.AddedBytes
	}
	return n, nil
}
