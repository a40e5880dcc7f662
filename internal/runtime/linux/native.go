package linux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/sys/capability"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/system"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/guest"
	steadrt "github.com/stead-dev/stead/internal/runtime"
)

// stead's own sandbox setup (Options.Native). libcontainer's start costs
// a re-executed setup binary, nsexec's three processes and thousands of
// system calls checking each mount target through /proc/thread-self
// (bench/RESULTS.md, "Cold create against runc run"); here the sandbox's
// init is started straight into its namespaces and makes its own mounts
// (guest/setup.go), and the host does only what needs the host:
//
//   - the root and every bind mount are cloned as detached mount trees
//     (open_tree), idmapped into the sandbox's user namespace and made
//     read-only where asked (mount_setattr) before init starts; init
//     attaches them with move_mount onto targets it resolves inside the
//     root with openat2 RESOLVE_IN_ROOT;
//   - init is forked (by the shim, or here) with the namespaces and the
//     slot's id mapping, and the host joins it to its cgroups and attaches
//     its network while init makes its mounts;
//   - the host writes libcontainer's state file for it, so everything
//     after the start (status, pause, stats, update, kill, destroy,
//     adoption by a new daemon) is libcontainer's, unchanged, on a
//     container it did not start.
//
// The setup socket carries init's "ready" (or its error) and the host's
// "go": init serves nothing before its cgroups and network are in place.

// nativeSetup is what the host prepared for a native start: init's setup
// and the detached trees it attaches (the root's first).
type nativeSetup struct {
	guest *guest.Setup
	trees []*os.File
	// cgroupPaths are the sandbox's cgroups once it started.
	cgroupPaths map[string]string
	// shell, when set, is the shell the start claims instead of spawning
	// an init (shells.go); the start claims or discards it.
	shell *shell
	// network, when set, is the attach started for shell's namespace as
	// soon as the shell was taken.
	network *networkAttach
	// served: init serves from the start's end on (awaitSetup).
	served bool
}

// networkAttach is a sandbox's network attach (Spec.Network) running
// beside the rest of its start.
type networkAttach struct {
	pid  int // whose namespace
	done chan error
	wait func() error
	dur  time.Duration // once done
}

// attachNetwork runs network (if set) for init pid in the background.
func attachNetwork(ctx context.Context, network func(context.Context, int) error, pid int) *networkAttach {
	a := &networkAttach{pid: pid, done: make(chan error, 1)}
	a.wait = sync.OnceValue(func() error { return <-a.done })
	if network == nil {
		a.done <- nil
		return a
	}
	go func() {
		t := time.Now()
		err := network(ctx, pid)
		a.dur = time.Since(t)
		a.done <- err
	}()
	return a
}

// nativeClone are the namespaces a native init is spawned into (the user
// namespace is added with a slot).
const nativeClone = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWPID | unix.CLONE_NEWNET

func (n *nativeSetup) close() { closeFiles(n.trees) }

// capNumber is the number of the capability named as in libcontainer's
// configuration ("CAP_CHOWN").
func capNumber(name string) (int, bool) {
	for _, c := range capability.ListKnown() {
		if "CAP_"+strings.ToUpper(c.String()) == name {
			return int(c), true
		}
	}
	return 0, false
}

