package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newStartCmd is `stead start`.
func newStartCmd(g *globals) *cobra.Command {
	return newLifecycleCmd(g, "start", "Start a stopped sandbox",
		"Start a stopped sandbox. Its files are as they were at stop; its agent\n"+
			"service is started again by the supervisor. An archived sandbox is\n"+
			"hydrated back from the repository first, with a progress bar; a paused one\n"+
			"is resumed.\n\n"+
			"Exits 4 if the sandbox is running (already started) or deleted\n"+
			"(undelete it first); nothing is changed.",
		"  stead start agent-1",
		func(ctx context.Context, c *client.Client, id string) (client.Sandbox, error) {
			if sb, err := c.GetSandbox(ctx, id); err == nil && sb.State == "archived" {
				op, err := c.Hydrate(ctx, id, false)
				if err != nil {
					return client.Sandbox{}, err
				}
				bar := newProgressBar(g.stderr, "hydrate "+id)
				final, err := c.WaitOperation(ctx, op, bar.Update)
				if err != nil {
					bar.Abort()
					return client.Sandbox{}, err
				}
				bar.Finish(final)
				if final.State == client.OperationFailed {
					return client.Sandbox{}, fmt.Errorf("hydrate (operation %s): %s", final.ID, final.Error)
				}
			}
			return c.StartSandbox(ctx, id)
		})
}
