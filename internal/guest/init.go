package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// Main is the entry point of init inside a sandbox. It never returns.
func Main() {
	// One P: init's work is a few short calls at a time (an exec's fork,
	// a reply), and with one P a request's goroutine runs on the thread
	// the poller woke instead of waking another, idle one. On a VM each
	// such wake is an interrupt to an idle virtual CPU: an exec of
	// /bin/true took 0.2-0.7 ms longer with GOMAXPROCS at the CPU count
	// (bench/RESULTS.md, "One P for init"). A blocked system call still
	// hands the P to another thread, so nothing waits behind one.
	runtime.GOMAXPROCS(1)
	// The spare threads are made in newInit: after the setup when init
	// sets the sandbox up itself (capabilities are dropped on every thread
	// at once, which costs per thread), before anything of the sandbox's
	// runs either way.
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "init")
	in, err := newInit(logger)
	if err != nil {
		logger.Error("init failed", "err", err)
		os.Exit(1)
	}
	os.Exit(in.run(context.Background()))
}

// spareThreads is how many OS threads init makes at start and keeps idle:
// beside the runtime's own four, enough for the few blocking calls init
// makes at once. Every thread is a task the kernel walks on each
// pivot_root on the machine (each new sandbox's), and a kernel stack: with
// eight, 1,000 sandboxes were 12,000 tasks, and the walk 3-4 % of all CPU.
const spareThreads = 3

// reserveThreads makes n OS threads at once and leaves them idle in the Go
// runtime's pool, which keeps idle threads for good. A sandbox whose
// processes use up its pids limit (a fork bomb) leaves init no room to make
// a thread, and the Go runtime ends a process that cannot make one it needs
// ("fatal error: newosproc"): init, and the sandbox with it. With spare
// threads made while there is room, the runtime takes one of those.
func reserveThreads(n int) {
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			// Locked and blocked, each goroutine holds its own thread,
			// so the runtime makes n of them; unlocked, they go idle.
			runtime.LockOSThread()
			ready.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()
}

// exitStatus is how a child ended.
type exitStatus struct {
	code   int
	signal string
}

type initProc struct {
	log *slog.Logger
	cfg Config
	ln  *net.UnixListener

	mu      sync.Mutex
	waiters map[int]chan exitStatus

	stopOnce sync.Once
	stopping chan struct{}
	svc      *supervisor
}

