package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newNodeCmd is `stead node` and its subcommands (admin keys only).
func newNodeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "node",
		Aliases: []string{"nodes"},
		Short:   "List the cluster's nodes; cordon, drain and uncordon them (admin)",
		Long: `Every stead daemon registers itself in the metadata store as a node, with
its internal address and capacity (cpus, memory, free pool space), and
refreshes a heartbeat (stead serve --node-name, --node-heartbeat). Daemons that
share one PostgreSQL store (stead serve --store postgres://...) form a
cluster; a daemon on its own SQLite store is a cluster of one node.

A node is alive while its last heartbeat is within the grace period
(stead serve --node-grace; three heartbeats by default). Cordon a node to
place no new sandboxes on it; drain it to also mark it to be emptied;
uncordon makes it take sandboxes again. A cordon or drain outlives the
node's restarts. Evacuate drains a node and moves its sandboxes to the
others. A node that lost a sandbox to another node keeps its copy of the
sandbox's root; stead node lost lists, recovers and discards those copies.
These commands need an admin key.`,
		Example: `  stead node ls
  stead node cordon node-2
  stead node drain node-2
  stead node uncordon node-2
  stead node evacuate node-2
  stead node lost ls`,
	}
	group(cmd)
	cmd.AddCommand(newNodeLsCmd(g), newNodeShowCmd(g),
		newNodeStateCmd(g, "cordon"), newNodeStateCmd(g, "drain"), newNodeStateCmd(g, "uncordon"), newNodeEvacuateCmd(g), newNodeLostCmd(g))
	return cmd
}

// nodeAge says how long ago a node's last heartbeat was.
func nodeAge(n client.Node) string {
	return time.Since(n.HeartbeatAt).Round(time.Second).String() + " ago"
}

// printNode prints one node.
func printNode(g *globals, n client.Node) error {
	if g.json {
		return printJSON(g.stdout, n)
	}
	tw := newTable(g.stdout)
	fmt.Fprintf(tw, "name:\t%s\naddress:\t%s\nstate:\t%s\nalive:\t%s\ncpus:\t%s\nmemory:\t%s\npool free:\t%s\nversion:\t%s\nheartbeat:\t%s (%s)\nstarted:\t%s\nregistered:\t%s\n",
		n.Name, n.Address, n.State, strconv.FormatBool(n.Alive), strconv.FormatFloat(n.CPUs, 'f', -1, 64),
		humanize.IBytes(uint64(max(n.MemoryBytes, 0))), humanize.IBytes(uint64(max(n.PoolFreeBytes, 0))), n.Version,
		n.HeartbeatAt.Local().Format(time.DateTime), nodeAge(n), n.StartedAt.Local().Format(time.DateTime),
		n.CreatedAt.Local().Format(time.DateTime))
	return tw.Flush()
}

// newNodeLsCmd is `stead node ls`.
func newNodeLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the nodes with their state, capacity and last heartbeat",
		Long:    `List the nodes by name. The node that answered is marked with *.`,
		Example: `  stead node ls
  stead node ls --json`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListNodes(cmd.Context())
			if err != nil {
				return fmt.Errorf("list nodes: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			fmt.Fprintln(tw, "NAME\tSTATE\tALIVE\tADDRESS\tCPUS\tMEMORY\tPOOL FREE\tHEARTBEAT\tVERSION")
			for _, n := range list {
				name := n.Name
				if n.Self {
					name += " *"
				}
				fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%s\t%s\t%s\t%s\t%s\n", name, n.State, n.Alive, n.Address,
					strconv.FormatFloat(n.CPUs, 'f', -1, 64), humanize.IBytes(uint64(max(n.MemoryBytes, 0))),
					humanize.IBytes(uint64(max(n.PoolFreeBytes, 0))), nodeAge(n), n.Version)
			}
			return tw.Flush()
		},
	}
}

// newNodeShowCmd is `stead node show`.
func newNodeShowCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "show NAME",
		Aliases: []string{"inspect"},
		Short:   "Describe a node",
		Example: `  stead node show node-2`,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			n, err := c.GetNode(cmd.Context(), a[0])
			if err != nil {
				return fmt.Errorf("show node %s: %w", a[0], err)
			}
			return printNode(g, n)
		},
	}
}

