package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func itoa(i int) string { return strconv.Itoa(i) }

// killCgroup SIGKILLs every process listed in a cgroup.procs file.
func killCgroup(t *testing.T, procs string) {
	t.Helper()
	b, err := os.ReadFile(procs)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// cgroupFile finds a file of a sandbox's cgroup in one v1 controller; the
// daemon's cgroup parent is "stead" or "stead-<hash of its run dir>".
func cgroupFile(t *testing.T, ctrl, id, name string) string {
	t.Helper()
	m, _ := filepath.Glob("/sys/fs/cgroup/" + ctrl + "/stead*/" + id + "/" + name)
	if len(m) != 1 {
		t.Fatalf("cgroup file %s of %s in %s: found %v", name, id, ctrl, m)
	}
	return m[0]
}
