// Package linux is the Linux Runtime: namespaces including a user
// namespace per sandbox, cgroups v1 or v2, capabilities, no_new_privs, with
// stead's init (package guest) as every sandbox's PID 1 and stead's own
// seccomp filter installed by that init. By default a sandbox is set up by
// stead itself (native.go: its init makes its own mounts on trees the host
// cloned); with Options.Native off, runc's libcontainer sets it up.
// Either way the state is libcontainer's, and libcontainer (used
// in-process) pauses, updates, signals, destroys and adopts sandboxes.
//
// The stead binary re-executes itself twice: as "init" for libcontainer's
// container setup (InitHook) and as "sandbox-init" for guest.Main inside the
// sandbox. The binary given as Options.Binary is handed to the sandbox as a
// descriptor of a read-only, detached mount of it (nothing of the host is
// mounted for it, so the sandbox's mountinfo names no host path) and must
// be statically linked to run in images without a libc. Init's
// configuration arrives the same way, as a descriptor.
package linux

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"golang.org/x/sys/unix"

	// Device cgroup rules need the devices package linked in.
	_ "github.com/opencontainers/cgroups/devices"
	devconfig "github.com/opencontainers/cgroups/devices/config"
	// Required for libcontainer's container setup (cgo).
	_ "github.com/opencontainers/runc/libcontainer/nsenter"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/fdwatch"
	"github.com/stead-dev/stead/internal/guest"
	steadrt "github.com/stead-dev/stead/internal/runtime"
)

// InitArg is the argument libcontainer re-executes the binary with.
const InitArg = "init"

// SandboxInitArg is the argument stead's init runs with inside a sandbox.
const SandboxInitArg = "sandbox-init"

// InitHook is libcontainer's container-setup entry point; call it from main
// when os.Args[1] == InitArg. It never returns.
func InitHook() { libcontainer.Init() }

// RunRole runs the role the stead binaries are re-executed in when
// os.Args[1] names one (InitArg: libcontainer's container setup;
// SandboxInitArg: stead's init, PID 1 inside a sandbox; ShimArg: the
// runtime's shim) and reports whether it did; call it first in main, and
// go on as the command when it returns false.
func RunRole() bool {
	if len(os.Args) < 2 {
		return false
	}
	switch os.Args[1] {
	case InitArg:
		InitHook()
	case SandboxInitArg:
		guest.Main()
	case ShimArg:
		ShimMain()
	default:
		return false
	}
	return true
}

// Options configure the runtime.
type Options struct {
	// StateDir holds libcontainer's state (tmpfs, e.g. /run/stead/containers).
	StateDir string
	// RunDir holds one directory per sandbox with init's socket and config
	// (e.g. /run/stead/sandboxes).
	RunDir string
	// Binary is the init bind-mounted into sandboxes at guest.BinaryPath and
	// run there as PID 1 with the argument SandboxInitArg (stead-init, or
	// the stead binary itself). Default: this process's executable.
	Binary string
	// CgroupParent is the cgroup every sandbox is created under. It must
	// belong to this runtime alone (Sweep removes what it does not know);
	// the default derives it from StateDir.
	CgroupParent string
	// RootfsDir holds the idmapped root mounts of sandboxes while they
	// start; every directory above it must be searchable by others (o+x):
	// the sandbox's root is an unprivileged host id. Default: /run/stead-rootfs
	// for the default StateDir, else a name unique to StateDir.
	RootfsDir string
	// IDBase is the first host id of the user-namespace ranges (default
	// DefaultIDBase); IDSlots the number of ranges (default DefaultIDSlots).
	IDBase  uint32
	IDSlots int
	// NoSeccomp disables stead's seccomp filter (for measurements only).
	NoSeccomp bool
	// NoUserNS runs sandboxes without a user namespace (root inside is
	// root on the host): for measurements only.
	NoUserNS bool
	// ExpediteRCU sets the host's /sys/kernel/rcu_expedited to 1 (logged
	// when it changes): joining a process to its cgroups (cgroup v1) and
	// an unmount wait for an RCU grace period, 8-14 ms on this machine
	// kind, and an expedited one takes well under a millisecond.
	ExpediteRCU bool
	// Native starts sandboxes with stead's own setup (native.go) instead
	// of libcontainer's; everything after the start is libcontainer's
	// either way.
	Native bool
	// Shim is the binary of the runtime's shim (shim.go: it forks every
	// sandbox process; stead-shim, or any binary that runs ShimMain for
	// ShimArg and InitHook for InitArg). Empty: libcontainer runs in this
	// process.
	Shim string
	// Shells is how many inits a native runtime keeps spawned ahead, in
	// their namespaces and cgroups, for starts to claim (shells.go); 0:
	// every start spawns its own.
	Shells int
	// ShellNetwork, when set, makes a shell's network links ahead (name
	// is the shell's, pid its init): package network's Prepare, which
	// the start's Spec.Network then finds in the namespace. A failure
	// leaves the links to Spec.Network.
	ShellNetwork func(ctx context.Context, name string, pid int) error
	Logger       *slog.Logger
}