// newNodeStateCmd is `stead node cordon`, `drain` or `uncordon`.
func newNodeStateCmd(g *globals, verb string) *cobra.Command {
	short := map[string]string{
		"cordon":   "Cordon a node: it takes no new sandboxes; the ones it runs stay",
		"drain":    "Drain a node: it takes no new sandboxes and is marked to be emptied of its own",
		"uncordon": "Uncordon a cordoned or draining node: it takes new sandboxes again",
	}[verb]
	return &cobra.Command{
		Use:     verb + " NAME",
		Short:   short,
		Long:    short + ". Idempotent; exits 3 if no node has that name.",
		Example: "  stead node " + verb + " node-2",
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var n client.Node
			switch verb {
			case "cordon":
				n, err = c.CordonNode(cmd.Context(), a[0])
			case "drain":
				n, err = c.DrainNode(cmd.Context(), a[0])
			default:
				n, err = c.UncordonNode(cmd.Context(), a[0])
			}
			if err != nil {
				return fmt.Errorf("%s node %s: %w", verb, a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, n)
			}
			_, err = fmt.Fprintf(g.stdout, "%s %s\n", n.Name, n.State)
			return err
		},
	}
}

// newNodeEvacuateCmd is `stead node evacuate`.
func newNodeEvacuateCmd(g *globals) *cobra.Command {
	var noWait bool
	cmd := &cobra.Command{
		Use:   "evacuate NAME",
		Short: "Drain a node and move each of its sandboxes to another node",
		Long: `Drain a node (it takes no new sandboxes), then move its sandboxes to the
other nodes one at a time: a push while the sandbox runs, a pause, a push of
the delta, the hand-over of its lease, and a restore on another node, where
it runs again with the same id, name, volumes and agent state. A running
sandbox is paused for its delta push plus the restore (the result gives each
pause). A sandbox whose move fails before the hand-over stays on the node and
runs on; one whose restore fails is taken back by the node.

Progress is shown on stderr; --no-wait prints the operation id and returns
(follow it with stead op ID --wait). Exits 1 if a sandbox stayed on the node
(the result says why), 3 if no node has that name.`,
		Example: `  stead node evacuate node-2
  stead node evacuate node-2 --no-wait`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			op, err := c.EvacuateNode(cmd.Context(), a[0], client.EvacuateRequest{})
			if err != nil {
				return fmt.Errorf("evacuate node %s: %w", a[0], err)
			}
			return g.finishOperation(cmd, c, "evacuate "+a[0], op, noWait, g.printEvacuateResult)
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, noWaitUsage)
	return cmd
}

// printEvacuateResult prints where each sandbox of an evacuation went.
func (g *globals) printEvacuateResult(op client.Operation) error {
	var r client.EvacuateResult
	if err := json.Unmarshal(op.Result, &r); err != nil {
		return fmt.Errorf("evacuate result: %w", err)
	}
	tw := newTable(g.stdout)
	fmt.Fprintln(tw, "SANDBOX\tRESULT\tTARGET\tPAUSE\tPUSH")
	for _, m := range r.Moved {
		fmt.Fprintf(tw, "%s\tmoved\t%s\t%s\t%s\n", m.Sandbox, m.Target, pauseStr(m.PauseSeconds), orDash(shortID(m.Push)))
	}
	for _, m := range r.Failed {
		fmt.Fprintf(tw, "%s\tstayed: %s\t%s\t-\t%s\n", m.Sandbox, m.Error, orDash(m.Target), orDash(shortID(m.Push)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(g.stderr, "node %s: %d sandboxes moved, %d stayed; it is draining (stead node uncordon %s takes it back into use)\n",
		r.Node, len(r.Moved), len(r.Failed), r.Node)
	return err
}

// pauseStr formats a pause in seconds ("-" for none).
func pauseStr(s float64) string {
	if s <= 0 {
		return "-"
	}
	return seconds(s)
}
