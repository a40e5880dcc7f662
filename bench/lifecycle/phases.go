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
// service), the root's mount (libcontainer) or detached trees (native),
// libcontainer's create (cgroups, state; native: the state dir claimed),
// the run (libcontainer: namespaces and runc's init; native: init forked,
// cgroups joined and state written while the network is attached and init
// makes its mounts; both include the network), the network attach alone
// and its steps, stead's init up and ready, the cpu limit; and, from the
// client, the first exec after the create returned.
var phaseNames = []string{"admit: secrets, quotas, lease", "record: insert", "clone", "quota", "prepare: volumes, secrets, socket", "runtime: run dir, config, init's files", "rootfs", "create", "run", "run: spawn init", "run: cgroups, state", "run: wait for network",
	"run: wait for init's mounts", "network", "network: lease", "network: links", "network: nftables", "ready", "limits", "record: running", "first exec", "request in the daemon (all)", "audit record",
	"call: checks, template", "call: take a spare", "call: materialize", "call: spare done"}

// subPhase reports whether a phase is part of another one (not summed).
func subPhase(ph string) bool {
	return ph == "network" || strings.HasPrefix(ph, "run: ") || strings.HasPrefix(ph, "network: ") ||
		ph == "request in the daemon (all)" || ph == "audit record" || strings.HasPrefix(ph, "call: ")
}