// Runtime runs sandboxes with libcontainer.
type Runtime struct {
	opts Options
	log  *slog.Logger

	// bin is an O_PATH descriptor of a read-only detached mount of
	// Options.Binary, exec'd as every sandbox's init.
	bin *os.File

	mu         sync.Mutex
	containers map[string]*libcontainer.Container
	slots      *slotTable       // sandbox id → user-namespace slot
	userns     map[int]*os.File // slot → a user namespace with its mapping
	views      procViews        // lxcfs and cpusets (procviews.go)
	parents    []string         // this process's cgroup parent directories (cgroups.go)
	// parentBySub is parents by controller, for cgroupPathsOf.
	parentBySub map[string]string
	watch       *fdwatch.Watcher // the pidfds of started inits until they exit (reap)
	shim        *shim            // nil without Options.Shim
	// unbalance: sandboxes' cpusets go unbalanced (cgroups.go), set at New.
	unbalance bool

	// Shells (shells.go), under mu.
	shells       []*shell
	shellFilling bool
	shellsClosed bool
	shellSeq     int
	shellTag     string                  // this runtime's part of its shells' names
	shellLive    map[string]bool         // names of shells not yet claimed or discarded
	reserved     map[string]*reservation // shells taken ahead of a Start (Reserve), by sandbox
	shellWG      sync.WaitGroup
}

var _ steadrt.Runtime = (*Runtime)(nil)

// New returns a runtime; it adopts sandboxes already running under StateDir.
func New(opts Options) (*Runtime, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.CgroupParent == "" {
		opts.CgroupParent = cgroupParentFor(opts.StateDir)
	}
	if opts.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find stead binary: %w", err)
		}
		opts.Binary = exe
	}
	if opts.RootfsDir == "" {
		opts.RootfsDir = rootfsDirFor(opts.StateDir)
	}
	if opts.IDBase == 0 {
		opts.IDBase = DefaultIDBase
	}
	if opts.IDSlots <= 0 {
		opts.IDSlots = DefaultIDSlots
	}
	if int64(opts.IDBase)+int64(opts.IDSlots)*IDRangeSize > 1<<31 {
		return nil, fmt.Errorf("user-namespace ids %d + %d ranges of %d exceed 2^31: %w", opts.IDBase, opts.IDSlots, IDRangeSize, errs.ErrInvalid)
	}
	for _, d := range []string{opts.StateDir, opts.RunDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create runtime dir: %w", err)
		}
	}
	if !opts.NoUserNS {
		if err := makeRootfsDir(opts.RootfsDir); err != nil {
			return nil, err
		}
		if !searchable(opts.RootfsDir) {
			return nil, fmt.Errorf("rootfs dir %s: a directory above it is not searchable by others (o+x), which sandboxes' unprivileged roots need: %w", opts.RootfsDir, errs.ErrInvalid)
		}
	}
	if opts.ExpediteRCU {
		expediteRCU(opts.Logger)
	}
	bin, err := readOnlyBinary(opts.Binary)
	if err != nil {
		return nil, err
	}
	r := &Runtime{opts: opts, log: opts.Logger, bin: bin, containers: map[string]*libcontainer.Container{},
		slots: newSlotTable(), userns: map[int]*os.File{}, unbalance: rootCpusetBalanced()}
	if opts.Shim != "" {
		r.shim = newShim(opts.Shim, opts.StateDir, opts.Logger)
	}
	if err := r.recordParents(); err != nil {
		bin.Close()
		return nil, err
	}
	r.loadSlots()
	if !opts.NoUserNS {
		r.prewarm()
	}
	if opts.Native {
		r.shellTag = strconv.FormatInt(time.Now().UnixNano()%(1<<40), 36)
		r.fillShells()
	}
	return r, nil
}

