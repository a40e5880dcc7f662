package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
)

func TestSandboxesCannotSeeEachOther(t *testing.T) {
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
	d.sh(ctx, a.ID, "agent", "echo secret-a > /workspace/secret; sleep 300 >/dev/null 2>&1 &")
	// b sees neither a's file nor a's processes, nor the host's.
	out := d.sh(ctx, b.ID, "root", "cat /workspace/secret 2>&1 || true; ls /proc | grep -c '^[0-9]'; ps -e -o comm= 2>/dev/null | grep -c sleep || true; find / -xdev -name secret 2>/dev/null | grep -c . || true")
	lines := strings.Fields(out)
	if strings.Contains(out, "secret-a") {
		t.Fatalf("beta read alpha's file: %q", out)
	}
	if n, _ := strconv.Atoi(lines[len(lines)-3]); n > 4 {
		t.Fatalf("beta sees %d processes, want only its own (init, sh, ls, grep): %q", n, out)
	}
	if lines[len(lines)-2] != "0" || lines[len(lines)-1] != "0" {
		t.Fatalf("beta sees alpha's sleep or file: %q", out)
	}
	// Host data stays out of reach: the data dir is not visible inside.
	res, _ := d.c.Exec(ctx, b.ID, client.ExecRequest{Command: []string{"ls", d.dataDir}, User: "root"})
	if res.ExitCode == 0 {
		t.Fatalf("sandbox can list the host data dir: %s", res.Stdout)
	}
	// A mount, an unshare into a user namespace and a ptrace are refused.
	for _, cmd := range []string{"mount -t tmpfs x /mnt", "unshare -U true", "unshare -r true"} {
		res, _ := d.c.Exec(ctx, b.ID, client.ExecRequest{Command: []string{"sh", "-c", cmd}, User: "root"})
		if res.ExitCode == 0 {
			t.Fatalf("%q succeeded inside a sandbox", cmd)
		}
	}
}

func TestMemoryExhaustionIsKilledInsideAndDaemonLives(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{InstanceType: "micro"}) // 512 MiB
	if err != nil {
		t.Fatal(err)
	}
	// A shell string that doubles forever grows until the OOM killer ends it.
	res, err := d.c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"sh", "-c", "a=xxxxxxxxxxxxxxxx; while :; do a=$a$a; done"}, Timeout: "60s"})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || res.TimedOut {
		t.Fatalf("memory hog was not killed: %+v", res)
	}
	if _, err := d.c.Info(ctx); err != nil {
		t.Fatalf("daemon died: %v", err)
	}
	if got, _ := d.c.GetSandbox(ctx, sb.ID); got.State != "running" {
		t.Fatalf("sandbox state %s after OOM, want running", got.State)
	}
	d.sh(ctx, sb.ID, "agent", "echo still alive")
}

func TestForkBombIsContainedByPids(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{InstanceType: "micro"}) // 256 pids
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.c.Exec(ctx, sb.ID, client.ExecRequest{
		Command: []string{"sh", "-c", "n=0; for i in $(seq 1000); do sleep 30 & n=$((n+1)); done 2>/dev/null; echo $n"},
		Timeout: "60s",
	})
	if err != nil {
		t.Fatal(err)
	}
	cur, _ := os.ReadFile(cgroupFile(t, "pids", sb.ID, "pids.current"))
	n, _ := strconv.Atoi(strings.TrimSpace(string(cur)))
	if n > 256 {
		t.Fatalf("pids.current %d exceeds the limit 256", n)
	}
	if !strings.Contains(string(res.Stderr), "fork") && !strings.Contains(string(res.Stderr), "Resource temporarily unavailable") && n < 200 {
		t.Fatalf("fork bomb was not limited: pids %d, stderr %q", n, res.Stderr)
	}
	if _, err := d.c.Info(ctx); err != nil {
		t.Fatalf("daemon died: %v", err)
	}
	// The sandbox can be stopped cleanly even when full.
	if _, err := d.c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}

func TestCPUQuotaHolds(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{InstanceType: "micro"}) // 0.5 cpu
	if err != nil {
		t.Fatal(err)
	}
	usage := func() time.Duration {
		b, err := os.ReadFile(cgroupFile(t, "cpuacct", sb.ID, "cpuacct.usage"))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Duration(n)
	}
	// Two busy loops would use two cores without the quota.
	d.sh(ctx, sb.ID, "agent", "for i in 1 2; do (while :; do :; done) >/dev/null 2>&1 & done")
	time.Sleep(500 * time.Millisecond)
	u0, w0 := usage(), time.Now()
	time.Sleep(3 * time.Second)
	u1, w1 := usage(), time.Now()
	share := float64(u1-u0) / float64(w1.Sub(w0))
	t.Logf("cpu share with a 0.5 quota and two busy loops: %.2f", share)
	if share > 0.6 {
		t.Fatalf("cpu share %.2f exceeds the 0.5 quota", share)
	}
	if share < 0.2 {
		t.Fatalf("cpu share %.2f: the busy loops did not run", share)
	}
}

