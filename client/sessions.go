package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// threadsPath returns the path of a sandbox's thread routes plus suffix.
func threadsPath(sandbox, suffix string) string {
	return sandboxPath(sandbox, "/threads") + suffix
}

// runPath returns the path of a run route: .../threads/runs/{run}/what.
func runPath(sandbox, run, what string) string {
	return threadsPath(sandbox, "/runs/"+url.PathEscape(run)+"/"+what)
}

// CreateThread creates a session-log thread in a sandbox. A taken name is a
// 409 (IsConflict).
func (c *Client) CreateThread(ctx context.Context, sandbox string, req CreateThreadRequest) (Thread, error) {
	var t Thread
	err := c.do(ctx, http.MethodPost, threadsPath(sandbox, ""), nil, req, &t)
	return t, err
}

// ListThreads lists a sandbox's threads, oldest first.
func (c *Client) ListThreads(ctx context.Context, sandbox string) ([]Thread, error) {
	list, err := listAll[Thread](ctx, c, threadsPath(sandbox, ""), nil)
	return list, err
}

// SetThreadRetention replaces a thread's (id or name) retention.
func (c *Client) SetThreadRetention(ctx context.Context, sandbox, thread string, r Retention) (Thread, error) {
	var t Thread
	err := c.do(ctx, http.MethodPut, threadsPath(sandbox, "/"+url.PathEscape(thread)+"/retention"), nil, r, &t)
	return t, err
}

// PruneThread applies a thread's retention to all its runs now.
func (c *Client) PruneThread(ctx context.Context, sandbox, thread string) (PruneResult, error) {
	var res PruneResult
	err := c.do(ctx, http.MethodPost, threadsPath(sandbox, "/"+url.PathEscape(thread)+"/prune"), nil, nil, &res)
	return res, err
}

// StartRun starts a new run of a thread (id or name).
func (c *Client) StartRun(ctx context.Context, sandbox, thread string) (Run, error) {
	var r Run
	err := c.do(ctx, http.MethodPost, threadsPath(sandbox, "/"+url.PathEscape(thread)+"/runs"), nil, nil, &r)
	return r, err
}

// ListRuns lists a thread's runs, oldest first.
func (c *Client) ListRuns(ctx context.Context, sandbox, thread string) ([]Run, error) {
	list, err := listAll[Run](ctx, c, threadsPath(sandbox, "/"+url.PathEscape(thread)+"/runs"), nil)
	return list, err
}

// EndRun ends a run with status ("" for completed). Ending an ended run is
// a 409 (IsConflict).
func (c *Client) EndRun(ctx context.Context, sandbox, run, status string) (Run, error) {
	var r Run
	err := c.do(ctx, http.MethodPost, runPath(sandbox, run, "end"), nil, EndRunRequest{Status: status}, &r)
	return r, err
}

// AppendEvent appends one event to a run and returns it as stored, with
// its seq. With an IdempotencyKey it is safe to retry.
func (c *Client) AppendEvent(ctx context.Context, sandbox, run string, e AppendEvent) (Event, error) {
	var res AppendEventsResult
	if err := c.do(ctx, http.MethodPost, runPath(sandbox, run, "events"), nil, AppendEventsRequest{AppendEvent: e}, &res); err != nil {
		return Event{}, err
	}
	if len(res.Events) != 1 {
		return Event{}, fmt.Errorf("append event: the daemon returned %d events for one", len(res.Events))
	}
	return res.Events[0], nil
}

// AppendEvents appends a batch (at most 1000 events) to a run in one
// transaction, all or nothing, and returns the stored events in order.
func (c *Client) AppendEvents(ctx context.Context, sandbox, run string, evs []AppendEvent) ([]Event, error) {
	var res AppendEventsResult
	if err := c.do(ctx, http.MethodPost, runPath(sandbox, run, "events"), nil, AppendEventsRequest{Events: evs}, &res); err != nil {
		return nil, err
	}
	return res.Events, nil
}

// ListEvents reads up to limit (0: 100) events of a run with seq > after;
// pass the page's Next as after to read on.
func (c *Client) ListEvents(ctx context.Context, sandbox, run string, after int64, limit int) (EventPage, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var page EventPage
	err := c.do(ctx, http.MethodGet, runPath(sandbox, run, "events"), q, nil, &page)
	return page, err
}

// FollowEvents streams a run's events with seq > after to fn as they are
// appended, until the run has ended and every event was delivered (it
// returns nil then), fn returns an error (returned as is), or ctx ends.
func (c *Client) FollowEvents(ctx context.Context, sandbox, run string, after int64, fn func(Event) error) error {
	q := url.Values{"follow": {"true"}}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: runPath(sandbox, run, "events"), query: q, accept: "text/event-stream"})
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var event string
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if len(data) == 0 {
				event = ""
				continue
			}
			payload := strings.Join(data, "\n")
			switch event {
			case "":
				var e Event
				if err := json.Unmarshal([]byte(payload), &e); err != nil {
					return fmt.Errorf("follow events of run %s: decode event: %w", run, err)
				}
				if err := fn(e); err != nil {
					return err
				}
			case "end":
				return nil
			case "error":
				var p struct {
					Error string `json:"error" doc:"What went wrong, if anything"`
				}
				_ = json.Unmarshal([]byte(payload), &p)
				return fmt.Errorf("follow events of run %s: %s", run, p.Error)
			}
			event, data = "", nil
		case strings.HasPrefix(line, ":"):
			// keep-alive comment
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("follow events of run %s: %w", run, ctx.Err())
		}
		return fmt.Errorf("follow events of run %s: %w", run, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("follow events of run %s: %w", run, ctx.Err())
	}
	return fmt.Errorf("follow events of run %s: the stream ended before the run did", run)
}

// ResumeRun returns where a resuming harness stands: the run's last safe
// point (its last checkpoint event, else its last event) and every tool
// intent without a result (in doubt).
func (c *Client) ResumeRun(ctx context.Context, sandbox, run string) (RunResume, error) {
	var res RunResume
	err := c.do(ctx, http.MethodGet, runPath(sandbox, run, "resume"), nil, nil, &res)
	return res, err
}
