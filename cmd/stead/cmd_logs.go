package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// newLogsCmd is `stead logs`.
func newLogsCmd(g *globals) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs SANDBOX",
		Short: "Print the agent service's log",
		Long: `Print the log of the sandbox's supervised agent service. The log is kept
across crashes and stop/start, so it can be read after the agent died.`,
		Example: `  stead logs agent-1
  stead logs -f agent-1    # keep printing new output; Ctrl-C stops`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			rc, err := c.Logs(ctx, a[0], follow)
			if err != nil {
				return fmt.Errorf("logs of %s: %w", a[0], err)
			}
			defer func() { _ = rc.Close() }()
			if _, err := io.Copy(g.stdout, rc); err != nil && ctx.Err() == nil {
				return fmt.Errorf("logs of %s: %w", a[0], err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output")
	return cmd
}
