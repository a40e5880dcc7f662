package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
)

// TestSingleNodeLostCopiesThroughTheCLI: on a single node (the node is the
// daemon itself) `stead node lost` lists a kept copy (made as a node that
// lost a lease makes it: its root renamed to lost-<epoch>-<id> in the
// pool), recovers it into a new sandbox that holds its files, and
// discards it; another node's name and a tenant's key are refused.
func TestSingleNodeLostCopiesThroughTheCLI(t *testing.T) {
	d := newDaemon(t, "--node-name", "solo")
	ctx := ctxT(t)
	must := func(args ...string) string {
		t.Helper()
		code, out, errOut := d.cli(args...)
		if code != 0 {
			t.Fatalf("stead %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"sh", "-c", "echo unpushed > /workspace/late"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("write: %+v %v", res, err)
	}
	if _, err := d.c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	copyName := "lost-3-" + sb.ID
	pool := filepath.Join(d.dataDir, "pool", "sandboxes")
	if err := os.Rename(filepath.Join(pool, sb.ID), filepath.Join(pool, copyName)); err != nil {
		t.Fatal(err)
	}

	var list []client.LostCopy
	if out := must("node", "lost", "ls", "--json"); json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 ||
		list[0].Node != "solo" || list[0].Copy != copyName || list[0].Sandbox != sb.ID || list[0].SandboxName != "gone" || list[0].Epoch != 3 {
		t.Fatalf("node lost ls --json: %s", out)
	}
	if out := must("node", "lost", "ls", "--node", "solo"); !strings.Contains(out, copyName) || !strings.Contains(out, "gone") {
		t.Fatalf("node lost ls --node solo:\n%s", out)
	}
	if code, _, _ := d.cli("node", "lost", "ls", "--node", "elsewhere"); code != 3 {
		t.Fatalf("ls of another node: exit %d, want 3", code)
	}
	if code, _, errOut := d.cliEnv([]string{"STEAD_API_KEY=" + tenantAdminKey(t, d)}, "node", "lost", "discard", "solo", copyName); code == 0 ||
		!strings.Contains(errOut, "403") {
		t.Fatalf("discard with a tenant-admin key: exit %d %s", code, errOut)
	}
	if code, _, _ := d.cli("node", "lost", "discard", "solo", "../sandboxes/"+sb.ID); code == 0 {
		t.Fatal("discard of a path was accepted")
	}

	var rec client.Sandbox
	if out := must("node", "lost", "recover", "solo", copyName, "--name", "salvage", "--json"); json.Unmarshal([]byte(out), &rec) != nil ||
		rec.Name != "salvage" || rec.State != "stopped" || rec.ID == sb.ID {
		t.Fatalf("recover: %s", out)
	}
	if _, err := d.c.StartSandbox(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	res, err = d.c.Exec(ctx, rec.ID, client.ExecRequest{Command: []string{"cat", "/workspace/late"}})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "unpushed\n" {
		t.Fatalf("recovered file: %+v %v", res, err)
	}
	must("node", "lost", "discard", "solo", copyName)
	if _, err := os.Stat(filepath.Join(pool, copyName)); !os.IsNotExist(err) {
		t.Fatalf("copy after discard: %v", err)
	}
	if out := must("node", "lost", "ls"); strings.Contains(out, copyName) {
		t.Fatalf("ls after discard:\n%s", out)
	}
}
