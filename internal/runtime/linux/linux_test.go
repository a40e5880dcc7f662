package linux

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stead-dev/stead/internal/guest"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/runtime/runtimetest"
	"github.com/stead-dev/stead/internal/testutil"
)

// TestMain lets the test binary play the stead binary's re-exec roles.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case InitArg:
			InitHook()
		case SandboxInitArg:
			guest.Main()
		}
	}
	os.Exit(m.Run())
}

func TestRuntimeContract(t *testing.T) {
	runtimetest.Run(t, func(t *testing.T, dir string) steadrt.Runtime {
		testutil.RequireRoot(t)
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		r, err := New(Options{StateDir: filepath.Join(dir, "state"), RunDir: filepath.Join(dir, "run"), Binary: exe, CgroupParent: "stead-test"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
}
