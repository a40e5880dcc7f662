// Package runtimetest is the contract suite every runtime.Runtime
// implementation must pass: isolation, exec, PTY, pause/resume, stop,
// reaping and adoption by a new runtime on the same state (a daemon
// restart). It runs real sandboxes, so it needs root.
package runtimetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/guest"
	steadrt "github.com/stead-dev/stead/internal/runtime"
)

// Factory returns a runtime keeping its state under dir. Two runtimes made
// on the same dir see the same sandboxes (a daemon restart).
type Factory func(t *testing.T, dir string) steadrt.Runtime

// Run runs the Runtime contract suite. The runtime must be able to run the
// test binary's init (the caller's TestMain dispatches the re-exec roles).
func Run(t *testing.T, newRuntime Factory) {
	t.Run("ExecRunsInsideSandboxAsAgent", func(t *testing.T) { execRunsInsideSandboxAsAgent(t, newRuntime) })
	t.Run("PauseResumeStop", func(t *testing.T) { pauseResumeStop(t, newRuntime) })
	t.Run("KilledWhilePausedRunsNothingMore", func(t *testing.T) { killedWhilePaused(t, newRuntime) })
	t.Run("SandboxIsConfinedBySeccompAndCaps", func(t *testing.T) { sandboxIsConfinedBySeccompAndCaps(t, newRuntime) })
	t.Run("InitReapsOrphans", func(t *testing.T) { initReapsOrphans(t, newRuntime) })
	t.Run("PTYAndBackgroundExec", func(t *testing.T) { pTYAndBackgroundExec(t, newRuntime) })
	t.Run("UnknownSandboxIsAbsentAndStopIsIdempotent", func(t *testing.T) { unknownSandboxIsAbsent(t, newRuntime) })
	t.Run("AnotherRuntimeAdoptsRunningSandboxes", func(t *testing.T) { anotherRuntimeAdopts(t, newRuntime) })
	t.Run("RootInsideIsNotRootOnHost", func(t *testing.T) { rootInsideIsNotRootOnHost(t, newRuntime) })
	t.Run("NetworkIsMadeBeforeInitRunsAndIsNotTheSandboxs", func(t *testing.T) { networkBeforeInit(t, newRuntime) })
	t.Run("NoProcessHoldsAHostDirectory", func(t *testing.T) { noHostDirectory(t, newRuntime) })
	t.Run("AHostileRootMovesNoMountOutOfIt", func(t *testing.T) { hostileRoot(t, newRuntime) })
	t.Run("AFileMountFollowsADanglingLinkInsideTheRoot", func(t *testing.T) { danglingLinkTarget(t, newRuntime) })
	t.Run("TheSandboxEnvironmentStopsAtInit", func(t *testing.T) { environmentStopsAtInit(t, newRuntime) })
}

// environmentStopsAtInit: the sandbox's environment reaches the
// processes init starts and not init itself (a variable of init's, a
// GODEBUG or GOMAXPROCS of the user's, changes nothing), and they start
// with the usual umask.
func environmentStopsAtInit(t *testing.T, newRuntime Factory) {
	r := newRuntime(t, t.TempDir())
	root, mounts := miniRoot(t)
	env := append(append([]string{}, baseEnv...), "STEAD_INIT_SETUP_DONE=1", "GODEBUG=containermaxprocs=1", "GOMAXPROCS=64", "MARK=sandbox-env")
	ctx := context.Background()
	if err := r.Start(ctx, steadrt.Spec{ID: "rt-env", Rootfs: root, Mounts: mounts, Env: env}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill(context.Background(), "rt-env") })
	out, code := run(t, r, "rt-env", 0, "sh", "-c", "echo $MARK; umask; grep -q '^Name:' /proc/self/status && echo procfs; tr '\\0' '\\n' < /proc/1/environ")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) < 3 || lines[0] != "sandbox-env" || lines[1] != "0022" || lines[2] != "procfs" {
		t.Fatalf("exit %d, want the sandbox's env, umask 0022 and its own /proc:\n%s", code, out)
	}
	for _, l := range lines[3:] {
		if strings.HasPrefix(l, "MARK=") || strings.HasPrefix(l, "GODEBUG=") || strings.HasPrefix(l, "GOMAXPROCS=") || strings.HasPrefix(l, "STEAD_") {
			t.Fatalf("init's own environment holds the sandbox's %q:\n%s", l, out)
		}
	}
}

