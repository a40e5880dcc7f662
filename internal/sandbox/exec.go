package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/guest"
	"github.com/stead-dev/stead/internal/store"
)

// running returns a sandbox that must be running for an exec.
func (s *Service) running(ctx context.Context, tenant, id string) (store.Sandbox, error) {
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return sb, err
	}
	if sb.State != store.StateRunning {
		return sb, fmt.Errorf("sandbox %s is %s, not running%s: %w", sb.Name, sb.State, runHint(sb.State), errs.ErrConflict)
	}
	return sb, s.mustHold(sb.ID, "exec in")
}

func runHint(st store.SandboxState) string {
	switch st {
	case store.StatePaused:
		return " (resume it)"
	case store.StateStopped:
		return " (start it)"
	case store.StateDeleted:
		return " (undelete and start it)"
	}
	return ""
}

// streamWriter adapts one side of an api.ExecStream to io.Writer and keeps
// a copy for the buffered result when asked.
type streamWriter struct {
	emit func([]byte) error
	keep *strings.Builder
	s    *Service
	id   string
}

func (w *streamWriter) Write(p []byte) (int, error) {
	w.s.act.touch(w.id, ActivityExec, w.s.now())
	if w.keep != nil {
		w.keep.Write(p)
	}
	if w.emit != nil {
		if err := w.emit(p); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Exec runs a command in a running sandbox. With a nil out the output is
// returned in the result; otherwise it is streamed and the result holds
// only the exit.
func (s *Service) Exec(ctx context.Context, tenant, id string, req client.ExecRequest, out api.ExecStream) (client.ExecResult, error) {
	var stdin io.Reader
	if req.Stdin != "" {
		stdin = strings.NewReader(req.Stdin)
	}
	return s.exec(ctx, tenant, id, req, stdin, out)
}

// exec is Exec and ExecInput: it runs req with stdin (nil: none) in a
// running sandbox.
func (s *Service) exec(ctx context.Context, tenant, id string, req client.ExecRequest, stdin io.Reader, out api.ExecStream) (client.ExecResult, error) {
	if len(req.Command) == 0 || req.Command[0] == "" {
		return client.ExecResult{}, fmt.Errorf("exec: command is empty: %w", errs.ErrInvalid)
	}
	if err := checkExec(req.Command, req.Cwd); err != nil {
		return client.ExecResult{}, err
	}
	uid, gid, err := user(req.User)
	if err != nil {
		return client.ExecResult{}, err
	}
	env, err := envList(req.Env)
	if err != nil {
		return client.ExecResult{}, err
	}
	timeout, err := parseDuration("timeout", req.Timeout, 0)
	if err != nil {
		return client.ExecResult{}, err
	}
	sb, err := s.running(ctx, tenant, id)
	if err != nil {
		return client.ExecResult{}, err
	}
	if env, err = s.withSecretEnv(ctx, sb, env); err != nil {
		return client.ExecResult{}, fmt.Errorf("exec in sandbox %s: %w", sb.Name, err)
	}
	s.act.touch(sb.ID, ActivityExec, s.now())
	defer func() { s.act.touch(sb.ID, ActivityExec, s.now()) }()
	spec := guest.ExecSpec{Args: req.Command, Env: env, Cwd: req.Cwd, UID: uid, GID: gid, Background: req.Background, Stdin: stdin}
	var stdout, stderr strings.Builder
	ow := &streamWriter{s: s, id: sb.ID}
	ew := &streamWriter{s: s, id: sb.ID}
	if out != nil {
		ow.emit, ew.emit = out.Stdout, out.Stderr
	} else {
		ow.keep, ew.keep = &stdout, &stderr
	}
	spec.Stdout, spec.Stderr = ow, ew
	ectx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	res, err := s.rt.Exec(ectx, sb.ID, spec)
	if err != nil {
		if timeout > 0 && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return client.ExecResult{ExitCode: 124, Signal: "SIGKILL", TimedOut: true, Pid: res.Pid,
				Stdout: []byte(stdout.String()), Stderr: []byte(stderr.String())}, nil
		}
		return client.ExecResult{}, fmt.Errorf("exec in sandbox %s: %w", sb.Name, err)
	}
	return client.ExecResult{ExitCode: res.ExitCode, Signal: res.Signal, Pid: res.Pid, LogPath: res.LogPath,
		Stdout: []byte(stdout.String()), Stderr: []byte(stderr.String())}, nil
}

// ptySession counts terminal traffic as activity; a silent attach does not
// keep a sandbox awake.
type ptySession struct {
	pty interface {
		io.ReadWriteCloser
		Resize(rows, cols uint16) error
		Wait() (int, error)
	}
	s  *Service
	id string
}

func (p *ptySession) Read(b []byte) (int, error) {
	n, err := p.pty.Read(b)
	if n > 0 {
		p.s.act.touch(p.id, ActivityTerminal, p.s.now())
	}
	return n, err
}

func (p *ptySession) Write(b []byte) (int, error) {
	p.s.act.touch(p.id, ActivityTerminal, p.s.now())
	return p.pty.Write(b)
}

func (p *ptySession) Resize(rows, cols uint16) error { return p.pty.Resize(rows, cols) }
func (p *ptySession) Wait() (int, error)             { return p.pty.Wait() }
func (p *ptySession) Close() error                   { return p.pty.Close() }

// checkExec refuses what execve and chdir cannot take: a NUL byte in an
// argument or in the working directory.
func checkExec(args []string, cwd string) error {
	if err := checkStrings("exec: argument", args...); err != nil {
		return err
	}
	return checkStrings("exec: cwd", cwd)
}

// OpenPTY starts an interactive terminal in a running sandbox.
func (s *Service) OpenPTY(ctx context.Context, tenant, id string, req api.PTYRequest) (api.PTY, error) {
	if len(req.Command) > 0 && req.Command[0] == "" {
		return nil, fmt.Errorf("open terminal: the program is empty: %w", errs.ErrInvalid)
	}
	if err := checkExec(req.Command, req.Cwd); err != nil {
		return nil, err
	}
	uid, gid, err := user(req.User)
	if err != nil {
		return nil, err
	}
	env, err := envList(req.Env)
	if err != nil {
		return nil, err
	}
	sb, err := s.running(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if env, err = s.withSecretEnv(ctx, sb, env); err != nil {
		return nil, fmt.Errorf("open terminal in sandbox %s: %w", sb.Name, err)
	}
	args := req.Command
	if len(args) == 0 {
		args = []string{"/bin/sh", "-c", "if [ -x /bin/bash ]; then exec /bin/bash -l; else exec /bin/sh -l; fi"}
	}
	rows, cols := req.Rows, req.Cols
	if rows == 0 || cols == 0 {
		rows, cols = 24, 80
	}
	s.act.touch(sb.ID, ActivityTerminal, s.now())
	p, err := s.rt.OpenPTY(ctx, sb.ID, guest.ExecSpec{Args: args, Env: env, Cwd: req.Cwd, UID: uid, GID: gid}, rows, cols)
	if err != nil {
		return nil, fmt.Errorf("open terminal in sandbox %s: %w", sb.Name, err)
	}
	return &ptySession{pty: p, s: s, id: sb.ID}, nil
}

// ServiceInput writes data to the stdin of a running sandbox's agent
// service (what `stead attach` types).
func (s *Service) ServiceInput(ctx context.Context, tenant, id string, data []byte) error {
	sb, err := s.running(ctx, tenant, id)
	if err != nil {
		return err
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		return err
	}
	if sp.Service == nil {
		return fmt.Errorf("sandbox %s has no agent service: %w", sb.Name, errs.ErrConflict)
	}
	s.act.touch(sb.ID, ActivityTerminal, s.now())
	if err := s.rt.ServiceInput(ctx, sb.ID, data); err != nil {
		return fmt.Errorf("input to the agent of sandbox %s: %w (it may be restarting): %w", sb.Name, err, errs.ErrConflict)
	}
	return nil
}

// AgentLog opens the supervised service's log; it works on stopped
// sandboxes too, since the log lives in the sandbox root.
func (s *Service) AgentLog(ctx context.Context, tenant, id string) (io.ReadCloser, error) {
	v, _, err := s.fsFor(ctx, tenant, id, guest.AgentLog, false, false)
	if err != nil {
		return nil, err
	}
	r := v.root
	rc, _, err := r.ReadFile(v.inner)
	if err != nil {
		r.Close()
		if errors.Is(err, errs.ErrNotFound) {
			return io.NopCloser(strings.NewReader("")), nil
		}
		return nil, err
	}
	return closingReader{rc, r}, nil
}
