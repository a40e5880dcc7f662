package api

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
)

// orientFake serves orient on top of fakeBackend.
type orientFake struct{ *fakeBackend }

func (f orientFake) Orient(_ context.Context, tenant, id string, _ []string, _ int) (client.Orient, error) {
	f.record("Orient", tenant, id)
	return client.Orient{Sandbox: client.Sandbox{ID: id}}, f.Err
}

// agentRoutes returns "METHOD path" → agent access of every route the
// handler of b opens to sandbox-scoped tokens, read from its OpenAPI
// document (where API users see it too).
func agentRoutes(t *testing.T, b Backend) map[string]string {
	t.Helper()
	c, _ := newTestServer(t, b, "")
	raw, err := c.OpenAPI(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if a, ok := op[agentAccessKey].(string); ok {
				out[strings.ToUpper(method)+" "+path] = a
			}
		}
	}
	return out
}

// TestSandboxTokenRoutesAreExactlyThese pins what the agent token inside a
// sandbox may call: opening a route to it is a deliberate change of this
// list. Every own-sandbox route must also pass the coarse path fence, or it
// would be unreachable.
func TestSandboxTokenRoutesAreExactlyThese(t *testing.T) {
	got := map[string]string{}
	for _, b := range []Backend{&fakeBackend{}, newSessionFake(), newTaskFake(), newBackupFake(), orientFake{&fakeBackend{}}} {
		for r, a := range agentRoutes(t, b) {
			got[r] = a
		}
	}
	own, scoped := string(agentOwnSandbox), string(agentScopedByBackend)
	want := map[string]string{
		"PUT /v1/sandboxes/{id}/checkpoints/{name}":           own,
		"GET /v1/sandboxes/{id}/checkpoints/{name}":           own,
		"GET /v1/sandboxes/{id}/checkpoints":                  own,
		"GET /v1/sandboxes/{id}/checkpoints/{name}/versions":  own,
		"POST /v1/sandboxes/{id}/checkpoints/{name}/rollback": own,
		"PUT /v1/sandboxes/{id}/checkpoints/{name}/schema":    own,
		"DELETE /v1/sandboxes/{id}/checkpoints/{name}/schema": own,
		"PUT /v1/sandboxes/{id}/checkpoints/{name}/policy":    own,
		"DELETE /v1/sandboxes/{id}/checkpoints/{name}":        own,

		"POST /v1/sandboxes/{id}/threads":                   own,
		"GET /v1/sandboxes/{id}/threads":                    own,
		"PUT /v1/sandboxes/{id}/threads/{thread}/retention": own,
		"POST /v1/sandboxes/{id}/threads/{thread}/prune":    own,
		"POST /v1/sandboxes/{id}/threads/{thread}/runs":     own,
		"GET /v1/sandboxes/{id}/threads/{thread}/runs":      own,
		"POST /v1/sandboxes/{id}/threads/runs/{run}/events": own,
		"GET /v1/sandboxes/{id}/threads/runs/{run}/events":  own,
		"GET /v1/sandboxes/{id}/threads/runs/{run}/resume":  own,
		"POST /v1/sandboxes/{id}/threads/runs/{run}/end":    own,

		"POST /v1/sandboxes/{id}/tasks":              own,
		"GET /v1/sandboxes/{id}/tasks":               own,
		"GET /v1/sandboxes/{id}/tasks/{task}":        own,
		"POST /v1/sandboxes/{id}/tasks/{task}/state": own,
		"POST /v1/sandboxes/{id}/observations":       own,
		"GET /v1/sandboxes/{id}/observations":        own,
		"PUT /v1/sandboxes/{id}/kv/{key}":            own,
		"GET /v1/sandboxes/{id}/kv/{key}":            own,
		"GET /v1/sandboxes/{id}/kv":                  own,
		"DELETE /v1/sandboxes/{id}/kv/{key}":         own,

		"GET /v1/sandboxes/{id}/network": own,
		"GET /v1/sandboxes/{id}/ports":   own,

		"GET /v1/sandboxes/{id}/orient":        own,
		"GET /v1/sandboxes/{id}/history":       own,
		"POST /v1/sandboxes/{id}/restore-path": own,

		"GET /v1/operations/{id}":        scoped,
		"GET /v1/operations/{id}/events": scoped,
	}
	var keys []string
	for r := range want {
		keys = append(keys, r)
	}
	for r := range got {
		if _, ok := want[r]; !ok {
			keys = append(keys, r)
		}
	}
	sort.Strings(keys)
	param := regexp.MustCompile(`\{[a-z]+\}`)
	for _, r := range keys {
		if got[r] != want[r] {
			t.Errorf("%s: agent access %q, want %q", r, got[r], want[r])
			continue
		}
		_, path, _ := strings.Cut(r, " ")
		concrete := param.ReplaceAllString(strings.Replace(path, "{id}", "sb-1", 1), "x")
		if !sandboxScopeAllows("sb-1", concrete) {
			t.Errorf("%s is open to the agent token, but the path fence refuses %s", r, concrete)
		}
	}
}

// TestSandboxTokenIsConfinedByTheRoutesSandboxParameter proves the check
// uses the route's parsed {id}, not the raw path: an escaped slash gets
// past the path fence (it sees the decoded path) but names another
// sandbox in {id}, and is refused before any backend call.
func TestSandboxTokenIsConfinedByTheRoutesSandboxParameter(t *testing.T) {
	f := newTaskFake()
	f.AuthenticateFunc = func(context.Context, string) (Principal, error) {
		return Principal{TenantID: "t-alice", KeyID: "sandbox:sb-1", Sandbox: "sb-1"}, nil
	}
	_, srv := newTestServer(t, f, aliceKey)
	if !sandboxScopeAllows("sb-1", "/v1/sandboxes/sb-1/kv/tasks") {
		t.Fatal("the path fence refuses the decoded path: this test proves nothing")
	}
	doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb-1%2Fkv/tasks", "", http.StatusForbidden)
	doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb-1/tasks", "", http.StatusOK)
	for _, call := range f.Calls() {
		if call.ID != "sb-1" {
			t.Errorf("%s reached sandbox %q", call.Method, call.ID)
		}
	}
}

// TestSandboxTokenRefusalNamesNoOtherSandbox: another sandbox's id in the
// path answers exactly as a made-up one.
func TestSandboxTokenRefusalNamesNoOtherSandbox(t *testing.T) {
	f := newSessionFake()
	f.AuthenticateFunc = func(context.Context, string) (Principal, error) {
		return Principal{TenantID: "t-alice", KeyID: "sandbox:sb-1", Sandbox: "sb-1"}, nil
	}
	_, srv := newTestServer(t, f, aliceKey)
	for _, path := range []string{"/threads", "/kv/k", "/checkpoints/plan", "/exec", ""} {
		other := doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb-2"+path, "", http.StatusForbidden)
		madeUp := doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb-nope"+path, "", http.StatusForbidden)
		if other != madeUp || strings.Contains(other, "sb-2") {
			t.Errorf("%s: another sandbox answers %s, a made-up one %s", path, other, madeUp)
		}
	}
	if calls := f.Calls(); len(calls) != 0 {
		t.Errorf("the backend was called: %v", calls)
	}
	// An admin key is not confined.
	f.AuthenticateFunc = nil
	doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb-2/threads", "", http.StatusOK)
	if !slices.ContainsFunc(f.Calls(), func(c fakeCall) bool { return c.ID == "sb-2" }) {
		t.Error("an API key of the tenant could not list another sandbox's threads")
	}
}
