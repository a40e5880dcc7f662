package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/guest"
)

// Shells (Options.Shells): inits spawned ahead, each in new namespaces
// (user, with the id mapping of a slot it holds; mount, pid, network, IPC,
// UTS) and its own cgroups, holding nothing of any sandbox. A native start
// claims one instead of spawning its init: it hands the shell, on its
// setup socket, what a spawn would have given it (the sandbox's log, init
// socket, config and detached trees), renames the shell's cgroups to the
// sandbox's and writes the sandbox's limits into them. The fork, the id
// maps, the cgroup join (which waits for an RCU grace period) and, with
// Options.ShellNetwork, the network's links are then off the start's path;
// the shell sets the sandbox up as a spawned init does (guest/setup.go).
//
// A shell runs none of a sandbox's code and sees none of its files until
// it is claimed, and it is claimed once: a warm pool's sandboxes
// (identity-less work) are whole sandboxes, a shell is only the empty
// namespaces. A shell exits when the runtime's end of its setup socket
// closes: a daemon that dies takes its shells along. Its cgroups, left
// empty, are a later runtime's Sweep's.

// shell is one init spawned ahead.
type shell struct {
	name  string // its cgroup name and its id in the shim
	slot  int    // its user-namespace slot (-1: none)
	pid   int
	sock  *os.File    // the runtime's end of its setup socket
	proc  *os.Process // nil when the shim spawned it
	paths map[string]string
}

// shellRefillDelay is how long after a start the runtime spawns the
// shell it took (a start's caller has more to do: a create's record, its
// reply, the first exec, about 10 ms here).
const shellRefillDelay = 30 * time.Millisecond

// shellPrefix starts every shell's name: a sandbox id never does (ids
// the daemon makes start with a letter).
const shellPrefix = "_shell-"

// fillShells keeps Options.Shells shells ready, spawning the missing ones
// in the background (one filler at a time). A spawn that fails stops the
// filling until the next start: starts spawn their own meanwhile.
func (r *Runtime) fillShells() {
	r.mu.Lock()
	if r.shellFilling || r.shellsClosed || r.opts.Shells <= 0 || len(r.shells) >= r.opts.Shells {
		r.mu.Unlock()
		return
	}
	r.shellFilling = true
	r.shellWG.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.shellWG.Done()
		for {
			r.mu.Lock()
			if r.shellsClosed || len(r.shells) >= r.opts.Shells {
				r.shellFilling = false
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
			sh, err := r.spawnShell(context.Background())
			r.mu.Lock()
			if err != nil || r.shellsClosed {
				r.shellFilling = false
				closed := r.shellsClosed
				r.mu.Unlock()
				if err != nil {
					r.log.Warn("spawn a shell ahead; starts spawn their own init", "err", err)
				} else if closed {
					r.discardShell(sh)
				}
				return
			}
			r.shells = append(r.shells, sh)
			r.mu.Unlock()
		}
	}()
}

// takeShell returns a ready shell, or nil.
func (r *Runtime) takeShell() *shell {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.shells) == 0 {
		return nil
	}
	sh := r.shells[0]
	r.shells = r.shells[1:]
	return sh
}

// shellIsLive reports whether name is a shell this runtime has, ready or
// being spawned or claimed (for Sweep: its cgroups are not leftovers).
func (r *Runtime) shellIsLive(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.shellLive[name]
}

// shellGone forgets a shell claimed (its cgroups renamed) or discarded.
func (r *Runtime) shellGone(sh *shell) {
	r.mu.Lock()
	delete(r.shellLive, sh.name)
	r.mu.Unlock()
}

// closeShells discards every ready shell and stops the filling.
func (r *Runtime) closeShells() {
	r.mu.Lock()
	r.shellsClosed = true
	r.mu.Unlock()
	r.shellWG.Wait()
	r.mu.Lock()
	list := r.shells
	r.shells = nil
	var held []*reservation
	for id, res := range r.reserved {
		held = append(held, res)
		delete(r.reserved, id)
	}
	r.mu.Unlock()
	for _, res := range held {
		res.early.wait()
		list = append(list, res.sh)
	}
	for _, sh := range list {
		r.discardShell(sh)
	}
}

// reservation is a shell taken ahead of its sandbox's Start (Reserve),
// with the sandbox's network attach begun in it.
type reservation struct {
	sh    *shell
	early *networkAttach
}

