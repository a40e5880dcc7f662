package daemon

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAnInheritedDescriptorDoesNotReachAChild: a descriptor the daemon
// got without close-on-exec (as from a flock(1) wrapper) is not open in a
// process the daemon starts once keepInheritedFromChildren ran.
func TestAnInheritedDescriptorDoesNotReachAChild(t *testing.T) {
	fd, err := unix.Open(filepath.Join(t.TempDir(), "lock"), unix.O_RDWR|unix.O_CREAT, 0o600) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	open := func() bool {
		t.Helper()
		out, err := exec.Command("/bin/sh", "-c", "ls /proc/self/fd").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(" "+strings.Join(strings.Fields(string(out)), " ")+" ", " "+strconv.Itoa(fd)+" ")
	}
	if !open() {
		t.Fatalf("descriptor %d without close-on-exec did not reach the child: the test proves nothing", fd)
	}
	if err := keepInheritedFromChildren(); err != nil {
		t.Fatal(err)
	}
	if open() {
		t.Fatalf("descriptor %d reached a child after keepInheritedFromChildren", fd)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		t.Fatalf("the descriptor itself was closed: %v", err)
	}
}
