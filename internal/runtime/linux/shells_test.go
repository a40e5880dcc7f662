package linux

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/guest"
	steadrt "github.com/stead-dev/stead/internal/runtime"
)

// waitShells waits until r holds n ready shells.
func waitShells(t *testing.T, r *Runtime, n int) []*shell {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		ready := slices.Clone(r.shells)
		r.mu.Unlock()
		if len(ready) >= n {
			return ready
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d shells ready after 10 s, want %d", len(ready), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cgroupProcs are the pids in the pids-controller cgroup dir.
func cgroupProcs(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatalf("cgroup %s: %v", dir, err)
	}
	return strings.Fields(string(b))
}

// TestAStartClaimsAShell: with shells, a start's init is a shell spawned
// ahead (its pid), in the sandbox's own cgroups by the sandbox's name (the
// shell's are gone), in the slot the shell held; the sandbox runs as any
// other; and the runtime spawns the next shell. With the shim and without.
func TestAStartClaimsAShell(t *testing.T) {
	for _, shim := range []bool{false, true} {
		t.Run("shim="+strconv.FormatBool(shim), func(t *testing.T) {
			r, root := newSkeletonRuntime(t, func(o *Options) {
				o.Native, o.Shells = true, 1
				if shim {
					o.Shim = o.Binary
				}
			})
			t.Cleanup(func() { r.Close() })
			ctx := context.Background()
			sh := waitShells(t, r, 1)[0]
			// The pids controller's cgroup on v1; the one tree on v2
			// (where moveCgroups moves init instead of renaming).
			key := "pids"
			if sh.paths[key] == "" {
				key = ""
			}
			pidsDir := sh.paths[key]
			if pidsDir == "" {
				t.Fatalf("the shell has no pids cgroup: %v", sh.paths)
			}
			if procs := cgroupProcs(t, pidsDir); !slices.Equal(procs, []string{strconv.Itoa(sh.pid)}) {
				t.Fatalf("the shell's cgroup holds %v, want its init %d", procs, sh.pid)
			}
			r.mu.Lock()
			slot := r.slots.of[sh.name]
			r.mu.Unlock()
			id := "shell-claim"
			if err := r.Start(ctx, steadrt.Spec{ID: id, Rootfs: root, Mounts: []steadrt.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}}}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Kill(ctx, id) })
			c, err := r.load(id)
			if err != nil || c == nil {
				t.Fatalf("load: %v", err)
			}
			st, err := c.State()
			if err != nil {
				t.Fatal(err)
			}
			if st.InitProcessPid != sh.pid {
				t.Fatalf("init is pid %d, the shell was %d", st.InitProcessPid, sh.pid)
			}
			if want := filepath.Join(filepath.Dir(pidsDir), id); st.CgroupPaths[key] != want {
				t.Fatalf("pids cgroup %s, want %s", st.CgroupPaths[key], want)
			}
			if procs := cgroupProcs(t, st.CgroupPaths[key]); !slices.Contains(procs, strconv.Itoa(sh.pid)) {
				t.Fatalf("the sandbox's cgroup holds %v, not its init %d", procs, sh.pid)
			}
			// The device rules written ahead are the sandbox's.
			if dev := st.CgroupPaths["devices"]; dev != "" {
				b, err := os.ReadFile(filepath.Join(dev, "devices.list"))
				if err != nil || strings.Contains(string(b), "a *:* rwm") || !strings.Contains(string(b), "c 1:3 rwm") {
					t.Fatalf("the sandbox's device rules: %q %v", b, err)
				}
			}
			// Its cpuset came unbalanced from the shell (no scheduler
			// domains rebuilt for it).
			if cs := st.CgroupPaths["cpuset"]; r.unbalance && cs != "" {
				b, err := os.ReadFile(filepath.Join(cs, "cpuset.sched_load_balance"))
				if err != nil || strings.TrimSpace(string(b)) != "0" {
					t.Fatalf("sched_load_balance of the sandbox's cpuset: %q %v", b, err)
				}
			}
			if _, err := os.Stat(pidsDir); !os.IsNotExist(err) {
				t.Fatalf("the shell's cgroup is still there: %v", err)
			}
			r.mu.Lock()
			got, held := r.slots.of[id]
			_, shellHeld := r.slots.of[sh.name]
			r.mu.Unlock()
			if !held || got != slot || shellHeld {
				t.Fatalf("slot of the sandbox %d (%v), the shell's was %d (still held: %v)", got, held, slot, shellHeld)
			}
			var out, errOut strings.Builder
			res, err := r.Exec(ctx, id, guest.ExecSpec{Args: []string{"/bin/sh", "-c", "hostname; ls /"}, Stdout: &out, Stderr: &errOut})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 0 || !strings.HasPrefix(out.String(), id+"\n") || !strings.Contains(out.String(), "usr\n") {
				t.Fatalf("exec in the claimed sandbox: %d %q %q", res.ExitCode, out.String(), errOut.String())
			}
			next := waitShells(t, r, 1)[0]
			if next.name == sh.name || next.pid == sh.pid {
				t.Fatalf("no new shell: %s %d", next.name, next.pid)
			}
			// Sweep leaves shells alone.
			if swept, err := r.Sweep(ctx); err != nil || len(swept) != 0 {
				t.Fatalf("sweep: %v %v", swept, err)
			}
			if unix.Kill(next.pid, 0) != nil {
				t.Fatal("the sweep killed a shell")
			}
		})
	}
}