// prepareNative makes init's setup from libcontainer's configuration of
// the sandbox (the one source of what a sandbox is) and the detached
// trees; slot is the user-namespace slot (-1: none).
func (r *Runtime) prepareNative(cfg *configs.Config, slot int) (_ *nativeSetup, retErr error) {
	var userns *os.File
	if slot >= 0 {
		var err error
		if userns, err = r.usernsFile(slot); err != nil {
			return nil, err
		}
	}
	n := &nativeSetup{guest: &guest.Setup{
		Hostname:      cfg.Hostname,
		MaskPaths:     cfg.MaskPaths,
		ReadonlyPaths: cfg.ReadonlyPaths,
	}}
	defer func() {
		if retErr != nil {
			n.close()
		}
	}()
	root, err := detachedTree(cfg.Rootfs, idmapMountFlags&^unix.MOUNT_ATTR_IDMAP, userns)
	if err != nil {
		return nil, fmt.Errorf("root %s: %w", cfg.Rootfs, err)
	}
	n.trees = append(n.trees, root)
	for _, m := range cfg.Mounts {
		if m.Device != "bind" {
			n.guest.Mounts = append(n.guest.Mounts, guest.SetupMount{
				Dest: m.Destination, Type: m.Device, Source: m.Source, Flags: uintptr(m.Flags), Data: m.Data})
			continue
		}
		var attr uint64
		for fl, a := range map[int]uint64{unix.MS_RDONLY: unix.MOUNT_ATTR_RDONLY, unix.MS_NODEV: unix.MOUNT_ATTR_NODEV,
			unix.MS_NOSUID: unix.MOUNT_ATTR_NOSUID, unix.MS_NOEXEC: unix.MOUNT_ATTR_NOEXEC} {
			if m.Flags&fl != 0 {
				attr |= a
			}
		}
		var ns *os.File
		if m.IDMapping != nil {
			ns = userns
		}
		t, err := detachedTree(m.Source, attr, ns)
		if err != nil {
			return nil, fmt.Errorf("mount %s: %w", m.Destination, err)
		}
		n.trees = append(n.trees, t)
		var st unix.Stat_t
		if err := unix.Fstat(int(t.Fd()), &st); err != nil {
			return nil, fmt.Errorf("mount %s: %w", m.Destination, err)
		}
		n.guest.Mounts = append(n.guest.Mounts, guest.SetupMount{Dest: m.Destination, Tree: true, File: st.Mode&unix.S_IFMT != unix.S_IFDIR})
	}
	for _, d := range cfg.Devices {
		if name, ok := strings.CutPrefix(d.Path, "/dev/"); ok && !strings.Contains(name, "/") {
			n.guest.Devices = append(n.guest.Devices, name)
		}
	}
	// Everything goes to init in one message (shim.go).
	if len(n.trees)+initDescriptors > shimMaxFiles {
		return nil, fmt.Errorf("%d mounts: a sandbox can have at most %d: %w", len(n.trees)-1, shimMaxFiles-initDescriptors-1, errs.ErrInvalid)
	}
	if cfg.Capabilities != nil {
		for _, c := range cfg.Capabilities.Bounding {
			v, ok := capNumber(c)
			if !ok {
				return nil, fmt.Errorf("capability %s: unknown", c)
			}
			n.guest.Caps = append(n.guest.Caps, v)
		}
	}
	return n, nil
}

// detachedTree clones the mount tree at path (the host's; paths inside a
// sandbox's tree are never given here) as a detached mount with attr set,
// idmapped through userns when given.
func detachedTree(path string, attr uint64, userns *os.File) (*os.File, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return nil, fmt.Errorf("open_tree: %w", err)
	}
	// Private, always: a clone of a mount in a shared peer group joins
	// that group, and mounts made under it in the sandbox (its /proc,
	// binds the agent points at it) would appear on the host, and the
	// host's later mounts in the sandbox.
	ma := unix.MountAttr{Attr_set: attr, Propagation: unix.MS_PRIVATE}
	if userns != nil {
		ma.Attr_set |= unix.MOUNT_ATTR_IDMAP
		ma.Userns_fd = uint64(userns.Fd())
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &ma); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mount_setattr: %w", err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// initDescriptors is how many descriptors a native start hands init
// beside the trees: its log, listening socket, config, binary and setup
// socket.
const initDescriptors = 5

