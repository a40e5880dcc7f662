package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newDrillCmd is `stead drill SANDBOX` and `stead drill ls`.
func newDrillCmd(g *globals) *cobra.Command {
	var req client.DrillRequest
	var verify string
	var noWait bool
	cmd := &cobra.Command{
		Use:   "drill SANDBOX",
		Short: "Prove a sandbox can be recovered: restore its latest push, verify, time it",
		Long: `A disaster-recovery drill restores the sandbox's latest push into a
throw-away sandbox and checks that it came back whole: its tree digest
must equal the one recorded at push time, and the --verify command, if
given, must exit 0 inside it. It prints the recovery time (from the start
of the restore to a verified, running sandbox) and the verdicts, and the
drill is recorded (stead drill ls).

With --empty-data-dir the restore goes through a second, empty daemon data
directory that knows only the repository and its key: what recovering on
a new machine after losing this one would take. Its pool is of the same
kind as this daemon's (a fresh btrfs image for a btrfs daemon), so the
recovery time is the one a replacement machine would see; the image, its
loop device, mounts and cgroups are removed when the drill ends.

The exit code is 1 if the drill failed.`,
		Example: `  stead drill agent-1
  stead drill agent-1 --empty-data-dir
  stead drill agent-1 --verify "test -s /workspace/notes.md"
  stead drill agent-1 --verify "sh -c 'cd /workspace && make test'"
  stead drill ls agent-1`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if verify != "" {
				argv, err := splitCommand(verify)
				if err != nil {
					return usageError{fmt.Errorf("--verify: %w", err)}
				}
				req.Verify = argv
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			op, err := c.Drill(cmd.Context(), a[0], req)
			if err != nil {
				return fmt.Errorf("drill %s: %w", a[0], err)
			}
			return g.finishOperation(cmd, c, "drill "+a[0], op, noWait, g.printDrillResult)
		},
	}
	cmd.Flags().BoolVar(&req.EmptyDataDir, "empty-data-dir", false, "restore through a fresh, empty daemon data directory (a lost machine)")
	cmd.Flags().StringVar(&verify, "verify", "", "command to run in the restored sandbox; exit 0 passes (quote it as one argument)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, noWaitUsage)
	cmd.AddCommand(newDrillLsCmd(g))
	return cmd
}

func newDrillLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls [SANDBOX]",
		Aliases: []string{"list"},
		Short:   "List recorded drills, newest first",
		Example: `  stead drill ls
  stead drill ls agent-1 --json`,
		Args: args(0, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			sandbox := ""
			if len(a) == 1 {
				sandbox = a[0]
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListDrills(cmd.Context(), sandbox)
			if err != nil {
				return fmt.Errorf("list drills: %w", err)
			}
			if g.json {
				if list == nil {
					list = []client.Drill{}
				}
				return printJSON(g.stdout, list)
			}
			if len(list) == 0 {
				fmt.Fprintln(g.stderr, "no drills yet; run one with: stead drill SANDBOX")
				return nil
			}
			return writeDrills(g.stdout, list)
		},
	}
}

// writeDrills prints drills as an aligned table.
func writeDrills(w io.Writer, list []client.Drill) error {
	tw := newTable(w)
	row(tw, "ID", "TIME", "SANDBOX", "SNAPSHOT", "RESULT", "RECOVERY", "DIGEST", "VERIFY", "DATA DIR")
	for _, d := range list {
		dataDir := "this daemon"
		if d.EmptyDataDir {
			dataDir = "empty"
		}
		row(tw, d.ID, d.StartedAt.Local().Format(remoteTimeLayout), d.Sandbox, shortID(d.RemoteSnapshot), passFail(d.OK),
			seconds(d.RecoverySeconds), digestVerdict(d.DigestOK), verifyVerdict(d), dataDir)
	}
	return tw.Flush()
}

// passFail formats a drill's verdict.
func passFail(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAILED"
}

// digestVerdict formats the tree digest comparison.
func digestVerdict(ok bool) string {
	if ok {
		return "match"
	}
	return "MISMATCH"
}

// verifyVerdict formats the verify command's outcome ("-" without one).
func verifyVerdict(d client.Drill) string {
	if d.VerifyExit == nil {
		return "-"
	}
	return "exit " + strconv.Itoa(*d.VerifyExit)
}

// printDrillResult prints a drill's recovery time and verdicts; a failed
// drill is an error (exit 1).
func (g *globals) printDrillResult(op client.Operation) error {
	var d client.Drill
	if err := op.DecodeResult(&d); err != nil {
		return err
	}
	sb := d.Sandbox
	if sb == "" {
		sb = op.Target
	}
	verdict := "PASSED"
	if !d.OK {
		verdict = "FAILED"
	}
	fmt.Fprintf(g.stdout, "drill %s of %s (remote snapshot %s): %s\n", orDash(d.ID), orDash(sb), shortID(d.RemoteSnapshot), verdict)
	fmt.Fprintf(g.stdout, "recovery time: %s (restore %s, verify %s); %d files, %s\n",
		seconds(d.RecoverySeconds), seconds(d.RestoreSeconds), seconds(d.VerifySeconds), d.Files, bytesOrZero(d.Bytes))
	fmt.Fprintf(g.stdout, "tree digest: %s\n", digestVerdict(d.DigestOK))
	if d.VerifyExit != nil {
		fmt.Fprintf(g.stdout, "verify: %s\n", verifyVerdict(d))
		if out := strings.TrimRight(d.VerifyOutput, "\n"); out != "" {
			fmt.Fprintln(g.stdout, "  "+strings.ReplaceAll(out, "\n", "\n  "))
		}
	}
	if d.OK {
		return nil
	}
	why := d.Error
	switch {
	case why != "":
	case !d.DigestOK:
		why = "the restored tree digest differs from the pushed one"
	case d.VerifyExit != nil && *d.VerifyExit != 0:
		why = "the verify command exited " + strconv.Itoa(*d.VerifyExit)
	default:
		why = "see the drill record (stead drill ls --json)"
	}
	return fmt.Errorf("drill of %s failed: %s", orDash(sb), why)
}

// splitCommand splits a command line into words as a POSIX shell would
// for the simple cases: blanks separate words, '...' keeps everything
// literally, "..." keeps blanks and allows \" and \\, and a backslash
// outside quotes escapes the next character. No expansion is done.
func splitCommand(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case r == '\'':
			inWord = true
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j == len(rs) {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			cur.WriteString(string(rs[i+1 : j]))
			i = j
		case r == '"':
			inWord = true
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '\\' && j+1 < len(rs) && (rs[j+1] == '"' || rs[j+1] == '\\') {
					j++
				}
				cur.WriteRune(rs[j])
			}
			if j == len(rs) {
				return nil, fmt.Errorf("unterminated \" in %q", s)
			}
			i = j
		case r == '\\':
			if i+1 == len(rs) {
				return nil, fmt.Errorf("trailing \\ in %q", s)
			}
			inWord = true
			i++
			cur.WriteRune(rs[i])
		default:
			inWord = true
			cur.WriteRune(r)
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("empty command")
	}
	return words, nil
}
