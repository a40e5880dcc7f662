package linux

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/exeseal"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/fdwatch"
	"github.com/stead-dev/stead/internal/guest"
)

// The shim. Every process the runtime makes for a sandbox (libcontainer's
// parent and init, the user-namespace holders) is forked by a small
// helper process, not by the daemon:
//
//   - libcontainer re-executes its caller's own binary as the sandbox's
//     setup init; a small binary (stead-shim, 6 MB) starts in a third of
//     the time of the daemon's 48 MB one (its package inits alone take
//     6 ms), on every create and every start;
//   - a fork copies the caller's page tables (a user-namespace holder is a
//     full fork: Go gives up vfork with CLONE_NEWUSER) and every exec closes
//     the caller's descriptors: the daemon's grow with every running
//     sandbox (its agent socket, pidfds, user namespaces), the shim's do not.
//
// The daemon keeps everything else: it loads the sandbox's libcontainer
// state to pause, update, signal and destroy it, as it does for sandboxes
// a previous daemon started. The shim is the parent of the inits it
// started and reaps them; it exits when the runtime is closed and no init
// of its own is left, or at once when the daemon dies and its end of the
// connection with it (the inits are then reaped by the host's PID 1, as
// after a daemon restart).
//
// The connection is a SOCK_SEQPACKET socket pair: one JSON message per
// request and per answer, descriptors attached with SCM_RIGHTS.

// ShimArg is the argument the shim binary runs with (the stead binary
// itself plays the shim with it when stead-shim is missing).
const ShimArg = "runtime-shim"

// shimFD is the shim's end of its connection to the runtime.
const shimFD = 3

// shimMaxMsg bounds one message: a start's libcontainer configuration is
// 6 KiB, about 300 bytes more for each volume mounted, plus the
// sandbox's environment (an API request may carry up to 1 MiB). Both ends
// raise their socket buffers to hold one; reads allocate what each
// message needs.
const shimMaxMsg = 8 << 20

// shimMaxFiles bounds the descriptors of one message: the kernel's
// SCM_MAX_FD. A native start sends a dozen beside its mount trees (the
// root, /usr, ten /proc views, one per volume).
const shimMaxFiles = 253

// shimProtocol is the version of the messages below. The shim says it
// first; a daemon refuses a shim that speaks another (a stale stead-shim
// beside a newer stead).
const shimProtocol = 2

// shimHelloTimeout bounds the wait for a new shim's first message.
const shimHelloTimeout = 10 * time.Second

// shimCallTimeout is how long a call waits for the shim's answer before
// it counts the shim as hung: the shim is killed (what waited in it fails
// and is cleaned up; its sandboxes keep running) and the next call starts
// a new one. A start takes well under a second.
const shimCallTimeout = 2 * time.Minute

// shimSealedEnv marks a shim already re-executed from its sealed copy.
const shimSealedEnv = "STEAD_SHIM_SEALED"

// shimRequest is one request to the shim.
type shimRequest struct {
	Seq uint64 `json:"seq"`
	// Op is "start", "spawn", "exec", "abort", "userns" or "close".
	Op string `json:"op"`
	ID string `json:"id,omitempty"`
	// start: the container and its init process. Files are attached in
	// this order: the log (stdout and stderr), the init's extra files,
	// then (when IDMapFile) the user namespace of idmapped mounts.
	Config    *configs.Config `json:"config,omitempty"`
	Args      []string        `json:"args,omitempty"`
	Env       []string        `json:"env,omitempty"`
	Extra     int             `json:"extra,omitempty"`
	IDMapFile bool            `json:"idmap_file,omitempty"`
	// Stop makes start return with the init stopped before it runs
	// anything of the sandbox's (until "exec"), for the network to be
	// attached; without it the init runs at once.
	Stop bool `json:"stop,omitempty"`
	// userns: the first host id of the mapping.
	HostID int64 `json:"host_id,omitempty"`
	// spawn: a native init (native.go) forked as Spawn says; files are
	// the log, then Extra files. It waits, unreaped, until exec or abort.
	Spawn *spawnSpec `json:"spawn,omitempty"`
	// exec, abort: when set, the pid of the spawn they are for (another
	// start of the same sandbox may wait in the shim by then).
	Pid int `json:"pid,omitempty"`
}

