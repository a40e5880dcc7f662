package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
)

// TestMicroSandboxSeesItsSizeAcrossDaemonKill9 is what a build tool inside
// a micro sandbox sees (nproc, /proc/meminfo, /proc/cpuinfo), before and
// after a kill -9 and restart of the daemon.
func TestMicroSandboxSeesItsSizeAcrossDaemonKill9(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{InstanceType: "micro"})
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		out := d.sh(ctx, sb.ID, "agent", "nproc; grep ^MemTotal: /proc/meminfo; grep -c ^processor /proc/cpuinfo")
		if got := strings.Fields(out); strings.Join(got, " ") != "1 MemTotal: 524288 kB 1" {
			t.Fatalf("%s, a micro sandbox sees %q; want nproc 1, MemTotal 524288 kB, 1 processor (is lxcfs installed?)", when, out)
		}
	}
	check("after create")
	d.kill9()
	time.Sleep(300 * time.Millisecond)
	d.start()
	check("after a kill -9 and restart of the daemon")
}