// Reserve takes a ready shell for sandbox id ahead of its Start and
// begins the sandbox's network attach in it (network is what the Start's
// Spec.Network will be), so that the attach runs beside what the caller
// does before the Start (its record, the sandbox's root). The Start of id
// claims that shell. Without a ready shell Reserve does nothing, and the
// Start goes as before. cancel gives the shell up if no Start is to come
// (a create that failed): it is discarded once the attach has ended, and
// undoing the attach (network.Manager.Detach) is the caller's, as after
// a failed Start. cancel after the Start does nothing.
func (r *Runtime) Reserve(ctx context.Context, id string, network func(context.Context, int) error) (cancel func()) {
	if !r.opts.Native || !validID(id) {
		return func() {}
	}
	sh := r.takeShell()
	if sh == nil {
		return func() {}
	}
	res := &reservation{sh: sh, early: attachNetwork(ctx, network, sh.pid)}
	r.mu.Lock()
	if r.reserved == nil {
		r.reserved = map[string]*reservation{}
	}
	old := r.reserved[id]
	r.reserved[id] = res
	r.mu.Unlock()
	if old != nil { // a second Reserve of id: the first is given up
		r.dropReservation(old)
	}
	return func() {
		r.mu.Lock()
		mine := r.reserved[id] == res
		if mine {
			delete(r.reserved, id)
		}
		r.mu.Unlock()
		if mine {
			r.dropReservation(res)
		}
	}
}

// dropReservation discards a reserved shell once its attach has ended,
// and has the shells refilled.
func (r *Runtime) dropReservation(res *reservation) {
	res.early.wait()
	r.discardShell(res.sh)
	time.AfterFunc(shellRefillDelay, r.fillShells)
}

// takeReservation returns (and forgets) the shell Reserve took for id.
func (r *Runtime) takeReservation(id string) *reservation {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.reserved[id]
	delete(r.reserved, id)
	return res
}

