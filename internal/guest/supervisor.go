package guest

import (
	"fmt"
	"io"
	"os"
	"path"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/agentlog"
)

// supervisor runs the agent service and restarts it by policy, with
// exponential backoff (1 s doubling to 60 s, reset after 60 s of uptime).
// Output goes to AgentLog in the sandbox root, so it survives a crash, a
// stop and a daemon restart: the service writes into a pipe that init
// drains into an agentlog.Writer, which rotates the log (the supervisor's
// own lines go through the same pipe, in order with the service's).
type supervisor struct {
	in   *initProc
	spec ServiceSpec

	mu       sync.Mutex
	pid      int
	stdin    *os.File
	restarts int
	stopping bool
	exited   chan struct{} // closed when the current run ends
	done     chan struct{} // closed when the supervisor loop ends
}

func newSupervisor(in *initProc, spec ServiceSpec) *supervisor {
	return &supervisor{in: in, spec: spec, done: make(chan struct{})}
}

func (s *supervisor) status() (pid, restarts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid, s.restarts
}

func (s *supervisor) logf(log io.Writer, format string, args ...any) {
	fmt.Fprintf(log, "[stead %s] %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
}

func (s *supervisor) run() {
	defer close(s.done)
	log, closeLog, err := s.openLog()
	if err != nil {
		s.in.log.Error("open agent log", "err", err)
		return
	}
	defer closeLog()
	backoff := time.Second
	for {
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		r, w, err := os.Pipe()
		if err != nil {
			s.mu.Unlock()
			s.logf(log, "cannot create stdin pipe: %v", err)
			return
		}
		began := time.Now()
		pid, done, err := s.in.start(procSpec{
			args: s.spec.Command, env: s.spec.Env, cwd: s.spec.Cwd,
			uid: s.spec.UID, gid: s.spec.GID, files: []*os.File{r, log, log}, setsid: true,
		})
		r.Close()
		if err != nil {
			w.Close()
			s.mu.Unlock()
			s.logf(log, "service failed to start: %v", err)
			if s.spec.Restart != "always" && s.spec.Restart != "on-failure" {
				return
			}
			if !s.sleep(backoff) {
				return
			}
			backoff = min(backoff*2, time.Minute)
			continue
		}
		s.pid, s.stdin, s.exited = pid, w, make(chan struct{})
		exited := s.exited
		s.mu.Unlock()
		s.logf(log, "service started (pid %d): %s", pid, brief(s.spec.Command))

		st := <-done
		s.mu.Lock()
		s.pid = 0
		s.stdin.Close()
		s.stdin = nil
		close(exited)
		stopping := s.stopping
		s.mu.Unlock()
		if st.signal != "" {
			s.logf(log, "service exited on signal %s", st.signal)
		} else {
			s.logf(log, "service exited with code %d", st.code)
		}
		if stopping {
			return
		}
		restart := s.spec.Restart == "always" || (s.spec.Restart == "on-failure" && st.code != 0)
		if !restart {
			return
		}
		if time.Since(began) > time.Minute {
			backoff = time.Second
		}
		s.logf(log, "restarting in %s", backoff)
		if !s.sleep(backoff) {
			return
		}
		backoff = min(backoff*2, time.Minute)
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
	}
}

// wait waits up to d for the supervisor loop to end (its log closed).
func (s *supervisor) wait(d time.Duration) {
	select {
	case <-s.done:
	case <-time.After(d):
	}
}

// openLog opens the rotating log in AgentLog's directory (a symlink the
// agent may have planted at any component is refused, never followed) and
// a pipe drained into it. The service gets the pipe's write end; closeLog
// closes it, lets the pipe drain (for a few seconds at most: a forked
// child of the service may still hold it) and closes the log.
func (s *supervisor) openLog() (*os.File, func(), error) {
	dir, name := path.Split(AgentLog)
	os.MkdirAll(dir, 0o755)
	dfd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	lw, err := agentlog.OpenWriter(dfd, agentlog.Config{MaxSize: s.spec.LogMaxSize, Keep: s.spec.LogKeep},
		agentlog.WriterOptions{Name: name, UID: s.spec.UID, GID: s.spec.GID})
	if err != nil {
		return nil, nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		lw.Close()
		return nil, nil, fmt.Errorf("create the log pipe: %w", err)
	}
	// A larger pipe absorbs bursts while a rotation waits for a compression.
	unix.FcntlInt(pw.Fd(), unix.F_SETPIPE_SZ, 1<<20)
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		if err := agentlog.Pump(pr, lw, 0); err != nil {
			s.in.log.Error("agent log pipe", "err", err)
		}
	}()
	return pw, func() {
		pw.Close()
		select {
		case <-pumped:
		case <-time.After(3 * time.Second):
			pr.Close()
			<-pumped
		}
		pr.Close()
		lw.Close()
	}, nil
}

// sleep waits d unless a stop begins; it reports whether to go on.
func (s *supervisor) sleep(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-s.in.stopping:
		return false
	}
}

// input writes data to the running service's stdin.
func (s *supervisor) input(data []byte) error {
	s.mu.Lock()
	stdin := s.stdin
	s.mu.Unlock()
	if stdin == nil {
		return fmt.Errorf("the service is not running")
	}
	// A service that does not read its stdin must not block the caller.
	stdin.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := stdin.Write(data); err != nil {
		return fmt.Errorf("write to the service's stdin: %w", err)
	}
	return nil
}

// stop runs the stop hook (a line on stdin, or a signal to the service's
// process group), waits up to grace for the service to exit, then kills it.
func (s *supervisor) stop(grace time.Duration) {
	s.mu.Lock()
	s.stopping = true
	pid, stdin, exited := s.pid, s.stdin, s.exited
	s.mu.Unlock()
	if pid == 0 {
		return
	}
	if s.spec.StopLine != "" && stdin != nil {
		stdin.SetWriteDeadline(time.Now().Add(time.Second))
		stdin.Write([]byte(s.spec.StopLine + "\n"))
	} else {
		sig := syscall.Signal(s.spec.StopSignal)
		if sig == 0 {
			sig = unix.SIGTERM
		}
		unix.Kill(-pid, sig)
	}
	if grace <= 0 {
		grace = 30 * time.Second
	}
	select {
	case <-exited:
	case <-time.After(grace):
		unix.Kill(-pid, unix.SIGKILL)
		<-exited
	}
}

// brief shortens a command line for the log.
func brief(argv []string) string {
	s := fmt.Sprintf("%q", argv)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
