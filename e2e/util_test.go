package e2e

import (
	"os"
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