// readOnlyBinary returns an O_PATH descriptor of a detached, read-only,
// nosuid clone of the mount holding path (just that file): a sandbox's init
// is exec'd from it, so even a process that reaches /proc/1/exe finds a
// read-only file.
func readOnlyBinary(path string) (*os.File, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("clone init binary %s: %w", path, err)
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{
		Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("make init binary read-only: %w", err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

func (r *Runtime) runDir(id string) string { return filepath.Join(r.opts.RunDir, id) }

// load returns the container for id, or nil if the runtime has no state.
func (r *Runtime) load(id string) (*libcontainer.Container, error) {
	if !validID(id) {
		return nil, fmt.Errorf("sandbox id %q: %w", id, errs.ErrInvalid)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.containers[id]; ok {
		return c, nil
	}
	c, err := libcontainer.Load(r.opts.StateDir, id)
	if err != nil {
		if errors.Is(err, libcontainer.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("load sandbox %s: %w", id, err)
	}
	r.containers[id] = c
	return c, nil
}

func (r *Runtime) forget(id string) {
	r.mu.Lock()
	delete(r.containers, id)
	r.mu.Unlock()
}

func validID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Start creates and starts a sandbox and waits until its init answers.
func (r *Runtime) Start(ctx context.Context, spec steadrt.Spec) (retErr error) {
	tEntry := time.Now()
	if !validID(spec.ID) {
		return fmt.Errorf("sandbox id %q: %w", spec.ID, errs.ErrInvalid)
	}
	if c, err := r.load(spec.ID); err != nil {
		return err
	} else if c != nil {
		return fmt.Errorf("start sandbox %s: runtime state exists: %w", spec.ID, errs.ErrConflict)
	}
	rd := r.runDir(spec.ID)
	os.RemoveAll(rd)
	if err := os.MkdirAll(rd, 0o700); err != nil {
		return fmt.Errorf("start sandbox %s: %w", spec.ID, err)
	}
	defer func() {
		if retErr != nil {
			os.RemoveAll(rd)
		}
	}()
	icfg := guest.Config{Env: spec.Env, Service: spec.Service, Seccomp: !r.opts.NoSeccomp}
	slot := -1
	var (
		rootfsDur time.Duration
		err       error
		sh        *shell
		early     *networkAttach
	)
	if r.opts.Native {
		// A shell spawned ahead, if one is ready; its slot becomes the
		// sandbox's. The next one is spawned once this start is over.
		if res := r.takeReservation(spec.ID); res != nil {
			// Taken ahead (Reserve): its network attach has been
			// running since.
			sh, early = res.sh, res.early
			defer early.wait()
		} else if sh = r.takeShell(); sh != nil {
			// The shell's namespace exists: its network is attached
			// beside everything else of the start from now on (every
			// return waits for it).
			early = attachNetwork(ctx, spec.Network, sh.pid)
			defer early.wait()
		}
		// Not at once: the spawn would compete for the CPU with the
		// rest of this create (its record, its reply, its first exec).
		defer time.AfterFunc(shellRefillDelay, r.fillShells)
	}
	if !r.opts.NoUserNS {
		if sh != nil {
			slot = r.moveSlot(sh.name, spec.ID)
		} else if slot, err = r.allocSlot(spec.ID); err != nil {
			return err
		}
		// The next start's user namespace, once this one is up.
		defer func() {
			if retErr == nil {
				r.prewarm()
			}
		}()
		defer func() {
			if retErr != nil {
				r.freeSlot(spec.ID)
			}
		}()
	}
	// A shell not handed to the start (a failure before it) is discarded,
	// before its slot is freed above: it runs with that slot's ids.
	defer func() {
		if sh != nil {
			r.discardShell(sh)
		}
	}()
	if !r.opts.NoUserNS && !r.opts.Native {
		tm := time.Now()
		root, err := r.mountRootfs(spec.ID, spec.Rootfs, slot)
		rootfsDur = time.Since(tm)
		if err != nil {
			return fmt.Errorf("start sandbox %s: %w", spec.ID, err)
		}
		// The sandbox holds its own copy of the mount once it runs; the
		// host's goes after the start, off its path (an unmount waits for
		// an RCU grace period).
		defer func() {
			if retErr != nil {
				releaseRootfs(root)
				return
			}
			go releaseRootfs(root)
		}()
		spec.Rootfs = root
	}
	cfg, err := r.config(spec, slot)
	if err != nil {
		return fmt.Errorf("start sandbox %s: %w", spec.ID, err)
	}
	var native *nativeSetup
	if r.opts.Native {
		tm := time.Now()
		if native, err = r.prepareNative(cfg, slot); err != nil {
			return fmt.Errorf("start sandbox %s: %w", spec.ID, err)
		}
		rootfsDur = time.Since(tm)
		defer native.close()
		icfg.Setup = native.guest
	}
	cfgFile, err := configFile(icfg)
	if err != nil {
		return fmt.Errorf("start sandbox %s: %w", spec.ID, err)
	}
	defer cfgFile.Close()
	logf, err := os.OpenFile(filepath.Join(rd, "init.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("start sandbox %s: %w", spec.ID, err)
	}
	defer logf.Close()
	// The init socket is made here, on the host, and handed to init: the
	// run directory is read-only inside, so the sandbox cannot swap it.
	lnf, err := guest.Listen(filepath.Join(rd, guest.SocketName))
	if err != nil {
		return fmt.Errorf("start sandbox %s: %w", spec.ID, err)
	}
	defer lnf.Close()
	proc := initProcess{
		args: []string{"/proc/self/fd/" + strconv.Itoa(guest.BinaryFD), SandboxInitArg},
		// Init's own environment is fixed: the sandbox's (spec.Env) goes
		// to the processes it starts through its config, and must not
		// reach init itself (a GODEBUG or GOMAXPROCS of the user's).
		env: initEnv(),
		log: logf,
		// fd 3 = guest.ListenFD, 4 = guest.ConfigFD, 5 = guest.BinaryFD.
		extra: []*os.File{lnf, cfgFile, r.bin},
	}
	defer func() {
		if retErr != nil && !errors.Is(retErr, errStateExists) {
			r.destroyFailedStart(spec.ID)
		}
	}()
	var t1 time.Time
	t0 := time.Now()
	if native != nil {
		native.shell, sh = sh, nil // the start's to claim or discard
		native.network = early
		if t1, err = r.startNative(ctx, spec, cfg, proc, slot, native); err != nil {
			log, _ := os.ReadFile(filepath.Join(rd, "init.log"))
			if len(log) > 0 {
				err = fmt.Errorf("%w (init log: %s)", err, tail(log, 512))
			}
		}
	} else {
		// libcontainer makes the sandbox's cgroups: its cpuset is made
		// unbalanced first.
		switch err = r.unbalancedCpuset(spec.ID); {
		case err != nil:
		case r.shim != nil:
			t1, err = r.startInShim(ctx, spec, cfg, proc, slot)
		default:
			t1, err = r.startHere(ctx, spec, cfg, proc)
		}
	}
	if err != nil {
		return err
	}
	t2 := time.Now()

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if native == nil || !native.served {
		// Init answers once it serves (a native init that said it serves
		// does: the daemon's connections wait on its socket meanwhile).
		if err := guest.NewClient(rd).WaitReady(wctx); err != nil {
			log, _ := os.ReadFile(filepath.Join(rd, "init.log"))
			return fmt.Errorf("start sandbox %s: %w (init log: %s)", spec.ID, err, tail(log, 512))
		}
	}
	t3 := time.Now()
	// The cpu quota goes on after setup so it does not slow the start.
	if spec.Limits.CPUs > 0 {
		if native != nil {
			// Recorded in the state at the start; written here.
			if err := writeCPUQuota(native.cgroupPaths, spec.Limits.CPUs); err != nil {
				return fmt.Errorf("start sandbox %s: cpu quota: %w", spec.ID, err)
			}
		} else if err := r.Update(ctx, spec.ID, spec.Limits); err != nil {
			return err
		}
	}
	r.log.Debug("sandbox started", "sandbox", spec.ID, "run_end", t2.Format("15:04:05.000000"), "pre", t0.Sub(tEntry)-rootfsDur, "rootfs", rootfsDur, "create", t1.Sub(t0), "run", t2.Sub(t1), "ready", t3.Sub(t2), "limits", time.Since(t3), "shim", r.shim != nil)
	return nil
}

// initEnv is the environment of every sandbox's init process.
func initEnv() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
}

// initProcess is a sandbox's init as libcontainer starts it.
type initProcess struct {
	args, env []string
	log       *os.File   // its stdout and stderr
	extra     []*os.File // from descriptor 3 on
}

// startHere creates and starts a sandbox with libcontainer in this
// process (Options.Shim unset); it returns when the container was
// created.
func (r *Runtime) startHere(ctx context.Context, spec steadrt.Spec, cfg *configs.Config, proc initProcess) (time.Time, error) {
	c, err := libcontainer.Create(r.opts.StateDir, spec.ID, cfg)
	if errors.Is(err, libcontainer.ErrExist) {
		return time.Time{}, fmt.Errorf("create sandbox %s: %w (%w)", spec.ID, errStateExists, errs.ErrConflict)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	r.mu.Lock()
	r.containers[spec.ID] = c
	r.mu.Unlock()
	created := time.Now()
	p := &libcontainer.Process{Args: proc.args, Env: proc.env, Cwd: "/", Stdout: proc.log, Stderr: proc.log, ExtraFiles: proc.extra, Init: true}
	if spec.Network == nil {
		if err := c.Run(p); err != nil {
			return created, fmt.Errorf("start sandbox %s: %w", spec.ID, err)
		}
	} else {
		// Start stops the init before it runs anything of the sandbox's:
		// its network is made then, so the first process already has it.
		if err := c.Start(p); err != nil {
			return created, fmt.Errorf("start sandbox %s: %w", spec.ID, err)
		}
		pid, err := p.Pid()
		if err != nil {
			return created, fmt.Errorf("start sandbox %s: %w", spec.ID, err)
		}
		if err := spec.Network(ctx, pid); err != nil {
			return created, fmt.Errorf("start sandbox %s: network: %w", spec.ID, err)
		}
		if err := c.Exec(); err != nil {
			return created, fmt.Errorf("start sandbox %s: %w", spec.ID, err)
		}
	}
	// Reap our direct child while this daemon lives; after a daemon
	// restart the init's parent is the host's PID 1.
	r.reap(spec.ID, p)
	return created, nil
}

// startInShim creates and starts a sandbox through the runtime's shim
// (shim.go); this process loads the container's state when it next needs
// it.
func (r *Runtime) startInShim(ctx context.Context, spec steadrt.Spec, cfg *configs.Config, proc initProcess, slot int) (time.Time, error) {
	req := shimRequest{Op: "start", ID: spec.ID, Config: cfg, Args: proc.args, Env: proc.env, Extra: len(proc.extra), Stop: spec.Network != nil}
	files := append([]*os.File{proc.log}, proc.extra...)
	if slot >= 0 {
		ns, err := r.usernsFile(slot)
		if err != nil {
			return time.Time{}, err
		}
		req.IDMapFile = true
		files = append(files, ns)
	}
	created := time.Now()
	// Not cut short by ctx: libcontainer's start runs to its end in the
	// shim either way, and a start abandoned halfway could leave a
	// container waiting there that no abort would find.
	ctx = context.WithoutCancel(ctx)
	rep, err := r.shim.call(ctx, req, files...)
	if errors.Is(err, errStateExists) {
		return created, fmt.Errorf("start sandbox %s: %w (%w)", spec.ID, err, errs.ErrConflict)
	}
	if err != nil {
		return created, fmt.Errorf("start sandbox %s: %w", spec.ID, err)
	}
	closeFiles(rep.files)
	if spec.Network == nil {
		return created, nil
	}
	if err := spec.Network(ctx, rep.Pid); err != nil {
		return created, fmt.Errorf("start sandbox %s: network: %w", spec.ID, err)
	}
	rep, err = r.shim.call(ctx, shimRequest{Op: "exec", ID: spec.ID})
	if err != nil {
		return created, fmt.Errorf("start sandbox %s: %w", spec.ID, err)
	}
	closeFiles(rep.files)
	return created, nil
}

// destroyFailedStart removes what a failed start left: the shim's
// container waiting to run, the container's state, its processes.
func (r *Runtime) destroyFailedStart(id string) {
	// A shim that is gone took what waited in it along (libcontainer's
	// state, if any, is destroyed below).
	if r.shim != nil && r.shim.connected() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if rep, err := r.shim.call(ctx, shimRequest{Op: "abort", ID: id}); err == nil {
			closeFiles(rep.files)
		}
		cancel()
	}
	// destroy waits for the init to die before it removes the state: a
	// running container's Destroy fails, and a native start's init runs
	// (libcontainer's waits, stopped, until it is run).
	if c, err := r.load(id); err == nil && c != nil {
		if err := r.destroy(id, c); err != nil {
			r.log.Warn("clean up a failed start", "sandbox", id, "err", err)
		}
	}
	r.forget(id)
}

// reap reaps the init process p once it exits. A plain `go p.Wait()`
// blocks an OS thread in waitid(2) for as long as the sandbox runs (one
// thread per running sandbox), and a goroutine per sandbox waiting on a
// pidfd still holds a stack each; here the pidfd joins the runtime's one
// fdwatch set, and Wait is called only once the process has exited (its
// pidfd turns readable).
func (r *Runtime) reap(id string, p *libcontainer.Process) {
	pid, err := p.Pid()
	if err != nil {
		go p.Wait()
		return
	}
	r.reapPid(id, pid, func() { p.Wait() })
}

// reapPid calls wait (which reaps pid, a child of this process) once pid
// has exited, from the runtime's fdwatch set.
func (r *Runtime) reapPid(id string, pid int, wait func()) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		r.log.Debug("pidfd_open; reaping with a blocked thread", "sandbox", id, "err", err)
		go wait()
		return
	}
	w, err := r.watcher()
	if err == nil {
		_, err = w.Once(fd, func() {
			go func() {
				wait()
				unix.Close(fd)
			}()
		})
	}
	if err != nil {
		r.log.Debug("watch the init's pidfd; reaping with a blocked thread", "sandbox", id, "err", err)
		unix.Close(fd)
		go wait()
	}
}

// watcher returns the runtime's fdwatch set, started on first use.
func (r *Runtime) watcher() (*fdwatch.Watcher, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watch == nil {
		w, err := fdwatch.New()
		if err != nil {
			return nil, err
		}
		r.watch = w
	}
	return r.watch, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

const defaultMountFlags = unix.MS_NOEXEC | unix.MS_NOSUID | unix.MS_NODEV

// defaultCaps is Docker's default capability set.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// boundingArg is guest.BoundingArg with defaultCaps: a shell may be
// claimed by any sandbox, and every sandbox keeps defaultCaps. A sandbox
// that kept more would need its shells to keep more too: a capability a
// shell dropped from its bounding set ahead cannot come back.
func boundingArg() string {
	var nums []string
	for _, c := range defaultCaps {
		if v, ok := capNumber(c); ok {
			nums = append(nums, strconv.Itoa(v))
		}
	}
	return guest.BoundingArg + strings.Join(nums, ",")
}

// sandboxDevices are the device cgroup rules of every sandbox (runc's
// default set).
func sandboxDevices() []*devconfig.Rule {
	var out []*devconfig.Rule
	for _, d := range specconv.AllowedDevices {
		out = append(out, &d.Rule)
	}
	return out
}

// config is libcontainer's configuration of a sandbox; slot is its
// user-namespace slot (-1 without a user namespace).
func (r *Runtime) config(spec steadrt.Spec, slot int) (*configs.Config, error) {
	devRules := sandboxDevices()
	tmp := spec.TmpBytes
	if tmp <= 0 {
		tmp = 256 << 20
	}
	mounts := []*configs.Mount{
		{Source: "proc", Destination: "/proc", Device: "proc", Flags: defaultMountFlags},
		{Source: "tmpfs", Destination: "/dev", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_STRICTATIME, Data: "mode=755,size=65536k"},
		{Source: "devpts", Destination: "/dev/pts", Device: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Data: "newinstance,ptmxmode=0666,mode=0620,gid=5"},
		{Source: "shm", Destination: "/dev/shm", Device: "tmpfs", Flags: defaultMountFlags, Data: "mode=1777,size=65536k"},
		{Source: "mqueue", Destination: "/dev/mqueue", Device: "mqueue", Flags: defaultMountFlags},
		{Source: "sysfs", Destination: "/sys", Device: "sysfs", Flags: defaultMountFlags | unix.MS_RDONLY},
		{Source: "tmpfs", Destination: "/tmp", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: fmt.Sprintf("mode=1777,size=%d", tmp)},
	}
	var idmap *configs.MountIDMapping
	if slot >= 0 {
		ns, err := r.usernsFile(slot)
		if err != nil {
			return nil, err
		}
		// libcontainer opens the path in this process.
		idmap = &configs.MountIDMapping{UserNSPath: "/proc/self/fd/" + strconv.Itoa(int(ns.Fd())), Recursive: true}
	}
	for _, m := range spec.Mounts {
		fl := unix.MS_BIND | unix.MS_REC | unix.MS_NODEV
		if m.ReadOnly {
			fl |= unix.MS_RDONLY
		}
		mounts = append(mounts, &configs.Mount{Source: m.Source, Destination: m.Destination, Device: "bind", Flags: fl, IDMapping: idmap})
	}
	mounts = append(mounts, r.procViewMounts()...)
	res := &cgroups.Resources{Devices: devRules}
	res.CpusetCpus, res.CpusetMems = r.cpusetFor(spec.ID, spec.Limits.CPUs, "")
	if spec.Limits.MemoryBytes > 0 {
		res.Memory = spec.Limits.MemoryBytes
		res.MemorySwap = spec.Limits.MemoryBytes
	}
	if spec.Limits.Pids > 0 {
		p := spec.Limits.Pids
		res.PidsLimit = &p
	}
	caps := &configs.Capabilities{Bounding: defaultCaps, Effective: defaultCaps, Permitted: defaultCaps}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}
	ns := []configs.Namespace{
		{Type: configs.NEWNS}, {Type: configs.NEWUTS}, {Type: configs.NEWIPC},
		{Type: configs.NEWPID}, {Type: configs.NEWNET},
	}
	var uids []configs.IDMap
	if slot >= 0 {
		ns = append([]configs.Namespace{{Type: configs.NEWUSER}}, ns...)
		uids = r.idMap(slot)
	}
	return &configs.Config{
		Rootfs:       spec.Rootfs,
		Capabilities: caps,
		Namespaces:   configs.Namespaces(ns),
		UIDMappings:  uids,
		GIDMappings:  uids,
		Cgroups:      &cgroups.Cgroup{Name: spec.ID, Parent: r.opts.CgroupParent, Resources: res},
		MaskPaths: []string{
			"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
			"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
			"/sys/firmware", "/sys/devices/virtual/powercap",
		},
		ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		Devices:       specconv.AllowedDevices,
		Hostname:      hostname,
		// Private, not the default rslave: nothing the host mounts or
		// unmounts later (a start's rootfs mount, a volume's staging)
		// reaches a running sandbox.
		RootPropagation: unix.MS_PRIVATE | unix.MS_REC,
		Mounts:          mounts,
		Networks:        []*configs.Network{{Type: "loopback", Address: "127.0.0.1/0", Gateway: "localhost"}},
		NoNewPrivileges: true,
	}, nil
}

// configFile returns init's configuration in a sealed memory file, handed
// to init as guest.ConfigFD: nothing of it is written to the host's disk.
func configFile(cfg guest.Config) (*os.File, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode init config: %w", err)
	}
	fd, err := unix.MemfdCreate("stead-init-config", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("init config: %w", err)
	}
	f := os.NewFile(uintptr(fd), "stead-init-config")
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("init config: %w", err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal init config: %w", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("init config: %w", err)
	}
	return f, nil
}

// Stop stops a sandbox gracefully: the stop hook, up to grace, then kill.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	c, err := r.load(id)
	if err != nil || c == nil {
		os.RemoveAll(r.runDir(id))
		return err
	}
	st, _ := c.Status()
	if st == libcontainer.Paused {
		if err := freeze(c, false); err != nil {
			return fmt.Errorf("stop sandbox %s: resume: %w", id, err)
		}
	}
	if st == libcontainer.Running || st == libcontainer.Paused {
		sctx, cancel := context.WithTimeout(ctx, grace+5*time.Second)
		err := guest.NewClient(r.runDir(id)).Stop(sctx, grace)
		cancel()
		if err != nil {
			r.log.Warn("graceful stop failed; killing", "sandbox", id, "err", err)
		}
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if st, _ := c.Status(); st == libcontainer.Stopped {
				break
			}
			time.Sleep(500 * time.Microsecond)
		}
	}
	return r.destroy(id, c)
}

