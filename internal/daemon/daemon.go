// Package daemon wires stead's parts into the running daemon: metadata
// store, storage pool, runtime, sandbox service and the HTTP API on TCP and
// a unix socket.
package daemon

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/blobstore/local"
	"github.com/stead-dev/stead/internal/blobstore/s3"
	"github.com/stead-dev/stead/internal/budget"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/network"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/pool/btrfs"
	"github.com/stead-dev/stead/internal/pool/dir"
	"github.com/stead-dev/stead/internal/runtime/linux"
	"github.com/stead-dev/stead/internal/sandbox"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/postgres"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// Config configures the daemon.
type Config struct {
	// DataDir holds the metadata database, the pool and admin.key.
	DataDir string
	// NodeName names this daemon in the node registry (default: the host
	// name); it must be unique among the daemons on one store.
	NodeName string
	// NodeAddress is where other nodes reach this daemon (default: Listen).
	NodeAddress string
	// NodeHeartbeat is how often the node's heartbeat is refreshed (0:
	// cluster.DefaultInterval); NodeGrace how old a heartbeat may be for
	// its node to count as alive (0: three heartbeats).
	NodeHeartbeat, NodeGrace time.Duration
	// ClusterSecretFile, when set, makes this daemon a node of a cluster:
	// several daemons on one PostgreSQL store and one repository, each
	// acting only on the sandboxes whose owner lease it holds. The file
	// holds the secret every node shares (at least 32 bytes, mode 0600):
	// it signs node-to-node calls and derives the keys the nodes share.
	ClusterSecretFile string
	// LeaseTTL is how long a sandbox's owner lease lasts unless renewed
	// (0: cluster.DefaultLeaseTTL); cluster mode only.
	LeaseTTL time.Duration
	// Store names the metadata store: "" (or "sqlite") for the embedded
	// SQLite database DataDir/stead.db, or a postgres:// (postgresql://)
	// URL for a PostgreSQL database.
	Store string
	// RunDir holds runtime state (tmpfs: it must not survive a reboot).
	RunDir string
	// Listen is the TCP address of the API ("" disables TCP).
	Listen string
	// Socket is the unix socket path of the API ("" disables it).
	Socket string
	// Pool is "btrfs" (default) or "dir".
	Pool string
	// PoolImageSize is the size of a new loop-backed btrfs image (0: half
	// of the free space where it goes).
	PoolImageSize int64
	// PoolReserve is the pool space kept from sandboxes and volumes (0:
	// pool.DefaultReserve).
	PoolReserve int64
	// PoolOvercommit bounds the disk promised to live sandboxes and volumes
	// (0: sandbox.DefaultPoolOvercommit).
	PoolOvercommit float64
	// Growth configures the limit warnings and the large-state-file hint
	// (zero values: the defaults).
	Growth sandbox.GrowthOptions
	// Warm lists the warm pools: per tenant and template, how many
	// started sandboxes are kept ready for plain creates (sandbox/warm.go).
	Warm []sandbox.WarmSpec
	// Spares is how many spare clones of each template a create used
	// recently a btrfs pool keeps ready, so that a create renames one
	// into place instead of cloning (sandbox.RunSpares): 0 means
	// sandbox.DefaultSpares, a negative number none.
	Spares int
	// PolicyInterval is how often idle and retention policies run.
	PolicyInterval time.Duration
	// AuditCheckpointInterval is how often the audit trail's head is
	// signed and witnessed when it moved (0: audit.DefaultCheckpointInterval);
	// a kill -9 leaves at most this much of the trail unsigned.
	AuditCheckpointInterval time.Duration
	// NoAuditRepoWitness keeps the audit trail's witness out of the
	// repository (drill daemons: theirs would outlive them there).
	NoAuditRepoWitness bool
	// StopGrace overrides the default service stop grace (30 s).
	StopGrace time.Duration
	// DeleteRetention and RetentionWarnBefore are the retention defaults
	// of tenants that set none (0: 30 days; 3 days).
	DeleteRetention, RetentionWarnBefore time.Duration
	// Repo is the off-box repository: a directory, file:///dir or
	// s3://host:port/bucket/prefix ("" = none). S3 credentials come from
	// the environment or a credentials file (see s3.ParseURL); inline
	// ones (s3://ACCESS:SECRET@...) work but are logged as a warning.
	Repo string
	// RepoCredentialsFile is a file with the S3 credentials (AWS format,
	// 0600); "" looks in the environment and ~/.aws/credentials.
	RepoCredentialsFile string
	// RepoKeyFile holds the repository's master key (default DATA/repo.key).
	RepoKeyFile string
	// Metering configures the meter and the Prometheus metrics.
	Metering MeteringConfig
	// BudgetInterval is how often budgets are checked (0:
	// budget.DefaultInterval).
	BudgetInterval time.Duration
	// NoUserNS runs sandboxes without user namespaces (root inside is
	// root on the host): for measurements only.
	NoUserNS bool
	// Runtime is how sandboxes are set up: "native" (stead's own setup,
	// runtime/linux's native.go) or "libcontainer"; empty is native.
	Runtime string
	// ExpediteRCU turns on the host's expedited RCU grace periods
	// (linux.Options.ExpediteRCU).
	ExpediteRCU bool
	// Shells is how many sandbox inits the native runtime spawns ahead
	// (linux.Options.Shells).
	Shells int
	// PoolFullQgroups gives a new btrfs pool full qgroup accounting instead
	// of simple quotas (for measurements: btrfs.Options.FullQgroups).
	PoolFullQgroups bool
	// PprofListen is a loopback TCP address to serve Go's profiles on
	// ("" serves none): for measurements.
	PprofListen string
	// Network configures sandbox networking and the port proxy.
	Network NetworkConfig
	// Events configures the event log and webhooks (its Logger is set
	// from Logger).
	Events events.Options
	// E2B configures the E2B-compatible API.
	E2B     E2BConfig
	Version string
	Logger  *slog.Logger
}