// shimAnswer is the shim's answer to the request with the same Seq; its
// first message (Seq 0) says Hello.
type shimAnswer struct {
	Seq   uint64 `json:"seq"`
	Hello int    `json:"hello,omitempty"` // shimProtocol
	Pid   int    `json:"pid,omitempty"`
	Err   string `json:"err,omitempty"`
	// Exists: the start failed because the sandbox's container exists.
	Exists bool `json:"exists,omitempty"`
}

// shim is the runtime's connection to its shim process, started on first
// use and again after the shim died.
type shim struct {
	bin      string
	stateDir string
	log      *slog.Logger

	mu      sync.Mutex
	conn    *net.UnixConn
	cmd     *exec.Cmd
	seq     uint64
	waiting map[uint64]shimWait
	closed  bool // close was called: no new shim is started
	// timeout is shimCallTimeout (shorter in tests).
	timeout time.Duration
}

// errStateExists is a start's failure because the sandbox's container
// exists already (its cleanup must not destroy that one).
var errStateExists = errors.New("the sandbox's runtime state exists")

// shimWait is a request waiting for its answer on conn.
type shimWait struct {
	conn *net.UnixConn
	ch   chan shimReply
}

// shimReply is an answer with its descriptors.
type shimReply struct {
	shimAnswer
	files []*os.File
}

func newShim(bin, stateDir string, log *slog.Logger) *shim {
	return &shim{bin: bin, stateDir: stateDir, log: log, waiting: map[uint64]shimWait{}, timeout: shimCallTimeout}
}

// connect returns the connection, starting the shim when none runs. The
// caller holds s.mu.
func (s *shim) connect() (*net.UnixConn, error) {
	if s.conn != nil {
		return s.conn, nil
	}
	if s.closed {
		return nil, errors.New("runtime shim: the runtime is closed")
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("start runtime shim: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "shim")
	theirs := os.NewFile(uintptr(fds[1]), "shim")
	defer theirs.Close()
	cmd := exec.Command(s.bin, ShimArg, s.stateDir)
	cmd.Env = []string{"GOMAXPROCS=" + os.Getenv("GOMAXPROCS")}
	cmd.Stderr = os.Stderr
	// No parent-death signal: it follows the thread that forked, which
	// Go may end while the daemon lives. The shim leaves when its
	// connection ends instead, which happens when the daemon dies.
	cmd.ExtraFiles = []*os.File{theirs} // fd 3 = shimFD
	if err := cmd.Start(); err != nil {
		mine.Close()
		return nil, fmt.Errorf("start runtime shim %s: %w", s.bin, err)
	}
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("start runtime shim: %w", err)
	}
	conn := c.(*net.UnixConn)
	fail := func(err error) (*net.UnixConn, error) {
		conn.Close()
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("start runtime shim %s: %w", s.bin, err)
	}
	if err := setSocketBuffers(conn); err != nil {
		return fail(err)
	}
	var hello shimAnswer
	conn.SetReadDeadline(time.Now().Add(shimHelloTimeout))
	files, err := recvMsg(conn, &hello, false)
	conn.SetReadDeadline(time.Time{})
	closeFiles(files)
	if err != nil {
		return fail(fmt.Errorf("no greeting: %w", err))
	}
	if hello.Hello != shimProtocol {
		return fail(fmt.Errorf("it speaks protocol %d, this stead %d: build both with scripts/build.sh", hello.Hello, shimProtocol))
	}
	s.conn, s.cmd = conn, cmd
	go s.read(conn, cmd)
	return conn, nil
}

// setSocketBuffers makes conn's socket buffers hold a message of
// shimMaxMsg (a SOCK_SEQPACKET send fails beyond its send buffer).
func setSocketBuffers(conn *net.UnixConn) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		for _, opt := range []int{unix.SO_SNDBUFFORCE, unix.SO_RCVBUFFORCE} {
			if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, 2*shimMaxMsg); e != nil {
				serr = fmt.Errorf("socket buffer: %w", e)
			}
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// read delivers the shim's answers until its connection ends, then fails
// whatever still waits and forgets the shim (the next call starts one).
func (s *shim) read(conn *net.UnixConn, cmd *exec.Cmd) {
	var err error
	for {
		var rep shimReply
		if rep.files, err = recvMsg(conn, &rep.shimAnswer, false); err != nil {
			break
		}
		s.mu.Lock()
		w, ok := s.waiting[rep.Seq]
		delete(s.waiting, rep.Seq)
		s.mu.Unlock()
		if ok {
			w.ch <- rep
		} else {
			closeFiles(rep.files)
		}
	}
	conn.Close()
	// The next call starts a new shim at once, not after this one is
	// reaped; what waits on this one fails once it is.
	s.mu.Lock()
	if s.conn == conn {
		s.conn, s.cmd = nil, nil
	}
	s.mu.Unlock()
	cmd.Wait()
	s.mu.Lock()
	for seq, w := range s.waiting {
		if w.conn == conn {
			w.ch <- shimReply{shimAnswer: shimAnswer{Seq: seq, Err: fmt.Sprintf("runtime shim exited (%v; %s)", err, cmd.ProcessState)}}
			delete(s.waiting, seq)
		}
	}
	s.mu.Unlock()
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		s.log.Warn("runtime shim connection ended", "err", err)
	}
}

