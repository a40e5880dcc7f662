package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/files"
	"github.com/stead-dev/stead/internal/pool"
)

// defaultOrientFiles are the workspace notes an orient call shows.
var defaultOrientFiles = []string{"/workspace/decisions.md", "/workspace/plan.md"}

const (
	orientTailLines = 40
	orientTailBytes = 8 << 10
	maxOrientFiles  = 8
)

// Orient gathers what a resuming agent must read first (see
// api.OrientBackend). It never wakes a sandbox: an agent may orient a
// stopped sandbox's state. Its reads of the workspace notes are not file
// activity; the request itself is activity of a running sandbox when its
// own agent makes it (ActivityAPI, noted by the API layer).
func (s *Service) Orient(ctx context.Context, tenant, id string, paths []string, events int) (client.Orient, error) {
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return client.Orient{}, err
	}
	if len(paths) == 0 {
		paths = defaultOrientFiles
	}
	if len(paths) > maxOrientFiles {
		return client.Orient{}, fmt.Errorf("orient: at most %d files: %w", maxOrientFiles, errs.ErrInvalid)
	}
	if events < 0 || events > 200 {
		return client.Orient{}, fmt.Errorf("orient: events %d (0 to 200): %w", events, errs.ErrInvalid)
	}
	// Every list is a list, empty when there is nothing ("files": []).
	or := client.Orient{Sandbox: s.view(sb), StopReason: sb.StopReason, LastStoppedAt: sb.StoppedAt,
		Checkpoints: []client.CheckpointInfo{}, OpenTasks: []client.Task{}, Files: []client.OrientFile{}}
	cps, err := s.ListCheckpoints(ctx, tenant, sb.ID)
	if err != nil {
		return client.Orient{}, err
	}
	if cps != nil {
		or.Checkpoints = cps
	}
	page, err := s.ListTasks(ctx, tenant, sb.ID, client.TaskQuery{Open: true, Limit: 50})
	if err != nil {
		return client.Orient{}, err
	}
	if page.Tasks != nil {
		or.OpenTasks = page.Tasks
	}
	for _, p := range paths {
		f, err := s.tail(ctx, tenant, sb.ID, p)
		if errors.Is(err, errs.ErrNotFound) {
			continue
		}
		if err != nil {
			return client.Orient{}, err
		}
		or.Files = append(or.Files, f)
	}
	// The most recent run of any thread.
	threads, err := s.ListThreads(ctx, tenant, sb.ID)
	if err != nil {
		return client.Orient{}, err
	}
	var latest *client.Run
	for _, th := range threads {
		runs, err := s.ListRuns(ctx, tenant, sb.ID, th.ID)
		if err != nil {
			return client.Orient{}, err
		}
		for i := range runs {
			if latest == nil || runs[i].StartedAt.After(latest.StartedAt) {
				latest = &runs[i]
			}
		}
	}
	if latest != nil {
		res, err := s.ResumeRun(ctx, tenant, sb.ID, latest.ID)
		if err != nil {
			return client.Orient{}, err
		}
		or.Run = &res
		if events > 0 && latest.LastSeq > 0 {
			after := max(latest.LastSeq-int64(events), 0)
			page, err := s.ListRunEvents(ctx, tenant, sb.ID, latest.ID, after, events)
			if err != nil {
				return client.Orient{}, err
			}
			or.RecentEvents = page.Events
		}
	}
	or.Warnings = s.orientWarnings(ctx, tenant, sb)
	or.LargeStateFiles = s.largeStateFiles(ctx, tenant, sb)
	or.Text = orientText(or)
	return or, nil
}

