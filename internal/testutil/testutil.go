// Package testutil holds helpers shared by stead's tests.
package testutil

import (
	"os"
	"testing"
)

// RequireRoot stops a test that needs root (namespaces, cgroups, loop
// devices, btrfs). It fails the test rather than skipping it, so CI can never
// go green by silently skipping the integration tests; a developer without
// root may set STEAD_TEST_ALLOW_SKIP=1 to skip instead.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("STEAD_TEST_ALLOW_SKIP") == "1" {
		t.Skip("needs root (skipped because STEAD_TEST_ALLOW_SKIP=1)")
	}
	t.Fatal("this test needs root; run as root or set STEAD_TEST_ALLOW_SKIP=1 to skip")
}
