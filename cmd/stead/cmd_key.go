package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/e2b"
)

// newKeyCmd is `stead key` and its subcommands.
func newKeyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "key",
		Aliases: []string{"keys"},
		Short:   "Create, list, rotate and revoke API keys",
		Long: `API keys belong to a tenant and have a role:

  admin         everything, in every tenant (the daemon's own key)
  tenant-admin  everything within its tenant, its keys included
  tenant-user   create and use sandboxes and volumes; no key management
  read-only     GET requests only; no terminal

A key may also be scoped: --sandbox limits it to named sandboxes (ids or
names), --label to the sandboxes carrying labels (stead create --label);
a label-scoped key's creates get its labels. Other sandboxes are absent to it.

Secrets are shown once and stored hashed. Managing keys needs a tenant-admin
or admin key, and a key manages keys of its role or below. An admin key
manages another tenant's keys with the global flag --tenant (which works
with every verb: stead --tenant acme list).`,
		Example: `  stead key create ci-runner --role tenant-user
  stead key create research-bot --label team=research --expires-in 720h
  stead key ls
  stead key rotate key-abc123 --overlap 1h
  stead key revoke key-abc123
  stead key create acme-ops --tenant acme --role tenant-admin`,
	}
	group(cmd)
	cmd.AddCommand(newKeyCreateCmd(g), newKeyLsCmd(g), newKeyRotateCmd(g), newKeyRevokeCmd(g))
	return cmd
}

// newKeyCreateCmd is `stead key create`.
func newKeyCreateCmd(g *globals) *cobra.Command {
	var (
		req     client.CreateAPIKeyRequest
		labels  []string
		e2bForm bool
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create an API key; its secret is printed once",
		Long: `Create an API key. The secret is printed once, alone on stdout, and cannot
be shown again: store it now. The role defaults to tenant-user; a key can
create keys of its own role or below.`,
		Example: `  stead key create ci-runner
  export STEAD_API_KEY=$(stead key create ci-runner)   # the secret alone goes to stdout
  stead key create ops --role tenant-admin
  stead key create dashboard --role read-only --expires-in 24h
  stead key create agent-7 --sandbox agent-7
  stead key create research --label team=research
  export E2B_API_KEY=$(stead key create e2b-agents --e2b)`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			req.Name = a[0]
			var err error
			if req.Labels, err = parseLabels(labels); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			k, err := c.CreateKey(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("create key %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, k)
			}
			fmt.Fprintf(g.stderr, "created key %s (%s, %s) in tenant %s; the secret below is shown only once:\n", k.ID, k.Name, k.Role, k.Tenant)
			if e2bForm {
				_, err = fmt.Fprintln(g.stdout, e2b.EncodeKey(k.Secret))
				return err
			}
			_, err = fmt.Fprintln(g.stdout, k.Secret)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Role, "role", "", "admin, tenant-admin, tenant-user (default) or read-only")
	f.BoolVar(&req.Admin, "admin", false, "same as --role admin")
	f.StringArrayVar(&req.Sandboxes, "sandbox", nil, "limit the key to this sandbox, by id or name (repeatable)")
	f.StringArrayVar(&labels, "label", nil, "limit the key to sandboxes with this label KEY=VALUE (repeatable)")
	f.StringVar(&req.ExpiresIn, "expires-in", "", "the key stops working after this long, e.g. 720h (default: never)")
	f.BoolVar(&e2bForm, "e2b", false, "print the secret in E2B's form e2b_<hex> (for E2B_API_KEY; the same key, see docs/e2b.md)")
	return cmd
}

// newKeyLsCmd is `stead key ls`.
func newKeyLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the tenant's API keys (never their secrets)",
		Example: `  stead key ls
  stead key ls --tenant acme --json`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			keys, err := c.ListKeys(cmd.Context())
			if err != nil {
				return fmt.Errorf("list keys: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, keys)
			}
			tw := newTable(g.stdout)
			fmt.Fprintln(tw, "ID\tNAME\tROLE\tSCOPE\tEXPIRES\tCREATED")
			for _, k := range keys {
				expires := "-"
				if k.ExpiresAt != nil {
					expires = k.ExpiresAt.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Role, keyScope(k), expires, k.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
}

// keyScope renders a key's scope for a table.
func keyScope(k client.APIKey) string {
	switch {
	case len(k.Sandboxes) > 0:
		return "sandboxes " + strings.Join(k.Sandboxes, ",")
	case len(k.Labels) > 0:
		return "labels " + formatLabels(k.Labels)
	}
	return "all"
}

// newKeyRotateCmd is `stead key rotate`.
func newKeyRotateCmd(g *globals) *cobra.Command {
	var req client.RotateAPIKeyRequest
	cmd := &cobra.Command{
		Use:   "rotate KEY_ID",
		Short: "Give a key a new secret; the old one keeps working for the overlap",
		Long: `Rotate a key: a new key with a new secret (printed once, alone on stdout)
and the same name, role and scope replaces it. The old secret keeps working
for the overlap (default 24h) so running clients can switch, then expires.
--overlap 0 ends it at once. Exits 4 if the key was rotated already (rotate
its successor) or has expired.`,
		Example: `  stead key rotate key-abc123
  stead key rotate key-abc123 --overlap 1h`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			k, err := c.RotateKey(cmd.Context(), a[0], req)
			if err != nil {
				return fmt.Errorf("rotate key %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, k)
			}
			fmt.Fprintf(g.stderr, "rotated key %s to %s; the old secret works for the overlap; the new secret below is shown only once:\n", a[0], k.ID)
			_, err = fmt.Fprintln(g.stdout, k.Secret)
			return err
		},
	}
	cmd.Flags().StringVar(&req.Overlap, "overlap", "", "how long the old secret keeps working, e.g. 1h (default 24h; 0: not at all)")
	return cmd
}

// newKeyRevokeCmd is `stead key revoke`.
func newKeyRevokeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "revoke KEY_ID",
		Aliases: []string{"rm"},
		Short:   "Revoke a key: it stops working at once",
		Example: `  stead key revoke key-abc123`,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.RevokeKey(cmd.Context(), a[0]); err != nil {
				return fmt.Errorf("revoke key %s: %w", a[0], err)
			}
			_, err = fmt.Fprintf(g.stderr, "revoked key %s\n", a[0])
			return err
		},
	}
}
