package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
)

// The official MCP TypeScript SDK as the client of `stead mcp`: the
// package is installed with npm once per test binary into a directory of
// the system's temp dir (kept, so a rerun needs no download), and a small
// driver script runs a plan of tool calls and prints what came back.

// tsSDKVersion pins the SDK the tests drive.
const tsSDKVersion = "1.32.2"

var (
	tsSDKOnce sync.Once
	tsSDKDir  string
	tsSDKErr  error
)

// tsDriver is the node script: argv[2] is a plan (JSON): the transport
// (command+args+env for stdio, or url for streamable HTTP) and steps, each
// a tool call with its arguments (${name} is replaced by a value saved
// from an earlier result), whether to ask for progress (onprogress with
// resetTimeoutOnProgress) and a request timeout. It prints one JSON array
// of results on stdout.
const tsDriver = `
import fs from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const plan = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const client = new Client({ name: 'stead-e2e-ts', version: '1' });
const transport = plan.url
  ? new StreamableHTTPClientTransport(new URL(plan.url))
  : new StdioClientTransport({ command: plan.command, args: plan.args, env: plan.env, stderr: 'inherit' });
await client.connect(transport);
const vars = {};
const results = [];
const tools = await client.listTools();
results.push({ tool: 'tools/list', names: tools.tools.map(t => t.name) });
for (const step of plan.steps) {
  const progress = [];
  const opts = {};
  if (step.progress) {
    opts.onprogress = p => progress.push({ progress: p.progress, message: p.message, at: Date.now() });
    opts.resetTimeoutOnProgress = true;
  }
  if (step.timeoutMs) opts.timeout = step.timeoutMs;
  const args = JSON.parse(JSON.stringify(step.args || {}).replace(/\$\{(\w+)\}/g, (_, k) => vars[k]));
  const started = Date.now();
  try {
    const res = await client.callTool({ name: step.tool, arguments: args }, undefined, opts);
    const text = (res.content || []).filter(c => c.type === 'text').map(c => c.text).join('\n');
    for (const [name, field] of Object.entries(step.save || {})) vars[name] = res.structuredContent?.[field];
    results.push({ tool: step.tool, isError: !!res.isError, text, structured: res.structuredContent, progress, ms: Date.now() - started });
  } catch (e) {
    results.push({ tool: step.tool, protocolError: String(e), progress, ms: Date.now() - started });
  }
}
await client.close();
process.stdout.write(JSON.stringify(results));
`

// tsSDK installs the SDK (once) and writes the driver; it returns the
// directory to run node in.
func tsSDK(t *testing.T) string {
	t.Helper()
	tsSDKOnce.Do(func() {
		dir := filepath.Join(os.TempDir(), "stead-e2e-mcp-ts-sdk-"+tsSDKVersion)
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				tsSDKErr = err
				return
			}
			if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"stead-e2e-mcp","private":true,"type":"module"}`), 0o644); err != nil {
				tsSDKErr = err
				return
			}
			cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "@modelcontextprotocol/sdk@"+tsSDKVersion)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				tsSDKErr = fmt.Errorf("npm install @modelcontextprotocol/sdk@%s: %v\n%s", tsSDKVersion, err, out)
				return
			}
		}
		tsSDKErr = os.WriteFile(filepath.Join(dir, "driver.mjs"), []byte(tsDriver), 0o644)
		tsSDKDir = dir
	})
	if tsSDKErr != nil {
		t.Fatal(tsSDKErr)
	}
	return tsSDKDir
}

// tsStep is one tool call of a plan.
type tsStep struct {
	Tool      string            `json:"tool"`
	Args      map[string]any    `json:"args,omitempty"`
	Progress  bool              `json:"progress,omitempty"`
	TimeoutMs int               `json:"timeoutMs,omitempty"`
	Save      map[string]string `json:"save,omitempty"`
}

// tsResult is what the driver reports of a step.
type tsResult struct {
	Tool          string         `json:"tool"`
	Names         []string       `json:"names"`
	IsError       bool           `json:"isError"`
	ProtocolError string         `json:"protocolError"`
	Text          string         `json:"text"`
	Structured    map[string]any `json:"structured"`
	Progress      []struct {
		Progress float64 `json:"progress"`
		Message  string  `json:"message"`
	} `json:"progress"`
	Ms int64 `json:"ms"`
}

// runTS runs a plan with the TypeScript SDK; transport is the plan's
// transport part (command, args, env; or url). Results are in step order,
// after the tools/list one.
func runTS(t *testing.T, ctx context.Context, transport map[string]any, steps []tsStep) []tsResult {
	t.Helper()
	dir := tsSDK(t)
	plan := map[string]any{"steps": steps}
	for k, v := range transport {
		plan[k] = v
	}
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	planPath := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(planPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "node", "driver.mjs", planPath)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node driver: %v\nstderr: %s\nstdout: %s", err, stderr.String(), out)
	}
	var res []tsResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("driver output %q: %v", out, err)
	}
	if len(res) != len(steps)+1 {
		t.Fatalf("%d results for %d steps", len(res), len(steps))
	}
	return res
}

// stdioTransport is a plan's transport: `stead mcp ARGS` over stdio.
func (d *daemon) stdioTransport(args ...string) map[string]any {
	return map[string]any{"command": d.bin, "args": append([]string{"mcp"}, args...), "env": map[string]string{
		"STEAD_ENDPOINT": "http://" + d.addr, "STEAD_API_KEY": d.key, "PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME"),
	}}
}

// startMCPHTTP runs `stead mcp --http` with args and returns its URL and a
// stop that ends it (gracefully, as a user's ^C) and waits.
func (d *daemon) startMCPHTTP(t *testing.T, args ...string) (string, func()) {
	t.Helper()
	cmd := exec.Command(d.bin, append([]string{"mcp", "--http", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "STEAD_ENDPOINT=http://"+d.addr, "STEAD_API_KEY="+d.key)
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(stop)
	br := bufio.NewReader(errPipe)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stead mcp --http: %v (%q)", err, line)
		}
		if url := regexp.MustCompile(`http://\S+/mcp`).FindString(line); url != "" {
			go func() { _, _ = bufio.NewReader(br).WriteTo(os.Stderr) }()
			return url, stop
		}
		t.Logf("stead mcp: %s", strings.TrimSpace(line))
	}
}

