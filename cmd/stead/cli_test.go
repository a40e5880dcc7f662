package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// cliBackend implements just what the CLI tests call; any other method
// panics through the nil embedded interface.
type cliBackend struct {
	api.Backend
	mu  sync.Mutex
	tar []byte
}

func (b *cliBackend) Authenticate(_ context.Context, secret string) (api.Principal, error) {
	if secret != "k" {
		return api.Principal{}, errs.ErrUnauthenticated
	}
	return api.Principal{TenantID: "t1"}, nil
}

func (b *cliBackend) GetSandbox(_ context.Context, tenant, id string) (client.Sandbox, error) {
	if id == "missing" {
		return client.Sandbox{}, fmt.Errorf("sandbox %q: %w", id, errs.ErrNotFound)
	}
	return client.Sandbox{ID: "sb-1", Name: id, State: "running", Tenant: tenant}, nil
}

func (b *cliBackend) ListSandboxes(_ context.Context, tenant string, _ bool) ([]client.Sandbox, error) {
	return []client.Sandbox{
		{ID: "sb-1", Name: "alpha", State: "running"},
		{ID: "sb-22", Name: "a-much-longer-name", State: "stopped"},
	}, nil
}

func (b *cliBackend) StartSandbox(_ context.Context, _, id string) (client.Sandbox, error) {
	return client.Sandbox{}, fmt.Errorf("start %s: already running: %w", id, errs.ErrConflict)
}

func (b *cliBackend) Exec(_ context.Context, _, _ string, req client.ExecRequest, out api.ExecStream) (client.ExecResult, error) {
	_ = out.Stdout([]byte(strings.Join(req.Command, " ") + "\n"))
	_ = out.Stderr([]byte("env=" + req.Env["A"] + " user=" + req.User + "\n"))
	return client.ExecResult{ExitCode: 3}, nil
}

func (b *cliBackend) StatFile(_ context.Context, _, _, p string) (client.FileInfo, error) {
	return client.FileInfo{Path: p, Type: "dir"}, nil
}

func (b *cliBackend) UploadTar(_ context.Context, _, _, _ string, r io.Reader) error {
	data, err := io.ReadAll(r)
	b.mu.Lock()
	b.tar = data
	b.mu.Unlock()
	return err
}

func (b *cliBackend) DownloadTar(_ context.Context, _, _, _ string, w io.Writer) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, err := w.Write(b.tar)
	return err
}

// stead runs the CLI against srv and returns its exit code and output.
func stead(t *testing.T, srv *httptest.Server, a ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runIO(append([]string{"--endpoint", srv.URL, "--api-key", "k"}, a...), strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func newCLIServer(t *testing.T) (*httptest.Server, *cliBackend) {
	b := &cliBackend{}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	return srv, b
}

func TestExitCodes(t *testing.T) {
	srv, _ := newCLIServer(t)
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"info", "agent"}, exitOK},
		{[]string{"info", "missing"}, exitNotFound},
		{[]string{"start", "agent"}, exitConflict},
		{[]string{"start"}, exitUsage},
		{[]string{"no-such-verb"}, exitUsage},
		{[]string{"files", "bogus"}, exitUsage},
		{[]string{"list", "--no-such-flag"}, exitUsage},
		{[]string{"exec", "agent", "--", "false"}, 3},
		{[]string{"--api-key", "wrong", "list"}, exitUnauthenticated},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := stead(t, srv, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, stderr)
			}
		})
	}
}

func TestListPrintsAlignedTableOrJSON(t *testing.T) {
	srv, _ := newCLIServer(t)
	code, out, _ := stead(t, srv, "list")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("table:\n%s", out)
	}
	col := strings.Index(lines[0], "STATE")
	if strings.Index(lines[1], "running") != col || strings.Index(lines[2], "stopped") != col {
		t.Fatalf("columns not aligned:\n%s", out)
	}
	code, out, _ = stead(t, srv, "list", "--json")
	if code != 0 || !strings.Contains(out, `"name": "a-much-longer-name"`) {
		t.Fatalf("json output:\n%s", out)
	}
}

