package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/stead-dev/stead/bench/internal/benchd"
	"github.com/stead-dev/stead/client"
)

func newScaleSide(name string, d *benchd.Daemon) *scaleSide {
	return &scaleSide{name: name, d: d, rss: map[int]int64{}, anon: map[int]int64{}, thr: map[int]int64{}}
}

// scaleOpts are the scale run's flags (see main).
type scaleOpts struct {
	total, running     int
	bin, poolKind      string
	full, network      bool
	pprofAddr, keepLog string
	gap, hold          time.Duration
	small              int
}

// scaleSide is one daemon of the scale run and what was measured on it.
type scaleSide struct {
	name   string
	d      *benchd.Daemon
	create []time.Duration // create → first exec of the i-th sandbox
	ids    []string        // the i-th sandbox
	exec   []time.Duration // its first exec alone
	rss    map[int]int64   // daemon RSS after the i-th create
	anon   map[int]int64   // its anonymous part
	thr    map[int]int64   // daemon OS threads after the i-th create
}

// scale creates total sandboxes on two daemons (btrfs simple quotas, the
// default, and full qgroup accounting) one at a time and alternately, so
// that the machine's drift hits both alike, and prints the create → first
// exec cost around the 10th, 100th, 500th and 1,000th sandbox with the
// daemon's RSS there. The first running sandboxes stay running; the rest
// are stopped after their first exec (a stopped sandbox should cost no
// process and no memory). full=false measures only the default.
//
// With o.small > 0 a daemon of its own keeps a fleet of that size, and
// each create on the growing fleet is paired with one on it, before it or
// after it by turns (deleted once the fleet is full, but never inside a
// timed window): the ratio of the two windows
// compares the two fleet sizes in the same stretch of time, where the
// ratio to the first ten creates compares it with the run's start (the
// machine's speed drifts, and ten creates right after a daemon starts
// moved by ±30 % between runs).
func scale(ctx context.Context, o scaleOpts) error {
	total, running, bin, poolKind, full, network := o.total, o.running, o.bin, o.poolKind, o.full, o.network
	var sides []*scaleSide
	// start starts a daemon of the run, networked on its own bridge with
	// network.
	startDaemon := func(bridge, subnet string, extra ...string) (*benchd.Daemon, error) {
		if !network {
			return benchd.Start(ctx, bin, poolKind, 16, extra...)
		}
		// A /20 holds 4,094 sandboxes; no sandbox resolves a name (an
		// upstream that answers nothing, never the machine's resolver).
		return benchd.StartNetwork(ctx, bin, poolKind, 16, benchd.Network{Bridge: bridge, Subnet: subnet,
			DNSUpstream: "127.0.0.1:9"}, extra...)
	}
	// A fleet of 1,000 promises more disk than a bench pool holds.
	// --verbose: the phases of each create are read from the debug log.
	extra := []string{"--pool-overcommit", "10000", "--verbose"}
	if o.pprofAddr != "" {
		extra = append(extra, "--pprof-listen", o.pprofAddr)
	}
	d, err := startDaemon("stbench7", "10.252.0.0/20", extra...)
	if err != nil {
		return err
	}
	defer d.Close()
	sides = append(sides, newScaleSide("simple quotas", d))
	if full && poolKind == "btrfs" {
		d, err := startDaemon("stbench8", "10.252.16.0/20", "--pool-overcommit", "10000", "--pool-full-qgroups")
		if err != nil {
			return err
		}
		defer d.Close()
		sides = append(sides, newScaleSide("full qgroups", d))
	}
	var small *scaleSide
	if o.small > 0 {
		d, err := startDaemon("stbench6", "10.253.0.0/20", "--pool-overcommit", "10000", "--verbose") // as the growing fleet's
		if err != nil {
			return err
		}
		defer d.Close()
		small = newScaleSide(fmt.Sprintf("a fleet of %d", o.small), d)
	}
	trueCmd := client.ExecRequest{Command: []string{"/bin/true"}}
	warm := sides
	if small != nil {
		warm = append(slices.Clone(sides), small)
	}
	for _, s := range warm { // warm the host template
		sb, err := s.d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
		if err != nil {
			return err
		}
		s.d.Client.DeleteSandbox(ctx, sb.ID, true)
	}
	marks := []int{10, 100, 500, 1000}
	// inWindow reports whether the i-th create (1-based) is timed: in the
	// window of creates ending at a mark.
	inWindow := func(i int) bool {
		for _, m := range marks {
			if i > windowStart(m) && i <= m {
				return true
			}
		}
		return false
	}
	// smallStep is the i-th create on the fleet that stays small. It goes
	// before the growing fleet's on even steps and after it on odd ones,
	// so that neither is always the one that follows the other's work
	// (its refills). Past the fleet's size each create is deleted, but
	// only outside the timed windows: a delete is about 35 ms of work on
	// the same CPUs, which would lift both fleets' creates alike and pull
	// their ratio toward 1. Within a window the small fleet grows by at
	// most the window's 30.
	var surplus []string
	smallStep := func(i int) error {
		t0 := time.Now()
		sb, err := small.d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
		if err != nil {
			return fmt.Errorf("%s: create #%d: %w", small.name, i, err)
		}
		if _, err := small.d.Client.Exec(ctx, sb.ID, trueCmd); err != nil {
			return fmt.Errorf("%s: exec #%d: %w", small.name, i, err)
		}
		small.create = append(small.create, time.Since(t0))
		if i > o.small {
			surplus = append(surplus, sb.ID)
		}
		if inWindow(i) || inWindow(i+1) {
			return nil
		}
		for _, id := range surplus {
			if _, err := small.d.Client.DeleteSandbox(ctx, id, true); err != nil {
				return fmt.Errorf("%s: delete after #%d: %w", small.name, i, err)
			}
		}
		surplus = surplus[:0]
		return nil
	}
	// idle is what the machine and the growing fleet's daemon cost with
	// no create running, measured at each mark (outside the windows): a
	// fleet of idle sandboxes should cost no CPU, and what it does cost
	// lands on every create beside it.
	type idleCost struct {
		machine, daemon time.Duration
		tasks           int64
	}
	idle := map[int]idleCost{}
	const idleFor = 3 * time.Second
	start := time.Now()
	for i := 1; i <= total; i++ {
		if small != nil && i%2 == 0 {
			if err := smallStep(i); err != nil {
				return err
			}
		}
		for _, s := range sides {
			t0 := time.Now()
			sb, err := s.d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
			if err != nil {
				return fmt.Errorf("%s: create #%d: %w", s.name, i, err)
			}
			t1 := time.Now()
			if _, err := s.d.Client.Exec(ctx, sb.ID, trueCmd); err != nil {
				return fmt.Errorf("%s: exec #%d: %w", s.name, i, err)
			}
			s.create = append(s.create, time.Since(t0))
			s.ids = append(s.ids, sb.ID)
			s.exec = append(s.exec, time.Since(t1))
			if i > running {
				if _, err := s.d.Client.StopSandbox(ctx, sb.ID); err != nil {
					return fmt.Errorf("%s: stop #%d: %w", s.name, i, err)
				}
			}
			if slices.Contains(marks, i) || i == total {
				s.rss[i], s.anon[i], s.thr[i] = s.d.RSS(), s.d.RSSAnon(), s.d.Threads()
			}
		}
		if small != nil && i%2 == 1 {
			if err := smallStep(i); err != nil {
				return err
			}
		}
		if slices.Contains(marks, i) || i == total {
			time.Sleep(time.Second) // the refills the last create started
			m0, d0 := benchd.MachineBusy(), sides[0].d.CPU()
			time.Sleep(idleFor)
			idle[i] = idleCost{benchd.MachineBusy() - m0, sides[0].d.CPU() - d0, benchd.Tasks()}
		}
		time.Sleep(o.gap)
		if i%100 == 0 {
			fmt.Fprintf(os.Stderr, "scale: %d sandboxes per daemon (%s)\n", i, time.Since(start).Round(time.Second))
		}
	}
	if o.hold > 0 {
		fmt.Fprintf(os.Stderr, "scale: holding the fleet for %s (daemon pid %d)\n", o.hold, sides[0].d.Pid)
		time.Sleep(o.hold)
	}
	netw := "no network"
	if network {
		netw = "networked (user namespaces, a veth each, egress rules)"
	}
	fmt.Printf("stead create cost by fleet size: %d sandboxes per daemon (the first %d running, the rest stopped), pool %s, %s, %s\n\n",
		total, min(running, total), poolKind, netw, time.Now().UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "sandboxes\t")
	for _, s := range sides {
		fmt.Fprintf(tw, "%s p50\tp99\tvs 10th\tRSS MiB\tanon MiB\tthreads\t", s.name)
	}
	fmt.Fprintln(tw)
	// A window of creates ending at each mark (p50/p99 of those).
	window := func(s *scaleSide, m int) benchd.Series {
		return benchd.Series{D: s.create[windowStart(m):m]}
	}
	var rows []int
	for _, m := range marks {
		if m <= total {
			rows = append(rows, m)
		}
	}
	if !slices.Contains(rows, total) {
		rows = append(rows, total)
	}
	for _, m := range rows {
		fmt.Fprintf(tw, "%d\t", m)
		for _, s := range sides {
			w, base := window(s, m), window(s, min(10, total))
			fmt.Fprintf(tw, "%s\t%s\t%.2fx\t%.1f\t%.1f\t%d\t", benchd.Ms(w.Pct(0.5)), benchd.Ms(w.Pct(0.99)),
				float64(w.Pct(0.5))/float64(base.Pct(0.5)), float64(s.rss[m])/(1<<20), float64(s.anon[m])/(1<<20), s.thr[m])
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Printf("\nidle, %s after each mark's last create, over %s with no create running (CPU as %% of one core)\n", time.Second, idleFor)
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "sandboxes\tmachine CPU\t%s daemon CPU\ttasks on the machine\t\n", sides[0].name)
	for _, m := range rows {
		c := idle[m]
		fmt.Fprintf(tw, "%d\t%.1f %%\t%.1f %%\t%d\t\n", m, 100*c.machine.Seconds()/idleFor.Seconds(), 100*c.daemon.Seconds()/idleFor.Seconds(), c.tasks)
	}
	tw.Flush()
	if len(sides) == 2 {
		a, b := window(sides[0], total), window(sides[1], total)
		fmt.Printf("\nat %d sandboxes: full qgroups / simple quotas create p50 = %.2fx\n", total, float64(b.Pct(0.5))/float64(a.Pct(0.5)))
	}
	if small != nil {
		fmt.Printf("\nthe same stretch of time on %s (each create past them deleted, outside the timed windows): create → first exec p50 in the same windows\n", small.name)
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "sandboxes\t%s p50\t%s p50\tratio\t\n", sides[0].name, small.name)
		for _, m := range rows {
			a, b := window(sides[0], m), window(small, m)
			fmt.Fprintf(tw, "%d\t%s\t%s\t%.2fx\t\n", m, benchd.Ms(a.Pct(0.5)), benchd.Ms(b.Pct(0.5)), float64(a.Pct(0.5))/float64(b.Pct(0.5)))
		}
		tw.Flush()
	}
	if o.keepLog != "" {
		b, err := sides[0].d.Log()
		if err == nil {
			err = os.WriteFile(o.keepLog, b, 0o644)
		}
		if err != nil {
			return fmt.Errorf("keep the daemon's log: %w", err)
		}
	}
	return printScalePhases(sides[0], rows)
}

