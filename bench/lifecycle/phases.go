package main

import (
	"bufio"
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

// phaseNames are the phases of a cold create as the daemon logs them at
// debug level, in order: the clone of the template and its quota (sandbox
// service), the idmapped root mount, libcontainer's create (cgroups,
// state), its run (namespaces and runc's init: includes the network),
// the network attach alone, stead's init up and ready, the cpu limit; and,
// from the client, the first exec after the create returned.
var phaseNames = []string{"clone", "quota", "rootfs", "create", "run", "network", "ready", "limits", "first exec"}

// createPhases creates n sandboxes on a daemon with networking and user
// namespaces on, each followed by its first exec, and returns the create →
// first exec timings and the median of each phase, read from the daemon's
// debug log.
func createPhases(ctx context.Context, n int, bin, poolKind string) (benchd.Series, map[string]time.Duration, error) {
	d, err := benchd.StartNetwork(ctx, bin, poolKind, 16, benchd.Network{Bridge: "stbench9", Subnet: "10.251.0.0/20",
		// No sandbox here resolves a name: an upstream that answers
		// nothing, never the machine's resolver.
		DNSUpstream: "127.0.0.1:9"}, "--verbose")
	if err != nil {
		return benchd.Series{}, nil, err
	}
	defer d.Close()
	c := d.Client
	trueCmd := client.ExecRequest{Command: []string{"/bin/true"}}
	warm, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
	if err != nil {
		return benchd.Series{}, nil, err
	}
	c.DeleteSandbox(ctx, warm.ID, true)
	var total []time.Duration
	exec := map[string]time.Duration{}
	for range n {
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
		if err != nil {
			return benchd.Series{}, nil, err
		}
		t1 := time.Now()
		if _, err := c.Exec(ctx, sb.ID, trueCmd); err != nil {
			return benchd.Series{}, nil, err
		}
		total = append(total, time.Since(t0))
		exec[sb.ID] = time.Since(t1)
	}
	log, err := d.Log()
	if err != nil {
		return benchd.Series{}, nil, err
	}
	per := phasesOf(log, exec)
	return benchd.Series{Name: "stead create → first exec, user namespace + networking", D: total}, medianPhases(per), nil
}

// phasesOf reads each create's phases from a daemon's debug log, for the
// sandboxes of firstExec (sandbox → its first exec's time, a phase of
// its own): sandbox → phase → duration.
func phasesOf(log []byte, firstExec map[string]time.Duration) map[string]map[string]time.Duration {
	per := map[string]map[string]time.Duration{}
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var keys map[string]string
		switch {
		case strings.Contains(line, `msg="sandbox root made"`):
			keys = map[string]string{"fill": "clone", "quota": "quota"}
		case strings.Contains(line, `msg="sandbox started"`):
			keys = map[string]string{"rootfs": "rootfs", "create": "create", "run": "run", "ready": "ready", "limits": "limits"}
		case strings.Contains(line, `msg="sandbox network attached"`):
			keys = map[string]string{"dur": "network"}
		default:
			continue
		}
		f := logFields(line)
		id := f["sandbox"]
		if _, ok := firstExec[id]; !ok {
			continue
		}
		if per[id] == nil {
			per[id] = map[string]time.Duration{"first exec": firstExec[id]}
		}
		for k, phase := range keys {
			if v, err := time.ParseDuration(f[k]); err == nil {
				per[id][phase] = v
			}
		}
	}
	return per
}

// medianPhases is the median of each phase over the creates of per.
func medianPhases(per map[string]map[string]time.Duration) map[string]time.Duration {
	med := map[string]time.Duration{}
	for _, ph := range phaseNames {
		var ds []time.Duration
		for _, m := range per {
			if v, ok := m[ph]; ok {
				ds = append(ds, v)
			}
		}
		if len(ds) > 0 {
			med[ph] = benchd.Series{D: ds}.Pct(0.5)
		}
	}
	return med
}

// logFields splits a slog text line into its key=value pairs.
func logFields(line string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// printPhases prints where a cold create's time goes: the median of each
// phase beside the median create → first exec.
func printPhases(total benchd.Series, med map[string]time.Duration) {
	fmt.Printf("\nwhere a cold create's time goes (medians of %d creates, user namespace + networking; run includes network):\n", len(total.D))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	var sum time.Duration
	for _, ph := range phaseNames {
		v, ok := med[ph]
		if !ok {
			continue
		}
		if ph != "network" {
			sum += v
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f%%\t\n", ph, benchd.Ms(v), 100*float64(v)/float64(total.Pct(0.5)))
	}
	rest := total.Pct(0.5) - sum
	fmt.Fprintf(tw, "API, store, secrets, rest\t%s\t%.0f%%\t\n", benchd.Ms(rest), 100*float64(rest)/float64(total.Pct(0.5)))
	fmt.Fprintf(tw, "create → first exec\t%s\t100%%\t\n", benchd.Ms(total.Pct(0.5)))
	tw.Flush()
}
