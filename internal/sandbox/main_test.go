package sandbox

import (
	"os"
	"testing"

	"github.com/stead-dev/stead/internal/guest"
	"github.com/stead-dev/stead/internal/runtime/linux"
)

// TestMain lets the test binary play the stead binary's re-exec roles.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case linux.InitArg:
			linux.InitHook()
		case linux.SandboxInitArg:
			guest.Main()
		}
	}
	os.Exit(m.Run())
}
