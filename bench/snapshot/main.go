// Command snapshot measures stead's local snapshots, forks and rollback
// through the real API (a stead daemon started for the run, btrfs pool):
// snapshot time with 100 MiB and with 2 GiB written in the sandbox (O(1) in
// size means the two are close), the freeze a running sandbox sees, a fork
// of 10 (stopped and started), and a rollback.
//
//	sudo go run ./bench/snapshot -stead bin/stead
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/stead-dev/stead/bench/internal/benchd"
	"github.com/stead-dev/stead/client"
)

func main() {
	n := flag.Int("n", 20, "snapshots per size")
	bin := flag.String("stead", "bin/stead", "stead binary (static build: scripts/build.sh)")
	flag.Parse()
	if err := run(*n, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n int, bin string) error {
	ctx := context.Background()
	d, err := benchd.Start(ctx, bin, "btrfs", 16)
	if err != nil {
		return err
	}
	defer d.Close()
	c := d.Client
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
	if err != nil {
		return err
	}
	fill := func(mib int) error {
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"sh", "-c",
			fmt.Sprintf("head -c %dM /dev/urandom > /workspace/blob && sync", mib)}, Timeout: "10m"})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("fill %d MiB: %s", mib, res.Stderr)
		}
		return nil
	}
	var rows []benchd.Series
	var frozen []time.Duration
	snap := func(label string) error {
		ds, err := benchd.Time(n, func(int) error {
			sn, err := c.CreateSnapshot(ctx, sb.ID, client.CreateSnapshotRequest{Label: label})
			if err != nil {
				return err
			}
			if f, err := time.ParseDuration(sn.FrozenFor); err == nil {
				frozen = append(frozen, f)
			}
			return nil
		})
		if err != nil {
			return err
		}
		rows = append(rows, benchd.Series{Name: "snapshot of a running sandbox, " + label, D: ds})
		return nil
	}
	if err := fill(100); err != nil {
		return err
	}
	if err := snap("100 MiB written"); err != nil {
		return err
	}
	if err := fill(2048); err != nil {
		return err
	}
	if err := snap("2 GiB written"); err != nil {
		return err
	}
	rows = append(rows, benchd.Series{Name: "  of which processes frozen", D: frozen})
	src, err := c.CreateSnapshot(ctx, sb.ID, client.CreateSnapshotRequest{Label: "fork source"})
	if err != nil {
		return err
	}
	for _, start := range []bool{false, true} {
		var forked []client.Sandbox
		ds, err := benchd.Time(1, func(int) error {
			var err error
			forked, err = c.Fork(ctx, src.ID, client.ForkRequest{Count: 10, NoStart: !start})
			return err
		})
		if err != nil {
			return err
		}
		name := "fork of 10 (2 GiB root), created stopped"
		if start {
			name = "fork of 10 (2 GiB root), started"
		}
		rows = append(rows, benchd.Series{Name: name, D: ds})
		for _, f := range forked {
			c.DeleteSandbox(ctx, f.ID, true)
		}
	}
	ds, err := benchd.Time(5, func(int) error {
		_, err := c.Rollback(ctx, sb.ID, src.ID)
		return err
	})
	if err != nil {
		return err
	}
	rows = append(rows, benchd.Series{Name: "rollback of a running sandbox (stop, swap, start)", D: ds})

	fmt.Printf("stead snapshot benchmark: %d snapshots per size, btrfs pool, %s\n\n", n, time.Now().UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tp50\tp99\t")
	for _, s := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", s.Name, benchd.Ms(s.Pct(0.5)), benchd.Ms(s.Pct(0.99)))
	}
	tw.Flush()
	small, big := rows[0].Pct(0.5), rows[1].Pct(0.5)
	fmt.Printf("\nsnapshot p50 at 2 GiB / at 100 MiB: %.2fx (O(1) target: within 1.5x)\n", float64(big)/float64(small))
	return nil
}