func TestFilesAPIStaysInsideRoot(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	canaryDir := t.TempDir()
	canary := filepath.Join(canaryDir, "canary")
	os.WriteFile(canary, []byte("host secret"), 0o644)
	// The agent plants hostile symlinks.
	d.sh(ctx, sb.ID, "agent", "cd /workspace && ln -s / rootlink && ln -s "+canary+" canary && ln -s ../../../../../.. up && ln -s "+canaryDir+" canarydir")
	for _, p := range []string{"/workspace/canary", "/workspace/up" + canary, "/../../../.." + canary, "/workspace/rootlink" + canary, "/workspace/canarydir/canary"} {
		if rc, _, err := d.c.ReadFile(ctx, sb.ID, p); err == nil {
			rc.Close()
			t.Fatalf("read %s succeeded: it must resolve inside the root, where no canary is", p)
		}
		if _, err := d.c.WriteFile(ctx, sb.ID, p, 0o644, strings.NewReader("overwritten")); err == nil {
			// A write through a symlink may only land inside the root.
			if b, _ := os.ReadFile(canary); string(b) != "host secret" {
				t.Fatalf("write through %s reached the host", p)
			}
		}
	}
	if b, _ := os.ReadFile(canary); string(b) != "host secret" {
		t.Fatalf("host canary changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(canaryDir, "x")); err == nil {
		t.Fatal("host dir written")
	}
	// A path climbing above the root is refused with a clear 400, and a
	// missing file is a clean 404.
	_, _, err = d.c.ReadFile(ctx, sb.ID, "/../../etc/passwd")
	wantStatus(t, err, 400)
	_, _, err = d.c.ReadFile(ctx, sb.ID, "/etc/definitely-missing")
	wantStatus(t, err, 404)
	if _, err := d.c.GetSandbox(ctx, "sb-nonexistent"); !client.IsNotFound(err) {
		t.Fatalf("unknown id: want 404, got %v", err)
	}
	if _, err := d.c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err = d.c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"true"}})
	wantStatus(t, err, 409)
}

func TestDiskQuotaHoldsInsideSandbox(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.ResizeSandbox(ctx, sb.ID, client.ResizeRequest{DiskBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	res, err := d.c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"sh", "-c", "dd if=/dev/urandom of=/workspace/big bs=1M count=200 conv=fsync"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "quota") && !strings.Contains(string(res.Stderr), "space") {
		t.Fatalf("a 200 MiB write fit in a 64 MiB quota: exit %d stderr %q", res.ExitCode, res.Stderr)
	}
	// The sandbox and the daemon live on; freeing space makes writes work again.
	d.sh(ctx, sb.ID, "agent", "rm /workspace/big && echo ok > /workspace/small")
}

// TestAWaitingShellHasDroppedWhatNoSandboxKeeps: a shell (an init spawned
// ahead) drops from its bounding set, on every thread, what no sandbox
// keeps while it waits for its claim, and keeps its effective capabilities
// for the claim's setup; the claim then has only the last steps of the
// drop left (each is a system call on every thread of init).
func TestAWaitingShellHasDroppedWhatNoSandboxKeeps(t *testing.T) {
	newDaemon(t) // its shells are spawned at start
	want := "CapBnd: 00000000a80425fb"
	// A shell is seen from its exec on, before it narrows its set: the
	// check passes once every shell seen has narrowed, and fails if one
	// has not within the deadline.
	deadline := time.Now().Add(10 * time.Second)
	var bad string
	for {
		var statuses []string
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err != nil || !strings.Contains(string(b), "\x00--shell\x00--bounding=") {
				continue
			}
			// Waiting, not claimed: a claim renames the shell's cgroups
			// to its sandbox's (a running sandbox's init keeps the
			// arguments it was spawned with).
			if cg, err := os.ReadFile(filepath.Join(filepath.Dir(p), "cgroup")); err != nil || !strings.Contains(string(cg), "/_shell-") {
				continue
			}
			tasks, _ := filepath.Glob(filepath.Join(filepath.Dir(p), "task", "*", "status"))
			for _, st := range tasks {
				if b, err := os.ReadFile(st); err == nil {
					statuses = append(statuses, string(b))
				}
			}
		}
		bad = ""
		if len(statuses) == 0 {
			bad = "no waiting shell found"
		}
		for _, st := range statuses {
			var bnd, eff string
			for _, l := range strings.Split(st, "\n") {
				if strings.HasPrefix(l, "CapBnd:") {
					bnd = strings.Join(strings.Fields(l), " ")
				}
				if strings.HasPrefix(l, "CapEff:") {
					eff = strings.Join(strings.Fields(l), " ")
				}
			}
			if bnd != want {
				bad = fmt.Sprintf("a waiting shell's thread has %q, want %q", bnd, want)
			}
			if eff == "CapEff: 00000000a80425fb" || eff == "" {
				t.Fatalf("a waiting shell's thread has %q: it needs its capabilities for the claim's setup", eff)
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(bad)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEveryInitThreadHoldsOnlyTheDefaultCapabilities: stead-init sets
// its sandbox up itself and then drops its capabilities on every thread
// at once; any thread may fork the next process, so each must hold
// Docker's default set, nothing inheritable or ambient, and no_new_privs.
func TestEveryInitThreadHoldsOnlyTheDefaultCapabilities(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "caps"})
	if err != nil {
		t.Fatal(err)
	}
	out := d.sh(ctx, sb.ID, "root", `for s in /proc/1/task/*/status; do grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' $s | tr '\n\t' '  '; echo; done`)
	threads := strings.Split(strings.TrimSpace(out), "\n")
	if len(threads) < 4 { // init keeps three spare threads beside the runtime's own
		t.Fatalf("init's threads not seen: %q", out)
	}
	want := "CapInh: 0000000000000000 CapPrm: 00000000a80425fb CapEff: 00000000a80425fb CapBnd: 00000000a80425fb CapAmb: 0000000000000000 NoNewPrivs: 1"
	for _, th := range threads {
		if strings.Join(strings.Fields(th), " ") != want {
			t.Fatalf("a thread of init has other capabilities:\n%s\nwant %s", out, want)
		}
	}
}