// scaleWindow is how many creates end at each mark of the scale run: the
// first ten for the mark 10, thirty for the later ones (the median of ten
// moved by ±20 % between runs, and a periodic sweep of the daemon's over a
// thousand sandboxes could fill a whole window of ten).
const scaleWindow = 30

// windowStart is the index of the first create of the window ending at
// mark m.
func windowStart(m int) int {
	if m <= 10 {
		return 0
	}
	return max(m-scaleWindow, 10)
}

// printScalePhases prints where a create's time goes in the window of
// creates ending at each mark (medians, from the daemon's debug log), so
// what grows with the fleet shows.
func printScalePhases(s *scaleSide, marks []int) error {
	log, err := s.d.Log()
	if err != nil {
		return err
	}
	fmt.Printf("\nwhere a create's time goes by fleet size (%s; medians of the creates ending at each: 1-10, then 30):\n", s.name)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "phase\t")
	for _, m := range marks {
		fmt.Fprintf(tw, "%d\t", m)
	}
	fmt.Fprintln(tw)
	meds := make([]map[string]time.Duration, len(marks))
	totals := make([]time.Duration, len(marks))
	// The request-wide steps carry no sandbox: the creates' are the last
	// len(s.ids) of them, in order (the template's warm-up create comes
	// first).
	steps := warmLogSteps(log)
	for i, m := range marks {
		lo := windowStart(m)
		firstExec := map[string]time.Duration{}
		for j := lo; j < m; j++ {
			firstExec[s.ids[j]] = s.exec[j]
		}
		meds[i] = medianPhases(phasesOf(log, firstExec))
		totals[i] = benchd.Series{D: s.create[lo:m]}.Pct(0.5)
		for name, ds := range steps {
			if len(ds) >= len(s.ids) {
				ds = ds[len(ds)-len(s.ids):]
				meds[i][name] = benchd.Series{D: ds[lo:m]}.Pct(0.5)
			}
		}
	}
	for _, ph := range append(slices.Clone(phaseNames), "API, store, rest", "create → first exec") {
		fmt.Fprintf(tw, "%s\t", ph)
		for i := range marks {
			var v time.Duration
			switch ph {
			case "API, store, rest":
				v = totals[i]
				for _, p := range phaseNames {
					if !subPhase(p) {
						v -= meds[i][p]
					}
				}
			case "create → first exec":
				v = totals[i]
			default:
				var ok bool
				if v, ok = meds[i][ph]; !ok {
					fmt.Fprint(tw, "—\t")
					continue
				}
			}
			fmt.Fprintf(tw, "%s\t", benchd.Ms(v))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
