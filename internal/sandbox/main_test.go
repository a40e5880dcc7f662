// Init starts in the host's cgroups and sets its sandbox up before it
// joins the sandbox's: the Go runtime must not open the host's cgroup
// files to size GOMAXPROCS (Go 1.25's container-aware GOMAXPROCS keeps
// them open, and the sandbox's root could read them through /proc/1/fd).
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0

package sandbox

import (
	"os"
	"testing"

	"github.com/stead-dev/stead/internal/runtime/linux"
)

// TestMain lets the test binary play the stead binary's re-exec roles.
func TestMain(m *testing.M) {
	if linux.RunRole() {
		return
	}
	os.Exit(m.Run())
}
