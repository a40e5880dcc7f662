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

func TestSnapshotRoutesPassTheirArguments(t *testing.T) {
	var mu sync.Mutex
	var createSB, listSB, forkSource, rbSB string
	var createReq client.CreateSnapshotRequest
	var forkReq client.ForkRequest
	var rbReq client.RollbackRequest
	fb := &fakeBackend{
		CreateSnapshotFunc: func(_ context.Context, tenant, sb string, req client.CreateSnapshotRequest) (client.Snapshot, error) {
			mu.Lock()
			defer mu.Unlock()
			createSB, createReq = sb, req
			return client.Snapshot{ID: "snap-9", Sandbox: "sb-1", SandboxName: sb, Label: req.Label, Kind: "user", FrozenFor: "3ms"}, nil
		},
		ListSnapshotsFunc: func(_ context.Context, tenant, sb string) ([]client.Snapshot, error) {
			mu.Lock()
			defer mu.Unlock()
			listSB = sb
			return []client.Snapshot{{ID: "snap-1", Kind: "user"}, {ID: "snap-2", Parent: "snap-1", Kind: "fork"}}, nil
		},
		ForkFunc: func(_ context.Context, tenant, source string, req client.ForkRequest) ([]client.Sandbox, error) {
			mu.Lock()
			defer mu.Unlock()
			forkSource, forkReq = source, req
			out := make([]client.Sandbox, req.Count)
			for i := range out {
				out[i] = client.Sandbox{ID: fmt.Sprintf("sb-f%d", i), State: "stopped"}
			}
			return out, nil
		},
		RollbackFunc: func(_ context.Context, tenant, sb string, req client.RollbackRequest) (client.RollbackResult, error) {
			mu.Lock()
			defer mu.Unlock()
			rbSB, rbReq = sb, req
			return client.RollbackResult{
				Sandbox: client.Sandbox{ID: "sb-1", Name: sb, State: "running"},
				Safety:  client.Snapshot{ID: "snap-safe", Kind: "safety"},
			}, nil
		},
	}
	c, srv := newTestServer(t, fb, aliceKey)
	ctx := testCtx(t)

	snap, err := c.CreateSnapshot(ctx, "agent 1", client.CreateSnapshotRequest{Label: "hour 4", Description: "before the refactor"})
	if err != nil {
		t.Fatal(err)
	}
	if snap.ID != "snap-9" || snap.FrozenFor != "3ms" || snap.SandboxName != "agent 1" {
		t.Errorf("create returned %+v", snap)
	}
	list, err := c.ListSnapshots(ctx, "agent 1")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[1].Parent != "snap-1" {
		t.Errorf("list returned %+v", list)
	}
	sbs, err := c.Fork(ctx, "snap-9", client.ForkRequest{Count: 3, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != 3 || sbs[2].ID != "sb-f2" {
		t.Errorf("fork returned %+v", sbs)
	}
	mu.Lock()
	if createSB != "agent 1" || createReq.Label != "hour 4" || createReq.Description != "before the refactor" {
		t.Errorf("create got %q %+v", createSB, createReq)
	}
	if listSB != "agent 1" {
		t.Errorf("list got sandbox %q", listSB)
	}
	if forkSource != "snap-9" || forkReq.Count != 3 || !forkReq.NoStart {
		t.Errorf("fork got %q %+v", forkSource, forkReq)
	}
	mu.Unlock()

	res, err := c.Rollback(ctx, "agent 1", "snap-9")
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.State != "running" || res.Safety.ID != "snap-safe" {
		t.Errorf("rollback returned %+v", res)
	}
	mu.Lock()
	if rbSB != "agent 1" || rbReq.Snapshot != "snap-9" {
		t.Errorf("rollback got %q %+v", rbSB, rbReq)
	}
	mu.Unlock()

	// A list of none is [], not null.
	fb.ListSnapshotsFunc = nil
	raw := doRaw(t, srv, http.MethodGet, "/v1/snapshots", "", http.StatusOK)
	if strings.TrimSpace(raw) != emptyPage {
		t.Errorf("empty list %q, want []", raw)
	}
}

// doRaw sends an authenticated request as alice and returns the body,
// failing unless the status is want.
func doRaw(t *testing.T, srv *httptest.Server, method, path, body string, want int) string {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(testCtx(t), method, srv.URL+path, r)
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, b)
	}
	return string(b)
}

