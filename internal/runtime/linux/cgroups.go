package linux

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"

	"github.com/stead-dev/stead/internal/fsutil"
)

// Cgroup parents. libcontainer makes a sandbox's cgroup <CgroupParent>/<id>
// in every hierarchy, relative to the cgroup of the process that starts it:
// on cgroup v1 below that process's own cgroup in each controller (so the
// memory controller's may sit deeper than the others, for example
// /sys/fs/cgroup/memory/process_api/<hash>/stead-<hash> while the cpu one is
// /sys/fs/cgroup/cpu/stead-<hash>), on v2 below the parent of its own
// cgroup. libcontainer removes a sandbox's cgroup with the sandbox, never
// the parents it made for it. So the runtime records every parent
// directory it may use (StateDir/cgroup-parents, one a line, written
// durably before any sandbox starts; a daemon restarted in another cgroup
// adds its own, and its adopted sandboxes keep theirs) and removes the ones
// left empty: Close (a daemon that stops), Sweep (those of earlier runs)
// and RemoveHostState (a runtime that will not be used again). A parent
// that still holds a sandbox is left alone: rmdir of a cgroup with
// children fails.

// parentsFile lists, in StateDir, the cgroup parent directories used.
const parentsFile = "cgroup-parents"

// parentDirs returns the directories libcontainer makes as parent in each
// hierarchy for a sandbox started by this process (the same computation:
// a manager for a probe cgroup, which creates nothing).
func parentDirs(parent string) ([]string, error) {
	bySub, err := parentDirsBySubsystem(parent)
	if err != nil {
		return nil, err
	}
	return dirsOf(bySub), nil
}

// dirsOf is the directories of a parentDirsBySubsystem, sorted, each once.
func dirsOf(bySub map[string]string) []string {
	return slices.Compact(slices.Sorted(maps.Values(bySub)))
}

// parentDirsBySubsystem is parentDirs by controller (the keys of a
// manager's GetPaths).
func parentDirsBySubsystem(parent string) (map[string]string, error) {
	m, err := manager.New(&cgroups.Cgroup{Name: "probe", Parent: parent, Resources: &cgroups.Resources{}})
	if err != nil {
		return nil, fmt.Errorf("cgroup paths of %s: %w", parent, err)
	}
	out := map[string]string{}
	for k, p := range m.GetPaths() {
		if p != "" {
			out[k] = filepath.Dir(p)
		}
	}
	return out, nil
}

// cgroupPathsOf are the paths libcontainer would give cgroup name below
// this process's parents (no read of the mount table, as a new manager
// does: it grows with the sandboxes' mounts).
func (r *Runtime) cgroupPathsOf(name string) map[string]string {
	out := make(map[string]string, len(r.parentBySub))
	for k, d := range r.parentBySub {
		out[k] = filepath.Join(d, name)
	}
	return out
}

// readParents returns the parent directories recorded in stateDir.
func readParents(stateDir string) []string {
	b, err := os.ReadFile(filepath.Join(stateDir, parentsFile))
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if ownedParent(l) {
			out = append(out, l)
		}
	}
	return out
}

// ownedParent reports whether p can be a parent this package made: a
// stead-named directory below /sys/fs/cgroup (the record is root's, but a
// removal is never aimed elsewhere).
func ownedParent(p string) bool {
	return filepath.IsAbs(p) && filepath.Clean(p) == p && strings.HasPrefix(p, "/sys/fs/cgroup/") &&
		strings.HasPrefix(filepath.Base(p), "stead")
}

// writeParents records dirs in stateDir (durably); none removes the record.
func writeParents(stateDir string, dirs []string) error {
	path := filepath.Join(stateDir, parentsFile)
	if len(dirs) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove cgroup record: %w", err)
		}
		return nil
	}
	return fsutil.WriteFileAtomic(path, []byte(strings.Join(dirs, "\n")+"\n"), 0o600)
}

// recordParents adds this process's parent directories to the record.
func (r *Runtime) recordParents() error {
	bySub, err := parentDirsBySubsystem(r.opts.CgroupParent)
	if err != nil {
		return err
	}
	r.parentBySub = bySub
	cur := dirsOf(bySub)
	r.parents = cur
	old := readParents(r.opts.StateDir)
	all := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(old), cur...))))
	if slices.Equal(all, old) {
		return nil
	}
	return writeParents(r.opts.StateDir, all)
}

// removeEmptyParents removes the recorded parent directories that hold no
// cgroup (all but keep), updates the record and returns what is left.
func removeEmptyParents(stateDir string, keep []string) []string {
	var left []string
	for _, d := range readParents(stateDir) {
		if slices.Contains(keep, d) {
			left = append(left, d)
			continue
		}
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			left = append(left, d)
		}
	}
	writeParents(stateDir, left)
	return left
}

