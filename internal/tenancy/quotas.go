package tenancy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/store"
)

// Tenant quotas. An admin bounds what a tenant may hold (store.TenantQuota;
// no record, or a nil field, is no limit):
//
//   - running_sandboxes: sandboxes running or paused (a paused sandbox
//     keeps its memory);
//   - cpus, memory_bytes: the instance sizes of those sandboxes, summed;
//   - disk_bytes: the disk promised in the pool, as
//     internal/sandbox/capacity.go counts it: disk quotas of live
//     sandboxes (not deleted, not archived) and sizes of live volumes;
//   - volumes: live volumes;
//   - snapshots: local snapshots, of sandboxes and volumes;
//   - repository_bytes: what the tenant's pushes keep in the repository,
//     as the meter counts it (sandbox.StorageSampler).
//
// Every path that raises a usage admits the rise first (AdmitQuota, which
// internal/sandbox calls from its operations: quota_use.go) and
// is refused, changing nothing, with an *errs.QuotaError (HTTP 429) and a
// quota.exceeded event: a create (started or not; a fork, a restore or a
// pull into a new sandbox), a start (a port's wake is a start), a hydrate,
// an undelete, a resize (disk; and cpus or memory beyond the limit on
// their own: such a sandbox could never start), a volume create, restore
// or undelete, a snapshot a user asks for (snapshot, volume snapshot, the
// snapshot of a fork of a sandbox, the safety snapshot of a rollback), and
// a push (sandbox or volume, scheduled ones and archives included) once
// the repository usage has reached its limit. A push's own point-in-time
// snapshot is exempt from the snapshot quota: each push replaces the
// previous one, and the repository quota governs the push. A resume adds
// nothing (a paused sandbox counts as running already). A rollback's
// restart of the sandbox it stopped is not checked (it was running).
//
// A lower limit than the usage is accepted: it refuses growth and takes
// nothing away.
//
// Atomicity. An admitted rise is held as pending from the check until the
// record that carries it is stored (then released). The check reads the
// tenant's usage from the store and adds what is pending, and no other
// check of the tenant runs meanwhile; a rise released during a check is
// either still pending or already in the store the check reads, so two
// concurrent starts cannot both take the last slot. (A rise is briefly
// counted twice, in the store and pending, which only errs on the safe
// side.) Nothing is held across a start or a clone, only across the store
// reads.
//
//   - On a single node (Options.Node ""), the pending rises are in this
//     process's memory; the tenant's mutex orders the checks, and a
//     release takes it too.
//   - In a cluster, they are in the store (store.QuotaRise), each with its
//     node and an expiry (Options.RiseTTL), and the checks run under the
//     tenant's admission lock in the store (AdmitQuotaRise: on PostgreSQL
//     a transaction-level advisory lock, which the server drops with the
//     transaction of a node that dies holding it), so creates racing on
//     several nodes cannot pass a limit together. A check reads the rises
//     before the usage, and a rise is deleted only after its record is
//     stored, so a release needs no lock: the check sees the rise, its
//     record, or both. A rise whose node died before releasing it counts
//     until the node starts again (ForgetNodeRises) or the rise expires
//     (refusing growth meanwhile, the safe side).

var _ api.QuotaBackend = (*Service)(nil)

// quotaNote is the reminder shown with a tenant's quotas.
const quotaNote = "a zero or absent limit is no limit; a limit below the usage is accepted and refuses further growth only " +
	"(nothing running is stopped, nothing stored is deleted); running_sandboxes, cpus and memory_bytes count running " +
	"and paused sandboxes; disk_bytes counts the disk quotas of live sandboxes and the sizes of live volumes; a push is " +
	"refused once repository_bytes is reached"

// Use is an amount of each quota but the repository's and the state's:
// what a tenant holds, or what an operation adds.
type Use struct {
	// Running counts sandboxes running or paused.
	Running int64
	// CPUs and Memory are the summed instance sizes of those sandboxes.
	CPUs   float64
	Memory int64
	// Disk is the disk promised in the pool (capacity.go of
	// internal/sandbox counts it the same way).
	Disk      int64
	Volumes   int64
	Snapshots int64
}

