package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
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

stead audit verify walks the whole chain and compares it with the trail's
witnesses (the signed head, also kept in DATA_DIR/audit.witness and in the
repository) and exits 1 when any entry was edited, deleted, inserted or
reordered, the tail was truncated, a signed checkpoint is missing or a row is
malformed, listing every problem by seq.
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
		Short: "Check the audit trail's hash chain, signed checkpoints and witnesses",
		Long: `Check the whole audit trail: every entry's hash, every link between
entries, every signed checkpoint, and the database against the trail's
witnesses: copies of the newest signed checkpoint kept outside the database,
in DATA_DIR/audit.witness and, when a repository is configured, in the
repository. A witness is what catches a tail deleted while the daemon was
down, together with the checkpoints that covered it.

The daemon signs the head every --audit-checkpoint-interval (default 1m)
when it moved, every 1000 entries, at start and on a clean stop; entries
after the newest checkpoint are protected by the hash chain alone (after a
kill -9, at most one interval's worth). Sign one now with stead audit
checkpoint.

Every problem found is listed with its seq and kind (altered, deleted,
inserted, relinked, truncated, rewritten, checkpoint-forged,
checkpoint-missing, malformed, witness); --json gives the same as an object.

A witness the database contradicts is never overwritten: it stays as
evidence, and verify keeps failing, until an operator who has examined it
moves DATA_DIR/audit.witness aside (and, for the repository's copy, the
record scopes/audit/records/audit-witness/KEY_ID); the daemon then writes a
new one from the database as it is.

Exit codes: 0 the trail is intact; 1 it was altered (or could not be
checked).`,
		Example: `  stead audit verify
  stead audit verify --json | jq '.problems[]'`,
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
			if err := printAuditReport(g.stdout, rep); err != nil {
				return err
			}
			if !rep.OK {
				return fmt.Errorf("audit trail ALTERED at seq %d: %s", rep.BadSeq, rep.Problem)
			}
			return nil
		},
	}
}

// printAuditReport writes a verify report as text: the verdict, every
// problem, then the witnesses.
func printAuditReport(w io.Writer, rep client.AuditReport) error {
	var b strings.Builder
	switch {
	case !rep.OK:
		fmt.Fprintf(&b, "audit trail ALTERED: %d problem(s); the first at seq %d\n", len(rep.Problems), rep.BadSeq)
		for _, p := range rep.Problems {
			seq := "-"
			if p.Seq > 0 {
				seq = strconv.FormatInt(p.Seq, 10)
			}
			fmt.Fprintf(&b, "  seq %s [%s]: %s\n", seq, p.Kind, p.Text)
		}
	case rep.Entries == 0:
		fmt.Fprintf(&b, "audit trail OK: empty (key %s)\n", rep.KeyID)
	default:
		signed := "no signed checkpoint yet"
		if rep.SignedSeq > 0 {
			signed = fmt.Sprintf("%d checkpoint(s) signed by key %s, the newest at seq %d", rep.Checkpoints, rep.KeyID, rep.SignedSeq)
		}
		fmt.Fprintf(&b, "audit trail OK: %d entries, seq %d to %d; %s; %d entries after it protected by the chain only\n",
			rep.Entries, rep.FirstSeq, rep.LastSeq, signed, rep.Unsigned)
	}
	if rep.Entries > 0 && !rep.OK {
		fmt.Fprintf(&b, "the database holds %d entries, seq %d to %d; newest valid checkpoint: seq %d (key %s)\n",
			rep.Entries, rep.FirstSeq, rep.LastSeq, rep.SignedSeq, rep.KeyID)
	}
	for _, wt := range rep.Witnesses {
		state := "matches"
		if !wt.OK {
			state = "DOES NOT MATCH"
			if strings.HasPrefix(wt.Note, "unavailable") || wt.Note == "holds no checkpoint" {
				state = "not compared"
			}
		}
		held := "nothing"
		if wt.Seq > 0 {
			held = fmt.Sprintf("seq %d signed %s", wt.Seq, wt.Time.Local().Format(time.DateTime))
		}
		fmt.Fprintf(&b, "witness %s: %s, %s", wt.Name, held, state)
		if wt.Note != "" {
			fmt.Fprintf(&b, " (%s)", wt.Note)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
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