// call sends req with files and waits for the answer. The context bounds
// only the wait: a start the shim has begun runs to its end there.
func (s *shim) call(ctx context.Context, req shimRequest, files ...*os.File) (shimReply, error) {
	s.mu.Lock()
	conn, err := s.connect()
	if err != nil {
		s.mu.Unlock()
		return shimReply{}, err
	}
	s.seq++
	req.Seq = s.seq
	ch := make(chan shimReply, 1)
	s.waiting[req.Seq] = shimWait{conn: conn, ch: ch}
	err = sendMsg(conn, req, files)
	if err != nil {
		delete(s.waiting, req.Seq)
	}
	s.mu.Unlock()
	if err != nil {
		return shimReply{}, fmt.Errorf("runtime shim %s: %w", req.Op, err)
	}
	select {
	case rep := <-ch:
		if rep.Err != "" {
			closeFiles(rep.files)
			if rep.Exists {
				return shimReply{}, fmt.Errorf("%s: %w", rep.Err, errStateExists)
			}
			return shimReply{}, errors.New(rep.Err)
		}
		return rep, nil
	case <-ctx.Done():
		go func() { closeFiles((<-ch).files) }()
		return shimReply{}, fmt.Errorf("runtime shim %s: %w", req.Op, ctx.Err())
	case <-time.After(s.timeout):
		s.log.Error("runtime shim did not answer; killing it", "op", req.Op, "sandbox", req.ID, "waited", s.timeout)
		s.kill(conn)
		rep := <-ch // read fails every waiter once the shim is gone
		closeFiles(rep.files)
		return shimReply{}, fmt.Errorf("runtime shim %s: no answer in %s; it was killed and a new one is started next", req.Op, s.timeout)
	}
}

// kill ends the shim on conn if it still runs.
func (s *shim) kill(conn *net.UnixConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == conn && s.cmd != nil {
		s.cmd.Process.Kill()
	}
}

// userns returns a user namespace mapping 0..IDRangeSize-1 to host ids
// from host (newUserNS, in the shim).
func (s *shim) userns(host int64) (*os.File, error) {
	rep, err := s.call(context.Background(), shimRequest{Op: "userns", HostID: host})
	if err != nil {
		return nil, err
	}
	if len(rep.files) != 1 {
		closeFiles(rep.files)
		return nil, fmt.Errorf("make user namespace for ids %d..: the shim sent %d descriptors", host, len(rep.files))
	}
	return rep.files[0], nil
}

// close asks the shim to exit once no init of its own is left.
func (s *shim) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.conn == nil {
		return
	}
	// The answer is not awaited: the shim closes the connection when it
	// goes, and read forgets it.
	s.seq++
	sendMsg(s.conn, shimRequest{Seq: s.seq, Op: "close"}, nil)
}

// connected reports whether a shim runs (a call would not start one).
func (s *shim) connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn != nil
}

// pid is the shim's process id (0 when none runs).
func (s *shim) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func sendMsg(conn *net.UnixConn, v any, files []*os.File) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > shimMaxMsg {
		return fmt.Errorf("message of %d bytes exceeds %d", len(b), shimMaxMsg)
	}
	var oob []byte
	if len(files) > shimMaxFiles {
		return fmt.Errorf("message with %d descriptors exceeds %d", len(files), shimMaxFiles)
	}
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	_, _, err = conn.WriteMsgUnix(b, oob, nil)
	runtime.KeepAlive(files) // their descriptors are in oob until sent
	return err
}