func newInit(logger *slog.Logger) (*initProc, error) {
	// The runtime's umask is not the sandbox's.
	unix.Umask(0o022)
	// Whether this image is init re-executed after its setup, or a shell
	// (ShellArg), is in its arguments, which the runtime alone sets (never
	// in its environment, which is the sandbox's).
	setupDone := len(os.Args) > 2 && os.Args[2] == setupDoneArg
	shell := len(os.Args) > 2 && os.Args[2] == ShellArg
	var trees []int
	if shell {
		// Nothing the spawner leaked stays while the shell waits; what
		// the claim hands over arrives after this.
		closeInherited(SetupFD+1, nil)
		err := prepareShell()
		for _, a := range os.Args[3:] {
			if b, ok := strings.CutPrefix(a, BoundingArg); ok && err == nil {
				err = narrowBounding(b)
			}
		}
		if err != nil {
			unix.Sendmsg(SetupFD, []byte("error: "+err.Error()), nil, nil, 0)
			return nil, fmt.Errorf("shell: %w", err)
		}
		if err := unix.Sendmsg(SetupFD, []byte(ShellWaitingMsg), nil, nil, 0); err != nil {
			return nil, fmt.Errorf("shell: setup socket: %w", err)
		}
		if trees, err = awaitClaim(); err != nil {
			return nil, fmt.Errorf("shell: %w", err)
		}
	}
	cf := os.NewFile(ConfigFD, "config")
	b, err := io.ReadAll(cf)
	if err != nil {
		return nil, fmt.Errorf("read init config (fd %d from the runtime): %w", ConfigFD, err)
	}
	in := &initProc{log: logger, waiters: map[int]chan exitStatus{}, stopping: make(chan struct{})}
	filtered := false // the seccomp filter is on
	if err := json.Unmarshal(b, &in.cfg); err != nil {
		return nil, fmt.Errorf("decode init config: %w", err)
	}
	if in.cfg.Setup != nil && !setupDone {
		if !shell {
			trees = spawnedTrees(setupTrees(in.cfg.Setup))
		}
		// Nothing but what the runtime handed over (stdio, the socket,
		// the config, the binary, the setup socket and the trees) stays
		// open: a descriptor the spawner held without close-on-exec
		// would reach the sandbox.
		closeInherited(SetupFD+1, trees)
		// Init makes the sandbox itself (stead's own runtime), and its
		// spare threads while the host finishes; it may re-execute itself
		// at the end, with its config and binary.
		if filtered, err = prepare(in.cfg.Setup, trees, in.cfg.Seccomp, shell); err != nil {
			return nil, fmt.Errorf("sandbox setup: %w", err)
		}
	} else if shell {
		return nil, errors.New("shell: a claim without a setup")
	} else {
		closeInherited(BinaryFD+1, nil)
		reserveThreads(spareThreads)
	}
	cf.Close()
	// Init's own binary is not for the processes it starts.
	unix.Close(BinaryFD)
	// The daemon made the listening socket on the host and passed it as
	// fd 3: the run directory is mounted read-only, so nothing in the
	// sandbox can replace the socket the daemon dials. The listener is a
	// duplicate; the original goes, or every process init starts would
	// inherit it and could accept the daemon's connections.
	lf := os.NewFile(ListenFD, SocketName)
	fl, err := net.FileListener(lf)
	lf.Close()
	if err != nil {
		return nil, fmt.Errorf("init socket (fd %d from the runtime): %w", ListenFD, err)
	}
	ln, ok := fl.(*net.UnixListener)
	if !ok {
		return nil, fmt.Errorf("init socket: fd %d is not a unix listener", ListenFD)
	}
	ln.SetUnlinkOnClose(false)
	in.ln = ln
	if in.cfg.Seccomp && !filtered {
		if err := loadSeccomp(); err != nil {
			return nil, err
		}
	}
	return in, nil
}

func (in *initProc) run(ctx context.Context) int {
	sigs := make(chan os.Signal, 16)
	// SIGTERM from the host asks for a graceful stop; hang-ups and
	// interrupts are not for PID 1. They are caught and dropped rather
	// than ignored, because an ignored disposition would be inherited by
	// every process init starts.
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM)
	drop := make(chan os.Signal, 4)
	signal.Notify(drop, syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	go func() {
		for range drop {
		}
	}()
	go in.reap(sigs)
	if in.cfg.Service != nil {
		in.svc = newSupervisor(in, *in.cfg.Service)
		go in.svc.run()
	}
	go in.serve()
	// Mark readiness for the daemon: the socket accepts from here on.
	<-in.stopping
	return 0
}

// reap waits for every child, including orphans re-parented to PID 1, and
// hands exit statuses to whoever started the process.
func (in *initProc) reap(sigs chan os.Signal) {
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			go in.stop(30 * time.Second)
			continue
		}
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err != nil || pid <= 0 {
				break
			}
			st := exitStatus{code: ws.ExitStatus()}
			if ws.Signaled() {
				st.code = 128 + int(ws.Signal())
				st.signal = unix.SignalName(ws.Signal())
			}
			in.mu.Lock()
			ch, ok := in.waiters[pid]
			delete(in.waiters, pid)
			in.mu.Unlock()
			if ok {
				ch <- st
			}
		}
	}
}

// procSpec is one process to start.
type procSpec struct {
	args   []string
	env    []string
	cwd    string
	uid    int
	gid    int
	files  []*os.File // stdin, stdout, stderr
	setsid bool
	ctty   bool
}