// Plus returns u and v added (saturating the byte counts).
func (u Use) Plus(v Use) Use {
	return Use{Running: u.Running + v.Running, CPUs: u.CPUs + v.CPUs, Memory: addSat(u.Memory, v.Memory),
		Disk: addSat(u.Disk, v.Disk), Volumes: u.Volumes + v.Volumes, Snapshots: u.Snapshots + v.Snapshots}
}

// Minus returns u less v.
func (u Use) Minus(v Use) Use {
	return Use{Running: u.Running - v.Running, CPUs: u.CPUs - v.CPUs, Memory: u.Memory - v.Memory,
		Disk: u.Disk - v.Disk, Volumes: u.Volumes - v.Volumes, Snapshots: u.Snapshots - v.Snapshots}
}

// addSat adds b (negative counts as 0) to a, saturating at MaxInt64.
func addSat(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + max(b, 0)
}

// RunUse is what running a sandbox of limits l adds to the running
// quotas.
func RunUse(l client.Limits) Use {
	return Use{Running: 1, CPUs: l.CPUs, Memory: l.MemoryBytes}
}

// specLimits is the part of a stored sandbox spec the quotas read (the
// spec is internal/sandbox's; its JSON is the contract).
type specLimits struct {
	Limits client.Limits `json:"limits"`
}

// quotaGates holds each tenant's admission state.
type quotaGates struct {
	mu      sync.Mutex
	tenants map[string]*quotaGate
}

// quotaGate is one tenant's admission state: its mutex and its pending
// rises.
type quotaGate struct {
	mu      sync.Mutex
	pending Use
	// state is the tenant's counted state bytes (statequota.go).
	state stateUse
}

func (g *quotaGates) get(tenant string) *quotaGate {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tenants == nil {
		g.tenants = map[string]*quotaGate{}
	}
	t, ok := g.tenants[tenant]
	if !ok {
		t = &quotaGate{}
		g.tenants[tenant] = t
	}
	return t
}

// QuotaUsage counts what the tenant holds, from the store (without the
// rises admitted and not stored yet).
func (s *Service) QuotaUsage(ctx context.Context, tenant string) (Use, error) {
	var u Use
	sbs, err := s.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: tenant})
	if err != nil {
		return u, fmt.Errorf("count the tenant's sandboxes: %w", err)
	}
	for _, sb := range sbs {
		var sp specLimits
		if json.Unmarshal(sb.Spec, &sp) != nil {
			continue
		}
		if sb.State == store.StateRunning || sb.State == store.StatePaused {
			u = u.Plus(RunUse(sp.Limits))
		}
		if sb.State != store.StateArchived && sb.State != store.StateDeleted {
			u.Disk = addSat(u.Disk, sp.Limits.DiskBytes)
		}
	}
	vols, err := s.st.ListVolumes(ctx, tenant, false)
	if err != nil {
		return u, fmt.Errorf("count the tenant's volumes: %w", err)
	}
	for _, v := range vols {
		if v.State != "deleted" {
			u.Volumes++
			u.Disk = addSat(u.Disk, v.SizeBytes)
		}
	}
	snaps, err := s.st.ListSnapshots(ctx, tenant, "")
	if err != nil {
		return u, fmt.Errorf("count the tenant's snapshots: %w", err)
	}
	u.Snapshots = int64(len(snaps))
	return u, nil
}