// spawnSpec is how to fork a sandbox's init (by the shim or here).
type spawnSpec struct {
	Args  []string `json:"args"`
	Env   []string `json:"env"`
	Clone uintptr  `json:"clone"`
	// HostID, when UserNS, is the host id of the sandbox's root: the new
	// user namespace maps 0..IDRangeSize-1 from it.
	UserNS bool  `json:"userns,omitempty"`
	HostID int64 `json:"host_id,omitempty"`
}

// spawnInit forks init as spec says with stdout and stderr to logf and
// extra from descriptor 3 on.
func spawnInit(spec spawnSpec, logf *os.File, extra []*os.File) (*os.Process, error) {
	if len(spec.Args) == 0 {
		return nil, errors.New("spawn init: no arguments")
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("spawn init: %w", err)
	}
	defer null.Close()
	sys := &syscall.SysProcAttr{Cloneflags: spec.Clone}
	if spec.UserNS {
		m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(spec.HostID), Size: IDRangeSize}}
		sys.Cloneflags |= unix.CLONE_NEWUSER
		sys.UidMappings, sys.GidMappings = m, m
		sys.GidMappingsEnableSetgroups = true
		// Root of the new namespace once the maps are written.
		sys.Credential = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
	}
	files := append([]*os.File{null, logf, logf}, extra...)
	// Args[0] is /proc/self/fd/<n> of init's binary among extra: the
	// child resolves it after its descriptors are in place.
	p, err := os.StartProcess(spec.Args[0], spec.Args, &os.ProcAttr{Dir: "/", Env: spec.Env, Files: files, Sys: sys})
	if err != nil {
		return nil, fmt.Errorf("spawn init: %w", err)
	}
	return p, nil
}