// Kill destroys a sandbox at once.
func (r *Runtime) Kill(ctx context.Context, id string) error {
	c, err := r.load(id)
	if err != nil || c == nil {
		os.RemoveAll(r.runDir(id))
		return err
	}
	return r.destroy(id, c)
}

func (r *Runtime) destroy(id string, c *libcontainer.Container) error {
	if st, _ := c.Status(); st == libcontainer.Paused {
		// Every process gets its SIGKILL while still frozen, and only then
		// is the cgroup thawed: a thawed task with a pending SIGKILL dies
		// before it returns to user space, so a paused copy never executes
		// again. Thawing first would let it run until the kill landed (its
		// init's death reaches the rest of its PID namespace only later),
		// which for a copy handed over to another node is two copies
		// running at once.
		if pids, err := c.Processes(); err == nil {
			for _, p := range pids {
				unix.Kill(p, unix.SIGKILL)
			}
		} else {
			r.log.Warn("list a paused sandbox's processes to kill them frozen; thawing first", "sandbox", id, "err", err)
		}
		freeze(c, false)
	}
	if st, _ := c.Status(); st != libcontainer.Stopped {
		c.Signal(unix.SIGKILL)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if st, _ := c.Status(); st == libcontainer.Stopped {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	err := c.Destroy()
	r.forget(id)
	r.forgetCpuset(id)
	r.freeSlot(id)
	r.unmountRootfs(id)
	os.RemoveAll(r.runDir(id))
	if err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	return nil
}

// Pause freezes every process of a sandbox (cgroup freezer).
func (r *Runtime) Pause(ctx context.Context, id string) error {
	c, err := r.mustLoad(id)
	if err != nil {
		return err
	}
	if st, err := c.Status(); err != nil || (st != libcontainer.Running && st != libcontainer.Paused) {
		return fmt.Errorf("pause sandbox %s: it is not running: %w", id, errs.ErrConflict)
	}
	if err := freeze(c, true); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	return nil
}

// Resume thaws a paused sandbox.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	c, err := r.mustLoad(id)
	if err != nil {
		return err
	}
	if err := freeze(c, false); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	return nil
}

func (r *Runtime) mustLoad(id string) (*libcontainer.Container, error) {
	c, err := r.load(id)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, fmt.Errorf("sandbox %s is not running: %w", id, errs.ErrConflict)
	}
	return c, nil
}

