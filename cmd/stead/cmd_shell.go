package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/stead-dev/stead/client"
)

// newShellCmd is `stead shell`.
func newShellCmd(g *globals) *cobra.Command { return newTerminalCmd(g, false) }

// newConnectCmd is `stead connect`: start or resume if needed, then a shell.
func newConnectCmd(g *globals) *cobra.Command { return newTerminalCmd(g, true) }

// newTerminalCmd builds `stead shell` and, with connect, `stead connect`.
func newTerminalCmd(g *globals, connect bool) *cobra.Command {
	var (
		opts client.PTYOptions
		env  []string
	)
	use, short, long, example := "shell SANDBOX [flags] [-- COMMAND [ARGS...]]", "Open an interactive terminal in a sandbox", `Open an interactive terminal in a running sandbox: the user's login shell,
or the command after --. The local terminal is put in raw mode and window
size changes are passed on. stead shell exits with the shell's exit code.`, `  stead shell agent-1
  stead shell --user root agent-1
  stead shell agent-1 -- htop`
	if connect {
		use, short, long, example = "connect SANDBOX [flags] [-- COMMAND [ARGS...]]", "Bring a sandbox back (start or resume) and open a terminal in it", `Connect to a sandbox: if it is stopped it is started, if it is paused it is
resumed, then an interactive terminal opens as with stead shell.`, `  stead connect agent-1
  stead connect agent-1 -- tail -f /workspace/notes.md`
	}
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: example,
		Args:    args(1, -1),
		RunE: func(cmd *cobra.Command, a []string) error {
			id := a[0]
			pos, command := splitAtDash(a, cmd.ArgsLenAtDash())
			if len(pos) > 1 {
				return usageError{fmt.Errorf("put the command after --: stead shell %s -- %v", id, pos[1:])}
			}
			opts.Command = command
			var err error
			if opts.Env, err = parseEnv(env); err != nil {
				return err
			}
			if _, ok := opts.Env["TERM"]; !ok {
				if t := os.Getenv("TERM"); t != "" {
					if opts.Env == nil {
						opts.Env = map[string]string{}
					}
					opts.Env["TERM"] = t
				}
			}
			in, isTerm := os.Stdin, term.IsTerminal(int(os.Stdin.Fd()))
			if isTerm {
				if w, h, err := term.GetSize(int(os.Stdin.Fd())); err == nil {
					opts.Rows, opts.Cols = uint16(h), uint16(w)
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if connect {
				sb, err := c.Connect(ctx, id)
				if err != nil {
					return fmt.Errorf("connect to %s: %w", id, err)
				}
				fmt.Fprintf(g.stderr, "connected to %s (%s)\n", sb.Name, sb.State)
			}
			conn, err := c.PTY(ctx, id, opts)
			if err != nil {
				return fmt.Errorf("shell in %s: %w", id, err)
			}
			defer func() { _ = conn.Close() }()

			if isTerm {
				state, err := term.MakeRaw(int(in.Fd()))
				if err != nil {
					return fmt.Errorf("set terminal raw: %w", err)
				}
				defer func() { _ = term.Restore(int(in.Fd()), state) }()

				winch := make(chan os.Signal, 1)
				signal.Notify(winch, syscall.SIGWINCH)
				defer signal.Stop(winch)
				go func() {
					for range winch {
						if w, h, err := term.GetSize(int(in.Fd())); err == nil {
							_ = conn.Resize(uint16(h), uint16(w))
						}
					}
				}()
			}
			go func() {
				_, _ = io.Copy(conn, in)
			}()
			_, err = io.Copy(g.stdout, conn)
			if code, ok := conn.ExitCode(); ok {
				if code != 0 {
					return exitCodeError{code}
				}
				return nil
			}
			if ctx.Err() != nil {
				return exitCodeError{130}
			}
			if err == nil {
				err = errors.New("connection closed before the shell exited")
			}
			return fmt.Errorf("shell in %s: %w", id, err)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&opts.User, "user", "u", "", "run as: agent (default) or root")
	f.StringVarP(&opts.Cwd, "cwd", "w", "", "working directory")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	return cmd
}
