package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newAuditCmd is `stead audit` and its subcommands.
func newAuditCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Verify, list and export the audit trail (admin keys)",
		Long: `The audit trail records every state-changing API request (failed and refused
ones included; requests without a valid API key are not recorded) and every
lifecycle transition the daemon makes on its own (idle stop, crash,
reconcile). It is an append-only, hash-chained log: each entry's hash covers
the previous entry's hash, its seq, time, actor, tenant, action, target and
outcome, and the daemon signs the head with an ed25519 key (kept in its data
directory) every N entries, periodically and on demand. It lives outside
every sandbox, survives sandbox deletion and purge, and has its own
retention: old entries are pruned only up to a signed checkpoint, so the
rest stays verifiable.

stead audit verify walks the whole chain and exits 1 when any entry was
edited, deleted, inserted or reordered, naming the first seq found altered.
All audit commands need an admin key; an admin of the default tenant sees
every tenant's entries, other admins their own tenant's.`,
		Example: `  stead audit verify
  stead audit ls --since 24h
  stead audit export > audit.jsonl
  stead audit export --since 2026-11-01T00:00:00Z > november.jsonl
  stead audit checkpoint`,
	}
	group(cmd)
	cmd.AddCommand(
		newAuditVerifyCmd(g),
		newAuditLsCmd(g),
		newAuditExportCmd(g),
		newAuditCheckpointCmd(g),
	)
	return cmd
}

// parseSince parses --since: an RFC 3339 time, or a duration ("24h", "30m")
// meaning that long before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usageError{fmt.Errorf("--since %q: want an RFC 3339 time (2026-11-30T12:00:00Z) or a duration (24h)", s)}
}

func newAuditVerifyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "verify",
		Short: "Check the audit trail's hash chain and signed checkpoints",
		Long: `Check the whole audit trail: every entry's hash, every link between
entries and every signed checkpoint. Exits 0 when the trail is intact, 1 when
it was altered (the first seq found altered and what is wrong there are
printed). Entries after the newest checkpoint are protected by the hash
chain alone; sign one now with stead audit checkpoint.`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			rep, err := c.VerifyAudit(cmd.Context())
			if err != nil {
				return fmt.Errorf("verify audit trail: %w", err)
			}
			if g.json {
				if err := printJSON(g.stdout, rep); err != nil {
					return err
				}
				if !rep.OK {
					return exitCodeError{exitError}
				}
				return nil
			}
			if !rep.OK {
				return fmt.Errorf("audit trail ALTERED at seq %d: %s", rep.BadSeq, rep.Problem)
			}
			if rep.Entries == 0 {
				_, err = fmt.Fprintf(g.stdout, "audit trail OK: empty (key %s)\n", rep.KeyID)
				return err
			}
			signed := "no signed checkpoint yet"
			if rep.SignedSeq > 0 {
				signed = fmt.Sprintf("%d checkpoint(s) signed by key %s, the newest at seq %d", rep.Checkpoints, rep.KeyID, rep.SignedSeq)
			}
			_, err = fmt.Fprintf(g.stdout, "audit trail OK: %d entries, seq %d to %d; %s; %d entries after it protected by the chain only\n",
				rep.Entries, rep.FirstSeq, rep.LastSeq, signed, rep.Unsigned)
			return err
		},
	}
}

func newAuditLsCmd(g *globals) *cobra.Command {
	var (
		since string
		after int64
		limit int
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List audit trail entries, oldest first",
		Example: `  stead audit ls
  stead audit ls --since 1h
  stead audit ls --after 100 --limit 50   # the next page`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListAudit(cmd.Context(), client.AuditQuery{Since: t, After: after, Limit: limit})
			if err != nil {
				return fmt.Errorf("list audit trail: %w", err)
			}
			if g.json {
				if list == nil {
					list = []client.AuditEntry{}
				}
				return printJSON(g.stdout, list)
			}
			if len(list) == 0 {
				_, err = fmt.Fprintln(g.stderr, "no audit entries")
				return err
			}
			tw := newTable(g.stdout)
			row(tw, "SEQ", "TIME", "ACTOR", "TENANT", "ACTION", "TARGET", "OUTCOME")
			for _, e := range list {
				row(tw, strconv.FormatInt(e.Seq, 10), e.Time.Local().Format(time.DateTime), orDash(e.Actor), orDash(e.Tenant),
					e.Action, orDash(e.Target), orDash(e.Outcome))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "only entries at or after this time (RFC 3339) or this long ago (24h)")
	cmd.Flags().Int64Var(&after, "after", 0, "only entries with a greater seq (paging)")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many entries (at most 1000)")
	return cmd
}

func newAuditExportCmd(g *globals) *cobra.Command {
	var since string
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write the audit trail as JSON Lines to stdout",
		Long: `Write the audit trail to stdout as JSON Lines: one entry object per line, by
seq, with its prev_hash and hash, so the chain can be kept and re-checked
elsewhere.`,
		Example: `  stead audit export > audit.jsonl
  stead audit export --since 168h | gzip > last-week.jsonl.gz`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.ExportAudit(cmd.Context(), client.AuditQuery{Since: t}, g.stdout); err != nil {
				return fmt.Errorf("export audit trail: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "only entries at or after this time (RFC 3339) or this long ago (24h)")
	return cmd
}

func newAuditCheckpointCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "checkpoint",
		Short: "Have the daemon sign a checkpoint of the audit trail's head now",
		Args:  args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			cp, err := c.CheckpointAudit(cmd.Context())
			if client.IsConflict(err) {
				return errors.New("sign audit checkpoint: the audit trail is empty")
			}
			if err != nil {
				return fmt.Errorf("sign audit checkpoint: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, cp)
			}
			_, err = fmt.Fprintf(g.stdout, "signed seq %d (hash %s) with key %s\n", cp.Seq, cp.Hash, cp.KeyID)
			return err
		},
	}
}