// start forks and execs a process and returns its pid and a channel that
// receives its exit status.
func (in *initProc) start(p procSpec) (int, <-chan exitStatus, error) {
	fds := make([]uintptr, len(p.files))
	for i, f := range p.files {
		fds[i] = f.Fd()
	}
	env := mergeEnv(in.cfg.Env, p.env)
	if p.uid != 0 {
		env = mergeEnv(env, []string{"HOME=/home/agent", "USER=agent", "LOGNAME=agent"})
	} else {
		env = mergeEnv(env, []string{"HOME=/root", "USER=root", "LOGNAME=root"})
	}
	cwd := p.cwd
	if cwd == "" {
		cwd = "/"
		if p.uid != 0 {
			cwd = "/home/agent"
		}
	}
	if err := checkCwd(cwd, p.uid, p.gid); err != nil {
		return 0, nil, err
	}
	argv0, err := lookPath(p.args[0], env)
	if err != nil {
		return 0, nil, err
	}
	attr := &syscall.ProcAttr{
		Dir:   cwd,
		Env:   env,
		Files: fds,
		Sys: &syscall.SysProcAttr{
			Setpgid: !p.setsid,
			Setsid:  p.setsid,
			Setctty: p.ctty,
			Ctty:    0,
		},
	}
	if p.uid != 0 || p.gid != 0 {
		attr.Sys.Credential = &syscall.Credential{Uid: uint32(p.uid), Gid: uint32(p.gid), Groups: []uint32{}}
	}
	ch := make(chan exitStatus, 1)
	in.mu.Lock()
	pid, err := syscall.ForkExec(argv0, p.args, attr)
	if err == nil {
		in.waiters[pid] = ch
	}
	in.mu.Unlock()
	if err != nil {
		if code := execFailureCode(err); code != 0 {
			return 0, nil, &startFailure{code: code, msg: fmt.Sprintf("exec: %q: %s", p.args[0], errnoText(err))}
		}
		return 0, nil, fmt.Errorf("start %s: %w", p.args[0], err)
	}
	return pid, ch, nil
}

