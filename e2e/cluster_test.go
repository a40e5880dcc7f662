package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/bench/cluster/rig"
	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/treedigest"
)

// TestClusterThreeNodesRegister: three nodes on one PostgreSQL store, each
// started with the cluster secret, all come up (a second node on a store
// is no longer refused) and `stead node ls` through any of them shows
// three active, alive nodes with their own addresses, the answering one
// marked.
func TestClusterThreeNodesRegister(t *testing.T) {
	c := newCluster(t, rig.Options{})
	c.require("--cluster-secret-file", "cluster mode")
	for _, via := range c.Nodes {
		deadline := time.Now().Add(30 * time.Second)
		for {
			ns := c.nodes(via)
			bad := ""
			if len(ns) != 3 {
				bad = "want 3 nodes"
			}
			for _, n := range ns {
				want := c.Node(n.Name)
				switch {
				case want == nil:
					bad = "unknown node " + n.Name
				case !n.Alive || n.State != client.NodeActive:
					bad = n.Name + " not active and alive"
				case n.Address != want.API:
					bad = n.Name + " has address " + n.Address + ", want " + want.API
				case n.Self != (n.Name == via.Name):
					bad = "self marks " + n.Name
				}
			}
			if bad == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node ls --json through %s: %+v: %s", via.Name, ns, bad)
			}
			time.Sleep(200 * time.Millisecond)
		}
		out := c.cli(via, "node", "ls")
		for _, n := range c.Nodes {
			if !strings.Contains(out, n.Name) {
				t.Fatalf("node ls through %s does not show %s:\n%s", via.Name, n.Name, out)
			}
		}
		if !strings.Contains(out, via.Name+" *") {
			t.Fatalf("node ls through %s does not mark it:\n%s", via.Name, out)
		}
	}
}

// require fails the test when stead serve lacks a flag the behaviour
// under test needs, naming what is missing.
func (c *cluster) require(flag, what string) {
	c.t.Helper()
	if slices.Contains(c.Missing, flag) {
		c.t.Fatalf("stead serve has no %s: %s is not in this build", flag, what)
	}
}

// onlyOn cordons every node but the named one, runs f (whose creates can
// only land there), and uncordons them.
func (c *cluster) onlyOn(name string, f func()) {
	c.t.Helper()
	for _, n := range c.others(name) {
		c.cli(c.node(name), "node", "cordon", n.Name)
	}
	f()
	for _, n := range c.others(name) {
		c.cli(c.node(name), "node", "uncordon", n.Name)
	}
}

// createOn makes sandboxes that must land on node name (the others
// cordoned) and fails if one lands elsewhere.
func (c *cluster) createOn(name string, reqs ...client.CreateSandboxRequest) []client.Sandbox {
	c.t.Helper()
	var out []client.Sandbox
	c.onlyOn(name, func() {
		for _, req := range reqs {
			sb, on := c.create(c.Nodes[0], req)
			if on != name {
				c.t.Fatalf("%s created through node1 with every node but %s cordoned runs on %s: placement does not skip cordoned nodes", sb.ID, name, on)
			}
			out = append(out, sb)
		}
	})
	return out
}

