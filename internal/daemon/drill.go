package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/pool/btrfs"
	"github.com/stead-dev/stead/internal/pool/dir"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/runtime/linux"
	"github.com/stead-dev/stead/internal/sandbox"
	"github.com/stead-dev/stead/internal/store"
)

// drillEnv runs the restore half of an empty-data-dir drill in a second
// stead daemon started on a fresh data directory (its own store, run dir,
// cgroup parent and a pool of the same kind as this daemon's: a fresh
// btrfs image for a btrfs daemon) that knows only the repository and the
// key file: what a replacement machine would have. The recovery time runs
// from starting that daemon to a verified, started sandbox. The child gets
// the repository's location on its command line and its credentials in
// its environment, never in argv. Everything it made (pool image, loop
// device, mounts, cgroups, data dir) is removed when the drill ends.
func drillEnv(cfg Config, keyFile, exe string, child childRepo, poolKind string) sandbox.DrillEnv {
	return func(ctx context.Context, tenant string, sc *repo.Scope, m *repo.Manifest, verify []string, progress func(string)) (client.Drill, error) {
		var d client.Drill
		if tenant != store.DefaultTenant {
			return d, fmt.Errorf("drills into an empty data dir run as the fresh daemon's admin, of the default tenant only: %w", errs.ErrUnsupported)
		}
		base, err := os.MkdirTemp(cfg.DataDir, "drill-")
		if err != nil {
			return d, err
		}
		defer cleanDrillDir(context.WithoutCancel(ctx), base, cfg.Logger)
		if cfg.Logger != nil {
			cfg.Logger.Info("drill: starting a fresh daemon", "data_dir", base, "pool", poolKind)
		}
		sock := filepath.Join(base, "api.sock")
		t0 := time.Now()
		progress("start-empty-daemon")
		args := []string{"serve", "--data-dir", base, "--run-dir", filepath.Join(base, "run"),
			"--listen", "", "--socket", sock, "--pool", poolKind, "--repo", child.arg, "--repo-key-file", keyFile,
			"--policy-interval", "1h", "--audit-repo-witness=false",
			// The drill's daemon runs beside this one: no second bridge,
			// no second port proxy (a verify command runs offline).
			"--no-network", "--proxy-listen", ""}
		if poolKind == "btrfs" {
			args = append(args, "--pool-size", strconv.FormatInt(drillPoolGiB(m), 10))
		}
		cmd := exec.Command(exe, args...)
		cmd.Env = child.env
		logf, _ := os.Create(filepath.Join(base, "daemon.log"))
		if logf != nil {
			cmd.Stdout, cmd.Stderr = logf, logf
			defer logf.Close()
		}
		if err := cmd.Start(); err != nil {
			return d, fmt.Errorf("start the empty daemon: %w", err)
		}
		defer func() {
			cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		}()
		cl, err := waitDaemon(ctx, base, sock)
		if err != nil {
			return d, err
		}
		progress("restore")
		op, err := cl.RestoreRemote(ctx, client.RestoreRequest{Snapshot: m.ID.String(), Name: "drill", NoStart: true, RestoreVolumes: true, Wait: true})
		if err == nil && op.EndedAt == nil {
			op, err = cl.WaitOperation(ctx, op, nil)
		}
		if err != nil {
			return d, fmt.Errorf("restore in the empty daemon: %w", err)
		}
		if op.State != "succeeded" {
			return d, fmt.Errorf("restore in the empty daemon: %s", op.Error)
		}
		var rr client.RestoreResult
		if err := json.Unmarshal(op.Result, &rr); err != nil || rr.Sandbox == nil {
			return d, fmt.Errorf("restore in the empty daemon: bad result: %v", err)
		}
		defer cl.DeleteSandbox(context.WithoutCancel(ctx), rr.Sandbox.ID, true)
		d.RestoreSeconds = time.Since(t0).Seconds()
		d.Files, d.Bytes = rr.Files, rr.BytesWritten
		progress("verify")
		t1 := time.Now()
		v, err := sc.Verify(ctx, m.ID, filepath.Join(base, "pool", "sandboxes", rr.Sandbox.ID))
		if err != nil {
			return d, err
		}
		d.DigestOK = v.OK()
		if !v.OK() {
			d.Error = "restored tree differs from the snapshot: " + strings.Join(v.Diffs[:min(5, len(v.Diffs))], "; ")
		}
		progress("start")
		if _, err := cl.StartSandbox(ctx, rr.Sandbox.ID); err != nil {
			return d, fmt.Errorf("start the restored sandbox: %w", err)
		}
		if len(verify) > 0 {
			progress("verify-command")
			res, err := cl.Exec(ctx, rr.Sandbox.ID, client.ExecRequest{Command: verify, Timeout: "10m"})
			if err != nil {
				return d, fmt.Errorf("verify command: %w", err)
			}
			code := res.ExitCode
			d.VerifyExit = &code
			out := string(res.Stdout) + string(res.Stderr)
			d.VerifyOutput = out[max(0, len(out)-2000):]
		}
		d.VerifySeconds = time.Since(t1).Seconds()
		d.RecoverySeconds = time.Since(t0).Seconds()
		return d, nil
	}
}

