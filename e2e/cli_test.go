package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
)

// cli runs the real stead binary's CLI against d and returns its exit
// code, standard output and standard error.
func (d *daemon) cli(args ...string) (int, string, string) {
	d.t.Helper()
	cmd := exec.Command(d.bin, args...)
	cmd.Env = append(os.Environ(), "STEAD_ENDPOINT=http://"+d.addr, "STEAD_API_KEY="+d.key)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	d.t.Fatalf("run stead %v: %v", args, err)
	return 0, "", ""
}

// purgeAll destroys every sandbox of d.
func purgeAll(t *testing.T, d *daemon) {
	ctx := ctxT(t)
	list, err := d.c.ListSandboxes(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
			t.Fatal(err)
		}
	}
}

// exitFourStates returns the states a verb's help names in its sentence
// "Exits 4 if the sandbox is ...;".
func exitFourStates(t *testing.T, help string) map[string]bool {
	t.Helper()
	_, rest, ok := strings.Cut(help, "Exits 4 if the sandbox is ")
	if !ok {
		t.Fatalf("the help says nothing of exit 4:\n%s", help)
	}
	sentence, _, _ := strings.Cut(rest, ";")
	named := map[string]bool{}
	for _, st := range []string{"running", "paused", "stopped", "deleted"} {
		named[st] = regexp.MustCompile(`\b` + st + `\b`).MatchString(sentence)
	}
	return named
}

// TestLifecycleVerbsExitCodesMatchTheirHelp is issue 10, item 11: every
// lifecycle verb of the real CLI, against a sandbox in every state, exits
// with the code its help promises: 4 exactly in the states its "Exits 4"
// sentence names (the already-there cases included: start of a running
// sandbox, stop of a stopped one, resume of a running one), 0 otherwise,
// 3 for a sandbox that does not exist. The message says what happened
// once, without internal class names.
func TestLifecycleVerbsExitCodesMatchTheirHelp(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	_, rootHelp, _ := d.cli("--help")
	for _, line := range []string{"3  not found", "4  conflict"} {
		if !strings.Contains(rootHelp, line) {
			t.Fatalf("root help has no %q:\n%s", line, rootHelp)
		}
	}
	states := []string{"running", "paused", "stopped", "deleted"}
	n := 0
	// put makes a fresh sandbox in state st (with a snapshot, for
	// rollback) and returns its name and snapshot id.
	put := func(t *testing.T, st string) (string, string) {
		t.Helper()
		n++
		name := fmt.Sprintf("s%d-%s", n, st)
		sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: name, NoStart: st != "running" && st != "paused"})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := d.c.CreateSnapshot(ctx, sb.ID, client.CreateSnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		switch st {
		case "paused":
			_, err = d.c.PauseSandbox(ctx, name)
		case "deleted":
			_, err = d.c.DeleteSandbox(ctx, name, false)
		}
		if err != nil {
			t.Fatal(err)
		}
		return name, snap.ID
	}
	verbs := []struct {
		help []string // the verb's help command
		args func(name, snap string) []string
		want map[string]int
	}{
		{[]string{"start"}, func(n, _ string) []string { return []string{"start", n} },
			map[string]int{"running": 4, "paused": 0, "stopped": 0, "deleted": 4}},
		{[]string{"stop"}, func(n, _ string) []string { return []string{"stop", n} },
			map[string]int{"running": 0, "paused": 0, "stopped": 4, "deleted": 4}},
		{[]string{"pause"}, func(n, _ string) []string { return []string{"pause", n} },
			map[string]int{"running": 0, "paused": 4, "stopped": 4, "deleted": 4}},
		{[]string{"resume"}, func(n, _ string) []string { return []string{"resume", n} },
			map[string]int{"running": 4, "paused": 0, "stopped": 4, "deleted": 4}},
		{[]string{"delete"}, func(n, _ string) []string { return []string{"delete", n} },
			map[string]int{"running": 0, "paused": 0, "stopped": 0, "deleted": 4}},
		{nil, func(n, _ string) []string { return []string{"delete", "--purge", n} },
			map[string]int{"running": 0, "paused": 0, "stopped": 0, "deleted": 0}},
		{[]string{"undelete"}, func(n, _ string) []string { return []string{"undelete", n} },
			map[string]int{"running": 4, "paused": 4, "stopped": 4, "deleted": 0}},
		{[]string{"resize"}, func(n, _ string) []string { return []string{"resize", n, "--type", "medium"} },
			map[string]int{"running": 4, "paused": 4, "stopped": 0, "deleted": 4}},
		{[]string{"snapshot", "create"}, func(n, _ string) []string { return []string{"snapshot", "create", n} },
			map[string]int{"running": 0, "paused": 0, "stopped": 0, "deleted": 4}},
		{[]string{"fork"}, func(n, _ string) []string { return []string{"fork", n, "--no-start"} },
			map[string]int{"running": 0, "paused": 0, "stopped": 0, "deleted": 4}},
		{[]string{"rollback"}, func(n, s string) []string { return []string{"rollback", n, s} },
			map[string]int{"running": 0, "paused": 0, "stopped": 0, "deleted": 4}},
	}
	classNames := regexp.MustCompile(`: (conflict|forbidden|invalid argument)\b`)
	for _, v := range verbs {
		var named map[string]bool
		if v.help != nil {
			_, help, _ := d.cli(append(v.help, "--help")...)
			named = exitFourStates(t, help)
		}
		for _, st := range states {
			t.Run(strings.Join(v.args("X", "SNAP"), " ")+" on "+st, func(t *testing.T) {
				want := v.want[st]
				if named != nil && named[st] != (want == 4) {
					t.Fatalf("the help of %v names %s among its exit-4 states: %v; the table wants %d", v.help, st, named[st], want)
				}
				t.Cleanup(func() { purgeAll(t, d) }) // the pool holds so many quotas only
				name, snap := put(t, st)
				code, _, stderr := d.cli(v.args(name, snap)...)
				if code != want {
					t.Fatalf("exit %d, want %d; stderr: %s", code, want, stderr)
				}
				if want == 0 {
					return
				}
				if classNames.MatchString(stderr) {
					t.Fatalf("an internal class name in the message: %s", stderr)
				}
				if strings.Count(stderr, name) > 1 {
					t.Fatalf("the message repeats itself: %s", stderr)
				}
			})
		}
		t.Run(strings.Join(v.args("missing", "snap-missing"), " "), func(t *testing.T) {
			code, _, stderr := d.cli(v.args("missing", "snap-missing")...)
			if code != 3 {
				t.Fatalf("exit %d, want 3; stderr: %s", code, stderr)
			}
			if strings.Count(stderr, "missing") > 1 || strings.Count(stderr, "not found") > 1 {
				t.Fatalf("the message repeats itself: %s", stderr)
			}
		})
	}
	t.Run("create with a taken name", func(t *testing.T) {
		name, _ := put(t, "stopped")
		if code, _, stderr := d.cli("create", name, "--no-start"); code != 4 {
			t.Fatalf("exit %d, want 4; stderr: %s", code, stderr)
		}
	})
}