// AdmitQuota admits a rise of the tenant's usage by more for op (what is
// refused: "start sandbox web"), or refuses it with an *errs.QuotaError
// naming the first quota it would exceed (and a quota.exceeded event).
// The rise is held as pending until release is called, which the caller
// does once the records that carry it are stored, or the operation has
// failed. See the atomicity paragraph above.
func (s *Service) AdmitQuota(ctx context.Context, tenant, op string, more Use) (release func(), err error) {
	q, err := s.st.GetTenantQuota(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("%s: read the tenant's quotas: %w", op, err)
	}
	if q.IsZero() {
		return func() {}, nil
	}
	if s.opts.Node != "" {
		return s.admitShared(ctx, tenant, op, q, more)
	}
	g := s.quota.get(tenant)
	g.mu.Lock()
	defer g.mu.Unlock()
	use, err := s.QuotaUsage(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	use = use.Plus(g.pending)
	if qe := exceeded(q, use, more); qe != nil {
		qe.Op = op
		return nil, s.refuseQuota(ctx, tenant, qe)
	}
	g.pending = g.pending.Plus(more)
	return sync.OnceFunc(func() {
		g.mu.Lock()
		g.pending = g.pending.Minus(more)
		g.mu.Unlock()
	}), nil
}

// admitShared is AdmitQuota in a cluster: the rise is admitted under the
// tenant's admission lock in the store and held there, as a
// store.QuotaRise, until release deletes it.
func (s *Service) admitShared(ctx context.Context, tenant, op string, q store.TenantQuota, more Use) (func(), error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	now := s.now()
	r := store.QuotaRise{ID: "qr-" + hex.EncodeToString(b[:]), TenantID: tenant, Node: s.opts.Node,
		Running: max(more.Running, 0), CPUs: max(more.CPUs, 0), MemoryBytes: max(more.Memory, 0),
		DiskBytes: max(more.Disk, 0), Volumes: max(more.Volumes, 0), Snapshots: max(more.Snapshots, 0),
		ExpiresAt: now.Add(s.opts.RiseTTL)}
	var refused *errs.QuotaError
	err := s.st.AdmitQuotaRise(ctx, r, now, func(ctx context.Context, pending []store.QuotaRise) error {
		use, err := s.QuotaUsage(ctx, tenant)
		if err != nil {
			return err
		}
		for _, p := range pending {
			use = use.Plus(Use{Running: p.Running, CPUs: p.CPUs, Memory: p.MemoryBytes, Disk: p.DiskBytes,
				Volumes: p.Volumes, Snapshots: p.Snapshots})
		}
		refused = exceeded(q, use, more)
		if refused != nil {
			return refused
		}
		return nil
	})
	if refused != nil {
		refused.Op = op
		return nil, s.refuseQuota(ctx, tenant, refused)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return sync.OnceFunc(func() {
		if err := s.st.DeleteQuotaRise(context.WithoutCancel(ctx), r.ID); err != nil {
			s.log.Warn("release an admitted quota rise (it counts until its expiry)", "tenant", tenant, "rise", r.ID,
				"expires_at", r.ExpiresAt, "err", err)
		}
	}), nil
}

// ForgetNodeRises deletes, in a cluster, the rises this node admitted
// before it (re)started: their operations ended with the process, and no
// release will come for them (otherwise they would count until their
// expiry). Call it at start-up, before serving; on a single node it does
// nothing.
func (s *Service) ForgetNodeRises(ctx context.Context) error {
	if s.opts.Node == "" {
		return nil
	}
	return s.st.DeleteNodeQuotaRises(ctx, s.opts.Node)
}

// CheckQuota is AdmitQuota for a check that holds nothing: the operation
// admits its rises itself later (a fork checks all its sandboxes at once,
// so that it is all or nothing, before each one is admitted as it is
// made).
func (s *Service) CheckQuota(ctx context.Context, tenant, op string, more Use) error {
	release, err := s.AdmitQuota(ctx, tenant, op, more)
	if err != nil {
		return err
	}
	release()
	return nil
}

// exceeded returns the first quota of q that use plus more would exceed
// (only quotas that more raises count), or nil.
func exceeded(q store.TenantQuota, use, more Use) *errs.QuotaError {
	ints := []struct {
		name       string
		limit      *int64
		use, asked int64
	}{
		{errs.QuotaRunningSandboxes, q.RunningSandboxes, use.Running, more.Running},
		{errs.QuotaMemoryBytes, q.MemoryBytes, use.Memory, more.Memory},
		{errs.QuotaDiskBytes, q.DiskBytes, use.Disk, more.Disk},
		{errs.QuotaVolumes, q.Volumes, use.Volumes, more.Volumes},
		{errs.QuotaSnapshots, q.Snapshots, use.Snapshots, more.Snapshots},
	}
	for i, c := range ints {
		if i == 1 && q.CPUs != nil && *q.CPUs > 0 && more.CPUs > 0 && use.CPUs+more.CPUs > *q.CPUs+1e-9 {
			// cpus come right after running_sandboxes.
			return &errs.QuotaError{Quota: errs.QuotaCPUs, Limit: *q.CPUs, Usage: roundCPUs(use.CPUs), Requested: more.CPUs}
		}
		if c.limit != nil && *c.limit > 0 && c.asked > 0 && addSat(c.use, c.asked) > *c.limit {
			return &errs.QuotaError{Quota: c.name, Limit: float64(*c.limit), Usage: float64(c.use), Requested: float64(c.asked)}
		}
	}
	return nil
}

// roundCPUs hides the float sum's last-digit noise (0.1+0.2).
func roundCPUs(v float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', 6, 64), 64)
	return r
}

// refuseQuota reports a refusal: a log line and a quota.exceeded event
// (data: quota, limit, usage, requested, op). It returns qe.
func (s *Service) refuseQuota(ctx context.Context, tenant string, qe *errs.QuotaError) error {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	s.log.Info("quota exceeded", "tenant", tenant, "quota", qe.Quota, "limit", f(qe.Limit), "usage", f(qe.Usage),
		"requested", f(qe.Requested), "op", qe.Op)
	s.event(ctx, events.QuotaExceeded, tenant, "", map[string]string{"quota": qe.Quota, "limit": f(qe.Limit),
		"usage": f(qe.Usage), "requested": f(qe.Requested), "op": qe.Op})
	return qe
}

// CheckRunSize refuses limits whose cpus or memory alone exceed the
// tenant's limit: a sandbox of that size could never start (a resize).
func (s *Service) CheckRunSize(ctx context.Context, tenant, op string, l client.Limits) error {
	q, err := s.st.GetTenantQuota(ctx, tenant)
	if err != nil {
		return fmt.Errorf("%s: read the tenant's quotas: %w", op, err)
	}
	if qe := exceeded(q, Use{}, Use{CPUs: l.CPUs, Memory: l.MemoryBytes}); qe != nil {
		use, err := s.QuotaUsage(ctx, tenant)
		if err == nil {
			qe.Usage = float64(use.Memory)
			if qe.Quota == errs.QuotaCPUs {
				qe.Usage = roundCPUs(use.CPUs)
			}
		}
		qe.Op = op
		return s.refuseQuota(ctx, tenant, qe)
	}
	return nil
}

// CheckRepoQuota refuses a push of the tenant once its repository usage
// has reached its limit (what a push will add is not known before it
// runs). The usage is read from the repository, as the meter reads it.
func (s *Service) CheckRepoQuota(ctx context.Context, tenant, op string) error {
	q, err := s.st.GetTenantQuota(ctx, tenant)
	if err != nil {
		return fmt.Errorf("%s: read the tenant's quotas: %w", op, err)
	}
	if q.RepositoryBytes == nil || *q.RepositoryBytes <= 0 {
		return nil
	}
	if s.opts.Repo == nil {
		return fmt.Errorf("%s: no repository is configured: %w", op, errs.ErrUnsupported)
	}
	tenantRepoBytes, err := s.opts.Repo.OpenRepoUsage(ctx)
	if err != nil {
		return err
	}
	used, err := tenantRepoBytes(ctx, tenant)
	if err != nil {
		return fmt.Errorf("%s: read the tenant's repository usage: %w", op, err)
	}
	if used >= *q.RepositoryBytes {
		return s.refuseQuota(ctx, tenant, &errs.QuotaError{Quota: errs.QuotaRepositoryBytes, Op: op,
			Limit: float64(*q.RepositoryBytes), Usage: float64(used)})
	}
	return nil
}

// TenantQuotas returns a tenant's quotas with its usage (the repository's
// read from the repository when one is configured).
func (s *Service) TenantQuotas(ctx context.Context, tenant string) (client.TenantQuotas, error) {
	if _, err := s.ReadTenant(ctx, tenant); err != nil {
		return client.TenantQuotas{}, err
	}
	q, err := s.st.GetTenantQuota(ctx, tenant)
	if err != nil {
		return client.TenantQuotas{}, err
	}
	use, err := s.QuotaUsage(ctx, tenant)
	if err != nil {
		return client.TenantQuotas{}, err
	}
	out := client.TenantQuotas{Tenant: tenant, Limits: limitsView(q), Note: quotaNote,
		Usage: client.QuotaUsage{RunningSandboxes: use.Running, CPUs: roundCPUs(use.CPUs), MemoryBytes: use.Memory,
			DiskBytes: use.Disk, Volumes: use.Volumes, Snapshots: use.Snapshots}}
	if out.Usage.StateBytes, err = s.st.StateBytes(ctx, tenant); err != nil {
		return client.TenantQuotas{}, err
	}
	if !q.UpdatedAt.IsZero() {
		at := q.UpdatedAt
		out.UpdatedAt = &at
	}
	if s.opts.Repo != nil && s.opts.Repo.RepoConfigured() {
		if tenantRepoBytes, err := s.opts.Repo.OpenRepoUsage(ctx); err == nil {
			if b, err := tenantRepoBytes(ctx, tenant); err == nil {
				out.Usage.RepositoryBytes, out.RepositoryKnown = b, true
			} else {
				s.log.Warn("read a tenant's repository usage", "tenant", tenant, "err", err)
			}
		} else if !errors.Is(err, repo.ErrNoRepository) {
			s.log.Warn("open the repository", "err", err)
		}
	}
	return out, nil
}

// SetTenantQuotas changes the limits req names (0 clears one, an absent
// field keeps it) and returns the quotas with the usage. A negative limit
// is errs.ErrInvalid and changes nothing. A limit below the usage is
// accepted: it refuses further growth only.
func (s *Service) SetTenantQuotas(ctx context.Context, tenant string, req client.SetQuotasRequest) (client.TenantQuotas, error) {
	if _, err := s.ReadTenant(ctx, tenant); err != nil {
		return client.TenantQuotas{}, err
	}
	// One writer per tenant: two partial updates do not lose each other.
	g := s.quota.get(tenant)
	g.mu.Lock()
	q, err := s.st.GetTenantQuota(ctx, tenant)
	if err != nil {
		g.mu.Unlock()
		return client.TenantQuotas{}, err
	}
	for _, f := range []struct {
		name string
		in   *int64
		dst  **int64
	}{
		{client.QuotaRunningSandboxes, req.RunningSandboxes, &q.RunningSandboxes},
		{client.QuotaMemoryBytes, req.MemoryBytes, &q.MemoryBytes},
		{client.QuotaDiskBytes, req.DiskBytes, &q.DiskBytes},
		{client.QuotaVolumes, req.Volumes, &q.Volumes},
		{client.QuotaRepositoryBytes, req.RepositoryBytes, &q.RepositoryBytes},
		{client.QuotaSnapshots, req.Snapshots, &q.Snapshots},
		{client.QuotaStateBytes, req.StateBytes, &q.StateBytes},
	} {
		switch {
		case f.in == nil:
		case *f.in < 0:
			g.mu.Unlock()
			return client.TenantQuotas{}, fmt.Errorf("quota %s %d: a limit is positive, or 0 for none: %w", f.name, *f.in, errs.ErrInvalid)
		case *f.in == 0:
			*f.dst = nil
		default:
			v := *f.in
			*f.dst = &v
		}
	}
	if c := req.CPUs; c != nil {
		switch {
		case !(*c >= 0) || *c > 1e6:
			g.mu.Unlock()
			return client.TenantQuotas{}, fmt.Errorf("quota cpus %g: a limit is a positive number of cores, or 0 for none: %w", *c, errs.ErrInvalid)
		case *c == 0:
			q.CPUs = nil
		default:
			v := *c
			q.CPUs = &v
		}
	}
	q.TenantID, q.UpdatedAt = tenant, s.now()
	_, err = s.st.SetTenantQuota(ctx, q)
	g.mu.Unlock()
	if err != nil {
		return client.TenantQuotas{}, err
	}
	s.log.Info("tenant quotas set", "tenant", tenant)
	return s.TenantQuotas(ctx, tenant)
}

// limitsView is the API's view of a quota record (0: no limit).
func limitsView(q store.TenantQuota) client.QuotaLimits {
	v := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	l := client.QuotaLimits{RunningSandboxes: v(q.RunningSandboxes), MemoryBytes: v(q.MemoryBytes), DiskBytes: v(q.DiskBytes),
		Volumes: v(q.Volumes), RepositoryBytes: v(q.RepositoryBytes), Snapshots: v(q.Snapshots), StateBytes: v(q.StateBytes)}
	if q.CPUs != nil {
		l.CPUs = *q.CPUs
	}
	return l
}
