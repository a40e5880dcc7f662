// Package benchd starts a throw-away stead daemon for a benchmark run and
// holds the small statistics helpers the benchmarks share.
package benchd

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/runtime/linux"
)

// Daemon is a running `stead serve` on fresh directories.
type Daemon struct {
	Client *client.Client
	Pid    int
	base   string
	data   string
	cmd    *exec.Cmd
}

// Start runs bin serve with a pool of the given kind (and extra serve
// flags) and waits until its API answers.
func Start(ctx context.Context, bin, poolKind string, poolGiB int, extra ...string) (*Daemon, error) {
	base, err := os.MkdirTemp("", "stead-bench-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	d := &Daemon{base: base, data: filepath.Join(base, "data")}
	d.cmd = exec.Command(bin, "serve", "--data-dir", d.data, "--run-dir", filepath.Join(base, "run"),
		"--listen", addr, "--socket", filepath.Join(base, "run", "stead.sock"), "--pool", poolKind,
		"--pool-size", fmt.Sprint(poolGiB), "--stop-grace", "2s",
		// Benchmarks create many sandboxes that write little: promises of
		// disk are not what they measure.
		"--pool-overcommit", "100")
	d.cmd.Args = append(d.cmd.Args, extra...)
	logf, err := os.Create(filepath.Join(base, "daemon.log"))
	if err != nil {
		return nil, err
	}
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	d.Pid = d.cmd.Process.Pid
	for i := 0; ; i++ {
		if key, err := os.ReadFile(filepath.Join(d.data, "admin.key")); err == nil {
			c, _ := client.New("http://"+addr, strings.TrimSpace(string(key)))
			if _, err := c.Info(ctx); err == nil {
				d.Client = c
				return d, nil
			}
		}
		if i > 600 {
			b, _ := os.ReadFile(filepath.Join(base, "daemon.log"))
			d.Close()
			return nil, fmt.Errorf("daemon did not start:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close purges every sandbox, stops the daemon and removes its pool.
func (d *Daemon) Close() {
	ctx := context.Background()
	if d.Client != nil {
		if list, err := d.Client.ListSandboxes(ctx, true); err == nil {
			for _, sb := range list {
				d.Client.DeleteSandbox(ctx, sb.ID, true)
			}
		}
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()
	syscall.Unmount(filepath.Join(d.data, "pool"), 0)
	// Agent socket tmpfs mounts of sandboxes the purge did not reach.
	fsutil.UnmountUnder(d.base)
	linux.RemoveHostState(filepath.Join(d.base, "run", "containers"))
	os.RemoveAll(d.base)
}

// Data is the daemon's data directory.
func (d *Daemon) Data() string { return d.data }

// RSS returns the daemon's resident set size in bytes.
func (d *Daemon) RSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			var kb int64
			fmt.Sscan(strings.Fields(line)[1], &kb)
			return kb << 10
		}
	}
	return 0
}

// Series is a named set of timings.
type Series struct {
	Name string
	D    []time.Duration
}

// Pct returns the p-quantile (0..1) of the timings.
func (s Series) Pct(p float64) time.Duration {
	if len(s.D) == 0 {
		return 0
	}
	d := append([]time.Duration(nil), s.D...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[int(float64(len(d)-1)*p)]
}

// Time runs f n times and returns the timings.
func Time(n int, f func(i int) error) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := f(i); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// Ms formats a duration in milliseconds.
func Ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
