package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newInfoCmd is `stead info`.
func newInfoCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "info [SANDBOX]",
		Aliases: []string{"show", "inspect"},
		Short:   "Describe the daemon, or one sandbox",
		Example: `  stead info            # daemon: version, pool, runtime, instance types
  stead info agent-1    # one sandbox: state, limits, service, times
  stead info agent-1 --json`,
		Args: args(0, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if len(a) == 1 {
				sb, err := c.GetSandbox(cmd.Context(), a[0])
				if err != nil {
					return fmt.Errorf("get sandbox %s: %w", a[0], err)
				}
				return g.printSandbox(sb)
			}
			info, err := c.Info(cmd.Context())
			if err != nil {
				return fmt.Errorf("get daemon info: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, info)
			}
			tw := newTable(g.stdout)
			row(tw, "Endpoint:", c.Endpoint())
			row(tw, "Version:", info.Version)
			row(tw, "Runtime:", fmt.Sprintf("%s (cgroup v%d)", info.Runtime, info.CgroupVersion))
			row(tw, "Pool:", info.Pool)
			if c := info.PoolCapacity; c != nil {
				row(tw, "Pool fill:", poolFill(*c))
				row(tw, "Pool committed:", fmt.Sprintf("%s of %s (%g x %s usable; size %s less a %s reserve)",
					bytesStr(c.CommittedBytes), bytesStr(c.CommitLimitBytes), c.Overcommit, bytesStr(c.UsableBytes), bytesStr(c.SizeBytes), bytesStr(c.ReserveBytes)))
			}
			row(tw, "Data dir:", info.DataDir)
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(g.stdout, "\nInstance types:")
			tw = newTable(g.stdout)
			row(tw, "  NAME", "CPUS", "MEMORY", "PIDS", "DISK")
			for _, it := range info.InstanceTypes {
				row(tw, "  "+it.Name, fmt.Sprintf("%g", it.Limits.CPUs), bytesStr(it.Limits.MemoryBytes),
					fmt.Sprintf("%d", it.Limits.Pids), bytesStr(it.Limits.DiskBytes))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(info.Persistence) > 0 {
				fmt.Fprintln(g.stdout, "\nPersistence:")
				for _, p := range info.Persistence {
					fmt.Fprintln(g.stdout, "  "+strings.TrimSpace(p))
				}
			}
			return nil
		},
	}
}

// poolFill describes how full the pool is: what its datasets hold of
// what they may (when the pool enforces it), else its file system's use.
func poolFill(c client.PoolCapacity) string {
	var s string
	if c.Enforced && c.DatasetsBytes >= 0 {
		s = fmt.Sprintf("%.0f%%: %s of %s held by sandboxes, volumes, snapshots and templates; file system %s of %s used",
			100*c.Fill, bytesStr(c.DatasetsBytes), bytesStr(c.UsableBytes), bytesStr(c.UsedBytes), bytesStr(c.SizeBytes))
	} else {
		s = fmt.Sprintf("%.0f%%: %s of %s used on its file system (disk quotas not enforced)", 100*c.Fill, bytesStr(c.UsedBytes), bytesStr(c.SizeBytes))
	}
	switch {
	case c.Fill >= 1:
		s += " - FULL: writes in sandboxes fail, creates are refused"
	case c.Fill >= 0.85:
		s += " - nearly full"
	}
	return s
}
