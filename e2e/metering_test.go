package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
)

// TestMeteringKill9LosesAtMostOneInterval is issue 12's crash proof on
// the real daemon, with a 1 s meter interval: the daemon is killed with
// SIGKILL while two sandboxes run; one sandbox's init is killed while no
// daemon watches. After the restart, the dead sandbox is billed what it
// ran up to the kill less at most one interval (never the downtime); the
// one that lived on is billed its whole run, the downtime included. The
// daemon's /metrics then serves the expected families.
func TestMeteringKill9LosesAtMostOneInterval(t *testing.T) {
	metricsAddr := freePort(t)
	d := newDaemon(t, "--meter-interval", "1s", "--metrics-listen", metricsAddr)
	ctx := ctxT(t)
	const interval = time.Second
	// A checkpoint a loaded machine runs late, or a slow start or stop:
	// a full interval more.
	const slack = interval

	t0 := time.Now()
	alive, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "alive", InstanceType: "micro"})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "dead", InstanceType: "micro"})
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	time.Sleep(3500 * time.Millisecond)
	tk := time.Now()
	d.kill9()
	killCgroup(t, cgroupFile(t, "pids", dead.ID, "cgroup.procs"))
	// The daemon is down longer than interval+slack, so the surviving
	// sandbox's bound below tells a billed downtime from a lost one.
	time.Sleep(3 * time.Second)
	d.start()
	if sb, err := d.c.GetSandbox(ctx, dead.ID); err != nil || sb.State != "stopped" {
		t.Fatalf("dead sandbox after restart: %+v %v", sb, err)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, err := d.c.StopSandbox(ctx, alive.ID); err != nil {
		t.Fatal(err)
	}
	ts := time.Now()

	rep, err := d.c.Usage(ctx, client.UsageQuery{By: "sandbox", Since: t0.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, l := range rep.Rows {
		got[l.SandboxName] = l.RunningSeconds
	}
	ranDead := tk.Sub(t1).Seconds() // at least this much, before the kill
	if b := got["dead"]; b < ranDead-(interval+slack).Seconds() || b > tk.Sub(t0).Seconds() {
		t.Errorf("dead sandbox billed %.3f s; it ran %.3f-%.3f s before the kill: want at most one interval (%s) less, and never the downtime",
			b, ranDead, tk.Sub(t0).Seconds(), interval)
	}
	if b, min := got["alive"], ts.Sub(t1).Seconds()-(interval+slack).Seconds(); b < min || b > ts.Sub(t0).Seconds() {
		t.Errorf("surviving sandbox billed %.3f s, want about %.3f s (its whole run, the downtime included)", b, ts.Sub(t1).Seconds())
	}
	t.Logf("billed: dead %.3f s (ran %.3f s before the kill), alive %.3f s (ran %.3f s); always-on %+v",
		got["dead"], ranDead, got["alive"], ts.Sub(t1).Seconds(), rep.AlwaysOn)

	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, want := range []string{
		`stead_sandboxes{state="stopped"} 2`,
		`stead_lifecycle_seconds_bucket{op="stop",`,
		`stead_api_requests_total{method="POST",route="/v1/sandboxes/{id}/stop",status="200"} 1`,
		`stead_api_requests_total{method="GET",route="/v1/usage",status="200"}`,
		`stead_meter_compute_seconds_total{instance_type="micro"}`,
		`stead_meter_memory_gib_seconds_total`,
		`stead_meter_checkpoints_total`,
		`stead_meter_open_intervals `,
		`stead_pool_fill_ratio`,
		`stead_pool_used_bytes`,
		`stead_push_bytes_total 0`,
		`stead_restore_seconds_count 0`,
		`stead_repository_bytes`,
		`stead_webhook_deliveries_total{outcome="delivered"} 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(text, alive.ID) || strings.Contains(text, "alive") {
		t.Errorf("/metrics names a sandbox")
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}
