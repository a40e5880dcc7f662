package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/budget"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/daemon"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/metering"
	"github.com/stead-dev/stead/internal/sandbox"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newServeCmd() *cobra.Command {
	var cfg daemon.Config
	var size int64
	var reserve, warnLevels, largeFile string
	var warm []string
	spares := sandbox.DefaultSpares
	var verbose bool
	var repoWitness bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the stead daemon",
		Long: `Run the stead daemon: the HTTP/JSON API on 127.0.0.1 and on a unix socket.

On first start it creates the data directory, a loop-backed btrfs pool (unless
the data directory is on btrfs already) and a bootstrap admin API key, shown
once and kept (root-only) in DATA_DIR/admin.key. DATA_DIR is --data-dir, else
$STEAD_DATA_DIR, else /var/lib/stead; the CLI reads the key from the same
place when given the same --data-dir or STEAD_DATA_DIR (and no --api-key or
STEAD_API_KEY).

The pool image is sparse; by default it is half of the free space where it
goes (at least 5 GiB). A reserve (default 10% of the pool, at least 512 MiB)
is kept from sandboxes and volumes, so a full pool stops their writes with
"disk quota exceeded" while the daemon still stops, starts and records. The
disk quotas of live sandboxes and volumes may add up to --pool-overcommit
times the rest; creates past that are refused. ` + "`stead info`" + ` shows the fill
level; the daemon log warns at 85% and 95%.

Running sandboxes keep running when the daemon stops or is killed; the next
start adopts them.`,
		Example: `  stead serve
  stead serve --data-dir /srv/stead --listen 127.0.0.1:7878 --pool dir
  AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... stead serve --repo s3://127.0.0.1:9000/bucket/stead?secure=false
  stead serve --repo s3://s3.example.com/bucket/stead --repo-credentials-file /etc/stead/s3.credentials`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			if size < 0 || size > 1<<20 {
				return usageError{fmt.Errorf("--pool-size %d: want a number of GiB (0: half of the free space)", size)}
			}
			cfg.PoolImageSize = size << 30
			if reserve != "" {
				n, err := parseSize(reserve)
				if err != nil {
					return usageError{fmt.Errorf("--pool-reserve %q: %v", reserve, err)}
				}
				cfg.PoolReserve = n
			}
			if cfg.AuditCheckpointInterval <= 0 {
				return usageError{fmt.Errorf("--audit-checkpoint-interval %s: want a positive duration such as 1m", cfg.AuditCheckpointInterval)}
			}
			if cfg.BudgetInterval <= 0 {
				return usageError{fmt.Errorf("--budget-interval %s: want a positive duration such as 30s", cfg.BudgetInterval)}
			}
			if cfg.Metering.Interval <= 0 {
				return usageError{fmt.Errorf("--meter-interval %s: want a positive duration such as 1m", cfg.Metering.Interval)}
			}
			if !(cfg.PoolOvercommit > 0) || math.IsInf(cfg.PoolOvercommit, 0) {
				return usageError{fmt.Errorf("--pool-overcommit %g: want a ratio above 0, such as 1 (no over-commit) or 2", cfg.PoolOvercommit)}
			}
			if cfg.Shells < 0 {
				return usageError{fmt.Errorf("--shells %d: want 0 (none) or more", cfg.Shells)}
			}
			var err error
			if cfg.Growth.Levels, err = parseWarnLevels(warnLevels); err != nil {
				return usageError{fmt.Errorf("--warn-levels %q: %v", warnLevels, err)}
			}
			if largeFile != "" {
				if cfg.Growth.LargeStateFileBytes, err = parseSize(largeFile); err != nil {
					return usageError{fmt.Errorf("--large-state-file %q: %v", largeFile, err)}
				}
			}
			if (cfg.Network.ProxyTLSCert == "") != (cfg.Network.ProxyTLSKey == "") {
				return usageError{fmt.Errorf("--proxy-tls-cert and --proxy-tls-key go together")}
			}
			for _, w := range warm {
				ws, err := sandbox.ParseWarmSpec(w)
				if err != nil {
					return usageError{fmt.Errorf("--warm: %v", err)}
				}
				cfg.Warm = append(cfg.Warm, ws)
			}
			if spares < 0 {
				return usageError{fmt.Errorf("--spares %d: want 0 or more", spares)}
			}
			cfg.Spares = spares
			if spares == 0 {
				cfg.Spares = -1 // none
			}
			cfg.NoAuditRepoWitness = !repoWitness
			cfg.Version = version
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if cfg.E2B.OnTimeout != "stop" && cfg.E2B.OnTimeout != "pause" {
				return usageError{fmt.Errorf("--e2b-on-timeout %q: want stop or pause", cfg.E2B.OnTimeout)}
			}
			return daemon.Run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", envOr("STEAD_DATA_DIR", "/var/lib/stead"), "data directory: metadata, pool, admin.key (env STEAD_DATA_DIR)")
	f.StringVar(&cfg.Store, "store", envOr("STEAD_STORE", "sqlite"), "metadata store: sqlite (DATA/stead.db) or a postgres://user:password@host:port/db URL (env STEAD_STORE, which keeps a password out of the process list)")
	f.StringVar(&cfg.NodeName, "node-name", envOr("STEAD_NODE_NAME", ""), "this daemon's name in the node registry, unique among the daemons on one store (default: the host name; env STEAD_NODE_NAME)")
	f.StringVar(&cfg.NodeAddress, "node-address", "", "where other nodes reach this daemon, host:port (default: --listen)")
	f.DurationVar(&cfg.NodeHeartbeat, "node-heartbeat", cluster.DefaultInterval, "how often this node refreshes its heartbeat in the registry")
	f.DurationVar(&cfg.NodeGrace, "node-grace", 0, "how old a node's heartbeat may be for it to count as alive (default: three heartbeats)")
	f.StringVar(&cfg.ClusterSecretFile, "cluster-secret-file", envOr("STEAD_CLUSTER_SECRET_FILE", ""), "run as a node of a cluster (several daemons on one PostgreSQL --store and one --repo): the file holds the secret every node shares, at least 32 bytes, mode 0600 (env STEAD_CLUSTER_SECRET_FILE); see docs/cluster.md")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", cluster.DefaultLeaseTTL, "cluster mode: how long a sandbox's owner lease lasts unless renewed (renewed every third of it)")
	f.StringVar(&cfg.RunDir, "run-dir", envOr("STEAD_RUN_DIR", "/run/stead"), "runtime state directory (tmpfs)")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7878", "TCP address of the API (empty to disable)")
	f.StringVar(&cfg.Socket, "socket", "/run/stead/stead.sock", "unix socket of the API (empty to disable)")
	f.StringVar(&cfg.Pool, "pool", "btrfs", "storage pool: btrfs or dir")
	f.Int64Var(&size, "pool-size", 0, "size in GiB of a new loop-backed btrfs pool image (sparse; 0: half of the free space where it goes, at least 5)")
	f.StringVar(&reserve, "pool-reserve", "", "pool space kept from sandboxes and volumes for the daemon, such as 2GiB (default 10% of the pool, at least 512MiB)")
	f.Float64Var(&cfg.PoolOvercommit, "pool-overcommit", sandbox.DefaultPoolOvercommit, "the disk quotas of live sandboxes and volumes may add up to this many times the pool's usable size (1: every quota can always be filled)")
	f.StringVar(&warnLevels, "warn-levels", "80,95", "percentages of a limit (disk quota, memory, volume size, pool) at which an event and a log line warn")
	f.StringVar(&largeFile, "large-state-file", "1GiB", "files under /data larger than this are reported by orient and stead info as history to off-load")
	f.IntVar(&spares, "spares", spares, "spare clones kept of each template a create used in the last hour, taken by creates instead of cloning (btrfs pools; 0: none)")
	f.StringArrayVar(&warm, "warm", nil, "keep N started sandboxes of a template ready for plain creates: [TENANT/]TEMPLATE=N, such as host=4 (repeatable; see the README's warm pool section for which creates use it)")
	f.DurationVar(&cfg.PolicyInterval, "policy-interval", 15*time.Second, "how often idle and retention policies run")
	f.DurationVar(&cfg.AuditCheckpointInterval, "audit-checkpoint-interval", audit.DefaultCheckpointInterval, "how often the audit trail's head is signed and written to its witnesses (DATA/audit.witness, the repository) when it moved; a kill -9 leaves at most this much unsigned")
	f.BoolVar(&repoWitness, "audit-repo-witness", true, "also keep the audit trail's signed head in the repository (when one is configured)")
	f.MarkHidden("audit-repo-witness")
	f.DurationVar(&cfg.StopGrace, "stop-grace", 30*time.Second, "default grace period of a service's stop hook")
	f.DurationVar(&cfg.DeleteRetention, "delete-retention", 30*24*time.Hour, "how long soft-deleted sandboxes and volumes stay restorable, for tenants whose retention policy sets no purge_deleted_after")
	f.DurationVar(&cfg.RetentionWarnBefore, "retention-warn-before", sandbox.DefaultRetentionWarnBefore, "how long before an automatic deletion the retention.warning event is given, for tenants whose retention policy sets no warn_before")
	f.StringVar(&cfg.Repo, "repo", os.Getenv("STEAD_REPO"), "off-box repository: a directory or s3://host:port/bucket/prefix (env STEAD_REPO); S3 keys from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, STEAD_S3_ACCESS_KEY/STEAD_S3_SECRET_KEY, --repo-credentials-file or ~/.aws/credentials, never needed on the command line")
	f.StringVar(&cfg.RepoCredentialsFile, "repo-credentials-file", os.Getenv("STEAD_S3_CREDENTIALS_FILE"), "file with the S3 keys, AWS format ([default] aws_access_key_id = ..., aws_secret_access_key = ...), mode 0600 (env STEAD_S3_CREDENTIALS_FILE)")
	f.StringVar(&cfg.RepoKeyFile, "repo-key-file", os.Getenv("STEAD_REPO_KEY_FILE"), "the repository's master key file (default DATA/repo.key; keep a copy off this machine)")
	f.BoolVar(&cfg.Network.Disabled, "no-network", false, "give sandboxes loopback only (no gateway, no internet, no resolver)")
	f.StringVar(&cfg.Network.Bridge, "bridge", "stead0", "host link that holds the sandboxes' gateway (a bridge with no ports: each sandbox is routed on a veth of its own); it also names the daemon's nftables table")
	f.StringVar(&cfg.Network.Subnet, "subnet", "10.88.0.0/16", "IPv4 subnet of the sandboxes (the gateway takes the first address); no other link of the host may hold an address in it")
	f.StringVar(&cfg.Network.Subnet6, "subnet6", "auto", "IPv6 subnet of the sandboxes (NAT66 to the host's IPv6): a /64 such as "+daemon.DefaultSubnet6+", auto (that one when the host has a global IPv6 address and a default route) or off; under auto a second daemon on the host, finding that one taken, gives sandboxes IPv4 only: give it one of its own")
	f.StringSliceVar(&cfg.Network.DNSUpstreams, "dns-upstream", nil, "DNS servers the sandboxes' resolver forwards to, host:port (default: the host's /etc/resolv.conf)")
	f.StringVar(&cfg.Network.ProxyListen, "proxy-listen", "127.0.0.1:7879", "address of the port proxy that serves exposed sandbox ports (empty: only the /v1/sandboxes/{id}/ports/{port}/ routes of the API)")
	f.StringVar(&cfg.Network.ProxyDomain, "proxy-domain", "localhost", "domain of the port proxy: port P of sandbox S answers at P-S.DOMAIN (browsers and curl resolve *.localhost to this machine; empty: path routing only)")
	f.StringVar(&cfg.Network.ProxyTLSCert, "proxy-tls-cert", "", "certificate file (PEM) to serve the port proxy over TLS and HTTP/2")
	f.StringVar(&cfg.Network.ProxyTLSKey, "proxy-tls-key", "", "key file (PEM) of --proxy-tls-cert")
	f.DurationVar(&cfg.Metering.Interval, "meter-interval", metering.DefaultInterval, "how often running sandboxes' metered time is checkpointed: the most a kill -9 of the daemon loses")
	f.DurationVar(&cfg.BudgetInterval, "budget-interval", budget.DefaultInterval, "how often budgets are checked against the metered spend (a crossing is acted on within this plus the check's own time)")
	f.StringVar(&cfg.Metering.PricesFile, "prices", "", "JSON file of prices (compute_per_hour by instance type, cpu_hour, memory_gib_hour, local_gb_month, repository_gb_month); unnamed ones keep their defaults")
	f.StringVar(&cfg.Metering.MetricsListen, "metrics-listen", "", "address of an unauthenticated Prometheus /metrics endpoint, such as 127.0.0.1:9090 (empty: off)")
	f.BoolVar(&verbose, "verbose", false, "debug logging")
	f.BoolVar(&cfg.Events.AllowLoopback, "webhook-allow-loopback", false, "let webhooks post to loopback and the host's own addresses (tests, a receiver on this machine); link-local and metadata addresses are always refused")
	f.DurationVar(&cfg.Events.MaxBackoff, "webhook-max-backoff", events.DefaultMaxBackoff, "longest wait between two attempts to deliver an event to a webhook (the wait doubles from 1s)")
	f.DurationVar(&cfg.Events.Retention, "event-retention", events.DefaultRetention, "how long the event log (and the webhook delivery log) keeps events")
	f.BoolVar(&cfg.NoUserNS, "insecure-no-userns", false, "run sandboxes without user namespaces: root inside is root on the host (for measurements only)")
	f.MarkHidden("insecure-no-userns")
	f.BoolVar(&cfg.ExpediteRCU, "expedite-rcu", true, "set the host's kernel.rcu_expedited to 1: a sandbox start waits for an RCU grace period to join its cgroups, 8-14 ms on a VM, well under 1 ms expedited (a host-wide setting; false leaves it alone)")
	f.IntVar(&cfg.Shells, "shells", 2, "sandbox inits the native runtime keeps spawned ahead in their namespaces and cgroups, empty until a start claims one (0: every start spawns its own); each is an idle process of a few MiB")
	f.StringVar(&cfg.Runtime, "runtime", "native", "how sandboxes are set up: native (stead's own setup, the default) or libcontainer (runc's; for comparison)")
	f.BoolVar(&cfg.PoolFullQgroups, "pool-full-qgroups", false, "give a new btrfs pool full qgroup accounting instead of simple quotas (for measurements: clones slow down as datasets accumulate)")
	f.MarkHidden("pool-full-qgroups")
	f.StringVar(&cfg.PprofListen, "pprof-listen", "", "serve Go profiles (net/http/pprof) on this loopback address (for measurements)")
	f.MarkHidden("pprof-listen")
	f.BoolVar(&cfg.E2B.Disabled, "no-e2b", false, "do not serve the E2B-compatible API (docs/e2b.md) on the API listener")
	f.StringVar(&cfg.E2B.BaseTemplate, "e2b-base-template", "", "stead template that E2B's template \"base\" maps to (default: the daemon's default template)")
	f.StringVar(&cfg.E2B.OnTimeout, "e2b-on-timeout", "stop", "what an E2B sandbox's timeout does unless it was created with auto-pause: stop or pause (never a delete)")
	f.StringVar(&cfg.E2B.Domain, "e2b-domain", "", "domain reported to E2B SDKs; Host 49983-<id>.<domain> then reaches a sandbox's data plane (empty: only the E2b-Sandbox-Id header, E2B_SANDBOX_URL mode)")
	return cmd
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// parseWarnLevels reads ascending percentages such as "80,95" into
// fractions.
func parseWarnLevels(v string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(v, ",") {
		p, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(f), "%")), 64)
		if err != nil || !(p > 0 && p <= 100) {
			return nil, fmt.Errorf("want ascending percentages between 0 and 100, such as 80,95")
		}
		if len(out) > 0 && p/100 <= out[len(out)-1] {
			return nil, fmt.Errorf("want ascending percentages, such as 80,95")
		}
		out = append(out, p/100)
	}
	return out, nil
}
