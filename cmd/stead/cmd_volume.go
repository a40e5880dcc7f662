package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// volumeMountSyntax is the form of stead create --volume.
const volumeMountSyntax = "NAME[/SUB/PATH]:/mount/path[:ro]"

// newVolumeCmd is `stead volume` and its subcommands.
func newVolumeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "volume",
		Aliases: []string{"volumes", "vol"},
		Short:   "Create, list, inspect and delete persistent volumes",
		Long: `A persistent volume is a directory of data that outlives every sandbox: the
safe place for state that must survive a run of several days.

Attach volumes when creating a sandbox, with stead create --volume
` + volumeMountSyntax + ` (repeatable), or to a stopped sandbox with
stead volume attach (stead volume detach removes a mount). A sandbox's
mounts go with its pushes: stead restore and stead fork attach them again. One volume can be mounted by many
sandboxes at once, read-write or read-only (:ro), or each sandbox can mount
its own sub-directory of it (NAME/agents/a1:/data).

Deleting a sandbox never deletes its volumes. A volume cannot be deleted while
a sandbox uses it. stead volume rm keeps the data until its purge time
(stead volume undelete brings it back); --purge destroys it at once.`,
		Example: `  stead volume create shared --size 20GiB
  stead create agent-1 --volume shared:/data
  stead create agent-2 --volume shared/agents/a2:/work --volume shared:/ref:ro
  stead volume ls
  stead volume inspect shared
  stead volume rm shared
  stead volume undelete shared`,
	}
	group(cmd)
	cmd.AddCommand(
		newVolumeCreateCmd(g),
		newVolumeLsCmd(g),
		newVolumeInspectCmd(g),
		newVolumeRmCmd(g),
		newVolumePurgeCmd(g),
		newVolumeUndeleteCmd(g),
		newVolumeSnapshotCmd(g),
		newVolumeSnapshotsCmd(g),
		newVolumePushCmd(g),
		newVolumePushesCmd(g),
		newVolumeRestoreCmd(g),
		newVolumeAttachCmd(g),
		newVolumeDetachCmd(g),
	)
	return cmd
}

func newVolumeCreateCmd(g *globals) *cobra.Command {
	var (
		size  string
		quiet bool
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create an empty persistent volume",
		Long: `Create an empty persistent volume. --size is its quota (default 10GiB):
writes past it fail with "No space left on device" inside the sandbox and
harm nothing else. Sizes take binary (512MiB, 10GiB) or decimal (10GB)
units; a bare number is bytes.`,
		Example: `  stead volume create shared
  stead volume create cache --size 512MiB
  vol=$(stead volume create shared -q)`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			req := client.CreateVolumeRequest{Name: a[0]}
			if size != "" {
				n, err := parseSize(size)
				if err != nil {
					return usageError{fmt.Errorf("--size %q: %w", size, err)}
				}
				req.SizeBytes = n
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			v, err := c.CreateVolume(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("create volume %s: %w", a[0], err)
			}
			switch {
			case g.json:
				return printJSON(g.stdout, v)
			case quiet:
				_, err = fmt.Fprintln(g.stdout, v.ID)
				return err
			}
			_, err = fmt.Fprintf(g.stdout, "%s: %s, size %s\n", volumeLabel(v), v.State, volumeSize(v.SizeBytes))
			return err
		},
	}
	cmd.Flags().StringVar(&size, "size", "", "quota, e.g. 512MiB or 10GiB (default 10GiB)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the volume id")
	return cmd
}

func newVolumeLsCmd(g *globals) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List volumes with their size, usage and the sandboxes using them",
		Example: `  stead volume ls
  stead volume ls --all    # include deleted volumes (undelete-able until PURGE)`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListVolumes(cmd.Context(), all)
			if err != nil {
				return fmt.Errorf("list volumes: %w", err)
			}
			if g.json {
				if list == nil {
					list = []client.Volume{}
				}
				return printJSON(g.stdout, list)
			}
			if len(list) == 0 {
				fmt.Fprintln(g.stderr, "no volumes; create one with: stead volume create NAME")
				return nil
			}
			tw := newTable(g.stdout)
			header := []string{"NAME", "ID", "SIZE", "USED", "STATE", "ATTACHED"}
			if all {
				header = append(header, "PURGE")
			}
			row(tw, header...)
			for _, v := range list {
				cells := []string{v.Name, v.ID, volumeSize(v.SizeBytes), humanize.IBytes(uint64(max(v.UsedBytes, 0))),
					v.State, attachedStr(v.AttachedTo, 3)}
				if all {
					cells = append(cells, agoPtr(v.PurgeAt))
				}
				row(tw, cells...)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "include soft-deleted volumes")
	return cmd
}

func newVolumeInspectCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "inspect VOLUME",
		Aliases: []string{"info", "show", "get"},
		Short:   "Describe a volume (by name or id)",
		Example: `  stead volume inspect shared
  stead volume inspect shared --json`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			v, err := c.GetVolume(cmd.Context(), a[0])
			if err != nil {
				return fmt.Errorf("get volume %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, v)
			}
			tw := newTable(g.stdout)
			row(tw, "ID:", v.ID)
			row(tw, "Name:", v.Name)
			row(tw, "State:", v.State)
			row(tw, "Size:", volumeSize(v.SizeBytes))
			used := humanize.IBytes(uint64(max(v.UsedBytes, 0)))
			if v.SizeBytes > 0 {
				used += fmt.Sprintf(" (%.0f%%)", 100*float64(v.UsedBytes)/float64(v.SizeBytes))
			}
			row(tw, "Used:", used)
			row(tw, "Attached to:", attachedStr(v.AttachedTo, 0))
			row(tw, "Created:", ago(v.CreatedAt))
			if v.DeletedAt != nil {
				row(tw, "Deleted:", agoPtr(v.DeletedAt))
				row(tw, "Purged:", agoPtr(v.PurgeAt))
			}
			return tw.Flush()
		},
	}
}

func newVolumeRmCmd(g *globals) *cobra.Command {
	var purge bool
	cmd := &cobra.Command{
		Use:     "rm VOLUME...",
		Aliases: []string{"delete"},
		Short:   "Delete volumes (recoverable with undelete unless --purge)",
		Long: `Delete volumes. Without --purge a volume's data is kept until its purge
time and stead volume undelete brings it back. With --purge its data is
destroyed at once; this cannot be undone.

A volume that a sandbox uses cannot be deleted (exit code 4): delete those
sandboxes first (stead volume inspect lists them).`,
		Example: `  stead volume rm shared
  stead volume rm scratch --purge`,
		Args: args(1, -1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return deleteVolumes(cmd, g, a, purge)
		},
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "destroy the volume's data now (cannot be undone)")
	return cmd
}

func newVolumePurgeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "purge VOLUME...",
		Short: "Destroy volumes and their data now (stead volume rm --purge)",
		Long: `Destroy volumes and their data at once, deleted or not; this cannot be
undone. Same as stead volume rm --purge.`,
		Example: "  stead volume purge scratch",
		Args:    args(1, -1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return deleteVolumes(cmd, g, a, true)
		},
	}
}

// deleteVolumes deletes (or purges) each volume in turn, stopping at the
// first error.
func deleteVolumes(cmd *cobra.Command, g *globals, ids []string, purge bool) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	for _, id := range ids {
		v, err := c.DeleteVolume(cmd.Context(), id, purge)
		if err != nil {
			return fmt.Errorf("delete volume %s: %w", id, err)
		}
		if g.json {
			if err := printJSON(g.stdout, v); err != nil {
				return err
			}
			continue
		}
		if purge {
			_, err = fmt.Fprintf(g.stdout, "%s: purged\n", id)
		} else {
			when := ""
			if v.PurgeAt != nil {
				when = " until " + v.PurgeAt.Local().Format("2006-01-02 15:04")
			}
			_, err = fmt.Fprintf(g.stdout, "%s: deleted (stead volume undelete %s brings it back%s)\n", id, id, when)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func newVolumeUndeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "undelete VOLUME",
		Short: "Bring back a deleted volume with its data (before its purge time)",
		Example: `  stead volume ls --all
  stead volume undelete shared`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			v, err := c.UndeleteVolume(cmd.Context(), a[0])
			if err != nil {
				return fmt.Errorf("undelete volume %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, v)
			}
			_, err = fmt.Fprintf(g.stdout, "%s: %s\n", volumeLabel(v), v.State)
			return err
		},
	}
}

// parseSize parses a human size: binary (512MiB, 10GiB) or decimal (10GB)
// units, or a bare number of bytes. It must be positive.
func parseSize(s string) (int64, error) {
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("want a size such as 512MiB or 10GiB")
	}
	if n == 0 {
		return 0, fmt.Errorf("size must be more than 0")
	}
	if n > math.MaxInt64 {
		return 0, fmt.Errorf("size too large")
	}
	return int64(n), nil
}

// volumeLabel names a volume as "NAME (ID)", or its id alone.
func volumeLabel(v client.Volume) string {
	if v.Name == "" || v.Name == v.ID {
		return v.ID
	}
	return v.Name + " (" + v.ID + ")"
}

// volumeSize formats a volume's quota ("unlimited" for 0).
func volumeSize(n int64) string {
	if n <= 0 {
		return "unlimited"
	}
	return humanize.IBytes(uint64(n))
}

// attachedStr lists the sandboxes using a volume, at most limit of them
// (0: all) then "+N"; "-" for none.
func attachedStr(ids []string, limit int) string {
	if len(ids) == 0 {
		return "-"
	}
	if limit <= 0 || len(ids) <= limit {
		return strings.Join(ids, ",")
	}
	return fmt.Sprintf("%s,+%d", strings.Join(ids[:limit], ","), len(ids)-limit)
}

// volumeMountStr describes a mount in stead info: "shared/agents/a1 on
// /data (read-only)".
func volumeMountStr(m client.VolumeMount) string {
	s := m.Volume
	if m.SubPath != "" {
		s += "/" + m.SubPath
	}
	s += " on " + m.Path
	if m.ReadOnly {
		s += " (read-only)"
	}
	return s
}