// recvMsg reads one message into v and returns the descriptors attached
// to it (close-on-exec). The message's size is peeked first and a buffer
// of just that size read into. With strict, fields v does not know are
// an error (a request from a newer daemon).
func recvMsg(conn *net.UnixConn, v any, strict bool) ([]*os.File, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var (
		buf            []byte
		n, oobn, flags int
		rerr           error
		oob            = make([]byte, unix.CmsgSpace(shimMaxFiles*4))
	)
	err = rc.Read(func(fd uintptr) bool {
		size, _, e := unix.Recvfrom(int(fd), nil, unix.MSG_PEEK|unix.MSG_TRUNC)
		if e == unix.EAGAIN {
			return false
		}
		if e != nil {
			rerr = e
			return true
		}
		if size > shimMaxMsg {
			rerr = fmt.Errorf("message of %d bytes exceeds %d", size, shimMaxMsg)
			return true
		}
		buf = make([]byte, max(size, 1))
		n, oobn, flags, _, e = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		if e == unix.EAGAIN {
			return false
		}
		rerr = e
		return true
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	if n == 0 && oobn == 0 {
		return nil, io.EOF
	}
	files, err := guest.ParseRights(oob[:oobn])
	if err != nil {
		return nil, err
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeFiles(files)
		return nil, fmt.Errorf("message truncated (flags %#x)", flags)
	}
	d := json.NewDecoder(bytes.NewReader(buf[:n]))
	if strict {
		d.DisallowUnknownFields()
	}
	if err := d.Decode(v); err != nil {
		closeFiles(files)
		return nil, fmt.Errorf("decode message: %w", err)
	}
	return files, nil
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// ShimMain is the shim: it serves the runtime on descriptor 3 with the
// libcontainer state directory os.Args[2]. It never returns. Call it from
// main when os.Args[1] == ShimArg; the binary must also call InitHook for
// InitArg (libcontainer re-executes it as the sandbox's setup init).
func ShimMain() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "stead runtime shim: usage: "+ShimArg+" STATE_DIR (started by the stead daemon)")
		os.Exit(2)
	}
	// Nothing but the connection is the shim's: a descriptor the daemon
	// held without close-on-exec when it forked would otherwise stay open
	// here (pinning a dataset) for the daemon's whole life.
	unix.CloseRange(shimFD+1, ^uint(0), 0)
	if err := sealSelf(); err != nil {
		fmt.Fprintln(os.Stderr, "stead runtime shim:", err)
		os.Exit(1)
	}
	f := os.NewFile(shimFD, "runtime")
	unix.CloseOnExec(shimFD)
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stead runtime shim:", err)
		os.Exit(1)
	}
	conn := c.(*net.UnixConn)
	if err := setSocketBuffers(conn); err != nil {
		fmt.Fprintln(os.Stderr, "stead runtime shim:", err)
		os.Exit(1)
	}
	srv := &shimServer{stateDir: os.Args[2], conn: conn, pending: map[string]pendingStart{}, done: make(chan struct{})}
	srv.answer(shimAnswer{Hello: shimProtocol})
	srv.serve()
	os.Exit(0)
}

// sealSelf re-executes the shim from a sealed in-memory copy of its
// binary, once: libcontainer then execs that copy as each sandbox's setup
// init instead of making a sealed overlay of the binary at every start
// (the copy protects the binary on disk from a sandbox that reaches
// /proc/<init>/exe, as the overlay would).
func sealSelf() error {
	if exeseal.IsSelfExeCloned() {
		return os.Unsetenv(shimSealedEnv)
	}
	if os.Getenv(shimSealedEnv) != "" {
		// Re-executed once and still not a sealed memfd (a host that
		// forbids executable memfds gets a file copy): go on without;
		// libcontainer then seals the binary at each start itself.
		return os.Unsetenv(shimSealedEnv)
	}
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("open own binary: %w", err)
	}
	defer self.Close()
	st, err := self.Stat()
	if err != nil {
		return fmt.Errorf("open own binary: %w", err)
	}
	sealed, err := exeseal.CloneBinary(self, st.Size(), "stead-shim", os.TempDir())
	if err != nil {
		return fmt.Errorf("seal own binary: %w", err)
	}
	// The descriptor is close-on-exec: the kernel opens the binary before
	// it closes such descriptors, and nothing the shim starts inherits it.
	path := "/proc/self/fd/" + strconv.Itoa(int(sealed.Fd()))
	err = unix.Exec(path, os.Args, append(os.Environ(), shimSealedEnv+"=1"))
	return fmt.Errorf("re-execute sealed binary: %w", err)
}

// shimServer is the shim's side of the connection.
type shimServer struct {
	stateDir string
	conn     *net.UnixConn

	wmu sync.Mutex // one answer at a time

	mu       sync.Mutex
	pending  map[string]pendingStart // started with Stop, until exec or abort
	children int                     // inits started and not yet reaped
	starting int                     // starts in progress
	closing  bool
	done     chan struct{}
	doneOnce sync.Once
	watch    *fdwatch.Watcher
}

