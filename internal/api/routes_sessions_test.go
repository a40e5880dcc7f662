package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// sessionFake is a fakeBackend that also serves the session routes through
// function fields (zero values, or Err, when a field is nil).
type sessionFake struct {
	*fakeBackend

	CreateThreadFunc    func(ctx context.Context, p Principal, sandbox string, req client.CreateThreadRequest) (client.Thread, error)
	SetRetentionFunc    func(ctx context.Context, p Principal, sandbox, thread string, r client.Retention) (client.Thread, error)
	StartRunFunc        func(ctx context.Context, p Principal, sandbox, thread string) (client.Run, error)
	EndRunFunc          func(ctx context.Context, p Principal, sandbox, run string, req client.EndRunRequest) (client.Run, error)
	AppendRunEventsFunc func(ctx context.Context, p Principal, sandbox, run string, evs []client.AppendEvent) ([]client.Event, error)
	ListRunEventsFunc   func(ctx context.Context, tenant, sandbox, run string, after int64, limit int) (client.EventPage, error)
	WatchRunFunc        func(ctx context.Context, tenant, sandbox, run string) (func() <-chan struct{}, error)
	ResumeRunFunc       func(ctx context.Context, tenant, sandbox, run string) (client.RunResume, error)
}

var _ SessionBackend = (*sessionFake)(nil)

func (f *sessionFake) CreateThread(ctx context.Context, p Principal, sandbox string, req client.CreateThreadRequest) (client.Thread, error) {
	f.record("CreateThread", p.TenantID, sandbox)
	if f.CreateThreadFunc != nil {
		return f.CreateThreadFunc(ctx, p, sandbox, req)
	}
	return client.Thread{ID: "th-1", Name: req.Name, Sandbox: sandbox}, f.Err
}

func (f *sessionFake) ListThreads(ctx context.Context, tenant, sandbox string) ([]client.Thread, error) {
	f.record("ListThreads", tenant, sandbox)
	return nil, f.Err
}

func (f *sessionFake) SetThreadRetention(ctx context.Context, p Principal, sandbox, thread string, r client.Retention) (client.Thread, error) {
	f.record("SetThreadRetention", p.TenantID, sandbox+"/"+thread)
	if f.SetRetentionFunc != nil {
		return f.SetRetentionFunc(ctx, p, sandbox, thread, r)
	}
	return client.Thread{}, f.Err
}

func (f *sessionFake) PruneThread(ctx context.Context, p Principal, sandbox, thread string) (client.PruneResult, error) {
	f.record("PruneThread", p.TenantID, sandbox+"/"+thread)
	return client.PruneResult{Deleted: 3}, f.Err
}

func (f *sessionFake) StartRun(ctx context.Context, p Principal, sandbox, thread string) (client.Run, error) {
	f.record("StartRun", p.TenantID, sandbox+"/"+thread)
	if f.StartRunFunc != nil {
		return f.StartRunFunc(ctx, p, sandbox, thread)
	}
	return client.Run{ID: "run-1", Thread: thread, Status: "running"}, f.Err
}

func (f *sessionFake) ListRuns(ctx context.Context, tenant, sandbox, thread string) ([]client.Run, error) {
	f.record("ListRuns", tenant, sandbox+"/"+thread)
	return nil, f.Err
}

func (f *sessionFake) EndRun(ctx context.Context, p Principal, sandbox, run string, req client.EndRunRequest) (client.Run, error) {
	f.record("EndRun", p.TenantID, sandbox+"/"+run)
	if f.EndRunFunc != nil {
		return f.EndRunFunc(ctx, p, sandbox, run, req)
	}
	return client.Run{ID: run, Status: req.Status}, f.Err
}

func (f *sessionFake) AppendRunEvents(ctx context.Context, p Principal, sandbox, run string, evs []client.AppendEvent) ([]client.Event, error) {
	f.record("AppendRunEvents", p.TenantID, sandbox+"/"+run)
	if f.AppendRunEventsFunc != nil {
		return f.AppendRunEventsFunc(ctx, p, sandbox, run, evs)
	}
	return nil, f.Err
}

