package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newEventsCmd is `stead events`.
func newEventsCmd(g *globals) *cobra.Command {
	var (
		follow  bool
		types   []string
		sandbox string
		since   string
		after   int64
		limit   int
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show the tenant's event log; --follow streams new events live",
		Long: `The daemon keeps a log of what happens to the tenant's sandboxes: the
lifecycle (sandbox.created, started, paused, resumed, stopped with its
reason, archived, deleted, undeleted, purged, error), snapshots
(snapshot.created, snapshot.deleted), fork and rollback (sandbox.forked,
sandbox.rolled_back), backups (backup.pushed, backup.pulled,
backup.restored, drill.finished, sandbox.hydrated) and network policy
changes (sandbox.network_policy). Every event has an id that only grows.

Without --follow, the stored events are printed (oldest first) and the
command exits. With --follow it then waits and prints each new event as it
happens; when the connection breaks it reconnects after the last id
printed, so nothing is skipped or repeated. --after ID starts after an id
(what a consumer that stopped at ID resumes with).

Events are kept for the daemon's --event-retention (7 days by default).
--type takes a prefix and may be repeated; --sandbox an id or a name.`,
		Example: `  stead events
  stead events --follow --type sandbox.stopped --type snapshot.
  stead events --sandbox my-agent --since 1h
  stead events --follow --after 1234 --json   # one JSON object per line`,
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
			q := client.EventQuery{After: after, Types: types, Sandbox: sandbox, Since: t}
			ctx := cmd.Context()
			if follow {
				for e, err := range c.StreamDaemonEvents(ctx, q) {
					if err != nil {
						return fmt.Errorf("follow events: %w", err)
					}
					if err := g.printDaemonEvent(e); err != nil {
						return err
					}
				}
				return nil // interrupted
			}
			n := 0
			for {
				q.Limit = min(1000, max(limit-n, 0))
				if limit <= 0 {
					q.Limit = 1000
				}
				page, err := c.ListDaemonEvents(ctx, q)
				if err != nil {
					return fmt.Errorf("list events: %w", err)
				}
				for _, e := range page.Events {
					if err := g.printDaemonEvent(e); err != nil {
						return err
					}
				}
				n += len(page.Events)
				q.After = page.Next
				if !page.More || (limit > 0 && n >= limit) {
					return nil
				}
			}
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "after the stored events, wait and print new ones as they happen (reconnects on its own)")
	f.StringArrayVar(&types, "type", nil, "only events whose type starts with this prefix (repeatable), e.g. sandbox.stopped or snapshot.")
	f.StringVar(&sandbox, "sandbox", "", "only this sandbox's events (id or name)")
	f.StringVar(&since, "since", "", "only events at or after this time: RFC 3339 or a duration before now (24h)")
	f.Int64Var(&after, "after", 0, "only events with an id above this one (resume where a consumer stopped)")
	f.IntVar(&limit, "limit", 0, "print at most this many stored events (without --follow; 0: all)")
	return cmd
}

// printDaemonEvent writes one event: a JSON line with --json, else one
// line of text.
func (g *globals) printDaemonEvent(e client.DaemonEvent) error {
	if g.json {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("print event: %w", err)
		}
		_, err = g.stdout.Write(append(b, '\n'))
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d  %s  %-24s", e.ID, e.Time.Local().Format("2006-01-02 15:04:05.000"), e.Type)
	if e.Sandbox != "" {
		fmt.Fprintf(&b, "  sandbox=%s", e.Sandbox)
	}
	if e.State != "" {
		fmt.Fprintf(&b, "  state=%s", e.State)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, "  reason=%s", e.Reason)
	}
	keys := make([]string, 0, len(e.Data))
	for k := range e.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s=%s", k, e.Data[k])
	}
	b.WriteString("\n")
	_, err := io.WriteString(g.stdout, b.String())
	return err
}
