// Command cluster measures a three-node stead cluster on this machine
// (bench/cluster/rig: each node a `stead serve` in a network namespace of
// its own on a host bridge, one PostgreSQL and one S3 server) and prints,
// from one run, side by side:
//
//  1. exec latency (/bin/true) to the owning node directly and through a
//     node that forwards the call to the owner (p50, p99, the ratio);
//  2. creates per second through one node with the two others cordoned,
//     and through all three at once with none cordoned;
//  3. failover time, from the loss of a node (kill -9 of its daemon and
//     its sandboxes: the heartbeat lapses from then) until its pushed
//     sandbox answers an exec on another node, for two grace periods and
//     two restore sizes (a fresh cluster per case).
//
// A row whose feature the binary lacks (placement, forwarding, failover)
// prints the error instead of a number. Needs root, PostgreSQL's server
// binaries and versitygw (scripts/setup.sh).
//
//	go run ./bench/cluster -stead bin/stead
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/stead-dev/stead/bench/cluster/rig"
	"github.com/stead-dev/stead/bench/internal/benchd"
	"github.com/stead-dev/stead/client"
)

func main() {
	var bin string
	var execs, creates int
	var graces string
	var sizes string
	var skipFailover bool
	flag.StringVar(&bin, "stead", "bin/stead", "stead binary (stead-init beside it)")
	flag.IntVar(&execs, "execs", 200, "execs per exec row")
	flag.IntVar(&creates, "creates", 9, "creates per create row")
	flag.StringVar(&graces, "graces", "3s,6s", "node grace periods of the failover rows")
	flag.StringVar(&sizes, "sizes", "1,64", "MiB of random data in the failed-over sandbox, per failover row")
	flag.BoolVar(&skipFailover, "no-failover", false, "skip the failover rows")
	flag.Parse()
	ctx := context.Background()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer w.Flush()

	c, err := rig.Start(ctx, rig.Options{Bin: bin, Logf: logf})
	if err != nil {
		fatal(err)
	}
	fmt.Fprintf(w, "\nexec /bin/true (%d each)\tp50\tp99\tp50 ratio\n", execs)
	direct, forwarded, err := execRows(ctx, c, execs)
	if err != nil {
		fmt.Fprintf(w, "error\t%v\n", err)
	} else {
		fmt.Fprintf(w, "owner directly\t%s\t%s\t1.00x\n", benchd.Ms(direct.Pct(0.5)), benchd.Ms(direct.Pct(0.99)))
		if forwarded.D == nil {
			fmt.Fprintf(w, "through another node\t%s\n", forwarded.Name)
		} else {
			fmt.Fprintf(w, "through another node\t%s\t%s\t%.2fx\n", benchd.Ms(forwarded.Pct(0.5)), benchd.Ms(forwarded.Pct(0.99)),
				float64(forwarded.Pct(0.5))/float64(direct.Pct(0.5)))
		}
	}
	// One create on each node first (untimed): a node's first create may
	// set up what later ones reuse (its copy of the template).
	for _, n := range c.Nodes {
		if err := warm(ctx, c, n.Name); err != nil {
			fmt.Fprintf(w, "warm-up on %s\terror: %v\n", n.Name, err)
		}
	}
	fmt.Fprintf(w, "\ncreates (%d, 3 at a time)\tcreates/s\tlanded on\n", creates)
	for _, three := range []bool{false, true} {
		name, rate, spread, err := createRow(ctx, c, creates, three)
		if err != nil {
			fmt.Fprintf(w, "%s\terror: %v\n", name, err)
			continue
		}
		fmt.Fprintf(w, "%s\t%.2f\t%s\n", name, rate, spread)
	}
	if err := c.Close(); err != nil {
		fatal(err)
	}
	if skipFailover {
		return
	}
	fmt.Fprintf(w, "\nfailover (node lost → exec answers on another node)\tgrace\tsize\tseconds\tof which past the grace\n")
	for _, g := range strings.Split(graces, ",") {
		grace, err := time.ParseDuration(g)
		if err != nil {
			fatal(err)
		}
		for _, s := range strings.Split(sizes, ",") {
			var mb int
			fmt.Sscan(s, &mb)
			d, err := failoverRow(ctx, bin, grace, mb)
			if err != nil {
				fmt.Fprintf(w, "node3 lost\t%s\t%d MiB\terror: %v\n", grace, mb, err)
				continue
			}
			fmt.Fprintf(w, "node3 lost\t%s\t%d MiB\t%.2f\t%.2f\n", grace, mb, d.Seconds(), (d - grace).Seconds())
		}
	}
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench/cluster:", err)
	os.Exit(1)
}

