// Package e2e drives a real stead daemon (a statically linked stead binary
// built once per run) through its API: real namespaces, cgroups, a btrfs
// pool on a loop device, kill -9 and restart. It needs root; without root it
// fails (see testutil.RequireRoot).
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/runtime/linux"
	"github.com/stead-dev/stead/internal/testutil"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// steadBinary builds the static stead binary, stead-shim and stead-init once per test
// run (or takes them from $STEAD_BINARY and its directory).
func steadBinary(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t)
	buildOnce.Do(func() {
		if p := os.Getenv("STEAD_BINARY"); p != "" {
			binPath = p
			return
		}
		dir, err := os.MkdirTemp("", "stead-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "stead")
		cmd := exec.Command("go", "build", "-tags", "netgo,osusergo", "-ldflags", "-linkmode external -extldflags -static", "-o", binPath, "../cmd/stead")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build stead: %v\n%s", err, out)
			return
		}
		cmd = exec.Command("go", "build", "-tags", "netgo,osusergo", "-ldflags", "-linkmode external -extldflags -static", "-o", filepath.Join(dir, "stead-shim"), "../cmd/stead-shim")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build stead-shim: %v\n%s", err, out)
			return
		}
		cmd = exec.Command("go", "build", "-o", filepath.Join(dir, "stead-init"), "../cmd/stead-init")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build stead-init: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// daemon is one stead serve process.
type daemon struct {
	t       *testing.T
	bin     string
	dataDir string
	runDir  string
	addr    string
	extra   []string
	env     []string // added to the daemon's environment
	cmd     *exec.Cmd
	log     *os.File
	key     string
	c       *client.Client
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// newDaemon starts stead serve on fresh directories; the daemon, its
// sandboxes and its pool are torn down when the test ends.
func newDaemon(t *testing.T, extra ...string) *daemon {
	t.Helper()
	return newDaemonEnv(t, nil, extra...)
}

// newDaemonEnv is newDaemon with env added to the daemon's environment.
func newDaemonEnv(t *testing.T, env []string, extra ...string) *daemon {
	t.Helper()
	bin := steadBinary(t)
	base := t.TempDir()
	d := &daemon{t: t, bin: bin, dataDir: filepath.Join(base, "data"), runDir: filepath.Join(base, "run"), addr: freePort(t), extra: extra, env: env}
	d.start()
	t.Cleanup(d.teardown)
	return d
}

func (d *daemon) start() {
	t := d.t
	t.Helper()
	// A 24 GiB pool (sparse) holds the instance types the tests use
	// (medium: 20 GiB of its 21.6 GiB usable); over-commit 8 because tests
	// make many sandboxes and fill none. A test may pass its own flags in
	// extra (the last of a repeated flag wins).
	args := append([]string{"serve", "--data-dir", d.dataDir, "--run-dir", d.runDir, "--listen", d.addr,
		"--socket", filepath.Join(d.runDir, "stead.sock"), "--pool-size", "24", "--pool-overcommit", "8", "--stop-grace", "3s",
		// Daemons run side by side: networking (one bridge per daemon) is
		// turned on by the tests that need it (netDaemon).
		"--no-network", "--proxy-listen", "127.0.0.1:0"}, d.extra...)
	d.cmd = exec.Command(d.bin, args...)
	if d.env != nil {
		d.cmd.Env = append(os.Environ(), d.env...)
	}
	logPath := filepath.Join(filepath.Dir(d.dataDir), "daemon.log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	d.log = f
	d.cmd.Stdout, d.cmd.Stderr = f, f
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b, err := os.ReadFile(filepath.Join(d.dataDir, "admin.key")); err == nil && d.key == "" {
			d.key = strings.TrimSpace(string(b))
		}
		if d.key != "" {
			c, err := client.New("http://"+d.addr, d.key)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Info(context.Background()); err == nil {
				d.c = c
				return
			}
		}
		if d.cmd.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("daemon did not come up; log:\n%s", d.logText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *daemon) logText() string {
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(d.dataDir), "daemon.log"))
	return string(b)
}

// kill9 kills the daemon process with SIGKILL (its sandboxes live on).
func (d *daemon) kill9() {
	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()
	d.log.Close()
}

// stopGracefully sends SIGTERM and waits.
func (d *daemon) stopGracefully() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()
	d.log.Close()
}

func (d *daemon) teardown() {
	ctx := context.Background()
	if d.cmd.ProcessState == nil {
		// Every tenant's sandboxes: a stopped daemon leaves them running.
		clients := []*client.Client{d.c}
		if ts, err := d.c.ListTenants(ctx); err == nil {
			for _, tn := range ts {
				clients = append(clients, d.c.WithTenant(tn.ID))
			}
		}
		for _, c := range clients {
			if list, err := c.ListSandboxes(ctx, true); err == nil {
				for _, sb := range list {
					c.DeleteSandbox(ctx, sb.ID, true)
				}
			}
		}
		d.stopGracefully()
	}
	// Kill anything left, then unmount the pool (frees the loop device).
	if ents, err := os.ReadDir(filepath.Join(d.runDir, "containers")); err == nil && len(ents) > 0 {
		d.t.Logf("sandboxes left at teardown: %d", len(ents))
	}
	linux.RemoveHostState(filepath.Join(d.runDir, "containers"))
	// Per-sandbox mounts a killed daemon could not take down.
	fsutil.UnmountUnder(d.runDir)
	pool := filepath.Join(d.dataDir, "pool")
	for i := 0; i < 50; i++ {
		if err := syscall.Unmount(pool, 0); err != nil {
			break
		}
	}
	if d.t.Failed() {
		d.t.Logf("daemon log:\n%s", d.logText())
	}
}

// mountsUnder counts mount points at or below dir.
func mountsUnder(t *testing.T, dir string) int {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			n++
		}
	}
	return n
}

// loopDevicesFor counts loop devices backed by image.
func loopDevicesFor(t *testing.T, image string) int {
	out, _ := exec.Command("losetup", "-j", image).Output()
	s := strings.TrimSpace(string(out))
	if s == "" {
		return 0
	}
	return len(strings.Split(s, "\n"))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// sh runs a shell command in a sandbox and fails the test on a non-zero exit.
func (d *daemon) sh(ctx context.Context, id, user, script string) string {
	d.t.Helper()
	res, err := d.c.Exec(ctx, id, client.ExecRequest{Command: []string{"/bin/sh", "-c", script}, User: user})
	if err != nil {
		d.t.Fatalf("exec %q: %v", script, err)
	}
	if res.ExitCode != 0 {
		d.t.Fatalf("exec %q: exit %d\nstdout: %s\nstderr: %s", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}