// Status reports the runtime state of a sandbox.
func (r *Runtime) Status(ctx context.Context, id string) (steadrt.Status, error) {
	c, err := r.load(id)
	if err != nil {
		return "", err
	}
	if c == nil {
		return steadrt.StatusAbsent, nil
	}
	st, err := c.Status()
	if err != nil {
		return "", fmt.Errorf("status of sandbox %s: %w", id, err)
	}
	switch st {
	case libcontainer.Running, libcontainer.Created:
		return steadrt.StatusRunning, nil
	case libcontainer.Paused:
		return steadrt.StatusPaused, nil
	default:
		return steadrt.StatusStopped, nil
	}
}

// Stats reads a sandbox's cgroup counters.
func (r *Runtime) Stats(ctx context.Context, id string) (steadrt.Stats, error) {
	c, err := r.mustLoad(id)
	if err != nil {
		return steadrt.Stats{}, err
	}
	// The four numbers come from four or five cgroup files; libcontainer's
	// Stats reads every file of every controller (dozens), and the limit
	// and idle checks ask for every running sandbox each pass.
	if st, err := c.State(); err == nil {
		if s, ok := cgroupStats(st.CgroupPaths); ok {
			return s, nil
		}
	}
	return r.fullStats(id, c)
}

// fullStats is Stats through libcontainer's Stats.
func (r *Runtime) fullStats(id string, c *libcontainer.Container) (steadrt.Stats, error) {
	s, err := c.Stats()
	if err != nil {
		return steadrt.Stats{}, fmt.Errorf("stats of sandbox %s: %w", id, err)
	}
	cg := s.CgroupStats
	if cg == nil {
		return steadrt.Stats{}, nil
	}
	usage := cg.MemoryStats.Usage.Usage
	inactive, ok := cg.MemoryStats.Stats["total_inactive_file"] // cgroup v1
	if !ok {
		inactive = cg.MemoryStats.Stats["inactive_file"] // cgroup v2
	}
	ws := usage - min(inactive, usage)
	return steadrt.Stats{
		CPUUsage:              time.Duration(cg.CpuStats.CpuUsage.TotalUsage),
		MemoryBytes:           int64(usage),
		MemoryWorkingSetBytes: int64(ws),
		Pids:                  int64(cg.PidsStats.Current),
	}, nil
}