// pendingStart is a container whose init waits to run (a start with
// Stop, or a native spawn: c is nil). Its init is reaped only once it ran
// or was destroyed, so that its pid cannot be reused while the daemon
// joins it to cgroups and attaches the network to it.
type pendingStart struct {
	c   *libcontainer.Container
	pid int
}

func (s *shimServer) serve() {
	w, err := fdwatch.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stead runtime shim:", err)
		os.Exit(1)
	}
	s.watch = w
	go func() {
		for {
			var req shimRequest
			files, err := recvMsg(s.conn, &req, true)
			if err != nil {
				if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
					// The daemon is gone: go with it.
					os.Exit(0)
				}
				fmt.Fprintln(os.Stderr, "stead runtime shim:", err)
				os.Exit(1)
			}
			go s.handle(req, files)
		}
	}()
	<-s.done
}

func (s *shimServer) answer(a shimAnswer, files ...*os.File) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := sendMsg(s.conn, a, files); err != nil {
		fmt.Fprintln(os.Stderr, "stead runtime shim: answer:", err)
	}
}

func (s *shimServer) handle(req shimRequest, files []*os.File) {
	defer closeFiles(files)
	a := shimAnswer{Seq: req.Seq}
	switch req.Op {
	case "start":
		pid, err := s.start(req, files)
		a.Pid = pid
		if err != nil {
			a.Err = err.Error()
			a.Exists = errors.Is(err, libcontainer.ErrExist)
		}
	case "spawn":
		pid, err := s.spawn(req, files)
		a.Pid = pid
		if err != nil {
			a.Err = err.Error()
		}
	case "exec":
		if err := s.finish(req.ID, req.Pid, true); err != nil {
			a.Err = err.Error()
		}
	case "abort":
		if err := s.finish(req.ID, req.Pid, false); err != nil {
			a.Err = err.Error()
		}
	case "userns":
		f, err := newUserNS(req.HostID)
		if err != nil {
			a.Err = err.Error()
			s.answer(a)
			return
		}
		defer f.Close()
		s.answer(a, f)
		return
	case "close":
		s.mu.Lock()
		s.closing = true
		s.maybeExit()
		s.mu.Unlock()
		return
	default:
		a.Err = fmt.Sprintf("unknown request %q", req.Op)
	}
	s.answer(a)
}

// maybeExit ends the shim once it was asked to close and no init of its
// own is left to reap. The caller holds s.mu.
func (s *shimServer) maybeExit() {
	if s.closing && s.children == 0 && s.starting == 0 && len(s.pending) == 0 {
		s.doneOnce.Do(func() { close(s.done) })
	}
}

// start creates and starts the container of req.
func (s *shimServer) start(req shimRequest, files []*os.File) (int, error) {
	s.mu.Lock()
	s.starting++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.starting--
		s.maybeExit()
		s.mu.Unlock()
	}()
	if !validID(req.ID) || req.Config == nil {
		return 0, fmt.Errorf("start request for %q: bad request", req.ID)
	}
	want := 1 + req.Extra
	if req.IDMapFile {
		want++
	}
	if len(files) != want {
		return 0, fmt.Errorf("start sandbox %s: %d descriptors, want %d", req.ID, len(files), want)
	}
	logf, extra := files[0], files[1:1+req.Extra]
	cfg := req.Config
	if req.IDMapFile {
		path := "/proc/self/fd/" + strconv.Itoa(int(files[len(files)-1].Fd()))
		for _, m := range cfg.Mounts {
			if m.IDMapping != nil {
				m.IDMapping.UserNSPath = path
			}
		}
	}
	c, err := libcontainer.Create(s.stateDir, req.ID, cfg)
	if err != nil {
		return 0, fmt.Errorf("create sandbox %s: %w", req.ID, err)
	}
	p := &libcontainer.Process{
		Args: req.Args, Env: req.Env, Cwd: "/",
		Stdout: logf, Stderr: logf,
		ExtraFiles: extra,
		Init:       true,
	}
	if req.Stop {
		err = c.Start(p)
	} else {
		err = c.Run(p)
	}
	if err != nil {
		c.Signal(unix.SIGKILL)
		c.Destroy()
		return 0, fmt.Errorf("start sandbox %s: %w", req.ID, err)
	}
	pid, err := p.Pid()
	if err != nil {
		c.Signal(unix.SIGKILL)
		c.Destroy()
		return 0, fmt.Errorf("start sandbox %s: %w", req.ID, err)
	}
	s.mu.Lock()
	s.children++
	if req.Stop {
		s.pending[req.ID] = pendingStart{c: c, pid: pid}
	}
	s.mu.Unlock()
	if !req.Stop {
		s.reap(pid)
	}
	return pid, nil
}