func (in *initProc) serve() {
	for {
		c, err := in.ln.AcceptUnix()
		if err != nil {
			select {
			case <-in.stopping:
				return
			default:
			}
			in.log.Error("accept", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go in.handle(newConn(c))
	}
}

func (in *initProc) handle(c *conn) {
	defer c.c.Close()
	var req Request
	files, err := c.recv(&req)
	if err != nil {
		return
	}
	defer closeAll(files)
	switch req.Op {
	case OpExec:
		in.handleExec(c, req, files)
	case OpStop:
		in.stop(req.Grace)
		c.send(Reply{Type: "exit"})
	case OpInput:
		if in.svc == nil {
			c.send(Reply{Type: "error", Error: "this sandbox has no service"})
			return
		}
		if err := in.svc.input(req.Data); err != nil {
			c.send(Reply{Type: "error", Error: err.Error()})
			return
		}
		c.send(Reply{Type: "status"})
	case OpStatus:
		r := Reply{Type: "status"}
		if in.svc != nil {
			r.ServicePid, r.ServiceRestarts = in.svc.status()
		}
		c.send(r)
	default:
		c.send(Reply{Type: "error", Error: "unknown op " + req.Op})
	}
}

func (in *initProc) handleExec(c *conn, req Request, files []*os.File) {
	if len(req.Args) == 0 {
		c.send(Reply{Type: "error", Error: "empty command"})
		return
	}
	p := procSpec{args: req.Args, env: req.Env, cwd: req.Cwd, uid: req.UID, gid: req.GID}
	var master *os.File
	var logPath string
	switch {
	case req.TTY:
		m, s, err := pty.Open()
		if err != nil {
			c.send(Reply{Type: "error", Error: "open pty: " + err.Error()})
			return
		}
		defer s.Close()
		master = m
		if req.Rows > 0 && req.Cols > 0 {
			pty.Setsize(m, &pty.Winsize{Rows: req.Rows, Cols: req.Cols})
		}
		if req.UID != 0 {
			os.Chown(s.Name(), req.UID, req.GID)
		}
		p.files = []*os.File{s, s, s}
		p.setsid, p.ctty = true, true
		p.env = append([]string{"TERM=xterm-256color"}, p.env...)
	case req.Background:
		os.MkdirAll(ExecLogDir, 0o755)
		f, err := os.CreateTemp(ExecLogDir, "exec-*.log")
		if err != nil {
			c.send(Reply{Type: "error", Error: "create exec log: " + err.Error()})
			return
		}
		defer f.Close()
		os.Chown(f.Name(), req.UID, req.GID)
		logPath = f.Name()
		null, err := os.Open(os.DevNull)
		if err != nil {
			c.send(Reply{Type: "error", Error: err.Error()})
			return
		}
		defer null.Close()
		p.files = []*os.File{null, f, f}
		p.setsid = true
	case req.Stdio && len(files) == 3:
		p.files = files
	default:
		c.send(Reply{Type: "error", Error: "exec needs stdio descriptors"})
		return
	}
	pid, done, err := in.start(p)
	var sf *startFailure
	if errors.As(err, &sf) {
		// A program that is missing or cannot run ends like a shell's:
		// the message on the process's stderr, exit 127 or 126.
		in.reportStartFailure(c, req, p, master, logPath, sf)
		return
	}
	if err != nil {
		if master != nil {
			master.Close()
		}
		// A bad working directory or user: the request's fault, reported
		// as such (init checks the directory before the fork).
		var ce *cwdError
		c.send(Reply{Type: "error", Error: err.Error(), Invalid: errors.As(err, &ce), BadCwd: errors.As(err, &ce)})
		return
	}
	// Our copies of the child's stdio must close now, so the daemon sees
	// EOF when the child (and its descendants) are done with them.
	closeAll(files)
	started := Reply{Type: "started", Pid: pid, LogPath: logPath}
	if master != nil {
		err = c.send(started, master)
		master.Close()
	} else {
		err = c.send(started)
	}
	if req.Background {
		return
	}
	// Foreground: the connection going away kills the process group.
	gone := make(chan struct{})
	go func() {
		buf := make([]byte, 1)
		for {
			if _, err := c.c.Read(buf); err != nil {
				close(gone)
				return
			}
		}
	}()
	if err != nil {
		unix.Kill(-pid, unix.SIGKILL)
	}
	select {
	case st := <-done:
		c.send(Reply{Type: "exit", Pid: pid, ExitCode: st.code, Signal: st.signal})
	case <-gone:
		unix.Kill(-pid, unix.SIGKILL)
		unix.Kill(pid, unix.SIGKILL)
		<-done
	}
}

// stop runs the service's stop hook, waits up to grace for it, then kills
// every process in the sandbox and lets init exit.
func (in *initProc) stop(grace time.Duration) {
	in.stopOnce.Do(func() {
		if in.svc != nil {
			in.svc.stop(grace)
		}
		unix.Kill(-1, unix.SIGTERM)
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) && othersAlive() {
			time.Sleep(time.Millisecond)
		}
		unix.Kill(-1, unix.SIGKILL)
		if in.svc != nil {
			in.svc.wait(5 * time.Second) // the log drained and closed
		}
		// Make the root's files durable before reporting the stop: syncfs
		// of the sandbox's own file system, not a sync of the whole host.
		if fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
			unix.Syncfs(fd)
			unix.Close(fd)
		}
		close(in.stopping)
	})
	<-in.stopping
}

// othersAlive reports whether any process but init remains.
func othersAlive() bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != 1 {
			return true
		}
	}
	return false
}

func mergeEnv(base, over []string) []string {
	out := make([]string, 0, len(base)+len(over))
	idx := map[string]int{}
	for _, list := range [][]string{base, over} {
		for _, kv := range list {
			k := kv
			for i := 0; i < len(kv); i++ {
				if kv[i] == '=' {
					k = kv[:i]
					break
				}
			}
			if i, ok := idx[k]; ok {
				out[i] = kv
				continue
			}
			idx[k] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

// errNotFound is a command missing from PATH.
var errNotFound = errors.New("executable file not found in $PATH")

// lookPath resolves a command name against PATH in env.
func lookPath(name string, env []string) (string, error) {
	if filepath.IsAbs(name) || containsSlash(name) {
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if len(kv) > 5 && kv[:5] == "PATH=" {
			path = kv[5:]
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &startFailure{code: ExitNotFound, msg: fmt.Sprintf("exec: %q: %v", name, errNotFound)}
}

func containsSlash(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return true
		}
	}
	return false
}
