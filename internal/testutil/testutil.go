// Package testutil holds helpers shared by stead's tests.
package testutil

import (
	"io/fs"
	"os"
	"path/filepath"
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

// CgroupsNamed returns every directory named name below /sys/fs/cgroup, in
// every hierarchy and at any depth (on cgroup v1 the memory controller's
// may sit below the test process's own memory cgroup).
func CgroupsNamed(name string) []string {
	var out []string
	filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if d.Name() == name {
			out = append(out, p)
			return filepath.SkipDir
		}
		return nil
	})
	return out
}
