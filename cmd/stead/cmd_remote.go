package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// remoteTimeLayout is how remote snapshot and drill times are shown.
const remoteTimeLayout = "2006-01-02 15:04:05"

// newRemoteCmd is `stead remote` and its subcommands.
func newRemoteCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remote",
		Short: "List snapshots pushed to the off-box repository",
		Long: `Remote snapshots are the ones stead push made in the off-box repository.
Restore one into a new sandbox with stead restore, or copy it into a local
snapshot with stead pull. Wherever a remote snapshot is named, any unique
prefix of 4 or more hex digits of its id works.`,
		Example: `  stead remote ls
  stead remote ls agent-1
  stead remote ls sb-0123abcd --json`,
	}
	group(cmd)
	cmd.AddCommand(newRemoteLsCmd(g))
	return cmd
}

func newRemoteLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls [SANDBOX]",
		Aliases: []string{"list", "snapshots"},
		Short:   "List pushed snapshots, oldest first (all, or one sandbox's)",
		Long: `List the tenant's pushed snapshots, oldest first, or those of one sandbox
(id or name; a sandbox that no longer exists on this machine can be given
by id). ID shows the first 8 hex digits; --json shows everything.`,
		Example: `  stead remote ls
  stead remote ls agent-1
  stead remote ls --json`,
		Args: args(0, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			sandbox := ""
			if len(a) == 1 {
				sandbox = a[0]
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListRemoteSnapshots(cmd.Context(), sandbox)
			if err != nil {
				if sandbox != "" {
					return fmt.Errorf("list remote snapshots of %s: %w", sandbox, err)
				}
				return fmt.Errorf("list remote snapshots: %w", err)
			}
			if g.json {
				if list == nil {
					list = []client.RemoteSnapshot{}
				}
				return printJSON(g.stdout, list)
			}
			if len(list) == 0 {
				fmt.Fprintln(g.stderr, "no pushed snapshots; push one with: stead push SANDBOX")
				return nil
			}
			return writeRemoteSnapshots(g.stdout, list)
		},
	}
}

// writeRemoteSnapshots prints remote snapshots as an aligned table.
func writeRemoteSnapshots(w io.Writer, list []client.RemoteSnapshot) error {
	tw := newTable(w)
	row(tw, "ID", "TIME", "SANDBOX", "FILES", "SIZE", "DATA", "ADDED", "SOURCE")
	for _, rs := range list {
		added := "-"
		if rs.AddedBytes > 0 {
			added = bytesOrZero(rs.AddedBytes)
		}
		row(tw, shortID(rs.ID), rs.Time.Local().Format(remoteTimeLayout), remoteSandbox(rs),
			strconv.FormatInt(rs.Files, 10), bytesOrZero(rs.Bytes), bytesOrZero(rs.DataBytes), added, orDash(rs.Source))
	}
	return tw.Flush()
}
