// Package testutil holds helpers shared by stead's tests.
package testutil

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// LoopDevicesLeft waits up to 10 s until no loop device is backed by a
// file whose path starts with prefix, and returns those still left then
// ("/dev/loopN: backing file"). An autoclear loop device is released
// when its last user closes it, which the kernel may do a moment after
// the unmount that ended its use.
func LoopDevicesLeft(prefix string) []string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, f := range files {
			if b, _ := os.ReadFile(f); strings.HasPrefix(string(b), prefix) {
				left = append(left, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f)))+": "+strings.TrimSpace(string(b)))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}
