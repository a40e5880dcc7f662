package main

import "github.com/spf13/cobra"

// newSessionCmd is `stead session`. (Filled in by the session-log work.)
func newSessionCmd(g *globals) *cobra.Command {
	return &cobra.Command{Use: "session", Hidden: true}
}
