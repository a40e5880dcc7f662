package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// newAttachCmd is `stead attach`.
func newAttachCmd(g *globals) *cobra.Command {
	var quiet bool
	cmd := &cobra.Command{
		Use:   "attach SANDBOX",
		Short: "Follow the agent service's output live (Ctrl-C detaches)",
		Long: `Follow the sandbox's agent service live: its log so far, then new output as
it is written. Ctrl-C detaches; the agent keeps running.`,
		Example: `  stead attach agent-1`,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			rc, err := c.Logs(ctx, a[0], true)
			if err != nil {
				return fmt.Errorf("attach to %s: %w", a[0], err)
			}
			defer func() { _ = rc.Close() }()
			if !quiet {
				fmt.Fprintf(g.stderr, "attached to %s's agent; Ctrl-C detaches (the agent keeps running)\n", a[0])
			}
			_, err = io.Copy(g.stdout, rc)
			if ctx.Err() != nil {
				if !quiet {
					fmt.Fprintf(g.stderr, "\ndetached from %s\n", a[0])
				}
				return nil
			}
			if err != nil {
				return fmt.Errorf("attach to %s: %w", a[0], err)
			}
			return fmt.Errorf("attach to %s: the daemon ended the stream (sandbox deleted or daemon restarting)", a[0])
		},
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the agent's output")
	return cmd
}
