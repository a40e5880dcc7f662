package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newUndeleteCmd is `stead undelete`.
func newUndeleteCmd(g *globals) *cobra.Command {
	return newLifecycleCmd(g, "undelete", "Bring back a soft-deleted sandbox",
		"Bring back a sandbox deleted without --purge, as long as its purge time\n"+
			"has not passed (see stead list --all). It comes back stopped.\n\n"+
			"Exits 4 if the sandbox is running, paused or stopped; nothing is changed.",
		"  stead list --all\n  stead undelete agent-1 && stead start agent-1",
		func(ctx context.Context, c *client.Client, id string) (client.Sandbox, error) {
			return c.UndeleteSandbox(ctx, id)
		})
}
