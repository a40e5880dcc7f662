package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newArchiveCmd is `stead archive SANDBOX`.
func newArchiveCmd(g *globals) *cobra.Command {
	var noWait bool
	cmd := &cobra.Command{
		Use:   "archive SANDBOX",
		Short: "Move a stopped sandbox off this machine (start brings it back)",
		Long: `Archive pushes a stopped sandbox to the off-box repository, verifies the
push, then frees the sandbox's local disk: while archived it costs object
storage only. stead start hydrates it back from the repository, with the
same id, name and files.

Sandboxes are also archived on their own once stopped for their policy's
archive-after time (stead backup-policy).`,
		Example: `  stead stop agent-1 && stead archive agent-1
  stead archive agent-1 --no-wait
  stead start agent-1   # hydrates it back`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			op, err := c.Archive(cmd.Context(), a[0], false)
			if err != nil {
				return fmt.Errorf("archive %s: %w", a[0], err)
			}
			return g.finishOperation(cmd, c, "archive "+a[0], op, noWait, g.printArchiveResult)
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, noWaitUsage)
	return cmd
}

// printArchiveResult says the sandbox is archived and how to get it back.
func (g *globals) printArchiveResult(op client.Operation) error {
	var r client.ArchiveResult
	if err := op.DecodeResult(&r); err != nil {
		return err
	}
	sb := orDash(op.Target)
	line := sb + ": archived"
	if r.RemoteSnapshot.ID != "" {
		line += " as remote snapshot " + shortID(r.RemoteSnapshot.ID)
	}
	freed := "its local disk is freed"
	if r.FreedBytes > 0 {
		freed = bytesStr(r.FreedBytes) + " of local disk freed"
	}
	_, err := fmt.Fprintf(g.stdout, "%s; %s (stead start %s hydrates it back)\n", line, freed, sb)
	return err
}
