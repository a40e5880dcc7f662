package rig

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/runtime/linux"
)

// Node is one `stead serve` of the cluster, in its own network namespace.
type Node struct {
	c *Cluster
	// Index is the node's number (1-based); Name is "node<Index>".
	Index int
	Name  string
	// NS is the node's network namespace (/run/netns/NS); HostVeth the host
	// end of its veth pair (down = partitioned); IP its address.
	NS, HostVeth, IP string
	// API is the node's API address (IP:7878), also its internal address.
	API string
	// DataDir, RunDir, Socket and LogPath are the node's own.
	DataDir, RunDir, Socket, LogPath string
	// Extra are more serve flags for this node alone (a restart uses them).
	Extra []string
	// Key is the admin key; Client reaches the node's API through the
	// bridge, Local through its unix socket (which a partition does not cut).
	Key           string
	Client, Local *client.Client

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	logf   *os.File
}

// StateDir is the node's runtime state dir (its sandboxes' cgroup parent
// and idmapped roots are named after it).
func (n *Node) StateDir() string { return filepath.Join(n.RunDir, "containers") }

// CgroupParent names the cgroup parent of the node's sandboxes.
func (n *Node) CgroupParent() string { return linux.CgroupParentFor(n.StateDir()) }

// rootfsDir is where the node's runtime mounts its sandboxes' idmapped
// roots (named like the cgroup parent: runtime/linux's rootfsDirFor).
func (n *Node) rootfsDir() string {
	return "/run/stead-rootfs-" + strings.TrimPrefix(n.CgroupParent(), "stead-")
}

// Pid is the daemon's pid (0 when it is not running).
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.exited == nil {
		return 0
	}
	select {
	case <-n.exited:
		return 0
	default:
		return n.cmd.Process.Pid
	}
}

// Alive reports whether the daemon process runs.
func (n *Node) Alive() bool { return n.Pid() != 0 }

// args are the node's serve flags.
func (n *Node) args() []string {
	c, o := n.c, n.c.opts
	a := []string{"serve", "--data-dir", n.DataDir, "--run-dir", n.RunDir, "--socket", n.Socket,
		"--listen", n.API, "--node-name", n.Name, "--node-address", n.API,
		"--store", c.DSN, "--repo", c.Repo, "--repo-credentials-file", c.CredentialsFile, "--repo-key-file", c.RepoKeyFile,
		"--pool-size", strconv.Itoa(o.PoolGiB), "--pool-overcommit", "8", "--stop-grace", "3s",
		// Sandboxes' DNS goes to the node namespace's own loopback, where
		// nothing answers: never the machine's resolver.
		"--dns-upstream", "127.0.0.1:53", "--proxy-listen", "127.0.0.1:7879", "--policy-interval", "1s"}
	if c.knows("--cluster-secret-file") {
		a = append(a, "--cluster-secret-file", c.SecretFile)
	}
	if c.knows("--node-heartbeat") {
		a = append(a, "--node-heartbeat", o.Heartbeat.String())
	}
	if c.knows("--node-grace") {
		a = append(a, "--node-grace", o.Grace.String())
	}
	if c.knows("--lease-ttl") {
		a = append(a, "--lease-ttl", o.LeaseTTL.String())
	}
	a = append(a, o.Serve...)
	return append(a, n.Extra...)
}

