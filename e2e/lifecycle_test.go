package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
)

func wantStatus(t *testing.T, err error, status int) {
	t.Helper()
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != status {
		t.Fatalf("want HTTP %d, got %v", status, err)
	}
}

func TestLifecycleTransitions(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "life", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != "stopped" {
		t.Fatalf("created with no_start: %s", sb.State)
	}
	_, err = d.c.PauseSandbox(ctx, "life")
	wantStatus(t, err, 409)
	_, err = d.c.ResumeSandbox(ctx, "life")
	wantStatus(t, err, 409)
	if sb, err = d.c.ResizeSandbox(ctx, "life", client.ResizeRequest{InstanceType: "medium"}); err != nil || sb.Limits.CPUs != 2 {
		t.Fatalf("resize: %+v %v", sb, err)
	}
	if sb, err = d.c.StartSandbox(ctx, "life"); err != nil || sb.State != "running" {
		t.Fatalf("start: %+v %v", sb, err)
	}
	_, err = d.c.ResizeSandbox(ctx, "life", client.ResizeRequest{InstanceType: "small"})
	wantStatus(t, err, 409)
	// pause → processes frozen; start on a paused sandbox resumes it.
	d.sh(ctx, sb.ID, "agent", "(while :; do date +%s%N > /workspace/tick; sleep 0.02; done) >/dev/null 2>&1 &")
	d.sh(ctx, sb.ID, "agent", "for i in $(seq 250); do [ -s /workspace/tick ] && exit 0; sleep 0.02; done; exit 1")
	if sb, err = d.c.PauseSandbox(ctx, "life"); err != nil || sb.State != "paused" {
		t.Fatalf("pause: %+v %v", sb, err)
	}
	t1 := readAll(t, d, sb.ID, "/workspace/tick")
	time.Sleep(200 * time.Millisecond)
	if t2 := readAll(t, d, sb.ID, "/workspace/tick"); t1 != t2 {
		t.Fatal("a paused sandbox kept running")
	}
	if sb, err = d.c.StartSandbox(ctx, "life"); err != nil || sb.State != "running" {
		t.Fatalf("start of paused: %+v %v", sb, err)
	}
	resumed := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !resumed; time.Sleep(50 * time.Millisecond) {
		resumed = readAll(t, d, sb.ID, "/workspace/tick") != t1
	}
	if !resumed {
		t.Fatal("resumed sandbox did not run")
	}
	// connect brings a stopped or paused sandbox back.
	for _, park := range []func(context.Context, string) (client.Sandbox, error){d.c.StopSandbox, d.c.PauseSandbox} {
		if _, err := park(ctx, "life"); err != nil {
			t.Fatal(err)
		}
		if sb, err = d.c.Connect(ctx, "life"); err != nil || sb.State != "running" {
			t.Fatalf("connect: %+v %v", sb, err)
		}
	}
	// Soft delete keeps the files and can be undone; purge cannot.
	if sb, err = d.c.DeleteSandbox(ctx, "life", false); err != nil || sb.State != "deleted" || sb.PurgeAt == nil {
		t.Fatalf("delete: %+v %v", sb, err)
	}
	_, err = d.c.StartSandbox(ctx, "life")
	wantStatus(t, err, 409)
	if list, _ := d.c.ListSandboxes(ctx, false); len(list) != 0 {
		t.Fatalf("deleted sandbox listed: %+v", list)
	}
	if sb, err = d.c.UndeleteSandbox(ctx, "life"); err != nil || sb.State != "stopped" {
		t.Fatalf("undelete: %+v %v", sb, err)
	}
	if sb, err = d.c.StartSandbox(ctx, "life"); err != nil {
		t.Fatal(err)
	}
	if s := d.sh(ctx, sb.ID, "agent", "test -e /workspace/tick && echo kept"); s != "kept\n" {
		t.Fatalf("files lost across delete/undelete: %q", s)
	}
	purged, err := d.c.DeleteSandbox(ctx, "life", true)
	if err != nil {
		t.Fatal(err)
	}
	if purged.State != "deleted" || purged.PurgeAt == nil || purged.DeletedAt == nil {
		t.Fatalf("the answer to a purge: state %s, purge_at %v: want deleted, purged now", purged.State, purged.PurgeAt)
	}
	_, err = d.c.GetSandbox(ctx, sb.ID)
	wantStatus(t, err, 404)
	// Bad input changes nothing.
	_, err = d.c.CreateSandbox(ctx, client.CreateSandboxRequest{InstanceType: "huge"})
	wantStatus(t, err, 400)
	_, err = d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "../etc"})
	wantStatus(t, err, 400)
	_, err = d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "nope"})
	wantStatus(t, err, 404)
	if list, _ := d.c.ListSandboxes(ctx, true); len(list) != 0 {
		t.Fatalf("failed creates left sandboxes: %+v", list)
	}
}