// Close removes the cgroup parents of this runtime that no sandbox uses
// (running sandboxes keep theirs; a later runtime on the same StateDir
// reuses and eventually removes them) and its rootfs directory if empty.
// Call it when the daemon stops; the runtime must not start sandboxes
// afterwards.
func (r *Runtime) Close() error {
	r.closeShells()
	r.views.mu.Lock()
	r.views.forgetPid()
	r.views.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if left := removeEmptyParents(r.opts.StateDir, nil); len(left) > 0 {
		r.log.Info("cgroup parents kept for running sandboxes", "cgroups", len(left))
	}
	os.Remove(r.opts.RootfsDir) // if empty: sandboxes' roots are there only while they start
	// Inits started by this runtime that still run are still reaped when
	// they exit: by this process (no shim) until it exits, or by the shim,
	// which stays until the last of its own has exited or this process
	// exits. Close waits for neither.
	if r.watch != nil && r.watch.Len() == 0 {
		r.watch.Close()
		r.watch = nil
	}
	// The shim goes once the inits it started have exited.
	if r.shim != nil {
		r.shim.close()
	}
	return nil
}

// RemoveHostState removes what a runtime on stateDir made outside it, for
// a runtime that will not be used again (tests, drills, uninstall): its
// shells made ahead (a killed daemon leaves them waiting, and then their
// cgroups), the empty cgroups of sandboxes that are gone, its parent
// cgroups, wherever libcontainer made them, and its (empty) rootfs
// directory. Cgroups that still hold sandboxes are left alone and reported
// in the error.
func RemoveHostState(stateDir string) error {
	// Parents from before the record (and this process's own).
	parent := cgroupParentFor(stateDir)
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent)
	dirs = append(dirs, "/sys/fs/cgroup/"+parent)
	if cur, err := parentDirs(parent); err == nil {
		dirs = append(dirs, cur...)
	}
	for _, d := range append(readParents(stateDir), dirs...) {
		removeLeftChildren(d)
	}
	left := removeEmptyParents(stateDir, nil)
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) && !slices.Contains(left, d) {
			left = append(left, d)
		}
	}
	os.Remove(rootfsDirFor(stateDir)) // if empty
	if len(left) > 0 {
		return fmt.Errorf("remove host state of %s: cgroups still in use: %s", stateDir, strings.Join(left, ", "))
	}
	return nil
}

// removeLeftChildren removes, below the parent cgroup dir, each shell's
// cgroup (its waiting init killed first: a shell is no sandbox yet) and
// each empty cgroup; a cgroup that still holds a sandbox's processes
// stays.
func removeLeftChildren(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !validID(e.Name()) {
			continue
		}
		child := filepath.Join(dir, e.Name())
		if !strings.HasPrefix(e.Name(), shellPrefix) {
			os.Remove(child) // fails while it holds processes
			continue
		}
		killCgroup(child)
	}
}

// CgroupParentFor names the cgroup parent a runtime on stateDir uses by
// default (for tests that look for what it left).
func CgroupParentFor(stateDir string) string { return cgroupParentFor(stateDir) }

// rootCpusetBalanced reports whether the cpuset hierarchy (cgroup v1) has
// its root balanced over every CPU (the default; cgroup v2 has no such
// flag).
func rootCpusetBalanced() bool {
	if cgroups.IsCgroup2UnifiedMode() {
		return false
	}
	mnt, err := cgroups.FindCgroupMountpoint("", "cpuset")
	if err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(mnt, "cpuset.sched_load_balance"))
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// unbalancedCpuset makes cgroup name's cpuset (cgroup v1) before its
// Apply (ours or libcontainer's), with
// cpuset.sched_load_balance off: each write of a balanced cpuset's CPUs,
// and its removal, has the kernel rebuild the scheduler's domains, which
// walks every cpuset (a cost that grows with the sandboxes). A sandbox's
// cpuset needs no domain of its own: with the root cpuset balanced (the
// default) the scheduler balances over every CPU whatever its children
// say. Nothing is done where the root is not balanced (an administrator's
// partitioning), on cgroup v2 or without a cpuset.
func (r *Runtime) unbalancedCpuset(name string) error {
	p := r.cgroupPathsOf(name)["cpuset"]
	if p == "" || !r.unbalance {
		return nil
	}
	// Its parents as Apply would make them (their CPUs are copied in
	// once, by Apply).
	if err := os.MkdirAll(p, 0o755); err != nil {
		return fmt.Errorf("cpuset %s: %w", p, err)
	}
	if err := os.WriteFile(filepath.Join(p, "cpuset.sched_load_balance"), []byte("0"), 0o644); err != nil {
		return fmt.Errorf("cpuset %s: %w", p, err)
	}
	return nil
}
