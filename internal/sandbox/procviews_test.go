package sandbox

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/store"
)

// seenSize runs, as the agent, what build tools read to size themselves.
func seenSize(t *testing.T, s *Service, name string) (nproc, processors int, memTotalKB int64, uptime float64) {
	t.Helper()
	res, err := s.Exec(context.Background(), store.DefaultTenant, name, client.ExecRequest{Command: []string{"sh", "-c",
		"nproc; grep -c ^processor /proc/cpuinfo; grep ^MemTotal: /proc/meminfo; cut -d' ' -f1 /proc/uptime; grep -c fuse.lxcfs /proc/self/mountinfo"}}, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec in %s: %+v %v", name, res, err)
	}
	f := strings.Fields(string(res.Stdout))
	if len(f) != 7 {
		t.Fatalf("output %q (stderr %q)", res.Stdout, res.Stderr)
	}
	if f[6] == "0" {
		t.Fatalf("no lxcfs views in %s (is lxcfs installed? scripts/setup.sh installs it)", name)
	}
	nproc, _ = strconv.Atoi(f[0])
	processors, _ = strconv.Atoi(f[1])
	memTotalKB, _ = strconv.ParseInt(f[3], 10, 64)
	uptime, _ = strconv.ParseFloat(f[5], 64)
	return
}

func TestMicroSandboxSeesItsLimitsAndALargeOneMore(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	if _, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "tiny", InstanceType: "micro"}); err != nil {
		t.Fatal(err)
	}
	nproc, processors, mem, uptime := seenSize(t, s, "tiny")
	if nproc != 1 || processors != 1 || mem != 524288 {
		t.Fatalf("micro sees nproc %d, %d processors, MemTotal %d kB; want 1, 1, 524288", nproc, processors, mem)
	}
	if uptime > 30 {
		t.Fatalf("micro sees an uptime of %.0f s: the host's, not its own", uptime)
	}

	if _, err := s.StopSandbox(ctx, store.DefaultTenant, "tiny"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResizeSandbox(ctx, store.DefaultTenant, "tiny", client.ResizeRequest{InstanceType: "large"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartSandbox(ctx, store.DefaultTenant, "tiny"); err != nil {
		t.Fatal(err)
	}
	var set unix.CPUSet
	unix.SchedGetaffinity(0, &set)
	wantCPUs := min(4, set.Count(), runtime.NumCPU())
	hostMem, _ := os.ReadFile("/proc/meminfo")
	hostKB, _ := strconv.ParseInt(strings.Fields(string(hostMem))[1], 10, 64)
	nproc, processors, mem, _ = seenSize(t, s, "tiny")
	if nproc != wantCPUs || processors != wantCPUs || mem != min(8<<20, hostKB) {
		t.Fatalf("large sees nproc %d, %d processors, MemTotal %d kB; want %d, %d, %d", nproc, processors, mem, wantCPUs, wantCPUs, min(8<<20, hostKB))
	}
}
