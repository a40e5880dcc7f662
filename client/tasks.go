package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// tasksPath returns the path of a sandbox's task route: the collection,
// or a task (id) plus suffix.
func tasksPath(sandbox, id, suffix string) string {
	p := sandboxPath(sandbox, "/tasks")
	if id != "" {
		p += "/" + url.PathEscape(id)
	}
	return p + suffix
}

// kvPath returns the path of a sandbox's key-value route: the collection,
// or a key ('/' escaped as %2F).
func kvPath(sandbox, key string) string {
	p := sandboxPath(sandbox, "/kv")
	if key != "" {
		p += "/" + url.PathEscape(key)
	}
	return p
}

// ifMatchHeader returns an If-Match header for an optional version.
func ifMatchHeader(v *int64) http.Header {
	h := http.Header{}
	if v != nil {
		h.Set("If-Match", `"`+strconv.FormatInt(*v, 10)+`"`)
	}
	return h
}

// CreateTask creates an open task in a sandbox. A taken id is a 409
// (IsConflict); a payload that is not JSON is a 400 (IsInvalid).
func (c *Client) CreateTask(ctx context.Context, sandbox string, req CreateTaskRequest) (Task, error) {
	var t Task
	err := c.do(ctx, http.MethodPost, tasksPath(sandbox, "", ""), nil, req, &t)
	return t, err
}

// GetTask reads a task.
func (c *Client) GetTask(ctx context.Context, sandbox, id string) (Task, error) {
	var t Task
	err := c.do(ctx, http.MethodGet, tasksPath(sandbox, id, ""), nil, nil, &t)
	return t, err
}

// ListTasks reads a page of a sandbox's tasks, by creation time, then id;
// pass the page's Next as q.After to read on.
func (c *Client) ListTasks(ctx context.Context, sandbox string, q TaskQuery) (TaskPage, error) {
	v := url.Values{}
	if len(q.States) > 0 {
		v.Set("state", strings.Join(q.States, ","))
	}
	if q.Open {
		v.Set("open", "true")
	}
	if !q.CreatedAfter.IsZero() {
		v.Set("created_after", q.CreatedAfter.Format(time.RFC3339Nano))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var page TaskPage
	err := c.do(ctx, http.MethodGet, tasksPath(sandbox, "", ""), v, nil, &page)
	return page, err
}

// SetTaskState moves a task to req.State. An illegal move, or an IfState
// the task is not in, is a 409 (IsConflict) and changes nothing.
func (c *Client) SetTaskState(ctx context.Context, sandbox, id string, req SetTaskStateRequest) (Task, error) {
	var t Task
	err := c.do(ctx, http.MethodPost, tasksPath(sandbox, id, "/state"), nil, req, &t)
	return t, err
}

// AppendObservation appends an observation to a sandbox's append-only log
// and returns it with its seq.
func (c *Client) AppendObservation(ctx context.Context, sandbox string, req AppendObservationRequest) (Observation, error) {
	var o Observation
	err := c.do(ctx, http.MethodPost, sandboxPath(sandbox, "/observations"), nil, req, &o)
	return o, err
}

// ListObservations reads a page of a sandbox's observations with seq >
// q.After; pass the page's Next as q.After to read on.
func (c *Client) ListObservations(ctx context.Context, sandbox string, q ObservationQuery) (ObservationPage, error) {
	v := url.Values{}
	if q.After > 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	if q.Kind != "" {
		v.Set("kind", q.Kind)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var page ObservationPage
	err := c.do(ctx, http.MethodGet, sandboxPath(sandbox, "/observations"), v, nil, &page)
	return page, err
}

// PutKV stores value, a JSON value, under key. ifVersion, when not nil, is
// the version the entry must have (0: the key must not exist), else the
// put is a 409 (IsConflict) and changes nothing.
func (c *Client) PutKV(ctx context.Context, sandbox, key string, value []byte, ifVersion *int64) (KVEntry, error) {
	resp, err := c.send(ctx, request{
		method: http.MethodPut,
		path:   kvPath(sandbox, key),
		body:   bytes.NewReader(value),
		ctype:  "application/json",
		header: ifMatchHeader(ifVersion),
	})
	if err != nil {
		return KVEntry{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	var e KVEntry
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		return KVEntry{}, fmt.Errorf("decode put key result: %w", err)
	}
	return e, nil
}

// GetKV reads the entry under key.
func (c *Client) GetKV(ctx context.Context, sandbox, key string) (KVEntry, error) {
	var e KVEntry
	err := c.do(ctx, http.MethodGet, kvPath(sandbox, key), nil, nil, &e)
	return e, err
}

// ListKV reads a page of a sandbox's entries by key; pass the page's Next
// as q.After to read on.
func (c *Client) ListKV(ctx context.Context, sandbox string, q KVQuery) (KVPage, error) {
	v := url.Values{}
	if q.Prefix != "" {
		v.Set("prefix", q.Prefix)
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var page KVPage
	err := c.do(ctx, http.MethodGet, kvPath(sandbox, ""), v, nil, &page)
	return page, err
}

// DeleteKV deletes the entry under key; ifVersion works as for PutKV.
func (c *Client) DeleteKV(ctx context.Context, sandbox, key string, ifVersion *int64) error {
	resp, err := c.send(ctx, request{method: http.MethodDelete, path: kvPath(sandbox, key), header: ifMatchHeader(ifVersion)})
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
