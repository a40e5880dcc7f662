package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// taskFake is a fakeBackend that also serves the structured-state routes.
// It records every call with its tenant and the sandbox/subject, and keeps
// the last arguments of each method for inspection.
type taskFake struct {
	*fakeBackend

	mu          sync.Mutex
	createReq   client.CreateTaskRequest
	stateReq    client.SetTaskStateRequest
	taskQuery   client.TaskQuery
	obsReq      client.AppendObservationRequest
	obsQuery    client.ObservationQuery
	kvQuery     client.KVQuery
	kvValue     []byte
	kvIfVersion *int64
	principal   Principal
}

var _ TaskBackend = (*taskFake)(nil)

func newTaskFake() *taskFake { return &taskFake{fakeBackend: &fakeBackend{}} }

func (f *taskFake) CreateTask(_ context.Context, p Principal, sandbox string, req client.CreateTaskRequest) (client.Task, error) {
	f.record("CreateTask", p.TenantID, sandbox)
	f.mu.Lock()
	f.createReq, f.principal = req, p
	f.mu.Unlock()
	return client.Task{ID: req.ID, Sandbox: "sb-1", State: client.TaskOpen, Payload: req.Payload}, f.Err
}

func (f *taskFake) GetTask(_ context.Context, tenant, sandbox, id string) (client.Task, error) {
	f.record("GetTask", tenant, sandbox+"/"+id)
	return client.Task{ID: id, Sandbox: "sb-1", State: client.TaskDone, Payload: json.RawMessage(`{"ok":true}`)}, f.Err
}

func (f *taskFake) ListTasks(_ context.Context, tenant, sandbox string, q client.TaskQuery) (client.TaskPage, error) {
	f.record("ListTasks", tenant, sandbox)
	f.mu.Lock()
	f.taskQuery = q
	f.mu.Unlock()
	return client.TaskPage{Tasks: []client.Task{{ID: "t1", State: client.TaskOpen}}, Next: "t1", More: true}, f.Err
}

func (f *taskFake) SetTaskState(_ context.Context, p Principal, sandbox, id string, req client.SetTaskStateRequest) (client.Task, error) {
	f.record("SetTaskState", p.TenantID, sandbox+"/"+id)
	f.mu.Lock()
	f.stateReq = req
	f.mu.Unlock()
	return client.Task{ID: id, State: req.State, Payload: req.Payload}, f.Err
}

func (f *taskFake) AppendObservation(_ context.Context, p Principal, sandbox string, req client.AppendObservationRequest) (client.Observation, error) {
	f.record("AppendObservation", p.TenantID, sandbox)
	f.mu.Lock()
	f.obsReq = req
	f.mu.Unlock()
	return client.Observation{Seq: 7, Kind: req.Kind, Principal: p.KeyID, Payload: req.Payload}, f.Err
}

func (f *taskFake) ListObservations(_ context.Context, tenant, sandbox string, q client.ObservationQuery) (client.ObservationPage, error) {
	f.record("ListObservations", tenant, sandbox)
	f.mu.Lock()
	f.obsQuery = q
	f.mu.Unlock()
	return client.ObservationPage{Next: q.After}, f.Err
}

func (f *taskFake) PutKV(_ context.Context, p Principal, sandbox, key string, value []byte, ifVersion *int64) (client.KVEntry, error) {
	f.record("PutKV", p.TenantID, sandbox+"/"+key)
	f.mu.Lock()
	f.kvValue, f.kvIfVersion = value, ifVersion
	f.mu.Unlock()
	return client.KVEntry{Key: key, Value: value, Version: 4}, f.Err
}

func (f *taskFake) GetKV(_ context.Context, tenant, sandbox, key string) (client.KVEntry, error) {
	f.record("GetKV", tenant, sandbox+"/"+key)
	return client.KVEntry{Key: key, Value: json.RawMessage(`"v"`), Version: 3}, f.Err
}

func (f *taskFake) ListKV(_ context.Context, tenant, sandbox string, q client.KVQuery) (client.KVPage, error) {
	f.record("ListKV", tenant, sandbox)
	f.mu.Lock()
	f.kvQuery = q
	f.mu.Unlock()
	return client.KVPage{}, f.Err
}

func (f *taskFake) DeleteKV(_ context.Context, p Principal, sandbox, key string, ifVersion *int64) error {
	f.record("DeleteKV", p.TenantID, sandbox+"/"+key)
	f.mu.Lock()
	f.kvIfVersion = ifVersion
	f.mu.Unlock()
	return f.Err
}

