package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
)

// maxExecStdin caps what --stdin reads (the request body limit is 1 MiB).
const maxExecStdin = 512 << 10

// newExecCmd is `stead exec`.
func newExecCmd(g *globals) *cobra.Command {
	var (
		req   client.ExecRequest
		env   []string
		stdin bool
	)
	cmd := &cobra.Command{
		Use:   "exec SANDBOX [flags] [--] COMMAND [ARGS...]",
		Short: "Run a command in a running sandbox",
		Long: `Run a command in a running sandbox, streaming its stdout and stderr live.
stead exec exits with the command's exit code (128+N if it was killed by
signal N), 127 if the program does not exist and 126 if it cannot be run
(not executable), as a shell does. A --cwd that does not exist is an error
of the request (exit 1) naming the directory. Ctrl-C ends the command.

Flags go before SANDBOX; everything after SANDBOX is the command.`,
		Example: `  stead exec agent-1 -- ls -la /workspace
  stead exec --user root --cwd / agent-1 -- apt-get install -y jq
  stead exec --timeout 30s --env DEBUG=1 agent-1 -- make test
  echo 'print(1)' | stead exec -i agent-1 -- python3
  stead exec --background agent-1 -- ./long-job.sh`,
		Args: args(2, -1),
		RunE: func(cmd *cobra.Command, a []string) error {
			id, command := a[0], a[1:]
			if len(command) > 0 && command[0] == "--" {
				command = command[1:]
			}
			if len(command) == 0 {
				return usageError{errors.New("exec needs a command after the sandbox")}
			}
			req.Command = command
			var err error
			if req.Env, err = parseEnv(env); err != nil {
				return err
			}
			if req.Timeout != "" {
				if _, err := time.ParseDuration(req.Timeout); err != nil {
					return usageError{fmt.Errorf("--timeout %q: want a duration like 30s or 5m", req.Timeout)}
				}
			}
			if stdin {
				b, err := io.ReadAll(io.LimitReader(g.stdin, maxExecStdin+1))
				if err != nil {
					return fmt.Errorf("read stdin: %w", err)
				}
				if len(b) > maxExecStdin {
					return usageError{fmt.Errorf("--stdin takes at most %d KiB; copy bigger input with stead files put", maxExecStdin>>10)}
				}
				req.Stdin = string(b)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if req.Background || g.json {
				res, err := c.Exec(ctx, id, req)
				if err != nil {
					return fmt.Errorf("exec in %s: %w", id, err)
				}
				if g.json {
					if err := printJSON(g.stdout, res); err != nil {
						return err
					}
				} else if res.Pid == 0 && res.ExitCode != 0 {
					g.stderr.Write(res.Stderr) // the program is missing or cannot run
				} else {
					fmt.Fprintf(g.stdout, "started pid %d (output in %s)\n", res.Pid, res.LogPath)
				}
				return exitStatus(res)
			}
			res, err := c.ExecStream(ctx, id, req, g.stdout, g.stderr)
			if err != nil {
				if ctx.Err() != nil {
					return exitCodeError{130}
				}
				return fmt.Errorf("exec in %s: %w", id, err)
			}
			if res.TimedOut {
				fmt.Fprintf(g.stderr, "stead: command timed out after %s and was killed\n", req.Timeout)
			}
			return exitStatus(res)
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false)
	f.StringVarP(&req.User, "user", "u", "", "run as: agent (default) or root")
	f.StringVarP(&req.Cwd, "cwd", "w", "", "working directory (default the user's home, / for root)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringVar(&req.Timeout, "timeout", "", "kill the command's process group after this long, e.g. 5m")
	f.BoolVarP(&req.Background, "background", "d", false, "start the command and return its pid at once")
	f.BoolVarP(&stdin, "stdin", "i", false, "send this program's stdin (up to 512 KiB) to the command")
	return cmd
}

// exitStatus returns the error that makes stead exit like the command did.
func exitStatus(res client.ExecResult) error {
	code := res.ExitCode
	if code == 0 && res.Signal != "" {
		code = 128
		if n := unix.SignalNum(res.Signal); n != 0 {
			code += int(n)
		}
	}
	if code == 0 {
		return nil
	}
	return exitCodeError{code}
}
