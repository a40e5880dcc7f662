package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newVolumePushCmd is `stead volume push VOLUME`.
func newVolumePushCmd(g *globals) *cobra.Command {
	var noWait bool
	cmd := &cobra.Command{
		Use:   "push VOLUME",
		Short: "Push a volume to the off-box repository",
		Long: `Push copies a volume to the daemon's off-box repository: an O(1) read-only
clone taken at one instant (crash-consistent), pushed incrementally and
encrypted under the volume's own key. Purging the volume destroys that key,
so every pushed copy becomes unreadable. To push a sandbox together with its
volumes at the same instant use stead push SANDBOX --include-volumes.`,
		Example: `  stead volume push shared
  stead volume pushes shared
  stead volume restore --latest shared --name shared-copy`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			op, err := c.PushVolume(cmd.Context(), a[0], client.PushVolumeRequest{})
			if err != nil {
				return fmt.Errorf("push volume %s: %w", a[0], err)
			}
			return g.finishOperation(cmd, c, "push volume "+a[0], op, noWait, g.printPushResult)
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, noWaitUsage)
	return cmd
}

// newVolumePushesCmd is `stead volume pushes [VOLUME]`.
func newVolumePushesCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "pushes [VOLUME]",
		Short: "List pushed volume snapshots (all, or one volume's)",
		Long: `List the tenant's pushed volume snapshots, oldest first. VOLUME is a volume's
id or name: by name it lists every push made under that name, so a daemon
that knows only the repository and its key finds a volume's pushes by its
name (and stead volume restore --latest NAME restores the newest).`,
		Example: `  stead volume pushes
  stead volume pushes shared --json`,
		Args: args(0, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			vol := ""
			if len(a) == 1 {
				vol = a[0]
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListVolumePushes(cmd.Context(), vol)
			if err != nil {
				return fmt.Errorf("list volume pushes: %w", err)
			}
			if g.json {
				if list == nil {
					list = []client.RemoteSnapshot{}
				}
				return printJSON(g.stdout, list)
			}
			if len(list) == 0 {
				if vol != "" {
					fmt.Fprintf(g.stderr, "no pushed snapshots of volume %s; push it with: stead volume push %s\n", vol, vol)
					return nil
				}
				fmt.Fprintln(g.stderr, "no pushed volume snapshots; push one with: stead volume push VOLUME")
				return nil
			}
			return writeRemoteSnapshots(g.stdout, list)
		},
	}
}

// newVolumeRestoreCmd is `stead volume restore`.
func newVolumeRestoreCmd(g *globals) *cobra.Command {
	var req client.RestoreVolumeRequest
	var noWait bool
	cmd := &cobra.Command{
		Use:   "restore [SNAPSHOT] --name NEW",
		Short: "Restore a volume snapshot (local snap-..., or pushed) into a new volume",
		Example: `  stead volume restore snap-3f9a --name shared-before
  stead volume restore 3f9a2c1d --name shared-copy
  stead volume restore --latest shared --name shared-copy`,
		Args: args(0, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if len(a) == 1 {
				req.Snapshot = a[0]
			}
			if (req.Snapshot == "") == (req.Volume == "") {
				return usageError{fmt.Errorf("give a remote snapshot id or --latest VOLUME")}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			op, err := c.RestoreVolume(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("restore volume: %w", err)
			}
			return g.finishOperation(cmd, c, "restore volume "+req.Name, op, noWait, func(op client.Operation) error {
				var r client.VolumeRestoreResult
				if err := op.DecodeResult(&r); err != nil {
					return err
				}
				_, err := fmt.Fprintf(g.stdout, "restored %s into volume %s (%s)\nfiles: %d, %s written in %s\n",
					shortID(op.Target), r.Volume.Name, r.Volume.ID, r.Files, bytesOrZero(r.BytesWritten), seconds(r.Seconds))
				return err
			})
		},
	}
	cmd.Flags().StringVar(&req.Volume, "latest", "", "restore the latest push of this volume")
	cmd.Flags().StringVar(&req.Name, "name", "", "name of the new volume (required)")
	cmd.MarkFlagRequired("name")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, noWaitUsage)
	return cmd
}

// newVolumeSnapshotCmd is `stead volume snapshot VOLUME`.
func newVolumeSnapshotCmd(g *globals) *cobra.Command {
	var req client.CreateSnapshotRequest
	cmd := &cobra.Command{
		Use:   "snapshot VOLUME",
		Short: "Take a read-only local snapshot of a volume",
		Long: `A volume snapshot is an O(1) read-only clone taken at one instant
(crash-consistent while sandboxes write to it; stead snapshot create SANDBOX
--include-volumes freezes the sandbox's writers for that instant). Bring it
back as a new volume with stead volume restore SNAPSHOT --name NEW.`,
		Example: `  stead volume snapshot shared --label "before migration"
  stead volume snapshots shared
  stead volume restore snap-3f9a --name shared-before`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			sn, err := c.CreateVolumeSnapshot(cmd.Context(), a[0], req)
			if err != nil {
				return fmt.Errorf("snapshot volume %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, sn)
			}
			_, err = fmt.Fprintf(g.stdout, "%s: snapshot of volume %s\n", sn.ID, a[0])
			return err
		},
	}
	cmd.Flags().StringVarP(&req.Label, "label", "l", "", "short label")
	return cmd
}

// newVolumeSnapshotsCmd is `stead volume snapshots VOLUME`.
func newVolumeSnapshotsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "snapshots VOLUME",
		Short:   "List a volume's local snapshots",
		Example: `  stead volume snapshots shared`,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListVolumeSnapshots(cmd.Context(), a[0])
			if err != nil {
				return fmt.Errorf("list snapshots of volume %s: %w", a[0], err)
			}
			if g.json {
				if list == nil {
					list = []client.Snapshot{}
				}
				return printJSON(g.stdout, list)
			}
			return writeSnapshotTree(g.stdout, list)
		},
	}
}
