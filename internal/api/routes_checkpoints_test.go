package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

func TestPutCheckpointPassesPrincipalBodyAndParams(t *testing.T) {
	var mu sync.Mutex
	var gotP Principal
	var gotSandbox string
	var gotW CheckpointWrite
	fb := &fakeBackend{PutCheckpointFunc: func(_ context.Context, p Principal, sandbox string, w CheckpointWrite) (client.Checkpoint, error) {
		mu.Lock()
		defer mu.Unlock()
		gotP, gotSandbox, gotW = p, sandbox, w
		return client.Checkpoint{Name: w.Name, Agent: w.Agent, Version: 4, Principal: p.KeyID, Run: w.Run}, nil
	}}
	c, _ := newTestServer(t, fb, aliceKey)
	body := []byte(`{"step": 3, "items": ["a", "b"]}`)
	cp, err := c.PutCheckpoint(testCtx(t), "agent 1", "plan.v2", body,
		client.PutCheckpointOptions{Agent: "planner", IfVersion: new(int64(3)), Run: "run-42", Keep: 5})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if gotP.TenantID != "t-alice" || gotP.KeyID != "k1" {
		t.Errorf("principal %+v, want alice's tenant and key id", gotP)
	}
	if gotSandbox != "agent 1" || gotW.Name != "plan.v2" || gotW.Agent != "planner" || gotW.Run != "run-42" || gotW.Keep != 5 {
		t.Errorf("backend got sandbox %q write %+v", gotSandbox, gotW)
	}
	if gotW.IfVersion == nil || *gotW.IfVersion != 3 {
		t.Errorf("if-version %v, want 3", gotW.IfVersion)
	}
	if !json.Valid(gotW.Body) || !strings.Contains(string(gotW.Body), `"items"`) {
		t.Errorf("body %s", gotW.Body)
	}
	if cp.Version != 4 || cp.Principal != "k1" || cp.Run != "run-42" {
		t.Errorf("returned %+v", cp)
	}
}

