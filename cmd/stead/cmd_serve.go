package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/internal/daemon"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newServeCmd() *cobra.Command {
	var cfg daemon.Config
	var size int64
	var verbose bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the stead daemon",
		Long: `Run the stead daemon: the HTTP/JSON API on 127.0.0.1 and on a unix socket.

On first start it creates the data directory, a loop-backed btrfs pool (unless
the data directory is on btrfs already) and a bootstrap admin API key, shown
once and kept (root-only) in DATA_DIR/admin.key.

Running sandboxes keep running when the daemon stops or is killed; the next
start adopts them.`,
		Example: `  stead serve
  stead serve --data-dir /srv/stead --listen 127.0.0.1:7878 --pool dir`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			cfg.PoolImageSize = size << 30
			cfg.Version = version
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return daemon.Run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", envOr("STEAD_DATA_DIR", "/var/lib/stead"), "data directory (metadata, pool, admin.key)")
	f.StringVar(&cfg.RunDir, "run-dir", envOr("STEAD_RUN_DIR", "/run/stead"), "runtime state directory (tmpfs)")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7878", "TCP address of the API (empty to disable)")
	f.StringVar(&cfg.Socket, "socket", "/run/stead/stead.sock", "unix socket of the API (empty to disable)")
	f.StringVar(&cfg.Pool, "pool", "btrfs", "storage pool: btrfs or dir")
	f.Int64Var(&size, "pool-size", 30, "size in GiB of a new loop-backed btrfs pool image (sparse)")
	f.DurationVar(&cfg.PolicyInterval, "policy-interval", 15*time.Second, "how often idle and retention policies run")
	f.DurationVar(&cfg.StopGrace, "stop-grace", 30*time.Second, "default grace period of a service's stop hook")
	f.StringVar(&cfg.Repo, "repo", os.Getenv("STEAD_REPO"), "off-box repository: a directory or s3://ACCESS:SECRET@host:port/bucket/prefix (env STEAD_REPO; S3 keys also from STEAD_S3_ACCESS_KEY/STEAD_S3_SECRET_KEY)")
	f.StringVar(&cfg.RepoKeyFile, "repo-key-file", os.Getenv("STEAD_REPO_KEY_FILE"), "the repository's master key file (default DATA/repo.key; keep a copy off this machine)")
	f.BoolVar(&verbose, "verbose", false, "debug logging")
	f.BoolVar(&cfg.NoUserNS, "insecure-no-userns", false, "run sandboxes without user namespaces: root inside is root on the host (for measurements only)")
	f.MarkHidden("insecure-no-userns")
	return cmd
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