// danglingLinkTarget: a file mounted where the root holds a symlink to a
// file not there yet (a resolv.conf linked into /run) lands where the
// link points, inside the root, and reads through the link.
func danglingLinkTarget(t *testing.T, newRuntime Factory) {
	r := newRuntime(t, t.TempDir())
	root, mounts := miniRoot(t)
	if err := os.Symlink("../run/resolve/stub-resolv.conf", filepath.Join(root, "etc/resolv.conf")); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(src, []byte("nameserver 198.18.0.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mounts = append(mounts, steadrt.Mount{Source: src, Destination: "/etc/resolv.conf", ReadOnly: true})
	ctx := context.Background()
	if err := r.Start(ctx, steadrt.Spec{ID: "rt-dangling", Rootfs: root, Mounts: mounts, Env: baseEnv}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill(context.Background(), "rt-dangling") })
	if out, code := run(t, r, "rt-dangling", 1000, "cat", "/etc/resolv.conf"); code != 0 || out != "nameserver 198.18.0.53\n" {
		t.Fatalf("resolv.conf through its link: exit %d %q", code, out)
	}
	if _, err := os.Lstat(filepath.Join(root, "run/resolve/stub-resolv.conf")); err != nil {
		t.Fatalf("the link's target was not made inside the root: %v", err)
	}
}

// HostMountPoints is the set of mount points in the calling process's
// mount namespace (the host's, for a test of a runtime).
func HostMountPoints(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			m[f[4]] = true
		}
	}
	return m
}

