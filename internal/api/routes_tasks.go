package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// TaskRef is the {task} path parameter of the task routes (exported only
// because huma ignores unexported embedded fields).
type TaskRef struct {
	SandboxRef
	Task string `path:"task" minLength:"1" maxLength:"128" doc:"Task id"`
}

// KVRef is the {key} path parameter of the key-value routes.
type KVRef struct {
	SandboxRef
	Key string `path:"key" minLength:"1" maxLength:"256" doc:"Key, URL-escaped ('/' as %2F): letters, digits and . _ : @ + = , / -, without \"..\""`
}

// kvOut is a key-value entry with its version as ETag.
type kvOut struct {
	ETag string `header:"ETag" doc:"The version, quoted; usable as If-Match"`
	Body client.KVEntry
}

// registerTaskRoutes adds the structured-state routes
// (/v1/sandboxes/{id}/tasks, .../observations, .../kv) when the backend
// implements TaskBackend.
func (s *server) registerTaskRoutes(b Backend) {
	tb, ok := b.(TaskBackend)
	if !ok {
		return
	}
	s.registerTasks(tb)
	s.registerObservations(tb)
	s.registerKV(tb)
}

// registerTasks adds the /v1/sandboxes/{id}/tasks routes.
func (s *server) registerTasks(tb TaskBackend) {
	const tag = "tasks"
	const base = "/v1/sandboxes/{id}/tasks"

	ct := s.agentOp(agentOwnSandbox, http.MethodPost, base, "create-task", "Create an open task in a sandbox", tag, http.StatusCreated)
	ct.Description = "A task has an id (given, or generated as task-...), a state and a JSON payload (at most 256 KiB). " +
		"It is created open and moves open → in_progress → done | failed | cancelled; a finished task may be reopened. " +
		"A taken id is 409."
	ct.Errors = append(ct.Errors, http.StatusConflict)
	huma.Register(s.api, ct, func(ctx context.Context, in *struct {
		SandboxRef
		Body client.CreateTaskRequest
	}) (*out[client.Task], error) {
		const op = "create task"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		t, err := tb.CreateTask(ctx, p, in.ID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Task]{Body: t}, nil
	})

	lt := s.agentOp(agentOwnSandbox, http.MethodGet, base, "list-tasks", "List a sandbox's tasks: open ones, by state, created after a time", tag, 0)
	lt.Description = "Tasks are ordered by creation time, then id. open=true selects open and in_progress tasks; " +
		"state selects one or more states (comma-separated); created_after selects tasks created strictly after an RFC 3339 time. " +
		"Pass a page's next as after to read the following page."
	huma.Register(s.api, lt, func(ctx context.Context, in *struct {
		SandboxRef
		State        []string `query:"state" doc:"Only tasks in these states (comma-separated: open, in_progress, done, failed, cancelled)"`
		Open         bool     `query:"open" doc:"Only open tasks (open or in_progress)"`
		CreatedAfter string   `query:"created_after" doc:"Only tasks created strictly after this RFC 3339 time"`
		After        string   `query:"after" maxLength:"128" doc:"Cursor: the next of the previous page"`
		Limit        int      `query:"limit" minimum:"0" maximum:"1000" doc:"Page size (default 100)"`
	}) (*out[client.TaskPage], error) {
		const op = "list tasks"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		q := client.TaskQuery{States: in.State, Open: in.Open, After: in.After, Limit: in.Limit}
		if in.CreatedAfter != "" {
			if q.CreatedAfter, err = time.Parse(time.RFC3339Nano, in.CreatedAfter); err != nil {
				return nil, s.fail(ctx, op, fmt.Errorf("created_after %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z: %w",
					in.CreatedAfter, errs.ErrInvalid))
			}
		}
		page, err := tb.ListTasks(ctx, p.TenantID, in.ID, q)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if page.Tasks == nil {
			page.Tasks = []client.Task{}
		}
		return &out[client.TaskPage]{Body: page}, nil
	})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodGet, base+"/{task}", "get-task", "Read a task", tag, 0),
		func(ctx context.Context, in *TaskRef) (*out[client.Task], error) {
			const op = "get task"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			t, err := tb.GetTask(ctx, p.TenantID, in.ID, in.Task)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return &out[client.Task]{Body: t}, nil
		})

	st := s.agentOp(agentOwnSandbox, http.MethodPost, base+"/{task}/state", "set-task-state", "Move a task to another state (optionally only from an expected state)", tag, 0)
	st.Description = "Legal moves: open → in_progress; in_progress → done, failed or cancelled; done, failed or cancelled → open. " +
		"Any other move is 409, as is an if_state the task is not in; nothing changes then. " +
		"A payload replaces the task's payload in the same transaction."
	st.Errors = append(st.Errors, http.StatusConflict)
	huma.Register(s.api, st, func(ctx context.Context, in *struct {
		TaskRef
		Body client.SetTaskStateRequest
	}) (*out[client.Task], error) {
		const op = "set task state"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		t, err := tb.SetTaskState(ctx, p, in.ID, in.Task, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Task]{Body: t}, nil
	})
}

