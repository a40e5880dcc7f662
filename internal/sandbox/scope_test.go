package sandbox

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/store"
)

// agentHTTP is the API as the agent inside one sandbox reaches it: its
// sandbox-scoped token on every request.
type agentHTTP struct {
	t     *testing.T
	url   string
	token string
}

// do sends a request and returns the status and the body.
func (a agentHTTP) do(method, path, body string, header ...string) (int, string) {
	a.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(a.t.Context(), method, a.url+path, r)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// must sends a request and fails the test unless the status is want; it
// decodes the body into v when v is not nil.
func (a agentHTTP) must(want int, v any, method, path, body string, header ...string) string {
	a.t.Helper()
	status, got := a.do(method, path, body, header...)
	if status != want {
		a.t.Fatalf("%s %s: status %d, want %d: %s", method, path, status, want, got)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(got), v); err != nil {
			a.t.Fatalf("%s %s: %v: %s", method, path, err, got)
		}
	}
	return got
}

// madeUp returns an id of the same shape and length as id that names
// nothing (the same prefix, the rest replaced).
func madeUp(id string) string {
	prefix, rest, ok := strings.Cut(id, "-")
	if !ok {
		return strings.Repeat("z", len(id))
	}
	return prefix + "-" + strings.Repeat("z", len(rest))
}

// mask replaces id in body, as given in a path and unescaped, by <ID>.
func mask(body, id string) string {
	body = strings.ReplaceAll(body, id, "<ID>")
	return strings.ReplaceAll(body, strings.ReplaceAll(id, "%2F", "/"), "<ID>")
}

// agentState is what one sandbox's agent keeps through its token.
type agentState struct {
	sandbox, name            string
	thread, threadName, run  string
	task, doc, key, pushOpID string
}

// keepState writes a thread, a run with a tool intent, a checkpoint
// document, a task, an observation and a key through the agent's own token,
// each holding marker, and pushes the sandbox (as the admin) for an
// operation on it.
func keepState(t *testing.T, s *Service, a agentHTTP, sb client.Sandbox, marker string) agentState {
	t.Helper()
	st := agentState{sandbox: sb.ID, name: sb.Name, threadName: marker + "-main", doc: marker + "-plan", key: marker + "/k"}
	base := "/v1/sandboxes/" + sb.ID
	var th client.Thread
	a.must(http.StatusCreated, &th, http.MethodPost, base+"/threads", `{"name":"`+st.threadName+`"}`)
	st.thread = th.ID
	var run client.Run
	a.must(http.StatusCreated, &run, http.MethodPost, base+"/threads/"+th.ID+"/runs", "")
	st.run = run.ID
	a.must(http.StatusOK, nil, http.MethodPost, base+"/threads/runs/"+run.ID+"/events",
		`{"events":[{"type":"model_call","payload":{"m":"`+marker+`"}},{"type":"tool_intent","payload":{"cmd":"`+marker+`"}}]}`)
	a.must(http.StatusOK, nil, http.MethodPut, base+"/checkpoints/"+st.doc, `{"secret":"`+marker+`"}`)
	var task client.Task
	a.must(http.StatusCreated, &task, http.MethodPost, base+"/tasks", `{"payload":{"todo":"`+marker+`"}}`)
	st.task = task.ID
	a.must(http.StatusCreated, nil, http.MethodPost, base+"/observations", `{"kind":"note","payload":"`+marker+`"}`)
	a.must(http.StatusOK, nil, http.MethodPut, base+"/kv/"+strings.ReplaceAll(st.key, "/", "%2F"), `"`+marker+`"`)
	op, err := s.PushSandbox(context.Background(), store.DefaultTenant, sb.ID, client.PushRequest{Wait: true})
	opDone(t, op, err, nil)
	st.pushOpID = op.ID
	return st
}