func TestPutCheckpointIfMatchForms(t *testing.T) {
	var got []*int64
	var mu sync.Mutex
	fb := &fakeBackend{PutCheckpointFunc: func(_ context.Context, p Principal, _ string, w CheckpointWrite) (client.Checkpoint, error) {
		mu.Lock()
		got = append(got, w.IfVersion)
		mu.Unlock()
		return client.Checkpoint{Name: w.Name, Version: 1}, nil
	}}
	_, srv := newTestServer(t, fb, aliceKey)
	put := func(ifMatch string) *http.Response {
		req, _ := http.NewRequestWithContext(testCtx(t), http.MethodPut, srv.URL+"/v1/sandboxes/sb/checkpoints/plan", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		req.Header.Set("Content-Type", "application/json")
		if ifMatch != "" {
			req.Header.Set("If-Match", ifMatch)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp
	}
	for _, h := range []string{"", "7", `"7"`, "0"} {
		resp := put(h)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("If-Match %q: status %d", h, resp.StatusCode)
		}
		if resp.Header.Get("ETag") != `"1"` {
			t.Errorf("ETag %q, want \"1\"", resp.Header.Get("ETag"))
		}
	}
	mu.Lock()
	want := []string{"<nil>", "7", "7", "0"}
	for i, v := range got {
		s := "<nil>"
		if v != nil {
			s = fmt.Sprint(*v)
		}
		if s != want[i] {
			t.Errorf("put %d: if-version %s, want %s", i, s, want[i])
		}
	}
	n := len(got)
	mu.Unlock()
	for _, bad := range []string{"*", "abc", "-1", `W/"3"`} {
		if resp := put(bad); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("If-Match %q: status %d, want 400", bad, resp.StatusCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n {
		t.Errorf("backend called for a malformed If-Match")
	}
}

func TestPutCheckpointVersionMismatchIs409(t *testing.T) {
	fb := &fakeBackend{PutCheckpointFunc: func(_ context.Context, _ Principal, _ string, w CheckpointWrite) (client.Checkpoint, error) {
		if w.IfVersion != nil && *w.IfVersion != 2 {
			return client.Checkpoint{}, fmt.Errorf("put checkpoint x/plan: if-version %d is stale, the latest version is 2: %w", *w.IfVersion, errs.ErrConflict)
		}
		return client.Checkpoint{Name: w.Name, Version: 3}, nil
	}}
	c, _ := newTestServer(t, fb, aliceKey)
	_, err := c.PutCheckpoint(testCtx(t), "x", "plan", []byte(`1`), client.PutCheckpointOptions{IfVersion: new(int64(1))})
	if !client.IsConflict(err) || !strings.Contains(err.Error(), "latest version is 2") {
		t.Fatalf("stale put: %v, want 409 saying the latest version", err)
	}
	if _, err := c.PutCheckpoint(testCtx(t), "x", "plan", []byte(`1`), client.PutCheckpointOptions{IfVersion: new(int64(2))}); err != nil {
		t.Fatalf("current put: %v", err)
	}
}

func TestPutCheckpointSchemaFailureIs400(t *testing.T) {
	fb := &fakeBackend{PutCheckpointFunc: func(context.Context, Principal, string, CheckpointWrite) (client.Checkpoint, error) {
		return client.Checkpoint{}, fmt.Errorf("put checkpoint x/plan: document does not match its schema: at /step: got string, want integer: %w", errs.ErrInvalid)
	}}
	c, _ := newTestServer(t, fb, aliceKey)
	_, err := c.PutCheckpoint(testCtx(t), "x", "plan", []byte(`{"step":"two"}`), client.PutCheckpointOptions{})
	if client.StatusCode(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "at /step") {
		t.Fatalf("put failing the schema: %v, want 400 saying where", err)
	}
	// And for a rollback and a schema that does not compile.
	fb.RollbackCheckpointFunc = func(context.Context, Principal, string, string, string, client.RollbackCheckpointRequest) (client.Checkpoint, error) {
		return client.Checkpoint{}, fmt.Errorf("rollback: document does not match its schema: %w", errs.ErrInvalid)
	}
	_, err = c.RollbackCheckpoint(testCtx(t), "x", "", "plan", client.RollbackCheckpointRequest{Version: 1})
	if client.StatusCode(err) != http.StatusBadRequest {
		t.Fatalf("rollback failing the schema: %v, want 400", err)
	}
	fb.SetCheckpointSchemaFunc = func(context.Context, Principal, string, string, string, []byte) (client.CheckpointInfo, error) {
		return client.CheckpointInfo{}, fmt.Errorf("schema does not compile: %w", errs.ErrInvalid)
	}
	_, err = c.SetCheckpointSchema(testCtx(t), "x", "", "plan", []byte(`{"type":12}`))
	if client.StatusCode(err) != http.StatusBadRequest {
		t.Fatalf("bad schema: %v, want 400", err)
	}
}

func TestCheckpointsOfAnotherTenantsSandboxAre404(t *testing.T) {
	// Alice's tenant owns "mine"; every checkpoint call on it from another
	// tenant is a 404, as for an absent sandbox.
	owned := func(tenant, sandbox string) error {
		if tenant != "t-alice" || sandbox != "mine" {
			return fmt.Errorf("sandbox %s: %w", sandbox, errs.ErrNotFound)
		}
		return nil
	}
	fb := &fakeBackend{
		PutCheckpointFunc: func(_ context.Context, p Principal, sb string, w CheckpointWrite) (client.Checkpoint, error) {
			return client.Checkpoint{Name: w.Name, Version: 1}, owned(p.TenantID, sb)
		},
		GetCheckpointFunc: func(_ context.Context, tenant, sb, _, name string, _ int64) (client.Checkpoint, error) {
			return client.Checkpoint{Name: name, Version: 1, Body: []byte(`1`)}, owned(tenant, sb)
		},
		ListCheckpointsFunc: func(_ context.Context, tenant, sb string) ([]client.CheckpointInfo, error) {
			return nil, owned(tenant, sb)
		},
		CheckpointVersionsFunc: func(_ context.Context, tenant, sb, _, _ string) ([]client.Checkpoint, error) {
			return nil, owned(tenant, sb)
		},
		RollbackCheckpointFunc: func(_ context.Context, p Principal, sb, _, _ string, _ client.RollbackCheckpointRequest) (client.Checkpoint, error) {
			return client.Checkpoint{}, owned(p.TenantID, sb)
		},
		SetCheckpointSchemaFunc: func(_ context.Context, p Principal, sb, _, _ string, _ []byte) (client.CheckpointInfo, error) {
			return client.CheckpointInfo{}, owned(p.TenantID, sb)
		},
		DeleteCheckpointFunc: func(_ context.Context, p Principal, sb, _, _ string) error {
			return owned(p.TenantID, sb)
		},
	}
	alice, srv := newTestServer(t, fb, aliceKey)
	admin, err := client.New(srv.URL, adminKey) // tenant t-admin
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.GetCheckpoint(testCtx(t), "mine", "", "plan", 0); err != nil {
		t.Fatalf("owner: %v", err)
	}
	for _, r := range allRoutes() {
		if !strings.Contains(r.name, "checkpoint") {
			continue
		}
		// allRoutes uses sandbox "my-sandbox.v2", which nobody owns.
		if err := r.call(testCtx(t), alice); !client.IsNotFound(err) {
			t.Errorf("%s on an absent sandbox: %v, want 404", r.name, err)
		}
	}
	calls := []func(ctx context.Context, c *client.Client) error{
		func(ctx context.Context, c *client.Client) error {
			_, err := c.PutCheckpoint(ctx, "mine", "plan", []byte(`1`), client.PutCheckpointOptions{})
			return err
		},
		func(ctx context.Context, c *client.Client) error {
			_, err := c.GetCheckpoint(ctx, "mine", "", "plan", 0)
			return err
		},
		func(ctx context.Context, c *client.Client) error {
			_, err := c.ListCheckpoints(ctx, "mine")
			return err
		},
		func(ctx context.Context, c *client.Client) error {
			_, err := c.CheckpointVersions(ctx, "mine", "", "plan")
			return err
		},
		func(ctx context.Context, c *client.Client) error {
			_, err := c.RollbackCheckpoint(ctx, "mine", "", "plan", client.RollbackCheckpointRequest{Version: 1})
			return err
		},
		func(ctx context.Context, c *client.Client) error {
			_, err := c.SetCheckpointSchema(ctx, "mine", "", "plan", []byte(`{}`))
			return err
		},
		func(ctx context.Context, c *client.Client) error { return c.DeleteCheckpoint(ctx, "mine", "", "plan") },
	}
	for i, call := range calls {
		if err := call(testCtx(t), admin); !client.IsNotFound(err) {
			t.Errorf("call %d from another tenant: %v, want 404", i, err)
		}
	}
}

func TestGetCheckpointReturnsTheEnvelope(t *testing.T) {
	fb := &fakeBackend{GetCheckpointFunc: func(_ context.Context, tenant, sb, agent, name string, version int64) (client.Checkpoint, error) {
		return client.Checkpoint{Name: name, Agent: agent, Version: version, Principal: "k9", Run: "r1", Note: "rollback from 1",
			Body: json.RawMessage(`{"nested": {"a": [1, 2.5, "x", null]}}`)}, nil
	}}
	_, srv := newTestServer(t, fb, aliceKey)
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, srv.URL+"/v1/sandboxes/sb/checkpoints/plan?agent=planner&version=2", nil)
	req.Header.Set("X-API-Key", aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != `"2"` {
		t.Fatalf("status %d etag %q: %s", resp.StatusCode, resp.Header.Get("ETag"), raw)
	}
	var env map[string]any
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("not JSON: %s", raw)
	}
	for _, k := range []string{"name", "version", "created_at", "principal", "run", "body"} {
		if _, ok := env[k]; !ok {
			t.Errorf("envelope lacks %q: %s", k, raw)
		}
	}
	if !bytes.Contains(raw, []byte(`"body":{"nested":{"a":[1,2.5,"x",null]}}`)) {
		t.Errorf("body not embedded as JSON: %s", raw)
	}
	if env["agent"] != "planner" || env["version"] != float64(2) {
		t.Errorf("envelope %s", raw)
	}
}

func TestPutCheckpointRejectsNonJSONAndOversizedBodies(t *testing.T) {
	fb := &fakeBackend{}
	c, _ := newTestServer(t, fb, aliceKey)
	_, err := c.PutCheckpoint(testCtx(t), "x", "plan", []byte(`{"step":`), client.PutCheckpointOptions{})
	if !client.IsInvalid(err) {
		t.Fatalf("truncated JSON: %v, want 400/422", err)
	}
	big := append(append([]byte(`"`), bytes.Repeat([]byte("x"), MaxJSONBodyBytes)...), '"')
	_, err = c.PutCheckpoint(testCtx(t), "x", "plan", big, client.PutCheckpointOptions{})
	if client.StatusCode(err) != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %v, want 413", err)
	}
	for _, call := range fb.Calls() {
		if call.Method == "PutCheckpoint" {
			t.Fatalf("backend called with a refused body")
		}
	}
}

// plainBackend implements Backend but not CheckpointBackend.
type plainBackend struct{ Backend }

func TestCheckpointRoutesNeedACheckpointBackend(t *testing.T) {
	fb := &fakeBackend{}
	h := NewHandler(plainBackend{fb}, Options{Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, aliceKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListCheckpoints(testCtx(t), "x"); !client.IsNotFound(err) {
		t.Fatalf("list checkpoints without a CheckpointBackend: %v, want 404", err)
	}
	doc, err := c.OpenAPI(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(doc, []byte("/checkpoints")) {
		t.Errorf("OpenAPI document lists checkpoint routes the backend cannot serve")
	}
	if _, err := c.GetSandbox(testCtx(t), "x"); err != nil {
		t.Fatalf("other routes still work: %v", err)
	}
}

func TestCheckpointRollbackAndSchemaRoutesPassTheirArguments(t *testing.T) {
	var mu sync.Mutex
	var rbReq client.RollbackCheckpointRequest
	var rbP Principal
	var schema []byte
	var schemaCalls int
	fb := &fakeBackend{
		RollbackCheckpointFunc: func(_ context.Context, p Principal, _, agent, name string, req client.RollbackCheckpointRequest) (client.Checkpoint, error) {
			mu.Lock()
			defer mu.Unlock()
			rbP, rbReq = p, req
			return client.Checkpoint{Name: name, Agent: agent, Version: 5, Note: "rollback from 2"}, nil
		},
		SetCheckpointSchemaFunc: func(_ context.Context, _ Principal, _, _, name string, s []byte) (client.CheckpointInfo, error) {
			mu.Lock()
			defer mu.Unlock()
			schema = s
			schemaCalls++
			return client.CheckpointInfo{Name: name, Schema: s}, nil
		},
	}
	c, _ := newTestServer(t, fb, aliceKey)
	cp, err := c.RollbackCheckpoint(testCtx(t), "x", "planner", "plan", client.RollbackCheckpointRequest{Version: 2, Run: "r", IfVersion: new(int64(4))})
	if err != nil {
		t.Fatal(err)
	}
	if cp.Version != 5 || cp.Note != "rollback from 2" {
		t.Errorf("rollback returned %+v", cp)
	}
	_, err = c.RollbackCheckpoint(testCtx(t), "x", "", "plan", client.RollbackCheckpointRequest{Version: 0})
	if !client.IsInvalid(err) {
		t.Errorf("rollback to version 0: %v, want 4xx invalid", err)
	}
	info, err := c.SetCheckpointSchema(testCtx(t), "x", "", "plan", []byte(`{"type": "object"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(info.Schema) {
		t.Errorf("schema in response %q", info.Schema)
	}
	mu.Lock()
	if rbP.KeyID != "k1" || rbReq.Version != 2 || rbReq.Run != "r" || rbReq.IfVersion == nil || *rbReq.IfVersion != 4 {
		t.Errorf("rollback got %+v %+v", rbP, rbReq)
	}
	if string(schema) != `{"type":"object"}` && string(schema) != `{"type": "object"}` {
		t.Errorf("schema passed %q", schema)
	}
	mu.Unlock()
	if _, err := c.SetCheckpointSchema(testCtx(t), "x", "", "plan", nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if schemaCalls != 2 || schema != nil {
		t.Errorf("remove schema passed %q (%d calls), want nil", schema, schemaCalls)
	}
}

func TestSetCheckpointPolicyPassesTheRequest(t *testing.T) {
	var got client.SetCheckpointPolicyRequest
	var gotP Principal
	var gotAgent, gotName string
	var mu sync.Mutex
	fb := &fakeBackend{SetCheckpointPolicyFunc: func(_ context.Context, p Principal, _, agent, name string, req client.SetCheckpointPolicyRequest) (client.CheckpointInfo, error) {
		mu.Lock()
		defer mu.Unlock()
		got, gotP, gotAgent, gotName = req, p, agent, name
		return client.CheckpointInfo{Name: name, Agent: agent, Keep: 1,
			Policy: client.CheckpointPolicy{Write: req.Write, Read: req.Read, Mutability: req.Mutability}}, nil
	}}
	c, _ := newTestServer(t, fb, aliceKey)
	req := client.SetCheckpointPolicyRequest{
		Write:      client.CheckpointAccess{Who: client.AccessKeys, Keys: []string{"key-a", "key-b"}},
		Read:       client.CheckpointAccess{Who: client.AccessAgent},
		Mutability: client.AppendOnly,
		Keep:       1,
	}
	info, err := c.SetCheckpointPolicy(testCtx(t), "x", "planner", "plan", req)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if gotP.KeyID != "k1" || gotAgent != "planner" || gotName != "plan" || got.Keep != 1 || got.Mutability != "append-only" ||
		got.Write.Who != "keys" || len(got.Write.Keys) != 2 || got.Read.Who != "agent" {
		t.Errorf("backend got %+v from %+v for %s/%s", got, gotP, gotAgent, gotName)
	}
	if info.Policy.Mutability != "append-only" || info.Policy.Read.Who != "agent" {
		t.Errorf("returned %+v", info)
	}
	// An unknown enum value is refused before the backend.
	_, err = c.SetCheckpointPolicy(testCtx(t), "x", "", "plan", client.SetCheckpointPolicyRequest{Mutability: "sometimes"})
	if client.StatusCode(err) != http.StatusBadRequest && client.StatusCode(err) != http.StatusUnprocessableEntity {
		t.Errorf("bad mutability: %v, want 400/422", err)
	}
}

func TestCheckpointGovernanceErrorsMapTo403And409(t *testing.T) {
	forbidden := fmt.Errorf("writing this document is limited to admin keys, and this caller is API key k1: %w", errs.ErrForbidden)
	immutable := fmt.Errorf("the document is immutable: only version 1 may be written, and it has version 1: %w", errs.ErrConflict)
	fb := &fakeBackend{
		PutCheckpointFunc: func(context.Context, Principal, string, CheckpointWrite) (client.Checkpoint, error) {
			return client.Checkpoint{}, immutable
		},
		RollbackCheckpointFunc: func(context.Context, Principal, string, string, string, client.RollbackCheckpointRequest) (client.Checkpoint, error) {
			return client.Checkpoint{}, forbidden
		},
		SetCheckpointPolicyFunc: func(context.Context, Principal, string, string, string, client.SetCheckpointPolicyRequest) (client.CheckpointInfo, error) {
			return client.CheckpointInfo{}, forbidden
		},
		DeleteCheckpointFunc: func(context.Context, Principal, string, string, string) error { return forbidden },
	}
	c, _ := newTestServer(t, fb, aliceKey)
	_, err := c.PutCheckpoint(testCtx(t), "x", "plan", []byte(`2`), client.PutCheckpointOptions{})
	if !client.IsConflict(err) || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("immutable put: %v, want 409 saying immutable", err)
	}
	_, err = c.RollbackCheckpoint(testCtx(t), "x", "", "plan", client.RollbackCheckpointRequest{Version: 1})
	if !client.IsForbidden(err) || !strings.Contains(err.Error(), "admin keys") {
		t.Errorf("forbidden rollback: %v, want 403 saying who may", err)
	}
	if _, err = c.SetCheckpointPolicy(testCtx(t), "x", "", "plan", client.SetCheckpointPolicyRequest{}); !client.IsForbidden(err) {
		t.Errorf("forbidden policy: %v, want 403", err)
	}
	if err = c.DeleteCheckpoint(testCtx(t), "x", "", "plan"); !client.IsForbidden(err) {
		t.Errorf("forbidden delete: %v, want 403", err)
	}
}

// scopedBackend is the fake with a read scope: reads go through
// ScopedCheckpointReader, which forbids every key but k-reader.
type scopedBackend struct {
	*fakeBackend
}

func (b scopedBackend) ReadCheckpoint(_ context.Context, p Principal, _, agent, name string, _ int64) (client.Checkpoint, error) {
	if p.KeyID != "k-reader" {
		return client.Checkpoint{}, fmt.Errorf("reading this document is limited to the API keys k-reader: %w", errs.ErrForbidden)
	}
	return client.Checkpoint{Name: name, Agent: agent, Version: 1, Body: json.RawMessage(`{}`)}, nil
}

func (b scopedBackend) ReadCheckpointVersions(_ context.Context, p Principal, _, _, _ string) ([]client.Checkpoint, error) {
	if p.KeyID != "k-reader" {
		return nil, fmt.Errorf("scope: %w", errs.ErrForbidden)
	}
	return []client.Checkpoint{}, nil
}

func TestCheckpointReadsGoThroughTheScopedReader(t *testing.T) {
	fb := &fakeBackend{}
	c, _ := newTestServer(t, scopedBackend{fb}, aliceKey)
	_, err := c.GetCheckpoint(testCtx(t), "x", "", "plan", 0)
	if !client.IsForbidden(err) {
		t.Errorf("scoped get: %v, want 403", err)
	}
	_, err = c.CheckpointVersions(testCtx(t), "x", "", "plan")
	if !client.IsForbidden(err) {
		t.Errorf("scoped versions: %v, want 403", err)
	}
	for _, call := range fb.Calls() {
		if call.Method == "GetCheckpoint" || call.Method == "CheckpointVersions" {
			t.Errorf("the unscoped %s was called", call.Method)
		}
	}
}