// TestADeadShellIsNotClaimed: a shell killed while it waited costs its
// start nothing but a spawn (the start still succeeds), and Close
// discards the shells it holds: no process and no cgroup of theirs stays.
func TestADeadShellIsNotClaimed(t *testing.T) {
	r, root := newSkeletonRuntime(t, func(o *Options) { o.Native, o.Shells, o.Shim = true, 2, o.Binary })
	ctx := context.Background()
	shells := waitShells(t, r, 2)
	if shells[0].pid <= 0 {
		t.Fatalf("shell pid %d", shells[0].pid)
	}
	unix.Kill(shells[0].pid, unix.SIGKILL)
	// Dead (a zombie: the shim reaps only once it is given up), so its
	// socket is closed. (A shell that dies during its claim fails that
	// start, as an init that dies during its setup does.)
	for deadline := time.Now().Add(5 * time.Second); ; {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(shells[0].pid) + "/stat")
		if f := strings.Fields(string(b)); err != nil || len(f) > 2 && f[2] == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed shell did not die")
		}
		time.Sleep(2 * time.Millisecond)
	}
	id := "shell-dead"
	if err := r.Start(ctx, steadrt.Spec{ID: id, Rootfs: root, Mounts: []steadrt.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}}}); err != nil {
		t.Fatal(err)
	}
	res, err := r.Exec(ctx, id, guest.ExecSpec{Args: []string{"/bin/true"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	r.Kill(ctx, id)
	ready := waitShells(t, r, 2)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for _, sh := range append(ready, shells[0]) {
		for _, p := range sh.paths {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("cgroup %s of shell %s left: %v", p, sh.name, err)
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, sh := range ready {
		for unix.Kill(sh.pid, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("shell %s (pid %d) still runs after Close", sh.name, sh.pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestAShellExitsWhenTheDaemonIsGone: a shell whose runtime end of the
// setup socket closes (the daemon died) exits on its own, so a crashed
// daemon leaves no shell behind (their cgroups are a later Sweep's).
func TestAShellExitsWhenTheDaemonIsGone(t *testing.T) {
	r, _ := newSkeletonRuntime(t, func(o *Options) { o.Native, o.Shells = true, 1 })
	t.Cleanup(func() { r.Close() })
	sh := r.takeShell()
	for deadline := time.Now().Add(10 * time.Second); sh == nil; sh = r.takeShell() {
		if time.Now().After(deadline) {
			t.Fatal("no shell")
		}
		time.Sleep(5 * time.Millisecond)
	}
	sh.sock.Close()
	done := make(chan error, 1)
	go func() { _, err := sh.proc.Wait(); done <- err }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		sh.proc.Kill()
		t.Fatal("the shell still runs 5 s after its runtime's end closed")
	}
	for _, p := range sh.paths {
		removeCgroupDir(p)
	}
}

// TestAWaitingShellHoldsNoHostMount: a shell waits in a root of its own
// (prepareShell), not in the copy of the host's mount tree its namespace
// began with: its mount table holds none of the host's mounts, so a file
// system unmounted on the host meanwhile is released (a loop device
// frees), and a mount made on the host before the shell was spawned is
// not in it.
func TestAWaitingShellHoldsNoHostMount(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	r, _ := newSkeletonRuntime(t, func(o *Options) { o.Native, o.Shells, o.Shim = true, 1, o.Binary })
	t.Cleanup(func() { r.Close() })
	sh := waitShells(t, r, 1)[0]
	b, err := os.ReadFile("/proc/" + strconv.Itoa(sh.pid) + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var points []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			points = append(points, f[4])
		}
	}
	want := []string{"/", "/aux", "/aux/proc", "/aux/sys", "/aux/dev/null", "/aux/dev/zero", "/aux/dev/full", "/aux/dev/random", "/aux/dev/urandom", "/aux/dev/tty"}
	slices.Sort(points)
	slices.Sort(want)
	if !slices.Equal(points, want) {
		t.Fatalf("a waiting shell's mounts: %v, want only its placeholder root's %v", points, want)
	}
	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
}

// TestAChrootBreakoutFromAClaimedShellFindsNothingOfTheHost: a claimed
// shell's sandbox is entered by chroot over the placeholder root
// (setupSandbox), not by pivot_root: root inside, which holds
// CAP_SYS_CHROOT, can break out of a chroot; it must find the sandbox's
// own root (mounted over the placeholder's) or the placeholder, never the
// host's tree.
func TestAChrootBreakoutFromAClaimedShellFindsNothingOfTheHost(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		// The sandbox binds the host's /usr; scripts/setup.sh installs it.
		t.Fatalf("python3 is missing on the host (scripts/setup.sh installs it): %v", err)
	}
	r, root := newSkeletonRuntime(t, func(o *Options) { o.Native, o.Shells, o.Shim = true, 1, o.Binary })
	t.Cleanup(func() { r.Close() })
	waitShells(t, r, 1)
	ctx := context.Background()
	id := "shell-breakout"
	if err := r.Start(ctx, steadrt.Spec{ID: id, Rootfs: root, Mounts: []steadrt.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill(ctx, id) })
	c, _ := r.load(id)
	if st, err := c.State(); err != nil || st.InitProcessPid <= 0 {
		t.Fatalf("state: %v", err)
	}
	script := `import os
print(" ".join(sorted(os.listdir("/"))))
os.makedirs("/tmp/x", exist_ok=True)
os.chroot("/tmp/x")
for _ in range(64):
    os.chdir("..")
os.chroot(".")
print(" ".join(sorted(os.listdir("/"))))`
	var out, errOut strings.Builder
	res, err := r.Exec(ctx, id, guest.ExecSpec{Args: []string{"/usr/bin/python3", "-c", script}, Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("breakout script: exit %d: %s", res.ExitCode, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("breakout script printed %q", out.String())
	}
	// The walk up stops at the mount namespace's root: the placeholder,
	// where the sandbox's root is mounted on top (what a lookup from
	// there finds); never the host's tree.
	own, got := lines[0], lines[1]
	if got != own && got != "aux dev proc sys" {
		t.Fatalf("a chroot breakout found %q; the sandbox's root is %q", got, own)
	}
	for _, host := range []string{"etc", "home", "var", "root", "boot"} {
		if slices.Contains(strings.Fields(got), host) {
			t.Fatalf("a chroot breakout found the host's %s: %q", host, got)
		}
	}
}

// TestAClaimedShellThatFailsItsSetupIsReaped: a claimed shell whose
// setup fails after the start wrote its state (a mount onto the root,
// which init refuses) is given up in the shim by its own name and reaped:
// no zombie, no process, no state left.
func TestAClaimedShellThatFailsItsSetupIsReaped(t *testing.T) {
	r, root := newSkeletonRuntime(t, func(o *Options) { o.Native, o.Shells, o.Shim = true, 1, o.Binary })
	t.Cleanup(func() { r.Close() })
	sh := waitShells(t, r, 1)[0]
	ctx := context.Background()
	id := "shell-fails"
	err := r.Start(ctx, steadrt.Spec{ID: id, Rootfs: root, Mounts: []steadrt.Mount{{Source: "/usr", Destination: "/.."}}})
	if err == nil {
		r.Kill(ctx, id)
		t.Fatal("a start with a mount onto the root succeeded")
	}
	t.Log(err)
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, err := os.Stat("/proc/" + strconv.Itoa(sh.pid)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(sh.pid) + "/stat")
			t.Fatalf("the failed shell's init is still there 5 s later: %s", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st, _ := r.Status(ctx, id); st != steadrt.StatusAbsent {
		t.Fatalf("status after the failed start: %s", st)
	}
}

// TestAReservedShellIsTheStartsAndACancelledOneGoes: Reserve takes a ready
// shell and runs the network attach in its namespace at once (before any
// Start); the Start of that sandbox claims that very shell and does not
// attach again; a reservation cancelled (a create that failed) has its
// shell discarded (process, cgroups, slot), a second cancel and a cancel
// after the Start do nothing, and Close discards a reservation left over.
func TestAReservedShellIsTheStartsAndACancelledOneGoes(t *testing.T) {
	r, root := newSkeletonRuntime(t, func(o *Options) { o.Native, o.Shells = true, 1 })
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	sh := waitShells(t, r, 1)[0]
	attached := make(chan int, 2)
	cancel := r.Reserve(ctx, "reserved", func(_ context.Context, pid int) error { attached <- pid; return nil })
	select {
	case pid := <-attached:
		if pid != sh.pid {
			t.Fatalf("attached pid %d, the shell is %d", pid, sh.pid)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Reserve did not begin the attach")
	}
	spec := steadrt.Spec{ID: "reserved", Rootfs: root, Mounts: []steadrt.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}},
		Network: func(context.Context, int) error { attached <- -1; return nil }}
	if err := r.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill(ctx, "reserved") })
	c, err := r.load("reserved")
	if err != nil || c == nil {
		t.Fatalf("load: %v", err)
	}
	if st, err := c.State(); err != nil || st.InitProcessPid != sh.pid {
		t.Fatalf("init of the started sandbox: %+v %v, the reserved shell was %d", st, err, sh.pid)
	}
	select {
	case pid := <-attached:
		t.Fatalf("the Start attached again (pid %d)", pid)
	default:
	}
	cancel() // after the Start: nothing
	if res, err := r.Exec(ctx, "reserved", guest.ExecSpec{Args: []string{"/bin/true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec after a late cancel: %v %+v", err, res)
	}

	// Cancelled: the shell goes.
	next := waitShells(t, r, 1)[0]
	r.mu.Lock()
	_, slotHeld := r.slots.of[next.name]
	r.mu.Unlock()
	if !slotHeld {
		t.Fatalf("the ready shell holds no slot")
	}
	cancel2 := r.Reserve(ctx, "never-started", func(context.Context, int) error { return nil })
	cancel2()
	cancel2()
	for deadline := time.Now().Add(5 * time.Second); unix.Kill(next.pid, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(next.pid) + "/stat"); strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled shell (pid %d) still runs", next.pid)
		}
	}
	for _, p := range next.paths {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("cgroup %s of the cancelled shell left: %v", p, err)
		}
	}
	r.mu.Lock()
	_, slotHeld = r.slots.of[next.name]
	_, live := r.shellLive[next.name]
	r.mu.Unlock()
	if slotHeld || live {
		t.Fatalf("the cancelled shell still holds its slot (%v) or counts as live (%v)", slotHeld, live)
	}

	// Left over at Close: discarded.
	last := waitShells(t, r, 1)[0]
	r.Reserve(ctx, "left-over", func(context.Context, int) error { return nil })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range last.paths {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("cgroup %s of the reservation left at Close: %v", p, err)
		}
	}
}