// TestMCPTypeScriptSDKLongCommandWithProgress: through the official
// TypeScript SDK, over stdio and over streamable HTTP at once, a 90 s
// command completes: progress notifications with its output arrive every
// 10 s and, with resetTimeoutOnProgress, a 25 s request timeout never
// fires.
func TestMCPTypeScriptSDKLongCommandWithProgress(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	// The parallel subtests run after this function returns.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "mcp-long"})
	if err != nil {
		t.Fatal(err)
	}
	tsSDK(t)
	long := tsStep{Tool: "exec", Progress: true, TimeoutMs: 25000, Args: map[string]any{
		"command": `i=0; while [ $i -lt 18 ]; do i=$((i+1)); echo tick $i; sleep 5; done; echo done`,
	}}
	check := func(t *testing.T, res []tsResult) {
		r := res[1]
		if r.ProtocolError != "" || r.IsError {
			t.Fatalf("90 s exec: %s %s (after %d ms, %d progress notifications)", r.ProtocolError, r.Text, r.Ms, len(r.Progress))
		}
		if r.Ms < 89000 {
			t.Errorf("the command took %d ms, want 90 s", r.Ms)
		}
		if out, _ := r.Structured["stdout"].(string); !strings.Contains(out, "tick 18\ndone\n") || r.Structured["exit_code"] != 0.0 {
			t.Errorf("result: %v", r.Structured)
		}
		if len(r.Progress) < 7 {
			t.Fatalf("%d progress notifications in 90 s, want one every 10 s", len(r.Progress))
		}
		for i, p := range r.Progress {
			if i > 0 && p.Progress <= r.Progress[i-1].Progress {
				t.Errorf("progress did not grow: %v", r.Progress)
			}
			if !strings.Contains(p.Message, "tick ") {
				t.Errorf("progress %d carries no output: %q", i, p.Message)
			}
		}
	}
	url, _ := d.startMCPHTTP(t, "--sandbox", sb.Name)
	t.Run("stdio", func(t *testing.T) {
		t.Parallel()
		check(t, runTS(t, ctx, d.stdioTransport("--sandbox", sb.Name), []tsStep{long}))
	})
	t.Run("streamable-http", func(t *testing.T) {
		t.Parallel()
		check(t, runTS(t, ctx, map[string]any{"url": url}, []tsStep{long}))
	})
}

