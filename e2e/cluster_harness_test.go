package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stead-dev/stead/bench/cluster/rig"
	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/treedigest"
)

// The cluster tests run three `stead serve` nodes on one private
// PostgreSQL and one S3 server, each node in a network namespace of the
// test's own on a host bridge (bench/cluster/rig does the work; the
// benchmark uses the same rig). Traffic stays on the host: 127.0.0.1 and
// the rig's 10.213.X.0/24.

// cluster is a rig for one test, with the overlap checker running over
// the whole test.
type cluster struct {
	*rig.Cluster
	t   *testing.T
	chk *rig.Checker
}

// newCluster starts a three-node cluster (or o.Nodes) torn down when the
// test ends; the teardown fails the test if anything of it is left on the
// host. The checker samples every 100 ms from the start and the test fails
// if two nodes ever ran one sandbox at the same time.
func newCluster(t *testing.T, o rig.Options) *cluster {
	t.Helper()
	o.Bin = steadBinary(t)
	o.Logf = t.Logf
	o.Dir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rc, err := rig.Start(ctx, o)
	if err != nil {
		t.Fatalf("start the cluster: %v", err)
	}
	c := &cluster{Cluster: rc, t: t}
	c.chk = rc.StartChecker(100 * time.Millisecond)
	t.Cleanup(func() {
		c.chk.Stop()
		if ov := c.chk.Overlaps(); len(ov) > 0 {
			t.Errorf("two nodes ran one sandbox at the same time (%d times in %d samples), first: %s", len(ov), c.chk.Samples(), ov[0])
		}
		if t.Failed() {
			for _, n := range rc.Nodes {
				t.Logf("=== %s daemon log (tail):\n%s", n.Name, n.LogTail(12000))
			}
		}
		if err := rc.Close(); err != nil {
			t.Errorf("cluster teardown: %v", err)
		}
	})
	return c
}

// node returns the named node.
func (c *cluster) node(name string) *rig.Node {
	c.t.Helper()
	n := c.Node(name)
	if n == nil {
		c.t.Fatalf("no node %s", name)
	}
	return n
}

// others returns the nodes but the named ones.
func (c *cluster) others(names ...string) []*rig.Node {
	var out []*rig.Node
	for _, n := range c.Nodes {
		if !slices.Contains(names, n.Name) {
			out = append(out, n)
		}
	}
	return out
}

// cli runs the CLI against n and fails the test on a non-zero exit.
func (c *cluster) cli(n *rig.Node, args ...string) string {
	c.t.Helper()
	code, out, errOut := n.CLI(ctxT(c.t), args...)
	if code != 0 {
		c.t.Fatalf("stead %s through %s: exit %d\n%s%s", strings.Join(args, " "), n.Name, code, out, errOut)
	}
	return out
}

// nodes lists the nodes as n sees them (stead node ls --json).
func (c *cluster) nodes(n *rig.Node) []client.Node {
	c.t.Helper()
	var ns []client.Node
	out := c.cli(n, "node", "ls", "--json")
	if err := json.Unmarshal([]byte(out), &ns); err != nil {
		c.t.Fatalf("node ls --json through %s: %v\n%s", n.Name, err, out)
	}
	return ns
}

