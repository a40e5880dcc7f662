package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newKeyCmd is `stead key` and its subcommands.
func newKeyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "key",
		Aliases: []string{"keys"},
		Short:   "Manage API keys (admin)",
		Example: "  stead key create ci-runner",
	}
	group(cmd)
	var admin bool
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create an API key; its secret is printed once",
		Long: `Create an API key in your tenant. This needs an admin key. The secret is
printed once and cannot be shown again: store it now.`,
		Example: `  stead key create ci-runner
  export STEAD_API_KEY=$(stead key create ci-runner)   # the secret alone goes to stdout
  stead key create ops --admin`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			k, err := c.CreateKey(cmd.Context(), client.CreateAPIKeyRequest{Name: a[0], Admin: admin})
			if err != nil {
				return fmt.Errorf("create key %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, k)
			}
			fmt.Fprintf(g.stderr, "created key %s (%s) in tenant %s; the secret below is shown only once:\n", k.ID, k.Name, k.Tenant)
			_, err = fmt.Fprintln(g.stdout, k.Secret)
			return err
		},
	}
	create.Flags().BoolVar(&admin, "admin", false, "the key may create other keys")
	cmd.AddCommand(create)
	return cmd
}
