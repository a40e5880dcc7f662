package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/guest"
	"github.com/stead-dev/stead/internal/network/policy"
	"github.com/stead-dev/stead/internal/pool"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/session"
	"github.com/stead-dev/stead/internal/state"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/tasks"
	"github.com/stead-dev/stead/internal/template"
	"github.com/stead-dev/stead/internal/tenancy"
)

// Options configure a Service.
type Options struct {
	Store   store.Store
	Pool    pool.Pool
	Runtime steadrt.Runtime
	Logger  *slog.Logger
	// Version is the daemon's version string.
	Version string
	// DataDir is shown in Info.
	DataDir string
	// RuntimeName is shown in Info.
	RuntimeName string
	// CgroupVersion is shown in Info.
	CgroupVersion int
	// DeleteRetention is how long a soft-deleted sandbox stays restorable
	// (default 30 days).
	DeleteRetention time.Duration
	// RetentionWarnBefore is how long before an automatic deletion its
	// warning is given, for tenants whose retention policy sets none
	// (default DefaultRetentionWarnBefore; see retention.go).
	RetentionWarnBefore time.Duration
	// StopGrace is the default grace period of a service's stop hook
	// (default 30 s).
	StopGrace time.Duration
	// IdleCPUThreshold is the cpu share (of one core) under which a
	// sandbox counts as idle (default 0.05).
	IdleCPUThreshold float64
	// ActivitySources report activity the service cannot see itself to
	// the idle policy (network traffic, once networking exists); see
	// ActivitySource.
	ActivitySources []ActivitySource
	// Now returns the current time (tests may move it).
	Now func() time.Time
	// StageDir holds the private staging mounts of volume sub-paths
	// (default: a directory under the system temp dir).
	StageDir string
	// WarmDir holds one marker file per warm sandbox, written durably
	// before its dataset exists, so that the next daemon removes exactly
	// the warm sandboxes a dead one left and nothing else (default:
	// DataDir/warm; with neither, a dead daemon's warm sandboxes are left
	// in the pool, never guessed at).
	WarmDir string
	// AgentSockets, when set, serves the API inside every running sandbox
	// at /run/stead/api.sock for the sandbox's own token.
	AgentSockets AgentSockets
	// TokenKey signs sandbox-scoped tokens (HMAC-SHA256); it must stay the
	// same across daemon restarts. Without it sandboxes get no token.
	TokenKey []byte
	// SecretsKeyFile holds the key that seals the environment values given
	// at create (secrets.go); made, 0600, on first use. "" keeps a key in
	// memory only (tests).
	SecretsKeyFile string
	// SecretsKey, when 32 bytes, is that key itself instead of the file's:
	// the nodes of a cluster share one, so any node can start a sandbox
	// another sealed.
	SecretsKey []byte
	// Audit is the audit trail: it serves the audit routes and records the
	// transitions the daemon makes on its own (idle stops, crashes,
	// reconciliation, expiry purges). API requests are recorded by the API
	// layer. Nil records nothing.
	Audit *audit.Log
	// NodeName names this node in the manifests it pushes (repo.Writer);
	// in a cluster the Owner's node name is used.
	NodeName string
	// Repo is the off-box repository (nil: backup verbs answer that none
	// is configured).
	Repo *RepoConfig
	// DrillEnv runs drills into an empty data dir (nil: unsupported).
	DrillEnv DrillEnv
	// Events hears what the service does besides lifecycle transitions
	// (those come from the store: events.ObserveStore): network policy
	// changes, snapshots, pushes... Nil hears nothing.
	Events events.Sink
	// Net connects sandboxes to the network (nil: loopback only).
	Net *NetworkOptions
	// PoolOvercommit bounds the disk quotas of live sandboxes and volumes
	// together at this many times the pool's usable size (default
	// DefaultPoolOvercommit; see capacity.go).
	PoolOvercommit float64
	// Growth configures the limit warnings and large-file hints
	// (growth.go).
	Growth GrowthOptions
	// Owner holds the sandboxes' owner leases (owner.go; nil: this node
	// is the only one and owns every sandbox).
	Owner Owner
}

// AgentSockets serves the API on a per-sandbox unix socket.
type AgentSockets interface {
	// Open starts serving for sandbox id (idempotent) and returns the host
	// directory holding the socket, to be mounted at /run/stead.
	Open(id string) (string, error)
	// Close stops serving for id and removes its directory.
	Close(id string)
}

// Service runs sandboxes.
type Service struct {
	opts Options
	st   store.Store
	pool pool.Pool
	rt   steadrt.Runtime
	log  *slog.Logger

	locks idLocks // one mutex per sandbox id while someone holds or waits for it
	act   *activity

	// *state.Service serves checkpoint documents (api.CheckpointBackend).
	*state.Service
	// *session.Sessions serves the session log (api.SessionBackend).
	*session.Sessions
	// *tasks.Tasks serves structured state: tasks, observations,
	// key-value (api.TaskBackend).
	*tasks.Tasks
	// *audit.Backend serves the audit trail (api.AuditBackend).
	*audit.Backend
	rec audit.Recorder
	// *Tenancy serves tenants, keys, secrets, quotas and budgets
	// (cluster-wide; tenancy.go has the node's calls into it).
	*Tenancy

	ops       ops
	bk        backup
	secrets   *tenancy.SecretKey // seals environments; tenancy's too
	disk      diskAdmission
	portCache portEntries
	limits    limitWatch
	sched     schedState
	warm      warmPool // warm.go
	spares    spareSet // spares.go

	// tenantRelay sends a tenant's stop or purge of a sandbox to the node
	// that holds it (tenant_purge.go; nil: this service acts).
	tenantRelay cluster.TenantActions

	// lapsed are the sandboxes frozen because their lease lapsed with
	// the store out of reach (ownership.go).
	lapsedMu sync.Mutex
	lapsed   map[string]bool
}

