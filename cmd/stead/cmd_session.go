package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// maxSessionLine caps one JSON line of `session append --batch`.
const maxSessionLine = 1 << 20

// newSessionCmd is `stead session` and its subcommands.
func newSessionCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "session",
		Aliases: []string{"sessions"},
		Short:   "Read and write an agent's session log (threads, runs, events; in-doubt tool intents)",
		Long: `The session log is an append-only record of what an agent did, kept by the
daemon outside the sandbox: a sandbox has threads, a thread has runs, and
events (model_call, tool_intent, tool_result, error, approval_requested,
approval_granted, approval_denied, checkpoint, compaction, note) are appended
to a run with seqs 1, 2, 3 ... A tool_result names its tool_intent's seq
(--intent). After a crash, "resume" lists every tool intent without a
result (in doubt) and the last safe point (the last checkpoint event, else
the last event). Appends with --key are safe to retry.`,
		Example: `  stead session threads agent-1 --create main --keep-last 10000
  stead session runs agent-1 main --start
  stead session append agent-1 RUN tool_intent '{"tool":"send_mail"}' --key mail-1
  stead session append agent-1 RUN tool_result '{"ok":true}' --intent 1
  stead session append agent-1 RUN --batch events.jsonl
  stead session events agent-1 RUN --after 100
  stead session events -f agent-1 RUN
  stead session resume agent-1 RUN
  stead session end agent-1 RUN --status failed`,
	}
	group(cmd)
	cmd.AddCommand(
		newSessionThreadsCmd(g),
		newSessionRunsCmd(g),
		newSessionAppendCmd(g),
		newSessionEventsCmd(g),
		newSessionResumeCmd(g),
		newSessionEndCmd(g),
		newSessionPruneCmd(g),
	)
	return cmd
}

