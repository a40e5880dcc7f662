package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newWarmCmd is `stead warm` and its subcommands (admin keys only).
func newWarmCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "warm",
		Short: "List and size the warm pools of started sandboxes (admin)",
		Long: `A warm pool keeps started sandboxes of one template of one tenant ready, so
that a plain create only gives one its name, environment, secrets and network
policy (see the README's warm pool section for which creates use it). Sizes
start from stead serve --warm [TENANT/]TEMPLATE=N; a size set here overrides
the flag for that pool, is kept in the store and applies without a restart.
In a cluster every node keeps that many. These commands need an admin key.`,
		Example: `  stead warm ls
  stead warm set host 4
  stead warm set acme/python 2
  stead warm unset acme/python`,
	}
	group(cmd)
	cmd.AddCommand(newWarmLsCmd(g), newWarmSetCmd(g), newWarmUnsetCmd(g))
	return cmd
}

// warmTarget parses [TENANT/]TEMPLATE (the tenant defaults to the key's,
// then "default").
func warmTarget(g *globals, s string) (tenant, template string, err error) {
	tenant, template, ok := strings.Cut(s, "/")
	if !ok {
		tenant, template = g.tenant, s
		if tenant == "" {
			tenant = "default"
		}
	}
	if tenant == "" || template == "" {
		return "", "", usageError{fmt.Errorf("warm pool %q: want [TENANT/]TEMPLATE", s)}
	}
	return tenant, template, nil
}

func newWarmLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the warm pools with their sizes and what this node holds ready",
		Args:    args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListWarmPools(cmd.Context())
			if err != nil {
				return fmt.Errorf("list warm pools: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			fmt.Fprintln(tw, "TENANT\tTEMPLATE\tSIZE\tREADY\tSOURCE")
			for _, p := range list {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", p.Tenant, p.Template, p.Size, p.Ready, p.Source)
			}
			return tw.Flush()
		},
	}
}

func newWarmSetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "set [TENANT/]TEMPLATE SIZE",
		Short:   "Set a warm pool's size (0 keeps none); it overrides stead serve --warm",
		Example: "  stead warm set host 4\n  stead warm set acme/python 0",
		Args:    args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			tenant, template, err := warmTarget(g, a[0])
			if err != nil {
				return err
			}
			size, err := strconv.Atoi(a[1])
			if err != nil || size < 0 {
				return usageError{fmt.Errorf("size %q: want a number from 0 to 1000", a[1])}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			p, err := c.SetWarmPool(cmd.Context(), tenant, template, size)
			if err != nil {
				return fmt.Errorf("set warm pool %s/%s: %w", tenant, template, err)
			}
			if g.json {
				return printJSON(g.stdout, p)
			}
			fmt.Fprintf(g.stdout, "warm pool %s/%s: %d started sandboxes kept ready on each node\n", p.Tenant, p.Template, p.Size)
			return nil
		},
	}
}

func newWarmUnsetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "unset [TENANT/]TEMPLATE",
		Short:   "Remove a size set with stead warm set: the stead serve --warm default applies again",
		Example: "  stead warm unset acme/python",
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			tenant, template, err := warmTarget(g, a[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteWarmPool(cmd.Context(), tenant, template); err != nil {
				return fmt.Errorf("unset warm pool %s/%s: %w", tenant, template, err)
			}
			if g.json {
				return printJSON(g.stdout, client.WarmPool{Tenant: tenant, Template: template, Source: "default"})
			}
			fmt.Fprintf(g.stdout, "warm pool %s/%s: back to the daemon's default\n", tenant, template)
			return nil
		},
	}
}