// createPhases creates n sandboxes on each of two daemons with networking
// and user namespaces on, one with stead's own setup (the default) and one
// with `--runtime libcontainer`, interleaved so that drift hits both alike;
// each create is followed by its first exec. It returns the create →
// first exec timings of both and the median of each phase, read from the
// daemons' debug logs; and, on the first daemon, a stop and a purge of
// running networked sandboxes (half of its sandboxes each).
//
// peer, when set, is run after each pair too (`runc run` with a user
// namespace), so that the target's ratio compares runs of one stretch of
// time: the machine's speed drifts between the bench's sections.
func createPhases(ctx context.Context, n int, bin, poolKind string, peer func(i int) error) (native, lc, peers benchd.Series, nativePh, lcPh map[string]time.Duration, teardown []benchd.Series, err error) {
	start := func(bridge, subnet string, extra ...string) (*benchd.Daemon, error) {
		return benchd.StartNetwork(ctx, bin, poolKind, 16, benchd.Network{Bridge: bridge, Subnet: subnet,
			// No sandbox here resolves a name: an upstream that answers
			// nothing, never the machine's resolver.
			DNSUpstream: "127.0.0.1:9"}, append([]string{"--verbose"}, extra...)...)
	}
	dn, err := start("stbench9", "10.251.0.0/20")
	if err != nil {
		return native, lc, peers, nil, nil, nil, err
	}
	defer dn.Close()
	dl, err := start("stbench8", "10.252.0.0/20", "--runtime", "libcontainer")
	if err != nil {
		return native, lc, peers, nil, nil, nil, err
	}
	defer dl.Close()
	trueCmd := client.ExecRequest{Command: []string{"/bin/true"}}
	type side struct {
		d     *benchd.Daemon
		total []time.Duration
		exec  map[string]time.Duration
	}
	sides := []*side{{d: dn, exec: map[string]time.Duration{}}, {d: dl, exec: map[string]time.Duration{}}}
	for _, sd := range sides {
		warm, err := sd.d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
		if err != nil {
			return native, lc, peers, nil, nil, nil, err
		}
		sd.d.Client.DeleteSandbox(ctx, warm.ID, true)
	}
	for i := range 2 * n {
		sd := sides[i%2]
		c := sd.d.Client
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
		if err != nil {
			return native, lc, peers, nil, nil, nil, err
		}
		t1 := time.Now()
		if _, err := c.Exec(ctx, sb.ID, trueCmd); err != nil {
			return native, lc, peers, nil, nil, nil, err
		}
		sd.total = append(sd.total, time.Since(t0))
		sd.exec[sb.ID] = time.Since(t1)
		if peer != nil && i%2 == 1 {
			t := time.Now()
			if err := peer(1000 + i); err != nil {
				return native, lc, peers, nil, nil, nil, err
			}
			peers.D = append(peers.D, time.Since(t))
		}
	}
	peers.Name = "`runc run` /bin/true, user namespace (interleaved with the two rows above)"
	var meds []map[string]time.Duration
	for _, sd := range sides {
		log, err := sd.d.Log()
		if err != nil {
			return native, lc, peers, nil, nil, nil, err
		}
		med := medianPhases(phasesOf(log, sd.exec))
		// Request-wide steps (not logged by sandbox): every create of
		// this daemon, the warm-up included.
		for name, ds := range warmLogSteps(log) {
			med[name] = benchd.Series{D: ds}.Pct(0.5)
		}
		meds = append(meds, med)
	}
	native = benchd.Series{Name: "stead create → first exec, user namespace + networking", D: sides[0].total}
	lc = benchd.Series{Name: "the same with `serve --runtime libcontainer` (interleaved)", D: sides[1].total}
	stop, purge := benchd.Series{Name: "stead stop of a running sandbox (networking)"}, benchd.Series{Name: "stead purge of a running sandbox (networking)"}
	i := 0
	for id := range sides[0].exec {
		t := time.Now()
		if i%2 == 0 {
			if _, err := dn.Client.StopSandbox(ctx, id); err != nil {
				return native, lc, peers, nil, nil, nil, err
			}
			stop.D = append(stop.D, time.Since(t))
		} else {
			if _, err := dn.Client.DeleteSandbox(ctx, id, true); err != nil {
				return native, lc, peers, nil, nil, nil, err
			}
			purge.D = append(purge.D, time.Since(t))
		}
		i++
	}
	return native, lc, peers, meds[0], meds[1], []benchd.Series{stop, purge}, nil
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
			keys = map[string]string{"fill": "clone", "quota": "quota", "admit": "admit: secrets, quotas, lease", "record": "record: insert"}
		case strings.Contains(line, `msg="sandbox create call"`):
			keys = map[string]string{"checks": "call: checks, template", "spare": "call: take a spare", "materialize": "call: materialize", "spare_done": "call: spare done"}
		case strings.Contains(line, `msg="sandbox start steps"`):
			keys = map[string]string{"prepare": "prepare: volumes, secrets, socket", "record": "record: running"}
		case strings.Contains(line, `msg="sandbox started"`):
			keys = map[string]string{"pre": "runtime: run dir, config, init's files", "rootfs": "rootfs", "create": "create", "run": "run", "ready": "ready", "limits": "limits"}
		case strings.Contains(line, `msg="sandbox set up"`):
			keys = map[string]string{"spawn": "run: spawn init", "cgroups_state": "run: cgroups, state",
				"network_wait": "run: wait for network", "setup_wait": "run: wait for init's mounts"}
		case strings.Contains(line, `msg="attached network"`):
			keys = map[string]string{"lease": "network: lease", "links": "network: links", "nft": "network: nftables"}
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

// printPhases prints where a cold create's time goes on each setup: the
// median of each phase beside the median create → first exec.
func printPhases(native, lc benchd.Series, nativePh, lcPh map[string]time.Duration) {
	fmt.Printf("\nwhere a cold create's time goes (medians of %d creates each, user namespace + networking; run includes network):\n", len(native.D))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tnative\t\tlibcontainer\t\t")
	sums := [2]time.Duration{}
	for _, ph := range phaseNames {
		row := ph
		seen := false
		for k, med := range []map[string]time.Duration{nativePh, lcPh} {
			total := []benchd.Series{native, lc}[k].Pct(0.5)
			v, ok := med[ph]
			if !ok {
				row += "\t—\t\t"
				continue
			}
			seen = true
			if !subPhase(ph) {
				sums[k] += v
			}
			row += fmt.Sprintf("\t%s\t%.0f%%\t", benchd.Ms(v), 100*float64(v)/float64(total))
		}
		if seen {
			fmt.Fprintln(tw, row+"\t")
		}
	}
	row, end := "API, store, secrets, rest", "create → first exec"
	for k, s := range []benchd.Series{native, lc} {
		rest := s.Pct(0.5) - sums[k]
		row += fmt.Sprintf("\t%s\t%.0f%%\t", benchd.Ms(rest), 100*float64(rest)/float64(s.Pct(0.5)))
		end += fmt.Sprintf("\t%s\t100%%\t", benchd.Ms(s.Pct(0.5)))
	}
	fmt.Fprintln(tw, row+"\t")
	fmt.Fprintln(tw, end+"\t")
	tw.Flush()
}