func newSessionThreadsCmd(g *globals) *cobra.Command {
	var create string
	var keepLast int
	var keepWithin time.Duration
	cmd := &cobra.Command{
		Use:   "threads SANDBOX",
		Short: "List a sandbox's threads, or create one with --create",
		Example: `  stead session threads agent-1
  stead session threads agent-1 --create main --keep-last 10000 --keep-within 720h`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if keepLast < 0 || keepWithin < 0 {
				return usageError{fmt.Errorf("--keep-last and --keep-within must not be negative")}
			}
			if create == "" && (cmd.Flags().Changed("keep-last") || cmd.Flags().Changed("keep-within")) {
				return usageError{fmt.Errorf("--keep-last and --keep-within go with --create (or use stead session prune)")}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if create != "" {
				th, err := c.CreateThread(cmd.Context(), a[0], client.CreateThreadRequest{Name: create,
					Retention: client.Retention{KeepLast: keepLast, KeepWithinSeconds: int64(keepWithin / time.Second)}})
				if err != nil {
					return fmt.Errorf("create thread %s in %s: %w", create, a[0], err)
				}
				if g.json {
					return printJSON(g.stdout, th)
				}
				_, err = fmt.Fprintf(g.stdout, "%s\t%s\n", th.ID, th.Name)
				return err
			}
			list, err := c.ListThreads(cmd.Context(), a[0])
			if err != nil {
				return fmt.Errorf("list threads of %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			row(tw, "ID", "NAME", "RETENTION", "CREATED")
			for _, th := range list {
				row(tw, th.ID, th.Name, retentionStr(th.Retention), ago(th.CreatedAt))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&create, "create", "", "create a thread with this name")
	cmd.Flags().IntVar(&keepLast, "keep-last", 0, "with --create: keep the newest N events of each run")
	cmd.Flags().DurationVar(&keepWithin, "keep-within", 0, "with --create: keep events younger than this (e.g. 720h)")
	return cmd
}

// retentionStr describes a retention for people.
func retentionStr(r client.Retention) string {
	var parts []string
	if r.KeepLast > 0 {
		parts = append(parts, fmt.Sprintf("last %d", r.KeepLast))
	}
	if r.KeepWithinSeconds > 0 {
		parts = append(parts, "within "+(time.Duration(r.KeepWithinSeconds)*time.Second).String())
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, ", ")
}

func newSessionRunsCmd(g *globals) *cobra.Command {
	var start bool
	cmd := &cobra.Command{
		Use:   "runs SANDBOX THREAD",
		Short: "List a thread's runs, or start a new one with --start (prints its id)",
		Example: `  stead session runs agent-1 main
  RUN=$(stead session runs agent-1 main --start)`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if start {
				r, err := c.StartRun(cmd.Context(), a[0], a[1])
				if err != nil {
					return fmt.Errorf("start run of %s/%s: %w", a[0], a[1], err)
				}
				if g.json {
					return printJSON(g.stdout, r)
				}
				_, err = fmt.Fprintln(g.stdout, r.ID)
				return err
			}
			list, err := c.ListRuns(cmd.Context(), a[0], a[1])
			if err != nil {
				return fmt.Errorf("list runs of %s/%s: %w", a[0], a[1], err)
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			row(tw, "ID", "STATUS", "LAST SEQ", "STARTED", "ENDED")
			for _, r := range list {
				row(tw, r.ID, r.Status, strconv.FormatInt(r.LastSeq, 10), ago(r.StartedAt), agoPtr(r.EndedAt))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&start, "start", false, "start a new run and print its id")
	return cmd
}

func newSessionAppendCmd(g *globals) *cobra.Command {
	var key, modelSession, batch string
	var intent int64
	cmd := &cobra.Command{
		Use:   "append SANDBOX RUN (TYPE [PAYLOAD|-] | --batch FILE|-)",
		Short: "Append an event (or a JSONL batch, all or nothing per 1000) to a run",
		Long: `Append one event of TYPE with a JSON PAYLOAD (an argument, or - for standard
input; default null), or with --batch a file of JSON lines, one event each
({"type": ..., "payload": ..., "idempotency_key": ..., "intent": N}), sent
in batches of up to 1000 that are each stored all or nothing. Prints the
stored events' seqs (JSON lines with --json).`,
		Example: `  stead session append agent-1 RUN note '{"text":"starting"}'
  stead session append agent-1 RUN tool_intent '{"tool":"rm"}' --key rm-1
  stead session append agent-1 RUN tool_result '{"ok":true}' --intent 2
  stead session append agent-1 RUN --batch events.jsonl`,
		Args: args(2, 4),
		RunE: func(cmd *cobra.Command, a []string) error {
			var evs []client.AppendEvent
			switch {
			case batch != "" && len(a) > 2:
				return usageError{fmt.Errorf("give either TYPE [PAYLOAD] or --batch, not both")}
			case batch != "":
				var err error
				if evs, err = g.readEventLines(batch); err != nil {
					return err
				}
			case len(a) < 3:
				return usageError{fmt.Errorf("give an event TYPE (e.g. note) or --batch FILE")}
			default:
				e := client.AppendEvent{Type: a[2], IdempotencyKey: key, Intent: intent, ModelSession: modelSession}
				if len(a) == 4 {
					p := []byte(a[3])
					if a[3] == "-" {
						var err error
						if p, err = g.readInput("-"); err != nil {
							return err
						}
					}
					p = bytes.TrimSpace(p)
					if !json.Valid(p) {
						return usageError{fmt.Errorf("payload is not JSON (quote a string: '\"text\"')")}
					}
					e.Payload = p
				}
				evs = []client.AppendEvent{e}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			for len(evs) > 0 {
				n := min(len(evs), 1000)
				stored, err := c.AppendEvents(cmd.Context(), a[0], a[1], evs[:n])
				if err != nil {
					return fmt.Errorf("append to run %s: %w", a[1], err)
				}
				for _, e := range stored {
					if err := g.printEvent(e, true); err != nil {
						return err
					}
				}
				evs = evs[n:]
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "idempotency key: a retry with the same key stores nothing new")
	cmd.Flags().Int64Var(&intent, "intent", 0, "for a tool_result: the seq of its tool_intent")
	cmd.Flags().StringVar(&modelSession, "model-session", "", "tag the event with a model session id")
	cmd.Flags().StringVar(&batch, "batch", "", "append the JSON lines of FILE (- for standard input)")
	return cmd
}

// readEventLines reads JSON lines of events from a file or standard input.
func (g *globals) readEventLines(name string) ([]client.AppendEvent, error) {
	var r io.Reader = g.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, usageError{fmt.Errorf("read %s: %w", name, err)}
		}
		defer f.Close()
		r = f
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxSessionLine)
	var evs []client.AppendEvent
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var e client.AppendEvent
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, usageError{fmt.Errorf("read %s line %d: %w", name, n, err)}
		}
		evs = append(evs, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(evs) == 0 {
		return nil, usageError{fmt.Errorf("read %s: no events", name)}
	}
	return evs, nil
}

// printEvent prints an event: a JSON line, or "seq time type ... payload"
// (only the seq when short).
func (g *globals) printEvent(e client.Event, short bool) error {
	if g.json {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("print event: %w", err)
		}
		_, err = fmt.Fprintf(g.stdout, "%s\n", b)
		return err
	}
	if short {
		_, err := fmt.Fprintln(g.stdout, e.Seq)
		return err
	}
	line := fmt.Sprintf("%d\t%s\t%s", e.Seq, e.Time.Local().Format("2006-01-02 15:04:05.000"), e.Type)
	if e.Intent != 0 {
		line += fmt.Sprintf("\tintent=%d", e.Intent)
	}
	if e.ModelSession != "" {
		line += "\tsession=" + e.ModelSession
	}
	if e.IdempotencyKey != "" {
		line += "\tkey=" + e.IdempotencyKey
	}
	_, err := fmt.Fprintf(g.stdout, "%s\t%s\n", line, e.Payload)
	return err
}

func newSessionEventsCmd(g *globals) *cobra.Command {
	var after int64
	var limit int
	var follow bool
	cmd := &cobra.Command{
		Use:   "events SANDBOX RUN",
		Short: "Print a run's events (all after --after, or at most --limit); -f keeps following",
		Example: `  stead session events agent-1 RUN
  stead session events agent-1 RUN --after 100 --limit 10
  stead session events -f agent-1 RUN --json    # JSON lines until the run ends; Ctrl-C stops`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			if after < 0 || limit < 0 {
				return usageError{fmt.Errorf("--after and --limit must not be negative")}
			}
			if follow && limit > 0 {
				return usageError{fmt.Errorf("--limit does not go with --follow")}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if follow {
				err := c.FollowEvents(ctx, a[0], a[1], after, func(e client.Event) error { return g.printEvent(e, false) })
				if err != nil && ctx.Err() == nil {
					return fmt.Errorf("follow run %s: %w", a[1], err)
				}
				return nil
			}
			for printed := 0; limit == 0 || printed < limit; {
				n := 1000
				if limit > 0 {
					n = min(n, limit-printed)
				}
				page, err := c.ListEvents(ctx, a[0], a[1], after, n)
				if err != nil {
					return fmt.Errorf("events of run %s: %w", a[1], err)
				}
				for _, e := range page.Events {
					if err := g.printEvent(e, false); err != nil {
						return err
					}
				}
				printed += len(page.Events)
				after = page.Next
				if !page.More {
					break
				}
			}
			return nil
		},
	}
	cmd.Flags().Int64Var(&after, "after", 0, "print events with a seq greater than this")
	cmd.Flags().IntVar(&limit, "limit", 0, "print at most this many events (0: all)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events until the run ends")
	return cmd
}

func newSessionResumeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "resume SANDBOX RUN",
		Short: "Show where a run stands: its last safe point and every in-doubt tool intent",
		Long: `Show the run's last safe point (its last checkpoint event, else its last
event) and every tool_intent that no tool_result answers: its side effect may
or may not have happened, so check it before repeating it.`,
		Example: `  stead session resume agent-1 RUN
  stead session resume agent-1 RUN --json`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.ResumeRun(cmd.Context(), a[0], a[1])
			if err != nil {
				return fmt.Errorf("resume run %s: %w", a[1], err)
			}
			if g.json {
				return printJSON(g.stdout, res)
			}
			fmt.Fprintf(g.stdout, "Run %s (thread %s): %s, last seq %d\n", res.Run.ID, res.Run.Thread, res.Run.Status, res.Run.LastSeq)
			if res.SafePoint == nil {
				fmt.Fprintln(g.stdout, "Safe point: none (no events)")
			} else {
				fmt.Fprintf(g.stdout, "Safe point: seq %d (%s) %s\n", res.SafePoint.Seq, res.SafePoint.Type, res.SafePoint.Payload)
			}
			if len(res.InDoubt) == 0 {
				_, err = fmt.Fprintln(g.stdout, "In doubt: none")
				return err
			}
			fmt.Fprintf(g.stdout, "In doubt (%d tool intents without a result; check before repeating):\n", len(res.InDoubt))
			for _, e := range res.InDoubt {
				if err := g.printEvent(e, false); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func newSessionEndCmd(g *globals) *cobra.Command {
	var status string
	cmd := &cobra.Command{
		Use:     "end SANDBOX RUN",
		Short:   "End a run (it then takes no more events)",
		Example: `  stead session end agent-1 RUN --status failed`,
		Args:    args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			r, err := c.EndRun(cmd.Context(), a[0], a[1], status)
			if err != nil {
				return fmt.Errorf("end run %s: %w", a[1], err)
			}
			if g.json {
				return printJSON(g.stdout, r)
			}
			_, err = fmt.Fprintf(g.stdout, "%s: %s, last seq %d\n", r.ID, r.Status, r.LastSeq)
			return err
		},
	}
	cmd.Flags().StringVar(&status, "status", "completed", "completed, failed, canceled or interrupted")
	return cmd
}

func newSessionPruneCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "prune SANDBOX THREAD",
		Short: "Apply a thread's retention to all its runs now",
		Args:  args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.PruneThread(cmd.Context(), a[0], a[1])
			if err != nil {
				return fmt.Errorf("prune thread %s: %w", a[1], err)
			}
			if g.json {
				return printJSON(g.stdout, res)
			}
			_, err = fmt.Fprintf(g.stdout, "deleted %d events\n", res.Deleted)
			return err
		},
	}
}
