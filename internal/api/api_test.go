package api

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// newTestServer serves b over httptest and returns a client with key.
func newTestServer(t *testing.T, b Backend, key string) (*client.Client, *httptest.Server) {
	t.Helper()
	h := NewHandler(b, Options{Logger: slog.New(slog.DiscardHandler), Version: "test"})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, key)
	if err != nil {
		t.Fatal(err)
	}
	return c, srv
}

// testCtx returns a context that ends with the test or after 10 s.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// route is one API operation driven through the client.
type route struct {
	name    string
	backend string // the Backend method it must call
	call    func(ctx context.Context, c *client.Client) error
}

// allRoutes covers every /v1 operation except key creation (admin only,
// tested separately). Sandbox ids are given as names on purpose.
func allRoutes() []route {
	const sb = "my-sandbox.v2"
	discard := func(rc io.ReadCloser, err error) error {
		if err != nil {
			return err
		}
		defer func() { _ = rc.Close() }()
		_, err = io.Copy(io.Discard, rc)
		return err
	}
	return []route{
		{"info", "Info", func(ctx context.Context, c *client.Client) error { _, err := c.Info(ctx); return err }},
		{"create", "CreateSandbox", func(ctx context.Context, c *client.Client) error {
			_, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: sb})
			return err
		}},
		{"list", "ListSandboxes", func(ctx context.Context, c *client.Client) error { _, err := c.ListSandboxes(ctx, true); return err }},
		{"get", "GetSandbox", func(ctx context.Context, c *client.Client) error { _, err := c.GetSandbox(ctx, sb); return err }},
		{"delete", "DeleteSandbox", func(ctx context.Context, c *client.Client) error {
			_, err := c.DeleteSandbox(ctx, sb, true)
			return err
		}},
		{"start", "StartSandbox", func(ctx context.Context, c *client.Client) error { _, err := c.StartSandbox(ctx, sb); return err }},
		{"stop", "StopSandbox", func(ctx context.Context, c *client.Client) error { _, err := c.StopSandbox(ctx, sb); return err }},
		{"pause", "PauseSandbox", func(ctx context.Context, c *client.Client) error { _, err := c.PauseSandbox(ctx, sb); return err }},
		{"resume", "ResumeSandbox", func(ctx context.Context, c *client.Client) error { _, err := c.ResumeSandbox(ctx, sb); return err }},
		{"undelete", "UndeleteSandbox", func(ctx context.Context, c *client.Client) error { _, err := c.UndeleteSandbox(ctx, sb); return err }},
		{"resize", "ResizeSandbox", func(ctx context.Context, c *client.Client) error {
			_, err := c.ResizeSandbox(ctx, sb, client.ResizeRequest{InstanceType: "small"})
			return err
		}},
		{"exec", "Exec", func(ctx context.Context, c *client.Client) error {
			_, err := c.Exec(ctx, sb, client.ExecRequest{Command: []string{"true"}})
			return err
		}},
		{"exec-stream", "Exec", func(ctx context.Context, c *client.Client) error {
			_, err := c.ExecStream(ctx, sb, client.ExecRequest{Command: []string{"true"}}, io.Discard, io.Discard)
			return err
		}},
		{"pty", "OpenPTY", func(ctx context.Context, c *client.Client) error {
			p, err := c.PTY(ctx, sb, client.PTYOptions{})
			if err != nil {
				return err
			}
			return p.Close()
		}},
		{"logs", "AgentLog", func(ctx context.Context, c *client.Client) error { return discard(c.Logs(ctx, sb, false)) }},
		{"service input", "ServiceInput", func(ctx context.Context, c *client.Client) error { return c.ServiceInput(ctx, sb, "hello\n") }},
		{"read-file", "ReadFile", func(ctx context.Context, c *client.Client) error {
			rc, _, err := c.ReadFile(ctx, sb, "/etc/hostname")
			return discard(rc, err)
		}},
		{"write-file", "WriteFile", func(ctx context.Context, c *client.Client) error {
			_, err := c.WriteFile(ctx, sb, "/tmp/x", 0o600, strings.NewReader("x"))
			return err
		}},
		{"stat", "StatFile", func(ctx context.Context, c *client.Client) error { _, err := c.StatFile(ctx, sb, "/"); return err }},
		{"ls", "ListFiles", func(ctx context.Context, c *client.Client) error { _, err := c.ListFiles(ctx, sb, "/"); return err }},
		{"mkdir", "Mkdir", func(ctx context.Context, c *client.Client) error { return c.Mkdir(ctx, sb, "/a/b", true) }},
		{"rm", "RemoveFile", func(ctx context.Context, c *client.Client) error { return c.RemoveFile(ctx, sb, "/a", true) }},
		{"mv", "RenameFile", func(ctx context.Context, c *client.Client) error { return c.RenameFile(ctx, sb, "/a", "/b") }},
		{"tar-down", "DownloadTar", func(ctx context.Context, c *client.Client) error { return discard(c.DownloadTar(ctx, sb, "/a")) }},
		{"tar-up", "UploadTar", func(ctx context.Context, c *client.Client) error {
			return c.UploadTar(ctx, sb, "/a", bytes.NewReader(make([]byte, 1024)))
		}},
		{"templates", "ListTemplates", func(ctx context.Context, c *client.Client) error { _, err := c.ListTemplates(ctx); return err }},
		{"import", "ImportTemplate", func(ctx context.Context, c *client.Client) error {
			_, err := c.ImportTemplate(ctx, client.ImportTemplateRequest{ID: "alpine", Source: "docker.io/library/alpine:3"})
			return err
		}},
		{"rm-template", "DeleteTemplate", func(ctx context.Context, c *client.Client) error { return c.DeleteTemplate(ctx, "alpine") }},
		{"put-checkpoint", "PutCheckpoint", func(ctx context.Context, c *client.Client) error {
			_, err := c.PutCheckpoint(ctx, sb, "plan", []byte(`{"step":1}`), client.PutCheckpointOptions{IfVersion: new(int64(0))})
			return err
		}},
		{"get-checkpoint", "GetCheckpoint", func(ctx context.Context, c *client.Client) error {
			_, err := c.GetCheckpoint(ctx, sb, "", "plan", 0)
			return err
		}},
		{"list-checkpoints", "ListCheckpoints", func(ctx context.Context, c *client.Client) error { _, err := c.ListCheckpoints(ctx, sb); return err }},
		{"checkpoint-versions", "CheckpointVersions", func(ctx context.Context, c *client.Client) error {
			_, err := c.CheckpointVersions(ctx, sb, "planner", "plan")
			return err
		}},
		{"rollback-checkpoint", "RollbackCheckpoint", func(ctx context.Context, c *client.Client) error {
			_, err := c.RollbackCheckpoint(ctx, sb, "", "plan", client.RollbackCheckpointRequest{Version: 1})
			return err
		}},
		{"set-checkpoint-schema", "SetCheckpointSchema", func(ctx context.Context, c *client.Client) error {
			_, err := c.SetCheckpointSchema(ctx, sb, "", "plan", []byte(`{"type":"object"}`))
			return err
		}},
		{"remove-checkpoint-schema", "SetCheckpointSchema", func(ctx context.Context, c *client.Client) error {
			_, err := c.SetCheckpointSchema(ctx, sb, "", "plan", nil)
			return err
		}},
		{"delete-checkpoint", "DeleteCheckpoint", func(ctx context.Context, c *client.Client) error { return c.DeleteCheckpoint(ctx, sb, "", "plan") }},
		{"create-snapshot", "CreateSnapshot", func(ctx context.Context, c *client.Client) error {
			_, err := c.CreateSnapshot(ctx, sb, client.CreateSnapshotRequest{Label: "before"})
			return err
		}},
		{"list-snapshots", "ListSnapshots", func(ctx context.Context, c *client.Client) error { _, err := c.ListSnapshots(ctx, sb); return err }},
		{"list-all-snapshots", "ListSnapshots", func(ctx context.Context, c *client.Client) error { _, err := c.ListSnapshots(ctx, ""); return err }},
		{"get-snapshot", "GetSnapshot", func(ctx context.Context, c *client.Client) error { _, err := c.GetSnapshot(ctx, "snap-1"); return err }},
		{"delete-snapshot", "DeleteSnapshot", func(ctx context.Context, c *client.Client) error { return c.DeleteSnapshot(ctx, "snap-1") }},
		{"fork-sandbox", "Fork", func(ctx context.Context, c *client.Client) error {
			_, err := c.Fork(ctx, sb, client.ForkRequest{Count: 2})
			return err
		}},
		{"fork-snapshot", "Fork", func(ctx context.Context, c *client.Client) error {
			_, err := c.Fork(ctx, "snap-1", client.ForkRequest{NoStart: true})
			return err
		}},
		{"rollback-sandbox", "Rollback", func(ctx context.Context, c *client.Client) error {
			_, err := c.Rollback(ctx, sb, "snap-1")
			return err
		}},
		{"create-volume", "CreateVolume", func(ctx context.Context, c *client.Client) error {
			_, err := c.CreateVolume(ctx, client.CreateVolumeRequest{Name: "shared", SizeBytes: 1 << 30})
			return err
		}},
		{"list-volumes", "ListVolumes", func(ctx context.Context, c *client.Client) error { _, err := c.ListVolumes(ctx, false); return err }},
		{"list-all-volumes", "ListVolumes", func(ctx context.Context, c *client.Client) error { _, err := c.ListVolumes(ctx, true); return err }},
		{"get-volume", "GetVolume", func(ctx context.Context, c *client.Client) error { _, err := c.GetVolume(ctx, "shared"); return err }},
		{"delete-volume", "DeleteVolume", func(ctx context.Context, c *client.Client) error {
			_, err := c.DeleteVolume(ctx, "shared", false)
			return err
		}},
		{"purge-volume", "DeleteVolume", func(ctx context.Context, c *client.Client) error {
			_, err := c.DeleteVolume(ctx, "shared", true)
			return err
		}},
		{"undelete-volume", "UndeleteVolume", func(ctx context.Context, c *client.Client) error {
			_, err := c.UndeleteVolume(ctx, "vol-1")
			return err
		}},
		{"get-network", "GetNetwork", func(ctx context.Context, c *client.Client) error { _, err := c.GetNetwork(ctx, sb); return err }},
		{"set-network", "SetNetwork", func(ctx context.Context, c *client.Client) error {
			_, err := c.SetNetwork(ctx, sb, client.NetworkPolicy{Allow: []string{"*.example.com"}})
			return err
		}},
		{"list-ports", "ListPorts", func(ctx context.Context, c *client.Client) error { _, err := c.ListPorts(ctx, sb); return err }},
		{"expose-port", "ExposePort", func(ctx context.Context, c *client.Client) error {
			_, err := c.ExposePort(ctx, sb, 8080, client.ExposePortRequest{})
			return err
		}},
		{"unexpose-port", "UnexposePort", func(ctx context.Context, c *client.Client) error { return c.UnexposePort(ctx, sb, 8080) }},
	}
}

