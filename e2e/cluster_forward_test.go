package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/bench/cluster/rig"
	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/e2b"
	"github.com/stead-dev/stead/internal/e2b/envd"
)

// TestClusterE2BPortsVolumesOperationsThroughAnyNode: through nodes that
// do not hold them, (a) the E2B API works for a sandbox (its control plane,
// and its data plane by Host 49983-<id>.<e2b domain> and by the
// E2b-Sandbox-Id header: a process started through one node, a file
// uploaded through another and read back; a create through a cordoned
// node placed on another; the official SDK); (b) a host-routed port proxy
// request ("8080-<id>.<proxy domain>" on a node's own proxy listener)
// reaches a server in the sandbox; (c) a volume made through node1 lives on
// node1, a sandbox mounting it created through another node is placed
// there, and the volume's routes (snapshots, disk usage) work through the
// others while a file written into it through one is read through
// another; (d) operations started on the owner (a sandbox push, a volume
// push) are followed to their end through the other nodes.
func TestClusterE2BPortsVolumesOperationsThroughAnyNode(t *testing.T) {
	const proxyDomain, e2bDomain = "proxy.test", "e2b.test"
	// A pool room enough for an E2B create (the default instance type: 10 GiB).
	c := newCluster(t, rig.Options{PoolGiB: 16, Serve: []string{"--proxy-domain", proxyDomain, "--e2b-domain", e2bDomain}})
	ctx := ctxT(t)

	// The volume lives where it was made (node1); a sandbox mounting it,
	// created through node2, is placed there. The sandbox the rest uses is
	// made on node1 (the others cordoned), so that each part below fails
	// alone when its forwarding is missing.
	vol, err := c.Nodes[0].Client.CreateVolume(ctx, client.CreateVolumeRequest{Name: "fwd-data", SizeBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	mounts := []client.VolumeMount{{Volume: vol.ID, Path: "/vol"}}
	key := e2b.EncodeKey(c.Nodes[0].Key)
	t.Run("placement", func(t *testing.T) {
		for i := range 2 {
			sb, err := c.Nodes[1].Client.CreateSandbox(ctx, client.CreateSandboxRequest{Name: fmt.Sprintf("follows-%d", i), InstanceType: "micro", Volumes: mounts})
			if err != nil {
				t.Fatalf("create mounting volume %s through %s: %v", vol.ID, c.Nodes[1].Name, err)
			}
			if on := c.chk.WaitRunning(ctx, sb.ID, 30*time.Second); on != c.Nodes[0].Name {
				t.Fatalf("a sandbox mounting volume %s (made through %s) runs on %q: placement does not follow the volume's data", vol.ID, c.Nodes[0].Name, on)
			}
		}
	})
	sb := c.createOn(c.Nodes[0].Name, client.CreateSandboxRequest{Name: "fwd", Volumes: mounts})[0]
	owner, others := c.Nodes[0], c.others(c.Nodes[0].Name)
	a, b := others[0], others[1]

	t.Run("volume", func(t *testing.T) {
		mark := fmt.Sprintf("vol-%d", time.Now().UnixNano())
		c.sh(a, sb.ID, "agent", "echo "+mark+" > /vol/note && cp /vol/note /workspace/note")
		if got, err := c.readFile(b, sb.ID, "/workspace/note"); err != nil || strings.TrimSpace(got) != mark {
			t.Fatalf("read through %s what was written into the volume through %s: %q %v", b.Name, a.Name, got, err)
		}
		for _, via := range others {
			snap, err := via.Client.CreateVolumeSnapshot(ctx, vol.ID, client.CreateSnapshotRequest{Label: "through-" + via.Name})
			if err != nil {
				t.Fatalf("volume snapshot of %s (data on %s) through %s: %v: volume routes are not forwarded to the volume's node", vol.ID, owner.Name, via.Name, err)
			}
			snaps, err := via.Client.ListVolumeSnapshots(ctx, vol.ID)
			if err != nil || !hasSnapshot(snaps, snap.ID) {
				t.Fatalf("volume snapshots of %s through %s: %+v %v; want %s", vol.ID, via.Name, snaps, err, snap.ID)
			}
			du, err := via.Client.VolumeDiskUsage(ctx, vol.ID, "/", 5)
			if err != nil || du.Files < 1 {
				t.Fatalf("disk usage of volume %s through %s: %+v %v", vol.ID, via.Name, du, err)
			}
			// A new volume from the local snapshot: made where the snapshot is.
			op, err := via.Client.RestoreVolume(ctx, client.RestoreVolumeRequest{Snapshot: snap.ID, Name: "from-" + via.Name, Wait: true})
			if err != nil || op.State != client.OperationSucceeded {
				t.Fatalf("restore volume snapshot %s (on %s) through %s: %+v %v", snap.ID, owner.Name, via.Name, op, err)
			}
		}
	})

	// A local snapshot of the sandbox, forked through another node: the
	// fork is made where the snapshot is.
	t.Run("snapshots", func(t *testing.T) {
		snap, err := a.Client.CreateSnapshot(ctx, sb.ID, client.CreateSnapshotRequest{Label: "to-fork"})
		if err != nil {
			t.Fatal(err)
		}
		forks, err := b.Client.Fork(ctx, snap.ID, client.ForkRequest{Name: "forked"})
		if err != nil || len(forks) != 1 {
			t.Fatalf("fork snapshot %s (on %s) through %s: %+v %v", snap.ID, owner.Name, b.Name, forks, err)
		}
		if on := c.chk.WaitRunning(ctx, forks[0].ID, 30*time.Second); on != owner.Name {
			t.Fatalf("the fork of a snapshot on %s runs on %q", owner.Name, on)
		}
		if got := strings.TrimSpace(c.sh(b, forks[0].ID, "agent", "cat /workspace/note")); got == "" {
			t.Fatalf("the fork has no /workspace/note")
		}
	})

	// A push started through a (forwarded to the owner, which runs it) is
	// followed to its end through b; so is a volume push.
	t.Run("operations", func(t *testing.T) {
		tag := api.NodeTag(owner.Name)
		for _, start := range []func() (client.Operation, error){
			func() (client.Operation, error) { return a.Client.Push(ctx, sb.ID, client.PushRequest{}) },
			func() (client.Operation, error) {
				return a.Client.PushVolume(ctx, vol.ID, client.PushVolumeRequest{})
			},
		} {
			op, err := start()
			if err != nil {
				t.Fatal(err)
			}
			done, err := b.Client.WaitOperation(ctx, op, nil)
			if err != nil || done.State != client.OperationSucceeded {
				t.Fatalf("%s operation %s (on %s) followed through %s: %+v %v", op.Kind, op.ID, owner.Name, b.Name, done, err)
			}
			if got, err := a.Client.GetOperation(ctx, op.ID); err != nil || got.State != client.OperationSucceeded {
				t.Fatalf("operation %s through %s: %+v %v", op.ID, a.Name, got, err)
			}
			if got, ok := api.OperationNodeTag(op.ID); !ok || got != tag {
				t.Fatalf("operation %s does not name its node %s (tag %s)", op.ID, owner.Name, tag)
			}
		}
	})

	// A server in the sandbox, on an exposed public port, reached by Host
	// through every node's own proxy listener.
	t.Run("port-by-host", func(t *testing.T) {
		f, err := os.Open(netsrvBinary(t))
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.Client.WriteFile(ctx, sb.ID, "/workspace/netsrv", 0o755, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Client.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"/workspace/netsrv", "serve", "8080"}, Background: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Client.ExposePort(ctx, sb.ID, 8080, client.ExposePortRequest{Public: true}); err != nil {
			t.Fatal(err)
		}
		host := "8080-" + sb.ID + "." + proxyDomain
		for _, via := range c.Nodes {
			out := proxyGet(t, via, host, "/through-"+via.Name)
			if !strings.Contains(out, "path=/through-"+via.Name) {
				t.Fatalf("GET http://%s/ on %s's proxy listener (the sandbox runs on %s): %q", host, via.Name, owner.Name, out)
			}
		}
	})

	// The E2B API through the nodes that do not own the sandbox.
	t.Run("e2b", func(t *testing.T) {
		key := e2b.EncodeKey(c.Nodes[0].Key)
		var detail struct {
			SandboxID, EnvdAccessToken, State string
		}
		for _, via := range others {
			status, body := e2bCall(t, ctx, via, http.MethodGet, "/sandboxes/"+sb.ID, map[string]string{"X-API-Key": key}, "", nil)
			if status != http.StatusOK || json.Unmarshal(body, &detail) != nil || detail.SandboxID != sb.ID || detail.EnvdAccessToken == "" {
				t.Fatalf("E2B GET /sandboxes/%s through %s: %d %s", sb.ID, via.Name, status, body)
			}
		}
		envdHost := map[string]string{"Host": e2b.EnvdPort + "-" + sb.ID + "." + e2bDomain, "X-Access-Token": detail.EnvdAccessToken}
		envdHeader := map[string]string{"E2b-Sandbox-Id": sb.ID, "X-Access-Token": detail.EnvdAccessToken}
		// A process, by Host, through a: its output streams back.
		start, _ := json.Marshal(envd.StartRequest{Process: &envd.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "printf e2b-fwd-$((6*7))"}}})
		var frame bytes.Buffer
		if err := envd.WriteFrame(&frame, 0, start); err != nil {
			t.Fatal(err)
		}
		status, body := e2bCall(t, ctx, a, http.MethodPost, "/process.Process/Start",
			withHeader(envdHost, "Content-Type", envd.ContentTypeStream), "", frame.Bytes())
		if want := base64.StdEncoding.EncodeToString([]byte("e2b-fwd-42")); status != http.StatusOK || !bytes.Contains(body, []byte(want)) {
			t.Fatalf("envd process.Process/Start by Host through %s: %d %q; want the output %s", a.Name, status, body, want)
		}
		// A file uploaded through b (by header), read back through a (by Host).
		var form bytes.Buffer
		mw := multipart.NewWriter(&form)
		fw, _ := mw.CreateFormFile("file", "e2b.txt")
		fmt.Fprint(fw, "uploaded through "+b.Name)
		mw.Close()
		status, body = e2bCall(t, ctx, b, http.MethodPost, "/files?path=/home/user/e2b.txt",
			withHeader(envdHeader, "Content-Type", mw.FormDataContentType()), "", form.Bytes())
		if status != http.StatusOK {
			t.Fatalf("envd POST /files through %s: %d %s", b.Name, status, body)
		}
		status, body = e2bCall(t, ctx, a, http.MethodGet, "/files?path=/home/user/e2b.txt", envdHost, "", nil)
		if status != http.StatusOK || string(body) != "uploaded through "+b.Name {
			t.Fatalf("envd GET /files by Host through %s: %d %q", a.Name, status, body)
		}
		if got := c.sh(owner, sb.ID, "agent", "cat /home/agent/e2b.txt"); got != "uploaded through "+b.Name {
			t.Fatalf("the owner reads %q from the file uploaded through %s", got, b.Name)
		}
		// A create through a cordoned node is placed on another.
		c.cli(owner, "node", "cordon", a.Name)
		defer c.cli(owner, "node", "uncordon", a.Name)
		status, body = e2bCall(t, ctx, a, http.MethodPost, "/v2/sandboxes", map[string]string{"X-API-Key": key, "Content-Type": "application/json"},
			"", []byte(`{"templateID":"base","timeout":300}`))
		var made struct{ SandboxID string }
		if status != http.StatusCreated || json.Unmarshal(body, &made) != nil || made.SandboxID == "" {
			t.Fatalf("E2B POST /v2/sandboxes through %s: %d %s", a.Name, status, body)
		}
		if on := c.chk.WaitRunning(ctx, made.SandboxID, 30*time.Second); on == "" || on == a.Name {
			t.Fatalf("an E2B create through %s, cordoned, runs on %q: E2B creates are not placed", a.Name, on)
		}
	})

	// The official E2B SDK, configured with a node that does not own the
	// sandbox (E2B_SANDBOX_URL mode: the data plane by header).
	t.Run("e2b-sdk", func(t *testing.T) {
		sctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		defer cancel()
		dir := installE2BSDK(t, sctx, e2bSDKVersion)
		node, err := exec.LookPath("node")
		if err != nil {
			t.Fatalf("node not found on PATH: %v", err)
		}
		cmd := exec.CommandContext(sctx, node, "e2b_cluster.mjs")
		cmd.Dir = dir
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "E2B_") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, "E2B_API_URL=http://"+b.API, "E2B_SANDBOX_URL=http://"+b.API, "E2B_API_KEY="+key,
			"E2B_SANDBOX_ID="+sb.ID, "VIA="+b.Name)
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("the E2B SDK through %s (the sandbox runs on %s): %v\n%s\n%s", b.Name, owner.Name, err, stderr, out)
		}
		var res struct{ Out string }
		if err := json.Unmarshal(out, &res); err != nil || res.Out != sb.ID {
			t.Fatalf("the E2B SDK's command through %s: %q %v; want %s", b.Name, out, err, sb.ID)
		}
		if got := c.sh(owner, sb.ID, "agent", "cat /home/agent/sdk.txt"); got != "written by the SDK through "+b.Name {
			t.Fatalf("the owner reads %q from the file the SDK wrote through %s", got, b.Name)
		}
	})
}

func hasSnapshot(snaps []client.Snapshot, id string) bool {
	for _, s := range snaps {
		if s.ID == id {
			return true
		}
	}
	return false
}

func withHeader(h map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for hk, hv := range h {
		out[hk] = hv
	}
	return out
}

// e2bCall makes one E2B call to node n's API listener ("Host" in hdr sets
// the request's Host) and returns its status and body.
func e2bCall(t *testing.T, ctx context.Context, n *rig.Node, method, path string, hdr map[string]string, _ string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+n.API+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("E2B %s %s through %s: %v", method, path, n.Name, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// proxyGet fetches path by Host from node n's own port proxy listener
// (127.0.0.1:7879 in the node's network namespace), retrying for up to
// 30 s while the sandbox's server starts, and returns the last body.
func proxyGet(t *testing.T, n *rig.Node, host, path string) string {
	t.Helper()
	var out []byte
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		out, err = exec.Command("nsenter", "--net=/run/netns/"+n.NS, "--", "curl", "-sS", "--max-time", "10",
			"-H", "Host: "+host, "http://127.0.0.1:7879"+path).CombinedOutput()
		if err == nil && strings.Contains(string(out), "hello from") || time.Now().After(deadline) {
			return string(out)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