// cgroupStats reads Stats from the sandbox's cgroup files (paths as
// libcontainer's State gives them: by controller on v1, "" on v2); false
// when a file is missing, and the caller asks libcontainer instead.
func cgroupStats(paths map[string]string) (steadrt.Stats, bool) {
	num := func(dir, file string) (uint64, bool) {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return 0, false
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return v, err == nil
	}
	field := func(dir, file, key string) (uint64, bool) {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return 0, false
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, " "); ok && k == key {
				n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				return n, err == nil
			}
		}
		return 0, false
	}
	var usage, inactive, cpu, pids uint64
	ok := true
	// A v1 host may list the unified hierarchy under "" too (hybrid):
	// v2 is a host without per-controller paths.
	if dir, v2 := paths[""]; v2 && paths["memory"] == "" {
		var a, b, c, d bool
		usage, a = num(dir, "memory.current")
		inactive, b = field(dir, "memory.stat", "inactive_file")
		usec, cc := field(dir, "cpu.stat", "usage_usec")
		cpu, c = usec*1000, cc
		pids, d = num(dir, "pids.current")
		ok = a && b && c && d
	} else {
		mem, cpuacct, pid := paths["memory"], paths["cpuacct"], paths["pids"]
		if mem == "" || cpuacct == "" || pid == "" {
			return steadrt.Stats{}, false
		}
		var a, b, c, d bool
		usage, a = num(mem, "memory.usage_in_bytes")
		inactive, b = field(mem, "memory.stat", "total_inactive_file")
		cpu, c = num(cpuacct, "cpuacct.usage")
		pids, d = num(pid, "pids.current")
		ok = a && b && c && d
	}
	if !ok {
		return steadrt.Stats{}, false
	}
	return steadrt.Stats{
		CPUUsage:              time.Duration(cpu),
		MemoryBytes:           int64(usage),
		MemoryWorkingSetBytes: int64(usage - min(inactive, usage)),
		Pids:                  int64(pids),
	}, true
}