// startNative starts a sandbox's init with stead's own setup; it returns
// when the container was created (its state dir claimed).
func (r *Runtime) startNative(ctx context.Context, spec steadrt.Spec, cfg *configs.Config, proc initProcess, slot int, setup *nativeSetup) (created time.Time, retErr error) {
	// The shell is this start's from here: claimed below, or discarded
	// on any return before that.
	sh := setup.shell
	setup.shell = nil
	claimed := false
	defer func() {
		if sh != nil && !claimed {
			r.discardShell(sh)
		}
	}()
	stateDir := filepath.Join(r.opts.StateDir, spec.ID)
	err := os.Mkdir(stateDir, 0o711)
	if errors.Is(err, os.ErrExist) {
		// A state dir without a state file is what a crash inside a
		// start leaves (the dir is claimed first); Start's caller holds
		// the sandbox, so no other start of it is in progress.
		if _, serr := os.Stat(filepath.Join(stateDir, "state.json")); errors.Is(serr, os.ErrNotExist) {
			r.log.Info("removing the state dir of a start that did not finish", "sandbox", spec.ID)
			os.RemoveAll(stateDir)
			err = os.Mkdir(stateDir, 0o711)
		}
	}
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return time.Time{}, fmt.Errorf("create sandbox %s: %w (%w)", spec.ID, errStateExists, errs.ErrConflict)
		}
		return time.Time{}, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	created = time.Now()
	stateWritten := false
	var kill func()
	var cg cgroups.Manager
	var pid int
	// shimID names init in the shim: a shell keeps its own name.
	shimID := spec.ID
	defer func() {
		if retErr == nil {
			return
		}
		if stateWritten {
			// The state's destroy (destroyFailedStart) cleans up; it
			// asks the shim to give up the init it names by the
			// sandbox's id, and a claimed shell's goes by its own.
			if claimed && r.shim != nil {
				if rep, err := r.shim.call(context.Background(), shimRequest{Op: "abort", ID: shimID, Pid: pid}); err == nil {
					closeFiles(rep.files)
				}
			}
			return
		}
		if kill != nil {
			kill()
		}
		if cg != nil {
			cg.Destroy()
		}
		os.RemoveAll(stateDir)
	}()
	var setupSock *os.File
	if sh != nil {
		if err := sh.claim(proc, setup.trees); err != nil {
			// Dead since it was spawned: spawn instead.
			r.log.Warn("a shell could not be claimed; spawning init", "sandbox", spec.ID, "err", err)
			r.discardShell(sh)
			sh = nil
		} else {
			claimed = true
			pid, setupSock, shimID = sh.pid, sh.sock, sh.name
			defer setupSock.Close()
			kill = func() { r.discardShell(sh) }
			if sh.proc != nil {
				defer func() {
					if retErr == nil || stateWritten {
						r.reapPid(spec.ID, sh.pid, func() { sh.proc.Wait() })
					}
				}()
			}
		}
	}
	if sh == nil {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return created, fmt.Errorf("start sandbox %s: setup socket: %w", spec.ID, err)
		}
		var theirs *os.File
		setupSock, theirs = os.NewFile(uintptr(fds[0]), "setup"), os.NewFile(uintptr(fds[1]), "setup")
		defer setupSock.Close()
		defer theirs.Close()
		var reap func()
		if pid, kill, reap, err = r.spawnNative(ctx, spec, proc, slot, theirs, setup.trees); err != nil {
			return created, err
		}
		// Only init holds its end now: its exit is an end of file.
		theirs.Close()
		if reap != nil {
			defer func() {
				if retErr == nil || stateWritten {
					reap()
				}
			}()
		}
	}
	tSpawned := time.Now()
	// Init makes its mounts meanwhile, and the network is attached
	// beside the cgroups (it needs only init's namespaces); every return
	// waits for the attach to end.
	attach := setup.network
	if attach != nil && attach.pid != pid {
		// Attached to a shell that could not be claimed: again, to the
		// init spawned instead (Attach replaces what it made).
		attach.wait()
		attach = nil
	}
	if attach == nil {
		attach = attachNetwork(ctx, spec.Network, pid)
	}
	waitNet := attach.wait
	defer waitNet()
	if sh != nil {
		// The sandbox's cgroups are the shell's renamed (moveCgroups;
		// no parse of this process's cgroups and mounts, as manager.New
		// does).
		cg, err = manager.NewWithPaths(cfg.Cgroups, sh.cgroupPaths(spec.ID))
	} else {
		cg, err = manager.NewWithPaths(cfg.Cgroups, r.cgroupPathsOf(spec.ID))
	}
	if err != nil {
		return created, fmt.Errorf("start sandbox %s: cgroups: %w", spec.ID, err)
	}
	var renamed map[string]bool
	if sh != nil {
		// The shell's cgroups become the sandbox's.
		if renamed, err = sh.moveCgroups(spec.ID); err == nil {
			r.shellGone(sh)
		}
	} else if err = r.unbalancedCpuset(spec.ID); err == nil {
		err = cg.Apply(pid)
	}
	if err != nil {
		return created, fmt.Errorf("start sandbox %s: join cgroups: %w", spec.ID, err)
	}
	tApplied := time.Now()
	res := cfg.Cgroups.Resources
	if renamed["devices"] && reflect.DeepEqual(res.Devices, sandboxDevices()) {
		// The shell's (v1) devices cgroup holds every sandbox's device
		// rules already (spawnShell).
		skip := *res
		skip.SkipDevices = true
		res = &skip
	}
	if err := cg.Set(res); err != nil {
		return created, fmt.Errorf("start sandbox %s: set cgroup limits: %w", spec.ID, err)
	}
	tSet := time.Now()
	// The cpu quota is recorded now and written once init is up (Start),
	// so that it does not slow the setup.
	if spec.Limits.CPUs > 0 {
		cfg.Cgroups.Resources.CpuPeriod = cpuPeriod
		cfg.Cgroups.Resources.CpuQuota = int64(spec.Limits.CPUs * cpuPeriod)
	}
	setup.cgroupPaths = cg.GetPaths()
	// The start time libcontainer's liveness check compares with.
	stat, err := system.Stat(pid)
	if err != nil {
		return created, fmt.Errorf("start sandbox %s: init's start time: %w", spec.ID, err)
	}
	st := libcontainer.State{
		BaseState: libcontainer.BaseState{ID: spec.ID, InitProcessPid: pid, InitProcessStartTime: stat.StartTime,
			Created: created.UTC(), Config: *cfg},
		CgroupPaths:    setup.cgroupPaths,
		NamespacePaths: map[configs.NamespaceType]string{},
	}
	for _, ns := range cfg.Namespaces {
		st.NamespacePaths[ns.Type] = ns.GetPath(pid)
	}
	if err := writeState(stateDir, &st); err != nil {
		return created, fmt.Errorf("start sandbox %s: %w", spec.ID, err)
	}
	stateWritten = true
	tState := time.Now()
	if err := waitNet(); err != nil {
		return created, fmt.Errorf("start sandbox %s: network: %w", spec.ID, err)
	}
	tNet := time.Now()
	if setup.served, err = awaitSetup(ctx, setupSock); err != nil {
		return created, fmt.Errorf("start sandbox %s: %w", spec.ID, err)
	}
	r.log.Debug("sandbox set up", "sandbox", spec.ID, "shell", shimID != spec.ID, "spawn", tSpawned.Sub(created), "cgroups_state", tState.Sub(tSpawned), "cgroups_apply", tApplied.Sub(tSpawned), "cgroups_set", tSet.Sub(tApplied),
		"network", attach.dur, "network_wait", tNet.Sub(tState), "setup_wait", time.Since(tNet))
	if r.shim != nil {
		// The shim reaps init from here on; the start does not wait for
		// it to say so (init runs: nothing of the start is left to undo).
		go func() {
			rep, err := r.shim.call(context.Background(), shimRequest{Op: "exec", ID: shimID, Pid: pid})
			if err != nil {
				r.log.Warn("runtime shim: release a started init for reaping", "sandbox", spec.ID, "err", err)
				return
			}
			closeFiles(rep.files)
		}()
	}
	return created, nil
}

