package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// Exit codes of the stead CLI (documented in the root help).
const (
	exitOK              = 0
	exitError           = 1
	exitUsage           = 2
	exitNotFound        = 3
	exitConflict        = 4
	exitUnauthenticated = 5
	exitRefused         = 6
)

// Defaults for reaching the daemon.
const (
	defaultSocket = "/run/stead/stead.sock"
	defaultHTTP   = "http://127.0.0.1:7878"
)

// globals are the flags and streams every verb shares.
type globals struct {
	endpoint string
	apiKey   string
	json     bool
	tenant   string // --tenant: the tenant an admin key acts in
	dataDir  string // --data-dir: where the daemon's admin.key is
	key      apiKey // the key the client was made with, and its source

	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// run is the CLI: it parses args, runs the verb and returns the exit code.
func run(args []string) int {
	return runIO(args, os.Stdin, os.Stdout, os.Stderr)
}

// runIO is run with explicit standard streams.
func runIO(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRootCmd(g)
	root.SetArgs(args)
	root.SetIn(g.stdin)
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := root.ExecuteContext(ctx)
	return g.reportError(root, err, args)
}

// newRootCmd builds the command tree.
func newRootCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "stead",
		Short: "Long-running sandboxes for AI agents",
		Long: `stead keeps an AI agent's workspace alive for days: its files, state, session log
and audit trail survive stop, crash, daemon restart and the loss of the machine.

This binary is both the daemon (stead serve) and its CLI. The CLI reaches the
daemon at --endpoint, authenticating with the first API key it finds:
  1. --api-key
  2. $STEAD_API_KEY
  3. the daemon's bootstrap admin key, DATA_DIR/admin.key, where DATA_DIR is
     --data-dir, else $STEAD_DATA_DIR, else /var/lib/stead (the same flag and
     variable as stead serve's). Only that file is read; a refused key's
     error names where it came from.

With --json, API objects are printed as JSON on stdout and an error as one
JSON line on stderr, always of this shape (status 0: found by the CLI, not
the daemon; errors and hint only when there is something to say):
  {"error": {"status": 404, "title": "Not Found", "detail": "...",
             "errors": ["..."], "hint": "...", "exit_code": 3}}

Exit codes:
  0  success
  1  error
  2  usage error (bad flags or arguments)
  3  not found (no such sandbox, file, template, volume or exposed port)
  4  conflict: the sandbox's state forbids it, or it is already where the
     verb would take it (start or resume of a running sandbox, stop of a
     stopped one, pause of a paused one, delete of a deleted one); nothing
     was changed. Each verb's help says when it exits 4.
  5  unauthenticated (missing or unknown API key)
  6  refused by the tenant's quota (HTTP 429) or a spend budget (HTTP 402);
     nothing was changed
  stead exec and stead shell exit with the command's own exit code
  (128+N when it was killed by signal N; 127 when the program does not
  exist and 126 when it cannot be run, as in a shell).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.endpoint, "endpoint", defaultEndpoint(),
		"daemon address: http://HOST:PORT or unix:///path.sock (env STEAD_ENDPOINT)")
	root.PersistentFlags().StringVar(&g.apiKey, "api-key", "",
		"API key (default $STEAD_API_KEY, else the contents of DATA_DIR/admin.key)")
	root.PersistentFlags().StringVar(&g.dataDir, "data-dir", "",
		"the daemon's data directory, whose admin.key is read when no key is given (env STEAD_DATA_DIR; default "+defaultDataDir+")")
	root.PersistentFlags().BoolVar(&g.json, "json", false, "print API objects as JSON, and errors as JSON on stderr")
	root.PersistentFlags().StringVar(&g.tenant, "tenant", "", "act in this tenant (admin keys only; default: the key's own)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	root.AddCommand(
		newServeCmd(),
		newCreateCmd(g),
		newListCmd(g),
		newInfoCmd(g),
		newStartCmd(g),
		newStopCmd(g),
		newPauseCmd(g),
		newResumeCmd(g),
		newDeleteCmd(g),
		newUndeleteCmd(g),
		newResizeCmd(g),
		newUpdateCmd(g),
		newExecCmd(g),
		newShellCmd(g),
		newConnectCmd(g),
		newAttachCmd(g),
		newLogsCmd(g),
		newDuCmd(g),
		newFilesCmd(g),
		newCpCmd(g),
		newTemplateCmd(g),
		newKeyCmd(g),
		newTenantCmd(g),
		newNodeCmd(g),
		newWarmCmd(g),
		newCheckpointCmd(g),
		newSnapshotCmd(g),
		newForkCmd(g),
		newRollbackCmd(g),
		newVolumeCmd(g),
		newSecretCmd(g),
		newBudgetCmd(g),
		newSessionCmd(g),
		newAuditCmd(g),
		newTaskCmd(g),
		newObsCmd(g),
		newKVCmd(g),
		newMCPCmd(g),
		newOrientCmd(g),
		newPushCmd(g),
		newPullCmd(g),
		newRestoreCmd(g),
		newRemoteCmd(g),
		newRepoCmd(g),
		newScheduleCmd(g),
		newBackupPolicyCmd(g),
		newDrillCmd(g),
		newArchiveCmd(g),
		newHistoryCmd(g),
		newOpCmd(g),
		newNetworkCmd(g),
		newPortCmd(g),
		newPortForwardCmd(g),
		newUsageCmd(g),
		newQuotaCmd(g),
		newEventsCmd(g),
		newWebhookCmd(g),
	)
	return root
}

// defaultEndpoint is $STEAD_ENDPOINT, else the local socket if it exists,
// else the default TCP address.
func defaultEndpoint() string {
	if ep := os.Getenv("STEAD_ENDPOINT"); ep != "" {
		return ep
	}
	if _, err := os.Stat(defaultSocket); err == nil {
		return "unix://" + defaultSocket
	}
	return defaultHTTP
}

// resolveAPIKey finds the API key (findAPIKey) and remembers where it
// came from for the error of a refused key.
func (g *globals) resolveAPIKey() string {
	g.key = findAPIKey(g.apiKey, g.dataDir, os.Getenv, defaultDataDir)
	return g.key.key
}

// client returns an API client for the global flags.
func (g *globals) client() (*client.Client, error) {
	c, err := client.New(g.endpoint, g.resolveAPIKey())
	if err != nil {
		return nil, usageError{fmt.Errorf("--endpoint: %w", err)}
	}
	return c.WithTenant(g.tenant), nil
}

// usageError marks an error in how the CLI was called (exit 2).
type usageError struct{ err error }

// Error returns the underlying message.
func (e usageError) Error() string { return e.err.Error() }

// Unwrap returns the underlying error.
func (e usageError) Unwrap() error { return e.err }

// exitCodeError makes run exit with code without printing anything (the
// exit code of a command run by exec or shell).
type exitCodeError struct{ code int }

// Error describes the exit code.
func (e exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// args returns a cobra.PositionalArgs that accepts between min and max
// arguments (max < 0: no limit) and reports a usage error otherwise.
func args(min, max int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if len(a) < min || (max >= 0 && len(a) > max) {
			want := fmt.Sprintf("%d", min)
			switch {
			case max < 0:
				want = fmt.Sprintf("at least %d", min)
			case max != min:
				want = fmt.Sprintf("%d to %d", min, max)
			}
			return usageError{fmt.Errorf("%s takes %s argument(s), got %d; usage: %s", cmd.CommandPath(), want, len(a), cmd.UseLine())}
		}
		return nil
	}
}

// exitCodeFor maps an error to an exit code.
func exitCodeFor(err error) int {
	var ue usageError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case client.IsNotFound(err):
		return exitNotFound
	case client.IsConflict(err):
		return exitConflict
	case client.IsUnauthenticated(err):
		return exitUnauthenticated
	case client.IsQuotaExceeded(err), client.StatusCode(err) == http.StatusPaymentRequired:
		return exitRefused
	}
	// Errors cobra raises itself before a verb runs.
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "flag needs an argument"} {
		if strings.HasPrefix(msg, p) {
			return exitUsage
		}
	}
	return exitError
}

// group makes cmd a command group: alone it prints its help; with an
// unknown subcommand it is a usage error.
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = func(c *cobra.Command, a []string) error {
		if len(a) > 0 {
			return usageError{fmt.Errorf("unknown command %q for %q", a[0], c.CommandPath())}
		}
		return nil
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	return cmd
}