// New returns a service. Call Reconcile before serving.
func New(opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.DeleteRetention == 0 {
		opts.DeleteRetention = 30 * 24 * time.Hour
	}
	if opts.StopGrace == 0 {
		opts.StopGrace = 30 * time.Second
	}
	if opts.IdleCPUThreshold == 0 {
		opts.IdleCPUThreshold = 0.05
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StageDir == "" {
		opts.StageDir = filepath.Join(os.TempDir(), "stead-stage")
	}
	if opts.Owner == nil {
		opts.Owner = soleOwner{}
	}
	if opts.WarmDir == "" && opts.DataDir != "" {
		opts.WarmDir = filepath.Join(opts.DataDir, "warm")
	}
	s := &Service{opts: opts, st: opts.Store, pool: opts.Pool, rt: opts.Runtime, log: opts.Logger, act: newActivity(), Service: state.New(opts.Store),
		Sessions: session.New(opts.Store),
		Tasks:    tasks.New(opts.Store),
		Backend:  audit.NewBackend(opts.Audit), rec: audit.Nop{},
		secrets: tenancy.NewSecretKey(opts.SecretsKeyFile, opts.SecretsKey)}
	s.spares.firstBase = baseMinServe
	if opts.Audit != nil {
		s.rec = opts.Audit
	}
	s.wireTenancy()
	if s.clustered() {
		// Every write of a sandbox record commits only under its lease.
		s.st = fencedStore{Store: opts.Store, owner: opts.Owner}
	}
	// The tenant's state_bytes quota gates every write of state outside
	// the sandboxes (internal/tenancy/statequota.go).
	s.Service.SetStateAdmit(s.admitState)
	s.Sessions.SetStateAdmit(s.admitState)
	s.Tasks.SetStateAdmit(s.admitState)
	// A session thread made without a retention gets the tenant's.
	s.Sessions.SetDefaultRetention(s.sessionDefault)
	s.disk.level = -1
	if opts.Net != nil && opts.Net.Manager != nil {
		s.opts.ActivitySources = append(s.opts.ActivitySources, &netActivity{n: opts.Net.Manager, last: map[string]uint64{}})
	}
	return s
}

func (s *Service) now() time.Time { return s.opts.Now().UTC() }

// lock serialises lifecycle changes of one sandbox.
func (s *Service) lock(id string) func() { return s.locks.lock(id) }

// idLocks is a mutex per id that exists only while it is held or waited
// for, so that a sandbox nobody works on (a stopped one) costs no memory.
type idLocks struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	mu    sync.Mutex
	users int // holders and waiters; guarded by idLocks.mu
}

// lock locks id's mutex and returns its unlock.
func (l *idLocks) lock(id string) func() {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*idLock{}
	}
	e := l.m[id]
	if e == nil {
		e = &idLock{}
		l.m[id] = e
	}
	e.users++
	l.mu.Unlock()
	e.mu.Lock()
	return sync.OnceFunc(func() {
		e.mu.Unlock()
		l.mu.Lock()
		if e.users--; e.users == 0 {
			delete(l.m, id)
		}
		l.mu.Unlock()
	})
}

// held returns how many ids have a mutex (for tests).
func (l *idLocks) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return "sb-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

func decodeSpec(sb store.Sandbox) (spec, error) {
	var sp spec
	if err := json.Unmarshal(sb.Spec, &sp); err != nil {
		return sp, fmt.Errorf("decode spec of sandbox %s: %w", sb.ID, err)
	}
	return sp, nil
}

func (s *Service) view(sb store.Sandbox) client.Sandbox {
	sp, _ := decodeSpec(sb)
	v := client.Sandbox{
		ID: sb.ID, Name: sb.Name, Tenant: sb.TenantID, Template: sb.TemplateID,
		State: string(sb.State), InstanceType: sp.InstanceType, Limits: sp.Limits,
		Service: sp.Service, Volumes: sp.Volumes, IdleTimeout: sp.IdleTimeout.String(), OnIdle: sp.OnIdle,
		StopReason: sb.StopReason, CreatedAt: sb.CreatedAt, StartedAt: sb.StartedAt,
		StoppedAt: sb.StoppedAt, DeletedAt: sb.DeletedAt, PurgeAt: sb.PurgeAt,
		Env:        envNames(sp.Env, client.SecretMask),
		Network:    policyOf(sp).API(),
		AutoResume: sp.AutoResume, Labels: sp.Labels,
		Secrets:  sp.SecretRefs,
		Warnings: s.limitWarnings(sb),
	}
	v.Failover, v.LastPushAt, v.LastPushID = failoverView(sb) // adopt.go
	if n := s.net(); n != nil {
		if a, ok := n.Addr(sb.ID); ok {
			v.Address = a.String()
		}
	}
	if sp.Service != nil {
		svc := *sp.Service
		svc.Env = envNames(svc.Env, client.SecretMask)
		if svc.Restart == "" {
			svc.Restart = defaultRestart // what the supervisor does
		}
		svc.Log = logView(svc.Log)
		v.Service = &svc
	}
	if sp.MaxRuntime > 0 {
		v.MaxRuntime = sp.MaxRuntime.String()
	}
	// The store keeps the last stop (orient shows it as last_stopped_at);
	// a sandbox that runs now, or is paused, has not stopped since it
	// started.
	switch sb.State {
	case store.StateRunning, store.StatePaused, store.StateCreating:
		v.StoppedAt = nil
	}
	if sb.State == store.StateRunning {
		v.StopReason = ""
	}
	return v
}

// defaultRestart is the restart policy of a service that names none.
const defaultRestart = "on-failure"

func datasetName(id string) string { return pool.KindSandbox + "/" + id }

