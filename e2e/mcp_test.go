package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stead-dev/stead/client"
)

// TestMCPServerDrivesARealSandbox: an MCP client (the official Go SDK)
// runs `stead mcp` over stdio against a real daemon and uses its tools on a
// real sandbox.
func TestMCPServerDrivesARealSandbox(t *testing.T) {
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "mcp-box"})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(d.bin, "mcp", "--sandbox", sb.ID)
	cmd.Env = append(os.Environ(), "STEAD_ENDPOINT=http://"+d.addr, "STEAD_API_KEY="+d.key)
	cl := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(name string, args map[string]any) (*sdk.CallToolResult, string) {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var text strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				text.WriteString(tc.Text)
			}
		}
		if res.StructuredContent != nil {
			b, _ := json.Marshal(res.StructuredContent)
			text.Write(b)
		}
		return res, text.String()
	}
	if res, out := call("exec", map[string]any{"command": "echo from-mcp > /workspace/m.txt && cat /workspace/m.txt"}); res.IsError || !strings.Contains(out, "from-mcp") {
		t.Fatalf("exec: %v %s", res.IsError, out)
	}
	if res, out := call("read_file", map[string]any{"path": "/workspace/m.txt"}); res.IsError || !strings.Contains(out, "from-mcp") {
		t.Fatalf("read_file: %v %s", res.IsError, out)
	}
	if res, out := call("checkpoint_put", map[string]any{"name": "plan", "document": map[string]any{"step": 2}}); res.IsError {
		t.Fatalf("checkpoint_put: %s", out)
	}
	if cp, err := d.c.GetCheckpoint(ctx, sb.ID, "", "plan", 0); err != nil || !strings.Contains(string(cp.Body), `"step":2`) {
		t.Fatalf("checkpoint written through MCP: %+v %v", cp, err)
	}
	if res, out := call("orient", map[string]any{}); res.IsError || !strings.Contains(out, "plan") {
		t.Fatalf("orient: %v %s", res.IsError, out)
	}
	if res, _ := call("read_file", map[string]any{"path": "/workspace/missing"}); !res.IsError {
		t.Fatal("a missing file is not a tool error")
	}
}