func (f *sessionFake) ListRunEvents(ctx context.Context, tenant, sandbox, run string, after int64, limit int) (client.EventPage, error) {
	f.record("ListRunEvents", tenant, sandbox+"/"+run)
	if f.ListRunEventsFunc != nil {
		return f.ListRunEventsFunc(ctx, tenant, sandbox, run, after, limit)
	}
	return client.EventPage{Events: []client.Event{}, Next: after, RunStatus: "running"}, f.Err
}

func (f *sessionFake) WatchRun(ctx context.Context, tenant, sandbox, run string) (func() <-chan struct{}, error) {
	f.record("WatchRun", tenant, sandbox+"/"+run)
	if f.WatchRunFunc != nil {
		return f.WatchRunFunc(ctx, tenant, sandbox, run)
	}
	return nil, f.Err
}

func (f *sessionFake) ResumeRun(ctx context.Context, tenant, sandbox, run string) (client.RunResume, error) {
	f.record("ResumeRun", tenant, sandbox+"/"+run)
	if f.ResumeRunFunc != nil {
		return f.ResumeRunFunc(ctx, tenant, sandbox, run)
	}
	return client.RunResume{Run: client.Run{ID: run}, InDoubt: []client.Event{}}, f.Err
}

func newSessionFake() *sessionFake { return &sessionFake{fakeBackend: &fakeBackend{}} }

// echoAppend returns each appended event as stored with seqs from 1.
func echoAppend(got *[][]client.AppendEvent, mu *sync.Mutex) func(context.Context, Principal, string, string, []client.AppendEvent) ([]client.Event, error) {
	return func(_ context.Context, p Principal, _, run string, evs []client.AppendEvent) ([]client.Event, error) {
		mu.Lock()
		*got = append(*got, evs)
		mu.Unlock()
		out := make([]client.Event, len(evs))
		for i, e := range evs {
			out[i] = client.Event{Run: run, Seq: int64(i + 1), Type: e.Type, Payload: e.Payload, IdempotencyKey: e.IdempotencyKey, Intent: e.Intent}
		}
		return out, nil
	}
}