func TestEveryRouteRejectsMissingAndBadKeys(t *testing.T) {
	for _, key := range []string{"", "not-a-key"} {
		fb := &fakeBackend{}
		c, _ := newTestServer(t, fb, key)
		routes := append(allRoutes(), route{"create-key", "CreateAPIKey", func(ctx context.Context, c *client.Client) error {
			_, err := c.CreateKey(ctx, client.CreateAPIKeyRequest{Name: "x"})
			return err
		}})
		for _, r := range routes {
			t.Run(fmt.Sprintf("%s/key=%q", r.name, key), func(t *testing.T) {
				err := r.call(testCtx(t), c)
				if !client.IsUnauthenticated(err) {
					t.Fatalf("got %v, want 401", err)
				}
			})
		}
		if calls := fb.Calls(); len(calls) != 0 {
			t.Fatalf("backend was called without a valid key: %v", calls)
		}
	}
}

func TestUnauthenticatedProblemSaysHowToAuthenticate(t *testing.T) {
	_, srv := newTestServer(t, &fakeBackend{}, "")
	resp, err := http.Get(srv.URL + "/v1/sandboxes")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q", ct)
	}
	if resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatal("no WWW-Authenticate header")
	}
	var p struct{ Title, Detail string }
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Detail, "Bearer") {
		t.Fatalf("detail %q does not say how to authenticate", p.Detail)
	}
}