// waitNode waits until n sees node name in the wanted liveness.
func (c *cluster) waitNode(n *rig.Node, name string, alive bool, timeout time.Duration) client.Node {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, err := n.Local.GetNode(ctxT(c.t), name)
		if err == nil && got.Alive == alive {
			return got
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s sees %s as %+v (%v) after %s; want alive=%v", n.Name, name, got, err, timeout, alive)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// create makes a sandbox through n and waits until it runs on a node,
// which it returns with the sandbox.
func (c *cluster) create(n *rig.Node, req client.CreateSandboxRequest) (client.Sandbox, string) {
	c.t.Helper()
	ctx := ctxT(c.t)
	if req.InstanceType == "" {
		req.InstanceType = "micro"
	}
	sb, err := n.Client.CreateSandbox(ctx, req)
	if err != nil {
		c.t.Fatalf("create %q through %s: %v", req.Name, n.Name, err)
	}
	on := c.chk.WaitRunning(ctx, sb.ID, 30*time.Second)
	if on == "" {
		c.t.Fatalf("sandbox %s created through %s runs on no single node after 30s (on %v)", sb.ID, n.Name, c.chk.Where(sb.ID))
	}
	return sb, on
}

// exec runs a shell script in a sandbox through node n.
func (c *cluster) exec(n *rig.Node, id, user, script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := n.Client.Exec(ctx, id, client.ExecRequest{Command: []string{"/bin/sh", "-c", script}, User: user})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return string(res.Stdout), fmt.Errorf("exit %d: %s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout), nil
}

// sh is exec that fails the test, saying through which node to which
// owner the call went.
func (c *cluster) sh(n *rig.Node, id, user, script string) string {
	c.t.Helper()
	out, err := c.exec(n, id, user, script)
	if err != nil {
		c.t.Fatalf("exec %q in %s (running on %v) through %s: %v", script, id, c.chk.Where(id), n.Name, err)
	}
	return out
}

// waitAnswer retries an exec through n until the sandbox answers (a
// sandbox whose processes run may not be recorded running yet) and
// returns how long it took, failing after timeout.
func (c *cluster) waitAnswer(n *rig.Node, id string, timeout time.Duration) time.Duration {
	c.t.Helper()
	t0 := time.Now()
	for {
		out, err := c.exec(n, id, "agent", "echo $STEAD_SANDBOX")
		if err == nil && strings.TrimSpace(out) == id {
			return time.Since(t0)
		}
		if time.Since(t0) > timeout {
			c.t.Fatalf("%s (running on %v) does not answer an exec through %s after %s: %q %v", id, c.chk.Where(id), n.Name, timeout, out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readFile downloads a file of a sandbox through n.
func (c *cluster) readFile(n *rig.Node, id, path string) (string, error) {
	rc, _, err := n.Client.ReadFile(ctxT(c.t), id, path)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

// push pushes a sandbox through n and returns the result.
func (c *cluster) push(n *rig.Node, id string) client.PushResult {
	c.t.Helper()
	var p client.PushResult
	op, err := n.Client.Push(ctxT(c.t), id, client.PushRequest{Wait: true})
	opResult(c.t, op, err, &p)
	return p
}

// agentDigest digests /workspace and /data of a tree: what an agent
// writes, compared between a push and the copy restored from it.
func agentDigest(t *testing.T, root string) []string {
	t.Helper()
	all, err := treedigest.Entries(context.Background(), root, digestOpts)
	if err != nil {
		t.Fatalf("digest %s: %v", root, err)
	}
	var out []string
	for _, l := range all {
		if strings.HasPrefix(l, `"/workspace`) || strings.HasPrefix(l, `"/data`) {
			out = append(out, l)
		}
	}
	return out
}

// pushedDigest digests the local snapshot a push read from, on node n.
func pushedDigest(t *testing.T, n *rig.Node, p client.PushResult) []string {
	t.Helper()
	snap := p.RemoteSnapshot.Labels["local_snapshot"]
	if snap == "" {
		t.Fatalf("push result names no local snapshot: %+v", p.RemoteSnapshot)
	}
	return agentDigest(t, filepath.Join(n.DataDir, "pool", "snapshots", snap))
}

// rootOn is a sandbox's root in node n's pool.
func rootOn(n *rig.Node, id string) string { return filepath.Join(n.DataDir, "pool", "sandboxes", id) }

// TestClusterHarnessIsolatesNodesAndPartitions proves the rig itself: each
// daemon runs in its own network namespace and reaches PostgreSQL and S3
// through the bridge; the nodes share no cgroup parent, idmapped-root
// directory, pool loop device or nftables table; a partition stops a
// node's heartbeat and cuts its API from the host, and healing brings both
// back; the checker sees a sandbox doubled across two nodes (two cgroups
// the test makes) and does not count a frozen copy.
func TestClusterHarnessIsolatesNodesAndPartitions(t *testing.T) {
	c := newCluster(t, rig.Options{})
	ctx := ctxT(t)

	parents, loops := map[string]string{}, map[string]string{}
	for _, n := range c.Nodes {
		self, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", n.Pid()))
		if err != nil {
			t.Fatal(err)
		}
		var want, host syscall.Stat_t
		if err := syscall.Stat("/run/netns/"+n.NS, &want); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Stat("/proc/self/ns/net", &host); err != nil {
			t.Fatal(err)
		}
		if self != fmt.Sprintf("net:[%d]", want.Ino) || want.Ino == host.Ino {
			t.Fatalf("%s's daemon is in net namespace %s; want %s's (inode %d), not the host's (%d)", n.Name, self, n.NS, want.Ino, host.Ino)
		}
		// The daemon sees the host's cgroups (nsenter --net, not ip netns exec).
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/sys/fs/cgroup/pids", n.Pid())); err != nil {
			t.Fatalf("%s's daemon does not see /sys/fs/cgroup: %v", n.Name, err)
		}
		if other, ok := parents[n.CgroupParent()]; ok {
			t.Fatalf("%s and %s share the cgroup parent %s", n.Name, other, n.CgroupParent())
		}
		parents[n.CgroupParent()] = n.Name
		out, err := runOut("losetup", "-j", filepath.Join(n.DataDir, "pool.img"))
		if err != nil || strings.Count(out, "\n") != 1 {
			t.Fatalf("%s's pool: loop devices %q %v; want one", n.Name, out, err)
		}
		dev, _, _ := strings.Cut(out, ":")
		if other, ok := loops[dev]; ok {
			t.Fatalf("%s and %s share the loop device %s", n.Name, other, dev)
		}
		loops[dev] = n.Name
		// The node's sandbox bridge and nftables table are in its own
		// namespace, not on the host.
		tables, err := runOut("nsenter", "--net=/run/netns/"+n.NS, "nft", "list", "tables")
		if err != nil || !strings.Contains(tables, "inet stead0") {
			t.Fatalf("nftables tables in %s's namespace: %q %v; want the daemon's inet stead0", n.Name, tables, err)
		}
		links, err := runOut("nsenter", "--net=/run/netns/"+n.NS, "ip", "-br", "link")
		if err != nil || !strings.Contains(links, "stead0") {
			t.Fatalf("links in %s's namespace: %q %v; want the daemon's bridge stead0", n.Name, links, err)
		}
	}
	t.Logf("cgroup parents %v, loop devices %v", parents, loops)

	// Every node registered; node2 partitioned: its API is cut from the
	// host, its heartbeat stops, the others see it dead, and healed alive.
	for _, n := range c.Nodes {
		c.waitNode(c.Nodes[0], n.Name, true, 30*time.Second)
	}
	n2 := c.node("node2")
	if err := n2.Partition(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := n2.Client.Info(cctx)
	cancel()
	if err == nil {
		t.Fatalf("node2's API answered through the bridge while partitioned")
	}
	// (Its unix socket answers, but authenticating needs the store: 500.)
	c.waitNode(c.Nodes[0], "node2", false, 30*time.Second)
	if err := n2.Heal(); err != nil {
		t.Fatal(err)
	}
	c.waitNode(c.Nodes[0], "node2", true, 60*time.Second)
	if _, err := n2.Client.Info(ctx); err != nil {
		t.Fatalf("node2's API after healing: %v", err)
	}

	// The checker: one sandbox id with a process in node1's and node3's
	// cgroups is an overlap; frozen in one of them, it is not. The checker
	// finds a sandbox by its pids cgroup: node3's copy joins it only once
	// its freezer cgroup (frozen while empty) reports it FROZEN, so no
	// sample can catch it running.
	fake := fmt.Sprintf("sb-rigcheck%d", time.Now().UnixNano()%1e9)
	freeze := filepath.Join("/sys/fs/cgroup/freezer", c.Nodes[2].CgroupParent(), fake, "freezer.state")
	var procs []*os.Process
	var dirs []string
	defer func() {
		os.WriteFile(freeze, []byte("THAWED"), 0) // a frozen process cannot die
		for _, p := range procs {
			p.Kill()
			p.Wait()
		}
		for _, d := range dirs {
			os.Remove(d)
		}
	}()
	for _, n := range []*rig.Node{c.Nodes[0], c.Nodes[2]} {
		for _, ctrl := range []string{"pids", "freezer"} {
			d := filepath.Join("/sys/fs/cgroup", ctrl, n.CgroupParent(), fake)
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			dirs = append([]string{d}, dirs...)
		}
	}
	if err := os.WriteFile(freeze, []byte("FROZEN"), 0); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*rig.Node{c.Nodes[0], c.Nodes[2]} {
		p, err := os.StartProcess("/bin/sleep", []string{"sleep", "120"}, &os.ProcAttr{})
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
		for _, ctrl := range []string{"freezer", "pids"} {
			dir := filepath.Join("/sys/fs/cgroup", ctrl, n.CgroupParent(), fake)
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(p.Pid)), 0); err != nil {
				t.Fatal(err)
			}
			if ctrl == "freezer" && n == c.Nodes[2] {
				waitFrozen(t, freeze)
			}
		}
	}
	// Several samples with both copies in place.
	for s0, deadline := c.chk.Samples(), time.Now().Add(10*time.Second); c.chk.Samples() < s0+3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the checker took fewer than 3 samples in 10 s")
		}
	}
	if ov := c.chk.Overlaps(); len(ov) != 0 {
		t.Fatalf("a frozen copy counted as running: %v", ov)
	}
	if w := c.chk.Where(fake); !slices.Equal(w, []string{"node1"}) {
		t.Fatalf("checker places %s on %v, want node1 (node3's copy is frozen)", fake, w)
	}
	if err := os.WriteFile(freeze, []byte("THAWED"), 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(c.chk.Overlaps()) == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	ov := c.chk.Overlaps()
	if len(ov) == 0 || ov[0].ID != fake || !slices.Equal(ov[0].Nodes, []string{"node1", "node3"}) {
		t.Fatalf("checker overlaps %v; want %s on node1 and node3", ov, fake)
	}
	// Not a failure of the cluster: the test made it. Kill the copies and
	// start a fresh checker so the teardown's check sees only the cluster.
	for _, p := range procs {
		p.Kill()
		p.Wait()
	}
	procs = nil
	c.chk.Stop()
	c.chk = c.StartChecker(100 * time.Millisecond)
}

// waitFrozen waits up to 10 s until the freezer cgroup of state reports
// FROZEN (a process that joins a frozen cgroup is frozen after it).
func waitFrozen(t *testing.T, state string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(state)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(b)) == "FROZEN" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s after 10 s, want FROZEN", state, strings.TrimSpace(string(b)))
		}
	}
}

// runOut runs a command and returns its standard output.
func runOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), fmt.Errorf("%s: %v: %s", name, err, ee.Stderr)
	}
	return string(out), err
}
