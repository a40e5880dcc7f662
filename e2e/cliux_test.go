package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
)

// cliEnv runs the real stead binary against d with env added to a
// environment that has no STEAD_API_KEY or STEAD_DATA_DIR of its own.
func (d *daemon) cliEnv(env []string, args ...string) (int, string, string) {
	d.t.Helper()
	cmd := exec.Command(d.bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STEAD_API_KEY=") && !strings.HasPrefix(kv, "STEAD_DATA_DIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "STEAD_ENDPOINT=http://"+d.addr)
	cmd.Env = append(cmd.Env, env...)
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

// TestCLIFindsTheKeyOfItsDataDirAndNamesAWrongOne: a daemon with
// --data-dir in a temporary directory; the CLI given the same directory
// (STEAD_DATA_DIR or --data-dir) finds its key, and a wrong or missing key
// file is named in the error, by the CLI and by the daemon.
func TestCLIFindsTheKeyOfItsDataDirAndNamesAWrongOne(t *testing.T) {
	d := newDaemon(t)
	keyFile := filepath.Join(d.dataDir, "admin.key")
	if log := d.logText(); !strings.Contains(log, keyFile) || strings.Contains(log, "/var/lib/stead/admin.key") {
		t.Fatalf("the daemon's start-up output does not name %s:\n%s", keyFile, log)
	}
	if code, _, errOut := d.cliEnv([]string{"STEAD_DATA_DIR=" + d.dataDir}, "list"); code != 0 {
		t.Fatalf("STEAD_DATA_DIR: exit %d: %s", code, errOut)
	}
	if code, _, errOut := d.cliEnv(nil, "--data-dir", d.dataDir, "list"); code != 0 {
		t.Fatalf("--data-dir: exit %d: %s", code, errOut)
	}
	wrong := t.TempDir()
	if err := os.WriteFile(filepath.Join(wrong, "admin.key"), []byte("stead_not-this-daemons-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := d.cliEnv([]string{"STEAD_DATA_DIR=" + wrong}, "list")
	if code != 5 || !strings.Contains(errOut, filepath.Join(wrong, "admin.key")) || !strings.Contains(errOut, "STEAD_API_KEY") {
		t.Fatalf("wrong key file: exit %d, stderr %q; want 5 naming %s", code, errOut, filepath.Join(wrong, "admin.key"))
	}
	t.Logf("a wrong key file:\n%s", errOut)
	// No key file at all: the daemon's own answer names its real key.
	code, _, errOut = d.cliEnv(nil, "--data-dir", t.TempDir(), "list")
	if code != 5 || !strings.Contains(errOut, "the admin key is in "+keyFile) || !strings.Contains(errOut, "does not exist") {
		t.Fatalf("missing key file: exit %d, stderr %q", code, errOut)
	}
	// --json: the same, as JSON on stderr.
	code, out, errOut := d.cliEnv([]string{"STEAD_DATA_DIR=" + wrong}, "--json", "list")
	var e struct {
		Error struct {
			Status   int    `json:"status"`
			Title    string `json:"title"`
			Detail   string `json:"detail"`
			Hint     string `json:"hint"`
			ExitCode int    `json:"exit_code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(errOut), &e); err != nil || code != 5 || out != "" {
		t.Fatalf("--json: exit %d, stdout %q, stderr %q: %v", code, out, errOut, err)
	}
	if e.Error.Status != 401 || e.Error.ExitCode != 5 || !strings.Contains(e.Error.Hint, filepath.Join(wrong, "admin.key")) {
		t.Fatalf("--json error %+v", e.Error)
	}
}

// TestNewcomerSeesHostTemplateAndShellExitCodes: template ls on a fresh
// daemon lists host; exec of a missing program exits 127, of a file that
// cannot run 126, with the message on stderr, through the CLI (exec,
// exec --json, exec -d, shell) and the API alike; a --cwd that does not
// exist is an error naming the directory; --json errors are JSON.
func TestNewcomerSeesHostTemplateAndShellExitCodes(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	code, out, errOut := d.cli("template", "ls")
	if code != 0 || !strings.Contains(out, "host") || !strings.Contains(out, "on first use") {
		t.Fatalf("template ls on a fresh daemon: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := d.cli("--json", "template", "ls"); code != 0 || !strings.Contains(out, `"on_demand": true`) {
		t.Fatalf("template ls --json: %s", out)
	}
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "newcomer", Template: "host"})
	if err != nil {
		t.Fatal(err)
	}
	if code, out, _ := d.cli("template", "ls"); code != 0 || strings.Contains(out, "on first use") || strings.Count(out, "host") < 2 {
		t.Fatalf("template ls after the first create:\n%s", out)
	}
	d.sh(ctx, sb.ID, "", "echo 'echo hi' > /workspace/notes.txt; chmod 644 /workspace/notes.txt")

	const notFound = `stead: exec: "nope": executable file not found in $PATH` + "\n"
	code, out, errOut = d.cli("exec", sb.ID, "nope")
	if code != 127 || out != "" || errOut != notFound {
		t.Fatalf("exec nope: exit %d, stdout %q, stderr %q; want 127 and %q", code, out, errOut, notFound)
	}
	code, _, errOut = d.cli("exec", sb.ID, "/workspace/notes.txt")
	if code != 126 || errOut != `stead: exec: "/workspace/notes.txt": permission denied`+"\n" {
		t.Fatalf("exec of a non-executable file: exit %d, stderr %q; want 126", code, errOut)
	}
	code, _, errOut = d.cli("exec", "-d", sb.ID, "nope")
	if code != 127 || errOut != notFound {
		t.Fatalf("exec -d nope: exit %d, stderr %q", code, errOut)
	}
	code, out, _ = d.cli("--json", "exec", sb.ID, "nope")
	var res client.ExecResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 127 || res.ExitCode != 127 || string(res.Stderr) != notFound {
		t.Fatalf("exec --json nope: exit %d, %s (%v)", code, out, err)
	}
	// The output is text in the JSON, not base64.
	if !strings.Contains(out, `"stderr": "stead: exec: \"nope\": executable file not found in $PATH\n"`) || strings.Contains(out, "_base64") {
		t.Fatalf("exec --json nope prints its stderr as text? %s", out)
	}
	code, out, _ = d.cli("shell", sb.ID, "--", "nope")
	if code != 127 || !strings.Contains(out, strings.TrimSuffix(notFound, "\n")) {
		t.Fatalf("shell -- nope: exit %d, terminal %q", code, out)
	}
	// The API says the same.
	r, err := d.c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"nope"}})
	if err != nil || r.ExitCode != 127 || string(r.Stderr) != notFound {
		t.Fatalf("API exec nope: %+v (stderr %q), %v", r, r.Stderr, err)
	}
	var streamed bytes.Buffer
	if r, err := d.c.ExecStream(ctx, sb.ID, client.ExecRequest{Command: []string{"/workspace/notes.txt"}}, &bytes.Buffer{}, &streamed); err != nil || r.ExitCode != 126 || !strings.Contains(streamed.String(), "permission denied") {
		t.Fatalf("API exec stream of a non-executable file: %+v, stderr %q, %v", r, streamed.String(), err)
	}

	// A missing working directory is the request's fault and names it.
	code, _, errOut = d.cli("exec", "--cwd", "/nope", sb.ID, "ls")
	if code != 1 || !strings.Contains(errOut, "cwd /nope: no such directory") || strings.Contains(errOut, `"ls"`) {
		t.Fatalf("exec --cwd /nope: exit %d, stderr %q", code, errOut)
	}
	if _, err := d.c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"ls"}, Cwd: "/nope"}); client.StatusCode(err) != 400 || !strings.Contains(err.Error(), "cwd /nope: no such directory") {
		t.Fatalf("API exec in /nope: %v; want 400 naming the directory", err)
	}
	code, _, errOut = d.cli("shell", "--cwd", "/nope", sb.ID)
	if code != 1 || !strings.Contains(errOut, "cwd /nope: no such directory") {
		t.Fatalf("shell --cwd /nope: exit %d, stderr %q", code, errOut)
	}
	// A working program still runs where it is asked to.
	if code, out, errOut := d.cli("exec", "--cwd", "/workspace", sb.ID, "--", "sh", "-c", "pwd; exit 7"); code != 7 || out != "/workspace\n" {
		t.Fatalf("exec sh: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// --json errors are JSON on stderr, one shape.
	code, out, errOut = d.cli("--json", "info", "no-such-sandbox")
	var e map[string]map[string]any
	if err := json.Unmarshal([]byte(errOut), &e); err != nil || code != 3 || out != "" {
		t.Fatalf("--json info: exit %d, stdout %q, stderr %q (%v)", code, out, errOut, err)
	}
	if e["error"]["status"] != float64(404) || e["error"]["exit_code"] != float64(3) || e["error"]["title"] != "Not Found" || e["error"]["detail"] == "" {
		t.Fatalf("--json error %v", e)
	}
}