// waitDaemon waits for the empty daemon's admin key and socket.
func waitDaemon(ctx context.Context, base, sock string) (*client.Client, error) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		key, err := os.ReadFile(filepath.Join(base, "admin.key"))
		if err == nil {
			cl, err := client.New("unix://"+sock, strings.TrimSpace(string(key)))
			if err != nil {
				return nil, err
			}
			if _, err := cl.ListSandboxes(ctx, false); err == nil {
				return cl, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
	log, _ := os.ReadFile(filepath.Join(base, "daemon.log"))
	return nil, fmt.Errorf("the empty daemon did not come up in 60 s: %s", tailString(string(log), 1000))
}

func tailString(s string, n int) string { return s[max(0, len(s)-n):] }

// drillPoolGiB sizes the fresh daemon's btrfs image for restoring m: the
// sandbox's disk quota must fit in the pool's usable size (size less the
// reserve, pool.DefaultReserve) and the data with room to spare. The image
// is sparse: only what the restore writes takes disk space.
func drillPoolGiB(m *repo.Manifest) int64 {
	var sp struct {
		Limits struct {
			DiskBytes int64 `json:"disk_bytes"`
		} `json:"limits"`
	}
	json.Unmarshal([]byte(m.Labels["spec"]), &sp)
	need := max(sp.Limits.DiskBytes, m.Stats.DataBytes+m.Stats.DataBytes/4+256<<20)
	size := need + need/9 + 1<<30 // usable is 90%, at least 512 MiB less
	return (size + 1<<30 - 1) >> 30
}

// cleanDrillDir deletes the drill's data dir and what its daemon made
// outside it: mounts, the pool (datasets, image, loop device) and the
// runtime's cgroups and rootfs directory.
func cleanDrillDir(ctx context.Context, base string, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	poolDir := filepath.Join(base, "pool")
	fsutil.UnmountUnder(filepath.Join(base, "run"))
	if err := btrfs.Destroy(ctx, btrfs.Options{Dir: poolDir, Image: filepath.Join(base, "pool.img"), Logger: log}); err != nil {
		log.Warn("drill: remove the fresh daemon's pool", "err", err)
	}
	if pl, err := dir.Open(ctx, poolDir); err == nil { // a dir pool (read-only datasets are immutable)
		for _, kind := range []string{"templates", "sandboxes", "snapshots", "volumes"} {
			ids, _ := pl.List(ctx, kind)
			for _, id := range ids {
				pl.Delete(ctx, kind+"/"+id)
			}
		}
		pl.Close()
	}
	fsutil.UnmountUnder(base)
	if err := linux.RemoveHostState(filepath.Join(base, "run", "containers")); err != nil {
		log.Warn("drill: remove the fresh daemon's cgroups", "err", err)
	}
	if err := os.RemoveAll(base); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("drill: remove the fresh daemon's data dir", "dir", base, "err", err)
	}
}
