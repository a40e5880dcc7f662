package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// MaxAppendBodyBytes caps the body of an event append (a batch of up to
// 1000 events, each payload at most 256 KiB).
const MaxAppendBodyBytes = 16 << 20

// followKeepAlive is how often a followed event stream gets a comment line
// (and is re-read, in case another process appended).
const followKeepAlive = 15 * time.Second

// followPage is how many events a follower reads per query.
const followPage = 1000

// ThreadRef is the {thread} path parameter of the thread routes (exported
// only because huma ignores unexported embedded fields).
type ThreadRef struct {
	SandboxRef
	Thread string `path:"thread" minLength:"1" maxLength:"128" doc:"Thread id (th-...) or name"`
}

// RunRef is the {run} path parameter of the run routes.
type RunRef struct {
	SandboxRef
	Run string `path:"run" minLength:"1" maxLength:"128" doc:"Run id (run-...)"`
}

// registerSessionRoutes adds the session-log routes
// (/v1/sandboxes/{id}/threads...) when the backend implements
// SessionBackend.
func (s *server) registerSessionRoutes(b Backend) {
	sb, ok := b.(SessionBackend)
	if !ok {
		return
	}
	const tag = "sessions"
	const base = "/v1/sandboxes/{id}/threads"

	ct := s.agentOp(agentOwnSandbox, http.MethodPost, base, "create-thread", "Create a session-log thread in a sandbox", tag, http.StatusCreated)
	ct.Description = "A thread is a named conversation of an agent: a sequence of runs, each an append-only event log. " +
		"The retention (keep_last events per run and/or keep_within_seconds) is applied on every append; " +
		"a run's newest event, newest checkpoint event and in-doubt tool intents are always kept."
	ct.Errors = append(ct.Errors, http.StatusConflict)
	huma.Register(s.api, ct, func(ctx context.Context, in *struct {
		SandboxRef
		Body client.CreateThreadRequest
	}) (*out[client.Thread], error) {
		const op = "create thread"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		t, err := sb.CreateThread(ctx, p, in.ID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Thread]{Body: t}, nil
	})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodGet, base, "list-threads", "List a sandbox's session-log threads, oldest first", tag, 0),
		func(ctx context.Context, in *struct {
			SandboxRef
			PageQuery
		}) (*out[client.Page[client.Thread]], error) {
			const op = "list threads"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			list, err := sb.ListThreads(ctx, p.TenantID, in.ID)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			if list == nil {
				list = []client.Thread{}
			}
			return pageOf(list, in.PageQuery)
		})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodPut, base+"/{thread}/retention", "set-thread-retention",
		"Replace a thread's event retention (applied from the next append or prune on)", tag, 0),
		func(ctx context.Context, in *struct {
			ThreadRef
			Body client.Retention
		}) (*out[client.Thread], error) {
			const op = "set thread retention"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			t, err := sb.SetThreadRetention(ctx, p, in.ID, in.Thread, in.Body)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return &out[client.Thread]{Body: t}, nil
		})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodPost, base+"/{thread}/prune", "prune-thread",
		"Apply a thread's retention to all its runs now", tag, 0),
		func(ctx context.Context, in *ThreadRef) (*out[client.PruneResult], error) {
			const op = "prune thread"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			res, err := sb.PruneThread(ctx, p, in.ID, in.Thread)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return &out[client.PruneResult]{Body: res}, nil
		})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodPost, base+"/{thread}/runs", "start-run", "Start a run of a thread", tag, http.StatusCreated),
		func(ctx context.Context, in *ThreadRef) (*out[client.Run], error) {
			const op = "start run"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			r, err := sb.StartRun(ctx, p, in.ID, in.Thread)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return &out[client.Run]{Body: r}, nil
		})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodGet, base+"/{thread}/runs", "list-runs", "List a thread's runs, oldest first", tag, 0),
		func(ctx context.Context, in *struct {
			ThreadRef
			PageQuery
		}) (*out[client.Page[client.Run]], error) {
			const op = "list runs"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			list, err := sb.ListRuns(ctx, p.TenantID, in.ID, in.Thread)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			if list == nil {
				list = []client.Run{}
			}
			return pageOf(list, in.PageQuery)
		})

	ap := s.agentOp(agentOwnSandbox, http.MethodPost, base+"/runs/{run}/events", "append-events",
		"Append events to a run: one, or a batch stored all or nothing; returns them with their seqs", tag, 0)
	ap.Description = "The body is one event ({\"type\": ..., \"payload\": ...}) or a batch ({\"events\": [...]}, at most 1000). " +
		"A batch is one durable transaction: every event is stored, numbered with the run's next seqs, or none is. " +
		"An event whose idempotency_key the run already holds is not stored again: the stored event is returned in its place " +
		"(409 if the key was used for a different event). A tool_result names in intent the seq of its tool_intent. " +
		"Appending to an ended run is 409."
	ap.MaxBodyBytes = MaxAppendBodyBytes
	ap.Errors = append(ap.Errors, http.StatusConflict, http.StatusRequestEntityTooLarge)
	huma.Register(s.api, ap, func(ctx context.Context, in *struct {
		RunRef
		Body client.AppendEventsRequest
	}) (*out[client.AppendEventsResult], error) {
		const op = "append events"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		evs := in.Body.Events
		single := !reflect.DeepEqual(in.Body.AppendEvent, client.AppendEvent{})
		switch {
		case single && len(evs) > 0:
			return nil, s.fail(ctx, op, fmt.Errorf("send either one event or a batch in events, not both: %w", errs.ErrInvalid))
		case single:
			evs = []client.AppendEvent{in.Body.AppendEvent}
		case len(evs) == 0:
			return nil, s.fail(ctx, op, fmt.Errorf("no event: send {\"type\": ..., \"payload\": ...} or {\"events\": [...]}: %w", errs.ErrInvalid))
		}
		stored, err := sb.AppendRunEvents(ctx, p, in.ID, in.Run, evs)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.AppendEventsResult]{Body: client.AppendEventsResult{Events: stored}}, nil
	})

	le := s.agentOp(agentOwnSandbox, http.MethodGet, base+"/runs/{run}/events", "list-events",
		"Read a run's events after a cursor; with follow=true, stream them live (SSE)", tag, http.StatusOK)
	le.Description = "Without follow: a page of at most limit events with seq > after, and next, the cursor of the following page. " +
		"With follow=true: a text/event-stream of every event with seq > after (or > Last-Event-ID), then each new one as it is appended; " +
		"each SSE message has id: seq and data: the event as JSON. When the run has ended and every event was sent, " +
		"an `end` message carries the run and the stream closes. Comment lines keep the connection alive."
	pageSchema := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[client.EventPage](), true, "")
	le.Responses = map[string]*huma.Response{
		"200": {
			Description: "A page of events (JSON), or with follow=true an event stream",
			Content: map[string]*huma.MediaType{
				"application/json":  {Schema: pageSchema},
				"text/event-stream": {Schema: &huma.Schema{Type: "string"}},
			},
		},
	}
	huma.Register(s.api, le, func(ctx context.Context, in *struct {
		RunRef
		After       int64  `query:"after" minimum:"0" doc:"Cursor: return events with seq greater than this (0: from the start)"`
		Limit       int    `query:"limit" minimum:"0" maximum:"1000" doc:"Page size (default 100); ignored with follow"`
		Follow      bool   `query:"follow" doc:"Keep the response open and stream events as they are appended (SSE)"`
		LastEventID string `header:"Last-Event-ID" doc:"SSE reconnection: resume after this seq (overrides after)"`
	}) (*huma.StreamResponse, error) {
		const op = "list events"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		after := in.After
		if h := strings.TrimSpace(in.LastEventID); h != "" {
			v, err := strconv.ParseInt(h, 10, 64)
			if err != nil || v < 0 {
				return nil, s.fail(ctx, op, fmt.Errorf("Last-Event-ID %q: want a seq: %w", h, errs.ErrInvalid))
			}
			after = v
		}
		if !in.Follow {
			page, err := sb.ListRunEvents(ctx, p.TenantID, in.ID, in.Run, after, in.Limit)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return &huma.StreamResponse{Body: func(hc huma.Context) {
				_, w := humago.Unwrap(hc)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				_ = json.NewEncoder(w).Encode(page)
			}}, nil
		}
		changed, err := sb.WatchRun(ctx, p.TenantID, in.ID, in.Run)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			r, w := humago.Unwrap(hc)
			if err := s.followEvents(r.Context(), w, sb, p.TenantID, in.ID, in.Run, after, changed); err != nil && r.Context().Err() == nil {
				s.log.Log(r.Context(), logLevelFor(err), "follow events", "sandbox", in.ID, "run", in.Run, "tenant", p.TenantID, "err", err)
			}
		}}, nil
	})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodGet, base+"/runs/{run}/resume", "resume-run",
		"Where a resuming harness stands: the last safe point and every in-doubt tool intent", tag, 0),
		func(ctx context.Context, in *RunRef) (*out[client.RunResume], error) {
			const op = "resume run"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			res, err := sb.ResumeRun(ctx, p.TenantID, in.ID, in.Run)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return &out[client.RunResume]{Body: res}, nil
		})

	end := s.agentOp(agentOwnSandbox, http.MethodPost, base+"/runs/{run}/end", "end-run", "End a run (completed by default); it then takes no more events", tag, 0)
	end.Errors = append(end.Errors, http.StatusConflict)
	huma.Register(s.api, end, func(ctx context.Context, in *struct {
		RunRef
		Body *client.EndRunRequest
	}) (*out[client.Run], error) {
		const op = "end run"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		var req client.EndRunRequest
		if in.Body != nil {
			req = *in.Body
		}
		r, err := sb.EndRun(ctx, p, in.ID, in.Run, req)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Run]{Body: r}, nil
	})
}