// cpuPeriod is the CFS period used for cpu quotas (100 ms).
const cpuPeriod = 100000

// Update changes a running sandbox's limits.
func (r *Runtime) Update(ctx context.Context, id string, l steadrt.Limits) error {
	c, err := r.mustLoad(id)
	if err != nil {
		return err
	}
	cfg := c.Config()
	res := cfg.Cgroups.Resources
	if l.CPUs > 0 {
		res.CpuPeriod = cpuPeriod
		res.CpuQuota = int64(l.CPUs * cpuPeriod)
		res.CpusetCpus, res.CpusetMems = r.cpusetFor(id, l.CPUs, res.CpusetCpus)
	}
	if l.MemoryBytes > 0 {
		res.Memory, res.MemorySwap = l.MemoryBytes, l.MemoryBytes
	}
	if l.Pids > 0 {
		p := l.Pids
		res.PidsLimit = &p
	}
	if err := c.Set(cfg); err != nil {
		return fmt.Errorf("update sandbox %s: %w", id, err)
	}
	return nil
}

// List returns the ids the runtime holds state for.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(r.opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && validID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// Exec runs a process in a running sandbox through its init.
func (r *Runtime) Exec(ctx context.Context, id string, spec guest.ExecSpec) (guest.ExecResult, error) {
	if !validID(id) {
		return guest.ExecResult{}, fmt.Errorf("sandbox id %q: %w", id, errs.ErrInvalid)
	}
	return guest.NewClient(r.runDir(id)).Exec(ctx, spec)
}