func TestSnapshotRoutesWireFormat(t *testing.T) {
	fb := &fakeBackend{}
	_, srv := newTestServer(t, fb, aliceKey)

	raw := doRaw(t, srv, http.MethodPost, "/v1/sandboxes/agent-1/snapshots", `{"label":"x"}`, http.StatusCreated)
	var snap map[string]any
	if err := json.Unmarshal([]byte(raw), &snap); err != nil || snap["id"] != "snap-1" || snap["label"] != "x" || snap["kind"] != "user" {
		t.Errorf("create body %s", raw)
	}
	// No body at all is an empty request (no label).
	doRaw(t, srv, http.MethodPost, "/v1/sandboxes/agent-1/snapshots", "", http.StatusCreated)

	for _, path := range []string{"/v1/sandboxes/agent-1/fork", "/v1/snapshots/snap-1/fork"} {
		raw = doRaw(t, srv, http.MethodPost, path, `{"count":2}`, http.StatusCreated)
		var res struct {
			Sandboxes []client.Sandbox `json:"sandboxes"`
		}
		if err := json.Unmarshal([]byte(raw), &res); err != nil || len(res.Sandboxes) != 2 {
			t.Errorf("%s body %s", path, raw)
		}
		doRaw(t, srv, http.MethodPost, path, "", http.StatusCreated) // count defaults (backend's job)
	}
	raw = doRaw(t, srv, http.MethodPost, "/v1/sandboxes/agent-1/rollback", `{"snapshot":"snap-1"}`, http.StatusOK)
	var rb map[string]map[string]any
	if err := json.Unmarshal([]byte(raw), &rb); err != nil || rb["sandbox"]["id"] != "agent-1" || rb["safety"]["kind"] != "safety" {
		t.Errorf("rollback body %s", raw)
	}
	if raw := doRaw(t, srv, http.MethodDelete, "/v1/snapshots/snap-1", "", http.StatusNoContent); raw != "" {
		t.Errorf("delete body %q", raw)
	}
	doRaw(t, srv, http.MethodGet, "/v1/snapshots?sandbox=agent-1", "", http.StatusOK)

	// Both fork routes reach Fork with the path's id.
	var sources []string
	for _, c := range fb.Calls() {
		if c.Method == "Fork" {
			sources = append(sources, c.ID)
		}
	}
	if strings.Join(sources, ",") != "agent-1,agent-1,snap-1,snap-1" {
		t.Errorf("fork sources %v", sources)
	}
}

func TestSnapshotRequestsAreValidatedBeforeTheBackend(t *testing.T) {
	fb := &fakeBackend{}
	c, srv := newTestServer(t, fb, aliceKey)
	ctx := testCtx(t)
	if _, err := c.Rollback(ctx, "agent-1", ""); !client.IsInvalid(err) {
		t.Errorf("rollback without a snapshot: %v, want 4xx invalid", err)
	}
	for _, n := range []int{-1, 51} {
		if _, err := c.Fork(ctx, "agent-1", client.ForkRequest{Count: n}); !client.IsInvalid(err) {
			t.Errorf("fork --count %d: %v, want 4xx invalid", n, err)
		}
	}
	if _, err := c.CreateSnapshot(ctx, "agent-1", client.CreateSnapshotRequest{Label: strings.Repeat("x", 201)}); !client.IsInvalid(err) {
		t.Errorf("201-character label: %v, want 4xx invalid", err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/sandboxes/agent-1/snapshots",
		bytes.NewReader(append([]byte(`{"description":"`), bytes.Repeat([]byte("x"), MaxJSONBodyBytes)...)))
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: status %d, want 413", resp.StatusCode)
	}
	if calls := fb.Calls(); len(calls) != 0 {
		t.Fatalf("backend called with refused requests: %v", calls)
	}
}

