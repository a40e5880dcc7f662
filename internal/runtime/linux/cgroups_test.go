package linux

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/testutil"
)

func testRootfs(t *testing.T) string {
	root := t.TempDir()
	for _, d := range []string{"proc", "dev", "sys", "tmp", ".stead", "usr"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	for _, l := range []string{"bin", "lib", "lib64"} {
		os.Symlink("usr/"+l, filepath.Join(root, l))
	}
	return root
}

// TestCloseRemovesEmptyCgroupParentsWhereLibcontainerMadeThem: a runtime
// records the parent directory of every hierarchy as libcontainer computes
// it (the memory one below this process's own memory cgroup on a v1 host
// like this one), keeps them while a sandbox runs, and Close removes them
// all once no sandbox is left: nothing named after the runtime's cgroup
// parent remains anywhere under /sys/fs/cgroup.
func TestCloseRemovesEmptyCgroupParentsWhereLibcontainerMadeThem(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	exe, _ := os.Executable()
	state := filepath.Join(dir, "state")
	r, err := New(Options{StateDir: state, RunDir: filepath.Join(dir, "run"), Binary: exe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { RemoveHostState(state) })
	ctx := context.Background()
	if err := r.Start(ctx, steadrt.Spec{ID: "rt-cg", Rootfs: testRootfs(t), Mounts: []steadrt.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}},
		Limits: steadrt.Limits{CPUs: 1, MemoryBytes: 256 << 20, Pids: 64}}); err != nil {
		t.Fatal(err)
	}
	recorded := readParents(state)
	if len(recorded) == 0 {
		t.Fatal("no cgroup parent recorded")
	}
	found := testutil.CgroupsNamed(r.opts.CgroupParent)
	for _, p := range found {
		if !slices.Contains(recorded, p) {
			t.Errorf("cgroup parent %s exists but is not recorded (%v)", p, recorded)
		}
	}
	var mem bool
	for _, p := range found {
		mem = mem || strings.HasPrefix(p, "/sys/fs/cgroup/memory/")
	}
	if len(found) < 2 || (!mem && !fileIsDir("/sys/fs/cgroup/unified")) {
		t.Fatalf("cgroup parents found: %v", found)
	}
	t.Logf("cgroup parents: %v", found)
	// A daemon that stops while the sandbox runs keeps its parents.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Status(ctx, "rt-cg"); st != steadrt.StatusRunning {
		t.Fatalf("sandbox after Close: %s", st)
	}
	if got := testutil.CgroupsNamed(r.opts.CgroupParent); len(got) != len(found) {
		t.Fatalf("Close with a running sandbox removed parents: %d of %d left", len(got), len(found))
	}
	// A new runtime on the same state adopts it; once it is gone, Close
	// leaves nothing.
	r2, err := New(Options{StateDir: state, RunDir: filepath.Join(dir, "run"), Binary: exe})
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Kill(ctx, "rt-cg"); err != nil {
		t.Fatal(err)
	}
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	if left := testutil.CgroupsNamed(r.opts.CgroupParent); len(left) > 0 {
		t.Fatalf("cgroups left after the last sandbox and Close: %v", left)
	}
	if _, err := os.Stat(filepath.Join(state, parentsFile)); !os.IsNotExist(err) {
		t.Fatalf("record left: %v", err)
	}
	if _, err := os.Stat(r.opts.RootfsDir); !os.IsNotExist(err) {
		t.Fatalf("rootfs dir %s left: %v", r.opts.RootfsDir, err)
	}
}

// TestRemoveHostStateTakesWhatAKilledDaemonLeft: a runtime that is never
// closed (its daemon killed) leaves shells waiting in cgroups of their own
// and, after a start it did not finish, an empty sandbox cgroup.
// RemoveHostState kills the shells and removes their cgroups and the
// empty one, keeps a running sandbox's cgroups (and says so), and once
// that sandbox is gone leaves nothing named after the runtime's parent.
func TestRemoveHostStateTakesWhatAKilledDaemonLeft(t *testing.T) {
	r, root := newSkeletonRuntime(t, func(o *Options) { o.Native, o.Shells = true, 2 })
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	if err := r.Start(ctx, steadrt.Spec{ID: "rt-keep", Rootfs: root, Mounts: []steadrt.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}}}); err != nil {
		t.Fatal(err)
	}
	shells := waitShells(t, r, 2)
	parents := testutil.CgroupsNamed(r.opts.CgroupParent)
	if len(parents) == 0 {
		t.Fatal("no cgroup parent")
	}
	for _, p := range parents {
		if err := os.Mkdir(filepath.Join(p, "sb-gone"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	state := r.opts.StateDir
	err := RemoveHostState(state)
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("RemoveHostState with a sandbox running: %v, want the cgroups it keeps named", err)
	}
	for _, sh := range shells {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(sh.pid) + "/stat")
		if err == nil && !deadStat(b) {
			t.Errorf("shell %s (pid %d) still runs", sh.name, sh.pid)
		}
	}
	for _, p := range parents {
		ents, err := os.ReadDir(p)
		if err != nil {
			t.Fatalf("parent %s of a running sandbox: %v", p, err)
		}
		var kids []string
		for _, e := range ents {
			if e.IsDir() {
				kids = append(kids, e.Name())
			}
		}
		if !slices.Equal(kids, []string{"rt-keep"}) {
			t.Errorf("%s holds %v, want only the running sandbox's cgroup", p, kids)
		}
	}
	if st, _ := r.Status(ctx, "rt-keep"); st != steadrt.StatusRunning {
		t.Fatalf("the running sandbox after RemoveHostState: %s", st)
	}
	if err := r.Kill(ctx, "rt-keep"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveHostState(state); err != nil {
		t.Fatal(err)
	}
	if left := testutil.CgroupsNamed(r.opts.CgroupParent); len(left) > 0 {
		t.Fatalf("cgroups left: %v", left)
	}
}
