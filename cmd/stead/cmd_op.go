package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// noWaitUsage is the help of every long verb's --no-wait flag.
const noWaitUsage = "print the operation id and return at once (follow it with stead op ID --wait)"

// newOpCmd is `stead op ID`.
func newOpCmd(g *globals) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:     "op OPERATION",
		Aliases: []string{"operation"},
		Short:   "Show a long operation (push, restore, check ...) or wait for it",
		Long: `Long verbs (push, pull, restore, drill, archive, repo check, repo prune)
run as operations in the daemon. stead op shows one: its kind, target,
state, progress and, once it has ended, its result. With --wait it follows
the operation with a progress bar until it ends, then prints the result as
the verb would have; the exit code is 1 if the operation failed.

Operations live in the daemon's memory: they are forgotten an hour after
they end and on a daemon restart (what they did is not).`,
		Example: `  op=$(stead push agent-1 --no-wait) && stead op "$op" --wait
  stead op op-3fz6q2kd
  stead op op-3fz6q2kd --json`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			op, err := c.GetOperation(cmd.Context(), a[0])
			if err != nil {
				return fmt.Errorf("get operation %s: %w", a[0], err)
			}
			if wait {
				return g.finishOperation(cmd, c, opLabel(op), op, false, g.resultPrinter(op.Kind))
			}
			if g.json {
				return printJSON(g.stdout, op)
			}
			return g.printOperation(op)
		},
	}
	cmd.Flags().BoolVarP(&wait, "wait", "w", false, "follow the operation until it ends, then print its result")
	return cmd
}

// opLabel names an operation for its progress line: "push sb-1".
func opLabel(op client.Operation) string {
	if op.Target == "" {
		return op.Kind
	}
	return op.Kind + " " + op.Target
}

// finishOperation is what every long verb does once the daemon has
// started its operation: with noWait print its id (or JSON) and return;
// else follow it with a progress bar on stderr until it ends, then print
// the final operation (with --json) or the result through print. A failed
// operation is an error (exit 1) that carries the operation's own error.
func (g *globals) finishOperation(cmd *cobra.Command, c *client.Client, label string, op client.Operation, noWait bool,
	print func(client.Operation) error) error {
	ctx := cmd.Context()
	if noWait {
		if g.json {
			return printJSON(g.stdout, op)
		}
		if _, err := fmt.Fprintln(g.stdout, op.ID); err != nil {
			return err
		}
		fmt.Fprintf(g.stderr, "%s: started as operation %s; follow it with: stead op %s --wait\n", label, op.ID, op.ID)
		return nil
	}
	bar := newProgressBar(g.stderr, label)
	final, err := c.WaitOperation(ctx, op, bar.Update)
	if err != nil {
		bar.Abort()
		if ctx.Err() != nil {
			return fmt.Errorf("%s: stopped following operation %s, which carries on in the daemon (stead op %s --wait): %w",
				label, op.ID, op.ID, ctx.Err())
		}
		return fmt.Errorf("%s: %w", label, err)
	}
	bar.Finish(final)
	if g.json {
		if err := printJSON(g.stdout, final); err != nil {
			return err
		}
	}
	if final.State == client.OperationFailed {
		if !g.json && len(final.Result) > 0 && string(final.Result) != "null" {
			// A result with a failure (a check that found errors) says what.
			if err := print(final); err != nil {
				return err
			}
		}
		return fmt.Errorf("%s failed (operation %s): %s", label, final.ID, orDash(final.Error))
	}
	if g.json {
		return nil
	}
	return print(final)
}

// resultPrinter returns the printer of an operation kind's result.
func (g *globals) resultPrinter(kind string) func(client.Operation) error {
	switch kind {
	case "push":
		return g.printPushResult
	case "restore":
		return g.printRestoreResult
	case "pull":
		return g.printPullResult
	case "check":
		return g.printCheckResult
	case "repair":
		return g.printRepairResult
	case "prune":
		return g.printPruneResult
	case "drill":
		return g.printDrillResult
	case "archive":
		return g.printArchiveResult
	}
	return g.printOperation
}

// printOperation prints an operation as a key/value block, its result
// (indented JSON) included once it has ended.
func (g *globals) printOperation(op client.Operation) error {
	tw := newTable(g.stdout)
	row(tw, "ID:", op.ID)
	row(tw, "Kind:", op.Kind)
	row(tw, "Target:", orDash(op.Target))
	row(tw, "State:", op.State)
	if op.Progress != nil && !op.Done() {
		row(tw, "Progress:", progressLine(opLabel(op), op, false))
	}
	row(tw, "Started:", ago(op.StartedAt))
	if op.EndedAt != nil {
		row(tw, "Ended:", fmt.Sprintf("%s (took %s)", ago(*op.EndedAt), roundDuration(op.EndedAt.Sub(op.StartedAt))))
	}
	if op.Error != "" {
		row(tw, "Error:", oneLine(op.Error))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(op.Result) == 0 || string(op.Result) == "null" {
		return nil
	}
	var b bytes.Buffer
	if err := json.Indent(&b, op.Result, "  ", "  "); err != nil {
		b.Reset()
		b.Write(op.Result)
	}
	_, err := fmt.Fprintf(g.stdout, "Result:\n  %s\n", b.String())
	return err
}

// seconds formats a duration given in seconds for people.
func seconds(s float64) string {
	return roundDuration(time.Duration(s * float64(time.Second))).String()
}

// shortID cuts a remote snapshot id to the 8 digits restic shows.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
