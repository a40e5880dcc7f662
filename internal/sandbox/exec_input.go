package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/guest"
)

// ExecInput runs a command in a running sandbox as Exec does with a
// stream, its standard input read from stdin as the command runs (until
// stdin ends) instead of req.Stdin's fixed bytes. It serves clients that
// keep a command's input open and write to it later (the E2B API's
// SendInput). Output goes to out (required); the result holds the exit.
func (s *Service) ExecInput(ctx context.Context, tenant, id string, req client.ExecRequest, stdin io.Reader, out api.ExecStream) (client.ExecResult, error) {
	if stdin == nil || out == nil {
		return client.ExecResult{}, fmt.Errorf("exec with input: stdin and out are required: %w", errs.ErrInvalid)
	}
	if req.Background || req.Stdin != "" {
		return client.ExecResult{}, fmt.Errorf("exec with input: neither background nor fixed stdin: %w", errs.ErrInvalid)
	}
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
	spec := guest.ExecSpec{Args: req.Command, Env: env, Cwd: req.Cwd, UID: uid, GID: gid, Stdin: stdin,
		Stdout: &streamWriter{s: s, id: sb.ID, emit: out.Stdout}, Stderr: &streamWriter{s: s, id: sb.ID, emit: out.Stderr}}
	ectx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	res, err := s.rt.Exec(ectx, sb.ID, spec)
	if err != nil {
		if timeout > 0 && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return client.ExecResult{ExitCode: 124, Signal: "SIGKILL", TimedOut: true, Pid: res.Pid}, nil
		}
		return client.ExecResult{}, fmt.Errorf("exec in sandbox %s: %w", sb.Name, err)
	}
	return client.ExecResult{ExitCode: res.ExitCode, Signal: res.Signal, Pid: res.Pid}, nil
}