// spawnNative forks a sandbox's init (by the shim, or here) into its new
// namespaces, with theirs as its end of the setup socket and the trees
// after it. kill kills it while its start is not done; reap (nil when the
// shim reaps) reaps it once the start is.
func (r *Runtime) spawnNative(ctx context.Context, spec steadrt.Spec, proc initProcess, slot int, theirs *os.File, trees []*os.File) (pid int, kill, reap func(), err error) {
	sp := spawnSpec{Args: proc.args, Env: proc.env, Clone: nativeClone}
	if slot >= 0 {
		sp.UserNS, sp.HostID = true, r.hostID(slot)
	}
	extra := append(append(append([]*os.File{}, proc.extra...), theirs), trees...)
	pid, p, err := r.spawn(ctx, spec.ID, sp, proc.log, extra)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("start sandbox %s: %w", spec.ID, err)
	}
	if p == nil {
		kill = func() {
			if rep, err := r.shim.call(context.Background(), shimRequest{Op: "abort", ID: spec.ID, Pid: pid}); err == nil {
				closeFiles(rep.files)
			}
		}
		return pid, kill, nil, nil
	}
	return pid, func() { p.Kill(); p.Wait() }, func() { r.reapPid(spec.ID, pid, func() { p.Wait() }) }, nil
}

// spawn forks an init as sp says, with stdout and stderr to logf and
// extra from descriptor 3 on: by the shim, which keeps it pending under
// id (p is nil), or here (p is the process, this one's to reap).
func (r *Runtime) spawn(ctx context.Context, id string, sp spawnSpec, logf *os.File, extra []*os.File) (pid int, p *os.Process, err error) {
	if r.shim == nil {
		if p, err = spawnInit(sp, logf, extra); err != nil {
			return 0, nil, err
		}
		return p.Pid, p, nil
	}
	// Not cut short by ctx, as startInShim.
	rep, err := r.shim.call(context.WithoutCancel(ctx), shimRequest{Op: "spawn", ID: id, Spawn: &sp, Extra: len(extra)}, append([]*os.File{logf}, extra...)...)
	if err != nil {
		return 0, nil, err
	}
	closeFiles(rep.files)
	if rep.Pid <= 0 {
		return 0, nil, fmt.Errorf("the shim sent pid %d", rep.Pid)
	}
	return rep.Pid, nil, nil
}