func TestExecStreamsOutputAndPassesFlags(t *testing.T) {
	srv, _ := newCLIServer(t)
	code, out, errOut := stead(t, srv, "exec", "--user", "root", "-e", "A=1", "agent", "ls", "-la", "/")
	if code != 3 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	if out != "ls -la /\n" || errOut != "env=1 user=root\n" {
		t.Fatalf("stdout %q stderr %q", out, errOut)
	}
}

func TestCpRoundTripKeepsModesAndSymlinks(t *testing.T) {
	srv, _ := newCLIServer(t)
	src := filepath.Join(t.TempDir(), "project")
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "sub", "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/run.sh", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := stead(t, srv, "cp", src, "agent:/workspace"); code != 0 {
		t.Fatalf("upload exit %d: %s", code, errOut)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if code, _, errOut := stead(t, srv, "cp", "agent:/workspace/project", dst); code != 0 {
		t.Fatalf("download exit %d: %s", code, errOut)
	}
	data, err := os.ReadFile(filepath.Join(dst, "project", "sub", "run.sh"))
	if err != nil || string(data) != "#!/bin/sh\necho hi\n" {
		t.Fatalf("file %q, %v", data, err)
	}
	if st, err := os.Stat(filepath.Join(dst, "project", "sub", "run.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v, %v", st.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "project", "link")); err != nil || target != "sub/run.sh" {
		t.Fatalf("symlink %q, %v", target, err)
	}
}

func TestExtractTarRefusesEscapes(t *testing.T) {
	for _, name := range []string{"../evil", "/etc/evil", "a/../../evil"} {
		var buf bytes.Buffer
		if _, err := writeTarEntry(&buf, name); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if _, err := extractTar(&buf, filepath.Join(dir, "dst")); err == nil {
			t.Errorf("entry %q was extracted", name)
		}
		if _, err := os.Stat(filepath.Join(dir, "evil")); err == nil {
			t.Errorf("entry %q escaped", name)
		}
	}
	// A symlink pointing out, then a file written through it.
	var buf bytes.Buffer
	tw := newTestTar(&buf)
	tw.symlink("out", "..")
	tw.file("out/evil", "x")
	tw.close()
	dir := t.TempDir()
	if _, err := extractTar(&buf, filepath.Join(dir, "dst")); err == nil {
		t.Error("write through an escaping symlink succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "evil")); err == nil {
		t.Error("file escaped through a symlink")
	}
}

// writeTarEntry writes a tar holding one small file called name.
func writeTarEntry(w io.Writer, name string) (int, error) {
	tw := newTestTar(w)
	tw.file(name, "evil")
	return 1, tw.close()
}

// testTar writes tar entries, panicking on error (test helper).
type testTar struct{ tw *tar.Writer }

func newTestTar(w io.Writer) *testTar { return &testTar{tar.NewWriter(w)} }

func (t *testTar) file(name, content string) {
	if err := t.tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		panic(err)
	}
	if _, err := t.tw.Write([]byte(content)); err != nil {
		panic(err)
	}
}

func (t *testTar) symlink(name, target string) {
	if err := t.tw.WriteHeader(&tar.Header{Name: name, Linkname: target, Mode: 0o777, Typeflag: tar.TypeSymlink}); err != nil {
		panic(err)
	}
}

func (t *testTar) close() error { return t.tw.Close() }

func TestParseWarnLevels(t *testing.T) {
	if got, err := parseWarnLevels("80, 95%"); err != nil || len(got) != 2 || got[0] != 0.8 || got[1] != 0.95 {
		t.Fatalf("80, 95%%: %v %v", got, err)
	}
	for _, bad := range []string{"", "95,80", "0", "101", "x", "80,80"} {
		if _, err := parseWarnLevels(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
