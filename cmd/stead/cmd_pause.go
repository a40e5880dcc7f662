package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newPauseCmd is `stead pause`.
func newPauseCmd(g *globals) *cobra.Command {
	return newLifecycleCmd(g, "pause", "Freeze every process of a sandbox",
		"Freeze every process of a running sandbox (cgroup freezer). Processes and\n"+
			"memory survive; memory stays resident. Undo with stead resume.\n\n"+
			"Exits 4 if the sandbox is paused (already), stopped or deleted; nothing\n"+
			"is changed.",
		"  stead pause agent-1",
		func(ctx context.Context, c *client.Client, id string) (client.Sandbox, error) {
			return c.PauseSandbox(ctx, id)
		})
}
