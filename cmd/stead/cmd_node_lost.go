package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newNodeLostCmd is `stead node lost` and its subcommands (admin keys only).
func newNodeLostCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lost",
		Short: "List, recover and discard the kept copies of lost sandboxes (admin)",
		Long: `A node that lost a sandbox's lease (another node took the sandbox over after
a partition or a failover) stops its copy without pushing it and keeps the
copy's root in its pool as lost-<epoch>-<sandbox id>: what the agent wrote
after the sandbox's last push. The copies stay until an operator discards
them. Recover makes a new, stopped sandbox of the copy's tenant from one (the
copy stays); discard deletes one. On a single node the node is the daemon
itself (stead node ls names it). These commands need an admin key.`,
		Example: `  stead node lost ls
  stead node lost ls --node node-2
  stead node lost recover node-2 lost-4-sb-abc123 --name agent-salvage
  stead node lost discard node-2 lost-4-sb-abc123`,
	}
	cmd.AddCommand(newNodeLostLsCmd(g), newNodeLostRecoverCmd(g), newNodeLostDiscardCmd(g))
	return cmd
}

// newNodeLostLsCmd is `stead node lost ls`.
func newNodeLostLsCmd(g *globals) *cobra.Command {
	var node string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the kept copies on every live node, or on one",
		Long: `List the kept copies: node, copy, the sandbox it is a copy of (id, name,
tenant), the lease epoch, when it was kept and its size. Nodes without a
heartbeat are left out (their pools are out of reach); --node names one.`,
		Example: `  stead node lost ls
  stead node lost ls --node node-2 --json`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListLostCopies(cmd.Context(), node)
			if err != nil {
				return fmt.Errorf("list lost copies: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			fmt.Fprintln(tw, "NODE\tCOPY\tSANDBOX\tNAME\tTENANT\tEPOCH\tKEPT\tSIZE")
			for _, l := range list {
				size := "-"
				if l.SizeBytes >= 0 {
					size = humanize.IBytes(uint64(l.SizeBytes))
				}
				kept := "-"
				if !l.KeptAt.IsZero() {
					kept = l.KeptAt.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Node, l.Copy, l.Sandbox, orDash(l.SandboxName), orDash(l.Tenant),
					strconv.FormatInt(l.Epoch, 10), kept, size)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "only the copies of this node")
	return cmd
}

// newNodeLostRecoverCmd is `stead node lost recover`.
func newNodeLostRecoverCmd(g *globals) *cobra.Command {
	var req client.RecoverLostCopyRequest
	cmd := &cobra.Command{
		Use:   "recover NODE COPY",
		Short: "Make a new, stopped sandbox from a kept copy",
		Long: `Make a new sandbox on NODE whose root is a clone of the kept copy COPY: a new
id, the copy's tenant, template, limits, environment, network policy and
labels, no volumes, stopped. Start it to take what the agent wrote after the
last push. The tenant's quotas apply. The copy stays until it is discarded.
Exits 3 if there is no such node or copy.`,
		Example: `  stead node lost recover node-2 lost-4-sb-abc123 --name agent-salvage`,
		Args:    args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			sb, err := c.RecoverLostCopy(cmd.Context(), a[0], a[1], req)
			if err != nil {
				return fmt.Errorf("recover lost copy %s on node %s: %w", a[1], a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, sb)
			}
			_, err = fmt.Fprintf(g.stdout, "%s %s (tenant %s, %s)\n", sb.ID, sb.Name, sb.Tenant, sb.State)
			return err
		},
	}
	cmd.Flags().StringVar(&req.Name, "name", "", "name of the new sandbox (default: its id)")
	return cmd
}

// newNodeLostDiscardCmd is `stead node lost discard`.
func newNodeLostDiscardCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "discard NODE COPY",
		Aliases: []string{"rm"},
		Short:   "Delete a kept copy from its node's pool",
		Long:    `Delete the kept copy COPY from NODE's pool, for good. Exits 3 if there is no such node or copy.`,
		Example: `  stead node lost discard node-2 lost-4-sb-abc123`,
		Args:    args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DiscardLostCopy(cmd.Context(), a[0], a[1]); err != nil {
				return fmt.Errorf("discard lost copy %s on node %s: %w", a[1], a[0], err)
			}
			_, err = fmt.Fprintf(g.stdout, "discarded %s on %s\n", a[1], a[0])
			return err
		},
	}
}
