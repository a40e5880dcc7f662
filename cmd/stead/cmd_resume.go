package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newResumeCmd is `stead resume`.
func newResumeCmd(g *globals) *cobra.Command {
	return newLifecycleCmd(g, "resume", "Thaw a paused sandbox",
		"Thaw a paused sandbox: its processes continue where they were frozen.\n\n"+
			"Exits 4 if the sandbox is running (nothing to resume), stopped (start it\n"+
			"instead) or deleted; nothing is changed.",
		"  stead resume agent-1",
		func(ctx context.Context, c *client.Client, id string) (client.Sandbox, error) {
			return c.ResumeSandbox(ctx, id)
		})
}
