package linux

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/guest"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/runtime/runtimetest"
	"github.com/stead-dev/stead/internal/testutil"
)

// TestExpediteRCUTurnsItOnAndSaysSo: the runtime turns expedited RCU
// grace periods on when they are off, and logs the change; when they are
// on it says nothing.
func TestExpediteRCUTurnsItOnAndSaysSo(t *testing.T) {
	testutil.RequireRoot(t)
	was, err := os.ReadFile(rcuExpedited)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(rcuExpedited, was, 0o644) })
	if err := os.WriteFile(rcuExpedited, []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	expediteRCU(log)
	if b, _ := os.ReadFile(rcuExpedited); strings.TrimSpace(string(b)) != "1" {
		t.Fatalf("rcu_expedited = %q after the runtime turned it on", b)
	}
	if !strings.Contains(logged.String(), "kernel.rcu_expedited") {
		t.Fatalf("the change was not logged: %q", logged.String())
	}
	logged.Reset()
	expediteRCU(log)
	if logged.Len() != 0 {
		t.Fatalf("logged with nothing to change: %q", logged.String())
	}
}

// TestCapNumbersAreTheKernels: every capability of the runtime's set
// has its kernel number.
func TestCapNumbersAreTheKernels(t *testing.T) {
	for name, want := range map[string]int{"CAP_CHOWN": unix.CAP_CHOWN, "CAP_NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE, "CAP_SETFCAP": unix.CAP_SETFCAP} {
		if got, ok := capNumber(name); !ok || got != want {
			t.Errorf("%s: %d %v, want %d", name, got, ok, want)
		}
	}
	for _, name := range defaultCaps {
		if _, ok := capNumber(name); !ok {
			t.Errorf("%s of the default set has no number", name)
		}
	}
	if _, ok := capNumber("CAP_NO_SUCH"); ok {
		t.Error("an unknown capability got a number")
	}
}

// sharedRootEnv marks the test binary re-executed in a mount namespace of
// its own whose mounts are all shared (TestNativeStartOnASharedHost).
const sharedRootEnv = "STEAD_TEST_SHARED_ROOT"

// TestNativeStartOnASharedHost: on a host whose mounts are shared (every
// systemd host), a native start works and makes no mount on the host:
// the trees it clones leave their peer groups. The test runs itself again
// under `unshare -m --propagation shared`, so only that namespace's
// mounts are shared.
func TestNativeStartOnASharedHost(t *testing.T) {
	testutil.RequireRoot(t)
	if os.Getenv(sharedRootEnv) == "" {
		cmd := exec.Command("unshare", "-m", "--propagation", "shared", os.Args[0], "-test.run=^TestNativeStartOnASharedHost$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), sharedRootEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestNativeStartOnASharedHost") {
			t.Fatalf("in a shared mount namespace: %v\n%s", err, out)
		}
		return
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err != nil || !strings.Contains(string(mi), "shared:") {
		t.Fatalf("not in a shared mount namespace: %v\n%s", err, mi)
	}
	exe, _ := os.Executable()
	for _, shim := range []bool{false, true} {
		r, root := newSkeletonRuntime(t, func(o *Options) {
			o.Native = true
			if shim {
				o.Shim = exe
			}
		})
		before := runtimetest.HostMountPoints(t)
		ctx := context.Background()
		id := fmt.Sprintf("shared-%v", shim)
		if err := r.Start(ctx, steadrt.Spec{ID: id, Rootfs: root, Mounts: []steadrt.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}}}); err != nil {
			t.Fatalf("shim %v: %v", shim, err)
		}
		res, err := r.Exec(ctx, id, guest.ExecSpec{Args: []string{"/bin/true"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("shim %v: exec: %+v %v", shim, res, err)
		}
		var added []string
		for m := range runtimetest.HostMountPoints(t) {
			if !before[m] {
				added = append(added, m)
			}
		}
		r.Kill(ctx, id)
		if len(added) > 0 {
			t.Fatalf("shim %v: the start made mounts on the host: %v", shim, added)
		}
	}
}

// TestNativeInitClosesWhatItsSpawnerLeaked: a descriptor the process that
// forks init holds without close-on-exec (here a host directory, a way
// out of any root) is closed by init before the sandbox sees it.
func TestNativeInitClosesWhatItsSpawnerLeaked(t *testing.T) {
	// stead-init as built for use (the test binary links cgo, and its
	// setup's re-execution closes descriptors too).
	static := buildStaticInit(t)
	r, root := newSkeletonRuntime(t, func(o *Options) { o.Native, o.Binary = true, static })
	dir, err := unix.Open(t.TempDir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dir)
	// High, so that no descriptor the spawn hands init lands on it.
	const leak = 300
	if err := unix.Dup3(dir, leak, 0); err != nil { // no O_CLOEXEC
		t.Fatal(err)
	}
	defer unix.Close(leak)
	ctx := context.Background()
	if err := r.Start(ctx, steadrt.Spec{ID: "leak-1", Rootfs: root, Mounts: []steadrt.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}}}); err != nil {
		t.Fatal(err)
	}
	defer r.Kill(ctx, "leak-1")
	var out bytes.Buffer
	res, err := r.Exec(ctx, "leak-1", guest.ExecSpec{Args: []string{"sh", "-c", "for f in /proc/1/fd/* /proc/self/fd/*; do [ -d $f ] && echo DIR $f $(readlink $f); done; true"}, Stdout: &out, Stderr: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v %s", res, err, out.String())
	}
	if strings.Contains(out.String(), "DIR /proc/1/") {
		t.Fatalf("init holds a directory it inherited:\n%s", out.String())
	}
}