// Run runs the daemon until ctx ends. Sandboxes keep running after it
// returns; the next Run adopts them.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.PolicyInterval == 0 {
		cfg.PolicyInterval = 15 * time.Second
	}
	// Settings checked before anything is made.
	if cfg.Shells < 0 {
		return fmt.Errorf("shells %d: want 0 or more: %w", cfg.Shells, errs.ErrInvalid)
	}
	if cfg.Runtime != "" && cfg.Runtime != "native" && cfg.Runtime != "libcontainer" {
		return fmt.Errorf("runtime %q: want native or libcontainer: %w", cfg.Runtime, errs.ErrInvalid)
	}
	if err := keepInheritedFromChildren(); err != nil {
		log.Warn("descriptors the daemon inherited may reach the processes it starts", "err", err)
	}
	if err := prepareDirs(cfg, log); err != nil {
		return err
	}
	// One daemon per data dir: a second would fight over sandboxes.
	lock, err := os.OpenFile(filepath.Join(cfg.DataDir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open data dir lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("data dir %s is in use by another stead daemon: %w", cfg.DataDir, err)
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	nodes, err := newNodeRegistry(cfg, st, log)
	if err != nil {
		return err
	}
	cl, err := newClusterNode(cfg, st, nodes.Name(), log)
	if err != nil {
		return err
	}
	if cl == nil {
		// Without owner leases a second daemon on one store would
		// reconcile the first one's sandboxes as its own: refuse to start
		// while another node's heartbeat is fresh, before touching anything.
		if err := nodes.CheckAlone(ctx); err != nil {
			return err
		}
	}
	var pl pool.Pool
	switch cfg.Pool {
	case "", "btrfs":
		pl, err = btrfs.Open(ctx, btrfs.Options{Dir: filepath.Join(cfg.DataDir, "pool"), Image: filepath.Join(cfg.DataDir, "pool.img"),
			ImageSize: cfg.PoolImageSize, Reserve: cfg.PoolReserve, FullQgroups: cfg.PoolFullQgroups, Logger: log})
	case "dir":
		pl, err = dir.OpenOptions(ctx, dir.Options{Dir: filepath.Join(cfg.DataDir, "pool"), Reserve: cfg.PoolReserve, Logger: log})
	default:
		err = fmt.Errorf("unknown pool %q (want btrfs or dir)", cfg.Pool)
	}
	if err != nil {
		return err
	}
	defer pl.Close()
	logPoolCapacity(ctx, pl, log)
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	initBin := initBinary(exe, log)
	// The shells' network links are made ahead once the network is up
	// (those spawned before get theirs at their start).
	var shellNet atomic.Pointer[network.Manager]
	prepareShell := func(ctx context.Context, name string, pid int) error {
		if m := shellNet.Load(); m != nil {
			return m.Prepare(ctx, name, pid)
		}
		return nil
	}
	rt, err := linux.New(linux.Options{StateDir: filepath.Join(cfg.RunDir, "containers"), RunDir: filepath.Join(cfg.RunDir, "sandboxes"), Binary: initBin, Shim: shimBinary(exe, log), NoUserNS: cfg.NoUserNS,
		Native: cfg.Runtime != "libcontainer", ExpediteRCU: cfg.ExpediteRCU, Shells: cfg.Shells, ShellNetwork: prepareShell, Logger: log})
	if err != nil {
		return err
	}
	// Last of all: the cgroup parents no sandbox uses go with the daemon.
	defer rt.Close()
	tokenKey, err := loadOrCreateKey(filepath.Join(cfg.DataDir, "token.key"))
	if err != nil {
		return err
	}
	var secretsKey []byte
	if cl != nil {
		// A sandbox's token and sealed environment must open on whichever
		// node runs it: the nodes derive both keys from their one secret.
		if tokenKey, err = deriveKey(cl.secret, "sandbox tokens"); err != nil {
			return err
		}
		if secretsKey, err = deriveKey(cl.secret, "sealed environments"); err != nil {
			return err
		}
	}
	auditOpts := audit.Options{Logger: log,
		CheckpointInterval: cfg.AuditCheckpointInterval, Witness: audit.NewFileWitness(filepath.Join(cfg.DataDir, "audit.witness"))}
	if cl != nil {
		// One trail, appended by every node: one signing key for all.
		if auditOpts.Key, err = cl.auditKey(); err != nil {
			return err
		}
		auditOpts.Shared = true
	}
	auditLog, err := audit.Open(ctx, st, filepath.Join(cfg.DataDir, "audit.key"), auditOpts)
	if err != nil {
		return err
	}
	// On a clean stop: sign the head and write both witnesses (the
	// repository's bounded in time). Deferred after st.Close, so it runs
	// before it.
	defer func() {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer ccancel()
		if err := auditLog.Close(cctx); err != nil {
			log.Error("sign the audit trail's head at shutdown", "err", err)
		}
	}()
	repoCfg, child, err := openRepo(ctx, cfg, log)
	if err != nil {
		return err
	}
	if repoCfg != nil && cl != nil {
		// Every node pushes into the tenants' scopes: prune and repair
		// hold a scope alone, by lease.
		repoCfg.Guard = cluster.NewScopeGuard(st, cl.leases, 0, log)
	}
	netp, err := startNetwork(ctx, cfg, st, log)
	if err != nil {
		return err
	}
	defer netp.close()
	if netp.mgr != nil {
		shellNet.Store(netp.mgr)
	}
	socks := newAgentSockets(filepath.Join(cfg.RunDir, "api"), log)
	defer socks.closeAll()
	// Who hears of what happens to sandboxes: every lifecycle transition
	// through the store, other events from the service.
	cfg.Events.Logger = log
	if cfg.Events.SecretKey, err = loadOrCreateKey(filepath.Join(cfg.DataDir, "webhook.key")); err != nil {
		return err
	}
	if cl != nil {
		// Webhook secrets are sealed in the shared store: one key for all.
		if cfg.Events.SecretKey, err = deriveKey(cl.secret, "webhook secrets"); err != nil {
			return err
		}
	}
	hub := events.New(st, cfg.Events)
	sinks := events.Multi{hub}
	svc := sandbox.New(sandbox.Options{
		Store: events.ObserveStore(st, &sinks, nil), Events: &sinks, Pool: pl, Runtime: rt, Logger: log, Version: cfg.Version, DataDir: cfg.DataDir,
		RuntimeName: runtimeName(cfg.Runtime), CgroupVersion: cgroupVersion(), StopGrace: cfg.StopGrace,
		StageDir: filepath.Join(cfg.RunDir, "stage"), AgentSockets: socks, TokenKey: tokenKey, Audit: auditLog,
		Repo: repoCfg, SecretsKeyFile: filepath.Join(cfg.DataDir, "secrets.key"), SecretsKey: secretsKey, PoolOvercommit: cfg.PoolOvercommit, Growth: cfg.Growth,
		Net: netp.opts, Owner: cl.owner(), NodeName: nodes.Name(),

		DeleteRetention: cfg.DeleteRetention, RetentionWarnBefore: cfg.RetentionWarnBefore, // tenants' retention defaults
	})
	sinks = append(sinks, events.SinkFunc(func(_ context.Context, e events.Event) { svc.SandboxChanged(e.Sandbox) }))
	if cl != nil {
		if err := cl.start(svc, &sinks, auditLog); err != nil {
			return err
		}
		// Renewing from now on: Reconcile takes the leases of this node's
		// sandboxes, and they must not lapse while the rest starts.
		lctx, lcancel := context.WithCancel(ctx)
		defer lcancel()
		go cl.leases.Run(lctx)
	}
	if repoCfg != nil {
		svc.SetDrillEnv(drillEnv(cfg, repoCfg.KeyFile, exe, child, pl.Kind()))
	}
	// The repository's witness holds one daemon's newest checkpoint; the
	// nodes of a cluster would overwrite each other's, so each keeps its
	// own file witness only.
	if repoCfg != nil && !cfg.NoAuditRepoWitness && cl == nil {
		auditLog.SetRemote(audit.NewRepoWitness(svc.AuditRecords, auditLog.KeyID(), repoCfg.Store.Location()))
	}
	mt, err := newMetered(cfg.Metering, st, svc, &sinks, cl.repoMeterLeader(), log)
	if err != nil {
		return err
	}
	// In a cluster the checks run on one node at a time, and act on each
	// sandbox through the node that holds it.
	budgets := budget.New(budget.Options{Store: st, Spend: mt.meter, Sandboxes: cl.budgetSandboxes(svc), Leader: cl.budgetLeader(),
		Events: &sinks, Audit: auditLog, Interval: cfg.BudgetInterval, Logger: log})
	svc.SetBudgets(budgets)
	if _, err := nodes.Heartbeat(ctx); err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 4)
	apiHandler := api.NewHandler(timedService{svc, mt.met}, api.Options{Logger: log, Version: cfg.Version, Metrics: mt.met, Usage: mt.meter, Events: hub,
		Nodes: cl.nodes(nodes, svc), Router: cl.apiRouter(), AdminKeyPath: filepath.Join(cfg.DataDir, "admin.key")})
	handler := netp.serveProxy(pctx, svc, mountE2B(cfg.E2B, svc, tokenKey, log, cl, apiHandler), cfg.Network, errc, log, cl.forwardSandbox())
	handler = cl.nodeRoutes(cl.hostRoutes(cfg, netp.proxy, handler))
	// IdleTimeout: a kept-alive connection (an agent socket's among them)
	// does not hold a descriptor and a goroutine forever.
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	socks.setServer(srv)
	keyPath := filepath.Join(cfg.DataDir, "admin.key")
	secret, err := svc.Bootstrap(ctx, func(secret string) error {
		return fsutil.WriteFileAtomic(keyPath, []byte(secret+"\n"), 0o600)
	})
	if err != nil {
		return err
	}
	if secret != "" {
		fmt.Fprintf(os.Stderr, "\nstead: created the bootstrap admin API key (shown once; stored hashed; a copy readable only by root is in %s):\n\n    %s\n\n", keyPath, secret)
		if filepath.Clean(cfg.DataDir) != "/var/lib/stead" {
			fmt.Fprintf(os.Stderr, "The CLI reads it when run as root with --data-dir %s or STEAD_DATA_DIR=%s.\n\n", cfg.DataDir, cfg.DataDir)
		}
	}
	if err := svc.Reconcile(ctx); err != nil {
		return err
	}
	svc.CheckPoolFill(ctx)
	if err := mt.meter.Recover(ctx); err != nil {
		return err
	}
	if cfg.Metering.MetricsListen != "" {
		if err := serveMetrics(pctx, cfg.Metering.MetricsListen, mt.met, errc, log); err != nil {
			return err
		}
	}

	if cfg.PprofListen != "" {
		if err := servePprof(pctx, cfg.PprofListen, log); err != nil {
			return err
		}
	}

	listeners := map[string]net.Listener{}
	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
		}
		listeners[ln.Addr().String()] = ln
	}
	if cfg.Socket != "" {
		// Root only: the socket is 0660 and group root.
		ln, err := listenUnixPrivate(cfg.Socket)
		if err != nil {
			return err
		}
		defer os.Remove(cfg.Socket)
		listeners[cfg.Socket] = ln
	}
	for addr, ln := range listeners {
		go func(ln net.Listener) { errc <- srv.Serve(ln) }(ln)
		log.Info("listening", "addr", addr)
	}
	go svc.RunPolicies(pctx, cfg.PolicyInterval)
	go svc.RunSchedules(pctx, min(cfg.PolicyInterval, 15*time.Second)) // cron runs are at most this late
	go mt.meter.Run(pctx)
	go budgets.Run(pctx)
	go auditLog.Run(pctx)
	go hub.Run(pctx)
	go svc.CheckRepoKey(pctx)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	warmDone := make(chan struct{})
	go func() { svc.RunWarm(wctx, cfg.Warm); close(warmDone) }()
	spares := cfg.Spares
	if spares == 0 {
		spares = sandbox.DefaultSpares
	}
	sparesDone := make(chan struct{})
	go func() { svc.RunSpares(wctx, spares); close(sparesDone) }()
	go nodes.Run(pctx)
	if cl != nil {
		go cl.run(pctx)
	}
	log.Info("stead is ready", "data_dir", cfg.DataDir, "pool", pl.Kind(), "admin_key", keyPath)

	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	srv.Shutdown(sctx)
	// Warm sandboxes have no record: they go with the daemon (or, after a
	// kill, with the next daemon's start).
	wcancel()
	select {
	case <-warmDone:
	case <-time.After(10 * time.Second):
		log.Warn("warm sandboxes left for the next start to remove")
	}
	// Spare clones too (a few deletes; the next start removes what is left).
	select {
	case <-sparesDone:
	case <-time.After(5 * time.Second):
		log.Warn("spare clones left for the next start to remove")
	}
	log.Info("stead stopped; sandboxes keep running")
	return nil
}