// TestClusterCreatesSpreadByCapacity: six creates through one node land on
// all three (equal nodes: placement by room spreads them); the sandboxes'
// addresses, leased in the shared store, do not collide although every
// node uses the same sandbox subnet; a cordoned node gets no create.
func TestClusterCreatesSpreadByCapacity(t *testing.T) {
	c := newCluster(t, rig.Options{})
	where := map[string][]string{}
	var ids []string
	for i := range 6 {
		sb, on := c.create(c.Nodes[0], client.CreateSandboxRequest{Name: fmt.Sprintf("spread-%d", i)})
		where[on] = append(where[on], sb.ID)
		ids = append(ids, sb.ID)
	}
	t.Logf("6 creates through node1: %v", where)
	if len(where) != 3 {
		t.Fatalf("6 creates through node1 landed on %d node(s) %v: want all three (placement by capacity)", len(where), where)
	}
	addrs := map[string]string{}
	for _, id := range ids {
		owner := c.node(c.chk.Where(id)[0])
		out := strings.TrimSpace(c.sh(owner, id, "agent", "ip -4 -o addr show scope global | awk '{print $4}'"))
		if out == "" {
			t.Fatalf("sandbox %s on %s has no IPv4 address", id, owner.Name)
		}
		if other, ok := addrs[out]; ok {
			t.Fatalf("sandboxes %s and %s (on %v and %v) have the same address %s: address leases collide across nodes", other, id, c.chk.Where(other), c.chk.Where(id), out)
		}
		addrs[out] = id
	}
	c.cli(c.Nodes[1], "node", "cordon", "node3")
	for i := range 3 {
		sb, on := c.create(c.node("node3"), client.CreateSandboxRequest{Name: fmt.Sprintf("cordoned-%d", i)})
		if on == "node3" {
			t.Fatalf("%s created through node3 runs on node3, which is cordoned", sb.ID)
		}
	}
	c.cli(c.Nodes[1], "node", "uncordon", "node3")
}

// TestClusterExecFilesAgentSocketThroughAnyNode: for sandboxes on each
// node, exec, file upload and download and the agent socket (a checkpoint
// written from inside through /run/stead/api.sock) work through every
// node that does not own the sandbox, and a PTY works through one.
func TestClusterExecFilesAgentSocketThroughAnyNode(t *testing.T) {
	c := newCluster(t, rig.Options{})
	ctx := ctxT(t)
	// Three creates through node1: wherever placement puts them, each
	// sandbox has two nodes that do not own it.
	var sbs []client.Sandbox
	var owners []*rig.Node
	for i := range 3 {
		sb, on := c.create(c.Nodes[0], client.CreateSandboxRequest{Name: fmt.Sprintf("any-%d", i)})
		sbs = append(sbs, sb)
		owners = append(owners, c.node(on))
	}
	curl := `curl -s -o /dev/null -w '%{http_code}' --unix-socket /run/stead/api.sock -H "Authorization: Bearer $STEAD_TOKEN" `
	for i, sb := range sbs {
		owner := owners[i]
		for _, via := range c.others(owner.Name) {
			if out, err := c.exec(via, sb.ID, "agent", "echo $STEAD_SANDBOX"); err != nil || strings.TrimSpace(out) != sb.ID {
				t.Fatalf("exec in %s (owned by %s) through %s: %q %v: forwarding to the owner is not there", sb.ID, owner.Name, via.Name, out, err)
			}
			body := fmt.Sprintf("written through %s at %d\n", via.Name, time.Now().UnixNano())
			if _, err := via.Client.WriteFile(ctx, sb.ID, "/workspace/from-"+via.Name, 0o644, strings.NewReader(body)); err != nil {
				t.Fatalf("upload to %s (owned by %s) through %s: %v", sb.ID, owner.Name, via.Name, err)
			}
			for _, reader := range c.Nodes {
				got, err := c.readFile(reader, sb.ID, "/workspace/from-"+via.Name)
				if err != nil || got != body {
					t.Fatalf("download from %s (owned by %s, uploaded through %s) through %s: %q %v; want %q", sb.ID, owner.Name, via.Name, reader.Name, got, err, body)
				}
			}
			if got := c.sh(owner, sb.ID, "agent", "cat /workspace/from-"+via.Name); got != body {
				t.Fatalf("the owner %s reads %q in %s; want what %s uploaded, %q", owner.Name, got, sb.ID, via.Name, body)
			}
			put := curl + `-X PUT -H 'Content-Type: application/json' --data '{"via": "` + via.Name + `"}' http://stead/v1/sandboxes/$STEAD_SANDBOX/checkpoints/plan`
			if out, err := c.exec(via, sb.ID, "agent", put); err != nil || out != "200" {
				t.Fatalf("checkpoint put through the agent socket of %s (owned by %s), exec through %s: HTTP %q %v", sb.ID, owner.Name, via.Name, out, err)
			}
			for _, reader := range c.Nodes {
				cp, err := reader.Client.GetCheckpoint(ctx, sb.ID, "", "plan", 0)
				if err != nil || !strings.Contains(string(cp.Body), via.Name) || cp.Principal != "sandbox:"+sb.ID {
					t.Fatalf("checkpoint of %s read through %s: %+v %v; want the one the agent wrote through %s", sb.ID, reader.Name, cp, err, via.Name)
				}
			}
		}
	}
	// A PTY through a node that does not own the sandbox.
	sb, owner := sbs[0], owners[0]
	via := c.others(owner.Name)[0]
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pty, err := via.Client.PTY(pctx, sb.ID, client.PTYOptions{Command: []string{"/bin/sh", "-c", "echo pty-$((40+2)); exit 3"}})
	if err != nil {
		t.Fatalf("PTY in %s (owned by %s) through %s: %v", sb.ID, owner.Name, via.Name, err)
	}
	out, _ := io.ReadAll(pty)
	pty.Close()
	if code, ok := pty.ExitCode(); !strings.Contains(string(out), "pty-42") || !ok || code != 3 {
		t.Fatalf("PTY in %s through %s: output %q, exit %d (%v); want pty-42 and exit 3", sb.ID, via.Name, out, code, ok)
	}
}