// tail returns the last lines of a file in the sandbox, without counting
// as file activity.
func (s *Service) tail(ctx context.Context, tenant, id, p string) (client.OrientFile, error) {
	v, _, err := s.fsFor(ctx, tenant, id, p, false, false)
	if err != nil {
		return client.OrientFile{}, err
	}
	defer v.close()
	// The agent's own request reads what the agent could read itself.
	var rc io.ReadCloser
	var fi files.FileInfo
	err = s.asCaller(agentRequest(ctx), func() (err error) { rc, fi, err = v.root.ReadFile(v.inner); return err })
	if err != nil {
		return client.OrientFile{}, err
	}
	defer rc.Close()
	var b []byte
	truncated := false
	if fi.Size > orientTailBytes {
		if sk, ok := rc.(io.Seeker); ok {
			sk.Seek(fi.Size-orientTailBytes, io.SeekStart)
			truncated = true
		}
	}
	if b, err = io.ReadAll(io.LimitReader(rc, orientTailBytes*2)); err != nil {
		return client.OrientFile{}, err
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if truncated && len(lines) > 1 {
		lines = lines[1:] // the first line was cut by the seek
	}
	if len(lines) > orientTailLines {
		lines, truncated = lines[len(lines)-orientTailLines:], true
	}
	return client.OrientFile{Path: p, Tail: string(bytes.Join(lines, []byte("\n"))), Truncated: truncated}, nil
}

// orientText renders an orient result for a model's prompt.
func orientText(or client.Orient) string {
	var b strings.Builder
	sb := or.Sandbox
	fmt.Fprintf(&b, "# Where you stand (sandbox %s, %s)\n\n", sb.Name, sb.ID)
	fmt.Fprintf(&b, "State: %s.", sb.State)
	if or.LastStoppedAt != nil {
		fmt.Fprintf(&b, " Last stopped %s.", or.LastStoppedAt.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	if or.StopReason != "" {
		fmt.Fprintf(&b, " (reason: %s)", or.StopReason)
	}
	b.WriteString(" Files under /workspace, /data and /home/agent survived; /tmp did not.\n\n")
	if len(or.Warnings) > 0 || len(or.LargeStateFiles) > 0 {
		b.WriteString("## Space and limits\n")
		for _, w := range or.Warnings {
			fmt.Fprintf(&b, "- %s", w.Message)
			if len(w.LargestDirs) > 0 {
				b.WriteString("; the largest directories are ")
				for i, d := range w.LargestDirs {
					if i > 0 {
						b.WriteString(", ")
					}
					fmt.Fprintf(&b, "%s (%s)", d.Path, pool.FormatBytes(d.Bytes))
				}
			}
			b.WriteString(".\n")
		}
		for _, f := range or.LargeStateFiles {
			fmt.Fprintf(&b, "- %s is %s: state files this large are hard to checkpoint and back up; off-load or rotate its history.\n", f.Path, pool.FormatBytes(f.Bytes))
		}
		b.WriteString("\n")
	}
	b.WriteString("## Checkpoints\n")
	if len(or.Checkpoints) == 0 {
		b.WriteString("None saved.\n")
	}
	for _, c := range or.Checkpoints {
		name := c.Name
		if c.Agent != "" {
			name = c.Agent + "/" + c.Name
		}
		fmt.Fprintf(&b, "- %s: version %d, saved %s\n", name, c.Version, c.UpdatedAt.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	b.WriteString("\n## Open tasks\n")
	if len(or.OpenTasks) == 0 {
		b.WriteString("None.\n")
	}
	for _, t := range or.OpenTasks {
		fmt.Fprintf(&b, "- %s [%s]: %s\n", t.ID, t.State, clip(string(t.Payload), 200))
	}
	if r := or.Run; r != nil {
		fmt.Fprintf(&b, "\n## Last run %s (%s)\n", r.Run.ID, r.Run.Status)
		if r.SafePoint != nil {
			fmt.Fprintf(&b, "Last safe point: event %d (%s) at %s: %s\n", r.SafePoint.Seq, r.SafePoint.Type,
				r.SafePoint.Time.UTC().Format("15:04:05"), clip(string(r.SafePoint.Payload), 300))
		}
		if len(r.InDoubt) > 0 {
			b.WriteString("\nIN DOUBT — these tool calls were started but have no result; their side effects may or may not have happened. Check before repeating them:\n")
			for _, e := range r.InDoubt {
				fmt.Fprintf(&b, "- intent %d at %s: %s\n", e.Seq, e.Time.UTC().Format("15:04:05"), clip(string(e.Payload), 300))
			}
		}
		if len(or.RecentEvents) > 0 {
			b.WriteString("\nRecent events:\n")
			for _, e := range or.RecentEvents {
				fmt.Fprintf(&b, "- %d %s: %s\n", e.Seq, e.Type, clip(string(e.Payload), 200))
			}
		}
	}
	for _, f := range or.Files {
		fmt.Fprintf(&b, "\n## %s", f.Path)
		if f.Truncated {
			b.WriteString(" (last lines)")
		}
		fmt.Fprintf(&b, "\n%s\n", f.Tail)
	}
	return b.String()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
