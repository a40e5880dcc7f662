// Command lifecycle measures stead's sandbox lifecycle through its real API
// (a stead daemon started for the run) side by side with peers on the same
// machine and root filesystem: `runc run`, `crun run` and bwrap where
// installed. It prints p50/p99 per operation and the ratio to runc.
//
//	sudo go run ./bench/lifecycle -n 50 -stead bin/stead
//
// With -scale N it instead creates N networked sandboxes per daemon (simple
// quotas and full qgroups, alternately; -net=false: loopback only) and
// prints the create cost and daemon RSS by fleet size:
//
//	sudo go run ./bench/lifecycle -scale 1000 -running 200 -stead bin/stead
//
// -small 10 adds a daemon whose fleet stays at 10, created on alternately,
// and prints the growing fleet's cost against it in the same stretch of
// time.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/stead-dev/stead/bench/internal/benchd"
	"github.com/stead-dev/stead/client"
)

func main() {
	n := flag.Int("n", 50, "iterations per operation")
	bin := flag.String("stead", "bin/stead", "stead binary (static build: scripts/build.sh)")
	pool := flag.String("pool", "btrfs", "pool kind")
	scaleN := flag.Int("scale", 0, "scale mode: create this many sandboxes per daemon and print the create cost by fleet size")
	running := flag.Int("running", 1000, "scale mode: how many of the sandboxes stay running (the rest are stopped)")
	full := flag.Bool("full-qgroups", true, "scale mode: also measure a daemon whose btrfs pool has full qgroup accounting")
	network := flag.Bool("net", true, "scale mode: networked sandboxes, as the daemon's default (a bridge and subnet of the bench's own); -net=false gives them loopback only")
	pprofAddr := flag.String("pprof", "", "scale mode: serve the default daemon's Go profiles on this loopback address")
	keepLog := flag.String("log", "", "scale mode: copy the default daemon's debug log to this file")
	hold := flag.Duration("hold", 0, "scale mode: keep the whole fleet running this long after the last create, before the report and the teardown (to profile the machine with it)")
	gap := flag.Duration("gap", 0, "scale mode: wait this long after each create (and its first exec), so that the refills it started are done before the next")
	small := flag.Int("small", 0, "scale mode: also create on a daemon whose fleet stays at this many sandboxes (each create past them deleted, but never inside a timed window), alternately with the growing fleet's, and print the ratio of the two in the same stretch of time")
	flag.Parse()
	if *scaleN > 0 {
		o := scaleOpts{total: *scaleN, running: *running, bin: *bin, poolKind: *pool, full: *full, network: *network,
			pprofAddr: *pprofAddr, keepLog: *keepLog, gap: *gap, small: *small, hold: *hold}
		if err := scale(context.Background(), o); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*n, *bin, *pool); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n int, bin, poolKind string) error {
	ctx := context.Background()
	d, err := benchd.Start(ctx, bin, poolKind, 16)
	if err != nil {
		return err
	}
	defer d.Close()
	c := d.Client
	data := d.Data()
	// Warm up: the host template is built on first use.
	warm, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		return err
	}
	idleRSS := d.RSS()
	trueCmd := client.ExecRequest{Command: []string{"/bin/true"}}

	var results []benchd.Series
	var created []string
	cpu0 := d.CPU()
	ds, err := benchd.Time(n, func(int) error {
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
		if err != nil {
			return err
		}
		created = append(created, sb.ID)
		_, err = c.Exec(ctx, sb.ID, trueCmd)
		return err
	})
	if err != nil {
		return fmt.Errorf("create+exec: %w", err)
	}
	createCPU := (d.CPU() - cpu0) / time.Duration(n)
	results = append(results, benchd.Series{Name: "stead create → first exec exits", D: ds})
	for _, id := range created {
		c.DeleteSandbox(ctx, id, true)
	}
	ds, err = benchd.Time(n, func(int) error { _, err := c.Exec(ctx, warm.ID, trueCmd); return err })
	if err != nil {
		return err
	}
	results = append(results, benchd.Series{Name: "stead exec in running sandbox → exit", D: ds})
	ds, err = benchd.Time(n, func(int) error {
		if _, err := c.PauseSandbox(ctx, warm.ID); err != nil {
			return err
		}
		_, err := c.ResumeSandbox(ctx, warm.ID)
		return err
	})
	if err != nil {
		return err
	}
	results = append(results, benchd.Series{Name: "stead pause → resume", D: ds})
	ds, err = benchd.Time(n, func(int) error {
		if _, err := c.StopSandbox(ctx, warm.ID); err != nil {
			return err
		}
		if _, err := c.StartSandbox(ctx, warm.ID); err != nil {
			return err
		}
		_, err := c.Exec(ctx, warm.ID, trueCmd)
		return err
	})
	if err != nil {
		return err
	}
	results = append(results, benchd.Series{Name: "stead stop → start → first exec", D: ds})
	if _, err := c.DeleteSandbox(ctx, warm.ID, true); err != nil {
		return err
	}

	// Two fresh daemons from the same binary, with and without user
	// namespaces (fresh pools alike: the one above has deleted datasets
	// for btrfs to clean up), measured interleaved so that drift hits both
	// alike.
	pairs, err := userNSCost(ctx, n, bin, poolKind)
	if err != nil {
		return err
	}
	results = append(results, pairs...)
	warmRows, steps, err := warmPairs(ctx, n, bin, poolKind)
	if err != nil {
		return fmt.Errorf("warm pool: %w", err)
	}
	results = append(results, warmRows...)
	// Peers on the same root filesystem: the host template's skeleton with
	// the host's /usr bound read-only, exactly what a stead sandbox sees.
	rootfs := filepath.Join(data, "pool", "templates", "host")
	bundle, err := os.MkdirTemp("", "stead-bench-bundle-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bundle)
	if err := writeBundle(bundle, rootfs, false); err != nil {
		return err
	}
	var runcP50, runcUserNSP50 time.Duration
	var runcUserNS func(i int) error
	if _, err := exec.LookPath("runc"); err == nil {
		// runc with a user namespace too, as stead runs sandboxes.
		// The pool is closed to other users, so the user namespace's root
		// (an unprivileged host id) gets a copy of the skeleton it can
		// reach; /usr is bound from the host as in the other bundle.
		ubundle := bundle + "-userns"
		defer os.RemoveAll(ubundle)
		if err := os.MkdirAll(ubundle, 0o755); err != nil {
			return err
		}
		urootfs := filepath.Join(ubundle, "rootfs")
		if out, err := exec.Command("cp", "-a", rootfs, urootfs).CombinedOutput(); err != nil {
			return fmt.Errorf("copy the rootfs skeleton: %v: %s", err, out)
		}
		os.Chmod(urootfs, 0o755)
		if err := writeBundle(ubundle, urootfs, true); err != nil {
			return err
		}
		runcUserNS = func(i int) error {
			out, err := exec.Command("runc", "run", "--bundle", ubundle, fmt.Sprintf("bench-runc-userns-%d", i)).CombinedOutput()
			if err != nil {
				return fmt.Errorf("runc run: %v: %s", err, out)
			}
			return nil
		}
		ds, err = benchd.Time(n, runcUserNS)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: skipping runc with a user namespace: %v\n", err)
			runcUserNS = nil
		} else {
			s := benchd.Series{Name: "`runc run` /bin/true, user namespace (same rootfs)", D: ds}
			runcUserNSP50 = s.Pct(0.5)
			results = append(results, s)
		}
	}
	netTotal, lcTotal, runcPaired, phases, lcPhases, teardown, err := createPhases(ctx, n, bin, poolKind, runcUserNS)
	if err != nil {
		return fmt.Errorf("create phases: %w", err)
	}
	results = append(results, netTotal, lcTotal)
	if len(runcPaired.D) > 0 {
		results = append(results, runcPaired)
	}
	results = append(results, teardown...)

	for _, rt := range []string{"runc", "crun"} {
		if _, err := exec.LookPath(rt); err != nil {
			continue
		}
		ds, err = benchd.Time(n, func(i int) error {
			out, err := exec.Command(rt, "run", "--bundle", bundle, fmt.Sprintf("bench-%s-%d", rt, i)).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s run: %v: %s", rt, err, out)
			}
			return nil
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: skipping %s: %v\n", rt, err)
			continue
		}
		s := benchd.Series{Name: "`" + rt + " run` /bin/true (same rootfs)", D: ds}
		if rt == "runc" {
			runcP50 = s.Pct(0.5)
		}
		results = append(results, s)
	}
	if _, err := exec.LookPath("bwrap"); err == nil {
		ds, err = benchd.Time(n, func(int) error {
			return exec.Command("bwrap", "--bind", rootfs, "/", "--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev",
				"--tmpfs", "/tmp", "--unshare-all", "--die-with-parent", "/bin/true").Run()
		})
		if err == nil {
			results = append(results, benchd.Series{Name: "bwrap /bin/true (same rootfs)", D: ds})
		}
	}
	ds, err = benchd.Time(n, func(int) error { return exec.Command("unshare", "-fpmiun", "--mount-proc", "/bin/true").Run() })
	if err == nil {
		results = append(results, benchd.Series{Name: "unshare -fpmiun /bin/true", D: ds})
	}

	fmt.Printf("stead lifecycle benchmark: %d iterations, pool %s, %s\n\n", n, poolKind, time.Now().UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tp50\tp99\tp50 / runc run p50\t")
	for _, s := range results {
		ratio := "-"
		if runcP50 > 0 {
			ratio = fmt.Sprintf("%.2fx", float64(s.Pct(0.5))/float64(runcP50))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", s.Name, benchd.Ms(s.Pct(0.5)), benchd.Ms(s.Pct(0.99)), ratio)
	}
	tw.Flush()
	if runcUserNSP50 > 0 {
		fmt.Printf("\ncold create → first exec with user namespace + networking / `runc run` with a user namespace (measured apart): %.2fx; with libcontainer's setup: %.2fx\n",
			float64(netTotal.Pct(0.5))/float64(runcUserNSP50), float64(lcTotal.Pct(0.5))/float64(runcUserNSP50))
	}
	if p := runcPaired.Pct(0.5); p > 0 {
		fmt.Printf("the same / `runc run` with a user namespace interleaved with them (issue 17 item 3's measure, target <= 0.75x): %.2fx; with libcontainer's setup: %.2fx\n",
			float64(netTotal.Pct(0.5))/float64(p), float64(lcTotal.Pct(0.5))/float64(p))
	}
	fmt.Printf("\ncreate → first exec from the warm pool / cold, paired: %.2fx\n",
		float64(warmRows[0].Pct(0.5))/float64(warmRows[1].Pct(0.5)))
	printWarmSteps(steps)
	printPhases(netTotal, lcTotal, phases, lcPhases)
	fmt.Printf("\nstead daemon CPU (its own user+sys, all threads) per create → first exec, first row: %s\n", benchd.Ms(createCPU))
	fmt.Printf("\nstead daemon RSS with one idle sandbox: %.1f MiB\n", float64(idleRSS)/(1<<20))
	return nil
}

// userNSCost starts the two daemons of userNSPairs and measures them.
func userNSCost(ctx context.Context, n int, bin, poolKind string) ([]benchd.Series, error) {
	with, err := benchd.Start(ctx, bin, poolKind, 16)
	if err != nil {
		return nil, err
	}
	defer with.Close()
	without, err := benchd.Start(ctx, bin, poolKind, 16, "--insecure-no-userns")
	if err != nil {
		return nil, err
	}
	defer without.Close()
	return userNSPairs(ctx, n, with.Client, without.Client)
}

// userNSPairs measures create → first exec and stop → start → first exec
// on two daemons, with (a) and without (b) user namespaces, alternating
// one iteration on each; the sandboxes are purged at the end.
func userNSPairs(ctx context.Context, n int, a, b *client.Client) ([]benchd.Series, error) {
	trueCmd := client.ExecRequest{Command: []string{"/bin/true"}}
	var createA, createB, cycleA, cycleB []time.Duration
	for _, c := range []*client.Client{a, b} { // warm the host template
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
		if err != nil {
			return nil, err
		}
		c.DeleteSandbox(ctx, sb.ID, true)
	}
	for i := 0; i < n; i++ {
		for _, side := range []struct {
			c             *client.Client
			create, cycle *[]time.Duration
		}{{a, &createA, &cycleA}, {b, &createB, &cycleB}} {
			t0 := time.Now()
			sb, err := side.c.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
			if err != nil {
				return nil, err
			}
			if _, err := side.c.Exec(ctx, sb.ID, trueCmd); err != nil {
				return nil, err
			}
			*side.create = append(*side.create, time.Since(t0))
			if _, err := side.c.StopSandbox(ctx, sb.ID); err != nil {
				return nil, err
			}
			t0 = time.Now()
			if _, err := side.c.StartSandbox(ctx, sb.ID); err != nil {
				return nil, err
			}
			if _, err := side.c.Exec(ctx, sb.ID, trueCmd); err != nil {
				return nil, err
			}
			*side.cycle = append(*side.cycle, time.Since(t0))
			// Kept running, as the main table's creates are: each create
			// takes a new user-namespace id range.
		}
	}
	for _, c := range []*client.Client{a, b} {
		list, err := c.ListSandboxes(ctx, true)
		if err != nil {
			return nil, err
		}
		for _, sb := range list {
			c.DeleteSandbox(ctx, sb.ID, true)
		}
	}
	sa, sb := benchd.Series{Name: "stead create → first exec, user namespace (interleaved)", D: createA},
		benchd.Series{Name: "stead create → first exec, no user namespace (interleaved)", D: createB}
	ca, cb := benchd.Series{Name: "stead start → first exec, user namespace (interleaved)", D: cycleA},
		benchd.Series{Name: "stead start → first exec, no user namespace (interleaved)", D: cycleB}
	fmt.Fprintf(os.Stderr, "user namespace cost: create p50 %.2fx, start p50 %.2fx\n",
		float64(sa.Pct(0.5))/float64(sb.Pct(0.5)), float64(ca.Pct(0.5))/float64(cb.Pct(0.5)))
	return []benchd.Series{sa, sb, ca, cb}, nil
}

// writeBundle writes an OCI bundle whose config matches a stead sandbox:
// the same namespaces, the host's /usr read-only, tmpfs /tmp; with userns,
// a user namespace mapping 0..65535 to host ids from 200000, as stead's.
func writeBundle(dir, rootfs string, userns bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	spec := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"terminal": false, "user": map[string]any{"uid": 0, "gid": 0},
			"args": []string{"/bin/true"}, "env": []string{"PATH=/usr/bin:/bin"}, "cwd": "/",
			"noNewPrivileges": true,
		},
		"root":     map[string]any{"path": rootfs, "readonly": true},
		"hostname": "bench",
		"mounts": []map[string]any{
			{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=1777"}},
			{"destination": "/usr", "type": "bind", "source": "/usr", "options": []string{"rbind", "ro"}},
		},
		"linux": map[string]any{
			"namespaces": []map[string]any{{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}},
			"resources":  map[string]any{"memory": map[string]any{"limit": 2 << 30}, "pids": map[string]any{"limit": 1024}},
		},
	}
	if userns {
		lx := spec["linux"].(map[string]any)
		lx["namespaces"] = append(lx["namespaces"].([]map[string]any), map[string]any{"type": "user"})
		m := []map[string]any{{"containerID": 0, "hostID": 200000, "size": 65536}}
		lx["uidMappings"], lx["gidMappings"] = m, m
	}
	b, _ := json.MarshalIndent(spec, "", "  ")
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
}