func TestAutoStopStopsIdleButNotBusy(t *testing.T) {
	d := newDaemon(t, "--policy-interval", "500ms")
	ctx := ctxT(t)
	// Work inside the sandbox counts as activity, not only API calls: the
	// busy one's service spins from its start on (a loop started by an exec
	// after the other creates could come after its timeout on a loaded
	// machine).
	busy, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "busy", IdleTimeout: "3s",
		Service: &client.Service{Command: []string{"sh", "-c", "while :; do :; done"}}})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "idle", IdleTimeout: "3s"})
	if err != nil {
		t.Fatal(err)
	}
	pausing, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "pausing", IdleTimeout: "3s", OnIdle: "pause"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		i, _ := d.c.GetSandbox(ctx, idle.ID)
		p, _ := d.c.GetSandbox(ctx, pausing.ID)
		if i.State == "stopped" && p.State == "paused" {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	i, _ := d.c.GetSandbox(ctx, idle.ID)
	if i.State != "stopped" || i.StopReason != "idle" {
		t.Fatalf("idle sandbox: state %s reason %q", i.State, i.StopReason)
	}
	if p, _ := d.c.GetSandbox(ctx, pausing.ID); p.State != "paused" {
		t.Fatalf("on_idle=pause sandbox: state %s", p.State)
	}
	time.Sleep(2 * time.Second) // well past the timeout for busy too
	if b, _ := d.c.GetSandbox(ctx, busy.ID); b.State != "running" {
		t.Fatalf("busy sandbox was stopped: %s (%s)", b.State, b.StopReason)
	}
}

func TestSupervisedServiceRestartsAndGetsStopHook(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	script := `echo "agent up"; n=0
if [ -f /workspace/crashed-once ]; then :; else touch /workspace/crashed-once; echo "crashing"; exit 3; fi
while read line; do
  if [ "$line" = "/checkpoint" ]; then echo "checkpointing" ; echo saved > /workspace/checkpoint; exit 0; fi
  echo "got $line"
done`
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Service: &client.Service{
		Command: []string{"sh", "-c", script}, Restart: "on-failure", StopLine: "/checkpoint", StopGrace: "5s",
	}})
	if err != nil {
		t.Fatal(err)
	}
	// First run crashes, the supervisor restarts it after its backoff.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if countLines(logText(t, d, sb.ID), "agent up") >= 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := countLines(logText(t, d, sb.ID), "agent up"); n < 2 {
		t.Fatalf("service not restarted after a crash; log:\n%s", logText(t, d, sb.ID))
	}
	// What `stead attach` types reaches the service's stdin.
	if err := d.c.ServiceInput(ctx, sb.ID, "ping\n"); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && countLines(logText(t, d, sb.ID), "got ping") == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	if countLines(logText(t, d, sb.ID), "got ping") != 1 {
		t.Fatalf("service input not delivered; log:\n%s", logText(t, d, sb.ID))
	}
	if _, err := d.c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	err = d.c.ServiceInput(ctx, sb.ID, "late\n")
	wantStatus(t, err, 409)
	log := logText(t, d, sb.ID) // readable while stopped
	if !strings.Contains(log, "checkpointing") || !strings.Contains(log, "crashing") {
		t.Fatalf("stop hook not delivered; log:\n%s", log)
	}
	if readAll(t, d, sb.ID, "/workspace/checkpoint") != "saved\n" {
		t.Fatal("checkpoint not written by the stop hook")
	}
	// It starts again on every start.
	if _, err := d.c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && countLines(logText(t, d, sb.ID), "agent up") < 3 {
		time.Sleep(100 * time.Millisecond)
	}
	if n := countLines(logText(t, d, sb.ID), "agent up"); n < 3 {
		t.Fatalf("service not started again on start; log:\n%s", logText(t, d, sb.ID))
	}
}

