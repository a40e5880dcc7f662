package linux

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/guest"
	steadrt "github.com/stead-dev/stead/internal/runtime"
)

// withShim makes the test binary the runtime's shim.
func withShim(o *Options) { o.Shim = o.Binary }

// skeletonSpec is a spec for a sandbox on newSkeletonRuntime's root.
func skeletonSpec(id, root string) steadrt.Spec {
	return steadrt.Spec{ID: id, Rootfs: root, Mounts: []steadrt.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}}}
}

// initPid is the host pid of a sandbox's init.
func initPid(t *testing.T, r *Runtime, id string) int {
	t.Helper()
	c, err := r.mustLoad(id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.State()
	if err != nil {
		t.Fatal(err)
	}
	return st.InitProcessPid
}

// parentOf is the parent pid of pid.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatalf("no PPid in /proc/%d/status", pid)
	return 0
}

// waitGone waits until pid is no process (not even a zombie).
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still there: %s", what, pid, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func execTrue(t *testing.T, r *Runtime, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := r.Exec(ctx, id, guest.ExecSpec{Args: []string{"/bin/true"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec in %s: %+v %v", id, res, err)
	}
}

// TestShimForksAndReapsSandboxes: with a shim, every sandbox's init is a
// child of the shim (not of the daemon), the shim runs from a sealed copy
// of its binary, and an init that exits is reaped by it.
func TestShimForksAndReapsSandboxes(t *testing.T) {
	r, root := newSkeletonRuntime(t, withShim)
	ctx := context.Background()
	t.Cleanup(func() { r.Close() })
	sp := skeletonSpec("shim-net", root)
	var netPid int
	sp.Network = func(ctx context.Context, pid int) error { netPid = pid; return nil }
	for _, s := range []steadrt.Spec{skeletonSpec("shim-1", root), sp} {
		if err := r.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Kill(ctx, s.ID) })
	}
	shimPid := r.shim.pid()
	if shimPid == 0 || shimPid == os.Getpid() {
		t.Fatalf("shim pid %d (test %d)", shimPid, os.Getpid())
	}
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", shimPid)); !strings.HasPrefix(exe, "/memfd:") {
		t.Errorf("the shim runs from %q, not a sealed in-memory copy", exe)
	}
	for _, id := range []string{"shim-1", "shim-net"} {
		pid := initPid(t, r, id)
		if pp := parentOf(t, pid); pp != shimPid {
			t.Errorf("%s: init %d has parent %d, not the shim %d", id, pid, pp, shimPid)
		}
		execTrue(t, r, id)
	}
	if netPid != initPid(t, r, "shim-net") {
		t.Errorf("network was attached to pid %d, init is %d", netPid, initPid(t, r, "shim-net"))
	}
	pid := initPid(t, r, "shim-1")
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid, "the killed init")
}

// TestShimDeathLeavesSandboxesRunning: a shim killed with its sandboxes
// running takes none of them with it, and the next start has a new shim.
func TestShimDeathLeavesSandboxesRunning(t *testing.T) {
	r, root := newSkeletonRuntime(t, withShim)
	ctx := context.Background()
	t.Cleanup(func() { r.Close() })
	if err := r.Start(ctx, skeletonSpec("shimdie-1", root)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill(ctx, "shimdie-1") })
	old := r.shim.pid()
	if err := unix.Kill(old, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, old, "the killed shim")
	if st, err := r.Status(ctx, "shimdie-1"); err != nil || st != steadrt.StatusRunning {
		t.Fatalf("after the shim died: %s %v", st, err)
	}
	execTrue(t, r, "shimdie-1")
	if err := r.Start(ctx, skeletonSpec("shimdie-2", root)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill(ctx, "shimdie-2") })
	if now := r.shim.pid(); now == 0 || now == old {
		t.Fatalf("shim pid %d after the old one (%d) died", now, old)
	}
	if pp := parentOf(t, initPid(t, r, "shimdie-2")); pp != r.shim.pid() {
		t.Errorf("new init's parent %d, not the new shim %d", pp, r.shim.pid())
	}
	execTrue(t, r, "shimdie-2")
}

// TestShimFailedStartLeavesNothingAndCloseWaitsForInits: a start whose
// network fails leaves no state, cgroup or waiting container in the shim;
// a closed runtime's shim stays while an init of its own runs and goes
// when the last one exits.
func TestShimFailedStartLeavesNothingAndCloseWaitsForInits(t *testing.T) {
	r, root := newSkeletonRuntime(t, withShim)
	ctx := context.Background()
	sp := skeletonSpec("shimfail-1", root)
	sp.Network = func(ctx context.Context, pid int) error { return errors.New("no network today") }
	if err := r.Start(ctx, sp); err == nil || !strings.Contains(err.Error(), "no network today") {
		t.Fatalf("start with a failing network: %v", err)
	}
	if ids, _ := r.List(ctx); len(ids) != 0 {
		t.Fatalf("state left by a failed start: %v", ids)
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/pids", r.opts.CgroupParent, "shimfail-1")); !os.IsNotExist(err) {
		t.Fatalf("cgroup left by a failed start: %v", err)
	}
	if err := r.Start(ctx, skeletonSpec("shimfail-2", root)); err != nil {
		t.Fatal(err)
	}
	shimPid := r.shim.pid()
	r.Close()
	time.Sleep(300 * time.Millisecond)
	if err := unix.Kill(shimPid, 0); err != nil {
		t.Fatalf("the shim left while its init runs: %v", err)
	}
	execTrue(t, r, "shimfail-2")
	if err := r.Kill(ctx, "shimfail-2"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, shimPid, "the closed shim with no init left")
}

