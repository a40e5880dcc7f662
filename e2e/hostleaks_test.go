package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/blobstore/s3/s3test"
	"github.com/stead-dev/stead/internal/runtime/linux"
	"github.com/stead-dev/stead/internal/testutil"
)

// TestDaemonStopRemovesItsCgroups: a daemon that stops while a sandbox
// runs keeps the sandbox's cgroups (it keeps running); once the sandbox is
// deleted, the next stop leaves no cgroup named after the daemon's run
// directory in any controller.
func TestDaemonStopRemovesItsCgroups(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	parent := linux.CgroupParentFor(filepath.Join(d.runDir, "containers"))
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "cg"})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, sb.ID, "agent", "true")
	running := testutil.CgroupsNamed(parent)
	if len(running) < 5 {
		t.Fatalf("cgroup parents of a running sandbox: %v", running)
	}
	d.stopGracefully()
	if got := testutil.CgroupsNamed(parent); len(got) != len(running) {
		t.Fatalf("a stop with a running sandbox removed its cgroups: %v, had %v", got, running)
	}
	d.start()
	d.sh(ctx, sb.ID, "agent", "true") // adopted, still running
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	d.stopGracefully()
	if left := testutil.CgroupsNamed(parent); len(left) > 0 {
		t.Fatalf("cgroups left after the daemon stopped with no sandbox: %v", left)
	}
	if left, _ := filepath.Glob("/run/stead-rootfs-*"); slices.Contains(left, rootfsDirOf(filepath.Join(d.runDir, "containers"))) {
		t.Fatalf("the rootfs directory is left after the daemon stopped")
	}
}

// rootfsDirOf is the rootfs directory a runtime on stateDir uses (as
// linux.rootfsDirFor names it).
func rootfsDirOf(stateDir string) string {
	h := sha256.Sum256([]byte(filepath.Clean(stateDir)))
	return "/run/stead-rootfs-" + hex.EncodeToString(h[:4])
}

// cmdlineWatch scans every process's command line (what ps shows) until
// stopped: it records the processes whose command line holds secret and
// the drill's child daemons (a serve on a data dir below dataDir/drill-).
type cmdlineWatch struct {
	secret, drillPrefix string
	mu                  sync.Mutex
	leaks               map[int]string
	children            map[int]string
	stop                chan struct{}
	done                chan struct{}
}

