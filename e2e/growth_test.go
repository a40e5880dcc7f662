package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
)

// TestDiskWarningsReachStreamWebhookOrientAndDu: a sandbox filled to 81%
// and then 96% of a small quota: both limit warnings arrive once each on
// the SSE stream and at a signed webhook on 127.0.0.1, `stead list` and
// `stead info` show the warning, orient tells the agent with the directory
// that did it, and `stead du` names the file.
func TestDiskWarningsReachStreamWebhookOrientAndDu(t *testing.T) {
	rcv := &hookReceiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	d := newDaemon(t, "--webhook-allow-loopback", "--policy-interval", "300ms")
	ctx := ctxT(t)

	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var smu sync.Mutex
	var streamed []client.DaemonEvent
	go func() {
		for e, err := range d.c.StreamDaemonEvents(sctx, client.EventQuery{Types: []string{"limit."}}) {
			if err != nil {
				return
			}
			smu.Lock()
			streamed = append(streamed, e)
			smu.Unlock()
		}
	}()
	code, out, errOut := d.cli("webhook", "add", srv.URL+"/hook", "--type", "limit.", "--json")
	if code != 0 {
		t.Fatalf("webhook add: %d %s %s", code, out, errOut)
	}
	var hook client.Webhook
	if err := json.Unmarshal([]byte(out), &hook); err != nil {
		t.Fatal(err)
	}
	rcv.secret.Store(hook.Secret)

	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "filling", DiskBytes: 256 << 20, InstanceType: "micro"})
	if err != nil {
		t.Fatal(err)
	}
	fill := func(share float64) {
		t.Helper()
		u, err := d.c.DiskUsage(ctx, sb.ID, "/", 1)
		if err != nil {
			t.Fatal(err)
		}
		chunks := (int64(share*float64(256<<20))-u.UsedBytes)>>16 + 1
		d.sh(ctx, sb.ID, "", fmt.Sprintf("mkdir -p /workspace/datasets && dd if=/dev/urandom of=/workspace/datasets/crawl.bin bs=64K oflag=append conv=notrunc count=%d 2>/dev/null && sync", chunks))
	}
	levels := func() []string {
		smu.Lock()
		defer smu.Unlock()
		var l []string
		for _, e := range streamed {
			l = append(l, e.Data["resource"]+"@"+e.Data["level"])
		}
		return l
	}
	fill(0.81)
	waitUntil(t, "the 80% warning on the stream", func() bool { return len(levels()) >= 1 })
	fill(0.96)
	waitUntil(t, "the 95% warning on the stream", func() bool { return len(levels()) >= 2 })
	waitUntil(t, "both warnings at the webhook", func() bool { rcv.mu.Lock(); defer rcv.mu.Unlock(); return len(rcv.ids) >= 2 })
	// Several more checks run: nothing is repeated.
	d.sh(ctx, sb.ID, "", "sleep 1.5")
	if l := levels(); strings.Join(l, " ") != "disk@80 disk@95" {
		t.Fatalf("streamed warnings %v, want disk@80 then disk@95, once each", l)
	}
	rcv.mu.Lock()
	hooked, bad := dedupe(rcv.ids), rcv.bad
	rcv.mu.Unlock()
	if len(hooked) != 2 || len(bad) != 0 {
		t.Fatalf("webhook got %v (bad signatures %v), want the two warnings", hooked, bad)
	}

	if code, out, _ := d.cli("list"); code != 0 || !strings.Contains(out, "WARNINGS") || !strings.Contains(out, "disk 9") {
		t.Fatalf("stead list does not show the warning: %s", out)
	}
	if code, out, _ := d.cli("info", "filling"); code != 0 || !strings.Contains(out, "of its 256 MiB disk quota") {
		t.Fatalf("stead info does not show the warning: %s", out)
	}
	or, err := d.c.Orient(ctx, sb.ID, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(or.Text, "of its 256 MiB disk quota") || !strings.Contains(or.Text, "the largest directories are /workspace/datasets") {
		t.Fatalf("orient does not tell the agent:\n%s", or.Text)
	}
	code, out, errOut = d.cli("du", "filling", "/workspace")
	if code != 0 || !strings.Contains(out, "/workspace/datasets/crawl.bin") || !strings.Contains(out, "quota:") {
		t.Fatalf("stead du: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := d.cli("du", "filling", "/no/such/dir"); code == 0 || !strings.Contains(errOut, "/no/such/dir: no such file or directory (HTTP 404)") {
		t.Fatalf("du of a missing path: %d %s", code, errOut)
	}
}

// TestOversizedStateGets413NamingTheLimitAndChangesNothing: a checkpoint
// document, a key-value entry and a task over their size limits are
// refused with 413 and a message naming the limit; what was stored
// before stays as it was.
func TestOversizedStateGets413NamingTheLimitAndChangesNothing(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "stateful", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.PutCheckpoint(ctx, sb.ID, "plan", []byte(`{"step":1}`), client.PutCheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	huge := []byte(`{"notes":"` + strings.Repeat("x", 2<<20) + `"}`)
	if _, err := d.c.PutCheckpoint(ctx, sb.ID, "plan", huge, client.PutCheckpointOptions{}); client.StatusCode(err) != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 2 MiB checkpoint: %v, want 413", err)
	}
	cp, err := d.c.GetCheckpoint(ctx, sb.ID, "", "plan", 0)
	if err != nil || cp.Version != 1 || !strings.Contains(string(cp.Body), `"step":1`) {
		t.Fatalf("the checkpoint after the refused put: %+v %v", cp, err)
	}
	big := []byte(`"` + strings.Repeat("y", 300<<10) + `"`) // over 256 KiB, under the 1 MiB body limit
	_, err = d.c.PutKV(ctx, sb.ID, "history", big, nil)
	if client.StatusCode(err) != http.StatusRequestEntityTooLarge || !strings.Contains(err.Error(), "over the limit of 262144 bytes") {
		t.Fatalf("a 300 KiB value: %v, want 413 naming the limit", err)
	}
	if _, err := d.c.GetKV(ctx, sb.ID, "history"); client.StatusCode(err) != http.StatusNotFound {
		t.Fatalf("the refused value was stored: %v", err)
	}
	_, err = d.c.CreateTask(ctx, sb.ID, client.CreateTaskRequest{ID: "t1", Payload: json.RawMessage(big)})
	if client.StatusCode(err) != http.StatusRequestEntityTooLarge || !strings.Contains(err.Error(), "over the limit of 262144 bytes") {
		t.Fatalf("a 300 KiB task: %v, want 413 naming the limit", err)
	}
}