// TestShimLeavesWithTheDaemon: when the daemon's end of the connection
// goes (the daemon died), the shim exits at once, and the sandboxes it
// started keep running.
func TestShimLeavesWithTheDaemon(t *testing.T) {
	r, root := newSkeletonRuntime(t, withShim)
	ctx := context.Background()
	if err := r.Start(ctx, skeletonSpec("shimgone-1", root)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill(ctx, "shimgone-1") })
	shimPid, initP := r.shim.pid(), initPid(t, r, "shimgone-1")
	r.shim.mu.Lock()
	r.shim.conn.Close() // what the daemon's death does to it
	r.shim.mu.Unlock()
	waitGone(t, shimPid, "the shim after the daemon's end closed")
	if err := unix.Kill(initP, 0); err != nil {
		t.Fatalf("the sandbox's init went with the shim: %v", err)
	}
	execTrue(t, r, "shimgone-1")
}

// TestShimCarriesALargeEnvironment: a start's message holds the sandbox's
// environment, which an API request may make large (a socket's default
// buffer holds about 208 KiB of one message).
func TestShimCarriesALargeEnvironment(t *testing.T) {
	r, root := newSkeletonRuntime(t, withShim)
	ctx := context.Background()
	t.Cleanup(func() { r.Close() })
	sp := skeletonSpec("shimenv-1", root)
	// Five variables of 100 KiB (one string may not exceed 128 KiB in an
	// exec): 500 KiB in all.
	big := strings.Repeat("x", 100<<10)
	sp.Env = []string{"PATH=/usr/bin:/bin", "BIG=" + big}
	for i := range 4 {
		sp.Env = append(sp.Env, fmt.Sprintf("BIG%d=%s", i, big))
	}
	if err := r.Start(ctx, sp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill(ctx, "shimenv-1") })
	var out strings.Builder
	res, err := r.Exec(ctx, "shimenv-1", guest.ExecSpec{Args: []string{"/bin/sh", "-c", `printf %s "$BIG" | wc -c`}, Stdout: &out})
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(out.String()) != strconv.Itoa(len(big)) {
		t.Fatalf("BIG inside: %q %+v %v (want %d bytes)", out.String(), res, err, len(big))
	}
}

// TestShimThatDoesNotGreetIsRefused: a shim binary that never says which
// protocol it speaks (a stale or wrong stead-shim) fails the start with a
// clear error, and leaves nothing behind.
func TestShimThatDoesNotGreetIsRefused(t *testing.T) {
	r, root := newSkeletonRuntime(t, func(o *Options) { o.Shim = "/bin/true" })
	ctx := context.Background()
	t.Cleanup(func() { r.Close() })
	err := r.Start(ctx, skeletonSpec("shimstale-1", root))
	if err == nil || !strings.Contains(err.Error(), "no greeting") {
		t.Fatalf("start through a shim that does not greet: %v", err)
	}
	if ids, _ := r.List(ctx); len(ids) != 0 {
		t.Fatalf("state left: %v", ids)
	}
}

// muteShimArg makes the test binary a shim that greets and then never
// answers (hung).
const muteShimArg = "mute-shim"

func muteShim() {
	f := os.NewFile(shimFD, "runtime")
	c, err := net.FileConn(f)
	if err != nil {
		os.Exit(1)
	}
	sendMsg(c.(*net.UnixConn), shimAnswer{Hello: shimProtocol}, nil)
	select {}
}

// TestHungShimIsKilledAndReplaced: a call the shim never answers fails
// after the backstop timeout, the hung shim is killed, and the next start
// goes through a new shim.
func TestHungShimIsKilledAndReplaced(t *testing.T) {
	exe, _ := os.Executable()
	script := filepath.Join(t.TempDir(), "mute-shim")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec "+exe+" "+muteShimArg+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, root := newSkeletonRuntime(t, func(o *Options) { o.Shim = script })
	t.Cleanup(func() { r.Close() })
	r.shim.timeout = time.Second
	ctx := context.Background()
	err := r.Start(ctx, skeletonSpec("shimhung-1", root))
	if err == nil || !strings.Contains(err.Error(), "no answer") {
		t.Fatalf("start through a hung shim: %v", err)
	}
	if ids, _ := r.List(ctx); len(ids) != 0 {
		t.Fatalf("state left: %v", ids)
	}
	if pid := r.shim.pid(); pid != 0 {
		t.Fatalf("the hung shim (pid %d) is still the runtime's", pid)
	}
	// The real shim from here on.
	r.shim.bin = exe
	if err := r.Start(ctx, skeletonSpec("shimhung-2", root)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill(ctx, "shimhung-2") })
	execTrue(t, r, "shimhung-2")
}
