// Package benchd starts a throw-away stead daemon for a benchmark run and
// holds the small statistics helpers the benchmarks share.
package benchd

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

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
	bridge string // with networking: the bridge and nftables table to remove
	cmd    *exec.Cmd
	exited chan struct{} // closed when the daemon process has exited
	lock   *os.File      // with networking: held while the bridge is ours
}

// Start runs bin serve with a pool of the given kind (and extra serve
// flags) and waits until its API answers. The daemon runs without
// networking (sandboxes have loopback only) and its port proxy on a port
// of its own, so that two daemons of one benchmark never share a bridge,
// a firewall table or the machine's resolver; StartNetwork gives one
// networking.
func Start(ctx context.Context, bin, poolKind string, poolGiB int, extra ...string) (*Daemon, error) {
	return start(ctx, bin, poolKind, poolGiB, "", append([]string{"--no-network"}, extra...)...)
}

// Network is the networking of a benchmark's daemon: a bridge (which
// also names its nftables table) and subnet no other daemon on the
// machine uses, and the DNS server its resolver forwards to (a stand-in
// internet's, never the machine's resolver).
type Network struct {
	Bridge string // such as "stbench0"
	Subnet string // such as "10.250.0.0/24"
	// Subnet6 is the IPv6 subnet; empty: one made from Subnet (a daemon
	// refuses a subnet another link holds, and every daemon's default
	// IPv6 subnet is the same).
	Subnet6     string
	DNSUpstream string // host:port
}

// subnet6 is n's IPv6 subnet: Subnet6, or a /64 of fd5e::/16 named by
// Subnet's first three bytes.
func (n Network) subnet6() (string, error) {
	if n.Subnet6 != "" {
		return n.Subnet6, nil
	}
	p, err := netip.ParsePrefix(n.Subnet)
	if err != nil || !p.Addr().Is4() {
		return "", fmt.Errorf("benchd: subnet %q: want an IPv4 prefix", n.Subnet)
	}
	b := p.Addr().As4()
	return fmt.Sprintf("fd5e:%02x%02x:%02x00::/64", b[0], b[1], b[2]), nil
}

// StartNetwork is Start with sandbox networking on n's bridge; Close
// removes the bridge and its nftables table.
func StartNetwork(ctx context.Context, bin, poolKind string, poolGiB int, n Network, extra ...string) (*Daemon, error) {
	if n.Bridge == "" || n.Subnet == "" || n.DNSUpstream == "" {
		return nil, fmt.Errorf("benchd: network %+v: want a bridge, a subnet and a DNS upstream", n)
	}
	// One run at a time per bridge: the lock goes with the process.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "stead-bench-"+n.Bridge+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("benchd: another benchmark runs a daemon on bridge %s (%v); wait for it to end", n.Bridge, err)
	}
	sub6, err := n.subnet6()
	if err != nil {
		lock.Close()
		return nil, err
	}
	removeNetwork(n.Bridge) // left by a killed run
	d, err := start(ctx, bin, poolKind, poolGiB, n.Bridge, append([]string{"--bridge", n.Bridge, "--subnet", n.Subnet, "--subnet6", sub6,
		"--dns-upstream", n.DNSUpstream, "--proxy-domain", "localhost"}, extra...)...)
	if err != nil {
		lock.Close()
		return nil, err
	}
	d.lock = lock
	return d, nil
}

