package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newPushCmd is `stead push SANDBOX`.
func newPushCmd(g *globals) *cobra.Command {
	var req client.PushRequest
	var noWait bool
	cmd := &cobra.Command{
		Use:   "push SANDBOX",
		Short: "Push a sandbox to the off-box repository (incremental, deduplicated, encrypted)",
		Long: `Push copies a sandbox's files to the daemon's off-box repository (a directory
or an S3 bucket): it takes a read-only local snapshot (a running sandbox is
frozen only for that instant) or uses --snapshot, then uploads what the
repository lacks. Only files changed since the last push are read and only
new chunks are sent, compressed and encrypted with the tenant's key.

The push runs in the daemon; stead push follows it with a progress bar on
stderr and prints the remote snapshot it made. Ctrl-C stops following, not
the push. Restore it anywhere with stead restore, list pushes with
stead remote ls, schedule them with stead backup-policy
or stead schedule add.`,
		Example: `  stead push agent-1
  stead push agent-1 --snapshot snap-3f9a
  stead push agent-1 --include-volumes
  stead push agent-1 --no-wait
  stead push agent-1 --json | jq -r .result.remote_snapshot.id`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			op, err := c.Push(cmd.Context(), a[0], req)
			if err != nil {
				return fmt.Errorf("push %s: %w", a[0], err)
			}
			return g.finishOperation(cmd, c, "push "+a[0], op, noWait, g.printPushResult)
		},
	}
	cmd.Flags().StringVar(&req.Snapshot, "snapshot", "", "push this local snapshot (snap-...) instead of taking a new one")
	cmd.Flags().BoolVar(&req.IncludeVolumes, "include-volumes", false, "also push the sandbox's volumes, cloned at the same instant")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, noWaitUsage)
	return cmd
}

// printPushResult prints what a push made and moved.
func (g *globals) printPushResult(op client.Operation) error {
	var r client.PushResult
	if err := op.DecodeResult(&r); err != nil {
		return err
	}
	rs := r.RemoteSnapshot
	what := remoteSandbox(rs)
	if rs.Source != "" {
		what += ", from " + rs.Source
	}
	fmt.Fprintf(g.stdout, "remote snapshot %s saved (%s)\n", shortID(rs.ID), what)
	for _, v := range r.Volumes {
		fmt.Fprintf(g.stdout, "remote snapshot %s saved (%s)\n", shortID(v.ID), remoteSandbox(v))
	}
	_, err := fmt.Fprintf(g.stdout, "files: %d read, %d unchanged; %s read, %s uploaded in %s\n",
		r.FilesRead, r.FilesReused, bytesOrZero(r.BytesRead), bytesOrZero(r.BytesUploaded), seconds(r.Seconds))
	if err == nil && r.BlobsReplaced > 0 {
		_, err = fmt.Fprintf(g.stdout, "%d chunk(s) uploaded again: their only stored copy is in a damaged pack (stead repo repair)\n", r.BlobsReplaced)
	}
	return err
}

// remoteSandbox names what a remote snapshot is of: the sandbox's name,
// else its id, else the volume.
func remoteSandbox(rs client.RemoteSnapshot) string {
	switch {
	case rs.SandboxName != "":
		return rs.SandboxName
	case rs.Sandbox != "":
		return rs.Sandbox
	case rs.Volume != "":
		return "volume " + rs.Volume
	}
	return "-"
}

// bytesOrZero formats a byte count for people, "0 B" for none.
func bytesOrZero(n int64) string {
	if n <= 0 {
		return "0 B"
	}
	return bytesStr(n)
}