// setupTimeout bounds init's setup (it makes a few dozen mounts).
const setupTimeout = 10 * time.Second

// awaitSetup waits for init's "ready" on the setup socket and answers go;
// served is true when init serves its socket from then on with nothing
// left that can fail (the daemon need not wait for it to answer).
func awaitSetup(ctx context.Context, sync *os.File) (served bool, err error) {
	c, err := net.FileConn(sync)
	if err != nil {
		return false, fmt.Errorf("setup socket: %w", err)
	}
	defer c.Close()
	deadline := time.Now().Add(setupTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	msg, err := readSetupMsg(c)
	if err != nil {
		return false, err
	}
	switch msg {
	case "ready": // guest's readyMsg
		served = true
	case "ready reexec": // readyReexecMsg
	default:
		return false, fmt.Errorf("init's setup: %s", strings.TrimPrefix(msg, "error: "))
	}
	if _, err := c.Write([]byte("go")); err != nil {
		return false, fmt.Errorf("setup socket: %w", err)
	}
	return served, nil
}

// readSetupMsg reads init's next message on its setup connection.
func readSetupMsg(c net.Conn) (string, error) {
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if n == 0 && (err == nil || errors.Is(err, io.EOF)) {
		return "", errors.New("init exited during its setup")
	}
	if err != nil {
		return "", fmt.Errorf("init's setup did not answer: %w", err)
	}
	return string(b[:n]), nil
}

// writeState writes libcontainer's state file of a container started
// natively (temp file and rename, as libcontainer does; the state dir is
// on tmpfs).
func writeState(dir string, st *libcontainer.State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	tmp := filepath.Join(dir, "state.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "state.json")); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// rcuExpedited is the kernel's switch for expedited RCU grace periods.
const rcuExpedited = "/sys/kernel/rcu_expedited"

// expediteRCU turns on expedited RCU grace periods (Options.ExpediteRCU),
// saying so when it changes them; a host where it cannot is only slower.
func expediteRCU(log *slog.Logger) {
	b, err := os.ReadFile(rcuExpedited)
	if err != nil {
		log.Warn("cannot read the RCU setting; sandbox starts wait for normal grace periods", "file", rcuExpedited, "err", err)
		return
	}
	if strings.TrimSpace(string(b)) != "0" {
		return
	}
	if err := os.WriteFile(rcuExpedited, []byte("1"), 0o644); err != nil {
		log.Warn("cannot expedite RCU grace periods; sandbox starts wait for normal ones", "file", rcuExpedited, "err", err)
		return
	}
	log.Warn("expedited RCU grace periods for sandbox starts (a cgroup join waits for one: 8-14 ms, expedited well under 1 ms); serve --expedite-rcu=false leaves the setting alone",
		"sysctl", "kernel.rcu_expedited", "was", "0", "now", "1")
}

// writeCPUQuota writes a cpu quota of cpus cores into the cpu cgroup of
// paths (libcontainer's State.CgroupPaths: by controller on v1, "" on v2).
func writeCPUQuota(paths map[string]string, cpus float64) error {
	quota := int64(cpus * cpuPeriod)
	if dir := paths["cpu"]; dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(cpuPeriod)), 0o644); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.FormatInt(quota, 10)), 0o644)
	}
	if dir := paths[""]; dir != "" {
		return os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(fmt.Sprintf("%d %d", quota, cpuPeriod)), 0o644)
	}
	return errors.New("no cpu cgroup")
}
