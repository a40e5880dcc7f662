package e2e

import (
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
)

// TestAgentReachesOnlyItsOwnStateThroughTheInSandboxSocket: inside a
// sandbox, /run/stead/api.sock with $STEAD_TOKEN reaches the sandbox's own
// checkpoints and nothing else (no lifecycle, no other sandbox), and keeps
// working after a kill -9 and restart of the daemon.
func TestAgentReachesOnlyItsOwnStateThroughTheInSandboxSocket(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	a, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "alpha"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "beta"})
	if err != nil {
		t.Fatal(err)
	}
	curl := `curl -s -o /dev/null -w '%{http_code}' --unix-socket /run/stead/api.sock -H "Authorization: Bearer $STEAD_TOKEN" `
	put := curl + `-X PUT -H 'Content-Type: application/json' --data '{"step": 3}' http://stead/v1/sandboxes/$STEAD_SANDBOX/checkpoints/plan`
	if got := d.sh(ctx, a.ID, "agent", put); got != "200" {
		t.Fatalf("agent's checkpoint put through the socket: HTTP %s", got)
	}
	if got := d.sh(ctx, a.ID, "agent", curl+`http://stead/v1/sandboxes/$STEAD_SANDBOX/orient`); got != "200" {
		t.Fatalf("agent's orient through the socket: HTTP %s", got)
	}
	cp, err := d.c.GetCheckpoint(ctx, a.ID, "", "plan", 0)
	if err != nil || strings.ReplaceAll(string(cp.Body), " ", "") != `{"step":3}` || cp.Principal != "sandbox:"+a.ID {
		t.Fatalf("checkpoint written by the agent: %+v %v", cp, err)
	}
	for name, req := range map[string]string{
		"lifecycle":         curl + `-X POST http://stead/v1/sandboxes/$STEAD_SANDBOX/stop`,
		"exec":              curl + `-X POST -H 'Content-Type: application/json' --data '{"command":["id"]}' http://stead/v1/sandboxes/$STEAD_SANDBOX/exec`,
		"list":              curl + `http://stead/v1/sandboxes`,
		"other sandbox":     curl + `http://stead/v1/sandboxes/` + b.ID + `/checkpoints`,
		"by name":           curl + `http://stead/v1/sandboxes/alpha/checkpoints`,
		"no token":          `curl -s -o /dev/null -w '%{http_code}' --unix-socket /run/stead/api.sock http://stead/v1/sandboxes/$STEAD_SANDBOX/checkpoints`,
		"other's token":     `curl -s -o /dev/null -w '%{http_code}' --unix-socket /run/stead/api.sock -H "Authorization: Bearer ` + tokenOf(t, d, b.ID) + `" http://stead/v1/sandboxes/$STEAD_SANDBOX/checkpoints`,
		"replace the token": `echo x > /run/stead/token 2>/dev/null && echo 200 || echo 403`,
	} {
		if got := d.sh(ctx, a.ID, "agent", req); got == "200" || got == "204" {
			t.Fatalf("%s: HTTP %s from inside the sandbox", name, got)
		}
	}
	if got, _ := d.c.GetSandbox(ctx, a.ID); got.State != "running" {
		t.Fatalf("the agent stopped its own sandbox: %s", got.State)
	}
	d.kill9()
	d.start()
	get := curl + `http://stead/v1/sandboxes/$STEAD_SANDBOX/checkpoints/plan`
	if got := d.sh(ctx, a.ID, "agent", get); got != "200" {
		t.Fatalf("socket after a daemon restart: HTTP %s", got)
	}
}

// tokenOf reads a sandbox's token from inside it.
func tokenOf(t *testing.T, d *daemon, id string) string {
	return strings.TrimSpace(d.sh(ctxT(t), id, "agent", "cat /run/stead/token"))
}