// registerObservations adds the /v1/sandboxes/{id}/observations routes.
func (s *server) registerObservations(tb TaskBackend) {
	const tag = "observations"
	const base = "/v1/sandboxes/{id}/observations"

	ao := s.agentOp(agentOwnSandbox, http.MethodPost, base, "append-observation", "Append an observation to a sandbox's append-only log", tag, http.StatusCreated)
	ao.Description = "Observations have a seq (1, 2, 3 ... per sandbox), the server's time, a kind, the API key that appended them " +
		"and a JSON payload (at most 256 KiB). They cannot be changed or deleted."
	ao.Errors = append(ao.Errors, http.StatusConflict)
	huma.Register(s.api, ao, func(ctx context.Context, in *struct {
		SandboxRef
		Body client.AppendObservationRequest
	}) (*out[client.Observation], error) {
		const op = "append observation"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		o, err := tb.AppendObservation(ctx, p, in.ID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Observation]{Body: o}, nil
	})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodGet, base, "list-observations", "Read a sandbox's observations after a cursor, by seq", tag, 0),
		func(ctx context.Context, in *struct {
			SandboxRef
			After int64  `query:"after" minimum:"0" doc:"Cursor: observations with seq greater than this (0: from the start)"`
			Kind  string `query:"kind" maxLength:"128" doc:"Only observations of this kind"`
			Limit int    `query:"limit" minimum:"0" maximum:"1000" doc:"Page size (default 100)"`
		}) (*out[client.ObservationPage], error) {
			const op = "list observations"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			page, err := tb.ListObservations(ctx, p.TenantID, in.ID, client.ObservationQuery{After: in.After, Kind: in.Kind, Limit: in.Limit})
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			if page.Observations == nil {
				page.Observations = []client.Observation{}
			}
			return &out[client.ObservationPage]{Body: page}, nil
		})
}

// registerKV adds the /v1/sandboxes/{id}/kv routes.
func (s *server) registerKV(tb TaskBackend) {
	const tag = "kv"
	const base = "/v1/sandboxes/{id}/kv"

	put := s.agentOp(agentOwnSandbox, http.MethodPut, base+"/{key}", "put-kv", "Store a JSON value under a key (optimistic concurrency with If-Match)", tag, 0)
	put.Description = "The body is the JSON value (at most 256 KiB). The entry's version is 1 on creation and grows by one per put. " +
		"With If-Match: N the put succeeds only if the entry is at version N (0: the key must not exist), else 409 and nothing changes."
	put.Errors = append(put.Errors, http.StatusConflict, http.StatusRequestEntityTooLarge)
	huma.Register(s.api, put, func(ctx context.Context, in *struct {
		KVRef
		IfMatch string          `header:"If-Match" doc:"Version the entry must have (0: the key must not exist), as N or \"N\"; absent: no check"`
		Body    json.RawMessage `doc:"The JSON value"`
	}) (*kvOut, error) {
		const op = "put key"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		ifv, err := parseIfMatch(in.IfMatch)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		e, err := tb.PutKV(ctx, p, in.ID, in.Key, in.Body, ifv)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &kvOut{ETag: etag(e.Version), Body: e}, nil
	})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodGet, base+"/{key}", "get-kv", "Read the value under a key", tag, 0),
		func(ctx context.Context, in *KVRef) (*kvOut, error) {
			const op = "get key"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			e, err := tb.GetKV(ctx, p.TenantID, in.ID, in.Key)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return &kvOut{ETag: etag(e.Version), Body: e}, nil
		})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodGet, base, "list-kv", "List a sandbox's key-value entries by key, optionally under a prefix", tag, 0),
		func(ctx context.Context, in *struct {
			SandboxRef
			Prefix string `query:"prefix" maxLength:"256" doc:"Only keys starting with this (literally)"`
			After  string `query:"after" maxLength:"256" doc:"Cursor: the next of the previous page"`
			Limit  int    `query:"limit" minimum:"0" maximum:"1000" doc:"Page size (default 100)"`
		}) (*out[client.KVPage], error) {
			const op = "list keys"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			page, err := tb.ListKV(ctx, p.TenantID, in.ID, client.KVQuery{Prefix: in.Prefix, After: in.After, Limit: in.Limit})
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			if page.Entries == nil {
				page.Entries = []client.KVEntry{}
			}
			return &out[client.KVPage]{Body: page}, nil
		})

	del := s.agentOp(agentOwnSandbox, http.MethodDelete, base+"/{key}", "delete-kv", "Delete a key (optionally only at an expected version)", tag, http.StatusNoContent)
	del.Errors = append(del.Errors, http.StatusConflict)
	huma.Register(s.api, del, func(ctx context.Context, in *struct {
		KVRef
		IfMatch string `header:"If-Match" doc:"Version the entry must have, as N or \"N\"; absent: no check"`
	}) (*struct{}, error) {
		const op = "delete key"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		ifv, err := parseIfMatch(in.IfMatch)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if err := tb.DeleteKV(ctx, p, in.ID, in.Key, ifv); err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return nil, nil
	})
}
