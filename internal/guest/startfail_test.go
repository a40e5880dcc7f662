package guest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/testutil"
)

// startInit runs init's exec server in the test process on a socket in a
// temporary directory and returns a client for it.
func startInit(t *testing.T) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), SocketName)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	in := &initProc{log: slog.New(slog.NewTextHandler(io.Discard, nil)), ln: ln,
		waiters: map[int]chan exitStatus{}, stopping: make(chan struct{})}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	go in.reap(sigs)
	go in.serve()
	t.Cleanup(func() {
		signal.Stop(sigs)
		close(in.stopping)
		ln.Close()
	})
	return &Client{Socket: sock}
}

func execIn(t *testing.T, c *Client, spec ExecSpec) (ExecResult, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	spec.Stdout, spec.Stderr = &stdout, &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Exec(ctx, spec)
	return res, stderr.String(), err
}

func TestExecMissingProgramExits127(t *testing.T) {
	testutil.RequireRoot(t)
	c := startInit(t)
	for _, tc := range []struct {
		name, prog, want string
	}{
		{"in PATH", "stead-no-such-program", `stead: exec: "stead-no-such-program": executable file not found in $PATH` + "\n"},
		{"absolute", "/nope/prog", `stead: exec: "/nope/prog": no such file or directory` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, stderr, err := execIn(t, c, ExecSpec{Args: []string{tc.prog, "arg"}, Env: []string{"PATH=/usr/bin:/bin"}})
			if err != nil {
				t.Fatalf("exec: %v (want a result with exit 127)", err)
			}
			if res.ExitCode != ExitNotFound || res.Pid != 0 {
				t.Errorf("exit code %d pid %d, want 127 and no pid", res.ExitCode, res.Pid)
			}
			if stderr != tc.want {
				t.Errorf("stderr %q, want %q", stderr, tc.want)
			}
		})
	}
}

func TestExecUnrunnableProgramExits126(t *testing.T) {
	testutil.RequireRoot(t)
	c := startInit(t)
	dir := t.TempDir()
	plain := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(plain, []byte("echo hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, prog, want string
	}{
		{"not executable", plain, `stead: exec: "` + plain + `": permission denied` + "\n"},
		{"a directory", dir, `stead: exec: "` + dir + `": permission denied` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, stderr, err := execIn(t, c, ExecSpec{Args: []string{tc.prog}})
			if err != nil {
				t.Fatalf("exec: %v (want a result with exit 126)", err)
			}
			if res.ExitCode != ExitCannotRun {
				t.Errorf("exit code %d, want 126", res.ExitCode)
			}
			if stderr != tc.want {
				t.Errorf("stderr %q, want %q", stderr, tc.want)
			}
		})
	}
	// A program that runs is unaffected.
	res, _, err := execIn(t, c, ExecSpec{Args: []string{"/bin/sh", "-c", "exit 3"}})
	if err != nil || res.ExitCode != 3 || res.Pid == 0 {
		t.Fatalf("sh -c 'exit 3': %+v, %v; want exit 3 with a pid", res, err)
	}
}

func TestExecBadCwdNamesTheDirectory(t *testing.T) {
	testutil.RequireRoot(t)
	c := startInit(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	locked := filepath.Join(dir, "locked")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(locked, "in"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	for _, tc := range []struct {
		name, cwd string
		uid       int
		want      string
	}{
		{"missing", "/nope", 0, "cwd /nope: no such directory"},
		{"a file", file, 0, "cwd " + file + ": not a directory"},
		{"below a file", file + "/x", 0, "cwd " + file + "/x: not a directory"},
		{"not searchable by the user", filepath.Join(locked, "in"), 1000, "cwd " + filepath.Join(locked, "in") + ": permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The program does not exist either: the directory is what
			// the error must name.
			res, stderr, err := execIn(t, c, ExecSpec{Args: []string{"stead-no-such-program"}, Cwd: tc.cwd, UID: tc.uid, GID: tc.uid})
			if err == nil {
				t.Fatalf("exec in %s: %+v, stderr %q; want an error", tc.cwd, res, stderr)
			}
			if !errors.Is(err, errs.ErrInvalid) || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "stead-no-such-program") {
				t.Errorf("error %q, want ErrInvalid starting %q and not naming the program", err, tc.want)
			}
		})
	}
	// The root user may enter it.
	res, _, err := execIn(t, c, ExecSpec{Args: []string{"/bin/true"}, Cwd: filepath.Join(locked, "in")})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("root in %s: %+v, %v", locked, res, err)
	}
}

func TestExecStartFailureInBackgroundAndOnTerminal(t *testing.T) {
	testutil.RequireRoot(t)
	c := startInit(t)
	// Background: no pid, the exit code and the message. (Background
	// execs log under ExecLogDir, here on the host: leave it as it was.)
	if _, err := os.Stat(ExecLogDir); errors.Is(err, os.ErrNotExist) {
		t.Cleanup(func() { os.Remove(ExecLogDir) })
	}
	var stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Exec(ctx, ExecSpec{Args: []string{"stead-no-such-program"}, Background: true, Stderr: &stderr})
	if err != nil || res.ExitCode != ExitNotFound || res.Pid != 0 {
		t.Errorf("background: %+v, %v; want exit 127 without a pid", res, err)
	}
	if !strings.Contains(stderr.String(), `exec: "stead-no-such-program": executable file not found in $PATH`) {
		t.Errorf("background stderr %q", stderr.String())
	}
	if res.LogPath != "" {
		b, _ := os.ReadFile(res.LogPath)
		os.Remove(res.LogPath)
		if !strings.Contains(string(b), "executable file not found") {
			t.Errorf("background log %q lacks the message", b)
		}
	}
	// Terminal: the message on the terminal, exit 127 from Wait.
	p, err := c.OpenPTY(ctx, ExecSpec{Args: []string{"stead-no-such-program"}}, 24, 80)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	defer p.Close()
	out, _ := io.ReadAll(p) // EOF or EIO once the terminal is closed
	if !strings.Contains(string(out), `stead: exec: "stead-no-such-program": executable file not found in $PATH`) {
		t.Errorf("terminal output %q", out)
	}
	code, err := p.Wait()
	if err != nil || code != ExitNotFound {
		t.Errorf("pty wait: %d, %v; want 127", code, err)
	}
	// A bad directory on a terminal is the request's error too.
	if _, err := c.OpenPTY(ctx, ExecSpec{Args: []string{"/bin/sh"}, Cwd: "/nope"}, 24, 80); !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), "cwd /nope: no such directory") {
		t.Errorf("pty in /nope: %v", err)
	}
}
