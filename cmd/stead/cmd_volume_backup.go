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
		Long: `List the tenant's pushed volume snapshots, oldest first. A daemon that knows
only the repository and its key lists them too (restore them there).`,
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
		Use:   "restore [REMOTE_SNAPSHOT] --name NEW",
		Short: "Restore a pushed volume snapshot into a new volume",
		Example: `  stead volume restore 3f9a2c1d --name shared-copy
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
