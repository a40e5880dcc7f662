package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// maxPayloadCell is how much of a payload a table row shows.
const maxPayloadCell = 60

// readPayload returns JSON argument i: the argument itself, or standard
// input for "-"; nil when there is none. Anything but JSON is a usage
// error.
func (g *globals) readPayload(a []string, i int) (json.RawMessage, error) {
	if len(a) <= i {
		return nil, nil
	}
	b := []byte(a[i])
	if a[i] == "-" {
		var err error
		if b, err = g.readInput("-"); err != nil {
			return nil, err
		}
		b = bytes.TrimSpace(b)
	}
	if len(b) > 0 && !json.Valid(b) {
		return nil, usageError{fmt.Errorf("%q is not JSON (quote a string: '\"text\"')", abbrev(string(b)))}
	}
	return json.RawMessage(b), nil
}

// abbrev shortens s for a message.
func abbrev(s string) string {
	if len(s) > maxPayloadCell {
		return s[:maxPayloadCell-3] + "..."
	}
	return s
}

// payloadCell shortens a JSON payload for a table cell.
func payloadCell(p json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, p); err != nil {
		b.Reset()
		b.Write(p)
	}
	return orDash(abbrev(b.String()))
}

// printIndented prints a JSON value indented, with a newline.
func (g *globals) printIndented(what string, v json.RawMessage) error {
	var out bytes.Buffer
	if err := json.Indent(&out, v, "", "  "); err != nil {
		return fmt.Errorf("print %s: %w", what, err)
	}
	out.WriteByte('\n')
	_, err := g.stdout.Write(out.Bytes())
	return err
}

// newTaskCmd is `stead task` and its subcommands.
func newTaskCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "task",
		Aliases: []string{"tasks"},
		Short:   "Read and write an agent's tasks (id, state, JSON payload) kept outside the sandbox",
		Long: `Tasks are an agent's units of work, kept by the daemon outside the sandbox:
each has an id, a state, a JSON payload and its creation and update times.
A task is created open and moves open → in_progress → done | failed |
cancelled; a finished task may be reopened (→ open). Any other move fails
with exit code 4 and changes nothing, as does --if-state naming a state the
task is not in (so of several agents claiming a task, exactly one wins).
Structured state also has an append-only log (stead obs) and key-value
entries (stead kv).`,
		Example: `  stead task add agent-1 '{"goal":"fix the build"}' --id build
  stead task ls agent-1 --open
  stead task ls agent-1 --state done,failed --since 24h
  stead task set-state agent-1 build in_progress --if-state open
  stead task set-state agent-1 build done --payload '{"commit":"abc123"}'
  stead task get agent-1 build`,
	}
	group(cmd)
	cmd.AddCommand(newTaskAddCmd(g), newTaskLsCmd(g), newTaskSetStateCmd(g), newTaskGetCmd(g))
	return cmd
}