// logPoolCapacity says at start what the pool holds and what it enforces.
func logPoolCapacity(ctx context.Context, pl pool.Pool, log *slog.Logger) {
	c, err := pl.Capacity(ctx)
	if err != nil {
		log.Warn("read the pool's capacity", "err", err)
		return
	}
	attrs := []any{"pool", pl.Kind(), "size", c.SizeBytes, "used", c.UsedBytes, "reserve", c.ReserveBytes}
	if c.LimitBytes == 0 {
		log.Warn("the pool enforces no disk quotas: a sandbox can fill its file system and stop every other (stead refuses sizes that cannot fit and warns as it fills; use the btrfs pool to enforce them)", attrs...)
		return
	}
	log.Info("pool capacity", append(attrs, "limit", c.LimitBytes, "datasets", c.DatasetsBytes)...)
}

// shimBinary picks the runtime's shim, which forks every sandbox:
// stead-shim beside the stead binary when present (small, fast to start
// as each sandbox's setup init), else the stead binary itself.
func shimBinary(exe string, log *slog.Logger) string {
	p := filepath.Join(filepath.Dir(exe), "stead-shim")
	if !fileExists(p) {
		log.Warn("stead-shim not found beside the stead binary; the stead binary plays it (slower sandbox starts)", "want", p)
		return exe
	}
	// It runs as root: a copy others could have written is not run.
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != 0 || st.Mode&0o022 != 0 {
		log.Warn("stead-shim is not a root-owned file only root may write; the stead binary plays it", "shim", p)
		return exe
	}
	return p
}