// hostileRoot: a root the agent left with symlinks and files where the
// runtime mounts (/proc to the host's /etc, /dev up and out of the root,
// /tmp to init's root through /proc, /sys a file, a bind mount's parent
// to a host directory and a magic link), while the host side swaps a
// symlink under a mount target back and forth during the starts. Each
// start either fails and leaves nothing, or runs a sandbox whose /proc,
// /dev and /sys are its own; no start adds a mount to the host's mount
// table outside the runtime's own directories or touches the host
// directories the links name.
func hostileRoot(t *testing.T, newRuntime Factory) {
	dir := t.TempDir()
	r := newRuntime(t, dir)
	hostDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(hostDir, "marker"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir() // a volume's source
	ctx := context.Background()
	before := HostMountPoints(t)
	stop := make(chan struct{})
	done := make(chan struct{})
	var roots []string
	for i := range 6 {
		root, mounts := miniRoot(t)
		roots = append(roots, root)
		for _, d := range []string{"proc", "dev", "sys", "tmp"} {
			os.Remove(filepath.Join(root, d))
		}
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		must(os.Symlink("/etc", filepath.Join(root, "proc")))
		must(os.Symlink("../../../../../../../../"+strings.TrimPrefix(hostDir, "/"), filepath.Join(root, "dev")))
		must(os.Symlink("/proc/1/root", filepath.Join(root, "tmp")))
		must(os.WriteFile(filepath.Join(root, "sys"), []byte("not a directory"), 0o644))
		// The volume goes to /work/data; /work flips between a directory
		// and a symlink out of the root while the sandbox starts.
		work := filepath.Join(root, "work")
		must(os.MkdirAll(work, 0o755))
		if i%2 == 1 {
			must(os.Remove(work))
			must(os.Symlink("/proc/self/root"+hostDir, work))
		}
		mounts = append(mounts, steadrt.Mount{Source: data, Destination: "/work/data"})
		go func(i int) {
			if i != 0 {
				return
			}
			defer close(done)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				for _, root := range roots[:1] {
					w := filepath.Join(root, "work")
					tmp := filepath.Join(root, "work.swap")
					if n%2 == 0 {
						os.Symlink("../../../../../../../.."+hostDir, tmp)
					} else {
						os.Mkdir(tmp, 0o755)
					}
					os.Rename(tmp, w) // fails for a directory over a directory; fine
					os.RemoveAll(tmp)
				}
			}
		}(i)
		id := fmt.Sprintf("rt-hostile-%d", i)
		err := r.Start(ctx, steadrt.Spec{ID: id, Rootfs: root, Mounts: mounts, Env: baseEnv})
		if err != nil {
			t.Logf("start %d refused: %v", i, err)
			if st, _ := r.Status(ctx, id); st != steadrt.StatusAbsent {
				t.Fatalf("a refused start left state: %s", st)
			}
			continue
		}
		t.Cleanup(func() { r.Kill(context.Background(), id) })
		out, code := run(t, r, id, 0, "sh", "-c", `
grep -q '^Name:' /proc/self/status || echo "BAD /proc: $(ls /proc | head -3)"
test -c /dev/null || echo "BAD /dev/null"
test -d /sys/kernel || echo "BAD /sys"
test -e /dev/marker && echo "BAD /dev shows the host dir"
test -e /proc/marker && echo "BAD /proc shows a host dir"
echo probe > /work/data/from-sandbox 2>/dev/null
true`)
		if code != 0 || strings.Contains(out, "BAD") {
			t.Fatalf("sandbox %d: exit %d:\n%s", i, code, out)
		}
	}
	close(stop)
	<-done
	// A bind mount whose target is a link to the root itself would be
	// stacked on the root: refused.
	root, mounts := miniRoot(t)
	if err := os.Symlink("/", filepath.Join(root, "rootlink")); err != nil {
		t.Fatal(err)
	}
	mounts = append(mounts, steadrt.Mount{Source: data, Destination: "/rootlink"})
	if err := r.Start(ctx, steadrt.Spec{ID: "rt-hostile-onroot", Rootfs: root, Mounts: mounts, Env: baseEnv}); err == nil {
		r.Kill(ctx, "rt-hostile-onroot")
		t.Fatal("a bind mount through a link to / started")
	} else if st, _ := r.Status(ctx, "rt-hostile-onroot"); st != steadrt.StatusAbsent {
		t.Fatalf("a refused start left state: %s", st)
	}
	if b, err := os.ReadFile(filepath.Join(hostDir, "marker")); err != nil || string(b) != "host" {
		t.Fatalf("host dir marker: %q %v", b, err)
	}
	if ents, _ := os.ReadDir(hostDir); len(ents) != 1 {
		t.Fatalf("the host dir the links named gained files: %v", ents)
	}
	// Mounts the runtime makes on the host for a start go after it (an
	// unmount off the start's path): give them a moment.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var extra []string
		for m := range HostMountPoints(t) {
			if !before[m] && !strings.HasPrefix(m, dir) && !strings.HasPrefix(m, "/run/stead-rootfs") {
				extra = append(extra, m)
			}
		}
		if len(extra) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the starts added host mounts: %v", extra)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// noHostDirectory: neither the sandbox's init nor a process exec'd in it
// holds an open directory (a directory descriptor of the host's, leaked
// into a sandbox, is a way out of its root: openat(fd, "..")), and the
// only regular files init holds are its log and its own binary.
func noHostDirectory(t *testing.T, newRuntime Factory) {
	r := newRuntime(t, t.TempDir())
	startSandbox(t, r, "rt-fds", steadrt.Limits{})
	// As the sandbox's root, which may look into init's descriptors.
	out, code := run(t, r, "rt-fds", 0, "sh", "-c", `
for p in 1 self; do
  for f in /proc/$p/fd/*; do
    n=${f##*/}
    if [ -d "$f" ]; then echo "DIR: $p $n $(readlink $f)"; fi
    # A leak stays; a descriptor init holds for a moment (while it serves
    # this exec, or reads a file) is gone a moment later (it outlived the
    # readlink once in 33 runs, and on a loaded machine).
    if [ -f "$f" ] && [ "$p" = 1 ] && [ "$n" != 1 ] && [ "$n" != 2 ] && [ "$n" != 5 ]; then l=$(readlink $f) && [ -n "$l" ] && sleep 0.3 && [ "$(readlink $f 2>/dev/null)" = "$l" ] && echo "FILE: $p $n $l"; fi
    # A process init starts holds its stdio and nothing of init's (its
    # listening socket would let it take the daemon's connections).
    if [ "$p" = self ] && [ "$n" -gt 2 ]; then case "$(readlink $f)" in socket:*|anon_inode:*|/memfd:*) echo "LEAK: $n $(readlink $f)";; esac; fi
  done
done
for f in /proc/1/fd/*; do readlink $f; done | grep -m1 socket:`)
	// init holds its listening socket: the check could see init's table.
	if code != 0 || strings.Contains(out, "DIR:") || strings.Contains(out, "FILE:") || strings.Contains(out, "LEAK:") || !strings.Contains(out, "socket:") {
		t.Fatalf("descriptors a sandbox should not see, or none seen (exit %d):\n%s", code, out)
	}
}

// networkBeforeInit: Spec.Network is called with the init's pid before
// the sandbox runs anything, in the sandbox's own network namespace; the
// sandbox's root cannot reconfigure that namespace; a failing Network
// fails the start and leaves nothing.
func networkBeforeInit(t *testing.T, newRuntime Factory) {
	r := newRuntime(t, t.TempDir())
	root, mounts := miniRoot(t)
	ctx := context.Background()
	var ino uint64
	network := func(ctx context.Context, pid int) error {
		var st unix.Stat_t
		if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st); err != nil {
			return err
		}
		ino = st.Ino
		return nil
	}
	if err := r.Start(ctx, steadrt.Spec{ID: "rt-netns", Rootfs: root, Mounts: mounts, Env: baseEnv, Network: network}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill(context.Background(), "rt-netns") })
	out, code := run(t, r, "rt-netns", 0, "readlink", "/proc/self/ns/net")
	if code != 0 || strings.TrimSpace(out) != fmt.Sprintf("net:[%d]", ino) {
		t.Fatalf("sandbox netns %q (exit %d), want the one Network saw, net:[%d]", out, code, ino)
	}
	if _, err := os.Stat("/sbin/ip"); err == nil {
		for _, cmd := range []string{"ip link set lo down", "ip addr add 10.1.2.3/24 dev lo", "ip link add x type dummy"} {
			if out, code := run(t, r, "rt-netns", 0, "sh", "-c", cmd); code == 0 {
				t.Errorf("%q as the sandbox's root succeeded: %s", cmd, out)
			}
		}
	}
	failing := func(ctx context.Context, pid int) error { return errors.New("no network today") }
	root2, mounts2 := miniRoot(t)
	err := r.Start(ctx, steadrt.Spec{ID: "rt-netns-fail", Rootfs: root2, Mounts: mounts2, Env: baseEnv, Network: failing})
	if err == nil || !strings.Contains(err.Error(), "no network today") {
		t.Fatalf("start with a failing Network: %v", err)
	}
	if st, _ := r.Status(ctx, "rt-netns-fail"); st != steadrt.StatusAbsent {
		t.Fatalf("a failed start left state: %s", st)
	}
}

