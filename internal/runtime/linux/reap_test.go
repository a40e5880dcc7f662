package linux

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/testutil"
)

// threads returns this process's OS thread count.
func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			var n int
			fmt.Sscan(strings.TrimSpace(v), &n)
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// newSkeletonRuntime makes a runtime in a temp dir (its host state
// removed at the end) and a skeleton root whose /usr is the host's,
// mounted read-only by the caller's spec; with (optional) changes its
// options. It needs root.
func newSkeletonRuntime(t *testing.T, with ...func(*Options)) (*Runtime, string) {
	t.Helper()
	testutil.RequireRoot(t)
	dir := t.TempDir()
	exe, _ := os.Executable()
	opts := Options{StateDir: filepath.Join(dir, "state"), RunDir: filepath.Join(dir, "run"), Binary: exe}
	for _, f := range with {
		f(&opts)
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { RemoveHostState(filepath.Join(dir, "state")) })
	root := t.TempDir()
	for _, d := range []string{"proc", "dev", "sys", "tmp", ".stead", "usr"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	for _, l := range []string{"bin", "lib", "lib64"} {
		os.Symlink("usr/"+l, filepath.Join(root, l))
	}
	return r, root
}

// TestRunningSandboxesHoldNoDaemonThreadAndExitedInitIsReaped: the daemon
// reaps each sandbox's init without an OS thread blocked in waitid, or a
// goroutine, per running sandbox (neither count grows with the
// sandboxes), and an init that exits is still reaped (no zombie left).
func TestRunningSandboxesHoldNoDaemonThreadAndExitedInitIsReaped(t *testing.T) {
	r, root := newSkeletonRuntime(t)
	ctx := context.Background()
	start := func(id string) {
		t.Helper()
		if err := r.Start(ctx, steadrt.Spec{ID: id, Rootfs: root, Mounts: []steadrt.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Kill(ctx, id) })
	}
	start("reap-0")
	time.Sleep(200 * time.Millisecond) // let the runtime's own threads settle
	before, beforeG := threads(t), runtime.NumGoroutine()
	const n = 12
	for i := 1; i <= n; i++ {
		start(fmt.Sprintf("reap-%d", i))
	}
	time.Sleep(200 * time.Millisecond)
	if after := threads(t); after-before >= n {
		t.Fatalf("threads %d → %d after starting %d sandboxes: a thread per running sandbox", before, after, n)
	}
	if after := runtime.NumGoroutine(); after-beforeG >= n {
		t.Fatalf("goroutines %d → %d after starting %d sandboxes: a goroutine per running sandbox", beforeG, after, n)
	}
	c, err := r.mustLoad("reap-1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.State()
	if err != nil {
		t.Fatal(err)
	}
	pid := st.InitProcessPid
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			break // reaped: gone
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed init %d was not reaped: %s", pid, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStatsReadsTheSameNumbersAsLibcontainer: Stats, read from a few
// cgroup files, gives the numbers libcontainer's full Stats gives (pids
// exactly; memory within what a second's drift allows; cpu no less).
func TestStatsReadsTheSameNumbersAsLibcontainer(t *testing.T) {
	r, root := newSkeletonRuntime(t)
	ctx := context.Background()
	if err := r.Start(ctx, steadrt.Spec{ID: "stats-1", Rootfs: root, Mounts: []steadrt.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}},
		Limits: steadrt.Limits{MemoryBytes: 256 << 20, Pids: 64}}); err != nil {
		t.Fatal(err)
	}
	defer r.Kill(ctx, "stats-1")
	c, err := r.mustLoad("stats-1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.State()
	if err != nil {
		t.Fatal(err)
	}
	light, ok := cgroupStats(st.CgroupPaths)
	if !ok {
		t.Fatalf("cgroupStats could not read the cgroup files of %v", st.CgroupPaths)
	}
	full, err := r.fullStats("stats-1", c)
	if err != nil {
		t.Fatal(err)
	}
	if light.Pids != full.Pids || light.Pids < 1 {
		t.Errorf("pids: files %d, libcontainer %d", light.Pids, full.Pids)
	}
	if light.MemoryBytes <= 0 || light.MemoryBytes < full.MemoryBytes/2 || light.MemoryBytes > full.MemoryBytes*2 {
		t.Errorf("memory: files %d, libcontainer %d", light.MemoryBytes, full.MemoryBytes)
	}
	if light.MemoryWorkingSetBytes <= 0 || light.MemoryWorkingSetBytes > light.MemoryBytes {
		t.Errorf("working set %d of %d", light.MemoryWorkingSetBytes, light.MemoryBytes)
	}
	if light.CPUUsage <= 0 || full.CPUUsage < light.CPUUsage {
		t.Errorf("cpu: files %v, then libcontainer %v", light.CPUUsage, full.CPUUsage)
	}
	got, err := r.Stats(ctx, "stats-1")
	if err != nil || got.Pids != light.Pids {
		t.Errorf("Stats = %+v, %v", got, err)
	}
}