// Info describes the daemon.
func (s *Service) Info(ctx context.Context) client.Info {
	return client.Info{
		Version: s.opts.Version, Pool: s.pool.Kind(), DataDir: s.opts.DataDir,
		Runtime: s.opts.RuntimeName, CgroupVersion: s.opts.CgroupVersion,
		InstanceTypes: InstanceTypes(), PoolCapacity: s.poolCapacity(ctx),
		Persistence: []string{
			"stop/start keeps every file of the root filesystem: /workspace, /data, /home/agent, /etc, /var, installed packages",
			"/tmp is a tmpfs: it is emptied on every stop (and counts against the memory limit)",
			"/proc, /sys and /dev are regenerated on every start",
			"pause/resume keeps processes and memory (cgroup freezer); stop/start restarts processes under the supervisor",
			"deleted sandboxes stay restorable (undelete) for the retention period, then are purged",
		},
	}
}

// CreateSandbox creates a sandbox from a template and, unless NoStart,
// starts it.
func (s *Service) CreateSandbox(ctx context.Context, tenant string, req client.CreateSandboxRequest) (client.Sandbox, error) {
	tCall := time.Now()
	it, err := lookupInstanceType(req.InstanceType)
	if err != nil {
		return client.Sandbox{}, err
	}
	sp := spec{InstanceType: it.Name, Limits: it.Limits, Env: req.Env, Service: req.Service, OnIdle: req.OnIdle, AutoResume: req.AutoResume}
	if err := checkLabels(req.Labels); err != nil {
		return client.Sandbox{}, err
	}
	sp.Labels = req.Labels
	if sp.Failover, err = failoverPolicy(req.Failover); err != nil { // adopt.go
		return client.Sandbox{}, err
	}
	if req.Network != nil {
		p, err := policy.Parse(*req.Network)
		if err != nil {
			return client.Sandbox{}, fmt.Errorf("network policy: %w", err)
		}
		canon := p.API()
		sp.Network = &canon
	}
	if err := checkLimits(client.Limits{DiskBytes: req.DiskBytes}); err != nil {
		return client.Sandbox{}, err
	}
	if req.DiskBytes > 0 {
		sp.InstanceType, sp.Limits.DiskBytes = "custom", req.DiskBytes
	}
	if sp.OnIdle == "" {
		sp.OnIdle = "stop"
	}
	if sp.OnIdle != "stop" && sp.OnIdle != "pause" {
		return client.Sandbox{}, fmt.Errorf("on_idle %q (want stop or pause): %w", req.OnIdle, errs.ErrInvalid)
	}
	if sp.IdleTimeout, err = parseDuration("idle_timeout", req.IdleTimeout, 15*time.Minute); err != nil {
		return client.Sandbox{}, err
	}
	if sp.MaxRuntime, err = parseDuration("max_runtime", req.MaxRuntime, 0); err != nil {
		return client.Sandbox{}, err
	}
	if _, err := envList(req.Env); err != nil {
		return client.Sandbox{}, err
	}
	if sp.SecretRefs, err = s.secretRefs(ctx, tenant, req); err != nil {
		return client.Sandbox{}, err
	}
	if _, err := s.serviceSpec(sp); err != nil {
		return client.Sandbox{}, err
	}
	if sp.Volumes, err = s.resolveVolumeMounts(ctx, tenant, req.Volumes); err != nil {
		return client.Sandbox{}, err
	}
	id := newID()
	name := req.Name
	if name == "" {
		name = id
	} else if err := checkName("sandbox", name); err != nil {
		return client.Sandbox{}, err
	}
	tmplID := req.Template
	if tmplID == "" {
		tmplID = "host"
	}
	tmpl, err := s.template(ctx, tenant, tmplID)
	if err != nil {
		return client.Sandbox{}, err
	}
	if err := s.templateHere(ctx, tmpl); err != nil {
		return client.Sandbox{}, err
	}
	if warmFits(req, sp) {
		if sb, ok, err := s.takeWarm(ctx, tenant, req.Name, tmpl, sp); ok {
			return sb, err
		}
	}
	specJSON, _ := json.Marshal(sp)
	tSpare := time.Now()
	tk := s.takeSpare(templateDataset(tenant, tmpl.ID)) // spares.go
	tMat := time.Now()
	out, err := s.materializeWith(ctx, tenant, id, name, tmpl, specJSON, tk.root(), req.NoStart)
	tDone := time.Now()
	tk.done(ctx)
	s.log.Debug("sandbox create call", "sandbox", id, "checks", tSpare.Sub(tCall), "spare", tMat.Sub(tSpare), "materialize", tDone.Sub(tMat), "spare_done", time.Since(tDone))
	return out, err
}

// materialize creates a sandbox record, clones its root from the dataset
// src (a template or a snapshot), applies its disk quota and, unless
// noStart, starts it. Crash ordering: the record exists ("creating")
// before the dataset, so Reconcile can remove a half-made sandbox.
func (s *Service) materialize(ctx context.Context, tenant, id, name string, tmpl store.Template, specJSON []byte, src string, noStart bool) (client.Sandbox, error) {
	return s.materializeWith(ctx, tenant, id, name, tmpl, specJSON, rootSource{how: "clone", fill: func(ctx context.Context, dst string) error {
		return s.pool.Clone(ctx, src, dst, pool.CloneOptions{})
	}}, noStart)
}

// rootSource makes a new sandbox's root dataset.
type rootSource struct {
	// how names the way in the log: "clone", "spare", "restore".
	how string
	// spare is the spare clone fill renames into place (spares.go), for
	// the record; "" for any other way.
	spare string
	// fill makes the root as dataset dst.
	fill func(ctx context.Context, dst string) error
	// starting, when set, is called between the root's quota and the
	// start of a sandbox that starts at once (not for noStart).
	starting func()
}

