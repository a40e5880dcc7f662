package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/stead-dev/stead/client"
)

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("print json: %w", err)
	}
	return nil
}

// newTable returns a tabwriter for aligned columns; the caller flushes it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// row writes tab-separated cells and a newline.
func row(w io.Writer, cells ...string) {
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// bytesStr formats a byte count for people ("-" for 0).
func bytesStr(n int64) string {
	if n <= 0 {
		return "-"
	}
	return humanize.IBytes(uint64(n))
}

// ago formats a time as an age ("3 minutes ago"); "-" for zero.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return humanize.Time(t)
}

// agoPtr is ago for optional times.
func agoPtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return ago(*t)
}

// failoverStr says what a node loss costs a sandbox: its policy and the
// time of its last push (its RPO).
func failoverStr(sb client.Sandbox) string {
	switch {
	case sb.Failover == client.FailoverNone:
		return "none (stays lost with its node)"
	case sb.LastPushAt == nil:
		return "restore, but never pushed: nothing to restore (stead push, or a push interval)"
	}
	return "restore from the last push, " + ago(*sb.LastPushAt) + " (files written since are lost with the node)"
}

// printSandbox prints one sandbox as JSON or as a key/value block.
func (g *globals) printSandbox(sb client.Sandbox) error {
	if g.json {
		return printJSON(g.stdout, sb)
	}
	tw := newTable(g.stdout)
	row(tw, "ID:", sb.ID)
	row(tw, "Name:", sb.Name)
	row(tw, "State:", sb.State)
	if sb.StopReason != "" {
		row(tw, "Stop reason:", sb.StopReason)
	}
	row(tw, "Template:", orDash(sb.Template))
	row(tw, "Instance type:", orDash(sb.InstanceType))
	row(tw, "Limits:", fmt.Sprintf("%g CPU, %s memory, %d pids, %s disk",
		sb.Limits.CPUs, bytesStr(sb.Limits.MemoryBytes), sb.Limits.Pids, bytesStr(sb.Limits.DiskBytes)))
	row(tw, "Idle timeout:", fmt.Sprintf("%s (then %s)", orDash(sb.IdleTimeout), orDash(sb.OnIdle)))
	if sb.MaxRuntime != "" {
		row(tw, "Max runtime:", sb.MaxRuntime)
	}
	if sb.Service != nil {
		row(tw, "Service:", strings.Join(sb.Service.Command, " "))
		row(tw, "Restart:", orDash(sb.Service.Restart))
		if l := sb.Service.Log; l != nil && l.Keep != nil {
			row(tw, "Log rotation:", logRotationStr(*l))
		}
	}
	row(tw, "Address:", orDash(sb.Address))
	row(tw, "Network:", policyLine(sb.Network))
	row(tw, "Auto-resume:", yesNo(sb.AutoResume))
	row(tw, "Failover:", failoverStr(sb))
	for i, m := range sb.Volumes {
		label := ""
		if i == 0 {
			label = "Volumes:"
		}
		row(tw, label, volumeMountStr(m))
	}
	for i, r := range sb.Secrets {
		label := ""
		if i == 0 {
			label = "Secrets:"
		}
		row(tw, label, secretRefStr(r))
	}
	row(tw, "Created:", ago(sb.CreatedAt))
	row(tw, "Started:", agoPtr(sb.StartedAt))
	row(tw, "Stopped:", agoPtr(sb.StoppedAt))
	if sb.DeletedAt != nil {
		row(tw, "Deleted:", agoPtr(sb.DeletedAt))
		row(tw, "Purged:", agoPtr(sb.PurgeAt))
	}
	for i, w := range sb.Warnings {
		label := ""
		if i == 0 {
			label = "Warnings:"
		}
		row(tw, label, w.Message)
	}
	for i, f := range sb.LargeStateFiles {
		label := ""
		if i == 0 {
			label = "Large state files:"
		}
		row(tw, label, fmt.Sprintf("%s %s (off-load or rotate its history)", f.Path, bytesStr(f.Bytes)))
	}
	if sb.DeleteAt != nil { // an archived sandbox under a delete_archived_after retention
		row(tw, "Deleted by retention:", agoPtr(sb.DeleteAt))
	}
	return tw.Flush()
}

// warningsBrief is the WARNINGS cell of a sandbox list: "disk 92%,
// memory 81%", or "-".
func warningsBrief(ws []client.LimitWarning) string {
	if len(ws) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(ws))
	for _, w := range ws {
		what := w.Resource
		if w.Resource == client.LimitVolume && w.Path != "" {
			what = w.Path
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", what, w.Percent))
	}
	return strings.Join(parts, ", ")
}

// printState prints the outcome of a lifecycle verb: the sandbox as JSON,
// or one line "NAME (ID): STATE".
func (g *globals) printState(sb client.Sandbox) error {
	if g.json {
		return printJSON(g.stdout, sb)
	}
	name := sb.Name
	if name == "" || name == sb.ID {
		name = sb.ID
	} else {
		name += " (" + sb.ID + ")"
	}
	_, err := fmt.Fprintf(g.stdout, "%s: %s\n", name, sb.State)
	return err
}