func TestSnapshotErrorsMapToStatusCodes(t *testing.T) {
	cases := []struct {
		err    error
		status int
	}{
		{fmt.Errorf("snapshot snap-x: %w", errs.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("rollback sb-1: sandbox is being created: %w", errs.ErrConflict), http.StatusConflict},
		{fmt.Errorf("fork: count 0: %w", errs.ErrInvalid), http.StatusBadRequest},
		{fmt.Errorf("snapshot: pool full: %w", errs.ErrQuota), http.StatusInsufficientStorage},
	}
	for _, tc := range cases {
		t.Run(tc.err.Error(), func(t *testing.T) {
			c, _ := newTestServer(t, &fakeBackend{Err: tc.err}, aliceKey)
			for _, r := range allRoutes() {
				if !strings.Contains(r.name, "snapshot") && !strings.HasPrefix(r.name, "fork") && r.name != "rollback-sandbox" {
					continue
				}
				err := r.call(testCtx(t), c)
				if client.StatusCode(err) != tc.status {
					t.Errorf("%s: %v, want %d", r.name, err, tc.status)
				}
				if !strings.Contains(err.Error(), strings.SplitN(tc.err.Error(), ":", 2)[0]) {
					t.Errorf("%s: %q does not carry the backend's message", r.name, err)
				}
			}
		})
	}
}

func TestSnapshotsOfAnotherTenantAre404(t *testing.T) {
	// Alice's tenant owns sandbox "mine" and snapshot "snap-mine"; the
	// fake refuses everything else as absent.
	owned := func(tenant, id string) error {
		if tenant != "t-alice" || (id != "mine" && id != "snap-mine") {
			return fmt.Errorf("%s: %w", id, errs.ErrNotFound)
		}
		return nil
	}
	fb := &fakeBackend{
		CreateSnapshotFunc: func(_ context.Context, tenant, sb string, _ client.CreateSnapshotRequest) (client.Snapshot, error) {
			return client.Snapshot{ID: "snap-mine"}, owned(tenant, sb)
		},
		ListSnapshotsFunc: func(_ context.Context, tenant, sb string) ([]client.Snapshot, error) {
			return nil, owned(tenant, sb)
		},
		GetSnapshotFunc: func(_ context.Context, tenant, id string) (client.Snapshot, error) {
			return client.Snapshot{ID: id}, owned(tenant, id)
		},
		DeleteSnapshotFunc: func(_ context.Context, tenant, id string) error { return owned(tenant, id) },
		ForkFunc: func(_ context.Context, tenant, source string, _ client.ForkRequest) ([]client.Sandbox, error) {
			return nil, owned(tenant, source)
		},
		RollbackFunc: func(_ context.Context, tenant, sb string, req client.RollbackRequest) (client.RollbackResult, error) {
			if err := owned(tenant, sb); err != nil {
				return client.RollbackResult{}, err
			}
			return client.RollbackResult{}, owned(tenant, req.Snapshot)
		},
	}
	alice, srv := newTestServer(t, fb, aliceKey)
	admin, err := client.New(srv.URL, adminKey) // tenant t-admin
	if err != nil {
		t.Fatal(err)
	}
	calls := []func(ctx context.Context, c *client.Client) error{
		func(ctx context.Context, c *client.Client) error {
			_, err := c.CreateSnapshot(ctx, "mine", client.CreateSnapshotRequest{})
			return err
		},
		func(ctx context.Context, c *client.Client) error { _, err := c.ListSnapshots(ctx, "mine"); return err },
		func(ctx context.Context, c *client.Client) error {
			_, err := c.GetSnapshot(ctx, "snap-mine")
			return err
		},
		func(ctx context.Context, c *client.Client) error {
			_, err := c.Fork(ctx, "mine", client.ForkRequest{})
			return err
		},
		func(ctx context.Context, c *client.Client) error {
			_, err := c.Fork(ctx, "snap-mine", client.ForkRequest{})
			return err
		},
		func(ctx context.Context, c *client.Client) error {
			_, err := c.Rollback(ctx, "mine", "snap-mine")
			return err
		},
		func(ctx context.Context, c *client.Client) error { return c.DeleteSnapshot(ctx, "snap-mine") },
	}
	for i, call := range calls {
		if err := call(testCtx(t), alice); err != nil {
			t.Errorf("call %d by the owner: %v", i, err)
		}
		if err := call(testCtx(t), admin); !client.IsNotFound(err) {
			t.Errorf("call %d from another tenant: %v, want 404", i, err)
		}
	}
}

// snapshotOnlyBackend implements SnapshotBackend but not CheckpointBackend.
type snapshotOnlyBackend struct {
	Backend
	SnapshotBackend
}

func TestSnapshotRoutesNeedASnapshotBackend(t *testing.T) {
	fb := &fakeBackend{}
	newServer := func(b Backend) (*client.Client, []byte) {
		srv := httptest.NewServer(NewHandler(b, Options{Logger: slog.New(slog.DiscardHandler)}))
		t.Cleanup(srv.Close)
		c, err := client.New(srv.URL, aliceKey)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := c.OpenAPI(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		return c, doc
	}

	c, doc := newServer(plainBackend{fb})
	if _, err := c.ListSnapshots(testCtx(t), ""); !client.IsNotFound(err) {
		t.Fatalf("list snapshots without a SnapshotBackend: %v, want 404", err)
	}
	if _, err := c.Fork(testCtx(t), "x", client.ForkRequest{}); !client.IsNotFound(err) && client.StatusCode(err) != http.StatusMethodNotAllowed {
		t.Fatalf("fork without a SnapshotBackend: %v, want 404 or 405", err)
	}
	for _, p := range []string{`"/v1/snapshots`, `/snapshots"`, `/fork"`, `"/v1/sandboxes/{id}/rollback"`} {
		if bytes.Contains(doc, []byte(p)) {
			t.Errorf("OpenAPI document lists %s, which the backend cannot serve", p)
		}
	}
	for _, call := range fb.Calls() {
		if strings.Contains(call.Method, "Snapshot") || call.Method == "Fork" || call.Method == "Rollback" {
			t.Fatalf("backend's %s called through a Backend without SnapshotBackend", call.Method)
		}
	}

	// The snapshot routes do not depend on the checkpoint ones.
	c, doc = newServer(snapshotOnlyBackend{fb, fb})
	if _, err := c.ListSnapshots(testCtx(t), ""); err != nil {
		t.Fatalf("list snapshots: %v", err)
	}
	if bytes.Contains(doc, []byte("/checkpoints")) || !bytes.Contains(doc, []byte(`"/v1/snapshots/{id}/fork"`)) {
		t.Errorf("OpenAPI document of a snapshot-only backend is wrong")
	}
}

func TestSnapshotOperationsAreTaggedAndDescribed(t *testing.T) {
	_, srv := newTestServer(t, &fakeBackend{}, "")
	resp, err := http.Get(srv.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string   `json:"operationId"`
			Summary     string   `json:"summary"`
			Description string   `json:"description"`
			Tags        []string `json:"tags"`
		} `json:"paths"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{
		"POST /v1/sandboxes/{id}/snapshots": true, "GET /v1/snapshots": true,
		"GET /v1/snapshots/{id}": false, "DELETE /v1/snapshots/{id}": true,
		"POST /v1/sandboxes/{id}/fork": true, "POST /v1/snapshots/{id}/fork": true,
		"POST /v1/sandboxes/{id}/rollback": true,
	}
	for w, wantDesc := range ops {
		method, path, _ := strings.Cut(w, " ")
		o, ok := doc.Paths[path][strings.ToLower(method)]
		if !ok {
			t.Errorf("%s missing", w)
			continue
		}
		if len(o.Tags) != 1 || o.Tags[0] != "snapshots" || o.Summary == "" {
			t.Errorf("%s: tags %v summary %q", w, o.Tags, o.Summary)
		}
		if wantDesc && len(o.Description) < 80 {
			t.Errorf("%s: description %q too thin", w, o.Description)
		}
	}
}