func newTaskAddCmd(g *globals) *cobra.Command {
	var id string
	cmd := &cobra.Command{
		Use:   "add SANDBOX [PAYLOAD|-]",
		Short: "Create an open task with a JSON payload (prints its id)",
		Example: `  stead task add agent-1 '{"goal":"fix the build"}' --id build
  TASK=$(stead task add agent-1 < task.json -)`,
		Args: args(1, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			payload, err := g.readPayload(a, 1)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			t, err := c.CreateTask(cmd.Context(), a[0], client.CreateTaskRequest{ID: id, Payload: payload})
			if err != nil {
				return fmt.Errorf("add task to %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, t)
			}
			_, err = fmt.Fprintln(g.stdout, t.ID)
			return err
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "task id (default: a generated task-...)")
	return cmd
}

func newTaskLsCmd(g *globals) *cobra.Command {
	var states []string
	var open bool
	var since string
	var limit int
	cmd := &cobra.Command{
		Use:     "ls SANDBOX",
		Aliases: []string{"list"},
		Short:   "List a sandbox's tasks, oldest first: open ones, by state, created since a time",
		Example: `  stead task ls agent-1
  stead task ls agent-1 --open
  stead task ls agent-1 --state done,failed --since 2026-01-02T00:00:00Z`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if limit < 0 {
				return usageError{fmt.Errorf("--limit must not be negative")}
			}
			q := client.TaskQuery{States: states, Open: open}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return err
				}
				q.CreatedAfter = t
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			list := []client.Task{}
			for {
				q.Limit = 1000
				if limit > 0 {
					q.Limit = min(1000, limit-len(list))
				}
				page, err := c.ListTasks(cmd.Context(), a[0], q)
				if err != nil {
					return fmt.Errorf("list tasks of %s: %w", a[0], err)
				}
				list = append(list, page.Tasks...)
				if !page.More || (limit > 0 && len(list) >= limit) {
					break
				}
				q.After = page.Next
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			row(tw, "ID", "STATE", "CREATED", "UPDATED", "PAYLOAD")
			for _, t := range list {
				row(tw, t.ID, t.State, ago(t.CreatedAt), ago(t.UpdatedAt), payloadCell(t.Payload))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only tasks in these states (open, in_progress, done, failed, cancelled; comma-separated)")
	cmd.Flags().BoolVar(&open, "open", false, "only open tasks (open or in_progress)")
	cmd.Flags().StringVar(&since, "since", "", "only tasks created after this time (RFC 3339) or this long ago (e.g. 24h)")
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many tasks (default: all)")
	return cmd
}

func newTaskSetStateCmd(g *globals) *cobra.Command {
	var ifState, payload string
	cmd := &cobra.Command{
		Use:   "set-state SANDBOX TASK STATE",
		Short: "Move a task to another state (open, in_progress, done, failed, cancelled)",
		Long: `Move a task to STATE. Legal moves: open → in_progress; in_progress → done,
failed or cancelled; done, failed or cancelled → open. Any other move, or a
task not in the --if-state state, fails with exit code 4 and changes
nothing. --payload replaces the task's payload in the same transaction.`,
		Example: `  stead task set-state agent-1 build in_progress --if-state open
  stead task set-state agent-1 build failed --payload '{"exit":2}'
  stead task set-state agent-1 build open`,
		Args: args(3, 3),
		RunE: func(cmd *cobra.Command, a []string) error {
			req := client.SetTaskStateRequest{State: a[2], IfState: ifState}
			if cmd.Flags().Changed("payload") {
				p, err := g.readPayload([]string{payload}, 0)
				if err != nil {
					return err
				}
				if len(p) == 0 {
					return usageError{fmt.Errorf("--payload is empty; give JSON (e.g. null)")}
				}
				req.Payload = p
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			t, err := c.SetTaskState(cmd.Context(), a[0], a[1], req)
			if err != nil {
				return fmt.Errorf("set state of task %s/%s: %w", a[0], a[1], err)
			}
			if g.json {
				return printJSON(g.stdout, t)
			}
			_, err = fmt.Fprintf(g.stdout, "%s: %s\n", t.ID, t.State)
			return err
		},
	}
	cmd.Flags().StringVar(&ifState, "if-state", "", "move only if the task is in this state now")
	cmd.Flags().StringVar(&payload, "payload", "", "replace the payload with this JSON (- for standard input)")
	return cmd
}

func newTaskGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "get SANDBOX TASK",
		Short:   "Print a task as JSON (id, state, payload, times)",
		Example: "  stead task get agent-1 build",
		Args:    args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			t, err := c.GetTask(cmd.Context(), a[0], a[1])
			if err != nil {
				return fmt.Errorf("get task %s/%s: %w", a[0], a[1], err)
			}
			return printJSON(g.stdout, t)
		},
	}
}

// newObsCmd is `stead obs` and its subcommands.
func newObsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "obs",
		Aliases: []string{"observation", "observations"},
		Short:   "Append to and read a sandbox's append-only observation log",
		Long: `Observations are an append-only log per sandbox, kept by the daemon outside the
sandbox: each has a seq (1, 2, 3 ...), the time, a kind, the API key that
appended it and a JSON payload. They cannot be changed or deleted.`,
		Example: `  stead obs add agent-1 test_result '{"passed":41,"failed":1}'
  stead obs ls agent-1 --kind test_result
  stead obs ls agent-1 --after 100`,
	}
	group(cmd)
	cmd.AddCommand(newObsAddCmd(g), newObsLsCmd(g))
	return cmd
}

func newObsAddCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "add SANDBOX KIND [PAYLOAD|-]",
		Short:   "Append an observation (prints its seq)",
		Example: `  stead obs add agent-1 test_result '{"passed":41,"failed":1}'`,
		Args:    args(2, 3),
		RunE: func(cmd *cobra.Command, a []string) error {
			payload, err := g.readPayload(a, 2)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			o, err := c.AppendObservation(cmd.Context(), a[0], client.AppendObservationRequest{Kind: a[1], Payload: payload})
			if err != nil {
				return fmt.Errorf("append observation to %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, o)
			}
			_, err = fmt.Fprintln(g.stdout, o.Seq)
			return err
		},
	}
}