// TestSandboxTokenReachesOnlyItsOwnIDs is the attack of issue 9, item 2:
// the agent of sandbox A, with its own token, names the ids of sandbox B
// (same tenant) in every route its token may call. Each answers exactly as
// an id that never existed (same status, same problem document once the
// id itself is masked), changes nothing of B's, and no list or orient of
// A's shows anything of B's; A's own ids work.
func TestSandboxTokenReachesOnlyItsOwnIDs(t *testing.T) {
	s := newService(t)
	s.opts.TokenKey = []byte("scope-test-token-key-0123456789ab")
	s.wireTenancy() // the token key is checked there
	withRepo(t, s, t.TempDir())
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.NewHandler(s, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	sandboxes := map[string]client.Sandbox{}
	for _, name := range []string{"alpha", "bravo"} {
		sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: name, NoStart: true})
		if err != nil {
			t.Fatal(err)
		}
		sandboxes[name] = sb
	}
	agentA := agentHTTP{t: t, url: srv.URL, token: s.SandboxToken(sandboxes["alpha"].ID)}
	agentB := agentHTTP{t: t, url: srv.URL, token: s.SandboxToken(sandboxes["bravo"].ID)}
	a := keepState(t, s, agentA, sandboxes["alpha"], "alpha-marker")
	b := keepState(t, s, agentB, sandboxes["bravo"], "bravo-marker")
	baseA := "/v1/sandboxes/" + a.sandbox

	// Every id of B, where A's token may name an id, against a made-up id
	// of the same shape. want is the status both must answer.
	esc := func(k string) string { return strings.ReplaceAll(k, "/", "%2F") }
	probes := []struct {
		what, method, path, body string
		header                   []string
		foreign                  string
		want                     int
	}{
		{"operation", http.MethodGet, "/v1/operations/{}", "", nil, b.pushOpID, http.StatusNotFound},
		{"operation events", http.MethodGet, "/v1/operations/{}/events", "", nil, b.pushOpID, http.StatusNotFound},

		{"thread runs", http.MethodGet, baseA + "/threads/{}/runs", "", nil, b.thread, http.StatusNotFound},
		{"thread runs by name", http.MethodGet, baseA + "/threads/{}/runs", "", nil, b.threadName, http.StatusNotFound},
		{"start run", http.MethodPost, baseA + "/threads/{}/runs", "", nil, b.thread, http.StatusNotFound},
		{"start run by name", http.MethodPost, baseA + "/threads/{}/runs", "", nil, b.threadName, http.StatusNotFound},
		{"thread retention", http.MethodPut, baseA + "/threads/{}/retention", `{"keep_last":1}`, nil, b.thread, http.StatusNotFound},
		{"prune thread", http.MethodPost, baseA + "/threads/{}/prune", "", nil, b.thread, http.StatusNotFound},

		{"run events", http.MethodGet, baseA + "/threads/runs/{}/events", "", nil, b.run, http.StatusNotFound},
		{"run events followed", http.MethodGet, baseA + "/threads/runs/{}/events?follow=true", "", nil, b.run, http.StatusNotFound},
		{"append to run", http.MethodPost, baseA + "/threads/runs/{}/events", `{"type":"note","payload":1}`, nil, b.run, http.StatusNotFound},
		{"resume run", http.MethodGet, baseA + "/threads/runs/{}/resume", "", nil, b.run, http.StatusNotFound},
		{"end run", http.MethodPost, baseA + "/threads/runs/{}/end", `{}`, nil, b.run, http.StatusNotFound},

		{"checkpoint", http.MethodGet, baseA + "/checkpoints/{}", "", nil, b.doc, http.StatusNotFound},
		{"checkpoint version", http.MethodGet, baseA + "/checkpoints/{}?version=1", "", nil, b.doc, http.StatusNotFound},
		{"checkpoint versions", http.MethodGet, baseA + "/checkpoints/{}/versions", "", nil, b.doc, http.StatusNotFound},
		{"checkpoint rollback", http.MethodPost, baseA + "/checkpoints/{}/rollback", `{"version":1}`, nil, b.doc, http.StatusNotFound},
		{"delete checkpoint", http.MethodDelete, baseA + "/checkpoints/{}", "", nil, b.doc, http.StatusNotFound},
		{"checkpoint put at B's version", http.MethodPut, baseA + "/checkpoints/{}", `{"x":1}`, []string{"If-Match", "1"}, b.doc, http.StatusConflict},

		{"task", http.MethodGet, baseA + "/tasks/{}", "", nil, b.task, http.StatusNotFound},
		{"task state", http.MethodPost, baseA + "/tasks/{}/state", `{"state":"in_progress"}`, nil, b.task, http.StatusNotFound},
		{"task cursor", http.MethodGet, baseA + "/tasks?after={}", "", nil, b.task, http.StatusBadRequest},

		{"key", http.MethodGet, baseA + "/kv/{}", "", nil, esc(b.key), http.StatusNotFound},
		{"delete key", http.MethodDelete, baseA + "/kv/{}", "", nil, esc(b.key), http.StatusNotFound},
		{"key put at B's version", http.MethodPut, baseA + "/kv/{}", `2`, []string{"If-Match", "1"}, esc(b.key), http.StatusConflict},

		{"B's sandbox", http.MethodGet, "/v1/sandboxes/{}/threads", "", nil, b.sandbox, http.StatusForbidden},
		{"B's sandbox orient", http.MethodGet, "/v1/sandboxes/{}/orient", "", nil, b.sandbox, http.StatusForbidden},
		{"B's sandbox tasks", http.MethodGet, "/v1/sandboxes/{}/tasks/" + b.task, "", nil, b.sandbox, http.StatusForbidden},
		{"B's sandbox by name", http.MethodGet, "/v1/sandboxes/{}/kv", "", nil, b.name, http.StatusForbidden},
	}
	for _, p := range probes {
		absent := madeUp(p.foreign)
		fStatus, fBody := agentA.do(p.method, strings.Replace(p.path, "{}", p.foreign, 1), p.body, p.header...)
		aStatus, aBody := agentA.do(p.method, strings.Replace(p.path, "{}", absent, 1), p.body, p.header...)
		fBody, aBody = mask(fBody, p.foreign), mask(aBody, absent)
		if fStatus != p.want || aStatus != p.want || fBody != aBody {
			t.Errorf("%s: B's id answers %d %s\n\ta made-up id answers %d %s\n\twant %d for both, alike", p.what, fStatus, fBody, aStatus, aBody, p.want)
		}
		for _, leak := range []string{"bravo", b.sandbox} {
			if strings.Contains(fBody, leak) {
				t.Errorf("%s: the answer names %s: %s", p.what, leak, fBody)
			}
		}
	}

	// Nothing of B's changed.
	baseB := "/v1/sandboxes/" + b.sandbox
	var res client.RunResume
	agentB.must(http.StatusOK, &res, http.MethodGet, baseB+"/threads/runs/"+b.run+"/resume", "")
	if res.Run.Status != "running" || res.Run.LastSeq != 2 || len(res.InDoubt) != 1 {
		t.Errorf("B's run after the attack: %+v", res)
	}
	var thPage client.Page[client.Thread]
	agentB.must(http.StatusOK, &thPage, http.MethodGet, baseB+"/threads", "")
	th := thPage.Items
	if len(th) != 1 || th[0].Retention.KeepLast != 0 {
		t.Errorf("B's threads after the attack: %+v", th)
	}
	var runsPage client.Page[client.Run]
	agentB.must(http.StatusOK, &runsPage, http.MethodGet, baseB+"/threads/"+b.thread+"/runs", "")
	runs := runsPage.Items
	if len(runs) != 1 {
		t.Errorf("B's runs after the attack: %+v", runs)
	}
	var task client.Task
	agentB.must(http.StatusOK, &task, http.MethodGet, baseB+"/tasks/"+b.task, "")
	if task.State != client.TaskOpen {
		t.Errorf("B's task after the attack: %+v", task)
	}
	var kv client.KVEntry
	agentB.must(http.StatusOK, &kv, http.MethodGet, baseB+"/kv/"+esc(b.key), "")
	if kv.Version != 1 || string(kv.Value) != `"bravo-marker"` {
		t.Errorf("B's key after the attack: %+v", kv)
	}
	var versionsPage client.Page[client.Checkpoint]
	agentB.must(http.StatusOK, &versionsPage, http.MethodGet, baseB+"/checkpoints/"+b.doc+"/versions", "")
	versions := versionsPage.Items
	if len(versions) != 1 {
		t.Errorf("B's checkpoint after the attack: %+v", versions)
	}

	// A's own ids work, and nothing A's token lists or orients shows B's.
	own := []string{
		"/v1/operations/" + a.pushOpID,
		"/v1/operations/" + a.pushOpID + "/events",
		baseA + "/threads",
		baseA + "/threads/" + a.thread + "/runs",
		baseA + "/threads/" + a.threadName + "/runs",
		baseA + "/threads/runs/" + a.run + "/events",
		baseA + "/threads/runs/" + a.run + "/resume",
		baseA + "/checkpoints",
		baseA + "/checkpoints/" + a.doc,
		baseA + "/checkpoints/" + a.doc + "/versions",
		baseA + "/tasks",
		baseA + "/tasks/" + a.task,
		baseA + "/observations",
		baseA + "/kv",
		baseA + "/kv/" + esc(a.key),
		baseA + "/orient",
	}
	for _, path := range own {
		body := agentA.must(http.StatusOK, nil, http.MethodGet, path, "")
		for _, leak := range []string{"bravo", b.sandbox, b.thread, b.run, b.task, b.pushOpID} {
			if strings.Contains(body, leak) {
				t.Errorf("GET %s with A's token shows %q of B: %s", path, leak, body)
			}
		}
	}
	var or client.Orient
	agentA.must(http.StatusOK, &or, http.MethodGet, baseA+"/orient", "")
	if or.Run == nil || or.Run.Run.ID != a.run || len(or.Checkpoints) != 1 || len(or.OpenTasks) != 1 {
		t.Errorf("A's orient: %+v", or)
	}
	var o client.Operation
	agentA.must(http.StatusOK, &o, http.MethodGet, "/v1/operations/"+a.pushOpID, "")
	if o.Target != a.sandbox || o.State != client.OperationSucceeded {
		t.Errorf("A's own push: %+v", o)
	}
	// An operation on no sandbox (a repository check) is no sandbox's.
	check, err := s.CheckRepo(ctx, tn, false, client.CheckRequest{Wait: true})
	opDone(t, check, err, nil)
	agentA.must(http.StatusNotFound, nil, http.MethodGet, "/v1/operations/"+check.ID, "")

	// Ids of B's kinds that are free in A stay free in A: creating them
	// there is no oracle of B's, and leaves B's alone.
	agentA.must(http.StatusCreated, nil, http.MethodPost, baseA+"/tasks", `{"id":"`+b.task+`"}`)
	agentA.must(http.StatusCreated, nil, http.MethodPost, baseA+"/threads", `{"name":"`+b.threadName+`"}`)
	agentB.must(http.StatusOK, &task, http.MethodGet, baseB+"/tasks/"+b.task, "")
	if !strings.Contains(string(task.Payload), "bravo-marker") {
		t.Errorf("B's task after A made one with its id: %+v", task)
	}
}
