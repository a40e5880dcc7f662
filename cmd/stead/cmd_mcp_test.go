package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stead-dev/stead/internal/mcp"
)

// mcpConnect opens an MCP client session over tr.
func mcpConnect(t *testing.T, tr sdk.Transport) *sdk.ClientSession {
	t.Helper()
	cl := sdk.NewClient(&sdk.Implementation{Name: "stead-cli-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return cs
}

// mcpCall calls a tool and returns its result and the JSON of its
// structured content.
func mcpCall(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (*sdk.CallToolResult, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	return res, string(b)
}

// exerciseMCP runs the tools a `stead mcp` against newCheckpointServer
// (default sandbox agent-1) must serve.
func exerciseMCP(t *testing.T, cs *sdk.ClientSession) {
	t.Helper()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) != len(mcp.ToolNames()) {
		t.Fatalf("list tools: %d, %v", len(tools.Tools), err)
	}
	res, out := mcpCall(t, cs, "exec", map[string]any{"command": []string{"ls", "-la"}})
	if res.IsError || !strings.Contains(out, `"exit_code":3`) || !strings.Contains(out, `"stdout":"ls -la\n"`) {
		t.Errorf("exec: error %v, %s", res.IsError, out)
	}
	res, out = mcpCall(t, cs, "checkpoint_put", map[string]any{"name": "progress", "document": map[string]any{"step": 4}})
	if res.IsError || !strings.Contains(out, `"version":1`) {
		t.Errorf("checkpoint_put: error %v, %s", res.IsError, out)
	}
	res, out = mcpCall(t, cs, "checkpoint_get", map[string]any{"name": "progress"})
	if res.IsError || !strings.Contains(out, `"body":{"step":4}`) {
		t.Errorf("checkpoint_get: error %v, %s", res.IsError, out)
	}
	res, _ = mcpCall(t, cs, "checkpoint_get", map[string]any{"name": "absent"})
	if !res.IsError {
		t.Errorf("checkpoint_get of an absent document is no tool error")
	}
	// --sandbox confines the session: another sandbox is out of reach.
	res, _ = mcpCall(t, cs, "exec", map[string]any{"sandbox": "theirs", "command": "true"})
	if !res.IsError || !strings.Contains(mcpText(res), "confined to sandbox") {
		t.Errorf("exec on another sandbox: %v %s", res.IsError, mcpText(res))
	}
}

// mcpText joins the text contents of a result.
func mcpText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestMCPOverStdio(t *testing.T) {
	srv := newCheckpointServer(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr strings.Builder
	code := make(chan int, 1)
	go func() {
		c := runIO([]string{"--endpoint", srv.URL, "--api-key", "k", "mcp", "--sandbox", "agent-1"}, inR, outW, &stderr)
		_ = outW.Close()
		code <- c
	}()
	cs := mcpConnect(t, &sdk.IOTransport{Reader: outR, Writer: inW})
	exerciseMCP(t, cs)
	_ = cs.Close() // closes the server's stdin
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("stead mcp exit %d: %s", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stead mcp did not exit when its stdin closed")
	}
}

// TestMCPHelperProcess is `stead mcp` as a subprocess of
// TestMCPOverStdioSubprocess; run alone it does nothing.
// TestMain lets the test binary serve as the `stead mcp` subprocess of
// TestMCPOverStdioSubprocess (a skipped helper test would trip CI's
// no-skip rule).
func TestMain(m *testing.M) {
	if os.Getenv("STEAD_MCP_HELPER") == "1" {
		os.Exit(run([]string{"mcp", "--sandbox", "agent-1"}))
	}
	os.Exit(m.Run())
}

func TestMCPOverStdioSubprocess(t *testing.T) {
	srv := newCheckpointServer(t)
	cmd := exec.Command(os.Args[0])
	// The endpoint and key come from the environment, as for any verb.
	cmd.Env = append(os.Environ(), "STEAD_MCP_HELPER=1", "STEAD_ENDPOINT="+srv.URL, "STEAD_API_KEY=k")
	cmd.Stderr = os.Stderr
	cs := mcpConnect(t, &sdk.CommandTransport{Command: cmd})
	exerciseMCP(t, cs)
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		t.Errorf("stead mcp subprocess: %v", cmd.ProcessState)
	}
}

func TestMCPOverHTTP(t *testing.T) {
	srv := newCheckpointServer(t)
	errR, errW := io.Pipe()
	g := &globals{stdin: strings.NewReader(""), stdout: io.Discard, stderr: errW}
	root := newRootCmd(g)
	root.SetArgs([]string{"--endpoint", srv.URL, "--api-key", "k", "mcp", "--http", "127.0.0.1:0", "--token", "tok", "--sandbox", "agent-1"})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- root.ExecuteContext(ctx)
		_ = errW.Close()
	}()
	// The key this test's daemon gives cannot mint a scoped key: a
	// warning comes first, then the URL.
	br := bufio.NewReader(errR)
	var url, seen string
	for url == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stead mcp --http: %v %q", err, seen+line)
		}
		seen += line
		url = regexp.MustCompile(`http://\S+/mcp`).FindString(line)
	}
	if !strings.Contains(seen, "confined to it by stead mcp only") {
		t.Errorf("no warning that the key could not be scoped: %q", seen)
	}
	go func() { _, _ = io.Copy(io.Discard, errR) }()
	hc := &http.Client{Transport: bearerTransport{"tok"}}
	cs := mcpConnect(t, &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1})
	exerciseMCP(t, cs)
	_ = cs.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stead mcp --http: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stead mcp --http did not stop")
	}
}

// bearerTransport adds a bearer token to every request.
type bearerTransport struct{ token string }

// RoundTrip sets the Authorization header.
func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func TestMCPHTTPRefusesOpenAddressWithoutToken(t *testing.T) {
	t.Setenv("STEAD_MCP_TOKEN", "")
	srv := newCheckpointServer(t)
	code, _, stderr := stead(t, srv, "mcp", "--http", "0.0.0.0:0")
	if code != exitUsage || !strings.Contains(stderr, "--token") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	code, _, stderr = stead(t, srv, "mcp", "--http", "nonsense")
	if code != exitUsage {
		t.Fatalf("bad address: exit %d: %s", code, stderr)
	}
}