// writeWork writes an agent's files into a sandbox through node n: a
// small file, 4 MiB of random data and a symlink; returns a marker.
func (c *cluster) writeWork(n *rig.Node, id string) string {
	c.t.Helper()
	mark := fmt.Sprintf("kept-%d", time.Now().UnixNano())
	c.sh(n, id, "agent", `set -e
		echo `+mark+` > /workspace/kept
		head -c 4194304 /dev/urandom > /data/blob
		mkdir -p /workspace/src/a && echo 'package a' > /workspace/src/a/a.go
		ln -sf ../kept /workspace/src/kept-link`)
	return mark
}

// TestClusterKilledNodeSandboxesRestoreElsewhere: node3 is lost (kill -9 of
// its daemon and every sandbox process). Its pushed sandboxes run again on
// the other nodes within grace + restore time, with the same id, the files
// of their last push (digest equal; a file written after the push is gone:
// the RPO) and their checkpoints; a sandbox created with --failover none
// stays lost and runs nowhere.
func TestClusterKilledNodeSandboxesRestoreElsewhere(t *testing.T) {
	c := newCluster(t, rig.Options{})
	c.require("--lease-ttl", "owner leases in the daemon (failover needs them)")
	ctx := ctxT(t)
	n3 := c.node("node3")
	var sbs []client.Sandbox
	var none client.Sandbox
	c.onlyOn("node3", func() {
		for _, name := range []string{"fo-a", "fo-b"} {
			sb, on := c.create(c.Nodes[0], client.CreateSandboxRequest{Name: name})
			if on != "node3" {
				t.Fatalf("%s created with node1 and node2 cordoned runs on %s", sb.ID, on)
			}
			sbs = append(sbs, sb)
		}
		if code, out, errOut := c.Nodes[0].CLI(ctx, "create", "fo-none", "--type", "micro", "--failover", "none"); code != 0 {
			t.Fatalf("stead create --failover none: exit %d %s%s: the per-sandbox failover policy is not there", code, out, errOut)
		}
		var err error
		if none, err = c.Nodes[0].Client.GetSandbox(ctx, "fo-none"); err != nil {
			t.Fatal(err)
		}
		if on := c.chk.WaitRunning(ctx, none.ID, 30*time.Second); on != "node3" {
			t.Fatalf("fo-none runs on %q, want node3", on)
		}
	})
	type pushed struct {
		sb     client.Sandbox
		mark   string
		digest []string
	}
	var ps []pushed
	for _, sb := range append(sbs, none) {
		mark := c.writeWork(n3, sb.ID)
		if _, err := n3.Client.PutCheckpoint(ctx, sb.ID, "progress", []byte(`{"step": 7}`), client.PutCheckpointOptions{}); err != nil {
			t.Fatal(err)
		}
		p := c.push(n3, sb.ID)
		ps = append(ps, pushed{sb, mark, pushedDigest(t, n3, p)})
		// After the push: lost with the node (RPO = the push interval).
		c.sh(n3, sb.ID, "agent", "echo too-late > /workspace/after-push")
	}
	lost := time.Now()
	n3.KillMachine()
	t.Logf("node3 lost at %s", lost.Format("15:04:05.000"))
	for _, p := range ps[:2] {
		on := c.chk.WaitRunning(ctx, p.sb.ID, 3*time.Second+90*time.Second, "node3")
		if on == "" {
			t.Fatalf("%s of the lost node3 runs on no other node %s after the loss (grace 3s): failover is not there; where: %v", p.sb.ID, time.Since(lost).Round(time.Millisecond), c.chk.Where(p.sb.ID))
		}
		t.Logf("%s runs on %s %s after node3 was lost", p.sb.ID, on, time.Since(lost).Round(time.Millisecond))
		owner := c.node(on)
		c.waitAnswer(owner, p.sb.ID, 60*time.Second)
		t.Logf("%s answers on %s %s after node3 was lost", p.sb.ID, on, time.Since(lost).Round(time.Millisecond))
		for _, via := range c.others("node3") {
			out, err := c.exec(via, p.sb.ID, "agent", "cat /workspace/kept; test -e /workspace/after-push && echo after-push-survived || true")
			if err != nil || strings.TrimSpace(out) != p.mark {
				t.Fatalf("%s on %s, exec through %s: %q %v; want %q and no file written after the push", p.sb.ID, on, via.Name, out, err, p.mark)
			}
		}
		got := agentDigest(t, rootOn(owner, p.sb.ID))
		if diff := treedigest.Diff(p.digest, got); len(diff) > 0 {
			t.Fatalf("%s restored on %s differs from its last push (%d lines):\n%s", p.sb.ID, on, len(diff), strings.Join(diff[:min(20, len(diff))], "\n"))
		}
		sb, err := owner.Client.GetSandbox(ctx, p.sb.ID)
		if err != nil || sb.ID != p.sb.ID || sb.Name != p.sb.Name || sb.State != "running" {
			t.Fatalf("%s after failover: %+v %v; want the same id and name, running", p.sb.ID, sb, err)
		}
		cp, err := c.Nodes[0].Client.GetCheckpoint(ctx, p.sb.ID, "", "progress", 0)
		if err != nil || !strings.Contains(string(cp.Body), "7") {
			t.Fatalf("checkpoint of %s after failover: %+v %v", p.sb.ID, cp, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		sb, err := c.Nodes[0].Client.GetSandbox(ctx, none.ID)
		if err == nil && sb.State == "lost" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (--failover none) of the lost node3: %+v %v; want state lost", none.ID, sb, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	if w := c.chk.Seen(none.ID); !slices.Equal(w, []string{"node3"}) {
		t.Fatalf("%s (--failover none) ran on %v; want node3 only", none.ID, w)
	}
}

// TestClusterPartitionedNodeNeverRunsWithNewOwnerAndFencesOnHeal: node3 is
// cut off (its veth down). The checker, sampling every 100 ms over the
// whole test, never sees node3 and another node run one sandbox at once;
// after the grace the others restore node3's pushed sandboxes; healed,
// node3 is alive again in `stead node ls`, its stale copies are stopped
// without a push and kept as a lost-<epoch> snapshot, and each sandbox
// answers on its new owner, through every node.
func TestClusterPartitionedNodeNeverRunsWithNewOwnerAndFencesOnHeal(t *testing.T) {
	c := newCluster(t, rig.Options{})
	c.require("--lease-ttl", "owner leases in the daemon (fencing needs them)")
	ctx := ctxT(t)
	n3 := c.node("node3")
	sbs := c.createOn("node3", client.CreateSandboxRequest{Name: "part-a"}, client.CreateSandboxRequest{Name: "part-b"})
	marks := map[string]string{}
	pushes := map[string]int{}
	for _, sb := range sbs {
		marks[sb.ID] = c.writeWork(n3, sb.ID)
		c.push(n3, sb.ID)
		c.sh(n3, sb.ID, "agent", "echo too-late > /workspace/after-push")
		rs, err := c.Nodes[0].Client.ListRemoteSnapshots(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		pushes[sb.ID] = len(rs)
	}
	cut := time.Now()
	if err := n3.Partition(); err != nil {
		t.Fatal(err)
	}
	newOwner := map[string]string{}
	for _, sb := range sbs {
		on := ""
		for deadline := time.Now().Add(120 * time.Second); on == "" && time.Now().Before(deadline); {
			if ov := c.chk.Overlaps(); len(ov) > 0 {
				t.Fatalf("%s after the cut: %s: the partitioned node3 runs its copy on while another node restored it (it must stop its copies when its lease lapses on its own clock)",
					time.Since(cut).Round(time.Millisecond), ov[0])
			}
			on = c.chk.WaitRunning(ctx, sb.ID, time.Second, "node3")
		}
		if on == "" {
			t.Fatalf("%s of the partitioned node3 runs on %v %s after the cut: want it restored on node1 or node2 alone (failover, and node3 stopping its copy when its lease lapsed)",
				sb.ID, c.chk.Where(sb.ID), time.Since(cut).Round(time.Millisecond))
		}
		newOwner[sb.ID] = on
		c.waitAnswer(c.node(on), sb.ID, 60*time.Second)
		t.Logf("%s runs and answers on %s %s after the cut", sb.ID, on, time.Since(cut).Round(time.Millisecond))
	}
	if ov := c.chk.Overlaps(); len(ov) > 0 {
		t.Fatalf("while node3 was cut off: %v", ov)
	}
	if err := n3.Heal(); err != nil {
		t.Fatal(err)
	}
	c.waitNode(c.Nodes[0], "node3", true, 60*time.Second)
	for _, sb := range sbs {
		deadline := time.Now().Add(30 * time.Second)
		for slices.ContainsFunc(n3.Sandboxes(), func(sp rig.SandboxProc) bool { return sp.ID == sb.ID }) {
			if time.Now().After(deadline) {
				t.Fatalf("healed node3 still has processes of %s 30s after it came back: it does not stop its stale copies", sb.ID)
			}
			time.Sleep(200 * time.Millisecond)
		}
		// The copy is kept (renamed) just after its processes go.
		var snaps []client.Snapshot
		var err error
		found := false
		for deadline := time.Now().Add(30 * time.Second); !found && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			snaps, err = n3.Local.ListSnapshots(ctx, sb.ID)
			for _, s := range snaps {
				found = found || strings.HasPrefix(s.Label, "lost-") || strings.HasPrefix(s.ID, "lost-")
			}
			for _, dir := range []string{"snapshots", "sandboxes"} {
				ents, _ := os.ReadDir(filepath.Join(n3.DataDir, "pool", dir))
				for _, e := range ents {
					found = found || strings.Contains(e.Name(), "lost-") && strings.HasSuffix(e.Name(), sb.ID)
				}
			}
		}
		if !found {
			t.Fatalf("healed node3 kept no lost-<epoch> snapshot of %s (snapshots %+v %v)", sb.ID, snaps, err)
		}
		rs, err := c.Nodes[0].Client.ListRemoteSnapshots(ctx, sb.ID)
		if err != nil || len(rs) != pushes[sb.ID] {
			t.Fatalf("%s has %d pushes after node3 healed (%v), %d before the cut: the fenced node pushed its stale copy", sb.ID, len(rs), err, pushes[sb.ID])
		}
		for _, via := range c.Nodes {
			out, err := c.exec(via, sb.ID, "agent", "cat /workspace/kept; test -e /workspace/after-push && echo after-push-survived || true")
			if err != nil || strings.TrimSpace(out) != marks[sb.ID] {
				t.Fatalf("%s (new owner %s) through %s after the heal: %q %v; want %q", sb.ID, newOwner[sb.ID], via.Name, out, err, marks[sb.ID])
			}
		}
		if w := c.chk.Where(sb.ID); !slices.Equal(w, []string{newOwner[sb.ID]}) {
			t.Fatalf("%s runs on %v after the heal; want its new owner %s alone", sb.ID, w, newOwner[sb.ID])
		}
	}
	c.recoverLostCopies(sbs)
}

// recoverLostCopies: the copies node3 kept of sbs are listed through
// node1 (a signed call to node3), one is recovered into a new sandbox on
// node3 holding what its agent wrote after the last push, and both are
// discarded through node2.
func (c *cluster) recoverLostCopies(sbs []client.Sandbox) {
	c.t.Helper()
	ctx := ctxT(c.t)
	lostOn := func(via *rig.Node, args ...string) []client.LostCopy {
		var list []client.LostCopy
		out := c.cli(via, append([]string{"node", "lost", "ls", "--json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			c.t.Fatalf("node lost ls --json through %s: %v\n%s", via.Name, err, out)
		}
		return list
	}
	copies := map[string]client.LostCopy{}
	for _, l := range lostOn(c.Nodes[0]) {
		copies[l.Sandbox] = l
	}
	for _, sb := range sbs {
		l, ok := copies[sb.ID]
		if !ok || l.Node != "node3" || l.SandboxName != sb.Name || l.Tenant == "" || l.Epoch < 1 || l.SizeBytes <= 0 {
			c.t.Fatalf("node lost ls through node1: %+v; want node3's copy of %s", copies, sb.ID)
		}
	}
	if len(lostOn(c.Nodes[0], "--node", "node1")) != 0 {
		c.t.Fatalf("node1 lists lost copies it never kept")
	}
	l := copies[sbs[0].ID]
	out := c.cli(c.Nodes[0], "node", "lost", "recover", "node3", l.Copy, "--name", "salvage", "--json")
	var rec client.Sandbox
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.ID == sbs[0].ID || rec.State != "stopped" {
		c.t.Fatalf("recover through node1: %q %v", out, err)
	}
	if _, err := c.Nodes[1].Client.StartSandbox(ctx, rec.ID); err != nil {
		c.t.Fatalf("start the recovered sandbox through node2: %v", err)
	}
	if got, err := c.exec(c.Nodes[1], rec.ID, "agent", "cat /workspace/after-push"); err != nil || strings.TrimSpace(got) != "too-late" {
		c.t.Fatalf("the recovered sandbox (on %v) holds %q %v; want what the agent wrote after the last push", c.chk.Where(rec.ID), got, err)
	}
	for _, l := range copies {
		c.cli(c.Nodes[1], "node", "lost", "discard", l.Node, l.Copy)
	}
	if left := lostOn(c.Nodes[2]); len(left) != 0 {
		c.t.Fatalf("after discard: %+v", left)
	}
	// node3 built the host template for its creates and reports it at its
	// heartbeats (placement reads it).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		i := slices.IndexFunc(c.nodes(c.Nodes[0]), func(n client.Node) bool { return n.Name == "node3" })
		if i >= 0 && slices.Contains(c.nodes(c.Nodes[0])[i].Templates, "host") {
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node3 does not report its host template: %+v", c.nodes(c.Nodes[0]))
		}
	}
}

// TestClusterEvacuateUnderLoad: `stead node evacuate node3` while a loop
// through node1 appends a number to a file of each of node3's sandboxes:
// every sandbox ends on another node, every append that was acknowledged
// is in its file there (none lost), and the longest wait of one append
// (the pause) stays bounded.
func TestClusterEvacuateUnderLoad(t *testing.T) {
	c := newCluster(t, rig.Options{})
	c.require("--lease-ttl", "owner leases in the daemon (evacuate needs them)")
	ctx := ctxT(t)
	sbs := c.createOn("node3", client.CreateSandboxRequest{Name: "ev-a"}, client.CreateSandboxRequest{Name: "ev-b"})
	type load struct {
		acked    []int
		failures int
		pause    time.Duration
	}
	loads := make([]*load, len(sbs))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, sb := range sbs {
		l := &load{}
		loads[i] = l
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 1; ; k++ {
				start := time.Now()
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, err := c.exec(c.Nodes[0], sb.ID, "agent", fmt.Sprintf("echo %d >> /workspace/appends", k))
					if err == nil {
						break
					}
					l.failures++
					time.Sleep(100 * time.Millisecond)
				}
				l.acked = append(l.acked, k)
				l.pause = max(l.pause, time.Since(start))
			}
		}()
	}
	time.Sleep(2 * time.Second)
	code, out, errOut := c.Nodes[1].CLI(ctx, "node", "evacuate", "node3")
	if code != 0 {
		close(stop)
		wg.Wait()
		t.Fatalf("stead node evacuate node3: exit %d\n%s%s", code, out, errOut)
	}
	for _, sb := range sbs {
		if on := c.chk.WaitRunning(ctx, sb.ID, 60*time.Second, "node3"); on == "" {
			close(stop)
			wg.Wait()
			t.Fatalf("%s runs on %v after node3 was evacuated; want node1 or node2", sb.ID, c.chk.Where(sb.ID))
		}
	}
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	for i, sb := range sbs {
		l := loads[i]
		got := c.sh(c.Nodes[0], sb.ID, "agent", "cat /workspace/appends")
		have := map[string]bool{}
		for _, f := range strings.Fields(got) {
			have[f] = true
		}
		for _, k := range l.acked {
			if !have[fmt.Sprint(k)] {
				t.Fatalf("%s (now on %v): acknowledged append %d is not in its file after the evacuation (%d acknowledged, %d failed attempts)", sb.ID, c.chk.Where(sb.ID), k, len(l.acked), l.failures)
			}
		}
		t.Logf("%s: %d appends acknowledged, %d failed attempts retried, longest wait %s", sb.ID, len(l.acked), l.failures, l.pause.Round(time.Millisecond))
		if l.pause > 60*time.Second {
			t.Fatalf("%s: one append waited %s during the evacuation: the pause is not bounded", sb.ID, l.pause)
		}
	}
	if n, err := c.Nodes[0].Client.GetNode(ctx, "node3"); err != nil || n.State != client.NodeDraining {
		t.Fatalf("node3 after evacuate: %+v %v; want draining", n, err)
	}
}

// TestClusterNodesAgreeOnTheAuditTrail: the audit trail is cluster-wide
// (in PostgreSQL); audited actions through every node leave one trail that
// `stead audit verify` through every node finds intact, and no node
// reports it altered (a node's checkpoint signed with a key the others do
// not know would be).
func TestClusterNodesAgreeOnTheAuditTrail(t *testing.T) {
	c := newCluster(t, rig.Options{Serve: []string{"--audit-checkpoint-interval", "1s"}})
	ctx := ctxT(t)
	for _, n := range c.Nodes {
		if _, err := n.Client.CreateKey(ctx, client.CreateAPIKeyRequest{Name: "audit-" + n.Name, Role: client.RoleTenantAdmin}); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Client.CheckpointAudit(ctx); err != nil {
			t.Fatalf("audit checkpoint through %s: %v", n.Name, err)
		}
	}
	time.Sleep(2 * time.Second)
	for _, n := range c.Nodes {
		rep, err := n.Client.VerifyAudit(ctx)
		if err != nil || !rep.OK {
			t.Errorf("audit verify through %s: ok=%v, bad seq %d: %s (%d problems) %v: the trail is shared but each node signs its checkpoints with its own DATA/audit.key and takes the others' entries for inserted ones",
				n.Name, rep.OK, rep.BadSeq, rep.Problem, len(rep.Problems), err)
		}
		if strings.Contains(n.LogTail(1<<20), "AUDIT TRAIL ALTERED") {
			t.Errorf("%s's log reports the audit trail altered", n.Name)
		}
	}
}