// rootInsideIsNotRootOnHost: the sandbox runs in a user namespace mapping
// its ids to unprivileged host ids, each sandbox its own range; files keep
// the ids the sandbox sees on disk; nothing the runtime mounts names a host
// path; ptrace of the sandbox's own children works.
func rootInsideIsNotRootOnHost(t *testing.T, newRuntime Factory) {
	dir := t.TempDir()
	r := newRuntime(t, dir)
	rootA := startSandbox(t, r, "rt-userns-a", steadrt.Limits{})
	startSandbox(t, r, "rt-userns-b", steadrt.Limits{})
	hostRoot := func(id string) string {
		out, code := run(t, r, id, 0, "cat", "/proc/self/uid_map")
		f := strings.Fields(out)
		if code != 0 || len(f) != 3 || f[0] != "0" || f[2] != "65536" {
			t.Fatalf("%s: uid_map %q (exit %d): want one range of 65536 ids from 0", id, out, code)
		}
		if f[1] == "0" {
			t.Fatalf("%s: root inside is root on the host: uid_map %q", id, out)
		}
		return f[1]
	}
	if a, b := hostRoot("rt-userns-a"), hostRoot("rt-userns-b"); a == b {
		t.Fatalf("two running sandboxes share host ids %s", a)
	}
	// Files made inside carry the ids the sandbox sees, on disk.
	run(t, r, "rt-userns-a", 0, "sh", "-c", "echo r > /root/r && cp /bin/true /root/suid && chmod 4755 /root/suid")
	run(t, r, "rt-userns-a", 1000, "sh", "-c", "echo a > /workspace/a")
	for name, want := range map[string]uint32{"root/r": 0, "workspace/a": 1000} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(rootA, name), &st); err != nil || st.Uid != want || st.Gid != want {
			t.Fatalf("%s on disk: uid %d gid %d (%v), want %d", name, st.Uid, st.Gid, err, want)
		}
	}
	out, _ := run(t, r, "rt-userns-a", 0, "sh", "-c", "stat -c '%u %g %a' /root/r /workspace/a /usr/bin/env")
	if out != "0 0 644\n1000 1000 644\n0 0 755\n" {
		t.Fatalf("ids seen inside: %q", out)
	}
	// The sandbox's mount table names nothing of the runtime's on the host.
	mi, _ := run(t, r, "rt-userns-a", 1000, "cat", "/proc/self/mountinfo")
	for _, host := range []string{dir, "stead-rootfs", "/.stead"} {
		if strings.Contains(mi, host) {
			t.Fatalf("mountinfo inside names %q:\n%s", host, mi)
		}
	}
	// ptrace of one's own child works (strace, gdb); other processes of the
	// sandbox (init) are not the agent's.
	if out, code := run(t, r, "rt-userns-a", 1000, "sh", "-c", "strace -f -o /dev/null true && gdb -batch -ex run /bin/true 2>&1 | grep 'exited normally'"); code != 0 {
		t.Fatalf("strace of own child: %d %s", code, out)
	}
	if out, code := run(t, r, "rt-userns-a", 1000, "sh", "-c", "strace -p 1 -o /dev/null"); code == 0 {
		t.Fatalf("the agent traced init: %s", out)
	}
}