func newObsLsCmd(g *globals) *cobra.Command {
	var kind string
	var after int64
	var limit int
	cmd := &cobra.Command{
		Use:     "ls SANDBOX",
		Aliases: []string{"list"},
		Short:   "List a sandbox's observations by seq (after a cursor)",
		Example: `  stead obs ls agent-1
  stead obs ls agent-1 --kind metric --after 100 --limit 10`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if after < 0 || limit < 0 {
				return usageError{fmt.Errorf("--after and --limit must not be negative")}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			list := []client.Observation{}
			q := client.ObservationQuery{After: after, Kind: kind}
			for {
				q.Limit = 1000
				if limit > 0 {
					q.Limit = min(1000, limit-len(list))
				}
				page, err := c.ListObservations(cmd.Context(), a[0], q)
				if err != nil {
					return fmt.Errorf("list observations of %s: %w", a[0], err)
				}
				list = append(list, page.Observations...)
				if !page.More || (limit > 0 && len(list) >= limit) {
					break
				}
				q.After = page.Next
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			row(tw, "SEQ", "TIME", "KIND", "BY", "PAYLOAD")
			for _, o := range list {
				row(tw, strconv.FormatInt(o.Seq, 10), o.Time.Local().Format(time.DateTime), o.Kind, o.Principal, payloadCell(o.Payload))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "only observations of this kind")
	cmd.Flags().Int64Var(&after, "after", 0, "only observations with a seq greater than this")
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many (default: all)")
	return cmd
}

// newKVCmd is `stead kv` and its subcommands.
func newKVCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "Read and write a sandbox's key-value entries (JSON values, versioned)",
		Long: `Key-value entries hold a JSON value per key, kept by the daemon outside the
sandbox. An entry's version is 1 when created and grows by one per put;
--if-match N makes a put or rm succeed only if the entry is at version N
(0: the key must not exist), else it fails with exit code 4 and changes
nothing. Keys are letters, digits and . _ : @ + = , / - (without "..").`,
		Example: `  stead kv put agent-1 cfg/model '"opus"'
  stead kv put agent-1 counter 42 --if-match 3
  stead kv get agent-1 cfg/model
  stead kv ls agent-1 --prefix cfg/
  stead kv rm agent-1 cfg/model`,
	}
	group(cmd)
	cmd.AddCommand(newKVPutCmd(g), newKVGetCmd(g), newKVLsCmd(g), newKVRmCmd(g))
	return cmd
}

func newKVPutCmd(g *globals) *cobra.Command {
	var ifm int64
	cmd := &cobra.Command{
		Use:   "put SANDBOX KEY VALUE|-",
		Short: "Store a JSON value under a key",
		Example: `  stead kv put agent-1 cfg/model '"opus"'
  stead kv put agent-1 plan - --if-match 0 < plan.json`,
		Args: args(3, 3),
		RunE: func(cmd *cobra.Command, a []string) error {
			iv, err := ifMatch(cmd, ifm)
			if err != nil {
				return err
			}
			value, err := g.readPayload(a, 2)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			e, err := c.PutKV(cmd.Context(), a[0], a[1], value, iv)
			if err != nil {
				return fmt.Errorf("put key %s/%s: %w", a[0], a[1], err)
			}
			if g.json {
				return printJSON(g.stdout, e)
			}
			_, err = fmt.Fprintf(g.stdout, "%s: version %d\n", e.Key, e.Version)
			return err
		},
	}
	cmd.Flags().Int64Var(&ifm, "if-match", 0, "write only if the entry is at this version (0: the key must not exist)")
	return cmd
}

func newKVGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get SANDBOX KEY",
		Short: "Print the value under a key (with --json: the entry and its version)",
		Example: `  stead kv get agent-1 cfg/model
  stead kv get agent-1 cfg/model --json`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			e, err := c.GetKV(cmd.Context(), a[0], a[1])
			if err != nil {
				return fmt.Errorf("get key %s/%s: %w", a[0], a[1], err)
			}
			if g.json {
				return printJSON(g.stdout, e)
			}
			return g.printIndented("key "+a[1], e.Value)
		},
	}
}

func newKVLsCmd(g *globals) *cobra.Command {
	var prefix string
	var limit int
	cmd := &cobra.Command{
		Use:     "ls SANDBOX",
		Aliases: []string{"list"},
		Short:   "List a sandbox's entries by key, optionally under a prefix",
		Example: `  stead kv ls agent-1
  stead kv ls agent-1 --prefix cfg/`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if limit < 0 {
				return usageError{fmt.Errorf("--limit must not be negative")}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			list := []client.KVEntry{}
			q := client.KVQuery{Prefix: prefix}
			for {
				q.Limit = 1000
				if limit > 0 {
					q.Limit = min(1000, limit-len(list))
				}
				page, err := c.ListKV(cmd.Context(), a[0], q)
				if err != nil {
					return fmt.Errorf("list keys of %s: %w", a[0], err)
				}
				list = append(list, page.Entries...)
				if !page.More || (limit > 0 && len(list) >= limit) {
					break
				}
				q.After = page.Next
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			row(tw, "KEY", "VERSION", "UPDATED", "VALUE")
			for _, e := range list {
				row(tw, e.Key, strconv.FormatInt(e.Version, 10), ago(e.UpdatedAt), payloadCell(e.Value))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "only keys starting with this")
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many (default: all)")
	return cmd
}

func newKVRmCmd(g *globals) *cobra.Command {
	var ifm int64
	cmd := &cobra.Command{
		Use:     "rm SANDBOX KEY",
		Aliases: []string{"delete"},
		Short:   "Delete a key",
		Example: `  stead kv rm agent-1 cfg/model
  stead kv rm agent-1 lock --if-match 4`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			iv, err := ifMatch(cmd, ifm)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteKV(cmd.Context(), a[0], a[1], iv); err != nil {
				return fmt.Errorf("delete key %s/%s: %w", a[0], a[1], err)
			}
			return nil
		},
	}
	cmd.Flags().Int64Var(&ifm, "if-match", 0, "delete only if the entry is at this version")
	return cmd
}
