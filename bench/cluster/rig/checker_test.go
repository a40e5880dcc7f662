package rig

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestDyingSeesAKillPendingInAFrozenCgroup: a process killed while its
// cgroup is frozen still exists, but it will never run again, and the
// checker must not count it; a live process counts.
func TestDyingSeesAKillPendingInAFrozenCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (cgroups)")
	}
	dir := filepath.Join("/sys/fs/cgroup/freezer", fmt.Sprintf("stead-rigtest-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := os.StartProcess("/bin/sleep", []string{"sleep", "60"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0)
		p.Kill()
		p.Wait()
		os.Remove(dir)
	})
	if dying(p.Pid) {
		t.Fatal("a sleeping process counted as dying")
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(p.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("FROZEN"), 0); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		if b, _ := os.ReadFile(filepath.Join(dir, "freezer.state")); string(b) == "FROZEN\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cgroup did not freeze")
		}
	}
	if dying(p.Pid) {
		t.Fatal("a frozen process counted as dying before any kill")
	}
	if err := syscall.Kill(p.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", p.Pid)); err != nil {
		t.Fatalf("the frozen process went at once: %v", err)
	}
	if !dying(p.Pid) {
		t.Fatal("a frozen process with SIGKILL pending did not count as dying")
	}
	os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0)
	p.Wait()
	if !dying(p.Pid) {
		t.Fatal("a reaped process did not count as dying")
	}
}