// miniRoot makes a root filesystem that borrows the host's /usr read-only.
func miniRoot(t *testing.T) (string, []steadrt.Mount) {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"usr", "etc", "proc", "sys", "dev", "tmp", "home/agent", "workspace", "var/log", "root", "run"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chown(filepath.Join(root, "home/agent"), 1000, 1000)
	os.Chown(filepath.Join(root, "workspace"), 1000, 1000)
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if _, err := os.Lstat("/usr/" + l); err == nil {
			os.Symlink("usr/"+l, filepath.Join(root, l))
		}
	}
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nagent:x:1000:\n"), 0o644)
	return root, []steadrt.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}}
}

var baseEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}

func startSandbox(t *testing.T, r steadrt.Runtime, id string, l steadrt.Limits) string {
	t.Helper()
	root, mounts := miniRoot(t)
	ctx := context.Background()
	if err := r.Start(ctx, steadrt.Spec{ID: id, Rootfs: root, Mounts: mounts, Env: baseEnv, Limits: l}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill(context.Background(), id) })
	return root
}

func run(t *testing.T, r steadrt.Runtime, id string, uid int, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	res, err := r.Exec(context.Background(), id, guest.ExecSpec{Args: args, UID: uid, GID: uid, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("exec %v: %v", args, err)
	}
	return out.String(), res.ExitCode
}

func execRunsInsideSandboxAsAgent(t *testing.T, newRuntime Factory) {
	r := newRuntime(t, t.TempDir())
	startSandbox(t, r, "rt-exec", steadrt.Limits{MemoryBytes: 256 << 20, Pids: 256, CPUs: 1})
	out, code := run(t, r, "rt-exec", 1000, "sh", "-c", "id -u; echo $HOME; cat /proc/1/cmdline | tr '\\0' ' '; echo; hostname")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] != "1000" || lines[1] != "/home/agent" || !strings.Contains(lines[2], "sandbox-init") || lines[3] != "rt-exec" {
		t.Fatalf("unexpected output %q", out)
	}
	if _, code := run(t, r, "rt-exec", 0, "sh", "-c", "exit 7"); code != 7 {
		t.Fatalf("exit code %d, want 7", code)
	}
	// A missing working directory is the caller's mistake; a missing
	// program exits 127, as in a shell, with the reason on its stderr.
	if _, err := r.Exec(context.Background(), "rt-exec", guest.ExecSpec{Args: []string{"true"}, Cwd: "/no/such/dir"}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("exec in a missing directory: want ErrInvalid, got %v", err)
	}
	var stderr bytes.Buffer
	res, err := r.Exec(context.Background(), "rt-exec", guest.ExecSpec{Args: []string{"no-such-command"}, Stderr: &stderr})
	if err != nil || res.ExitCode != 127 || !strings.Contains(stderr.String(), "no-such-command") {
		t.Fatalf("exec of a missing program: %+v %v (stderr %q), want exit 127 naming it", res, err, stderr.String())
	}
}

