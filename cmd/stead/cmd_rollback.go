package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newRollbackCmd is `stead rollback`.
func newRollbackCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollback SANDBOX SNAPSHOT",
		Short: "Return a sandbox's files to a snapshot, in place and undoably",
		Long: `Return SANDBOX's files to SNAPSHOT. The sandbox keeps its id, name and
settings; a running sandbox is restarted on the rolled-back files, which
restarts its supervised agent. First a safety snapshot is taken of the files
being replaced: roll back to it to undo the rollback.

Exits 4 if the sandbox is deleted (undelete it first); nothing is changed.`,
		Example: `  stead rollback agent-1 snap-3f9a
  stead rollback agent-1 snap-77c1        # undo: the safety snapshot printed by the first`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Rollback(cmd.Context(), a[0], a[1])
			if err != nil {
				return fmt.Errorf("rollback %s to %s: %w", a[0], a[1], err)
			}
			if g.json {
				return printJSON(g.stdout, res)
			}
			if err := g.printState(res.Sandbox); err != nil {
				return err
			}
			_, err = fmt.Fprintf(g.stdout, "safety snapshot %s (roll back to it to undo)\n", res.Safety.ID)
			return err
		},
	}
	return cmd
}