// materializeWith is materialize with the root dataset made by root (a
// clone, a spare clone renamed into place, or a restore from the
// repository).
func (s *Service) materializeWith(ctx context.Context, tenant, id, name string, tmpl store.Template, specJSON []byte, root rootSource, noStart bool) (client.Sandbox, error) {
	tAdmit := time.Now()
	var sp spec
	if err := json.Unmarshal(specJSON, &sp); err != nil {
		return client.Sandbox{}, fmt.Errorf("create sandbox %s: %w", name, err)
	}
	if sp.Limits.DiskBytes <= 0 {
		// A spec without a disk quota (restored from an older push) gets
		// the default type's: every sandbox is a bounded promise.
		it, _ := lookupInstanceType("")
		sp.Limits.DiskBytes = it.Limits.DiskBytes
	}
	// Exposure belongs to a sandbox, not to its files: a fork or a
	// restore exposes nothing until asked.
	sp.Ports = nil
	sp.Spare = root.spare // before the record: see spares.go, Crash ordering
	if !noStart {
		// Before any data moves: a start would fail without them.
		if err := s.checkSecretsSet(ctx, tenant, sp.SecretRefs); err != nil {
			return client.Sandbox{}, fmt.Errorf("create sandbox %s: %w", name, err)
		}
	}
	more := quotaUse{disk: sp.Limits.DiskBytes}
	if !noStart {
		more = more.plus(runUse(sp.Limits))
	}
	releaseQuota, err := s.admitQuota(ctx, tenant, "create sandbox "+name, more)
	if err != nil {
		return client.Sandbox{}, fmt.Errorf("create sandbox %s: %w", name, err)
	}
	defer releaseQuota() // once the sandbox is stored stopped or running, or is gone
	release, err := s.admitDisk(ctx, "disk quota of sandbox "+name, sp.Limits.DiskBytes, sp.Limits.DiskBytes)
	if err != nil {
		return client.Sandbox{}, fmt.Errorf("create sandbox %s: %w", name, err)
	}
	if err := s.sealEnv(id, &sp); err != nil {
		release()
		return client.Sandbox{}, fmt.Errorf("create sandbox %s: %w", name, err)
	}
	specJSON, _ = json.Marshal(sp)
	// The lease before the record: no other node can take the new id.
	if _, err := s.opts.Owner.Acquire(ctx, id); err != nil {
		release()
		return client.Sandbox{}, fmt.Errorf("create sandbox %s: take its lease: %w", name, err)
	}
	now := s.now()
	tRecord := time.Now()
	var leaseIn []netip.Prefix
	if n := s.net(); n != nil && !noStart {
		// The addresses in the record's commit: the attach finds them.
		leaseIn = n.Subnets()
	}
	rec, err := s.st.CreateSandbox(ctx, store.Sandbox{
		ID: id, TenantID: tenant, Name: name, TemplateID: tmpl.ID, State: store.StateCreating,
		Spec: specJSON, CreatedAt: now, UpdatedAt: now, LeaseIn: leaseIn,
	})
	release() // the record carries the promise now (or there is none)
	if err != nil {
		s.opts.Owner.Release(context.WithoutCancel(ctx), id)
	}
	if errors.Is(err, errs.ErrConflict) {
		// The store's error names the new id, not the name the user gave.
		return client.Sandbox{}, fmt.Errorf("create sandbox %s: the name is taken (a deleted sandbox keeps its name until it is purged): %w", name, errs.ErrConflict)
	}
	if err != nil {
		return client.Sandbox{}, err // the store's error names the sandbox
	}
	unlock := s.lock(id)
	defer unlock()
	ctx = context.WithoutCancel(ctx) // see transition
	cancelReserve := func() {}
	if n := s.net(); n != nil && !noStart {
		if rv, ok := s.rt.(steadrt.Reserver); ok {
			// And the network attach too, in what the start will use
			// (a shell made ahead), from now on.
			cancelReserve = rv.Reserve(ctx, id, s.attachFunc(n, rec, sp))
		}
	}
	fail := func(err error) (client.Sandbox, error) {
		cancelReserve()
		s.releaseNetwork(context.WithoutCancel(ctx), id)
		s.pool.Delete(context.WithoutCancel(ctx), datasetName(id))
		s.st.DeleteSandbox(context.WithoutCancel(ctx), tenant, id)
		s.opts.Owner.Release(context.WithoutCancel(ctx), id)
		return client.Sandbox{}, fmt.Errorf("create sandbox %s: %w", name, err)
	}
	t0 := time.Now()
	if err := root.fill(ctx, datasetName(id)); err != nil {
		return fail(err)
	}
	t1 := time.Now()
	if s.pool.Caps().Quota && sp.Limits.DiskBytes > 0 {
		if err := s.pool.SetQuota(ctx, datasetName(id), sp.Limits.DiskBytes); err != nil {
			return fail(err)
		}
	}
	// Where a create's time goes (bench/lifecycle reads fill and quota;
	// root says whether fill was a clone or the rename of a spare).
	s.log.Debug("sandbox root made", "sandbox", id, "root", root.how, "fill", t1.Sub(t0), "quota", time.Since(t1),
		"admit", tRecord.Sub(tAdmit), "record", t0.Sub(tRecord))
	rec.State = store.StateStopped
	rec.StopReason = "created"
	if noStart {
		rec, err = s.st.UpdateSandbox(ctx, rec)
		if err != nil {
			return fail(err)
		}
		s.log.Info("sandbox created", "sandbox", id, "tenant", tenant)
		return s.view(rec), nil
	}
	if root.starting != nil {
		root.starting()
	}
	rec, err = s.startLocked(ctx, rec, tmpl)
	if err != nil {
		return fail(err)
	}
	s.log.Info("sandbox created", "sandbox", id, "tenant", tenant)
	return s.view(rec), nil
}