func TestTaskRoutesPassTheirArguments(t *testing.T) {
	f := newTaskFake()
	c, _ := newTestServer(t, f, aliceKey)
	ctx := testCtx(t)
	const sb = "agent 1"

	tk, err := c.CreateTask(ctx, sb, client.CreateTaskRequest{ID: "build", Payload: json.RawMessage(`{"cmd":"make"}`)})
	if err != nil || tk.ID != "build" || string(tk.Payload) != `{"cmd":"make"}` {
		t.Fatalf("create: %+v %v", tk, err)
	}
	if tk, err := c.GetTask(ctx, sb, "build"); err != nil || tk.State != client.TaskDone || string(tk.Payload) != `{"ok":true}` {
		t.Fatalf("get: %+v %v", tk, err)
	}
	after := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	page, err := c.ListTasks(ctx, sb, client.TaskQuery{States: []string{client.TaskOpen, client.TaskDone}, Open: true,
		CreatedAfter: after, After: "t0", Limit: 5})
	if err != nil || len(page.Tasks) != 1 || page.Next != "t1" || !page.More {
		t.Fatalf("list: %+v %v", page, err)
	}
	tk, err = c.SetTaskState(ctx, sb, "build", client.SetTaskStateRequest{State: client.TaskDone, IfState: client.TaskInProgress,
		Payload: json.RawMessage(`{"exit":0}`)})
	if err != nil || tk.State != client.TaskDone {
		t.Fatalf("set state: %+v %v", tk, err)
	}
	o, err := c.AppendObservation(ctx, sb, client.AppendObservationRequest{Kind: "metric", Payload: json.RawMessage(`{"loss":0.1}`)})
	if err != nil || o.Seq != 7 || o.Principal != "k1" || string(o.Payload) != `{"loss":0.1}` {
		t.Fatalf("append: %+v %v", o, err)
	}
	if op, err := c.ListObservations(ctx, sb, client.ObservationQuery{After: 3, Kind: "metric", Limit: 9}); err != nil || op.Next != 3 ||
		op.Observations == nil {
		t.Fatalf("list observations: %+v %v", op, err)
	}
	v2 := int64(2)
	e, err := c.PutKV(ctx, sb, "cfg/model", []byte(`"opus"`), &v2)
	if err != nil || e.Key != "cfg/model" || e.Version != 4 {
		t.Fatalf("put: %+v %v", e, err)
	}
	f.mu.Lock()
	if string(f.kvValue) != `"opus"` || f.kvIfVersion == nil || *f.kvIfVersion != 2 {
		t.Errorf("put passed %q, %v", f.kvValue, f.kvIfVersion)
	}
	f.mu.Unlock()
	if _, err := c.PutKV(ctx, sb, "plain", []byte(`1`), nil); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	if f.kvIfVersion != nil {
		t.Errorf("put without If-Match passed %v", *f.kvIfVersion)
	}
	f.mu.Unlock()
	if e, err := c.GetKV(ctx, sb, "cfg/model"); err != nil || e.Version != 3 || e.Key != "cfg/model" {
		t.Fatalf("get kv: %+v %v", e, err)
	}
	if kp, err := c.ListKV(ctx, sb, client.KVQuery{Prefix: "cfg/", After: "cfg/a", Limit: 3}); err != nil || kp.Entries == nil {
		t.Fatalf("list kv: %+v %v", kp, err)
	}
	v0 := int64(0)
	if err := c.DeleteKV(ctx, sb, "cfg/model", &v0); err != nil {
		t.Fatal(err)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.createReq.ID != "build" || f.principal.KeyID != "k1" {
		t.Errorf("create passed %+v as %+v", f.createReq, f.principal)
	}
	q := f.taskQuery
	if !slices.Equal(q.States, []string{"open", "done"}) || !q.Open || !q.CreatedAfter.Equal(after) || q.After != "t0" || q.Limit != 5 {
		t.Errorf("task query %+v", q)
	}
	if f.stateReq.State != client.TaskDone || f.stateReq.IfState != client.TaskInProgress || string(f.stateReq.Payload) != `{"exit":0}` {
		t.Errorf("state request %+v", f.stateReq)
	}
	if f.obsReq.Kind != "metric" || f.obsQuery != (client.ObservationQuery{After: 3, Kind: "metric", Limit: 9}) {
		t.Errorf("observation request %+v, query %+v", f.obsReq, f.obsQuery)
	}
	if f.kvQuery != (client.KVQuery{Prefix: "cfg/", After: "cfg/a", Limit: 3}) {
		t.Errorf("kv query %+v", f.kvQuery)
	}
	if f.kvIfVersion == nil || *f.kvIfVersion != 0 {
		t.Errorf("delete if-version %v", f.kvIfVersion)
	}
	want := map[string]string{
		"CreateTask": sb, "GetTask": sb + "/build", "ListTasks": sb, "SetTaskState": sb + "/build",
		"AppendObservation": sb, "ListObservations": sb, "GetKV": sb + "/cfg/model", "ListKV": sb, "DeleteKV": sb + "/cfg/model",
	}
	seen := map[string]bool{}
	for _, call := range f.Calls() {
		seen[call.Method] = true
		if call.Tenant != "t-alice" {
			t.Errorf("%s called with tenant %q", call.Method, call.Tenant)
		}
		if w, ok := want[call.Method]; ok && call.ID != w {
			t.Errorf("%s called with %q, want %q", call.Method, call.ID, w)
		}
	}
	for m := range want {
		if !seen[m] {
			t.Errorf("%s was not called", m)
		}
	}
}

func TestKVRoutesSendETagsAndReadIfMatch(t *testing.T) {
	f := newTaskFake()
	_, srv := newTestServer(t, f, aliceKey)
	for _, tc := range []struct {
		method, ifMatch string
		want            int
		wantVersion     int64
	}{
		{http.MethodPut, `"5"`, http.StatusOK, 5},
		{http.MethodPut, `0`, http.StatusOK, 0},
		{http.MethodPut, `W/"x"`, http.StatusBadRequest, -1},
		{http.MethodDelete, `"9"`, http.StatusNoContent, 9},
		{http.MethodDelete, `-1`, http.StatusBadRequest, -1},
	} {
		var body *strings.Reader
		if tc.method == http.MethodPut {
			body = strings.NewReader(`{"a":1}`)
		} else {
			body = strings.NewReader("")
		}
		req, _ := http.NewRequestWithContext(testCtx(t), tc.method, srv.URL+"/v1/sandboxes/sb/kv/a%2Fb", body)
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("If-Match", tc.ifMatch)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s If-Match %s: status %d, want %d", tc.method, tc.ifMatch, resp.StatusCode, tc.want)
			continue
		}
		if tc.want >= 400 {
			continue
		}
		f.mu.Lock()
		if f.kvIfVersion == nil || *f.kvIfVersion != tc.wantVersion {
			t.Errorf("%s If-Match %s: passed %v", tc.method, tc.ifMatch, f.kvIfVersion)
		}
		f.mu.Unlock()
		if tc.method == http.MethodPut && resp.Header.Get("ETag") != `"4"` {
			t.Errorf("put ETag %q", resp.Header.Get("ETag"))
		}
	}
	for _, call := range f.Calls() {
		if call.ID != "sb/a/b" {
			t.Errorf("%s got key path %q, want sb/a/b", call.Method, call.ID)
		}
	}
}