func TestSessionRoutesPassTheirArguments(t *testing.T) {
	f := newSessionFake()
	var mu sync.Mutex
	var appended [][]client.AppendEvent
	var threadReq client.CreateThreadRequest
	var ret client.Retention
	var listArgs []string
	f.AppendRunEventsFunc = echoAppend(&appended, &mu)
	f.CreateThreadFunc = func(_ context.Context, p Principal, sandbox string, req client.CreateThreadRequest) (client.Thread, error) {
		mu.Lock()
		defer mu.Unlock()
		threadReq = req
		return client.Thread{ID: "th-1", Name: req.Name, Sandbox: "sb-1", Retention: req.Retention}, nil
	}
	f.SetRetentionFunc = func(_ context.Context, _ Principal, _, thread string, r client.Retention) (client.Thread, error) {
		mu.Lock()
		defer mu.Unlock()
		ret = r
		return client.Thread{ID: thread, Retention: r}, nil
	}
	f.ListRunEventsFunc = func(_ context.Context, _, _, _ string, after int64, limit int) (client.EventPage, error) {
		mu.Lock()
		defer mu.Unlock()
		listArgs = append(listArgs, fmt.Sprintf("%d/%d", after, limit))
		return client.EventPage{Events: []client.Event{{Seq: after + 1, Type: "note", Payload: json.RawMessage(`{"x":1}`)}}, Next: after + 1, RunStatus: "running"}, nil
	}
	c, srv := newTestServer(t, f, aliceKey)
	ctx := testCtx(t)

	th, err := c.CreateThread(ctx, "agent 1", client.CreateThreadRequest{Name: "main", Retention: client.Retention{KeepLast: 50, KeepWithinSeconds: 3600}})
	if err != nil || th.ID != "th-1" || th.Retention.KeepLast != 50 {
		t.Fatalf("create thread: %+v %v", th, err)
	}
	if _, err := c.SetThreadRetention(ctx, "agent 1", "main", client.Retention{KeepLast: 7}); err != nil {
		t.Fatal(err)
	}
	if res, err := c.PruneThread(ctx, "agent 1", "main"); err != nil || res.Deleted != 3 {
		t.Fatalf("prune: %+v %v", res, err)
	}
	if r, err := c.StartRun(ctx, "agent 1", "main"); err != nil || r.ID != "run-1" {
		t.Fatalf("start run: %+v %v", r, err)
	}
	if _, err := c.ListThreads(ctx, "agent 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListRuns(ctx, "agent 1", "main"); err != nil {
		t.Fatal(err)
	}
	e, err := c.AppendEvent(ctx, "agent 1", "run-1", client.AppendEvent{Type: "tool_intent", Payload: json.RawMessage(`{"tool":"rm"}`), IdempotencyKey: "k1"})
	if err != nil || e.Seq != 1 || e.IdempotencyKey != "k1" || string(e.Payload) != `{"tool":"rm"}` {
		t.Fatalf("append one: %+v %v", e, err)
	}
	evs, err := c.AppendEvents(ctx, "agent 1", "run-1", []client.AppendEvent{{Type: "note"}, {Type: "tool_result", Intent: 1}})
	if err != nil || len(evs) != 2 || evs[1].Intent != 1 {
		t.Fatalf("append batch: %+v %v", evs, err)
	}
	page, err := c.ListEvents(ctx, "agent 1", "run-1", 5, 20)
	if err != nil || page.Next != 6 || len(page.Events) != 1 || string(page.Events[0].Payload) != `{"x":1}` {
		t.Fatalf("list events: %+v %v", page, err)
	}
	if _, err := c.ListEvents(ctx, "agent 1", "run-1", 0, 0); err != nil {
		t.Fatal(err)
	}
	if r, err := c.EndRun(ctx, "agent 1", "run-1", "failed"); err != nil || r.Status != "failed" {
		t.Fatalf("end run: %+v %v", r, err)
	}
	if res, err := c.ResumeRun(ctx, "agent 1", "run-1"); err != nil || res.Run.ID != "run-1" {
		t.Fatalf("resume: %+v %v", res, err)
	}
	// A run may also be ended without a body.
	doRaw(t, srv, http.MethodPost, "/v1/sandboxes/sb/threads/runs/run-2/end", "", http.StatusOK)

	mu.Lock()
	defer mu.Unlock()
	if threadReq.Name != "main" || threadReq.Retention.KeepWithinSeconds != 3600 || ret.KeepLast != 7 {
		t.Errorf("thread request %+v, retention %+v", threadReq, ret)
	}
	if len(appended) != 2 || len(appended[0]) != 1 || appended[0][0].Type != "tool_intent" || len(appended[1]) != 2 {
		t.Errorf("appended %+v", appended)
	}
	if strings.Join(listArgs, ",") != "5/20,0/0" {
		t.Errorf("list args %v", listArgs)
	}
	want := map[string]string{
		"CreateThread": "agent 1", "SetThreadRetention": "agent 1/main", "PruneThread": "agent 1/main",
		"StartRun": "agent 1/main", "ListThreads": "agent 1", "ListRuns": "agent 1/main", "AppendRunEvents": "agent 1/run-1",
		"ListRunEvents": "agent 1/run-1", "EndRun": "agent 1/run-1", "ResumeRun": "agent 1/run-1",
	}
	for _, call := range f.Calls() {
		if call.Tenant != "t-alice" {
			t.Errorf("%s called with tenant %q", call.Method, call.Tenant)
		}
		if w, ok := want[call.Method]; ok && call.ID != w && call.ID != "sb/run-2" {
			t.Errorf("%s called with %q, want %q", call.Method, call.ID, w)
		}
	}
}

