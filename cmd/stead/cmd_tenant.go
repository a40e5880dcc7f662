package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newTenantCmd is `stead tenant` and its subcommands (admin keys only).
func newTenantCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "tenant",
		Aliases: []string{"tenants"},
		Short:   "Create, list, suspend and delete tenants (admin)",
		Long: `A tenant owns sandboxes, volumes, snapshots, templates and API keys, and sees
nothing of another tenant's: another tenant's ids answer exactly as absent
ones. These commands need an admin key (the daemon's, in
DATA_DIR/admin.key, /var/lib/stead/admin.key by default).

Give a new tenant its first key with stead key create --tenant ID.
Suspending a tenant refuses its keys (403) and stops its running sandboxes;
unsuspend lets the keys in again. Deleting a tenant purges everything it
owns and destroys its repository data key, so nothing it pushed can ever be
decrypted again.`,
		Example: `  stead tenant create acme --name "Acme Corp"
  stead key create acme-ops --tenant acme --role tenant-admin
  stead tenant ls
  stead tenant suspend acme
  stead tenant rm acme --yes`,
	}
	group(cmd)
	cmd.AddCommand(newTenantCreateCmd(g), newTenantLsCmd(g), newTenantShowCmd(g),
		newTenantStateCmd(g, "suspend"), newTenantStateCmd(g, "unsuspend"), newTenantRmCmd(g))
	cmd.AddCommand(newTenantQuotaCmd(g))
	cmd.AddCommand(newTenantRetentionCmd(g)) // cmd_retention.go
	return cmd
}

// printTenant prints one tenant.
func printTenant(g *globals, t client.Tenant) error {
	if g.json {
		return printJSON(g.stdout, t)
	}
	tw := newTable(g.stdout)
	fmt.Fprintf(tw, "id:\t%s\nname:\t%s\nstate:\t%s\ncreated:\t%s\n", t.ID, t.Name, t.State, t.CreatedAt.Local().Format(time.DateTime))
	if t.SuspendedAt != nil {
		fmt.Fprintf(tw, "suspended:\t%s\n", t.SuspendedAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

// newTenantCreateCmd is `stead tenant create`.
func newTenantCreateCmd(g *globals) *cobra.Command {
	var req client.CreateTenantRequest
	cmd := &cobra.Command{
		Use:   "create ID",
		Short: "Create a tenant",
		Long: `Create a tenant. Its id is 1 to 48 lowercase letters, digits and inner
dashes. Exits 4 if the id is taken.`,
		Example: `  stead tenant create acme --name "Acme Corp"`,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			req.ID = a[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			t, err := c.CreateTenant(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("create tenant %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, t)
			}
			_, err = fmt.Fprintln(g.stdout, t.ID)
			return err
		},
	}
	cmd.Flags().StringVar(&req.Name, "name", "", "display name (default: the id)")
	return cmd
}

// newTenantLsCmd is `stead tenant ls`.
func newTenantLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List tenants",
		Example: `  stead tenant ls`,
		Args:    args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListTenants(cmd.Context())
			if err != nil {
				return fmt.Errorf("list tenants: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			fmt.Fprintln(tw, "ID\tNAME\tSTATE\tCREATED")
			for _, t := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.ID, t.Name, t.State, t.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
}

// newTenantShowCmd is `stead tenant show`.
func newTenantShowCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "show ID",
		Aliases: []string{"inspect"},
		Short:   "Describe a tenant",
		Example: `  stead tenant show acme`,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			t, err := c.GetTenant(cmd.Context(), a[0])
			if err != nil {
				return fmt.Errorf("show tenant %s: %w", a[0], err)
			}
			return printTenant(g, t)
		},
	}
}

// newTenantStateCmd is `stead tenant suspend` or `stead tenant unsuspend`.
func newTenantStateCmd(g *globals, verb string) *cobra.Command {
	short := "Suspend a tenant: its keys are refused (403) and its running sandboxes stopped"
	if verb == "unsuspend" {
		short = "Lift a tenant's suspension: its keys work again (its sandboxes stay stopped)"
	}
	return &cobra.Command{
		Use:     verb + " ID",
		Short:   short,
		Example: "  stead tenant " + verb + " acme",
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			fn := c.SuspendTenant
			if verb == "unsuspend" {
				fn = c.UnsuspendTenant
			}
			t, err := fn(cmd.Context(), a[0])
			if err != nil {
				return fmt.Errorf("%s tenant %s: %w", verb, a[0], err)
			}
			return printTenant(g, t)
		},
	}
}

// newTenantRmCmd is `stead tenant rm`.
func newTenantRmCmd(g *globals) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:     "rm ID --yes",
		Aliases: []string{"delete"},
		Short:   "Delete a tenant with everything it owns, its pushed data included",
		Long: `Delete a tenant: its sandboxes, volumes, snapshots and templates are purged,
its keys revoked, and its repository data keys destroyed, so what it pushed
can no longer be decrypted by anyone (cryptographic erasure). The audit trail
records it. This cannot be undone, so it needs --yes. The default tenant
cannot be deleted.`,
		Example: `  stead tenant rm acme --yes`,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if !yes {
				return usageError{fmt.Errorf("deleting tenant %s destroys all its data for good: add --yes", a[0])}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			d, err := c.DeleteTenant(cmd.Context(), a[0])
			if err != nil {
				return fmt.Errorf("delete tenant %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, d)
			}
			erased := "none"
			if len(d.ErasedScopes) > 0 {
				erased = strings.Join(d.ErasedScopes, ", ")
			}
			_, err = fmt.Fprintf(g.stdout, "deleted tenant %s: %d sandboxes, %d volumes, %d snapshots, %d templates, %d keys; erased repository scopes: %s\n",
				d.Tenant, d.Sandboxes, d.Volumes, d.Snapshots, d.Templates, d.Keys, erased)
			return err
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm: the tenant's data is destroyed for good")
	return cmd
}