func TestTaskRequestsAreValidatedBeforeTheBackend(t *testing.T) {
	f := newTaskFake()
	_, srv := newTestServer(t, f, aliceKey)
	doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb/tasks?created_after=yesterday", "", http.StatusBadRequest)
	doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb/tasks?limit=1001", "", http.StatusUnprocessableEntity)
	doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb/observations?after=-1", "", http.StatusUnprocessableEntity)
	doRaw(t, srv, http.MethodPost, "/v1/sandboxes/sb/tasks/t1/state", `{"state":"finished"}`, http.StatusUnprocessableEntity)
	doRaw(t, srv, http.MethodPost, "/v1/sandboxes/sb/observations", `{"payload":1}`, http.StatusUnprocessableEntity)
	doRaw(t, srv, http.MethodPut, "/v1/sandboxes/sb/kv/"+strings.Repeat("k", 257), `1`, http.StatusUnprocessableEntity)
	doRaw(t, srv, http.MethodPut, "/v1/sandboxes/sb/kv/k", `{"v":"`+strings.Repeat("x", MaxJSONBodyBytes)+`"}`, http.StatusRequestEntityTooLarge)
	if calls := f.Calls(); len(calls) != 0 {
		t.Fatalf("backend called with refused requests: %v", calls)
	}
}

func TestTaskErrorsMapToStatusCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("task x: %w", errs.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("a task that is done cannot become in_progress: %w", errs.ErrConflict), http.StatusConflict},
		{fmt.Errorf("payload is not JSON: %w", errs.ErrInvalid), http.StatusBadRequest},
		{fmt.Errorf("disk on fire"), http.StatusInternalServerError},
	} {
		f := newTaskFake()
		f.Err = tc.err
		_, srv := newTestServer(t, f, aliceKey)
		for _, r := range []struct{ method, path, body string }{
			{http.MethodPost, "/v1/sandboxes/sb/tasks", `{}`},
			{http.MethodGet, "/v1/sandboxes/sb/tasks", ""},
			{http.MethodGet, "/v1/sandboxes/sb/tasks/t1", ""},
			{http.MethodPost, "/v1/sandboxes/sb/tasks/t1/state", `{"state":"done"}`},
			{http.MethodPost, "/v1/sandboxes/sb/observations", `{"kind":"k"}`},
			{http.MethodGet, "/v1/sandboxes/sb/observations", ""},
			{http.MethodPut, "/v1/sandboxes/sb/kv/k", `1`},
			{http.MethodGet, "/v1/sandboxes/sb/kv/k", ""},
			{http.MethodGet, "/v1/sandboxes/sb/kv", ""},
			{http.MethodDelete, "/v1/sandboxes/sb/kv/k", ""},
		} {
			raw := doRaw(t, srv, r.method, r.path, r.body, tc.want)
			if tc.want == http.StatusInternalServerError && strings.Contains(raw, "fire") {
				t.Errorf("%s %s: a 500 leaks its cause: %s", r.method, r.path, raw)
			}
		}
	}
}

func TestTaskRoutesNeedATaskBackend(t *testing.T) {
	_, srv := newTestServer(t, &fakeBackend{}, aliceKey)
	for _, p := range []string{"/v1/sandboxes/sb/tasks", "/v1/sandboxes/sb/observations", "/v1/sandboxes/sb/kv"} {
		doRaw(t, srv, http.MethodGet, p, "", http.StatusNotFound)
	}
	c, _ := newTestServer(t, newTaskFake(), aliceKey)
	doc, err := c.OpenAPI(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Paths map[string]map[string]struct {
			Security []map[string][]string `json:"security"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		"/v1/sandboxes/{id}/tasks", "/v1/sandboxes/{id}/tasks/{task}", "/v1/sandboxes/{id}/tasks/{task}/state",
		"/v1/sandboxes/{id}/observations", "/v1/sandboxes/{id}/kv", "/v1/sandboxes/{id}/kv/{key}",
	} {
		ops, ok := d.Paths[p]
		if !ok {
			t.Errorf("OpenAPI lacks %s", p)
			continue
		}
		for m, op := range ops {
			if len(op.Security) == 0 {
				t.Errorf("%s %s has no security requirement", m, p)
			}
		}
	}
}

func TestSandboxTokenReachesItsOwnStructuredStateOnly(t *testing.T) {
	f := newTaskFake()
	f.AuthenticateFunc = func(context.Context, string) (Principal, error) {
		return Principal{TenantID: "t-alice", KeyID: "sandbox:sb-1", Sandbox: "sb-1"}, nil
	}
	_, srv := newTestServer(t, f, aliceKey)
	doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb-1/tasks?open=true", "", http.StatusOK)
	doRaw(t, srv, http.MethodPost, "/v1/sandboxes/sb-1/tasks/t1/state", `{"state":"in_progress"}`, http.StatusOK)
	doRaw(t, srv, http.MethodPost, "/v1/sandboxes/sb-1/observations", `{"kind":"note"}`, http.StatusCreated)
	doRaw(t, srv, http.MethodPut, "/v1/sandboxes/sb-1/kv/cfg%2Fmodel", `"opus"`, http.StatusOK)
	doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb-2/tasks", "", http.StatusForbidden)
	doRaw(t, srv, http.MethodPut, "/v1/sandboxes/sb-2/kv/k", `1`, http.StatusForbidden)
	doRaw(t, srv, http.MethodPost, "/v1/sandboxes/sb-2/observations", `{"kind":"note"}`, http.StatusForbidden)
	for _, call := range f.Calls() {
		if strings.HasPrefix(call.ID, "sb-2") {
			t.Errorf("%s reached sandbox sb-2", call.Method)
		}
	}
}