// TestMCPTypeScriptSDKAgentHarness: a harness on the TypeScript SDK, with
// `stead mcp --sandbox X` (streamable HTTP): its sandbox was auto-stopped,
// exec says to start it and start does; it sees only X and cannot reach a
// second sandbox (exec, fork); a background command is followed to its
// exit code; a session thread is created on first append; snapshots are
// listed and rolled back to, but not one of the second sandbox. The
// session's scoped key is revoked at its end.
func TestMCPTypeScriptSDKAgentHarness(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	x, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "mcp-x"})
	if err != nil {
		t.Fatal(err)
	}
	y, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "mcp-y"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.StopSandbox(ctx, x.ID); err != nil { // as the idle policy would
		t.Fatal(err)
	}
	ySnap, err := d.c.CreateSnapshot(ctx, y.ID, client.CreateSnapshotRequest{Label: "of-y"})
	if err != nil {
		t.Fatal(err)
	}
	tsSDK(t)
	url, stop := d.startMCPHTTP(t, "--sandbox", "mcp-x")
	keys, err := d.c.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var minted client.APIKey
	for _, k := range keys {
		if strings.Contains(k.Name, "stead mcp --sandbox mcp-x") {
			minted = k
		}
	}
	if minted.ID == "" || minted.Role != client.RoleTenantUser || len(minted.Sandboxes) != 1 || minted.Sandboxes[0] != x.ID || minted.ExpiresAt == nil {
		t.Fatalf("no key scoped to mcp-x minted for the session: %+v", keys)
	}

	res := runTS(t, ctx, map[string]any{"url": url}, []tsStep{
		{Tool: "exec", Args: map[string]any{"command": "echo hi"}}, // 1: stopped
		{Tool: "start"}, // 2
		{Tool: "exec", Args: map[string]any{"command": "echo hi > /workspace/f && cat /workspace/f"}}, // 3
		{Tool: "sandbox_list"}, // 4
		{Tool: "exec", Args: map[string]any{"sandbox": "mcp-y", "command": "true"}},                                                                 // 5
		{Tool: "exec", Args: map[string]any{"sandbox": y.ID, "command": "true"}},                                                                    // 6
		{Tool: "fork", Args: map[string]any{"source": "mcp-y"}},                                                                                     // 7
		{Tool: "exec", Args: map[string]any{"command": "sleep 2; echo bg-out; exit 4", "background": true}, Save: map[string]string{"h": "handle"}}, // 8
		{Tool: "exec_wait", Progress: true, Args: map[string]any{"handle": "${h}", "wait": "30s"}},                                                  // 9
		{Tool: "session_append", Args: map[string]any{"thread": "brand-new", "type": "note", "payload": "hi"}},                                      // 10
		{Tool: "checkpoint_put", Args: map[string]any{"name": "plan", "body": map[string]any{"step": 1}}},                                           // 11
		{Tool: "snapshot", Args: map[string]any{"label": "mark"}, Save: map[string]string{"snap": "id"}},                                            // 12
		{Tool: "snapshot_list"}, // 13
		{Tool: "search_files", Args: map[string]any{"contains": "hi"}},                 // 14
		{Tool: "delete", Args: map[string]any{"confirm": "wrong"}},                     // 15
		{Tool: "exec", Args: map[string]any{"command": "echo changed > /workspace/f"}}, // 16
		{Tool: "rollback", Args: map[string]any{"snapshot": "${snap}"}},                // 17
		{Tool: "read_file", Args: map[string]any{"path": "/workspace/f"}},              // 18
		{Tool: "rollback", Args: map[string]any{"snapshot": ySnap.ID}},                 // 19
	})
	want := func(i int, ok bool, substr string) {
		t.Helper()
		r := res[i]
		body, _ := json.Marshal(r.Structured)
		all := r.Text + string(body)
		if r.ProtocolError != "" || r.IsError == ok || !strings.Contains(all, substr) {
			t.Errorf("step %d %s: protocol error %q, tool error %v, want error %v containing %q: %s", i, r.Tool, r.ProtocolError, r.IsError, !ok, substr, all)
		}
	}
	for _, name := range []string{"start", "exec_wait", "sandbox_list", "delete", "snapshot_list", "checkpoint_history", "search_files"} {
		if !strings.Contains(strings.Join(res[0].Names, " "), name) {
			t.Errorf("tool %s not listed: %v", name, res[0].Names)
		}
	}
	want(1, false, "call the start tool")
	want(2, true, `"state":"running"`)
	want(3, true, "hi")
	want(4, true, "mcp-x")
	if strings.Contains(res[4].Text, "mcp-y") {
		t.Errorf("sandbox_list of a session confined to mcp-x shows mcp-y: %s", res[4].Text)
	}
	want(5, false, "confined")
	want(6, false, "confined")
	want(7, false, "confined")
	want(8, true, `"running":true`)
	want(9, true, `"exit_code":4`)
	want(9, true, "bg-out")
	want(10, true, `"seq":1`)
	want(11, true, `"version":1`)
	want(12, true, "mark")
	want(13, true, "mark")
	want(14, true, "/workspace/f")
	want(15, false, "nothing deleted")
	want(16, true, `"exit_code":0`)
	want(17, true, "safety")
	want(18, true, `"content":"hi\n"`)
	want(19, false, "HTTP 404") // the daemon: a snapshot of mcp-y is out of the session key's reach
	if got, err := d.c.GetSandbox(ctx, y.ID); err != nil || got.State != "running" {
		t.Errorf("mcp-y after the session: %+v %v", got, err)
	}
	// Ending the session revokes its key.
	stop()
	keys, err = d.c.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.ID == minted.ID {
			t.Errorf("the session key %s outlived the session: %+v", k.ID, k)
		}
	}
}
