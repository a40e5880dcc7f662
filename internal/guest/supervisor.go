package guest

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// supervisor runs the agent service and restarts it by policy, with
// exponential backoff (1 s doubling to 60 s, reset after 60 s of uptime).
// Output goes to AgentLog in the sandbox root, so it survives a crash, a
// stop and a daemon restart.
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

func (s *supervisor) logf(log *os.File, format string, args ...any) {
	fmt.Fprintf(log, "[stead %s] %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
}

func (s *supervisor) run() {
	defer close(s.done)
	os.MkdirAll("/var/log", 0o755)
	// O_NOFOLLOW: the agent owns /var/log/agent.log and could make it a
	// symlink to a file it may not write.
	log, err := os.OpenFile(AgentLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		s.in.log.Error("open agent log", "err", err)
		return
	}
	defer log.Close()
	log.Chown(s.spec.UID, s.spec.GID)
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