// serviceSpec converts the API service into init's form.
func (s *Service) serviceSpec(sp spec) (*guest.ServiceSpec, error) {
	if sp.Service == nil {
		return nil, nil
	}
	svc := sp.Service
	if len(svc.Command) == 0 || svc.Command[0] == "" {
		return nil, fmt.Errorf("service command is empty: %w", errs.ErrInvalid)
	}
	if err := checkStrings("service command argument", svc.Command...); err != nil {
		return nil, err
	}
	if err := checkStrings("service cwd", svc.Cwd); err != nil {
		return nil, err
	}
	uid, gid, err := user(svc.User)
	if err != nil {
		return nil, err
	}
	env, err := envList(svc.Env)
	if err != nil {
		return nil, err
	}
	sig, err := signalNumber(svc.StopSignal)
	if err != nil {
		return nil, err
	}
	if _, err := parseDuration("stop_grace", svc.StopGrace, 0); err != nil {
		return nil, err
	}
	restart := svc.Restart
	if restart == "" {
		restart = defaultRestart
	}
	if restart != "always" && restart != "on-failure" && restart != "never" {
		return nil, fmt.Errorf("restart %q (want always, on-failure or never): %w", svc.Restart, errs.ErrInvalid)
	}
	lc, err := logConfig(svc.Log)
	if err != nil {
		return nil, err
	}
	return &guest.ServiceSpec{Command: svc.Command, Env: env, Cwd: svc.Cwd, UID: uid, GID: gid,
		Restart: restart, StopSignal: sig, StopLine: svc.StopLine, LogMaxSize: lc.MaxSize, LogKeep: lc.Keep}, nil
}

func (s *Service) stopGrace(sp spec) time.Duration {
	if sp.Service != nil {
		if d, err := parseDuration("stop_grace", sp.Service.StopGrace, 0); err == nil && d > 0 {
			return d
		}
	}
	return s.opts.StopGrace
}

// runtimeSpec builds what the runtime needs to start a sandbox.
func (s *Service) runtimeSpec(sb store.Sandbox, tmpl store.Template) (steadrt.Spec, error) {
	sp, err := decodeSpec(sb)
	if err != nil {
		return steadrt.Spec{}, err
	}
	if err := s.openEnv(sb.ID, &sp); err != nil {
		return steadrt.Spec{}, err
	}
	svc, err := s.serviceSpec(sp)
	if err != nil {
		return steadrt.Spec{}, err
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "STEAD_SANDBOX=" + sb.ID}
	if tmpl.Kind == "oci" && len(tmpl.Config) > 0 {
		var info template.ImageInfo
		if json.Unmarshal(tmpl.Config, &info) == nil && len(info.Env) > 0 {
			env = append(info.Env, "STEAD_SANDBOX="+sb.ID)
		}
	}
	user, _ := envList(sp.Env)
	env = append(env, user...)
	rs := steadrt.Spec{
		ID: sb.ID, Hostname: sb.Name, Rootfs: s.pool.Path(datasetName(sb.ID)),
		Limits: steadrt.Limits{CPUs: sp.Limits.CPUs, MemoryBytes: sp.Limits.MemoryBytes, Pids: sp.Limits.Pids},
		Env:    env, Service: svc, TmpBytes: sp.Limits.MemoryBytes / 4,
	}
	if tmpl.Kind == "host" {
		for _, m := range template.HostMounts() {
			rs.Mounts = append(rs.Mounts, steadrt.Mount{Source: m.Source, Destination: m.Destination, ReadOnly: m.ReadOnly})
		}
	}
	return rs, nil
}

// startLocked starts a stopped sandbox; the caller holds its lock.
func (s *Service) startLocked(ctx context.Context, sb store.Sandbox, tmpl store.Template) (store.Sandbox, error) {
	tPre := time.Now()
	if err := s.tenantMayRun(ctx, sb.TenantID); err != nil {
		return sb, err
	}
	if err := s.budgetMayRun(ctx, sb.TenantID, sb.ID); err != nil {
		return sb, err
	}
	rs, err := s.runtimeSpec(sb, tmpl)
	if err != nil {
		return sb, err
	}
	// A leftover runtime state (a crash between start and record) goes first.
	if st, _ := s.rt.Status(ctx, sb.ID); st != steadrt.StatusAbsent {
		s.rt.Kill(ctx, sb.ID)
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		return sb, err
	}
	vm, release, err := s.stagedMounts(ctx, sb.ID, sp.Volumes)
	if err != nil {
		return sb, err
	}
	rs.Mounts = append(rs.Mounts, vm...)
	s.withNetwork(&rs, sb, sp)
	releaseSecrets, err := s.withSecrets(ctx, &rs, sb.TenantID, sp)
	if err != nil {
		release()
		return sb, err
	}
	if dir, err := s.openAgentSocket(sb.ID); err != nil {
		release()
		releaseSecrets()
		return sb, err
	} else if dir != "" {
		rs.Mounts = append(rs.Mounts, steadrt.Mount{Source: dir, Destination: agentSocketDir, ReadOnly: true})
		rs.Env = append(rs.Env, "STEAD_API_SOCKET="+agentSocketDir+"/api.sock", "STEAD_TOKEN="+s.SandboxToken(sb.ID))
	}
	tStart := time.Now()
	err = s.rt.Start(ctx, rs)
	release()
	releaseSecrets()
	if err != nil {
		s.closeAgentSocket(sb.ID)
		s.detachNetwork(context.WithoutCancel(ctx), sb.ID)
		return sb, err
	}
	tStarted := time.Now()
	now := s.now()
	sb.State = store.StateRunning
	sb.StartedAt = &now
	sb.StopReason = ""
	updated, err := s.st.UpdateSandbox(ctx, sb)
	if err != nil {
		s.rt.Kill(context.WithoutCancel(ctx), sb.ID)
		s.detachNetwork(context.WithoutCancel(ctx), sb.ID)
		return sb, err
	}
	s.act.started(sb.ID, now)
	// Where a start's time goes outside the runtime (bench/lifecycle).
	s.log.Debug("sandbox start steps", "sandbox", sb.ID, "prepare", tStart.Sub(tPre), "runtime", tStarted.Sub(tStart), "record", time.Since(tStarted))
	return updated, nil
}

