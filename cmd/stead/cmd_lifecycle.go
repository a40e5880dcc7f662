package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newLifecycleCmd builds a verb that takes one sandbox and calls action.
func newLifecycleCmd(g *globals, use, short, long, example string,
	action func(ctx context.Context, c *client.Client, id string) (client.Sandbox, error)) *cobra.Command {
	return &cobra.Command{
		Use:     use + " SANDBOX",
		Short:   short,
		Long:    long,
		Example: example,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			sb, err := action(cmd.Context(), c, a[0])
			if err != nil {
				return fmt.Errorf("%s %s: %w", use, a[0], err)
			}
			return g.printState(sb)
		},
	}
}