// Start starts the daemon in the node's namespace and waits until its API
// answers through the bridge (at most 90 s).
func (n *Node) Start(ctx context.Context) error {
	if n.Alive() {
		return fmt.Errorf("rig: %s runs already", n.Name)
	}
	f, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	fmt.Fprintf(f, "\n=== rig: start %s at %s\n", n.Name, time.Now().Format(time.RFC3339Nano))
	// nsenter --net enters only the network namespace and execs the daemon
	// (no fork): the pid is the daemon's. `ip netns exec` would also
	// remount /sys, hiding /sys/fs/cgroup from it.
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + n.NS, "--", n.c.opts.Bin}, n.args()...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("rig: start %s: %w", n.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited, n.logf = cmd, exited, f
	n.mu.Unlock()
	deadline := time.Now().Add(90 * time.Second)
	for {
		if n.Key == "" {
			if b, err := os.ReadFile(filepath.Join(n.DataDir, "admin.key")); err == nil {
				n.Key = strings.TrimSpace(string(b))
			}
		}
		if n.Key != "" {
			if n.Client == nil {
				if n.Client, err = client.New("http://"+n.API, n.Key); err != nil {
					return err
				}
				if n.Local, err = client.New("unix://"+n.Socket, n.Key); err != nil {
					return err
				}
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := n.Client.Info(cctx)
			cancel()
			if err == nil {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("rig: %s exited before its API answered; log:\n%s", n.Name, n.LogTail(8000))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("rig: %s's API did not answer on %s within 90s; log:\n%s", n.Name, n.API, n.LogTail(8000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Restart starts a stopped or killed node again.
func (n *Node) Restart(ctx context.Context) error { return n.Start(ctx) }

// Kill9 kills the daemon with SIGKILL; its sandboxes run on.
func (n *Node) Kill9() {
	n.signal(syscall.SIGKILL, 0)
}

// Stop stops the daemon with SIGTERM (SIGKILL after 30 s).
func (n *Node) Stop() {
	n.signal(syscall.SIGTERM, 30*time.Second)
}

func (n *Node) signal(sig syscall.Signal, wait time.Duration) {
	n.mu.Lock()
	cmd, exited, f := n.cmd, n.exited, n.logf
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	if wait > 0 {
		select {
		case <-exited:
		case <-time.After(wait):
			cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	<-exited
	if f != nil {
		f.Close()
	}
}

// KillMachine is the loss of the node's machine: SIGKILL to the daemon and
// to every process of its sandboxes, at once.
func (n *Node) KillMachine() {
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGKILL)
	}
	n.killSandboxes()
	n.Kill9()
	n.killSandboxes() // any the daemon started in between
}

// Partition cuts the node off: its host-side veth goes down, so it reaches
// neither PostgreSQL, nor S3, nor the other nodes, nor they it.
func (n *Node) Partition() error { return ip("link", "set", n.HostVeth, "down") }

// Heal ends a partition.
func (n *Node) Heal() error { return ip("link", "set", n.HostVeth, "up") }

// CLI runs the stead CLI against the node's API (through the bridge) and
// returns its exit code and output.
func (n *Node) CLI(ctx context.Context, args ...string) (int, string, string) {
	cmd := exec.CommandContext(ctx, n.c.opts.Bin, args...)
	cmd.Env = append(os.Environ(), "STEAD_ENDPOINT=http://"+n.API, "STEAD_API_KEY="+n.Key)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errOut.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errOut.String()
	}
	return -1, out.String(), err.Error()
}

// LogTail returns the last max bytes of the node's daemon log.
func (n *Node) LogTail(max int) string {
	b, _ := os.ReadFile(n.LogPath)
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// cgroupDir returns the node's sandbox cgroup parent in one v1 controller
// (from the runtime's record of its parents; the computed default when the
// record does not exist yet), or "".
func (n *Node) cgroupDir(ctrl string) string {
	if b, err := os.ReadFile(filepath.Join(n.StateDir(), "cgroup-parents")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "/sys/fs/cgroup/"+ctrl+"/") && filepath.Base(l) == n.CgroupParent() {
				return l
			}
		}
	}
	d := "/sys/fs/cgroup/" + ctrl + "/" + n.CgroupParent()
	if _, err := os.Stat(d); err == nil {
		return d
	}
	return ""
}

// SandboxProc is one sandbox of a node with live processes.
type SandboxProc struct {
	// ID is the sandbox id (its cgroup's name), Pids its processes.
	ID   string
	Pids []int
	// Frozen is whether its cgroup is frozen (paused: it does not run).
	Frozen bool
}

// Sandboxes lists the node's sandboxes that have processes, from the
// cgroups of its runtime: a sandbox's cgroup is <parent>/<id>, and the
// parent is named after the node's run dir, so it tells the node whatever
// the daemon says (or whether it lives).
func (n *Node) Sandboxes() []SandboxProc {
	pids := n.cgroupDir("pids")
	if pids == "" {
		return nil
	}
	freezer := n.cgroupDir("freezer")
	ents, err := os.ReadDir(pids)
	if err != nil {
		return nil
	}
	var out []SandboxProc
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		ps := readPids(filepath.Join(pids, e.Name(), "cgroup.procs"))
		if len(ps) == 0 {
			continue
		}
		sp := SandboxProc{ID: e.Name(), Pids: ps}
		if freezer != "" {
			if b, err := os.ReadFile(filepath.Join(freezer, e.Name(), "freezer.state")); err == nil {
				sp.Frozen = strings.TrimSpace(string(b)) == "FROZEN"
			}
		}
		out = append(out, sp)
	}
	return out
}

func readPids(path string) []int {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// killSandboxes SIGKILLs every process of the node's sandboxes (thawing
// frozen ones so they die) and waits up to 10 s for the cgroups to empty.
func (n *Node) killSandboxes() {
	freezer := n.cgroupDir("freezer")
	deadline := time.Now().Add(10 * time.Second)
	for {
		sbs := n.Sandboxes()
		if len(sbs) == 0 || time.Now().After(deadline) {
			return
		}
		for _, sb := range sbs {
			for _, p := range sb.Pids {
				syscall.Kill(p, syscall.SIGKILL)
			}
			if sb.Frozen && freezer != "" {
				os.WriteFile(filepath.Join(freezer, sb.ID, "freezer.state"), []byte("THAWED"), 0)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeSandboxCgroups removes the (emptied) cgroups of the node's
// sandboxes in every hierarchy: a daemon that did not delete its sandboxes
// leaves them, and its parents cannot go before them.
func (n *Node) removeSandboxCgroups() {
	var parents []string
	if b, err := os.ReadFile(filepath.Join(n.StateDir(), "cgroup-parents")); err == nil {
		parents = strings.Fields(string(b))
	}
	m, _ := filepath.Glob("/sys/fs/cgroup/*/" + n.CgroupParent())
	parents = append(parents, m...)
	for _, p := range parents {
		if filepath.Base(p) != n.CgroupParent() {
			continue
		}
		ents, _ := os.ReadDir(p)
		for _, e := range ents {
			if e.IsDir() {
				os.Remove(filepath.Join(p, e.Name()))
			}
		}
	}
}

// teardown stops the daemon, kills its sandboxes, and removes their
// cgroups and mounts and the node's pool (with its loop device).
func (n *Node) teardown() error {
	if n.Alive() {
		n.Heal() // a partitioned daemon stops faster when it reaches its store
		n.Stop()
	}
	n.killSandboxes()
	n.removeSandboxCgroups()
	var problems []error
	if err := linux.RemoveHostState(n.StateDir()); err != nil {
		problems = append(problems, fmt.Errorf("%s: %w", n.Name, err))
	}
	fsutil.UnmountUnder(n.RunDir)
	fsutil.UnmountUnder(n.rootfsDir())
	os.Remove(n.rootfsDir())
	pool := filepath.Join(n.DataDir, "pool")
	for range 50 {
		if err := syscall.Unmount(pool, 0); err != nil {
			break
		}
	}
	for _, dev := range loopDevices(filepath.Join(n.DataDir, "pool.img")) {
		exec.Command("losetup", "-d", dev).Run()
	}
	return errors.Join(problems...)
}

// leftovers reports what of the node is still on the host.
func (n *Node) leftovers() error {
	var left []string
	if n.Alive() {
		left = append(left, "daemon pid "+strconv.Itoa(n.Pid()))
	}
	for _, sb := range n.Sandboxes() {
		left = append(left, fmt.Sprintf("sandbox %s processes %v", sb.ID, sb.Pids))
	}
	for _, d := range []string{n.RunDir, n.DataDir, n.rootfsDir()} {
		if m := mountsUnder(d); len(m) > 0 {
			left = append(left, "mounts "+strings.Join(m, " "))
		}
	}
	cg, _ := filepath.Glob("/sys/fs/cgroup/*/" + n.CgroupParent())
	if b, err := os.ReadFile(filepath.Join(n.StateDir(), "cgroup-parents")); err == nil {
		cg = append(cg, strings.Fields(string(b))...)
	}
	for _, d := range cg {
		if _, err := os.Stat(d); err == nil && filepath.Base(d) == n.CgroupParent() && !slices.Contains(left, "cgroup "+d) {
			left = append(left, "cgroup "+d)
		}
	}
	if devs := loopDevices(filepath.Join(n.DataDir, "pool.img")); len(devs) > 0 {
		left = append(left, "loop devices "+strings.Join(devs, " "))
	}
	if len(left) > 0 {
		return fmt.Errorf("rig: %s left behind: %s", n.Name, strings.Join(left, "; "))
	}
	return nil
}

// loopDevices lists the loop devices backed by image.
func loopDevices(image string) []string {
	out, _ := exec.Command("losetup", "-j", image).Output()
	var devs []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if dev, _, ok := strings.Cut(l, ":"); ok && dev != "" {
			devs = append(devs, dev)
		}
	}
	return devs
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) && !slices.Contains(out, f[4]) {
			out = append(out, f[4])
		}
	}
	return out
}
