package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newTenantRetentionCmd is `stead tenant retention`.
func newTenantRetentionCmd(g *globals) *cobra.Command {
	var p client.RetentionPolicy
	cmd := &cobra.Command{
		Use:   "retention TENANT",
		Short: "Show or set a tenant's retention policy (admin)",
		Long: `Show a tenant's retention policy, or with flags change it (the flags not given
keep their value; "default" unsets one, so the daemon's default applies).

Durations are like 14d, 36h, 1d12h or 90m (a day is 24 hours); 0 means never.
  --archive-after          archive sandboxes stopped this long (needs a
                           repository; the default of each sandbox's own
                           archive_after, which a sandbox may set itself;
                           daemon default 7d)
  --delete-archived-after  soft-delete sandboxes archived this long (their
                           pushes stay in the repository; default never)
  --purge-after            purge sandboxes and volumes soft-deleted this long,
                           counted from their deletion (default the daemon's
                           --delete-retention, 30d; cannot be 0)
  --warn-before            warn this long before any automatic soft-delete or
                           purge (event retention.warning and a log line;
                           default the daemon's --retention-warn-before, 3d)

Nothing is deleted automatically before it is due, nor before its warning is
warn-before old: a warning given late postpones the deletion. An undelete or a
start cancels it. Every automatic deletion is in the audit trail before it
happens. stead info shows purge_at and, for archived sandboxes, delete_at.
A tenant's own keys read the policy with GET /v1/retention.`,
		Example: `  stead tenant retention acme
  stead tenant retention acme --archive-after 14d --delete-archived-after 90d --purge-after 30d --warn-before 3d
  stead tenant retention acme --purge-after default`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cur, err := c.GetTenantRetention(ctx, a[0])
			if err != nil {
				return fmt.Errorf("retention of tenant %s: %w", a[0], err)
			}
			changed := false
			next := cur.Set
			for _, f := range []struct {
				flag string
				val  string
				dst  *string
			}{
				{"archive-after", p.ArchiveStoppedAfter, &next.ArchiveStoppedAfter},
				{"delete-archived-after", p.DeleteArchivedAfter, &next.DeleteArchivedAfter},
				{"purge-after", p.PurgeDeletedAfter, &next.PurgeDeletedAfter},
				{"warn-before", p.WarnBefore, &next.WarnBefore},
				{"session-keep-within", p.SessionKeepWithin, &next.SessionKeepWithin},
				{"observations-keep-within", p.ObservationsKeepWithin, &next.ObservationsKeepWithin},
			} {
				if !cmd.Flags().Changed(f.flag) {
					continue
				}
				changed = true
				switch f.val {
				case "default":
					*f.dst = ""
				case "":
					return usageError{fmt.Errorf("--%s needs a duration like 14d, 0 or default", f.flag)}
				default:
					*f.dst = f.val
				}
			}
			if changed {
				if cur, err = c.SetTenantRetention(ctx, a[0], next); err != nil {
					return fmt.Errorf("set retention of tenant %s: %w", a[0], err)
				}
			}
			return printRetention(g, cur)
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.ArchiveStoppedAfter, "archive-after", "", "archive sandboxes stopped this long (0: never; default: unset)")
	f.StringVar(&p.DeleteArchivedAfter, "delete-archived-after", "", "soft-delete sandboxes archived this long (0: never)")
	f.StringVar(&p.PurgeDeletedAfter, "purge-after", "", "purge sandboxes and volumes soft-deleted this long")
	f.StringVar(&p.WarnBefore, "warn-before", "", "warn this long before an automatic deletion")
	f.StringVar(&p.SessionKeepWithin, "session-keep-within", "", "default age limit of session threads made without a retention (the newest and in-doubt are kept)")
	f.StringVar(&p.ObservationsKeepWithin, "observations-keep-within", "", "prune observations older than this (each sandbox's newest kept)")
	return cmd
}

// printRetention prints a tenant's retention policy: each setting's
// effective value, and whether the tenant set it.
func printRetention(g *globals, r client.TenantRetention) error {
	if g.json {
		return printJSON(g.stdout, r)
	}
	tw := newTable(g.stdout)
	fmt.Fprintf(tw, "tenant:\t%s\n", r.Tenant)
	for _, row := range []struct{ name, eff, set, zero string }{
		{"archive stopped after", r.Effective.ArchiveStoppedAfter, r.Set.ArchiveStoppedAfter, "never"},
		{"delete archived after", r.Effective.DeleteArchivedAfter, r.Set.DeleteArchivedAfter, "never"},
		{"purge deleted after", r.Effective.PurgeDeletedAfter, r.Set.PurgeDeletedAfter, "never"},
		{"warn before", r.Effective.WarnBefore, r.Set.WarnBefore, "never"},
		{"session threads keep", r.Effective.SessionKeepWithin, r.Set.SessionKeepWithin, "everything"},
		{"observations keep", r.Effective.ObservationsKeepWithin, r.Set.ObservationsKeepWithin, "everything"},
	} {
		v := row.eff
		if v == "0" {
			v = row.zero
		}
		src := "(daemon default)"
		if row.set != "" {
			src = "(set)"
		}
		fmt.Fprintf(tw, "%s:\t%s\t%s\n", row.name, v, src)
	}
	if r.UpdatedAt != nil {
		fmt.Fprintf(tw, "updated:\t%s\n", r.UpdatedAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}