func start(ctx context.Context, bin, poolKind string, poolGiB int, bridge string, extra ...string) (*Daemon, error) {
	base, err := os.MkdirTemp("", "stead-bench-")
	if err != nil {
		return nil, err
	}
	// The runtime directory is a tmpfs, as /run is on a systemd host. On
	// a machine whose /run is on the root file system (this one's: one
	// ext4 without a journal) every file made there scans for an inode
	// not recently deleted, a cost that grows with each file a benchmark
	// deleted, which is not stead's.
	run := filepath.Join(base, "run")
	if err := os.Mkdir(run, 0o755); err != nil {
		return nil, err
	}
	if err := syscall.Mount("tmpfs", run, "tmpfs", 0, "mode=0755"); err != nil {
		return nil, fmt.Errorf("benchd: tmpfs for the run directory: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	d := &Daemon{base: base, data: filepath.Join(base, "data"), bridge: bridge}
	d.cmd = exec.Command(bin, "serve", "--data-dir", d.data, "--run-dir", filepath.Join(base, "run"),
		"--listen", addr, "--socket", filepath.Join(base, "run", "stead.sock"), "--pool", poolKind,
		"--pool-size", fmt.Sprint(poolGiB), "--stop-grace", "2s",
		// Benchmarks create many sandboxes that write little: promises of
		// disk are not what they measure.
		"--pool-overcommit", "100", "--proxy-listen", "127.0.0.1:0")
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
	d.exited = make(chan struct{})
	go func() {
		d.cmd.Wait()
		close(d.exited)
	}()
	for i := 0; ; i++ {
		if key, err := os.ReadFile(filepath.Join(d.data, "admin.key")); err == nil {
			c, _ := client.New("http://"+addr, strings.TrimSpace(string(key)))
			if _, err := c.Info(ctx); err == nil {
				d.Client = c
				return d, nil
			}
		}
		select {
		case <-d.exited:
			i = 1 << 30 // it died: say why now rather than in 30 s
		default:
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
	<-d.exited
	syscall.Unmount(filepath.Join(d.data, "pool"), 0)
	linux.RemoveHostState(filepath.Join(d.base, "run", "containers"))
	// Agent socket tmpfs mounts of sandboxes the purge did not reach, and
	// the run directory's tmpfs.
	fsutil.UnmountUnder(d.base)
	if d.bridge != "" {
		// Sandbox netns files the purge did not reach are mounts under
		// the run directory, unmounted above.
		removeNetwork(d.bridge)
	}
	if d.lock != nil {
		d.lock.Close()
	}
	os.RemoveAll(d.base)
}

// removeNetwork deletes a daemon's bridge and its nftables tables (the
// daemon keeps both across restarts, so nothing else removes them).
func removeNetwork(bridge string) {
	if l, err := netlink.LinkByName(bridge); err == nil {
		_ = netlink.LinkDel(l)
	}
	if c, err := nftables.New(); err == nil {
		for _, fam := range []nftables.TableFamily{nftables.TableFamilyINet, nftables.TableFamilyBridge} {
			c.DelTable(&nftables.Table{Name: bridge, Family: fam})
			_ = c.Flush() // absent already: nothing to do
		}
	}
}

// Data is the daemon's data directory.
func (d *Daemon) Data() string { return d.data }

// RunDir is the daemon's runtime directory; a networked sandbox's network
// namespace is RunDir()/net/ns/<id>.
func (d *Daemon) RunDir() string { return filepath.Join(d.base, "run") }

// Log is the daemon's log so far.
func (d *Daemon) Log() ([]byte, error) { return os.ReadFile(filepath.Join(d.base, "daemon.log")) }

// RSS returns the daemon's resident set size in bytes.
func (d *Daemon) RSS() int64 { return d.status("VmRSS:") << 10 }

// RSSAnon returns the anonymous part of the daemon's resident set in
// bytes: its heap and stacks, without the pages of its binary (and any
// other file) it has touched, which RSS also counts.
func (d *Daemon) RSSAnon() int64 { return d.status("RssAnon:") << 10 }

// CPU returns the CPU time (user + system) the daemon's own threads have
// used so far: not its children's (runc's init re-exec) nor the
// sandboxes'.
func (d *Daemon) CPU() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.Pid))
	if err != nil {
		return 0
	}
	s := string(b)
	// The fields after the command, which is in parentheses and may hold
	// anything: utime and stime are the 14th and 15th of the line.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	var utime, stime int64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc's CPU times (100 on Linux).
const clockTicks = 100

// Threads returns the daemon's OS thread count.
func (d *Daemon) Threads() int64 { return d.status("Threads:") }

// status returns the first number of the daemon's /proc status line key.
func (d *Daemon) status(key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, key) {
			var n int64
			fmt.Sscan(strings.Fields(line)[1], &n)
			return n
		}
	}
	return 0
}

// MachineBusy returns the CPU time every CPU of the machine has spent not
// idle (nor waiting for I/O) since boot, from /proc/stat: over an interval
// the difference is what everything on the machine cost, the kernel's own
// threads and interrupts among it.
func MachineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:8] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		var n int64
		fmt.Sscan(v, &n)
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks
}

// Tasks returns how many tasks (threads) the machine has, from
// /proc/loadavg.
func Tasks() int64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0
	}
	_, total, _ := strings.Cut(f[3], "/")
	var n int64
	fmt.Sscan(total, &n)
	return n
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
