package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newBackupPolicyCmd is `stead backup-policy SANDBOX`.
func newBackupPolicyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup-policy SANDBOX",
		Short: "Show or set a sandbox's push interval, retention and auto-archive",
		Long: `Without flags, show the sandbox's backup policy: how often it is pushed
(its recovery point objective), which pushed snapshots are kept, after how
long stopped it is archived, and when the last and next pushes are.

With flags, change just those settings (the others stay as they are).
--every 0 stops scheduled pushes; --archive-after 0 never archives. The
--keep-* rules are those of stead repo prune, which applies them.

(Cron schedules, e.g. a push every night at 03:00 or a monthly restart,
are stead schedule add.)`,
		Example: `  stead backup-policy agent-1
  stead backup-policy agent-1 --every 1h --keep-last 24 --keep-daily 7
  stead backup-policy agent-1 --archive-after 168h
  stead backup-policy agent-1 --every 0`,
		Args: args(1, 1),
	}
	cmd.RunE = backupPolicyFlags(g, cmd)
	return cmd
}

// backupPolicyFlags adds the backup policy flags to cmd and returns the
// RunE that shows or sets the policy of the sandbox a[0] (stead
// backup-policy, and the old form stead schedule SANDBOX).
func backupPolicyFlags(g *globals, cmd *cobra.Command) func(*cobra.Command, []string) error {
	var every, archiveAfter string
	var ret client.BackupRetention
	cmd.Flags().StringVar(&every, "every", "", "push every interval (Go duration, e.g. 1h; 0 disables)")
	cmd.Flags().StringVar(&archiveAfter, "archive-after", "", "archive the sandbox once stopped this long (e.g. 168h; 0 never)")
	addRetentionFlags(cmd, &ret)
	return func(cmd *cobra.Command, a []string) error {
		if err := checkDuration("--every", every); err != nil {
			return err
		}
		if err := checkDuration("--archive-after", archiveAfter); err != nil {
			return err
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		p, err := c.GetBackupPolicy(cmd.Context(), a[0])
		if err != nil {
			return fmt.Errorf("get backup policy of %s: %w", a[0], err)
		}
		if anyChanged(cmd, "every", "archive-after", "keep-last", "keep-hourly",
			"keep-daily", "keep-weekly", "keep-monthly", "keep-within") {
			mergePolicy(cmd, &p, every, archiveAfter, ret)
			if p, err = c.SetBackupPolicy(cmd.Context(), a[0], p); err != nil {
				return fmt.Errorf("set backup policy of %s: %w", a[0], err)
			}
		}
		if g.json {
			return printJSON(g.stdout, p)
		}
		return g.printPolicy(p)
	}
}

// anyChanged reports whether any of the named flags was given.
func anyChanged(cmd *cobra.Command, names ...string) bool {
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			return true
		}
	}
	return false
}

// mergePolicy sets in p the settings whose flags were given.
func mergePolicy(cmd *cobra.Command, p *client.BackupPolicy, every, archiveAfter string, r client.BackupRetention) {
	f := cmd.Flags()
	if f.Changed("every") {
		p.Interval = every
	}
	if f.Changed("archive-after") {
		p.ArchiveAfter = archiveAfter
	}
	if f.Changed("keep-last") {
		p.Retention.KeepLast = r.KeepLast
	}
	if f.Changed("keep-hourly") {
		p.Retention.Hourly = r.Hourly
	}
	if f.Changed("keep-daily") {
		p.Retention.Daily = r.Daily
	}
	if f.Changed("keep-weekly") {
		p.Retention.Weekly = r.Weekly
	}
	if f.Changed("keep-monthly") {
		p.Retention.Monthly = r.Monthly
	}
	if f.Changed("keep-within") {
		p.Retention.Within = r.Within
	}
}

// backupRetentionStr describes a retention policy in one line.
func backupRetentionStr(r client.BackupRetention) string {
	var parts []string
	add := func(n int, what string) {
		if n > 0 {
			parts = append(parts, what+" "+strconv.Itoa(n))
		}
	}
	add(r.KeepLast, "last")
	add(r.Hourly, "hourly")
	add(r.Daily, "daily")
	add(r.Weekly, "weekly")
	add(r.Monthly, "monthly")
	if r.Within != "" {
		parts = append(parts, "within "+r.Within)
	}
	if len(parts) == 0 {
		return "keep everything"
	}
	return strings.Join(parts, ", ")
}

// printPolicy prints a backup policy as a key/value block.
func (g *globals) printPolicy(p client.BackupPolicy) error {
	every := p.Interval
	if every == "" || every == "0" || every == "0s" {
		every = "off (push by hand with stead push)"
	}
	archive := p.ArchiveAfter
	switch archive {
	case "":
		archive = "default"
	case "0", "0s":
		archive = "never"
	default:
		archive = "after " + archive + " stopped"
	}
	last := agoPtr(p.LastPush)
	if p.LastPushID != "" {
		last += " (" + shortID(p.LastPushID) + ")"
	}
	tw := newTable(g.stdout)
	row(tw, "Push every:", every)
	row(tw, "Keep:", backupRetentionStr(p.Retention))
	row(tw, "Archive:", archive)
	row(tw, "Last push:", last)
	if p.NextPush != nil {
		row(tw, "Next push:", p.NextPush.Local().Format(remoteTimeLayout))
	}
	return tw.Flush()
}
