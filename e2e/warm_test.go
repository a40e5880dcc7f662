package e2e

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/network/nettest"
)

// waitLog waits until the daemon's log holds line n times.
func (d *daemon) waitLog(line string, n int) {
	d.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); strings.Count(d.logText(), line) < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			d.t.Fatalf("the daemon did not log %q %d times", line, n)
		}
	}
}

// sandboxDatasets lists the sandbox datasets in d's pool.
func (d *daemon) sandboxDatasets() []string {
	ents, _ := os.ReadDir(filepath.Join(d.dataDir, "pool", "sandboxes"))
	var ids []string
	for _, e := range ents {
		ids = append(ids, e.Name())
	}
	return ids
}

// TestWarmPoolThroughTheCLI: with `serve --warm host=2`, `stead create`
// takes a started sandbox that gets the create's name, environment, labels
// and network policy; the pool is invisible to list and refills; a killed
// daemon's warm sandboxes are removed by the next one.
func TestWarmPoolThroughTheCLI(t *testing.T) {
	inet := nettest.NewInternet(t)
	inet.SetZone(map[string][]netip.Addr{"example.test": {inet.Web}})
	d, _ := netDaemon(t, inet, "--warm", "host=2")
	ctx := ctxT(t)
	d.waitLog("warm sandbox ready", 2)
	if code, out, errOut := d.cli("list"); code != 0 || strings.Contains(out, "sb-") {
		t.Fatalf("list with only warm sandboxes: %d %q %q", code, out, errOut)
	}
	code, out, errOut := d.cli("create", "quick", "-e", "GREETING=hello", "--label", "team=a", "--no-internet")
	if code != 0 {
		t.Fatalf("create: %d %q", code, errOut)
	}
	id := strings.TrimSpace(out)
	if !strings.Contains(d.logText(), `msg="sandbox created" sandbox=`+id+" tenant=default warm=true") {
		t.Fatalf("the create did not come from the warm pool; log:\n%s", d.logText())
	}
	if code, out, _ := d.cli("exec", "quick", "--", "sh", "-c", "echo $GREETING; hostname"); code != 0 || !strings.HasPrefix(out, "hello\n") {
		t.Fatalf("exec: %d %q", code, out)
	}
	if code, out, _ := d.cli("list"); code != 0 || !strings.Contains(out, "quick") || strings.Count(out, "\n") != 2 {
		t.Fatalf("list after the take: %q", out)
	}
	d.mustNotFetch(ctx, id, "http://example.test/")

	// The pool refills; a plain create from it has the internet.
	d.waitLog("warm sandbox ready", 3)
	code, out, _ = d.cli("create")
	if code != 0 {
		t.Fatalf("second create: %d", code)
	}
	open := strings.TrimSpace(out)
	if !strings.Contains(d.logText(), `msg="sandbox created" sandbox=`+open+" tenant=default warm=true") {
		t.Fatal("the second create did not come from the warm pool")
	}
	d.mustFetch(ctx, open, "http://example.test/", "host=example.test")
	d.waitLog("warm sandbox ready", 4)

	// A killed daemon leaves two warm sandboxes without records: the next
	// start removes them and shows none.
	before := d.sandboxDatasets()
	if len(before) != 4 {
		t.Fatalf("datasets before the kill: %v", before)
	}
	d.kill9()
	d.start()
	d.waitLog("removing a warm sandbox of an earlier run", 2)
	d.waitLog("warm sandbox ready", 6)
	after := d.sandboxDatasets()
	for _, ds := range before {
		if ds != id && ds != open && slices.Contains(after, ds) {
			t.Fatalf("warm sandbox %s of the killed daemon is still there: %v", ds, after)
		}
	}
	if len(after) != 4 || !slices.Contains(after, id) || !slices.Contains(after, open) {
		t.Fatalf("datasets after the restart: %v", after)
	}
	if code, out, _ := d.cli("list"); code != 0 || strings.Count(out, "\n") != 3 {
		t.Fatalf("list after the restart: %q", out)
	}
	if code, out, _ := d.cli("exec", "quick", "--", "sh", "-c", "echo $GREETING"); code != 0 || out != "hello\n" {
		t.Fatalf("exec after the restart: %d %q", code, out)
	}
}