// spawn forks a native init (native.go) and keeps it pending.
func (s *shimServer) spawn(req shimRequest, files []*os.File) (int, error) {
	if !validID(req.ID) || req.Spawn == nil {
		return 0, fmt.Errorf("spawn request for %q: bad request", req.ID)
	}
	if len(files) != 1+req.Extra {
		return 0, fmt.Errorf("spawn sandbox %s: %d descriptors, want %d", req.ID, len(files), 1+req.Extra)
	}
	s.mu.Lock()
	if old, ok := s.pending[req.ID]; ok && old.c == nil {
		// An earlier native start of the sandbox whose release (exec,
		// sent without waiting) has not come yet: the daemon spawns again
		// only once that one is gone, so it is reaped from here on.
		delete(s.pending, req.ID)
		go s.reap(old.pid)
	} else if ok {
		s.mu.Unlock()
		return 0, fmt.Errorf("spawn sandbox %s: a start of it waits already", req.ID)
	}
	s.starting++
	s.mu.Unlock()
	p, err := spawnInit(*req.Spawn, files[0], files[1:])
	s.mu.Lock()
	defer s.mu.Unlock()
	s.starting--
	if err != nil {
		s.maybeExit()
		return 0, fmt.Errorf("spawn sandbox %s: %w", req.ID, err)
	}
	// Reaped by pid from here on (finish), not through p (Release sets
	// p.Pid to -1: the pid is taken first).
	pid := p.Pid
	p.Release()
	if pid <= 0 {
		return 0, fmt.Errorf("spawn sandbox %s: no pid", req.ID)
	}
	s.children++
	s.pending[req.ID] = pendingStart{pid: pid}
	return pid, nil
}

// finish runs (exec) or destroys (abort) a container started with Stop,
// or releases (exec) or kills (abort) a native spawn; pid, when not 0,
// names the spawn.
func (s *shimServer) finish(id string, pid int, run bool) error {
	s.mu.Lock()
	ps, ok := s.pending[id]
	stale := ok && pid != 0 && ps.pid != pid
	if !stale {
		delete(s.pending, id)
	}
	s.mu.Unlock()
	if stale {
		// For an earlier spawn of the sandbox, given up for reaping when
		// this one came (spawn).
		return nil
	}
	defer func() {
		s.mu.Lock()
		s.maybeExit()
		s.mu.Unlock()
	}()
	if !ok {
		// A native release (pid set) finds nothing when the next spawn
		// of the sandbox gave its init up for reaping already.
		if run && pid == 0 {
			return fmt.Errorf("start sandbox %s: not waiting to run", id)
		}
		return nil
	}
	defer s.reap(ps.pid)
	c := ps.c
	if c == nil { // a native spawn: the daemon runs it itself
		if !run && ps.pid > 0 {
			unix.Kill(ps.pid, unix.SIGKILL)
		}
		return nil
	}
	if run {
		if err := c.Exec(); err != nil {
			return fmt.Errorf("start sandbox %s: %w", id, err)
		}
		return nil
	}
	c.Signal(unix.SIGKILL)
	if err := c.Destroy(); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	return nil
}

// reap reaps the init pid once it exits, waiting on the shim's epoll set
// (no thread per init). It keeps nothing of libcontainer's: the process
// and container objects of a started sandbox are dropped (their
// descriptors close when they are collected), so the shim holds a pidfd
// per running sandbox and no more.
func (s *shimServer) reap(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		go func() {
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, 0, nil)
			s.exited()
		}()
		return
	}
	wait := func() {
		var info unix.Siginfo
		unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED, nil)
		unix.Close(fd)
		s.exited()
	}
	if _, err := s.watch.Once(fd, func() { go wait() }); err != nil {
		// The pidfd is non-blocking (a waitid on it would not wait):
		// wait by pid, blocking a thread.
		unix.Close(fd)
		go func() {
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, 0, nil)
			s.exited()
		}()
	}
}

// exited counts an init reaped.
func (s *shimServer) exited() {
	s.mu.Lock()
	s.children--
	s.maybeExit()
	s.mu.Unlock()
}
