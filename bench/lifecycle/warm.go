package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stead-dev/stead/bench/internal/benchd"
	"github.com/stead-dev/stead/client"
)

// warmSize is the warm pool of the pooled daemon.
const warmSize = 4

// warmPairs measures create → first exec on a daemon with a warm pool of
// the host template (`serve --warm host=4`) and on one without, one
// iteration on each in turn. Each pooled create is checked in the
// daemon's log to have come from the pool, and the pool is let refill
// (untimed) before the cold create, so that neither side pays for it.
func warmPairs(ctx context.Context, n int, bin, poolKind string) ([]benchd.Series, *warmSteps, error) {
	pooled, err := benchd.Start(ctx, bin, poolKind, 16, "--warm", fmt.Sprintf("host=%d", warmSize), "--verbose")
	if err != nil {
		return nil, nil, err
	}
	defer pooled.Close()
	cold, err := benchd.Start(ctx, bin, poolKind, 16, "--verbose")
	if err != nil {
		return nil, nil, err
	}
	defer cold.Close()
	trueCmd := client.ExecRequest{Command: []string{"/bin/true"}}
	// Build the cold daemon's host template.
	if sb, err := cold.Client.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"}); err != nil {
		return nil, nil, err
	} else if _, err := cold.Client.DeleteSandbox(ctx, sb.ID, true); err != nil {
		return nil, nil, err
	}
	made := warmSize
	if err := waitWarm(pooled, made); err != nil {
		return nil, nil, err
	}
	steps := &warmSteps{}
	one := func(c *client.Client, st *warmSteps) (time.Duration, string, error) {
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
		if err != nil {
			return 0, "", err
		}
		t1 := time.Now()
		if _, err := c.Exec(ctx, sb.ID, trueCmd); err != nil {
			return 0, "", err
		}
		d := time.Since(t0)
		if st != nil {
			st.create = append(st.create, t1.Sub(t0))
			st.exec = append(st.exec, time.Since(t1))
		}
		_, err = c.DeleteSandbox(ctx, sb.ID, true)
		return d, sb.ID, err
	}
	var fromPool, coldD []time.Duration
	for range n {
		d, id, err := one(pooled.Client, steps)
		if err != nil {
			return nil, nil, fmt.Errorf("create from the warm pool: %w", err)
		}
		log, _ := pooled.Log()
		if !bytes.Contains(log, []byte(`msg="sandbox created" sandbox=`+id+" tenant=default warm=true")) {
			return nil, nil, fmt.Errorf("sandbox %s was not taken from the warm pool", id)
		}
		fromPool = append(fromPool, d)
		made++
		// The refill ends before the cold create: neither side pays for it.
		if err := waitWarm(pooled, made); err != nil {
			return nil, nil, err
		}
		if d, _, err = one(cold.Client, nil); err != nil {
			return nil, nil, fmt.Errorf("cold create: %w", err)
		}
		coldD = append(coldD, d)
	}
	log, err := pooled.Log()
	if err != nil {
		return nil, nil, err
	}
	steps.daemon = warmLogSteps(log)
	return []benchd.Series{
		{Name: fmt.Sprintf("stead create → first exec, from a warm pool (serve --warm host=%d)", warmSize), D: fromPool},
		{Name: "stead create → first exec, cold (paired with the row above)", D: coldD},
	}, steps, nil
}

// warmSteps is where the time of the creates from the pool went: the
// create call and the first exec as the client saw them, and the steps
// the daemon's debug log times.
type warmSteps struct {
	create, exec []time.Duration
	daemon       map[string][]time.Duration
}

// warmLogSteps reads the timed steps of the takes from a pooled daemon's
// debug log: the request (`http request` of POST /v1/sandboxes), its audit
// record (`request audited`) and the take's own steps (`warm sandbox
// taken`).
func warmLogSteps(log []byte) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	for _, line := range strings.Split(string(log), "\n") {
		var keys map[string]string
		switch {
		case strings.Contains(line, `msg="warm sandbox taken"`):
			keys = map[string]string{"status": "take: runtime status", "admit": "take: tenant, budget, quota admission",
				"network": "take: network policy", "seal": "take: seal env", "store": "take: ownership; record, event and meter interval (one commit)",
				"rest": "take: rest", "dur": "take (all)"}
		case strings.Contains(line, `msg="request audited" action="POST /v1/sandboxes"`):
			keys = map[string]string{"dur": "audit record"}
		case strings.Contains(line, `msg="http request" method=POST path=/v1/sandboxes `):
			keys = map[string]string{"dur": "request in the daemon (all)"}
		default:
			continue
		}
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			if name, want := keys[k]; ok && want {
				if d, err := time.ParseDuration(v); err == nil {
					out[name] = append(out[name], d)
				}
			}
		}
	}
	return out
}

// printWarmSteps prints the medians of s.
func printWarmSteps(s *warmSteps) {
	fmt.Printf("\nwhere a create from the warm pool goes (medians of %d):\n", len(s.create))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, d []time.Duration) {
		if len(d) > 0 {
			fmt.Fprintf(tw, "%s\t%s\t\n", name, benchd.Ms(benchd.Series{D: d}.Pct(0.5)))
		}
	}
	row("create call (client)", s.create)
	for _, k := range []string{"request in the daemon (all)", "take (all)", "take: runtime status", "take: tenant, budget, quota admission",
		"take: network policy", "take: seal env", "take: ownership; record, event and meter interval (one commit)", "take: rest", "audit record"} {
		row("  "+k, s.daemon[k])
	}
	row("first exec (client)", s.exec)
	tw.Flush()
}

// waitWarm waits until d has made want warm sandboxes.
func waitWarm(d *benchd.Daemon, want int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		log, err := d.Log()
		if err != nil {
			return err
		}
		if bytes.Count(log, []byte(`msg="warm sandbox ready"`)) >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the warm pool made fewer than %d sandboxes in 2 minutes", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
