package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newUsageCmd is `stead usage`.
func newUsageCmd(g *globals) *cobra.Command {
	var q client.UsageQuery
	var since, until string
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show metered usage and its cost, and what always-on would have cost",
		Long: `Show what the tenant's sandboxes used and cost: running time by instance type
(never while paused or stopped), memory GiB-seconds, storage GB-hours (pool,
local snapshots, repository), priced with the daemon's prices (serve --prices).
The last lines compare it with what the tenant would have paid had every
sandbox run its whole life: what auto-stop saved.

Running time is checkpointed every --meter-interval of the daemon (60 s by
default): a kill -9 of the daemon loses at most that much of it.`,
		Example: `  stead usage                          # this month, in total
  stead usage --by day --since 2026-11-01
  stead usage --by sandbox
  stead usage --sandbox agent-1 --json
  stead usage --tenant acme            # admin key: another tenant`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if q.Since, err = parseWhen(since); err != nil {
				return usageError{fmt.Errorf("--since %q: %v", since, err)}
			}
			if q.Until, err = parseWhen(until); err != nil {
				return usageError{fmt.Errorf("--until %q: %v", until, err)}
			}
			if q.By != "" && q.By != "day" && q.By != "sandbox" {
				return usageError{fmt.Errorf("--by %q: want day or sandbox", q.By)}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			r, err := c.Usage(cmd.Context(), q)
			if err != nil {
				return fmt.Errorf("get usage: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, r)
			}
			return printUsage(g, r)
		},
	}
	f := cmd.Flags()
	f.StringVar(&q.By, "by", "", "rows per day or per sandbox (default: the total only)")
	f.StringVar(&since, "since", "", "start: YYYY-MM-DD, an RFC 3339 time or a duration ago such as 72h (default: the first of this month, UTC)")
	f.StringVar(&until, "until", "", "end, as --since (default: now)")
	f.StringVar(&q.Sandbox, "sandbox", "", "one sandbox (id or name)")
	f.StringVar(&q.Tenant, "tenant", "", "the tenant to report on (admin keys only)")
	return cmd
}

// parseWhen reads a date, an RFC 3339 time or a duration before now.
func parseWhen(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return time.Now().Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("want YYYY-MM-DD, an RFC 3339 time or a duration such as 72h")
}

func usd(x float64) string { return fmt.Sprintf("$%.4f", x) }

func hours(secs float64) string { return fmt.Sprintf("%.2f h", secs/3600) }

// computeStr shows running time by instance type.
func computeStr(m map[string]float64) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %s", k, hours(m[k])))
	}
	return orDash(strings.Join(parts, ", "))
}

func printUsage(g *globals, r client.UsageReport) error {
	fmt.Fprintf(g.stdout, "Usage of tenant %s from %s to %s (%s; checkpointed every %s)\n\n", r.Tenant,
		r.Since.Format(time.RFC3339), r.Until.Format(time.RFC3339), r.Currency, r.Interval)
	if len(r.Rows) > 0 {
		tw := newTable(g.stdout)
		first := "DAY"
		if r.By == "sandbox" {
			first = "SANDBOX"
		}
		row(tw, first, "TYPE", "RUNNING", "MEM GiB-h", "POOL GB-h", "SNAP GB-h", "REPO GB-h", "COMPUTE", "STORAGE", "COST")
		for _, l := range r.Rows {
			name := l.Day
			if r.By == "sandbox" {
				name = orDash(l.SandboxName)
				switch {
				case l.Sandbox != "" && l.SandboxName == "":
					name = l.Sandbox + " (purged)"
				case l.Sandbox == "":
					name = l.Subject
				}
			}
			row(tw, name, orDash(l.InstanceType), hours(l.RunningSeconds), fmt.Sprintf("%.2f", l.MemoryGiBSeconds/3600),
				fmt.Sprintf("%.2f", l.PoolGBHours), fmt.Sprintf("%.2f", l.SnapshotGBHours), fmt.Sprintf("%.2f", l.RepositoryGBHours),
				usd(l.ComputeCost), usd(l.StorageCost), usd(l.Cost))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(g.stdout)
	}
	t := r.Total
	tw := newTable(g.stdout)
	row(tw, "Running:", hours(t.RunningSeconds)+" ("+computeStr(t.ComputeSeconds)+")")
	row(tw, "Memory:", fmt.Sprintf("%.2f GiB-h", t.MemoryGiBSeconds/3600))
	row(tw, "Storage:", fmt.Sprintf("pool %.2f GB-h, snapshots %.2f GB-h, repository %.2f GB-h", t.PoolGBHours, t.SnapshotGBHours, t.RepositoryGBHours))
	row(tw, "Cost:", fmt.Sprintf("%s (compute %s, storage %s)", usd(t.Cost), usd(t.ComputeCost), usd(t.StorageCost)))
	a := r.AlwaysOn
	row(tw, "Always-on would cost:", fmt.Sprintf("%s (every sandbox running its whole life: %s)", usd(a.Cost), hours(a.RunningSeconds)))
	row(tw, "Auto-stop cost:", fmt.Sprintf("%s: saved %s (%.1f%%)", usd(a.ActualCost), usd(a.Saving), a.SavingPercent))
	return tw.Flush()
}