// initBinary picks the sandbox init: stead-init beside the stead binary
// when present (small, fast to start), else the stead binary itself.
func initBinary(exe string, log *slog.Logger) string {
	bin := exe
	if p := filepath.Join(filepath.Dir(exe), "stead-init"); fileExists(p) {
		bin = p
	} else {
		log.Warn("stead-init not found beside the stead binary; using stead itself as sandbox init (slower starts, more memory per sandbox)", "want", p)
	}
	if dynamic(bin) {
		log.Warn("the sandbox init is dynamically linked: sandboxes from images without a C library will not start; build with scripts/build.sh", "init", bin)
	}
	return bin
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// dynamic reports whether an ELF binary needs a program interpreter.
func dynamic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}

func cgroupVersion() int {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return 2
	}
	return 1
}

// childRepo is how a child daemon (a drill's) is given the repository:
// the location on its command line, the credentials in its environment.
type childRepo struct {
	arg string
	env []string
}

// openRepo opens the blob store of the configured repository (nil when
// none is configured). The repository itself is opened on first use.
func openRepo(ctx context.Context, cfg Config, log *slog.Logger) (*sandbox.RepoConfig, childRepo, error) {
	child := childRepo{arg: cfg.Repo, env: os.Environ()}
	if cfg.Repo == "" {
		return nil, child, nil
	}
	keyFile := cfg.RepoKeyFile
	if keyFile == "" {
		keyFile = filepath.Join(cfg.DataDir, "repo.key")
	}
	var bs blobstore.BlobStore
	if strings.HasPrefix(cfg.Repo, "s3://") {
		c, err := s3.Parse(cfg.Repo, s3.Options{CredentialsFile: cfg.RepoCredentialsFile})
		if err != nil {
			return nil, child, fmt.Errorf("repository: %w", err) // never echo the URL: it may hold the secret
		}
		if c.CredentialSource == s3.SourceURL {
			log.Warn("the repository URL holds the S3 secret key: on a command line, every process listing (ps) shows it; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or STEAD_S3_ACCESS_KEY and STEAD_S3_SECRET_KEY), or use --repo-credentials-file or ~/.aws/credentials, and drop ACCESS:SECRET@ from the URL",
				"location", c.Location())
		} else {
			log.Info("repository credentials", "location", c.Location(), "from", c.CredentialSource)
		}
		// Packs wait for their upload in unlinked files on the data
		// disk, not in memory (s3.Config.SpoolDir).
		c.SpoolDir = filepath.Join(cfg.DataDir, "spool")
		if err := os.MkdirAll(c.SpoolDir, 0o700); err != nil {
			return nil, child, fmt.Errorf("repository spool: %w", err)
		}
		if bs, err = s3.New(ctx, c); err != nil {
			return nil, child, fmt.Errorf("repository %s: %w", c.Location(), err)
		}
		child = childRepo{arg: c.URL(), env: c.Env(os.Environ())}
	} else {
		var err error
		if bs, err = local.New(strings.TrimPrefix(cfg.Repo, "file://")); err != nil {
			return nil, child, fmt.Errorf("repository %s: %w", cfg.Repo, err)
		}
	}
	return &sandbox.RepoConfig{Store: bs, KeyFile: keyFile, CacheDir: filepath.Join(cfg.DataDir, "repo-cache")}, child, nil
}

// openStore opens the metadata store cfg.Store names.
func openStore(ctx context.Context, cfg Config) (store.Store, error) {
	switch {
	case cfg.Store == "" || cfg.Store == "sqlite":
		st, err := sqlite.Open(ctx, filepath.Join(cfg.DataDir, "stead.db"))
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return st, nil
	case strings.HasPrefix(cfg.Store, "postgres://") || strings.HasPrefix(cfg.Store, "postgresql://"):
		st, err := postgres.Open(ctx, cfg.Store)
		if err != nil {
			return nil, err
		}
		return st, nil
	default:
		return nil, fmt.Errorf("store %q: want sqlite or a postgres:// URL: %w", redactStore(cfg.Store), errs.ErrInvalid)
	}
}

// redactStore returns a store name fit for an error message: a URL loses
// its password, anything else is cut short.
func redactStore(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	if len(s) > 24 {
		return s[:24] + "..."
	}
	return s
}

// runtimeName is the name the daemon reports for its runtime setting.
func runtimeName(setting string) string {
	if setting == "libcontainer" {
		return "libcontainer"
	}
	return "native"
}