// cordonAllBut cordons every node but keep (uncordon: the opposite).
func cordonAllBut(ctx context.Context, c *rig.Cluster, keep string, verb string) error {
	for _, n := range c.Nodes {
		if n.Name == keep {
			continue
		}
		if code, out, errOut := c.Node(keep).CLI(ctx, "node", verb, n.Name); code != 0 {
			return fmt.Errorf("node %s %s: %s%s", verb, n.Name, out, errOut)
		}
	}
	return nil
}

// ownerOf returns the node whose cgroups run the sandbox (waiting up to 30 s).
func ownerOf(ctx context.Context, c *rig.Cluster, id string) (*rig.Node, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, n := range c.Nodes {
			for _, sp := range n.Sandboxes() {
				if sp.ID == id && !sp.Frozen {
					return n, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("sandbox %s runs on no node", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// warm creates and deletes one sandbox placed on node name (the others
// cordoned meanwhile).
func warm(ctx context.Context, c *rig.Cluster, name string) error {
	if err := cordonAllBut(ctx, c, name, "cordon"); err != nil {
		return err
	}
	defer cordonAllBut(ctx, c, name, "uncordon")
	sb, err := c.Nodes[0].Client.CreateSandbox(ctx, client.CreateSandboxRequest{InstanceType: "micro"})
	if err != nil {
		return err
	}
	_, err = c.Nodes[0].Client.DeleteSandbox(ctx, sb.ID, true)
	return err
}

// execRows times execs to a sandbox's owner and through another node.
func execRows(ctx context.Context, c *rig.Cluster, n int) (direct, forwarded benchd.Series, err error) {
	sb, err := c.Nodes[0].Client.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "bench-exec", InstanceType: "micro"})
	if err != nil {
		return direct, forwarded, fmt.Errorf("create: %w", err)
	}
	owner, err := ownerOf(ctx, c, sb.ID)
	if err != nil {
		return direct, forwarded, err
	}
	var via *rig.Node
	for _, nd := range c.Nodes {
		if nd != owner {
			via = nd
			break
		}
	}
	one := func(nd *rig.Node) (time.Duration, error) {
		t0 := time.Now()
		res, err := nd.Client.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"/bin/true"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d", res.ExitCode)
		}
		return time.Since(t0), err
	}
	// Warm-up, then the two interleaved (one of each in turn), so drift in
	// the machine's load falls on both alike.
	for range 10 {
		if _, err := one(owner); err != nil {
			return direct, forwarded, fmt.Errorf("exec on the owner %s: %w", owner.Name, err)
		}
	}
	direct = benchd.Series{Name: "direct"}
	forwarded = benchd.Series{Name: "forwarded"}
	var ferr error
	for range n {
		d, err := one(owner)
		if err != nil {
			return direct, forwarded, fmt.Errorf("exec on the owner %s: %w", owner.Name, err)
		}
		direct.D = append(direct.D, d)
		if ferr == nil {
			d, ferr = one(via)
			forwarded.D = append(forwarded.D, d)
		}
	}
	if ferr != nil {
		forwarded = benchd.Series{Name: fmt.Sprintf("error through %s: %v", via.Name, ferr)}
	}
	return direct, forwarded, nil
}

// createRow creates n sandboxes, three at a time: through node1 with the
// others cordoned, or through all three nodes with none cordoned.
func createRow(ctx context.Context, c *rig.Cluster, n int, three bool) (string, float64, string, error) {
	name := "one node (node1; node2, node3 cordoned)"
	if three {
		name = "three nodes (through each in turn)"
	} else if err := cordonAllBut(ctx, c, "node1", "cordon"); err != nil {
		return name, 0, "", err
	}
	defer func() {
		if !three {
			cordonAllBut(ctx, c, "node1", "uncordon")
		}
	}()
	ids := make([]string, n)
	errc := make(chan error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 3)
	t0 := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			via := c.Nodes[0]
			if three {
				via = c.Nodes[i%3]
			}
			sb, err := via.Client.CreateSandbox(ctx, client.CreateSandboxRequest{InstanceType: "micro"})
			if err != nil {
				errc <- fmt.Errorf("create through %s: %w", via.Name, err)
				return
			}
			ids[i] = sb.ID
		}()
	}
	wg.Wait()
	d := time.Since(t0)
	close(errc)
	if err := <-errc; err != nil {
		return name, 0, "", err
	}
	spread := map[string]int{}
	for _, id := range ids {
		o, err := ownerOf(ctx, c, id)
		if err != nil {
			return name, 0, "", err
		}
		spread[o.Name]++
	}
	for _, id := range ids {
		c.Nodes[0].Client.DeleteSandbox(ctx, id, true)
	}
	return name, float64(n) / d.Seconds(), fmt.Sprint(spread), nil
}