func TestAppendRequestsAreValidatedBeforeTheBackend(t *testing.T) {
	f := newSessionFake()
	_, srv := newTestServer(t, f, aliceKey)
	const path = "/v1/sandboxes/sb/threads/runs/run-1/events"
	doRaw(t, srv, http.MethodPost, path, `{}`, http.StatusBadRequest)
	doRaw(t, srv, http.MethodPost, path, `{"events":[]}`, http.StatusBadRequest)
	doRaw(t, srv, http.MethodPost, path, `{"type":"note","events":[{"type":"note"}]}`, http.StatusBadRequest)
	if raw := doRaw(t, srv, http.MethodPost, path, `{"type":"thought"}`, http.StatusUnprocessableEntity); !strings.Contains(raw, "type") {
		t.Errorf("unknown type: %s", raw)
	}
	doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb/threads/runs/run-1/events?limit=1001", "", http.StatusUnprocessableEntity)
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, srv.URL+"/v1/sandboxes/sb/threads/runs/run-1/events?follow=true", nil)
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	req.Header.Set("Last-Event-ID", "x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad Last-Event-ID: status %d", resp.StatusCode)
	}
	// Over 16 MiB is refused; a 2 MiB batch (over the 1 MiB JSON cap of
	// other routes) is accepted.
	huge := `{"type":"note","payload":"` + strings.Repeat("x", MaxAppendBodyBytes) + `"}`
	doRaw(t, srv, http.MethodPost, path, huge, http.StatusRequestEntityTooLarge)
	if calls := f.Calls(); len(calls) != 0 {
		t.Fatalf("backend called with refused requests: %v", calls)
	}
	var mu sync.Mutex
	var got [][]client.AppendEvent
	f.AppendRunEventsFunc = echoAppend(&got, &mu)
	var b strings.Builder
	b.WriteString(`{"events":[`)
	for i := range 10 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"type":"note","payload":"` + strings.Repeat("y", 200<<10) + `"}`)
	}
	b.WriteString(`]}`)
	doRaw(t, srv, http.MethodPost, path, b.String(), http.StatusOK)
}

func TestSessionErrorsMapToStatusCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("run x: %w", errs.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("the run has ended: %w", errs.ErrConflict), http.StatusConflict},
		{fmt.Errorf("intent 9: %w", errs.ErrInvalid), http.StatusBadRequest},
		{fmt.Errorf("disk on fire"), http.StatusInternalServerError},
	} {
		f := newSessionFake()
		f.Err = tc.err
		_, srv := newTestServer(t, f, aliceKey)
		for _, r := range []struct{ method, path, body string }{
			{http.MethodPost, "/v1/sandboxes/sb/threads", `{"name":"main"}`},
			{http.MethodGet, "/v1/sandboxes/sb/threads", ""},
			{http.MethodPost, "/v1/sandboxes/sb/threads/main/runs", ""},
			{http.MethodGet, "/v1/sandboxes/sb/threads/main/runs", ""},
			{http.MethodPost, "/v1/sandboxes/sb/threads/runs/r1/events", `{"type":"note"}`},
			{http.MethodGet, "/v1/sandboxes/sb/threads/runs/r1/events", ""},
			{http.MethodGet, "/v1/sandboxes/sb/threads/runs/r1/events?follow=true", ""},
			{http.MethodGet, "/v1/sandboxes/sb/threads/runs/r1/resume", ""},
			{http.MethodPost, "/v1/sandboxes/sb/threads/runs/r1/end", `{}`},
		} {
			raw := doRaw(t, srv, r.method, r.path, r.body, tc.want)
			if tc.want == http.StatusInternalServerError && strings.Contains(raw, "fire") {
				t.Errorf("%s %s: a 500 leaks its cause: %s", r.method, r.path, raw)
			}
		}
	}
}

func TestFollowStreamsServerSentEventsUntilTheRunEnds(t *testing.T) {
	f := newSessionFake()
	wake := make(chan struct{})
	var mu sync.Mutex
	var afters []int64
	var ended bool
	f.WatchRunFunc = func(context.Context, string, string, string) (func() <-chan struct{}, error) {
		return func() <-chan struct{} {
			mu.Lock()
			defer mu.Unlock()
			return wake
		}, nil
	}
	f.ListRunEventsFunc = func(_ context.Context, _, _, run string, after int64, limit int) (client.EventPage, error) {
		mu.Lock()
		defer mu.Unlock()
		afters = append(afters, after)
		status := "running"
		if ended {
			status = "completed"
		}
		var evs []client.Event
		for seq := after + 1; seq <= 3 && len(evs) < 2; seq++ {
			evs = append(evs, client.Event{Run: run, Seq: seq, Type: "note", Payload: json.RawMessage(`{"line":"a\nb"}`)})
		}
		next := after
		if len(evs) > 0 {
			next = evs[len(evs)-1].Seq
		}
		return client.EventPage{Events: evs, Next: next, More: len(evs) == 2, RunStatus: status}, nil
	}
	_, srv := newTestServer(t, f, aliceKey)
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, srv.URL+"/v1/sandboxes/sb/threads/runs/r1/events?follow=true&after=5", nil)
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	req.Header.Set("Last-Event-ID", "0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	readMsg := func() string {
		t.Helper()
		var lines []string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("read stream: %v (so far %q)", err, lines)
			}
			if line == "\n" {
				return strings.Join(lines, "")
			}
			lines = append(lines, line)
		}
	}
	for seq := 1; seq <= 3; seq++ {
		msg := readMsg()
		if !strings.Contains(msg, fmt.Sprintf("id: %d\n", seq)) || !strings.Contains(msg, `data: {"run":"r1","seq":`) || strings.Count(msg, "\n") != 2 {
			t.Fatalf("message %d: %q", seq, msg)
		}
	}
	// The stream now waits; ending the run wakes it and it ends.
	mu.Lock()
	ended = true
	close(wake)
	wake = make(chan struct{})
	mu.Unlock()
	if msg := readMsg(); !strings.HasPrefix(msg, "event: end\n") || !strings.Contains(msg, `"status":"completed"`) {
		t.Fatalf("end message %q", msg)
	}
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Errorf("data after the end: %q", rest)
	}
	mu.Lock()
	defer mu.Unlock()
	if afters[0] != 0 {
		t.Errorf("Last-Event-ID 0 did not override after=5: %v", afters)
	}
}

func TestSessionRoutesNeedASessionBackend(t *testing.T) {
	_, srv := newTestServer(t, &fakeBackend{}, aliceKey)
	doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb/threads", "", http.StatusNotFound)
	c, _ := newTestServer(t, newSessionFake(), aliceKey)
	doc, err := c.OpenAPI(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Paths map[string]map[string]struct {
			Tags     []string              `json:"tags"`
			Security []map[string][]string `json:"security"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"POST /v1/sandboxes/{id}/threads", "GET /v1/sandboxes/{id}/threads",
		"PUT /v1/sandboxes/{id}/threads/{thread}/retention", "POST /v1/sandboxes/{id}/threads/{thread}/prune",
		"POST /v1/sandboxes/{id}/threads/{thread}/runs", "GET /v1/sandboxes/{id}/threads/{thread}/runs",
		"POST /v1/sandboxes/{id}/threads/runs/{run}/events", "GET /v1/sandboxes/{id}/threads/runs/{run}/events",
		"GET /v1/sandboxes/{id}/threads/runs/{run}/resume", "POST /v1/sandboxes/{id}/threads/runs/{run}/end",
	} {
		method, path, _ := strings.Cut(w, " ")
		o, ok := d.Paths[path][strings.ToLower(method)]
		if !ok {
			t.Errorf("%s missing from the OpenAPI document", w)
			continue
		}
		if len(o.Tags) != 1 || o.Tags[0] != "sessions" || len(o.Security) == 0 {
			t.Errorf("%s: tags %v security %v", w, o.Tags, o.Security)
		}
	}
}
