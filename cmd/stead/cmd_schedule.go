package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stead-dev/stead/client"
)

// scheduleRules is the part of the help every schedule command shares.
const scheduleRules = `Actions: start wakes the sandbox (starts it when stopped, resumes it when
paused; nothing when running); stop stops it with its service's stop hook
and grace period; restart stops it the same way, then starts it again (a
stopped sandbox is just started): the "monthly clean restart"; snapshot
takes a local snapshot labelled sched-<id>-<time>; push pushes a new
snapshot to the repository.

Times: a five-field cron expression (minute hour day-of-month month
day-of-week) or @yearly, @monthly, @weekly, @daily, @hourly, read in --tz
(an IANA zone such as Europe/Berlin; default UTC). The daemon checks every
15 seconds.

Missed runs: a run time that passed while the daemon was down runs once
when the daemon is back (not once per missed time); the schedule then
continues from the next time after that moment. A paused schedule does
not catch up either. A run on a deleted or archived sandbox is skipped;
a failed run is recorded (stead schedule ls shows it) and the schedule
goes on.`

// newScheduleCmd is `stead schedule` and its subcommands. Its old form,
// `stead schedule SANDBOX [--every ...]`, still shows or sets the backup
// policy, with a note that stead backup-policy is its name now.
func newScheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Run start, stop, restart, snapshot or push on a sandbox at cron times",
		Long: `A schedule runs an action on a sandbox at the times of a cron expression.

` + scheduleRules + `

(stead schedule SANDBOX --every ... was the backup policy's command: it
still works, and is stead backup-policy now.)`,
		Example: `  stead schedule add agent-1 --cron "0 3 1 * *" --action restart --tz Europe/Berlin
  stead schedule add agent-1 --cron @daily --action push
  stead schedule add agent-1 --cron "0 8 * * mon-fri" --action start
  stead schedule ls
  stead schedule ls agent-1
  stead schedule pause agent-1 sch-abc
  stead schedule rm agent-1 sch-abc`,
		Args: func(c *cobra.Command, a []string) error {
			if len(a) > 1 {
				return usageError{fmt.Errorf("unknown command %q for %q", a[0], c.CommandPath())}
			}
			return nil
		},
	}
	policy := backupPolicyFlags(g, cmd)
	cmd.Flags().VisitAll(func(f *pflag.Flag) { f.Hidden = true })
	cmd.RunE = func(c *cobra.Command, a []string) error {
		if len(a) == 0 {
			return c.Help()
		}
		fmt.Fprintf(g.stderr, "note: stead schedule %s is stead backup-policy %s now; stead schedule is for cron schedules (stead schedule --help)\n", a[0], a[0])
		return policy(c, a)
	}
	cmd.AddCommand(newScheduleAddCmd(g), newScheduleLsCmd(g), newScheduleRmCmd(g),
		newScheduleEnableCmd(g, "pause", false), newScheduleEnableCmd(g, "resume", true))
	return cmd
}