func pauseResumeStop(t *testing.T, newRuntime Factory) {
	r := newRuntime(t, t.TempDir())
	ctx := context.Background()
	startSandbox(t, r, "rt-pause", steadrt.Limits{})
	if err := r.Pause(ctx, "rt-pause"); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Status(ctx, "rt-pause"); st != steadrt.StatusPaused {
		t.Fatalf("status %s", st)
	}
	if err := r.Resume(ctx, "rt-pause"); err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, r, "rt-pause", 0, "echo", "ok"); out != "ok\n" {
		t.Fatalf("out %q", out)
	}
	begin := time.Now()
	if err := r.Stop(ctx, "rt-pause", time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("stop took %s", time.Since(begin))
	if st, _ := r.Status(ctx, "rt-pause"); st != steadrt.StatusAbsent {
		t.Fatalf("status after stop %s", st)
	}
}

// killedWhilePaused: Kill of a paused sandbox ends it without letting any
// of its processes run again, not even for the moment between a thaw and
// the kill (a copy paused for a hand-over must never run beside the
// sandbox's new owner). Writers busy-loop in the sandbox; the file they
// append to must not grow from the pause on.
func killedWhilePaused(t *testing.T, newRuntime Factory) {
	r := newRuntime(t, t.TempDir())
	ctx := context.Background()
	for round := 0; round < 3; round++ {
		root := startSandbox(t, r, "rt-killp", steadrt.Limits{})
		dir := filepath.Join(root, "ticks")
		if err := os.Mkdir(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, 0o777)
		ticks := filepath.Join(dir, "ticks")
		for i := 0; i < 4; i++ {
			if _, err := r.Exec(ctx, "rt-killp", guest.ExecSpec{Args: []string{"sh", "-c", "while :; do echo x >> /ticks/ticks; done"}, Background: true}); err != nil {
				t.Fatal(err)
			}
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if fi, err := os.Stat(ticks); err == nil && fi.Size() > 1000 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the writers never wrote")
			}
		}
		if err := r.Pause(ctx, "rt-killp"); err != nil {
			t.Fatal(err)
		}
		before, _ := os.Stat(ticks)
		if err := r.Kill(ctx, "rt-killp"); err != nil {
			t.Fatal(err)
		}
		after, _ := os.Stat(ticks)
		if before == nil || after == nil || after.Size() != before.Size() {
			t.Fatalf("round %d: the paused sandbox ran again when killed: ticks %d → %d bytes", round, sizeOf(before), sizeOf(after))
		}
	}
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return -1
	}
	return fi.Size()
}

func sandboxIsConfinedBySeccompAndCaps(t *testing.T, newRuntime Factory) {
	r := newRuntime(t, t.TempDir())
	startSandbox(t, r, "rt-conf", steadrt.Limits{})
	out, _ := run(t, r, "rt-conf", 0, "sh", "-c", "grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status")
	if !strings.Contains(out, "Seccomp:\t2") || !strings.Contains(out, "NoNewPrivs:\t1") {
		t.Fatalf("seccomp filter or no_new_privs missing:\n%s", out)
	}
	if strings.Contains(out, "CapEff:\t000001ff") {
		t.Fatalf("root in the sandbox has every capability:\n%s", out)
	}
	for _, cmd := range []string{"unshare -U true", "unshare -m true", "mount -t tmpfs none /mnt", "chroot / true && nsenter -t 1 -m true",
		// Device nodes cannot be made (and would not work: nodev).
		"mknod /tmp/null c 1 3", "mknod /root/null c 1 3"} {
		if out, code := run(t, r, "rt-conf", 0, "sh", "-c", cmd); code == 0 {
			t.Fatalf("%q succeeded in a sandbox: %s", cmd, out)
		}
	}
	// An agent-user process has no capabilities at all.
	if out, _ := run(t, r, "rt-conf", 1000, "sh", "-c", "grep CapEff /proc/self/status"); !strings.Contains(out, "0000000000000000") {
		t.Fatalf("agent has capabilities: %s", out)
	}
	// Capabilities are per thread, and any of init's threads may fork the
	// next process: each must hold Docker's default set and no more, with
	// no_new_privs.
	out, _ = run(t, r, "rt-conf", 0, "sh", "-c", "for s in /proc/1/task/*/status; do grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' $s | tr '\\n\\t' '  '; echo; done")
	threads := strings.Split(strings.TrimSpace(out), "\n")
	want := "CapInh: 0000000000000000 CapPrm: 00000000a80425fb CapEff: 00000000a80425fb CapBnd: 00000000a80425fb CapAmb: 0000000000000000 NoNewPrivs: 1"
	if len(threads) < 2 {
		t.Fatalf("init's threads not seen: %q", out)
	}
	for _, th := range threads {
		if strings.Join(strings.Fields(th), " ") != want {
			t.Fatalf("a thread of init has other capabilities:\n%s\nwant %s", out, want)
		}
	}
}

