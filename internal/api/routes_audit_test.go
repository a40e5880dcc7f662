package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// auditFake is a fakeBackend that also serves the audit trail: it keeps
// the recorded events and answers the audit routes from them.
type auditFake struct {
	*fakeBackend
	mu       sync.Mutex
	events   []AuditEvent
	queries  []client.AuditQuery
	verified int
}

var _ AuditBackend = (*auditFake)(nil)

func (f *auditFake) RecordAPIRequest(_ context.Context, ev AuditEvent) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev)
	return nil
}

func (f *auditFake) Events() []AuditEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]AuditEvent(nil), f.events...)
}

func (f *auditFake) ListAudit(_ context.Context, p Principal, q client.AuditQuery) ([]client.AuditEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, q)
	var out []client.AuditEntry
	for i, ev := range f.events {
		out = append(out, client.AuditEntry{Seq: int64(i + 1), Actor: ev.Actor, Tenant: ev.Tenant, Action: ev.Action,
			Target: ev.Target, Outcome: fmt.Sprint(ev.Status)})
	}
	return out, nil
}

func (f *auditFake) ExportAudit(ctx context.Context, p Principal, q client.AuditQuery, w io.Writer) error {
	es, _ := f.ListAudit(ctx, p, q)
	enc := json.NewEncoder(w)
	for _, e := range es {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

func (f *auditFake) VerifyAudit(context.Context, Principal) (client.AuditReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.verified++
	return client.AuditReport{OK: false, BadSeq: 7, Problem: "entry 7 was altered", LastSeq: 9}, nil
}

func (f *auditFake) CheckpointAudit(context.Context, Principal) (client.AuditCheckpoint, error) {
	return client.AuditCheckpoint{Seq: 9, Hash: "ab", Start: 1, KeyID: "kid", Signature: "cd"}, nil
}

// send makes one request with key ("" for none) and returns the status.
func send(t *testing.T, srv *httptest.Server, key, method, path, body string) int {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(testCtx(t), method, srv.URL+path, r)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func TestAuditMiddlewareRecordsStateChangingRequests(t *testing.T) {
	fb := &fakeBackend{
		LifecycleFunc: func(_ context.Context, op, tenant, id string) (client.Sandbox, error) {
			if id == "busy" {
				return client.Sandbox{}, fmt.Errorf("%s %s: %w", op, id, errs.ErrConflict)
			}
			return client.Sandbox{ID: id, Tenant: tenant, State: "stopped"}, nil
		},
		CreateSandboxFunc: func(_ context.Context, tenant string, req client.CreateSandboxRequest) (client.Sandbox, error) {
			return client.Sandbox{ID: "sb-new", Name: req.Name, Tenant: tenant, State: "running"}, nil
		},
	}
	af := &auditFake{fakeBackend: fb}
	_, srv := newTestServer(t, af, aliceKey)

	steps := []struct {
		key, method, path, body string
		status                  int
		want                    *AuditEvent // nil: not recorded
	}{
		{aliceKey, http.MethodPost, "/v1/sandboxes/sb-1/stop", "", 200,
			&AuditEvent{Actor: "k1", Tenant: "t-alice", Action: "POST /v1/sandboxes/{id}/stop", Target: "sb-1", Status: 200}},
		// Refused by the backend: recorded with its status.
		{aliceKey, http.MethodPost, "/v1/sandboxes/busy/start", "", 409,
			&AuditEvent{Actor: "k1", Tenant: "t-alice", Action: "POST /v1/sandboxes/{id}/start", Target: "busy", Status: 409}},
		// Created: the target is the new resource's id from the response.
		{aliceKey, http.MethodPost, "/v1/sandboxes", `{"name":"web"}`, 201,
			&AuditEvent{Actor: "k1", Tenant: "t-alice", Action: "POST /v1/sandboxes", Target: "sb-new", Status: 201}},
		// Refused before the backend (invalid body) and forbidden (not admin).
		{aliceKey, http.MethodPost, "/v1/sandboxes", `{"name":`, 400,
			&AuditEvent{Actor: "k1", Tenant: "t-alice", Action: "POST /v1/sandboxes", Status: 400}},
		{aliceKey, http.MethodPost, "/v1/keys", `{"name":"x"}`, 403,
			&AuditEvent{Actor: "k1", Tenant: "t-alice", Action: "POST /v1/keys", Status: 403}},
		{adminKey, http.MethodDelete, "/v1/sandboxes/sb-2?purge=true", "", 200,
			&AuditEvent{Actor: "k0", Tenant: "t-admin", Action: "DELETE /v1/sandboxes/{id}", Target: "sb-2", Status: 200}},
		// No route: method and path.
		{aliceKey, http.MethodPost, "/v1/no/such/route", "", 404,
			&AuditEvent{Actor: "k1", Tenant: "t-alice", Action: "POST /v1/no/such/route", Status: 404}},
		// Reads are not recorded.
		{aliceKey, http.MethodGet, "/v1/sandboxes/sb-1", "", 200, nil},
		{aliceKey, http.MethodHead, "/v1/sandboxes/sb-1", "", 200, nil},
		// Without a valid key nothing is recorded (the 401 changes nothing,
		// and anyone could otherwise fill the trail).
		{"", http.MethodPost, "/v1/sandboxes/sb-1/stop", "", 401, nil},
		{"bogus", http.MethodDelete, "/v1/sandboxes/sb-1", "", 401, nil},
	}
	var want []AuditEvent
	for _, st := range steps {
		if got := send(t, srv, st.key, st.method, st.path, st.body); got != st.status {
			t.Fatalf("%s %s: status %d, want %d", st.method, st.path, got, st.status)
		}
		if st.want != nil {
			want = append(want, *st.want)
		}
		got := af.Events()
		if len(got) != len(want) {
			t.Fatalf("after %s %s (%d): %d events recorded, want %d: %+v", st.method, st.path, st.status, len(got), len(want), got)
		}
		if len(want) > 0 && got[len(got)-1] != want[len(want)-1] {
			t.Errorf("%s %s: recorded\n %+v\nwant\n %+v", st.method, st.path, got[len(got)-1], want[len(want)-1])
		}
	}
}

func TestAuditMiddlewareIsOffWithoutAuditBackend(t *testing.T) {
	fb := &fakeBackend{}
	_, srv := newTestServer(t, fb, aliceKey)
	if got := send(t, srv, aliceKey, http.MethodPost, "/v1/sandboxes/sb-1/stop", ""); got != 200 {
		t.Fatalf("status %d", got)
	}
	if got := send(t, srv, adminKey, http.MethodGet, "/v1/audit/verify", ""); got != 404 {
		t.Fatalf("audit route without an audit backend: %d, want 404", got)
	}
}

func TestAuditRoutesNeedAdminAndPassThrough(t *testing.T) {
	af := &auditFake{fakeBackend: &fakeBackend{}}
	_, srv := newTestServer(t, af, aliceKey)
	admin, err := client.New(srv.URL, adminKey)
	if err != nil {
		t.Fatal(err)
	}
	alice, _ := client.New(srv.URL, aliceKey)
	ctx := testCtx(t)

	if _, err := alice.VerifyAudit(ctx); !client.IsForbidden(err) {
		t.Errorf("verify with a non-admin key: %v, want 403", err)
	}
	if _, err := alice.ListAudit(ctx, client.AuditQuery{}); !client.IsForbidden(err) {
		t.Errorf("list with a non-admin key: %v, want 403", err)
	}
	rep, err := admin.VerifyAudit(ctx)
	if err != nil || rep.OK || rep.BadSeq != 7 || rep.Problem != "entry 7 was altered" {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	cp, err := admin.CheckpointAudit(ctx)
	if err != nil || cp.Seq != 9 || cp.KeyID != "kid" {
		t.Fatalf("checkpoint: %+v %v", cp, err)
	}
	since := time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)
	es, err := admin.ListAudit(ctx, client.AuditQuery{Since: since, After: 1, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	// The checkpoint POST and the refused ones were recorded; GETs not.
	if len(es) != 1 || es[0].Action != "POST /v1/audit/checkpoints" || es[0].Outcome != "201" || es[0].Actor != "k0" {
		t.Fatalf("entries %+v", es)
	}
	af.mu.Lock()
	q := af.queries[len(af.queries)-1]
	af.mu.Unlock()
	if !q.Since.Equal(since) || q.After != 1 || q.Limit != 5 {
		t.Errorf("query %+v", q)
	}
	var buf strings.Builder
	if err := admin.ExportAudit(ctx, client.AuditQuery{}, &buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var e client.AuditEntry
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &e) != nil || e.Seq != 1 {
		t.Fatalf("export %q", buf.String())
	}
	if got := send(t, srv, adminKey, http.MethodGet, "/v1/audit?since=yesterday", ""); got != 400 {
		t.Errorf("bad since: %d, want 400", got)
	}
}
