package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newTemplateCmd is `stead template` and its subcommands.
func newTemplateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "template",
		Aliases: []string{"templates"},
		Short:   "Manage the templates sandboxes are created from",
		Example: `  stead template ls
  stead template import python docker.io/library/python:3.12-slim
  stead template rm python`,
	}
	group(cmd)

	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List templates",
		Example: "  stead template ls",
		Args:    args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListTemplates(cmd.Context())
			if err != nil {
				return fmt.Errorf("list templates: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			row(tw, "ID", "KIND", "SIZE", "CREATED", "SOURCE")
			for _, t := range list {
				created := ago(t.CreatedAt)
				if t.OnDemand {
					created = "on first use"
				}
				row(tw, t.ID, t.Kind, bytesStr(t.SizeBytes), created, orDash(t.Source))
			}
			return tw.Flush()
		},
	}

	imp := &cobra.Command{
		Use:   "import ID SOURCE",
		Short: "Import an OCI image as a template",
		Long: `Import an OCI image as a template. SOURCE is an image reference in a
registry, oci-layout:/path[:tag], or docker-archive:/path.tar.`,
		Example: `  stead template import python docker.io/library/python:3.12-slim
  stead template import mine oci-layout:/srv/images/mine:latest
  stead template import saved docker-archive:/tmp/image.tar`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stderr, "importing %s from %s ...\n", a[0], a[1])
			t, err := c.ImportTemplate(cmd.Context(), client.ImportTemplateRequest{ID: a[0], Source: a[1]})
			if err != nil {
				return fmt.Errorf("import template %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, t)
			}
			_, err = fmt.Fprintf(g.stdout, "%s: imported (%s, digest %s)\n", t.ID, bytesStr(t.SizeBytes), orDash(t.Digest))
			return err
		},
	}

	rm := &cobra.Command{
		Use:     "rm ID",
		Aliases: []string{"delete"},
		Short:   "Delete a template no sandbox uses",
		Example: "  stead template rm python",
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteTemplate(cmd.Context(), a[0]); err != nil {
				return fmt.Errorf("delete template %s: %w", a[0], err)
			}
			return nil
		},
	}
	cmd.AddCommand(ls, imp, rm)
	return cmd
}