// template finds a template, building the host template on first use.
func (s *Service) template(ctx context.Context, tenant, id string) (store.Template, error) {
	t, err := s.st.GetTemplate(ctx, tenant, id)
	if err == nil || id != "host" || !errors.Is(err, errs.ErrNotFound) {
		if errors.Is(err, errs.ErrNotFound) {
			return t, fmt.Errorf("template %s: %w (stead template ls shows the templates)", id, errs.ErrNotFound)
		}
		return t, err // nil, or the store's error, which names the template
	}
	return s.ensureHostTemplate(ctx, tenant)
}

func (s *Service) get(ctx context.Context, tenant, id string) (store.Sandbox, error) {
	sb, err := s.st.GetSandbox(ctx, tenant, id)
	switch {
	case errors.Is(err, errs.ErrNotFound):
		// The store's error names the sandbox already ("get sandbox x:
		// not found"); say it as a user reads it, once.
		return sb, fmt.Errorf("sandbox %s: %w (stead list shows the sandboxes, list --all the deleted ones too)", id, errs.ErrNotFound)
	case err != nil:
		return sb, err // the store's error names the sandbox
	}
	return sb, nil
}

// GetSandbox returns one sandbox, with the large files of its state
// directories (growth.go).
func (s *Service) GetSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return client.Sandbox{}, err
	}
	v := s.view(sb)
	v.LargeStateFiles = s.largeStateFiles(ctx, tenant, sb)
	v.DeleteAt = s.retentionDeleteAt(ctx, sb)
	return v, nil
}

// ListSandboxes lists a tenant's sandboxes.
func (s *Service) ListSandboxes(ctx context.Context, tenant string, includeDeleted bool) ([]client.Sandbox, error) {
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: tenant, IncludeDeleted: includeDeleted})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := make([]client.Sandbox, 0, len(list))
	for _, sb := range list {
		v := s.view(sb)
		v.DeleteAt = s.retentionDeleteAt(ctx, sb)
		out = append(out, v)
	}
	return out, nil
}

// transition runs fn on a sandbox under its lock, after checking that its
// state is one of from. A state in already is the state the verb leads to:
// the sandbox is left as it is and the answer is an alreadyError (a
// conflict: `stead start` on a running sandbox exits 4, as the help says,
// and as `incus start` fails on a running instance), so a caller learns
// that nothing was done.
//
// Once the transition begins, it runs to the end even if the caller goes
// away: fn gets a context that is not cancelled with the request, so a
// client's Ctrl-C cannot cut a stop hook short or leave the store behind
// the runtime.
func (s *Service) transition(ctx context.Context, tenant, id, verb string, from, already []store.SandboxState, fn func(context.Context, store.Sandbox) (store.Sandbox, error)) (client.Sandbox, error) {
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return client.Sandbox{}, err
	}
	unlock := s.lock(sb.ID)
	defer unlock()
	if sb, err = s.get(ctx, tenant, sb.ID); err != nil {
		return client.Sandbox{}, err
	}
	for _, st := range already {
		if sb.State == st {
			return client.Sandbox{}, &alreadyError{verb: verb, name: sb.Name, state: sb.State}
		}
	}
	ok := false
	for _, st := range from {
		ok = ok || sb.State == st
	}
	if !ok {
		return client.Sandbox{}, fmt.Errorf("cannot %s sandbox %s: it is %s%s: %w", verb, sb.Name, sb.State, hint(verb, sb.State), errs.ErrConflict)
	}
	if err := s.mustHold(sb.ID, verb); err != nil {
		return client.Sandbox{}, err
	}
	sb, err = fn(context.WithoutCancel(ctx), sb)
	if err != nil {
		return client.Sandbox{}, fmt.Errorf("%s sandbox %s: %w", verb, sb.Name, err)
	}
	s.log.Info("sandbox "+verb, "sandbox", sb.ID, "tenant", sb.TenantID, "state", sb.State)
	return s.view(sb), nil
}

// alreadyError answers a lifecycle verb on a sandbox that is already in
// the state the verb leads to; it is an errs.ErrConflict.
type alreadyError struct {
	verb, name string
	state      store.SandboxState
}

func (e *alreadyError) Error() string {
	switch {
	case e.verb == "resume" && e.state == store.StateRunning:
		return fmt.Sprintf("sandbox %s is running, not paused; nothing was changed", e.name)
	case e.state == store.StatePaused:
		return fmt.Sprintf("sandbox %s is already paused; nothing was changed (stead resume thaws it)", e.name)
	case e.state == store.StateDeleted:
		return fmt.Sprintf("sandbox %s is already deleted; nothing was changed (stead undelete brings it back, delete --purge destroys it now)", e.name)
	}
	return fmt.Sprintf("sandbox %s is already %s; nothing was changed", e.name, e.state)
}

func (e *alreadyError) Unwrap() error { return errs.ErrConflict }

// isAlready reports whether err says the sandbox was already where a
// verb would have taken it.
func isAlready(err error) bool {
	var ae *alreadyError
	return errors.As(err, &ae)
}

func hint(verb string, st store.SandboxState) string {
	switch {
	case st == store.StateDeleted:
		return " (undelete it first)"
	case st == store.StateStopped && (verb == "pause" || verb == "resume"):
		return " (start it instead)"
	case st == store.StateCreating:
		return " (wait for the create to finish)"
	case st == store.StateLost:
		return lostHint // adopt.go
	}
	return ""
}

