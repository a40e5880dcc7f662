package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newDuCmd is `stead du`.
func newDuCmd(g *globals) *cobra.Command {
	var volume bool
	var top int
	cmd := &cobra.Command{
		Use:   "du SANDBOX [PATH]",
		Short: "Show where the space went in a sandbox or a volume",
		Long: `Walk PATH (default /) in the sandbox, running or stopped, and show where
the space went: its own entries largest first, the directories whose own
files take the most space, and the largest files anywhere under it; with
the sandbox's disk quota and what its root uses of it. A path on a
mounted volume walks the volume. With --volume, SANDBOX names a volume.

Symlinks are not followed and hard links are counted once, as du does.`,
		Example: `  stead du agent-1
  stead du agent-1 /workspace --top 20
  stead du --volume datasets /`,
		Args: args(1, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			path := "/"
			if len(a) == 2 {
				path = a[1]
			}
			var u client.DiskUsage
			if volume {
				u, err = c.VolumeDiskUsage(cmd.Context(), a[0], path, top)
			} else {
				u, err = c.DiskUsage(cmd.Context(), a[0], path, top)
			}
			if err != nil {
				return fmt.Errorf("du %s %s: %w", a[0], path, err)
			}
			if g.json {
				return printJSON(g.stdout, u)
			}
			return g.printDiskUsage(u)
		},
	}
	cmd.Flags().BoolVar(&volume, "volume", false, "SANDBOX names a volume")
	cmd.Flags().IntVar(&top, "top", 0, "entries in each list (default 10)")
	return cmd
}

// printDiskUsage prints a du result as three short tables.
func (g *globals) printDiskUsage(u client.DiskUsage) error {
	w := g.stdout
	fmt.Fprintf(w, "%s: %s in %d files, %d directories (walked in %d ms)\n", u.Path, bytesStr(u.Bytes), u.Files, u.Dirs, u.ElapsedMS)
	if u.QuotaBytes > 0 {
		fmt.Fprintf(w, "quota: %s used of %s (%.0f%%)\n", bytesStr(u.UsedBytes), bytesStr(u.QuotaBytes), 100*float64(u.UsedBytes)/float64(u.QuotaBytes))
	}
	if u.Skipped > 0 {
		fmt.Fprintf(w, "skipped: %d entries (vanished or unreadable during the walk)\n", u.Skipped)
	}
	section := func(title string, es []client.DiskUsageEntry) error {
		if len(es) == 0 {
			return nil
		}
		fmt.Fprintf(w, "\n%s\n", title)
		tw := newTable(w)
		for _, e := range es {
			name := e.Path
			if e.Type == "dir" {
				name += "/"
			}
			fmt.Fprintf(tw, "  %s\t%s\n", bytesStr(e.Bytes), name)
		}
		return tw.Flush()
	}
	if err := section("Largest entries:", u.Children); err != nil {
		return err
	}
	if err := section("Directories whose own files take the most:", u.LargestDirs); err != nil {
		return err
	}
	return section("Largest files:", u.LargestFiles)
}