// followEvents streams a run's events with seq > after as server-sent
// events until the run has ended and everything was sent, or ctx ends.
func (s *server) followEvents(ctx context.Context, w http.ResponseWriter, sb SessionBackend, tenant, sandbox, run string,
	after int64, changed func() <-chan struct{}) error {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	keepAlive := time.NewTicker(followKeepAlive)
	defer keepAlive.Stop()
	for {
		wake := changed() // before reading, so no append slips between
		page, err := sb.ListRunEvents(ctx, tenant, sandbox, run, after, followPage)
		if err != nil {
			return writeSSE(w, rc, "error", "", map[string]string{"error": err.Error()})
		}
		for _, e := range page.Events {
			if err := writeSSE(w, rc, "", strconv.FormatInt(e.Seq, 10), e); err != nil {
				return err
			}
		}
		after = page.Next
		if page.More {
			continue
		}
		if page.RunStatus != "" && page.RunStatus != "running" {
			return writeSSE(w, rc, "end", "", map[string]any{"run": run, "status": page.RunStatus, "last_seq": after})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return fmt.Errorf("write keep-alive: %w", err)
			}
			if err := rc.Flush(); err != nil {
				return fmt.Errorf("flush: %w", err)
			}
		}
	}
}

// writeSSE writes one server-sent event and flushes it.
func writeSSE(w http.ResponseWriter, rc *http.ResponseController, event, id string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	var b strings.Builder
	if event != "" {
		b.WriteString("event: " + event + "\n")
	}
	if id != "" {
		b.WriteString("id: " + id + "\n")
	}
	b.WriteString("data: ")
	b.Write(data)
	b.WriteString("\n\n")
	if _, err := w.Write([]byte(b.String())); err != nil {
		return fmt.Errorf("write event: %w", err)
	}
	if err := rc.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}
