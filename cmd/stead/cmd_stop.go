package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newStopCmd is `stead stop`.
func newStopCmd(g *globals) *cobra.Command {
	return newLifecycleCmd(g, "stop", "Stop a sandbox (files persist, processes do not)",
		"Stop a sandbox: run the agent service's stop hook, wait its grace period,\n"+
			"then kill what is left. Every file of the sandbox persists; processes,\n"+
			"memory and /tmp do not. A stopped sandbox costs disk only.\n\n"+
			"Exits 4 if the sandbox is stopped (already) or deleted; nothing is changed.",
		"  stead stop agent-1",
		func(ctx context.Context, c *client.Client, id string) (client.Sandbox, error) {
			return c.StopSandbox(ctx, id)
		})
}
