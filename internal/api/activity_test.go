package api

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

// activityFake records what NewHandler reports as sandbox activity.
type activityFake struct {
	*fakeBackend
	mu  sync.Mutex
	got []string
}

func (f *activityFake) SandboxActivity(_ context.Context, p Principal, sandbox string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, p.KeyID+" "+sandbox)
}

func (f *activityFake) reported() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

// TestAgentRequestsAreReportedAsSandboxActivity: every request of a
// sandbox's own token (reads included) counts for its sandbox; other
// callers count only with writes to the sandbox's agent state; lifecycle
// reads, refused requests and requests outside agent state do not count
// here (exec and files count in the backend itself).
func TestAgentRequestsAreReportedAsSandboxActivity(t *testing.T) {
	f := &activityFake{fakeBackend: &fakeBackend{}}
	f.AuthenticateFunc = func(_ context.Context, secret string) (Principal, error) {
		if secret == "agent-token" {
			return Principal{TenantID: "t-alice", KeyID: "sandbox:sb-1", Sandbox: "sb-1"}, nil
		}
		return Principal{TenantID: "t-alice", KeyID: "k1"}, nil
	}
	_, srv := newTestServer(t, f, "")
	cases := []struct {
		key, method, path, body string
		want                    string // "" when nothing may be reported
	}{
		{"agent-token", http.MethodPut, "/v1/sandboxes/sb-1/checkpoints/plan", `{"step":1}`, "sandbox:sb-1 sb-1"},
		{"agent-token", http.MethodGet, "/v1/sandboxes/sb-1/checkpoints/plan", "", "sandbox:sb-1 sb-1"},
		{"agent-token", http.MethodGet, "/v1/sandboxes/sb-1/checkpoints", "", "sandbox:sb-1 sb-1"},
		{"agent-token", http.MethodGet, "/v1/sandboxes/sb-2/checkpoints", "", ""}, // refused: another sandbox
		{"agent-token", http.MethodPost, "/v1/sandboxes/sb-1/stop", "", ""},       // refused: lifecycle
		{"admin", http.MethodPut, "/v1/sandboxes/agent/checkpoints/plan", `{"step":2}`, "k1 agent"},
		{"admin", http.MethodGet, "/v1/sandboxes/agent/checkpoints/plan", "", ""},
		{"admin", http.MethodGet, "/v1/sandboxes/agent", "", ""},
		{"admin", http.MethodPost, "/v1/sandboxes/agent/stop", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.key+" "+tc.method+" "+tc.path, func(t *testing.T) {
			before := len(f.reported())
			var body *strings.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			} else {
				body = strings.NewReader("")
			}
			req, err := http.NewRequestWithContext(testCtx(t), tc.method, srv.URL+tc.path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tc.key)
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := f.reported()[before:]
			var want []string
			if tc.want != "" {
				want = []string{tc.want}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("HTTP %d; reported %q, want %q", resp.StatusCode, got, want)
			}
		})
	}
}