// spawnShell spawns a shell and joins it to cgroups of its own.
func (r *Runtime) spawnShell(ctx context.Context) (_ *shell, retErr error) {
	r.mu.Lock()
	r.shellSeq++
	name := shellPrefix + r.shellTag + "-" + strconv.Itoa(r.shellSeq)
	if r.shellLive == nil {
		r.shellLive = map[string]bool{}
	}
	r.shellLive[name] = true
	r.mu.Unlock()
	sh := &shell{name: name, slot: -1}
	defer func() {
		if retErr != nil {
			r.discardShell(sh)
		}
	}()
	if !r.opts.NoUserNS {
		slot, err := r.allocSlot(name)
		if err != nil {
			return nil, err
		}
		sh.slot = slot
		// The idmapped mounts of the start that claims it.
		if _, err := r.usernsFile(slot); err != nil {
			return nil, err
		}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("shell: setup socket: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "setup")
	defer theirs.Close()
	sh.sock = os.NewFile(uintptr(fds[0]), "setup")
	logf, err := os.OpenFile(filepath.Join(r.opts.RunDir, "shells.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shell: %w", err)
	}
	defer logf.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("shell: %w", err)
	}
	defer null.Close()
	sp := spawnSpec{Args: []string{"/proc/self/fd/" + strconv.Itoa(guest.BinaryFD), SandboxInitArg, guest.ShellArg, boundingArg()},
		Env: initEnv(), Clone: nativeClone}
	if sh.slot >= 0 {
		sp.UserNS, sp.HostID = true, r.hostID(sh.slot)
	}
	// Placeholders where a spawned init has its socket and config: the
	// claim puts them there.
	extra := []*os.File{null, null, r.bin, theirs}
	if sh.pid, sh.proc, err = r.spawn(ctx, name, sp, logf, extra); err != nil {
		return nil, fmt.Errorf("shell: %w", err)
	}
	// The device rules every sandbox has are written now (the claim
	// writes the rest of the sandbox's limits).
	res := &cgroups.Resources{Devices: sandboxDevices()}
	cg, err := manager.NewWithPaths(&cgroups.Cgroup{Name: name, Parent: r.opts.CgroupParent, Resources: res}, r.cgroupPathsOf(name))
	if err != nil {
		return nil, fmt.Errorf("shell: cgroups: %w", err)
	}
	if err := r.unbalancedCpuset(name); err != nil {
		return nil, fmt.Errorf("shell: cgroups: %w", err)
	}
	err = cg.Apply(sh.pid)
	sh.paths = cg.GetPaths()
	if err != nil {
		return nil, fmt.Errorf("shell: join cgroups: %w", err)
	}
	// Ready only once it waits in its own root: one that cannot make it
	// (a host without one of the device nodes) is an error here, not a
	// failed claim at every start.
	if err := awaitShell(sh.sock, shellReadyTimeout); err != nil {
		return nil, fmt.Errorf("shell: %w", err)
	}
	if err := cg.Set(res); err != nil {
		return nil, fmt.Errorf("shell: device rules: %w", err)
	}
	if r.opts.ShellNetwork != nil {
		if err := r.opts.ShellNetwork(ctx, name, sh.pid); err != nil {
			r.log.Warn("make a shell's network links ahead; its start makes them", "shell", name, "err", err)
		}
	}
	return sh, nil
}

// shellReadyTimeout bounds a shell's start (its Go runtime and its
// placeholder root: a few milliseconds).
const shellReadyTimeout = 10 * time.Second

// awaitShell waits for a shell's guest.ShellWaitingMsg on its setup
// socket.
func awaitShell(sock *os.File, timeout time.Duration) error {
	c, err := net.FileConn(sock)
	if err != nil {
		return fmt.Errorf("setup socket: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	msg, err := readSetupMsg(c)
	if err != nil {
		return err
	}
	if msg != guest.ShellWaitingMsg {
		return errors.New(strings.TrimPrefix(msg, "error: "))
	}
	return nil
}

// discardShell kills a shell that will not be claimed (or whose claim
// failed) and removes its cgroups.
func (r *Runtime) discardShell(sh *shell) {
	if sh.pid > 0 {
		if r.shim != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if rep, err := r.shim.call(ctx, shimRequest{Op: "abort", ID: sh.name, Pid: sh.pid}); err == nil {
				closeFiles(rep.files)
			}
			cancel()
		} else if sh.proc != nil {
			sh.proc.Kill()
			sh.proc.Wait()
		}
	}
	if sh.sock != nil {
		sh.sock.Close()
	}
	for _, p := range sh.paths {
		removeCgroupDir(p)
	}
	if sh.slot >= 0 {
		r.freeSlot(sh.name)
	}
	r.shellGone(sh)
}

// killCgroup kills every process in cgroup dir (a v1 hierarchy's or the
// v2 tree's) and removes it (removeCgroupDir).
func killCgroup(dir string) {
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
	removeCgroupDir(dir)
}

// removeCgroupDir removes an (emptied) cgroup directory, waiting a little
// for a killed task to leave it.
func removeCgroupDir(dir string) {
	for range 50 {
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// claim hands sh the sandbox's log, init socket, config and trees (the
// guest's awaitClaim).
func (sh *shell) claim(proc initProcess, trees []*os.File) error {
	// A shell that died (unreaped: a zombie) may still have its end of
	// the socket held by a process that handed it over: the send would
	// not fail.
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(sh.pid) + "/stat"); err != nil || deadStat(b) {
		return fmt.Errorf("claim shell %s: it died", sh.name)
	}
	fds := []int{int(proc.log.Fd()), int(proc.extra[0].Fd()), int(proc.extra[1].Fd())}
	for _, t := range trees {
		fds = append(fds, int(t.Fd()))
	}
	if err := unix.Sendmsg(int(sh.sock.Fd()), []byte("claim"), unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("claim shell %s: %w", sh.name, err)
	}
	return nil
}

// deadStat reports whether a /proc/<pid>/stat says the process exited
// (zombie or dead).
func deadStat(b []byte) bool {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}

// cgroupPaths are the sandbox id's cgroups once moveCgroups made the
// shell's its: beside the shell's, by the sandbox's name.
func (sh *shell) cgroupPaths(id string) map[string]string {
	out := make(map[string]string, len(sh.paths))
	for k, p := range sh.paths {
		out[k] = filepath.Join(filepath.Dir(p), id)
	}
	return out
}

// moveCgroups makes the shell's cgroups sandbox id's (cgroupPaths): each
// is renamed in place where the hierarchy allows it (cgroup v1), else the
// sandbox's is made, init moved into it and the shell's removed (cgroup
// v2 has no rename: the unified hierarchy of a hybrid host, or a v2
// host). It returns the controllers renamed: those keep what spawnShell
// wrote.
func (sh *shell) moveCgroups(id string) (map[string]bool, error) {
	renamed := map[string]bool{}
	for k, to := range sh.cgroupPaths(id) {
		from := sh.paths[k]
		if os.Rename(from, to) == nil {
			renamed[k] = true
			continue
		}
		if err := os.Mkdir(to, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return renamed, fmt.Errorf("cgroup %s: %w", to, err)
		}
		if err := os.WriteFile(filepath.Join(to, "cgroup.procs"), []byte(strconv.Itoa(sh.pid)), 0o644); err != nil {
			return renamed, fmt.Errorf("join cgroup %s: %w", to, err)
		}
		removeCgroupDir(from)
	}
	return renamed, nil
}
