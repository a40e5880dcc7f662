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