// newScheduleAddCmd is `stead schedule add`.
func newScheduleAddCmd(g *globals) *cobra.Command {
	var req client.CreateScheduleRequest
	cmd := &cobra.Command{
		Use:   "add SANDBOX --cron EXPR --action start|stop|restart|snapshot|push [--tz ZONE]",
		Short: "Add a schedule to a sandbox",
		Long:  "Add a schedule to a sandbox and show its next run times.\n\n" + scheduleRules,
		Example: `  stead schedule add agent-1 --cron "0 3 1 * *" --action restart --tz Europe/Berlin
  stead schedule add agent-1 --cron @monthly --action restart
  stead schedule add agent-1 --cron "30 2 * * *" --action snapshot
  stead schedule add agent-1 --cron "0 19 * * *" --action stop --disabled`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if req.Cron == "" || req.Action == "" {
				return usageError{fmt.Errorf("stead schedule add needs --cron and --action; usage: %s", cmd.UseLine())}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			sc, err := c.CreateSchedule(cmd.Context(), a[0], req)
			if err != nil {
				return fmt.Errorf("add schedule to %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, sc)
			}
			fmt.Fprintf(g.stdout, "schedule %s added: %s of %s at %q (%s)\n", sc.ID, sc.Action, a[0], sc.Cron, sc.TZ)
			if len(sc.NextRuns) == 0 {
				_, err = fmt.Fprintf(g.stdout, "paused: stead schedule resume %s %s starts it\n", a[0], sc.ID)
				return err
			}
			_, err = fmt.Fprintf(g.stdout, "next runs: %s\n", nextRunsStr(sc, ", "))
			return err
		},
	}
	cmd.Flags().StringVar(&req.Cron, "cron", "", `cron expression: five fields ("0 3 1 * *") or @yearly, @monthly, @weekly, @daily, @hourly`)
	cmd.Flags().StringVar(&req.Action, "action", "", "start, stop, restart, snapshot or push")
	cmd.Flags().StringVar(&req.TZ, "tz", "", "IANA time zone of the expression, e.g. Europe/Berlin (default UTC)")
	cmd.Flags().BoolVar(&req.Disabled, "disabled", false, "add it paused (stead schedule resume starts it)")
	return cmd
}

// newScheduleLsCmd is `stead schedule ls`.
func newScheduleLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls [SANDBOX]",
		Aliases: []string{"list"},
		Short:   "List schedules with their next 3 run times and last result",
		Long: `List the schedules of a sandbox, or of every sandbox, with the next three
run times (in each schedule's time zone) and how the last run went.`,
		Example: `  stead schedule ls
  stead schedule ls agent-1 --json`,
		Args: args(0, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var list []client.Schedule
			if len(a) == 1 {
				list, err = c.ListSchedules(cmd.Context(), a[0])
			} else {
				list, err = c.ListAllSchedules(cmd.Context())
			}
			if err != nil {
				return fmt.Errorf("list schedules: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			row(tw, "ID", "SANDBOX", "ACTION", "CRON", "TZ", "NEXT RUNS", "LAST RUN")
			for _, sc := range list {
				next := nextRunsStr(sc, ", ")
				if !sc.Enabled {
					next = "paused"
				}
				row(tw, sc.ID, orDash(sc.SandboxName), sc.Action, sc.Cron, sc.TZ, orDash(next), lastRunStr(sc))
			}
			return tw.Flush()
		},
	}
}

// newScheduleRmCmd is `stead schedule rm`.
func newScheduleRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm SANDBOX ID",
		Aliases: []string{"delete"},
		Short:   "Remove a schedule (a run in progress finishes)",
		Example: `  stead schedule rm agent-1 sch-abc`,
		Args:    args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteSchedule(cmd.Context(), a[0], a[1]); err != nil {
				return fmt.Errorf("remove schedule %s of %s: %w", a[1], a[0], err)
			}
			_, err = fmt.Fprintf(g.stdout, "schedule %s removed\n", a[1])
			return err
		},
	}
}

// newScheduleEnableCmd is `stead schedule pause` (enabled false) or
// `stead schedule resume` (true).
func newScheduleEnableCmd(g *globals, verb string, enabled bool) *cobra.Command {
	short := "Pause a schedule (it does not run until resumed)"
	if enabled {
		short = "Resume a paused schedule from its next run time after now (missed times are not run)"
	}
	return &cobra.Command{
		Use:     verb + " SANDBOX ID",
		Short:   short,
		Example: "  stead schedule " + verb + " agent-1 sch-abc",
		Args:    args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			sc, err := c.UpdateSchedule(cmd.Context(), a[0], a[1], client.UpdateScheduleRequest{Enabled: &enabled})
			if err != nil {
				return fmt.Errorf("%s schedule %s of %s: %w", verb, a[1], a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, sc)
			}
			if !enabled {
				_, err = fmt.Fprintf(g.stdout, "schedule %s paused\n", sc.ID)
				return err
			}
			_, err = fmt.Fprintf(g.stdout, "schedule %s resumed; next runs: %s\n", sc.ID, nextRunsStr(sc, ", "))
			return err
		},
	}
}

// nextRunsStr formats a schedule's next run times in its own time zone.
func nextRunsStr(sc client.Schedule, sep string) string {
	loc, err := time.LoadLocation(sc.TZ)
	if err != nil {
		loc = time.UTC
	}
	parts := make([]string, 0, len(sc.NextRuns))
	for _, t := range sc.NextRuns {
		parts = append(parts, t.In(loc).Format("2006-01-02 15:04 MST"))
	}
	return strings.Join(parts, sep)
}

// lastRunStr says when and how a schedule last ran.
func lastRunStr(sc client.Schedule) string {
	if sc.LastRunAt == nil {
		return "-"
	}
	s := sc.LastResult + " " + agoPtr(sc.LastRunAt)
	if sc.LastError != "" {
		s += ": " + sc.LastError
	}
	return s
}