// TestInfoAndOrientOutputSayWhatIs: info of a running sandbox shows no
// stopped_at from its previous stop and the effective restart policy (not
// "-"); orient --json lists its files as [] when there are none.
func TestInfoAndOrientOutputSayWhatIs(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	if _, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "svc",
		Service: &client.Service{Command: []string{"sleep", "infinity"}}}); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"stop", "start"} {
		if code, _, stderr := d.cli(verb, "svc"); code != 0 {
			t.Fatalf("%s: exit %d: %s", verb, code, stderr)
		}
	}
	_, out, _ := d.cli("info", "svc", "--json")
	var sb client.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); err != nil {
		t.Fatalf("info --json: %v\n%s", err, out)
	}
	if sb.State != "running" || sb.StoppedAt != nil || sb.StopReason != "" {
		t.Fatalf("info --json of a running sandbox: state %s, stopped_at %v, stop_reason %q", sb.State, sb.StoppedAt, sb.StopReason)
	}
	if sb.Service == nil || sb.Service.Restart != "on-failure" {
		t.Fatalf("info --json: service %+v", sb.Service)
	}
	_, out, _ = d.cli("info", "svc")
	if !regexp.MustCompile(`Restart:\s+on-failure`).MatchString(out) || !regexp.MustCompile(`Stopped:\s+-`).MatchString(out) {
		t.Fatalf("info:\n%s", out)
	}
	code, out, stderr := d.cli("orient", "svc", "--json")
	if code != 0 {
		t.Fatalf("orient: exit %d: %s", code, stderr)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	for _, list := range []string{"files", "checkpoints", "open_tasks"} {
		if got := string(raw[list]); got != "[]" {
			t.Errorf("orient --json %q: %s, want []", list, got)
		}
	}
	if !bytes.Contains(raw["last_stopped_at"], []byte("T")) {
		t.Errorf("orient lost the last stop: %s", raw["last_stopped_at"])
	}
}
