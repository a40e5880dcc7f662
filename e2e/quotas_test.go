package e2e

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
)

// TestTenantQuotasRefuseGrowthThroughTheCLI is the quota issue on a real
// daemon, through the real CLI: an admin sets tenant acme's quotas; its
// own key's creates, starts and volume creates that would exceed running
// sandboxes or disk are refused (exit non-zero, HTTP 429) with a message
// naming the quota, the limit and the usage, and change nothing; the
// tenant reads its quotas with its usage (stead quota), every refusal is a
// quota.exceeded event, and another tenant is not limited by acme's
// quotas.
func TestTenantQuotasRefuseGrowthThroughTheCLI(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	mustCLI := func(args ...string) string {
		t.Helper()
		code, out, errOut := d.cli(args...)
		if code != 0 {
			t.Fatalf("stead %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	mustCLI("tenant", "create", "acme")
	secret := strings.TrimSpace(mustCLI("key", "create", "bot", "--tenant", "acme", "--role", "tenant-user"))
	acme := keyClient(t, d, secret)
	out := mustCLI("tenant", "quota", "acme", "--running", "1", "--disk", "15GiB")
	if !regexp.MustCompile(`running_sandboxes +1 +0\n`).MatchString(out) || !regexp.MustCompile(`disk_bytes +15 GiB +0 B\n`).MatchString(out) {
		t.Fatalf("tenant quota set printed:\n%s", out)
	}
	asAcme := func(args ...string) (int, string, string) {
		t.Helper()
		return d.cli(append([]string{"--api-key", secret}, args...)...)
	}
	refused := func(what string, want string, args ...string) {
		t.Helper()
		code, _, errOut := asAcme(args...)
		if code != 6 || !strings.Contains(errOut, want) || !strings.Contains(errOut, "HTTP 429") {
			t.Fatalf("%s: exit %d, stderr %q; want exit 6 and a 429 saying %q", what, code, errOut, want)
		}
	}
	if code, _, errOut := asAcme("create", "a"); code != 0 { // small: 10 GiB of disk, running
		t.Fatalf("create a: %d %s", code, errOut)
	}
	refused("a second running sandbox", "quota running_sandboxes: limit 1, in use 1, requested 1", "create", "b")
	refused("a second small sandbox's disk", "quota disk_bytes: limit 16106127360 (15 GiB), in use 10737418240 (10 GiB), requested 10737418240 (10 GiB)",
		"create", "b", "--no-start")
	if code, _, errOut := asAcme("create", "b", "--no-start", "--type", "micro"); code != 0 { // 5 GiB: exactly the limit
		t.Fatalf("create b: %d %s", code, errOut)
	}
	refused("a start beside a running one", "quota running_sandboxes: limit 1, in use 1, requested 1", "start", "b")
	refused("a volume past the disk", "quota disk_bytes: limit 16106127360 (15 GiB), in use 16106127360 (15 GiB), requested 1073741824 (1 GiB)",
		"volume", "create", "v", "--size", "1GiB")

	// Nothing a refusal touched has changed.
	list, err := acme.ListSandboxes(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, sb := range list {
		states[sb.Name] = sb.State
	}
	if len(states) != 2 || states["a"] != "running" || states["b"] != "stopped" {
		t.Fatalf("after the refusals: %v", states)
	}
	if vols, err := acme.ListVolumes(ctx, true); err != nil || len(vols) != 0 {
		t.Fatalf("a refused volume create left %+v %v", vols, err)
	}

	// The tenant sees its quotas with its usage.
	code, out, errOut := asAcme("quota")
	if code != 0 || !strings.Contains(out, "tenant acme") || !regexp.MustCompile(`running_sandboxes +1 +1\n`).MatchString(out) ||
		!regexp.MustCompile(`disk_bytes +15 GiB +15 GiB\n`).MatchString(out) {
		t.Fatalf("stead quota: %d %s\n%s", code, errOut, out)
	}
	q, err := acme.Quota(ctx)
	if err != nil || q.Limits.RunningSandboxes != 1 || q.Usage.RunningSandboxes != 1 || q.Usage.DiskBytes != 15<<30 || q.Usage.CPUs != 1 {
		t.Fatalf("GET /v1/quota: %+v %v", q, err)
	}
	if _, err := acme.SetTenantQuotas(ctx, "acme", client.SetQuotasRequest{}); client.StatusCode(err) != 403 {
		t.Fatalf("a tenant key sets its own quotas: %v", err)
	}

	// Each refusal is a quota.exceeded event of the tenant.
	evs, err := acme.ListDaemonEvents(ctx, client.EventQuery{Types: []string{"quota."}, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var quotas []string
	for _, e := range evs.Events {
		if e.Tenant != "acme" || e.Data["limit"] == "" || e.Data["usage"] == "" || e.Data["requested"] == "" {
			t.Fatalf("event %+v", e)
		}
		quotas = append(quotas, e.Data["quota"])
	}
	if strings.Join(quotas, ",") != "running_sandboxes,disk_bytes,running_sandboxes,disk_bytes" {
		t.Fatalf("quota events %v", quotas)
	}

	// Freeing room lets the start through; lifting the disk limit lets the
	// volume in; the default tenant was never limited.
	mustCLI("--tenant", "acme", "stop", "a")
	if code, _, errOut := asAcme("start", "b"); code != 0 {
		t.Fatalf("start b after a stop: %d %s", code, errOut)
	}
	mustCLI("tenant", "quota", "acme", "--disk", "none")
	if code, _, errOut := asAcme("volume", "create", "v", "--size", "1GiB"); code != 0 {
		t.Fatalf("volume create without a disk limit: %d %s", code, errOut)
	}
	mustCLI("create", "free-1")
	mustCLI("create", "free-2")
}