// countLines counts the lines that are exactly line.
func countLines(text, line string) int {
	n := 0
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			n++
		}
	}
	return n
}

func logText(t *testing.T, d *daemon, id string) string {
	t.Helper()
	rc, err := d.c.Logs(context.Background(), id, false)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

func TestExecStreamsTimesOutAndPTY(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	res, err := d.c.ExecStream(ctx, sb.ID, client.ExecRequest{Command: []string{"sh", "-c", "echo one; echo two >&2; exit 5"}, Env: map[string]string{"X": "y"}}, &out, &errb)
	if err != nil || res.ExitCode != 5 || out.String() != "one\n" || errb.String() != "two\n" {
		t.Fatalf("stream: %+v %v %q %q", res, err, out.String(), errb.String())
	}
	res, err = d.c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"sleep", "30"}, Timeout: "300ms"})
	if err != nil || !res.TimedOut {
		t.Fatalf("timeout: %+v %v", res, err)
	}
	res, err = d.c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"cat"}, Stdin: "from stdin", Cwd: "/workspace", User: "root"})
	if err != nil || string(res.Stdout) != "from stdin" {
		t.Fatalf("stdin: %+v %v", res, err)
	}
	p, err := d.c.PTY(ctx, sb.ID, client.PTYOptions{Command: []string{"sh"}, Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Write([]byte("stty size; tty; exit 3\n"))
	var term bytes.Buffer
	io.Copy(&term, p)
	if !strings.Contains(term.String(), "30 100") || !strings.Contains(term.String(), "/dev/pts/") {
		t.Fatalf("pty output %q", term.String())
	}
	if code, ok := p.ExitCode(); !ok || code != 3 {
		t.Fatalf("pty exit %d %v", code, ok)
	}
}

// TestAgentCheckpointingThroughItsSocketIsNotIdle is issue 10, item 10:
// an agent service that writes a checkpoint through /run/stead/api.sock
// every second and otherwise sleeps (next to no cpu) is still running after
// three times its 20 s idle timeout; the same sandbox with an agent that
// only sleeps is stopped as idle.
func TestAgentCheckpointingThroughItsSocketIsNotIdle(t *testing.T) {
	d := newDaemon(t, "--policy-interval", "1s")
	ctx := ctxT(t)
	working := `i=0; while :; do i=$((i+1))
  curl -s -o /dev/null --unix-socket /run/stead/api.sock -H "Authorization: Bearer $STEAD_TOKEN" \
    -X PUT -H 'Content-Type: application/json' --data "{\"step\": $i}" \
    http://stead/v1/sandboxes/$STEAD_SANDBOX/checkpoints/progress
  sleep 1; done`
	busy, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "working", IdleTimeout: "20s",
		Service: &client.Service{Command: []string{"sh", "-c", working}}})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "sleeping", IdleTimeout: "20s",
		Service: &client.Service{Command: []string{"sh", "-c", "while :; do sleep 1; done"}}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for time.Since(start) < 60*time.Second {
		if b, _ := d.c.GetSandbox(ctx, busy.ID); b.State != "running" {
			t.Fatalf("after %s the checkpointing agent's sandbox is %s (%s)", time.Since(start).Round(time.Second), b.State, b.StopReason)
		}
		time.Sleep(time.Second)
	}
	i, _ := d.c.GetSandbox(ctx, idle.ID)
	if i.State != "stopped" || i.StopReason != "idle" {
		t.Fatalf("sleeping agent's sandbox after 60 s: %s %q", i.State, i.StopReason)
	}
	if i.StoppedAt == nil || i.StoppedAt.Sub(start) > 40*time.Second {
		t.Fatalf("sleeping agent's sandbox stopped at %v, %s after it was made", i.StoppedAt, i.StoppedAt.Sub(start))
	}
	cp, err := d.c.GetCheckpoint(ctx, busy.ID, "", "progress", 0)
	if err != nil || cp.Version < 30 {
		t.Fatalf("the agent's checkpoints: version %d, %v", cp.Version, err)
	}
}