// StartSandbox starts a stopped sandbox, or resumes a paused one.
func (s *Service) StartSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	return s.transition(ctx, tenant, id, "start",
		[]store.SandboxState{store.StateStopped, store.StatePaused, store.StateError, store.StateArchived},
		[]store.SandboxState{store.StateRunning},
		func(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
			if sb.State == store.StatePaused {
				return s.resumeLocked(ctx, sb) // a paused sandbox counts as running already
			}
			releaseQuota, err := s.admitStart(ctx, sb)
			if err != nil {
				return sb, err
			}
			defer releaseQuota()
			if sb.State == store.StateArchived {
				// Hydrating brings the root back into the pool: promise its quota again.
				sp, err := decodeSpec(sb)
				if err != nil {
					return sb, err
				}
				release, err := s.admitDisk(ctx, "disk quota of sandbox "+sb.Name, sp.Limits.DiskBytes, sp.Limits.DiskBytes)
				if err != nil {
					return sb, err
				}
				sb, err = s.hydrateLocked(ctx, nil, sb)
				release()
				if err != nil {
					return sb, err
				}
			}
			tmpl, err := s.st.GetTemplate(ctx, sb.TenantID, sb.TemplateID)
			if err != nil {
				return sb, fmt.Errorf("template %s: %w", sb.TemplateID, err)
			}
			return s.startLocked(ctx, sb, tmpl)
		})
}

// StopSandbox stops a running or paused sandbox: the service's stop hook,
// its grace period, then every process ends; the files stay.
func (s *Service) StopSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	return s.stop(ctx, tenant, id, "user")
}

func (s *Service) stop(ctx context.Context, tenant, id, reason string) (client.Sandbox, error) {
	return s.transition(ctx, tenant, id, "stop",
		[]store.SandboxState{store.StateRunning, store.StatePaused, store.StateError},
		[]store.SandboxState{store.StateStopped},
		func(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
			return s.stopLocked(ctx, sb, reason)
		})
}

func (s *Service) stopLocked(ctx context.Context, sb store.Sandbox, reason string) (store.Sandbox, error) {
	sp, err := decodeSpec(sb)
	if err != nil {
		return sb, err
	}
	if err := s.rt.Stop(ctx, sb.ID, s.stopGrace(sp)); err != nil {
		return sb, err
	}
	s.closeAgentSocket(sb.ID)
	s.detachNetwork(ctx, sb.ID)
	now := s.now()
	sb.State = store.StateStopped
	sb.StoppedAt = &now
	sb.StopReason = reason
	s.act.forget(sb.ID)
	return s.st.UpdateSandbox(ctx, sb)
}

// PauseSandbox freezes a running sandbox (processes and memory stay).
func (s *Service) PauseSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	return s.pause(ctx, tenant, id, "user")
}

func (s *Service) pause(ctx context.Context, tenant, id, reason string) (client.Sandbox, error) {
	return s.transition(ctx, tenant, id, "pause",
		[]store.SandboxState{store.StateRunning},
		[]store.SandboxState{store.StatePaused},
		func(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
			if err := s.rt.Pause(ctx, sb.ID); err != nil {
				return sb, err
			}
			sb.State = store.StatePaused
			sb.StopReason = reason
			return s.st.UpdateSandbox(ctx, sb)
		})
}

// ResumeSandbox thaws a paused sandbox.
func (s *Service) ResumeSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	return s.transition(ctx, tenant, id, "resume",
		[]store.SandboxState{store.StatePaused},
		[]store.SandboxState{store.StateRunning},
		func(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) { return s.resumeLocked(ctx, sb) })
}

func (s *Service) resumeLocked(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	if err := s.tenantMayRun(ctx, sb.TenantID); err != nil {
		return sb, err
	}
	if err := s.budgetMayRun(ctx, sb.TenantID, sb.ID); err != nil {
		return sb, err
	}
	if err := s.rt.Resume(ctx, sb.ID); err != nil {
		return sb, err
	}
	sb.State = store.StateRunning
	sb.StopReason = ""
	s.act.touch(sb.ID, ActivityAPI, s.now())
	return s.st.UpdateSandbox(ctx, sb)
}

// DeleteSandbox soft-deletes a sandbox (stopping it first; its files stay
// until the retention ends), or with purge destroys it for good.
func (s *Service) DeleteSandbox(ctx context.Context, tenant, id string, purge bool) (client.Sandbox, error) {
	all := []store.SandboxState{store.StateRunning, store.StatePaused, store.StateStopped, store.StateError, store.StateDeleted}
	var already []store.SandboxState
	if !purge {
		already = []store.SandboxState{store.StateDeleted}
	}
	return s.transition(ctx, tenant, id, "delete", all, already, func(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
		if sb.State == store.StateRunning || sb.State == store.StatePaused || sb.State == store.StateError {
			var err error
			if sb, err = s.stopLocked(ctx, sb, "deleted"); err != nil {
				return sb, err
			}
		}
		now := s.now()
		if purge {
			// The answer describes what is left: nothing. It says so as a
			// deleted sandbox whose purge is done (purge_at: now).
			if err := s.purgeLocked(ctx, sb); err != nil {
				return sb, err
			}
			sb.State, sb.DeletedAt, sb.PurgeAt = store.StateDeleted, &now, &now
			return sb, nil
		}
		purgeAt := now.Add(s.purgeAfter(ctx, sb.TenantID)) // the tenant's retention (retention.go)
		sb.State = store.StateDeleted
		sb.DeletedAt = &now
		sb.PurgeAt = &purgeAt
		return s.st.UpdateSandbox(ctx, sb)
	})
}

