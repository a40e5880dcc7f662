package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newSnapshotCmd is `stead snapshot` and its subcommands.
func newSnapshotCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "snapshot",
		Aliases: []string{"snapshots", "snap"},
		Short:   "Take, list and delete local snapshots of sandboxes",
		Long: `A snapshot is a read-only, point-in-time copy of a sandbox's files, kept on
this machine. Taking one is O(1) on a btrfs pool and freezes a running
sandbox only for that instant. Fork a snapshot into new sandboxes with
stead fork, or return a sandbox to it with stead rollback.

Snapshots form a tree: a snapshot's parent is the snapshot its sandbox was
forked or rolled back from. stead snapshot ls draws it.`,
		Example: `  stead snapshot create agent-1 --label "hour 4" --description "tests pass"
  stead snapshot ls
  stead snapshot ls agent-1
  stead snapshot info snap-3f9a
  stead snapshot rm snap-3f9a`,
	}
	group(cmd)
	cmd.AddCommand(
		newSnapshotCreateCmd(g),
		newSnapshotLsCmd(g),
		newSnapshotInfoCmd(g),
		newSnapshotRmCmd(g),
	)
	return cmd
}

func newSnapshotCreateCmd(g *globals) *cobra.Command {
	var req client.CreateSnapshotRequest
	var quiet bool
	cmd := &cobra.Command{
		Use:     "create SANDBOX",
		Aliases: []string{"take"},
		Short:   "Take a read-only snapshot of a sandbox, running or stopped",
		Long: `Take a read-only snapshot of a sandbox's files: running (frozen only for
the instant it takes), paused or stopped.

Exits 4 if the sandbox is deleted (undelete it first); nothing is changed.`,
		Example: `  stead snapshot create agent-1
  stead snapshot create agent-1 --label "hour 4" --description "before the refactor"
  snap=$(stead snapshot create agent-1 -q) && stead fork "$snap" --count 3`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			s, err := c.CreateSnapshot(cmd.Context(), a[0], req)
			if err != nil {
				return fmt.Errorf("snapshot %s: %w", a[0], err)
			}
			switch {
			case g.json:
				return printJSON(g.stdout, s)
			case quiet:
				_, err = fmt.Fprintln(g.stdout, s.ID)
				return err
			}
			line := fmt.Sprintf("%s: snapshot of %s", s.ID, snapshotSandbox(s))
			if s.Label != "" {
				line += fmt.Sprintf(" %q", s.Label)
			}
			if s.FrozenFor != "" {
				line += " (frozen for " + s.FrozenFor + ")"
			}
			if len(s.Volumes) > 0 {
				line += "; volume snapshots " + strings.Join(s.Volumes, ", ")
			}
			_, err = fmt.Fprintln(g.stdout, line)
			return err
		},
	}
	cmd.Flags().StringVarP(&req.Label, "label", "l", "", "short label shown in stead snapshot ls")
	cmd.Flags().StringVarP(&req.Description, "description", "d", "", "longer description")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the snapshot id")
	cmd.Flags().BoolVar(&req.IncludeVolumes, "include-volumes", false, "also snapshot the sandbox's volumes at the same frozen instant")
	return cmd
}

func newSnapshotLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls [SANDBOX]",
		Aliases: []string{"list"},
		Short:   "Show snapshots as a tree (parent, then its children), oldest first",
		Long: `Show the tenant's snapshots, or those of one sandbox, as a tree: each root
(a snapshot without a parent, or whose parent is not listed) is followed by
the snapshots taken of sandboxes forked or rolled back from it, indented.
Kind is user (asked for), safety (taken before a rollback) or fork (taken
to fork a sandbox). With --json, print the flat list.`,
		Example: `  stead snapshot ls
  stead snapshot ls agent-1
  stead snapshot ls --json`,
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
			list, err := c.ListSnapshots(cmd.Context(), sandbox)
			if err != nil {
				if sandbox != "" {
					return fmt.Errorf("list snapshots of %s: %w", sandbox, err)
				}
				return fmt.Errorf("list snapshots: %w", err)
			}
			if g.json {
				if list == nil {
					list = []client.Snapshot{}
				}
				return printJSON(g.stdout, list)
			}
			if len(list) == 0 {
				fmt.Fprintln(g.stderr, "no snapshots; take one with: stead snapshot create SANDBOX")
				return nil
			}
			return writeSnapshotTree(g.stdout, list)
		},
	}
}

func newSnapshotInfoCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "info SNAPSHOT",
		Aliases: []string{"show", "get"},
		Short:   "Describe a snapshot",
		Example: "  stead snapshot info snap-3f9a",
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			s, err := c.GetSnapshot(cmd.Context(), a[0])
			if err != nil {
				return fmt.Errorf("get snapshot %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, s)
			}
			tw := newTable(g.stdout)
			row(tw, "ID:", s.ID)
			row(tw, "Sandbox:", snapshotSandbox(s))
			row(tw, "Kind:", s.Kind)
			row(tw, "Parent:", orDash(s.Parent))
			row(tw, "Label:", orDash(s.Label))
			row(tw, "Description:", orDash(s.Description))
			row(tw, "Created:", ago(s.CreatedAt))
			row(tw, "Frozen for:", orDash(s.FrozenFor))
			return tw.Flush()
		},
	}
}

func newSnapshotRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm SNAPSHOT...",
		Aliases: []string{"delete"},
		Short:   "Delete snapshots (sandboxes made from them keep their files)",
		Example: `  stead snapshot rm snap-3f9a
  stead snapshot rm snap-3f9a snap-77c1`,
		Args: args(1, -1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			for _, id := range a {
				if err := c.DeleteSnapshot(cmd.Context(), id); err != nil {
					return fmt.Errorf("delete snapshot %s: %w", id, err)
				}
				if _, err := fmt.Fprintf(g.stdout, "%s: deleted\n", id); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// snapshotSandbox names a snapshot's sandbox: its name, else its id.
func snapshotSandbox(s client.Snapshot) string {
	if s.SandboxName != "" {
		return s.SandboxName
	}
	return s.Sandbox
}

// treeRow is one line of the snapshot tree: the drawing before the id and
// the snapshot.
type treeRow struct {
	prefix string
	snap   client.Snapshot
}

// snapshotTree orders snapshots as a tree, depth first: each root (a
// snapshot without a parent, or whose parent is not in list) is followed by
// its children, oldest first at every level. Every snapshot appears once,
// even if the parent links loop.
func snapshotTree(list []client.Snapshot) []treeRow {
	snaps := append([]client.Snapshot(nil), list...)
	sort.SliceStable(snaps, func(i, j int) bool { return snaps[i].CreatedAt.Before(snaps[j].CreatedAt) })
	present := make(map[string]bool, len(snaps))
	for _, s := range snaps {
		present[s.ID] = true
	}
	children := map[string][]client.Snapshot{}
	var roots []client.Snapshot
	for _, s := range snaps {
		if s.Parent == "" || s.Parent == s.ID || !present[s.Parent] {
			roots = append(roots, s)
			continue
		}
		children[s.Parent] = append(children[s.Parent], s)
	}

	rows := make([]treeRow, 0, len(snaps))
	seen := make(map[string]bool, len(snaps))
	var walk func(s client.Snapshot, prefix, indent string)
	walk = func(s client.Snapshot, prefix, indent string) {
		seen[s.ID] = true
		rows = append(rows, treeRow{prefix: prefix, snap: s})
		var kids []client.Snapshot
		for _, k := range children[s.ID] {
			if !seen[k.ID] {
				kids = append(kids, k)
			}
		}
		for i, k := range kids {
			if seen[k.ID] {
				continue
			}
			if i == len(kids)-1 {
				walk(k, indent+"└─ ", indent+"   ")
			} else {
				walk(k, indent+"├─ ", indent+"│  ")
			}
		}
	}
	for _, r := range roots {
		walk(r, "", "")
	}
	// Snapshots on a parent loop are reachable from no root: list them
	// as roots of their own.
	for _, s := range snaps {
		if !seen[s.ID] {
			walk(s, "", "")
		}
	}
	return rows
}

// writeSnapshotTree prints snapshots as an aligned table whose first
// column draws the tree. A root whose parent is not listed names it.
func writeSnapshotTree(w io.Writer, list []client.Snapshot) error {
	present := make(map[string]bool, len(list))
	for _, s := range list {
		present[s.ID] = true
	}
	tw := newTable(w)
	row(tw, "SNAPSHOT", "LABEL", "KIND", "SANDBOX", "CREATED")
	for _, r := range snapshotTree(list) {
		id := r.prefix + r.snap.ID
		if r.prefix == "" && r.snap.Parent != "" && !present[r.snap.Parent] {
			id += " (from " + r.snap.Parent + ")"
		}
		row(tw, id, orDash(oneLine(r.snap.Label)), r.snap.Kind, snapshotSandbox(r.snap), ago(r.snap.CreatedAt))
	}
	return tw.Flush()
}

// oneLine keeps a table cell on one line and out of the column layout.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
