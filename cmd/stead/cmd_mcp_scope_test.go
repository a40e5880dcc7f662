package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/state"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// scopeBackend is newCheckpointServer's daemon with a tenant-admin key "k"
// that may mint keys: it hands out one scoped key and records its
// creation and revocation.
type scopeBackend struct {
	*checkpointBackend
	api.TenantBackend // methods the tests do not reach panic

	mu      sync.Mutex
	created []client.CreateAPIKeyRequest
	revoked []string
}

func (b *scopeBackend) Authenticate(_ context.Context, secret string) (api.Principal, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case secret == "k":
		return api.Principal{TenantID: "t1", KeyID: "key-admin", Role: client.RoleTenantAdmin}, nil
	case secret == "scoped-secret" && len(b.created) == 1 && !slices.Contains(b.revoked, "key-scoped"):
		return api.Principal{TenantID: "t1", KeyID: "key-scoped", Role: b.created[0].Role, Sandboxes: b.created[0].Sandboxes}, nil
	}
	return api.Principal{}, errs.ErrUnauthenticated
}

func (b *scopeBackend) CreateAPIKey(_ context.Context, p api.Principal, req client.CreateAPIKeyRequest) (client.APIKey, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.created = append(b.created, req)
	return client.APIKey{ID: "key-scoped", Tenant: p.TenantID, Name: req.Name, Role: req.Role, Sandboxes: req.Sandboxes, Secret: "scoped-secret"}, nil
}

func (b *scopeBackend) RevokeAPIKey(_ context.Context, _ api.Principal, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.revoked = append(b.revoked, id)
	return nil
}

// TestMCPSandboxMintsScopedKeyAndRevokesIt: `stead mcp --sandbox agent-1`
// with a tenant-admin key mints a tenant-user key scoped to agent-1 with
// an expiry, acts with it (the checkpoint's principal is that key), and
// revokes it when the session ends.
func TestMCPSandboxMintsScopedKeyAndRevokesIt(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.CreateTenant(ctx, store.Tenant{ID: "t1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateSandbox(ctx, store.Sandbox{ID: "sb-1", TenantID: "t1", Name: "agent-1", State: store.StateRunning}); err != nil {
		t.Fatal(err)
	}
	b := &scopeBackend{checkpointBackend: &checkpointBackend{cliBackend: &cliBackend{}, Service: state.New(st)}}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr strings.Builder
	code := make(chan int, 1)
	go func() {
		c := runIO([]string{"--endpoint", srv.URL, "--api-key", "k", "mcp", "--sandbox", "agent-1", "--key-ttl", "2h"}, inR, outW, &stderr)
		_ = outW.Close()
		code <- c
	}()
	cs := mcpConnect(t, &sdk.IOTransport{Reader: outR, Writer: inW})
	res, out := mcpCall(t, cs, "checkpoint_put", map[string]any{"name": "plan", "body": map[string]any{"step": 1}})
	if res.IsError || !strings.Contains(out, `"principal":"key-scoped"`) {
		t.Fatalf("checkpoint_put with the session key: %v %s %s", res.IsError, out, mcpText(res))
	}
	res, _ = mcpCall(t, cs, "fork", map[string]any{"source": "theirs"})
	if !res.IsError || !strings.Contains(mcpText(res), "confined") {
		t.Errorf("fork in a confined session: %s", mcpText(res))
	}
	b.mu.Lock()
	created := slices.Clone(b.created)
	b.mu.Unlock()
	if len(created) != 1 || created[0].Role != client.RoleTenantUser || !slices.Equal(created[0].Sandboxes, []string{"sb-1"}) ||
		created[0].ExpiresIn != "2h0m0s" || !strings.Contains(created[0].Name, "agent-1") {
		t.Fatalf("minted %+v", created)
	}
	_ = cs.Close()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("stead mcp exit %d: %s", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stead mcp did not exit when its stdin closed")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !slices.Equal(b.revoked, []string{"key-scoped"}) {
		t.Errorf("revoked %v at the end of the session, want key-scoped", b.revoked)
	}
	if strings.Contains(stderr.String(), "may not mint") {
		t.Errorf("warned although the key could mint: %s", stderr.String())
	}
}

// TestMCPSandboxFallsBackWhenKeyCannotMint: a tenant-user key cannot mint
// keys: stead mcp says so and confines the session itself.
func TestMCPSandboxFallsBackWhenKeyCannotMint(t *testing.T) {
	srv := newCheckpointServer(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	lines := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(errR)
		lines <- string(b)
	}()
	go func() {
		_ = runIO([]string{"--endpoint", srv.URL, "--api-key", "k", "mcp", "--sandbox", "agent-1"}, inR, outW, errW)
		_ = outW.Close()
		_ = errW.Close()
	}()
	cs := mcpConnect(t, &sdk.IOTransport{Reader: outR, Writer: inW})
	res, _ := mcpCall(t, cs, "list_files", map[string]any{"sandbox": "theirs", "path": "/"})
	if !res.IsError || !strings.Contains(mcpText(res), "confined") {
		t.Errorf("list_files on another sandbox: %s", mcpText(res))
	}
	_ = cs.Close()
	if msg := <-lines; !strings.Contains(msg, "may not mint a key scoped to sandbox agent-1") || !strings.Contains(msg, "tenant-admin") {
		t.Errorf("stderr: %q", msg)
	}
}

func TestMCPKeyTTLMustBeSane(t *testing.T) {
	srv := newCheckpointServer(t)
	code, _, stderr := stead(t, srv, "mcp", "--sandbox", "agent-1", "--key-ttl", "5s")
	if code != exitUsage || !strings.Contains(stderr, "--key-ttl") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	code, _, stderr = stead(t, srv, "mcp", "--sandbox", "missing")
	if code == exitOK || !strings.Contains(stderr, "missing") {
		t.Fatalf("absent sandbox: exit %d: %s", code, stderr)
	}
}

// TestMCPHTTPAllowOrigin: over --http, a browser Origin is refused unless
// it is a localhost one or given with --allow-origin.
func TestMCPHTTPAllowOrigin(t *testing.T) {
	srv := newCheckpointServer(t)
	errR, errW := io.Pipe()
	g := &globals{stdin: strings.NewReader(""), stdout: io.Discard, stderr: errW}
	root := newRootCmd(g)
	root.SetArgs([]string{"--endpoint", srv.URL, "--api-key", "k", "mcp", "--http", "127.0.0.1:0", "--allow-origin", "https://ide.example"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		_ = root.ExecuteContext(ctx)
		_ = errW.Close()
	}()
	line, err := bufio.NewReader(errR).ReadString('\n')
	if err != nil {
		t.Fatalf("stead mcp --http: %v %q", err, line)
	}
	go func() { _, _ = io.Copy(io.Discard, errR) }()
	url := regexp.MustCompile(`http://\S+/mcp`).FindString(line)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for origin, want := range map[string]int{"https://ide.example": http.StatusOK, "http://localhost:5173": http.StatusOK,
		"https://evil.example": http.StatusForbidden} {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("origin %s: %d, want %d", origin, resp.StatusCode, want)
		}
	}
}
