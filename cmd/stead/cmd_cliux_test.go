package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stead-dev/stead/internal/api"
)

// keyDir makes a data directory whose admin.key holds key ("" for none).
func keyDir(t *testing.T, key string) string {
	t.Helper()
	d := t.TempDir()
	if key != "" {
		if err := os.WriteFile(filepath.Join(d, "admin.key"), []byte(key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func TestFindAPIKeyOrder(t *testing.T) {
	flagDir, envDir, defDir, emptyDir := keyDir(t, "from-flag-dir"), keyDir(t, "from-env-dir"), keyDir(t, "from-default-dir"), keyDir(t, "")
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	cases := []struct {
		name              string
		flagKey, flagDir  string
		env               map[string]string
		wantKey, wantFrom string
		wantFile          string
		wantMissing       bool
	}{
		{"--api-key first", "k1", flagDir, map[string]string{"STEAD_API_KEY": "k2", "STEAD_DATA_DIR": envDir}, "k1", "--api-key", "", false},
		{"then STEAD_API_KEY", "", flagDir, map[string]string{"STEAD_API_KEY": "k2", "STEAD_DATA_DIR": envDir}, "k2", "STEAD_API_KEY", "", false},
		{"then --data-dir", "", flagDir, map[string]string{"STEAD_DATA_DIR": envDir}, "from-flag-dir", filepath.Join(flagDir, "admin.key"), filepath.Join(flagDir, "admin.key"), false},
		{"then STEAD_DATA_DIR", "", "", map[string]string{"STEAD_DATA_DIR": envDir}, "from-env-dir", filepath.Join(envDir, "admin.key"), filepath.Join(envDir, "admin.key"), false},
		{"then the default", "", "", nil, "from-default-dir", filepath.Join(defDir, "admin.key"), filepath.Join(defDir, "admin.key"), false},
		// A data directory without a key never falls back to the default
		// one: that would be another daemon's key.
		{"named dir without key", "", emptyDir, nil, "", "", filepath.Join(emptyDir, "admin.key"), true},
		{"env dir without key", "", "", map[string]string{"STEAD_DATA_DIR": emptyDir}, "", "", filepath.Join(emptyDir, "admin.key"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := findAPIKey(tc.flagKey, tc.flagDir, env(tc.env), defDir)
			if k.key != tc.wantKey || k.from != tc.wantFrom || k.file != tc.wantFile {
				t.Fatalf("got key %q from %q file %q, want %q from %q file %q", k.key, k.from, k.file, tc.wantKey, tc.wantFrom, tc.wantFile)
			}
			if tc.wantMissing != errors.Is(k.fileErr, fs.ErrNotExist) {
				t.Fatalf("file error %v", k.fileErr)
			}
			if tc.wantFile != "" && !strings.Contains(k.hint(), tc.wantFile) {
				t.Fatalf("hint %q does not name %s", k.hint(), tc.wantFile)
			}
		})
	}
}

// steadNoKey runs the CLI against srv without --api-key.
func steadNoKey(t *testing.T, srv *httptest.Server, a ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runIO(append([]string{"--endpoint", srv.URL}, a...), strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestCLIReadsKeyOfNamedDataDirAndNamesItWhenRefused(t *testing.T) {
	t.Setenv("STEAD_API_KEY", "")
	srv, _ := newCLIServer(t)
	good, wrong := keyDir(t, "k"), keyDir(t, "not-the-key")
	if code, _, errOut := steadNoKey(t, srv, "--data-dir", good, "list"); code != 0 {
		t.Fatalf("--data-dir with the right key: exit %d: %s", code, errOut)
	}
	t.Setenv("STEAD_DATA_DIR", good)
	if code, _, errOut := steadNoKey(t, srv, "list"); code != 0 {
		t.Fatalf("STEAD_DATA_DIR with the right key: exit %d: %s", code, errOut)
	}
	code, _, errOut := steadNoKey(t, srv, "--data-dir", wrong, "list")
	if code != exitUnauthenticated || !strings.Contains(errOut, filepath.Join(wrong, "admin.key")) || !strings.Contains(errOut, "STEAD_API_KEY") {
		t.Fatalf("wrong key: exit %d, stderr %q; want 5 naming %s", code, errOut, filepath.Join(wrong, "admin.key"))
	}
	code, _, errOut = steadNoKey(t, srv, "--data-dir", keyDir(t, ""), "list")
	if code != exitUnauthenticated || !strings.Contains(errOut, "does not exist") {
		t.Fatalf("no key file: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = stead(t, srv, "--api-key", "wrong", "list")
	if code != exitUnauthenticated || !strings.Contains(errOut, "came from --api-key") {
		t.Fatalf("wrong --api-key: exit %d, stderr %q", code, errOut)
	}
}

func TestDaemonNamesItsOwnAdminKeyPath(t *testing.T) {
	srv := httptest.NewServer(api.NewHandler(&cliBackend{}, api.Options{Logger: slog.New(slog.DiscardHandler), AdminKeyPath: "/srv/x/admin.key"}))
	t.Cleanup(srv.Close)
	t.Setenv("STEAD_API_KEY", "")
	code, _, errOut := steadNoKey(t, srv, "--data-dir", keyDir(t, ""), "list")
	if code != exitUnauthenticated || !strings.Contains(errOut, "the admin key is in /srv/x/admin.key") || strings.Contains(errOut, "/var/lib/stead") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// decodeJSONError parses stderr as exactly one jsonError line.
func decodeJSONError(t *testing.T, stderr string) jsonErrorBody {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Fatalf("stderr is not one line: %q", stderr)
	}
	var raw map[string]map[string]any
	if err := json.Unmarshal([]byte(stderr), &raw); err != nil {
		t.Fatalf("stderr is not JSON: %v: %q", err, stderr)
	}
	for _, k := range []string{"status", "title", "detail", "exit_code"} {
		if _, ok := raw["error"][k]; !ok {
			t.Fatalf("error object lacks %q: %q", k, stderr)
		}
	}
	var e jsonError
	json.Unmarshal([]byte(stderr), &e)
	return e.Error
}

func TestJSONErrorsAreJSONOnStderr(t *testing.T) {
	t.Setenv("STEAD_API_KEY", "")
	srv, _ := newCLIServer(t)
	code, out, errOut := stead(t, srv, "--json", "info", "missing")
	e := decodeJSONError(t, errOut)
	if code != exitNotFound || out != "" || e.Status != 404 || e.Title != "Not Found" || !strings.Contains(e.Detail, "missing") || e.ExitCode != exitNotFound {
		t.Fatalf("not found: exit %d, stdout %q, error %+v", code, out, e)
	}
	code, _, errOut = stead(t, srv, "start", "agent", "--json")
	if e := decodeJSONError(t, errOut); code != exitConflict || e.Status != 409 || e.ExitCode != exitConflict {
		t.Fatalf("conflict: exit %d, error %+v", code, e)
	}
	// A usage error cobra finds before --json is parsed.
	code, _, errOut = stead(t, srv, "list", "--json", "--no-such-flag")
	if e := decodeJSONError(t, errOut); code != exitUsage || e.Status != 0 || e.Title != "usage error" || !strings.Contains(e.Detail, "no-such-flag") || e.ExitCode != exitUsage {
		t.Fatalf("usage: exit %d, error %+v", code, e)
	}
	wrong := keyDir(t, "nope")
	code, _, errOut = steadNoKey(t, srv, "--json", "--data-dir", wrong, "list")
	if e := decodeJSONError(t, errOut); code != exitUnauthenticated || e.Status != 401 || !strings.Contains(e.Hint, filepath.Join(wrong, "admin.key")) || e.ExitCode != exitUnauthenticated {
		t.Fatalf("unauthenticated: exit %d, error %+v", code, e)
	}
	// A daemon out of reach: found by the CLI, status 0.
	var stdout, stderr bytes.Buffer
	code = runIO([]string{"--json", "--endpoint", "http://127.0.0.1:1", "--api-key", "k", "list"}, strings.NewReader(""), &stdout, &stderr)
	if e := decodeJSONError(t, stderr.String()); code != exitError || e.Status != 0 || !strings.Contains(e.Detail, "cannot reach") {
		t.Fatalf("unreachable: exit %d, error %+v", code, e)
	}
	// Without --json, errors stay text.
	if _, _, errOut := stead(t, srv, "info", "missing"); !strings.HasPrefix(errOut, "stead: ") {
		t.Fatalf("text error %q", errOut)
	}
}

// FuzzArgsWantJSON: --json is seen exactly when it is a flag before "--".
func FuzzArgsWantJSON(f *testing.F) {
	for _, s := range []string{"list --json", "--json=true exec sb -- x", "exec sb -- cmd --json", "--json=false list", "--json=0 --json", "--json=T", "--jsonx", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		want := false
		for _, a := range args {
			if a == "--" {
				break
			}
			if a == "--json" {
				want = true
				break
			}
			if v, ok := strings.CutPrefix(a, "--json="); ok {
				want = v == "1" || v == "t" || v == "T" || v == "true" || v == "TRUE" || v == "True"
				break
			}
		}
		if got := argsWantJSON(args); got != want {
			t.Fatalf("argsWantJSON(%q) = %v, want %v", args, got, want)
		}
	})
}
