package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// newListCmd is `stead list`.
func newListCmd(g *globals) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls", "ps"},
		Short:   "List sandboxes",
		Example: `  stead list
  stead list --all     # include soft-deleted sandboxes (undelete-able until PURGE)`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListSandboxes(cmd.Context(), all)
			if err != nil {
				return fmt.Errorf("list sandboxes: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			header := []string{"ID", "NAME", "STATE", "TEMPLATE", "TYPE", "CPUS", "MEMORY", "CREATED"}
			if all {
				header = append(header, "PURGE")
			}
			header = append(header, "WARNINGS")
			row(tw, header...)
			for _, sb := range list {
				state := sb.State
				if sb.StopReason != "" && (state == "stopped" || state == "lost") {
					state += " (" + sb.StopReason + ")"
				}
				cells := []string{sb.ID, sb.Name, state, orDash(sb.Template), orDash(sb.InstanceType),
					fmt.Sprintf("%g", sb.Limits.CPUs), bytesStr(sb.Limits.MemoryBytes), ago(sb.CreatedAt)}
				if all {
					cells = append(cells, agoPtr(sb.PurgeAt))
				}
				cells = append(cells, warningsBrief(sb.Warnings))
				row(tw, cells...)
			}
			if len(list) == 0 {
				fmt.Fprintln(g.stderr, strings.TrimSpace("no sandboxes; create one with: stead create NAME"))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "include soft-deleted sandboxes")
	return cmd
}
