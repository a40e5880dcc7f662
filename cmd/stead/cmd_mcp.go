package main

import "github.com/spf13/cobra"

// newMCPCmd is `stead mcp`. (Filled in by the MCP work.)
func newMCPCmd(g *globals) *cobra.Command {
	return &cobra.Command{Use: "mcp", Hidden: true}
}
