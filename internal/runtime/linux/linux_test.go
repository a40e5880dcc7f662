// Init starts in the host's cgroups and sets its sandbox up before it
// joins the sandbox's: the Go runtime must not open the host's cgroup
// files to size GOMAXPROCS (Go 1.25's container-aware GOMAXPROCS keeps
// them open, and the sandbox's root could read them through /proc/1/fd).
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0

package linux

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/runtime/runtimetest"
	"github.com/stead-dev/stead/internal/testutil"
)

// TestMain lets the test binary play the stead binary's re-exec roles.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == muteShimArg {
		muteShim()
	}
	if RunRole() {
		return
	}
	os.Exit(m.Run())
}

// TestRuntimeContract runs the contract suite against libcontainer in the
// test's own process and through a shim (the test binary plays it), and
// against stead's own setup (Native) both ways.
func TestRuntimeContract(t *testing.T) {
	testutil.RequireRoot(t)
	static := buildStaticInit(t)
	for _, v := range []struct {
		name                 string
		shim, native, static bool
		shells               int
	}{{"InProcess", false, false, false, 0}, {"Shim", true, false, false, 0}, {"Native", false, true, false, 0}, {"NativeShim", true, true, false, 0},
		// The test binary links cgo, so as init it takes the setup's
		// re-execution fallback; stead-init as built for use does not.
		{"NativeShimStaticInit", true, true, true, 0},
		// Starts claim inits spawned ahead (shells.go).
		{"NativeShells", false, true, false, 2}, {"NativeShimShellsStaticInit", true, true, true, 2}} {
		shim := v.shim
		t.Run(v.name, func(t *testing.T) {
			runtimetest.Run(t, func(t *testing.T, dir string) steadrt.Runtime {
				testutil.RequireRoot(t)
				exe, err := os.Executable()
				if err != nil {
					t.Fatal(err)
				}
				opts := Options{StateDir: filepath.Join(dir, "state"), RunDir: filepath.Join(dir, "run"), Binary: exe, Native: v.native, Shells: v.shells}
				if v.static {
					opts.Binary = static
				}
				if shim {
					opts.Shim = exe
				}
				r, err := New(opts)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					r.Close()
					RemoveHostState(filepath.Join(dir, "state"))
				})
				if v.shells > 0 {
					waitShells(t, r, v.shells) // so that starts claim them
				}
				return r
			})
		})
	}
}

func TestSweepRemovesLeftoversButNotLiveSandboxes(t *testing.T) {
	r, root := newSkeletonRuntime(t)
	ctx := context.Background()
	if err := r.Start(ctx, steadrt.Spec{ID: "rt-live", Rootfs: root, Mounts: []steadrt.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}}}); err != nil {
		t.Fatal(err)
	}
	defer r.Kill(ctx, "rt-live")
	// What a kill -9 inside Start leaves: a cgroup and a run dir, no state.
	stray := filepath.Join("/sys/fs/cgroup/pids", r.opts.CgroupParent, "rt-stray")
	if err := os.Mkdir(stray, 0o755); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(r.opts.RunDir, "rt-stray"), 0o700)
	swept, err := r.Sweep(ctx)
	if err != nil || len(swept) != 1 || swept[0] != "rt-stray" {
		t.Fatalf("sweep: %v %v", swept, err)
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Fatalf("stray cgroup left: %v", err)
	}
	if st, _ := r.Status(ctx, "rt-live"); st != steadrt.StatusRunning {
		t.Fatalf("live sandbox hurt by the sweep: %s", st)
	}
}

// buildStaticInit builds cmd/stead-init as scripts/build.sh does (pure
// Go, static) into a temp dir of t and returns its path.
func buildStaticInit(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stead-init")
	cmd := exec.Command("go", "build", "-trimpath", "-o", path, "github.com/stead-dev/stead/cmd/stead-init")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build stead-init: %v: %s", err, out)
	}
	return path
}
