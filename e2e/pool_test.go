package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
)

// TestServePoolFlagsBoundPromisesAndInfoShowsTheFill runs the daemon on a
// 2 GiB pool with a 256 MiB reserve and no over-commit: `stead info` (API
// and CLI) shows the pool's size, fill and promises; a sandbox that does
// not fit, or would over-commit, is refused with a clear 4xx; one sandbox
// filling its disk gets EDQUOT while another still writes; the daemon
// still stops and starts them.
func TestServePoolFlagsBoundPromisesAndInfoShowsTheFill(t *testing.T) {
	d := newDaemon(t, "--pool-size", "2", "--pool-reserve", "256MiB", "--pool-overcommit", "1")
	ctx := ctxT(t)
	info, err := d.c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := info.PoolCapacity
	if c == nil || c.SizeBytes != 2<<30 || c.ReserveBytes != 256<<20 || c.UsableBytes != 1792<<20 || c.Overcommit != 1 || !c.Enforced || c.CommitLimitBytes != 1792<<20 {
		t.Fatalf("pool capacity: %+v", c)
	}
	_, err = d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "default-type"})
	wantStatus(t, err, 400)
	if !strings.Contains(err.Error(), "larger than the storage pool: 1.8 GiB usable") {
		t.Fatalf("create of a 10 GiB sandbox in a 2 GiB pool: %v", err)
	}
	a, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "a", DiskBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "b", DiskBytes: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.c.CreateVolume(ctx, client.CreateVolumeRequest{Name: "v", SizeBytes: 512 << 20})
	wantStatus(t, err, 409)
	if !strings.Contains(err.Error(), "would over-commit the storage pool: 1.5 GiB is promised already") || !strings.Contains(err.Error(), "--pool-overcommit 1") {
		t.Fatalf("volume past the bound: %v", err)
	}
	res, err := d.c.Exec(ctx, a.ID, client.ExecRequest{Command: []string{"sh", "-c", "dd if=/dev/zero of=/workspace/fill bs=1M 2>&1"}})
	if err != nil || res.ExitCode == 0 || !strings.Contains(string(res.Stdout), "Disk quota exceeded") {
		t.Fatalf("filling a's disk: %+v %v", res, err)
	}
	d.sh(ctx, b.ID, "agent", "for i in $(seq 50); do echo $i > /workspace/small-$i; done; sync")
	for _, id := range []string{a.ID, b.ID} {
		if _, err := d.c.StopSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := d.c.StartSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if got := d.sh(ctx, b.ID, "agent", "cat /workspace/small-50"); got != "50\n" {
		t.Fatalf("b's file after a restart: %q", got)
	}
	info, err = d.c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := info.PoolCapacity; c.Fill < 0.5 || c.CommittedBytes != 1536<<20 {
		t.Fatalf("after a filled its disk: %+v", c)
	}
	cmd := exec.Command(d.bin, "info")
	cmd.Env = append(os.Environ(), "STEAD_ENDPOINT=http://"+d.addr, "STEAD_API_KEY="+d.key)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Pool fill:") || !strings.Contains(string(out), "Pool committed:  1.5 GiB of 1.8 GiB (1 x 1.8 GiB usable; size 2.0 GiB less a 256 MiB reserve)") {
		t.Fatalf("stead info: %v\n%s", err, out)
	}
	t.Logf("stead info:\n%s", out)
	if !strings.Contains(d.logText(), "datasets bounded together") {
		t.Fatal("the daemon log does not say the datasets are bounded")
	}
}