func TestXAPIKeyHeaderIsAccepted(t *testing.T) {
	_, srv := newTestServer(t, &fakeBackend{}, "")
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/sandboxes", nil)
	req.Header.Set("X-API-Key", aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func TestEveryRoutePassesThePrincipalsTenant(t *testing.T) {
	for _, r := range allRoutes() {
		t.Run(r.name, func(t *testing.T) {
			fb := &fakeBackend{}
			key := aliceKey
			if r.name == "import" {
				key = aliceAdminKey // a template import needs an admin key (authz.go)
			}
			c, _ := newTestServer(t, fb, key)
			if err := r.call(testCtx(t), c); err != nil {
				t.Fatal(err)
			}
			var seen bool
			for _, call := range fb.Calls() {
				if call.Method == "Info" {
					seen = true // Info is daemon-wide and takes no tenant
					continue
				}
				if call.Tenant != "t-alice" {
					t.Fatalf("%s called with tenant %q, want t-alice", call.Method, call.Tenant)
				}
				if call.Method == r.backend {
					seen = true
				}
			}
			if !seen {
				t.Fatalf("backend %s not called; calls: %v", r.backend, fb.Calls())
			}
		})
	}
}

func TestSandboxNamesArePassedAsPathParams(t *testing.T) {
	fb := &fakeBackend{}
	c, _ := newTestServer(t, fb, aliceKey)
	for _, name := range []string{"my-sandbox.v2", "sb-0123abcd", "with space", "ünïcode"} {
		sb, err := c.GetSandbox(testCtx(t), name)
		if err != nil {
			t.Fatal(err)
		}
		if sb.ID != name {
			t.Fatalf("got id %q, want %q", sb.ID, name)
		}
	}
	if _, err := c.StopSandbox(testCtx(t), "agent-7"); err != nil {
		t.Fatal(err)
	}
	calls := fb.Calls()
	if last := calls[len(calls)-1]; last.Method != "StopSandbox" || last.ID != "agent-7" {
		t.Fatalf("last call %+v", last)
	}
}

func TestErrorsMapToStatusCodes(t *testing.T) {
	cases := []struct {
		err    error
		status int
		is     func(error) bool
	}{
		{fmt.Errorf("get sandbox x: %w", errs.ErrNotFound), http.StatusNotFound, client.IsNotFound},
		{fmt.Errorf("start sandbox x: already running: %w", errs.ErrConflict), http.StatusConflict, client.IsConflict},
		{fmt.Errorf("bad name: %w", errs.ErrInvalid), http.StatusBadRequest, client.IsInvalid},
		{fmt.Errorf("disk: %w", errs.ErrQuota), http.StatusInsufficientStorage, client.IsQuota},
		{fmt.Errorf("who: %w", errs.ErrUnauthenticated), http.StatusUnauthorized, client.IsUnauthenticated},
		{fmt.Errorf("nope: %w", errs.ErrForbidden), http.StatusForbidden, client.IsForbidden},
		{fmt.Errorf("quota on ext4: %w", errs.ErrUnsupported), http.StatusNotImplemented, nil},
		{fmt.Errorf("stop sandbox x: %w", context.DeadlineExceeded), http.StatusGatewayTimeout, nil},
		{errors.New("disk on fire at /var/lib/stead/secret"), http.StatusInternalServerError, nil},
	}
	for _, tc := range cases {
		t.Run(tc.err.Error(), func(t *testing.T) {
			if got := HTTPStatus(tc.err); got != tc.status {
				t.Fatalf("HTTPStatus = %d, want %d", got, tc.status)
			}
			// And end to end, through a JSON route and through a stream route.
			c, _ := newTestServer(t, &fakeBackend{Err: tc.err}, aliceKey)
			_, err := c.GetSandbox(testCtx(t), "x")
			if client.StatusCode(err) != tc.status {
				t.Fatalf("get sandbox: got %v, want status %d", err, tc.status)
			}
			if tc.is != nil && !tc.is(err) {
				t.Fatalf("helper does not match %v", err)
			}
			_, err = c.ExecStream(testCtx(t), "x", client.ExecRequest{Command: []string{"true"}}, nil, nil)
			if client.StatusCode(err) != tc.status {
				t.Fatalf("exec stream: got %v, want status %d", err, tc.status)
			}
			var apiErr *client.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("%T is not an *APIError", err)
			}
			if tc.status == http.StatusInternalServerError {
				if strings.Contains(apiErr.Detail, "secret") {
					t.Fatalf("500 detail leaks the cause: %q", apiErr.Detail)
				}
			} else if !strings.Contains(apiErr.Detail, strings.SplitN(tc.err.Error(), ":", 2)[0]) {
				t.Fatalf("detail %q does not carry the error %q", apiErr.Detail, tc.err)
			}
		})
	}
}

func TestCreateKeyIsAdminOnly(t *testing.T) {
	fb := &fakeBackend{}
	alice, srv := newTestServer(t, fb, aliceKey)
	_, err := alice.CreateKey(testCtx(t), client.CreateAPIKeyRequest{Name: "ci"})
	if !client.IsForbidden(err) {
		t.Fatalf("non-admin got %v, want 403", err)
	}
	if len(fb.Calls()) != 0 {
		t.Fatalf("backend called for a non-admin: %v", fb.Calls())
	}
	admin, err := client.New(srv.URL, adminKey)
	if err != nil {
		t.Fatal(err)
	}
	k, err := admin.CreateKey(testCtx(t), client.CreateAPIKeyRequest{Name: "ci", Admin: false})
	if err != nil {
		t.Fatal(err)
	}
	if k.Secret == "" || k.Tenant != "t-admin" || k.Name != "ci" {
		t.Fatalf("key %+v", k)
	}
}

func TestOpenAPIDocumentListsEveryRoute(t *testing.T) {
	_, srv := newTestServer(t, &fakeBackend{}, "")
	resp, err := http.Get(srv.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Fatalf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	want := []string{
		"GET /healthz", "GET /v1/info", "POST /v1/keys",
		"POST /v1/sandboxes", "GET /v1/sandboxes", "GET /v1/sandboxes/{id}", "DELETE /v1/sandboxes/{id}",
		"POST /v1/sandboxes/{id}/start", "POST /v1/sandboxes/{id}/stop", "POST /v1/sandboxes/{id}/pause",
		"POST /v1/sandboxes/{id}/resume", "POST /v1/sandboxes/{id}/undelete", "POST /v1/sandboxes/{id}/resize",
		"POST /v1/sandboxes/{id}/exec", "GET /v1/sandboxes/{id}/pty", "GET /v1/sandboxes/{id}/logs", "POST /v1/sandboxes/{id}/service/input",
		"GET /v1/sandboxes/{id}/files/content", "PUT /v1/sandboxes/{id}/files/content",
		"GET /v1/sandboxes/{id}/files/stat", "GET /v1/sandboxes/{id}/files/list",
		"POST /v1/sandboxes/{id}/files/mkdir", "DELETE /v1/sandboxes/{id}/files",
		"POST /v1/sandboxes/{id}/files/rename", "GET /v1/sandboxes/{id}/files/tar", "PUT /v1/sandboxes/{id}/files/tar",
		"GET /v1/templates", "POST /v1/templates", "DELETE /v1/templates/{id}",
		"GET /v1/sandboxes/{id}/checkpoints", "PUT /v1/sandboxes/{id}/checkpoints/{name}",
		"GET /v1/sandboxes/{id}/checkpoints/{name}", "DELETE /v1/sandboxes/{id}/checkpoints/{name}",
		"GET /v1/sandboxes/{id}/checkpoints/{name}/versions", "POST /v1/sandboxes/{id}/checkpoints/{name}/rollback",
		"PUT /v1/sandboxes/{id}/checkpoints/{name}/schema", "DELETE /v1/sandboxes/{id}/checkpoints/{name}/schema",
		"POST /v1/sandboxes/{id}/snapshots", "GET /v1/snapshots", "GET /v1/snapshots/{id}", "DELETE /v1/snapshots/{id}",
		"POST /v1/sandboxes/{id}/fork", "POST /v1/snapshots/{id}/fork", "POST /v1/sandboxes/{id}/rollback",
		"POST /v1/volumes", "GET /v1/volumes", "GET /v1/volumes/{id}", "DELETE /v1/volumes/{id}",
		"POST /v1/volumes/{id}/undelete",
		"GET /v1/sandboxes/{id}/network", "PUT /v1/sandboxes/{id}/network", "GET /v1/sandboxes/{id}/ports",
		"PUT /v1/sandboxes/{id}/ports/{port}", "DELETE /v1/sandboxes/{id}/ports/{port}",
	}
	for _, w := range want {
		method, path, _ := strings.Cut(w, " ")
		if _, ok := doc.Paths[path][strings.ToLower(method)]; !ok {
			t.Errorf("%s missing from the OpenAPI document", w)
		}
	}
	// Every /v1 operation declares the API key security requirement.
	for path, ops := range doc.Paths {
		for method, raw := range ops {
			var o struct {
				Security []map[string][]string `json:"security"`
			}
			_ = json.Unmarshal(raw, &o)
			if strings.HasPrefix(path, "/v1/") && len(o.Security) == 0 {
				t.Errorf("%s %s has no security requirement", method, path)
			}
		}
	}
}

func TestHealthzNeedsNoKey(t *testing.T) {
	c, _ := newTestServer(t, &fakeBackend{}, "")
	h, err := c.Health(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if h.Status != "ok" || h.Version != "test" {
		t.Fatalf("health %+v", h)
	}
}

// notifyWriter closes seen once its content contains want.
type notifyWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestExecStreamDeliversOutputBeforeTheProcessExits(t *testing.T) {
	stdout := &notifyWriter{want: "chunk 1", seen: make(chan struct{})}
	fb := &fakeBackend{
		ExecFunc: func(ctx context.Context, tenant, id string, req client.ExecRequest, out ExecStream) (client.ExecResult, error) {
			if err := out.Stdout([]byte("chunk 1\n")); err != nil {
				return client.ExecResult{}, err
			}
			// The process does not exit until the client has seen chunk 1.
			select {
			case <-stdout.seen:
			case <-time.After(5 * time.Second):
				return client.ExecResult{}, errors.New("client never saw chunk 1 while the process ran")
			}
			if err := out.Stderr([]byte("warn\x00\xff")); err != nil {
				return client.ExecResult{}, err
			}
			if err := out.Stdout([]byte("chunk 2\n")); err != nil {
				return client.ExecResult{}, err
			}
			return client.ExecResult{ExitCode: 7, Pid: 42}, nil
		},
	}
	c, _ := newTestServer(t, fb, aliceKey)
	var stderr bytes.Buffer
	res, err := c.ExecStream(testCtx(t), "sb", client.ExecRequest{Command: []string{"x"}}, stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || res.Pid != 42 {
		t.Fatalf("result %+v", res)
	}
	if got := stdout.String(); got != "chunk 1\nchunk 2\n" {
		t.Fatalf("stdout %q", got)
	}
	if got := stderr.String(); got != "warn\x00\xff" {
		t.Fatalf("stderr %q (binary output must survive)", got)
	}
}

func TestExecStreamReportsAnErrorAfterOutput(t *testing.T) {
	fb := &fakeBackend{
		ExecFunc: func(ctx context.Context, tenant, id string, req client.ExecRequest, out ExecStream) (client.ExecResult, error) {
			_ = out.Stdout([]byte("partial"))
			return client.ExecResult{}, fmt.Errorf("exec: sandbox was stopped: %w", errs.ErrConflict)
		},
	}
	c, _ := newTestServer(t, fb, aliceKey)
	var out bytes.Buffer
	_, err := c.ExecStream(testCtx(t), "sb", client.ExecRequest{Command: []string{"x"}}, &out, nil)
	var ee *client.ExecError
	if !errors.As(err, &ee) || !strings.Contains(ee.Message, "stopped") {
		t.Fatalf("got %v, want an ExecError", err)
	}
	if out.String() != "partial" {
		t.Fatalf("stdout %q", out.String())
	}
}

func TestExecBufferedCollectsOutput(t *testing.T) {
	fb := &fakeBackend{
		ExecFunc: func(ctx context.Context, tenant, id string, req client.ExecRequest, out ExecStream) (client.ExecResult, error) {
			_ = out.Stdout([]byte("a"))
			_ = out.Stderr([]byte("b"))
			_ = out.Stdout([]byte("c"))
			return client.ExecResult{ExitCode: 3}, nil
		},
	}
	c, _ := newTestServer(t, fb, aliceKey)
	res, err := c.Exec(testCtx(t), "sb", client.ExecRequest{Command: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "ac" || string(res.Stderr) != "b" || res.ExitCode != 3 {
		t.Fatalf("result %+v", res)
	}
}

func TestExecRejectsAnEmptyCommand(t *testing.T) {
	fb := &fakeBackend{}
	c, _ := newTestServer(t, fb, aliceKey)
	_, err := c.Exec(testCtx(t), "sb", client.ExecRequest{})
	if !client.IsInvalid(err) {
		t.Fatalf("got %v, want a validation error", err)
	}
	if len(fb.Calls()) != 0 {
		t.Fatalf("backend called: %v", fb.Calls())
	}
}

func TestOversizeJSONBodyIsRejected(t *testing.T) {
	fb := &fakeBackend{}
	c, srv := newTestServer(t, fb, aliceKey)
	big := strings.Repeat("x", MaxJSONBodyBytes+1)
	_, err := c.CreateSandbox(testCtx(t), client.CreateSandboxRequest{Name: "a", Env: map[string]string{"BIG": big}})
	if client.StatusCode(err) != http.StatusRequestEntityTooLarge {
		t.Fatalf("got %v, want 413", err)
	}
	_, err = c.Exec(testCtx(t), "sb", client.ExecRequest{Command: []string{"cat"}, Stdin: big})
	if client.StatusCode(err) != http.StatusRequestEntityTooLarge {
		t.Fatalf("exec: got %v, want 413", err)
	}
	// Malformed JSON is a client error too.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/sandboxes", strings.NewReader("{not json"))
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("malformed JSON: status %d", resp.StatusCode)
	}
	if len(fb.Calls()) != 0 {
		t.Fatalf("backend called: %v", fb.Calls())
	}
}

func TestPTYRoundTripWithResizeAndExitCode(t *testing.T) {
	pty := newEchoPTY()
	var gotReq PTYRequest
	fb := &fakeBackend{
		OpenPTYFunc: func(ctx context.Context, tenant, id string, req PTYRequest) (PTY, error) {
			gotReq = req
			return pty, nil
		},
	}
	c, _ := newTestServer(t, fb, aliceKey)
	ctx := testCtx(t)
	conn, err := c.PTY(ctx, "sb", client.PTYOptions{
		Command: []string{"bash", "-c", "echo a,b"}, User: "root", Rows: 30, Cols: 100,
		Env: map[string]string{"TERM": "xterm-256color"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if strings.Join(gotReq.Command, "|") != "bash|-c|echo a,b" || gotReq.User != "root" ||
		gotReq.Rows != 30 || gotReq.Cols != 100 || gotReq.Env["TERM"] != "xterm-256color" {
		t.Fatalf("pty request %+v", gotReq)
	}

	readUntil := func(want string) {
		t.Helper()
		var got []byte
		buf := make([]byte, 256)
		for !strings.Contains(string(got), want) {
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatalf("read: %v (got %q)", err, got)
			}
			got = append(got, buf[:n]...)
		}
	}
	if _, err := conn.Write([]byte("hello\r")); err != nil {
		t.Fatal(err)
	}
	readUntil("hello\r")
	if err := conn.Resize(50, 132); err != nil {
		t.Fatal(err)
	}
	readUntil("resized")
	if r := pty.Resizes(); len(r) != 1 || r[0] != [2]uint16{50, 132} {
		t.Fatalf("resizes %v", r)
	}
	if _, err := conn.Write([]byte("exit 42\n")); err != nil {
		t.Fatal(err)
	}
	readUntil("bye")
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("read to exit: %v", err)
	}
	code, ok := conn.ExitCode()
	if !ok || code != 42 {
		t.Fatalf("exit code %d, %v; want 42", code, ok)
	}
}

func TestPTYErrorsBeforeUpgradeAreProblems(t *testing.T) {
	c, _ := newTestServer(t, &fakeBackend{Err: fmt.Errorf("sandbox sb is stopped: %w", errs.ErrConflict)}, aliceKey)
	_, err := c.PTY(testCtx(t), "sb", client.PTYOptions{})
	if !client.IsConflict(err) {
		t.Fatalf("got %v, want 409", err)
	}
}

func TestPTYClientHangupEndsTheSession(t *testing.T) {
	pty := newEchoPTY()
	fb := &fakeBackend{OpenPTYFunc: func(context.Context, string, string, PTYRequest) (PTY, error) { return pty, nil }}
	c, _ := newTestServer(t, fb, aliceKey)
	conn, err := c.PTY(testCtx(t), "sb", client.PTYOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	select {
	case <-pty.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the terminal was not closed after the client hung up")
	}
}

func TestFilesRoundTrip(t *testing.T) {
	var written bytes.Buffer
	var gotMode uint32
	fb := &fakeBackend{
		WriteFileFunc: func(ctx context.Context, tenant, id, path string, mode uint32, r io.Reader) (client.FileInfo, error) {
			gotMode = mode
			n, err := io.Copy(&written, r)
			return client.FileInfo{Path: path, Type: "file", Size: n, Mode: mode}, err
		},
		ReadFileFunc: func(ctx context.Context, tenant, id, path string) (io.ReadCloser, client.FileInfo, error) {
			data := written.Bytes()
			return io.NopCloser(bytes.NewReader(data)), client.FileInfo{Name: "f", Path: path, Type: "file", Size: int64(len(data)), Mode: 0o600}, nil
		},
	}
	c, _ := newTestServer(t, fb, aliceKey)
	ctx := testCtx(t)
	payload := bytes.Repeat([]byte{0, 1, 2, 0xff}, 3<<20) // 12 MiB: more than the JSON cap
	info, err := c.WriteFile(ctx, "sb", "/workspace/f", 0o600, bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(payload)) || gotMode != 0o600 {
		t.Fatalf("info %+v mode %o", info, gotMode)
	}
	rc, info, err := c.ReadFile(ctx, "sb", "/workspace/f")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) || info.Mode != 0o600 || info.Path != "/workspace/f" {
		t.Fatalf("read back %d bytes, info %+v", len(got), info)
	}

	// A mode that is not octal is refused before the backend runs.
	_, srvURL := newTestServer(t, fb, aliceKey)
	req, _ := http.NewRequest(http.MethodPut, srvURL.URL+"/v1/sandboxes/sb/files/content?path=/x&mode=rw", strings.NewReader("x"))
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 4 {
		t.Fatalf("bad mode: status %d", resp.StatusCode)
	}
}

func TestTarRoundTrip(t *testing.T) {
	var uploaded bytes.Buffer
	fb := &fakeBackend{
		UploadTarFunc: func(ctx context.Context, tenant, id, path string, r io.Reader) error {
			_, err := io.Copy(&uploaded, r)
			return err
		},
		DownloadTarFunc: func(ctx context.Context, tenant, id, path string, w io.Writer) error {
			_, err := w.Write(uploaded.Bytes())
			return err
		},
	}
	c, _ := newTestServer(t, fb, aliceKey)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "dir/a.txt", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("hi"))
	_ = tw.Close()
	if err := c.UploadTar(testCtx(t), "sb", "/workspace", bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	rc, err := c.DownloadTar(testCtx(t), "sb", "/workspace/dir")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	hdr, err := tar.NewReader(rc).Next()
	if err != nil || hdr.Name != "dir/a.txt" {
		t.Fatalf("tar entry %v, %v", hdr, err)
	}
}

func TestDownloadTarOfMissingPathIs404(t *testing.T) {
	fb := &fakeBackend{StatFileFunc: func(context.Context, string, string, string) (client.FileInfo, error) {
		return client.FileInfo{}, fmt.Errorf("stat /nope: %w", errs.ErrNotFound)
	}}
	c, _ := newTestServer(t, fb, aliceKey)
	_, err := c.DownloadTar(testCtx(t), "sb", "/nope")
	if !client.IsNotFound(err) {
		t.Fatalf("got %v, want 404", err)
	}
}

// growingLog is an agent log that grows while it is followed.
type growingLog struct {
	mu   sync.Mutex
	data []byte
}

func (g *growingLog) append(s string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.data = append(g.data, s...)
}

func (g *growingLog) open() io.ReadCloser {
	g.mu.Lock()
	defer g.mu.Unlock()
	return io.NopCloser(bytes.NewReader(append([]byte(nil), g.data...)))
}

func TestLogsFollowStreamsNewLines(t *testing.T) {
	log := &growingLog{}
	log.append("line 1\n")
	fb := &fakeBackend{AgentLogFunc: func(context.Context, string, string) (io.ReadCloser, error) { return log.open(), nil }}
	c, _ := newTestServer(t, fb, aliceKey)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	rc, err := c.Logs(ctx, "sb", true)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	w := &notifyWriter{want: "line 1\nline 2\n", seen: make(chan struct{})}
	go func() { _, _ = io.Copy(w, rc) }()
	time.Sleep(100 * time.Millisecond)
	log.append("line 2\n")
	select {
	case <-w.seen:
	case <-time.After(5 * time.Second):
		t.Fatalf("followed log %q never got line 2", w.String())
	}
	if got := w.String(); got != "line 1\nline 2\n" {
		t.Fatalf("log %q: lines repeated or lost", got)
	}

	// Without follow the body ends.
	rc2, err := c.Logs(testCtx(t), "sb", false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc2.Close() }()
	all, err := io.ReadAll(rc2)
	if err != nil || string(all) != "line 1\nline 2\n" {
		t.Fatalf("log %q, %v", all, err)
	}
}

func TestClientOverUnixSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "stead.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBackend{}
	srv := &http.Server{Handler: NewHandler(fb, Options{Logger: slog.New(slog.DiscardHandler)})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	c, err := client.New("unix://"+sock, aliceKey)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.GetSandbox(testCtx(t), "agent")
	if err != nil {
		t.Fatal(err)
	}
	if sb.Tenant != "t-alice" {
		t.Fatalf("sandbox %+v", sb)
	}
	var out bytes.Buffer
	if _, err := c.ExecStream(testCtx(t), "agent", client.ExecRequest{Command: []string{"echo", "hi"}}, &out, nil); err != nil {
		t.Fatal(err)
	}
	if out.String() != "echo hi" {
		t.Fatalf("stdout %q", out.String())
	}
	conn, err := c.PTY(testCtx(t), "agent", client.PTYOptions{})
	if err != nil {
		t.Fatalf("pty over unix socket: %v", err)
	}
	_ = conn.Close()

	// A socket nobody listens on is reported as an unreachable daemon.
	gone, err := client.New("unix://"+filepath.Join(dir, "absent.sock"), aliceKey)
	if err != nil {
		t.Fatal(err)
	}
	_, err = gone.Info(testCtx(t))
	var ue *client.UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("got %T %v, want *UnreachableError", err, err)
	}
}

func TestLongExecIsNotCutByTheServerReadTimeout(t *testing.T) {
	fb := &fakeBackend{
		ExecFunc: func(ctx context.Context, tenant, id string, req client.ExecRequest, out ExecStream) (client.ExecResult, error) {
			_ = out.Stdout([]byte("start\n"))
			select {
			case <-time.After(600 * time.Millisecond):
			case <-ctx.Done():
				return client.ExecResult{}, fmt.Errorf("exec: %w", ctx.Err())
			}
			_ = out.Stdout([]byte("end\n"))
			return client.ExecResult{ExitCode: 0}, nil
		},
	}
	// Read deadlines (huma's body read timeout, http.Server.ReadTimeout) must
	// not cancel a request whose body has been read.
	srv := httptest.NewUnstartedServer(NewHandler(fb, Options{Logger: slog.New(slog.DiscardHandler)}))
	srv.Config.ReadTimeout = 100 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, aliceKey)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := c.ExecStream(testCtx(t), "sb", client.ExecRequest{Command: []string{"sleep"}}, &out, nil); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if out.String() != "start\nend\n" {
		t.Fatalf("stdout %q", out.String())
	}
	if _, err := c.Exec(testCtx(t), "sb", client.ExecRequest{Command: []string{"sleep"}}); err != nil {
		t.Fatalf("buffered: %v", err)
	}
}

func TestSandboxScopeAllowsOnlyItsOwnAgentState(t *testing.T) {
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"/v1/sandboxes/sb-1/checkpoints/plan", true},
		{"/v1/sandboxes/sb-1/checkpoints", true},
		{"/v1/sandboxes/sb-1/threads", true},
		{"/v1/sandboxes/sb-1/runs/r1/events", true},
		{"/v1/sandboxes/sb-1/orient", true},
		{"/v1/sandboxes/sb-1/tasks", true},
		{"/v1/sandboxes/sb-1/tasks/t1/state", true},
		{"/v1/sandboxes/sb-1/observations", true},
		{"/v1/sandboxes/sb-1/kv", true},
		{"/v1/sandboxes/sb-1/kv/cfg/model", true},
		{"/v1/sandboxes/sb-1/network", true}, // GET only: sandboxScope refuses PUT
		{"/v1/sandboxes/sb-1/ports", true},
		{"/v1/sandboxes/sb-2/network", false},
		{"/v1/sandboxes/sb-1/networks", false},
		{"/v1/sandboxes/sb-2/tasks", false},
		{"/v1/sandboxes/sb-2/observations", false},
		{"/v1/sandboxes/sb-2/kv/k", false},
		{"/v1/sandboxes/sb-1/kv/../../sb-2/kv", false},
		{"/v1/sandboxes/sb-1/taskss", false},
		{"/v1/sandboxes/sb-2/checkpoints/plan", false},
		{"/v1/sandboxes/sb-1/stop", false},
		{"/v1/sandboxes/sb-1/exec", false},
		{"/v1/sandboxes/sb-1/files/content", false},
		{"/v1/sandboxes/sb-1", false},
		{"/v1/sandboxes", false},
		{"/v1/keys", false},
		{"/v1/sandboxes/sb-1/checkpoints/../../sb-2/checkpoints", false},
		{"/v1/sandboxes/sb-10/checkpoints", false},
	} {
		if got := sandboxScopeAllows("sb-1", c.path); got != c.ok {
			t.Errorf("%s: got %v want %v", c.path, got, c.ok)
		}
	}
}
