package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newOrientCmd is `stead orient`.
func newOrientCmd(g *globals) *cobra.Command {
	var files []string
	var events int
	cmd := &cobra.Command{
		Use:   "orient SANDBOX",
		Short: "Show what a resuming agent must read first",
		Long: `Show, ready for a model's prompt, where an agent stands: why and when its
sandbox last stopped, its latest checkpoints, the tails of its workspace notes
(/workspace/decisions.md and /workspace/plan.md unless --file names others),
the latest session run with every in-doubt tool intent, and the last events.
--json prints the structured form.`,
		Example: `  stead orient agent-1
  stead orient agent-1 --file /workspace/TODO.md --events 50 --json`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			or, err := c.Orient(cmd.Context(), a[0], files, events)
			if err != nil {
				return fmt.Errorf("orient %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, or)
			}
			_, err = fmt.Fprint(g.stdout, or.Text)
			return err
		},
	}
	cmd.Flags().StringArrayVar(&files, "file", nil, "sandbox path whose tail to include (repeatable)")
	cmd.Flags().IntVar(&events, "events", 0, "how many recent session events (default 20)")
	return cmd
}