func (s *Service) purgeLocked(ctx context.Context, sb store.Sandbox) error {
	s.rt.Kill(ctx, sb.ID)
	s.closeAgentSocket(sb.ID)
	if err := s.releaseNetwork(ctx, sb.ID); err != nil {
		return err
	}
	if err := s.pool.Delete(ctx, datasetName(sb.ID)); err != nil && !errors.Is(err, errs.ErrNotFound) {
		return err
	}
	if err := s.st.DeleteSandbox(ctx, sb.TenantID, sb.ID); err != nil && !errors.Is(err, errs.ErrNotFound) {
		return err
	}
	if err := s.opts.Owner.Release(ctx, sb.ID); err != nil {
		s.log.Warn("release the purged sandbox's lease (it lapses on its own)", "sandbox", sb.ID, "err", err)
	}
	s.act.forget(sb.ID)
	s.log.Info("sandbox purged", "sandbox", sb.ID, "tenant", sb.TenantID)
	return nil
}

// UndeleteSandbox restores a soft-deleted sandbox, stopped.
func (s *Service) UndeleteSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	return s.transition(ctx, tenant, id, "undelete",
		[]store.SandboxState{store.StateDeleted}, nil,
		func(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
			// A deleted sandbox promises nothing; an undeleted one does again.
			sp, err := decodeSpec(sb)
			if err != nil {
				return sb, err
			}
			releaseQuota, err := s.admitQuota(ctx, sb.TenantID, "undelete sandbox "+sb.Name, quotaUse{disk: sp.Limits.DiskBytes})
			if err != nil {
				return sb, err
			}
			defer releaseQuota()
			release, err := s.admitDisk(ctx, "disk quota of sandbox "+sb.Name, sp.Limits.DiskBytes, sp.Limits.DiskBytes)
			if err != nil {
				return sb, err
			}
			defer release()
			sb.State = store.StateStopped
			if archiveOf(sb) != "" { // deleted by retention while archived: it comes back archived,
				sb.State = store.StateArchived // and its retention counts afresh (retention.go)
				if err := setArchivedAt(&sb, s.now()); err != nil {
					return sb, err
				}
			}
			sb.DeletedAt, sb.PurgeAt = nil, nil
			sb.StopReason = "undeleted"
			return s.st.UpdateSandbox(ctx, sb)
		})
}

// ResizeSandbox changes the limits of a stopped sandbox.
func (s *Service) ResizeSandbox(ctx context.Context, tenant, id string, req client.ResizeRequest) (client.Sandbox, error) {
	var lim client.Limits
	itName := ""
	if req.InstanceType != "" {
		it, err := lookupInstanceType(req.InstanceType)
		if err != nil {
			return client.Sandbox{}, err
		}
		lim, itName = it.Limits, it.Name
	}
	if err := checkLimits(client.Limits{CPUs: req.CPUs, MemoryBytes: req.MemoryBytes, Pids: req.Pids, DiskBytes: req.DiskBytes}); err != nil {
		return client.Sandbox{}, fmt.Errorf("resize: %w", err)
	}
	return s.transition(ctx, tenant, id, "resize",
		[]store.SandboxState{store.StateStopped}, nil,
		func(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
			sp, err := decodeSpec(sb)
			if err != nil {
				return sb, err
			}
			oldDisk := sp.Limits.DiskBytes
			if itName != "" {
				sp.InstanceType, sp.Limits = itName, lim
			}
			custom := false
			if req.CPUs > 0 {
				sp.Limits.CPUs, custom = req.CPUs, true
			}
			if req.MemoryBytes > 0 {
				sp.Limits.MemoryBytes, custom = req.MemoryBytes, true
			}
			if req.Pids > 0 {
				sp.Limits.Pids, custom = req.Pids, true
			}
			if req.DiskBytes > 0 {
				sp.Limits.DiskBytes, custom = req.DiskBytes, true
			}
			if custom {
				sp.InstanceType = "custom"
			}
			if err := s.checkRunSize(ctx, sb.TenantID, "resize sandbox "+sb.Name, sp.Limits); err != nil {
				return sb, err
			}
			if sp.Limits.DiskBytes > oldDisk {
				releaseQuota, err := s.admitQuota(ctx, sb.TenantID, "resize sandbox "+sb.Name, quotaUse{disk: sp.Limits.DiskBytes - oldDisk})
				if err != nil {
					return sb, err
				}
				defer releaseQuota()
				release, err := s.admitDisk(ctx, "disk quota of sandbox "+sb.Name, sp.Limits.DiskBytes, sp.Limits.DiskBytes-oldDisk)
				if err != nil {
					return sb, err
				}
				defer release()
			}
			if s.pool.Caps().Quota {
				if err := s.pool.SetQuota(ctx, datasetName(sb.ID), sp.Limits.DiskBytes); err != nil {
					return sb, err
				}
			}
			if err := setSpec(&sb, sp); err != nil { // keeps the push schedule
				return sb, err
			}
			return s.st.UpdateSandbox(ctx, sb)
		})
}

// record appends a transition the daemon made on its own to the audit
// trail; a failure is logged (the transition has happened).
// event emits an event that is not a lifecycle transition.
func (s *Service) event(ctx context.Context, typ, tenant, sandbox string, data map[string]string) {
	if s.opts.Events == nil {
		return
	}
	s.opts.Events.Emit(context.WithoutCancel(ctx), events.Event{Time: s.now(), Type: typ, Tenant: tenant, Sandbox: sandbox, Data: data})
}

func (s *Service) record(ctx context.Context, tenant, action, target string, err error) {
	outcome := "ok"
	if err != nil {
		outcome = err.Error()
	}
	if rerr := s.rec.Record(context.WithoutCancel(ctx), audit.Entry{Actor: "daemon", Tenant: tenant, Action: action, Target: target, Outcome: outcome}); rerr != nil {
		s.log.Error("audit record", "action", action, "target", target, "err", rerr)
	}
}