// ServiceInput writes to the supervised service's stdin.
func (r *Runtime) ServiceInput(ctx context.Context, id string, data []byte) error {
	if !validID(id) {
		return fmt.Errorf("sandbox id %q: %w", id, errs.ErrInvalid)
	}
	return guest.NewClient(r.runDir(id)).ServiceInput(ctx, data)
}

// OpenPTY starts a process on a terminal in a running sandbox.
func (r *Runtime) OpenPTY(ctx context.Context, id string, spec guest.ExecSpec, rows, cols uint16) (steadrt.PTY, error) {
	if !validID(id) {
		return nil, fmt.Errorf("sandbox id %q: %w", id, errs.ErrInvalid)
	}
	return guest.NewClient(r.runDir(id)).OpenPTY(ctx, spec, rows, cols)
}

// Sweep removes cgroups and run directories of sandboxes with no
// libcontainer state: a kill -9 of the daemon inside Start can leave a
// cgroup created before the state was saved.
func (r *Runtime) Sweep(ctx context.Context) ([]string, error) {
	known := map[string]bool{}
	ids, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		known[id] = true
	}
	cleaned := map[string]bool{}
	// Run directories.
	if ents, err := os.ReadDir(r.opts.RunDir); err == nil {
		for _, e := range ents {
			if id := e.Name(); e.IsDir() && validID(id) && !known[id] {
				os.RemoveAll(filepath.Join(r.opts.RunDir, id))
				cleaned[id] = true
			}
		}
	}
	// Rootfs mount points (a kill -9 inside Start).
	if ents, err := os.ReadDir(r.opts.RootfsDir); err == nil {
		for _, e := range ents {
			if id := e.Name(); e.IsDir() && validID(id) && !known[id] {
				r.unmountRootfs(id)
				cleaned[id] = true
			}
		}
	}
	// cgroups: v1 has one hierarchy per controller, v2 one tree; the
	// recorded parents include those of earlier runs in other cgroups.
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + r.opts.CgroupParent)
	if p := "/sys/fs/cgroup/" + r.opts.CgroupParent; fileIsDir(p) {
		roots = append(roots, p)
	}
	for _, p := range readParents(r.opts.StateDir) {
		if fileIsDir(p) && !slices.Contains(roots, p) {
			roots = append(roots, p)
		}
	}
	for _, root := range roots {
		ents, err := os.ReadDir(root)
		if err != nil {
			continue
		}
		for _, e := range ents {
			id := e.Name()
			// A shell's, looked up now: one may be spawned meanwhile.
			if !e.IsDir() || !validID(id) || known[id] || r.shellIsLive(id) {
				continue
			}
			killCgroup(filepath.Join(root, id))
			cleaned[id] = true
		}
	}
	// Parents of earlier runs that no sandbox uses any more.
	removeEmptyParents(r.opts.StateDir, r.parents)
	out := make([]string, 0, len(cleaned))
	for id := range cleaned {
		out = append(out, id)
	}
	sort.Strings(out)
	return out, nil
}

func fileIsDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// rootfsDirFor names the rootfs directory of the runtime whose state lives
// in stateDir, like cgroupParentFor.
func rootfsDirFor(stateDir string) string {
	if stateDir == "/run/stead/containers" {
		return "/run/stead-rootfs"
	}
	h := sha256.Sum256([]byte(filepath.Clean(stateDir)))
	return "/run/stead-rootfs-" + hex.EncodeToString(h[:4])
}

// cgroupParentFor names the cgroup parent of the runtime whose state lives
// in stateDir: "stead" for the default /run/stead, else a name unique to the
// directory, so two daemons (or test runs) never share one.
func cgroupParentFor(stateDir string) string {
	if stateDir == "/run/stead/containers" {
		return "stead"
	}
	h := sha256.Sum256([]byte(filepath.Clean(stateDir)))
	return "stead-" + hex.EncodeToString(h[:4])
}
