package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newUpdateCmd is `stead update`.
func newUpdateCmd(g *globals) *cobra.Command {
	var idle, onIdle string
	cmd := &cobra.Command{
		Use:   "update SANDBOX",
		Short: "Change a sandbox's idle timeout and what happens at it",
		Long: `Change an existing sandbox's idle policy: how long it may sit idle
(--idle-timeout, a duration; 0 turns the policy off) and what happens then
(--on-idle stop or pause; neither destroys anything). The new timeout runs
from now. Flags left out keep their value.

Exits 2 on a bad value (nothing is changed), 3 if the sandbox is absent.`,
		Example: `  stead update agent-1 --idle-timeout 2h
  stead update agent-1 --idle-timeout 10m --on-idle pause
  stead update agent-1 --idle-timeout 0`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			var req client.UpdateSandboxRequest
			if cmd.Flags().Changed("idle-timeout") {
				req.IdleTimeout = &idle
			}
			if cmd.Flags().Changed("on-idle") {
				if onIdle != "stop" && onIdle != "pause" {
					return usageError{fmt.Errorf("--on-idle %q: want stop or pause", onIdle)}
				}
				req.OnIdle = &onIdle
			}
			if req.IdleTimeout == nil && req.OnIdle == nil {
				return usageError{fmt.Errorf("update needs --idle-timeout or --on-idle")}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			sb, err := c.UpdateSandbox(cmd.Context(), a[0], req)
			if err != nil {
				return fmt.Errorf("update %s: %w", a[0], err)
			}
			return g.printSandbox(sb)
		},
	}
	f := cmd.Flags()
	f.StringVar(&idle, "idle-timeout", "", "how long the sandbox may sit idle, e.g. 15m (0: never stopped for idleness)")
	f.StringVar(&onIdle, "on-idle", "", "what happens at the idle timeout: stop (files kept) or pause (memory kept)")
	return cmd
}