func watchCmdlines(secret, dataDir string) *cmdlineWatch {
	w := &cmdlineWatch{secret: secret, drillPrefix: filepath.Join(dataDir, "drill-"), leaks: map[int]string{}, children: map[int]string{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			w.scan()
			select {
			case <-w.stop:
				w.scan()
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *cmdlineWatch) scan() {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		args := string(bytes.ReplaceAll(bytes.TrimRight(b, "\x00"), []byte{0}, []byte{' '}))
		w.mu.Lock()
		if strings.Contains(args, w.secret) {
			w.leaks[pid] = args
		}
		if strings.Contains(args, " serve ") && strings.Contains(args, "--data-dir "+w.drillPrefix) {
			w.children[pid] = args
		}
		w.mu.Unlock()
	}
}

func (w *cmdlineWatch) end() (leaks, children map[int]string) {
	close(w.stop)
	<-w.done
	return w.leaks, w.children
}

// flagValue returns the value of --name in a space-joined command line.
func flagValue(args, name string) string {
	f := strings.Fields(args)
	for i := range f[:len(f)-1] {
		if f[i] == "--"+name {
			return f[i+1]
		}
	}
	return ""
}

// drillWatched runs an empty-data-dir drill of id on d while watching
// every command line; it fails unless the drill passed, and returns what
// the watch saw.
func drillWatched(t *testing.T, ctx context.Context, d *daemon, id, secret string) (client.Drill, map[int]string, map[int]string) {
	t.Helper()
	w := watchCmdlines(secret, d.dataDir)
	var dr client.Drill
	op, err := d.c.Drill(ctx, id, client.DrillRequest{EmptyDataDir: true, Verify: []string{"test", "-s", "/workspace/blob"}, Wait: true})
	if err == nil && op.EndedAt == nil {
		op, err = d.c.WaitOperation(ctx, op, nil)
	}
	leaks, children := w.end()
	opResult(t, op, err, &dr)
	if !dr.OK || !dr.DigestOK {
		t.Fatalf("drill: %+v", dr)
	}
	dirs := map[string]bool{} // the child's forks share its command line
	for _, args := range children {
		dirs[flagValue(args, "data-dir")] = true
	}
	if len(dirs) != 1 {
		t.Fatalf("the drill's child daemons: %v", children)
	}
	return dr, leaks, children
}

// checkDrillLeftNothing fails if the drill's child (its command line is
// args) left its data dir, a mount, a loop device or a cgroup behind.
func checkDrillLeftNothing(t *testing.T, args string) {
	t.Helper()
	base := flagValue(args, "data-dir")
	if base == "" {
		t.Fatalf("no --data-dir in %q", args)
	}
	if _, err := os.Stat(base); !os.IsNotExist(err) {
		t.Errorf("the drill's data dir %s is left: %v", base, err)
	}
	if n := mountsUnder(t, base); n > 0 {
		t.Errorf("%d mounts left under %s", n, base)
	}
	if left := testutil.LoopDevicesLeft(base); len(left) > 0 {
		t.Errorf("loop devices still backed by files in %s after 10 s: %v", base, left)
	}
	parent := linux.CgroupParentFor(filepath.Join(flagValue(args, "run-dir"), "containers"))
	if left := testutil.CgroupsNamed(parent); len(left) > 0 {
		t.Errorf("the drill left cgroups: %v", left)
	}
	if _, err := os.Stat(rootfsDirOf(filepath.Join(flagValue(args, "run-dir"), "containers"))); !os.IsNotExist(err) {
		t.Errorf("the drill left its rootfs directory: %v", err)
	}
}

// TestDrillRestoresOnBtrfsWithoutSecretsInArgv: with the S3 keys in the
// environment (AWS_*) nothing on the machine has the secret on its
// command line, the daemon's nor the drill's child's; the drill's fresh
// daemon uses a btrfs pool like its parent's, and leaves no data dir,
// mount, loop device or cgroup. A daemon given the keys inline in the URL
// works and warns, and its drill's child still gets no secret in argv.
func TestDrillRestoresOnBtrfsWithoutSecretsInArgv(t *testing.T) {
	cfg := s3test.Start(t)
	loc := fmt.Sprintf("%s/%s/stead?secure=false&region=us-east-1", cfg.Endpoint, cfg.Bucket)
	d := newDaemonEnv(t, []string{"AWS_ACCESS_KEY_ID=" + cfg.AccessKey, "AWS_SECRET_ACCESS_KEY=" + cfg.SecretKey}, "--repo", "s3://"+loc)
	ctx := ctxT(t)
	if info, err := d.c.InitRepo(ctx); err != nil || !info.Initialized {
		t.Fatalf("repo init: %+v %v", info, err)
	}
	if !strings.Contains(d.logText(), "from=\"environment (AWS_ACCESS_KEY_ID)\"") {
		t.Errorf("the daemon does not say where its S3 keys came from:\n%s", d.logText())
	}
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, sb.ID, "agent", "head -c 8000000 /dev/urandom > /workspace/blob && mkdir -p /workspace/src && for i in $(seq 200); do echo $i > /workspace/src/f$i; done")
	op, err := d.c.Push(ctx, sb.ID, client.PushRequest{Wait: true})
	opResult(t, op, err, nil)

	dr, leaks, children := drillWatched(t, ctx, d, sb.ID, cfg.SecretKey)
	if len(leaks) > 0 {
		t.Errorf("the S3 secret is on command lines: %v", leaks)
	}
	for _, args := range children {
		if flagValue(args, "pool") != "btrfs" {
			t.Errorf("the drill's daemon does not use the btrfs pool: %s", args)
		}
		checkDrillLeftNothing(t, args)
	}
	t.Logf("drill on btrfs: recovery %.2fs (restore %.2fs), %d files, %d bytes", dr.RecoverySeconds, dr.RestoreSeconds, dr.Files, dr.Bytes)

	// Inline credentials: accepted, warned about, never passed on in argv.
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	d.stopGracefully()
	inline := fmt.Sprintf("s3://%s:%s@%s", cfg.AccessKey, cfg.SecretKey, loc)
	d2 := newDaemon(t, "--repo", inline, "--repo-key-file", filepath.Join(d.dataDir, "repo.key"))
	if !strings.Contains(d2.logText(), "the repository URL holds the S3 secret key") {
		t.Errorf("no warning about the secret in the URL:\n%s", d2.logText())
	}
	_, leaks, children = drillWatched(t, ctx, d2, sb.ID, cfg.SecretKey)
	own := strings.Join(d2.cmd.Args, " ")
	for pid, args := range leaks {
		// d2 itself, or a fork of it caught before its exec: that has d2's
		// command line until then (a loaded machine shows some).
		if pid != d2.cmd.Process.Pid && args != own {
			t.Errorf("the S3 secret is on the command line of pid %d: %s", pid, args)
		}
	}
	for _, args := range children {
		checkDrillLeftNothing(t, args)
	}
}

// TestS3CredentialsFile: a daemon given only --repo-credentials-file (AWS
// format, 0600) opens the S3 repository; a file others can read is
// refused at start, and the error does not quote the secret.
func TestS3CredentialsFile(t *testing.T) {
	cfg := s3test.Start(t)
	url := fmt.Sprintf("s3://%s/%s/stead?secure=false&region=us-east-1", cfg.Endpoint, cfg.Bucket)
	dir := t.TempDir()
	file := filepath.Join(dir, "s3.credentials")
	body := fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", cfg.AccessKey, cfg.SecretKey)
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, "--repo", url, "--repo-credentials-file", file)
	ctx := ctxT(t)
	if info, err := d.c.InitRepo(ctx); err != nil || !info.Initialized {
		t.Fatalf("repo init: %+v %v", info, err)
	}
	if !strings.Contains(d.logText(), `from="file `+file+` [default]"`) {
		t.Errorf("the daemon does not say where its S3 keys came from")
	}
	d.stopGracefully()

	os.Chmod(file, 0o644)
	base := t.TempDir()
	cmd := exec.Command(d.bin, "serve", "--data-dir", filepath.Join(base, "data"), "--run-dir", filepath.Join(base, "run"), "--listen", "",
		"--socket", filepath.Join(base, "run", "s.sock"), "--pool", "dir", "--repo", url, "--repo-credentials-file", file)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "readable by others") || strings.Contains(string(out), cfg.SecretKey) {
		t.Fatalf("serve with a loose credentials file: %v\n%s", err, out)
	}
	linux.RemoveHostState(filepath.Join(base, "run", "containers"))
}