func initReapsOrphans(t *testing.T, newRuntime Factory) {
	r := newRuntime(t, t.TempDir())
	startSandbox(t, r, "rt-reap", steadrt.Limits{Pids: 64})
	// Each run leaves an orphan that exits later; init must reap them all.
	for i := 0; i < 20; i++ {
		run(t, r, "rt-reap", 1000, "sh", "-c", "(sleep 0.05 &) ; true")
	}
	time.Sleep(300 * time.Millisecond)
	out, _ := run(t, r, "rt-reap", 0, "sh", "-c", "grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l")
	if strings.TrimSpace(out) != "0" {
		t.Fatalf("%s zombies left", strings.TrimSpace(out))
	}
}

func pTYAndBackgroundExec(t *testing.T, newRuntime Factory) {
	r := newRuntime(t, t.TempDir())
	ctx := context.Background()
	startSandbox(t, r, "rt-pty", steadrt.Limits{})
	p, err := r.OpenPTY(ctx, "rt-pty", guest.ExecSpec{Args: []string{"sh"}, UID: 1000, GID: 1000}, 40, 120)
	if err != nil {
		t.Fatal(err)
	}
	p.Write([]byte("stty size; exit 4\n"))
	var term bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := p.Read(buf)
		term.Write(buf[:n])
		if err != nil {
			break
		}
	}
	code, err := p.Wait()
	p.Close()
	if err != nil || code != 4 || !strings.Contains(term.String(), "40 120") {
		t.Fatalf("pty: code %d err %v output %q", code, err, term.String())
	}
	res, err := r.Exec(ctx, "rt-pty", guest.ExecSpec{Args: []string{"sh", "-c", "echo bg-out; sleep 0.2; echo done"}, Background: true})
	if err != nil || res.LogPath == "" {
		t.Fatalf("background: %+v %v", res, err)
	}
	time.Sleep(500 * time.Millisecond)
	if out, _ := run(t, r, "rt-pty", 0, "cat", res.LogPath); out != "bg-out\ndone\n" {
		t.Fatalf("background log %q", out)
	}
}

func unknownSandboxIsAbsent(t *testing.T, newRuntime Factory) {
	r := newRuntime(t, t.TempDir())
	ctx := context.Background()
	if st, err := r.Status(ctx, "rt-none"); err != nil || st != steadrt.StatusAbsent {
		t.Fatalf("status of unknown sandbox: %s %v", st, err)
	}
	if err := r.Stop(ctx, "rt-none", time.Second); err != nil {
		t.Fatalf("stop of unknown sandbox: %v", err)
	}
	if err := r.Pause(ctx, "rt-none"); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("pause of unknown sandbox: %v", err)
	}
	if err := r.Start(ctx, steadrt.Spec{ID: "../evil", Rootfs: t.TempDir()}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("start with a bad id: %v", err)
	}
}

func anotherRuntimeAdopts(t *testing.T, newRuntime Factory) {
	dir := t.TempDir()
	r1 := newRuntime(t, dir)
	startSandbox(t, r1, "rt-adopt", steadrt.Limits{})
	ctx := context.Background()
	if err := r1.Start(ctx, steadrt.Spec{ID: "rt-adopt", Rootfs: t.TempDir()}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("second start of a running sandbox: %v", err)
	}
	r2 := newRuntime(t, dir)
	ids, err := r2.List(ctx)
	if err != nil || len(ids) != 1 || ids[0] != "rt-adopt" {
		t.Fatalf("list after restart: %v %v", ids, err)
	}
	if st, _ := r2.Status(ctx, "rt-adopt"); st != steadrt.StatusRunning {
		t.Fatalf("status after restart: %s", st)
	}
	if out, code := run(t, r2, "rt-adopt", 0, "echo", "adopted"); code != 0 || out != "adopted\n" {
		t.Fatalf("exec after restart: %q %d", out, code)
	}
	if err := r2.Pause(ctx, "rt-adopt"); err != nil {
		t.Fatal(err)
	}
	if err := r2.Stop(ctx, "rt-adopt", time.Second); err != nil {
		t.Fatal(err)
	}
	if st, _ := r2.Status(ctx, "rt-adopt"); st != steadrt.StatusAbsent {
		t.Fatalf("status after stop: %s", st)
	}
}
