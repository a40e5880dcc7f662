package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newPullCmd is `stead pull REMOTE_SNAPSHOT`.
func newPullCmd(g *globals) *cobra.Command {
	var noWait bool
	cmd := &cobra.Command{
		Use:   "pull REMOTE_SNAPSHOT",
		Short: "Copy a pushed snapshot into a new local snapshot (to fork or roll back to)",
		Long: `Pull downloads a snapshot from the off-box repository into a new read-only
local snapshot, verifying every chunk. Fork it into new sandboxes with
stead fork, or return a sandbox to it with stead rollback. To get a
sandbox back in one step, use stead restore instead.

REMOTE_SNAPSHOT is an id from stead remote ls, or any unique prefix of 4
or more of its hex digits.`,
		Example: `  stead pull 3f9a1c2b
  stead pull 3f9a --no-wait
  snap=$(stead pull 3f9a --json | jq -r .result.snapshot.id) && stead fork "$snap" --count 3`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			op, err := c.PullRemote(cmd.Context(), client.PullRequest{Snapshot: a[0]})
			if err != nil {
				return fmt.Errorf("pull %s: %w", a[0], err)
			}
			return g.finishOperation(cmd, c, "pull "+a[0], op, noWait, g.printPullResult)
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, noWaitUsage)
	return cmd
}

// printPullResult prints the local snapshot a pull made.
func (g *globals) printPullResult(op client.Operation) error {
	var r client.RestoreResult
	if err := op.DecodeResult(&r); err != nil {
		return err
	}
	snap := "-"
	if r.Snapshot != nil {
		snap = r.Snapshot.ID
	}
	_, err := fmt.Fprintf(g.stdout, "local snapshot %s made from %s\nfiles: %d, %s written, %s downloaded in %s\n"+
		"fork it with: stead fork %s; roll a sandbox back to it with: stead rollback SANDBOX %s\n",
		snap, shortID(op.Target), r.Files, bytesOrZero(r.BytesWritten), bytesOrZero(r.BytesDownloaded), seconds(r.Seconds), snap, snap)
	return err
}
