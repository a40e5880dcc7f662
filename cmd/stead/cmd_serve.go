package main

import "github.com/spf13/cobra"

// newServeCmd is `stead serve`. (Placeholder: the lead replaces it.)
func newServeCmd() *cobra.Command {
	return &cobra.Command{Use: "serve", Short: "Run the stead daemon"}
}
