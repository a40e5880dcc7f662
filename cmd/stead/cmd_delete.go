package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newDeleteCmd is `stead delete`.
func newDeleteCmd(g *globals) *cobra.Command {
	var purge bool
	cmd := &cobra.Command{
		Use:     "delete SANDBOX",
		Aliases: []string{"rm"},
		Short:   "Delete a sandbox (recoverable unless --purge)",
		Long: `Delete a sandbox. Without --purge it is stopped and kept until its purge
time, and stead undelete brings it back. With --purge it and its files are
destroyed at once; this cannot be undone.

Exits 4 if the sandbox is deleted (already) and --purge is not given;
nothing is changed.`,
		Example: `  stead delete agent-1
  stead delete agent-1 --purge`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			sb, err := c.DeleteSandbox(cmd.Context(), a[0], purge)
			if err != nil {
				return fmt.Errorf("delete %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, sb)
			}
			if purge {
				_, err = fmt.Fprintf(g.stdout, "%s: purged\n", a[0])
				return err
			}
			when := ""
			if sb.PurgeAt != nil {
				when = " until " + sb.PurgeAt.Local().Format("2006-01-02 15:04")
			}
			_, err = fmt.Fprintf(g.stdout, "%s: deleted (stead undelete %s brings it back%s)\n", a[0], a[0], when)
			return err
		},
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "destroy the sandbox and its files now (cannot be undone)")
	return cmd
}
