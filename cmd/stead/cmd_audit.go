package main

import "github.com/spf13/cobra"

// newAuditCmd is `stead audit`. (Filled in by the audit work.)
func newAuditCmd(g *globals) *cobra.Command {
	return &cobra.Command{Use: "audit", Hidden: true}
}