// failoverRow starts a cluster with the grace, puts a sandbox with mb MiB
// of random data on node3, pushes it, loses node3 and times until an exec
// through node1 answers from the sandbox on node1 or node2.
func failoverRow(ctx context.Context, bin string, grace time.Duration, mb int) (time.Duration, error) {
	c, err := rig.Start(ctx, rig.Options{Bin: bin, Grace: grace, LeaseTTL: 2 * grace, Logf: logf})
	if err != nil {
		return 0, err
	}
	defer func() {
		if err := c.Close(); err != nil {
			logf("bench/cluster: %v", err)
		}
	}()
	if len(c.Missing) > 0 {
		return 0, fmt.Errorf("stead serve lacks %v", c.Missing)
	}
	if err := cordonAllBut(ctx, c, "node3", "cordon"); err != nil {
		return 0, err
	}
	n3 := c.Node("node3")
	sb, err := n3.Client.CreateSandbox(ctx, client.CreateSandboxRequest{InstanceType: "micro"})
	if err != nil {
		return 0, fmt.Errorf("create: %w", err)
	}
	if err := cordonAllBut(ctx, c, "node3", "uncordon"); err != nil {
		return 0, err
	}
	if o, err := ownerOf(ctx, c, sb.ID); err != nil || o != n3 {
		return 0, fmt.Errorf("sandbox on %v (%v), want node3", o, err)
	}
	data := io.LimitReader(rand.Reader, int64(mb)<<20)
	if _, err := n3.Client.WriteFile(ctx, sb.ID, "/data/blob", 0o644, data); err != nil {
		return 0, fmt.Errorf("write data: %w", err)
	}
	op, err := n3.Client.Push(ctx, sb.ID, client.PushRequest{Wait: true})
	if err != nil || op.State != "succeeded" {
		return 0, fmt.Errorf("push: %v %s", err, op.Error)
	}
	lost := time.Now()
	n3.KillMachine()
	deadline := lost.Add(grace + 120*time.Second)
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := c.Nodes[0].Client.Exec(cctx, sb.ID, client.ExecRequest{Command: []string{"/bin/true"}})
		cancel()
		if err == nil && res.ExitCode == 0 {
			d := time.Since(lost)
			if o, err := ownerOf(ctx, c, sb.ID); err != nil || o == n3 {
				return 0, fmt.Errorf("exec answered but the sandbox runs on %v (%v)", o, err)
			}
			return d, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("no answer from %s on another node within grace + 120s", sb.ID)
}
