package main

import "github.com/spf13/cobra"

// newTaskCmd is `stead task`. (Filled in by the structured-state work.)
func newTaskCmd(g *globals) *cobra.Command {
	return &cobra.Command{Use: "task", Hidden: true}
}
