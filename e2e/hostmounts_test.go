package e2e

import (
	"os"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
)

// TestRunningSandboxesAddNoMountsToTheHost: the daemon's mount table does
// not grow with the running sandboxes (every new mount namespace copies
// it, so a mount per sandbox made each create slower as sandboxes ran),
// and every agent still reaches its own socket.
func TestRunningSandboxesAddNoMountsToTheHost(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	mounts := func() int {
		t.Helper()
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), " "+d.runDir+"/")
	}
	first, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	base := mounts()
	ids := []string{first.ID}
	for range 4 {
		sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	if got := mounts(); got != base {
		t.Fatalf("host mounts under the run dir: %d with one sandbox, %d with five: a mount per running sandbox", base, got)
	}
	for _, id := range ids {
		got := d.sh(ctx, id, "agent", `curl -s -o /dev/null -w '%{http_code}' --unix-socket /run/stead/api.sock -H "Authorization: Bearer $STEAD_TOKEN" http://stead/v1/sandboxes/$STEAD_SANDBOX/orient`)
		if got != "200" {
			t.Fatalf("sandbox %s: orient through its socket: HTTP %s", id, got)
		}
	}
}
