package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newStartCmd is `stead start`.
func newStartCmd(g *globals) *cobra.Command {
	return newLifecycleCmd(g, "start", "Start a stopped sandbox",
		"Start a stopped sandbox. Its files are as they were at stop; its agent\n"+
			"service is started again by the supervisor. An archived sandbox is\n"+
			"hydrated back from the repository first.",
		"  stead start agent-1",
		func(ctx context.Context, c *client.Client, id string) (client.Sandbox, error) {
			return c.StartSandbox(ctx, id)
		})
}
