package daemon

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stead-dev/stead/internal/testutil"
)

func modeOf(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestPrepareDirsMakesEverythingPrivate: new data and run dirs and the run
// dir's per-sandbox parents are made 0700; an existing layout an older
// stead left reachable (0711 dirs, a 0644 database and keys) is narrowed,
// and each change is logged.
func TestPrepareDirsMakesEverythingPrivate(t *testing.T) {
	base := t.TempDir()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	fresh := Config{DataDir: filepath.Join(base, "new", "data"), RunDir: filepath.Join(base, "new", "run")}
	if err := prepareDirs(fresh, log); err != nil {
		t.Fatal(err)
	}
	for _, d := range append([]string{fresh.DataDir, fresh.RunDir}, joinAll(fresh.RunDir, runSubdirs)...) {
		if m := modeOf(t, d); m != 0o700 {
			t.Errorf("new %s: mode %04o, want 0700", d, m)
		}
	}
	if logs.Len() != 0 {
		t.Errorf("changes logged for new dirs: %s", logs.String())
	}

	old := Config{DataDir: filepath.Join(base, "old", "data"), RunDir: filepath.Join(base, "old", "run"),
		RepoKeyFile: filepath.Join(base, "elsewhere.key")}
	for _, d := range []string{old.DataDir, filepath.Join(old.DataDir, "pool"), filepath.Join(old.RunDir, "api", "sb-x")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o711)
	}
	os.Chmod(old.RunDir, 0o755)
	os.Chmod(filepath.Join(old.RunDir, "api"), 0o711)
	files := []string{"stead.db", "stead.db-wal", "stead.db-shm", "token.key", "admin.key", "audit.key", "repo.key", "lock"}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(old.DataDir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(old.DataDir, f), 0o644)
	}
	os.WriteFile(old.RepoKeyFile, []byte("k"), 0o640)
	os.Chmod(old.RepoKeyFile, 0o640)
	if err := prepareDirs(old, log); err != nil {
		t.Fatal(err)
	}
	for _, d := range append([]string{old.DataDir, old.RunDir}, joinAll(old.RunDir, runSubdirs)...) {
		if m := modeOf(t, d); m != 0o700 {
			t.Errorf("%s: mode %04o, want 0700", d, m)
		}
	}
	for _, f := range append(joinAll(old.DataDir, files), old.RepoKeyFile) {
		if m := modeOf(t, f); m != 0o600 {
			t.Errorf("%s: mode %04o, want 0600", f, m)
		}
		if !strings.Contains(logs.String(), "path="+f+" ") {
			t.Errorf("narrowing %s not logged:\n%s", f, logs.String())
		}
	}
	// The pool keeps its mode (it sits in the private data dir); a
	// sandbox's socket directory keeps its (its parent is private).
	if m := modeOf(t, filepath.Join(old.DataDir, "pool")); m != 0o711 {
		t.Errorf("pool: mode %04o", m)
	}
	if m := modeOf(t, filepath.Join(old.RunDir, "api", "sb-x")); m != 0o711 {
		t.Errorf("socket dir: mode %04o", m)
	}
	if !strings.Contains(logs.String(), "path="+old.DataDir+" mode=0711 now=0700") {
		t.Errorf("narrowing of the data dir not logged:\n%s", logs.String())
	}
}

// TestPrepareDirsTakesOwnership: a data dir, run dir or file at the top
// of the data dir owned by another user is given to the daemon's user.
func TestPrepareDirsTakesOwnership(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	cfg := Config{DataDir: filepath.Join(base, "data"), RunDir: filepath.Join(base, "run")}
	for _, d := range []string{cfg.DataDir, cfg.RunDir} {
		os.Mkdir(d, 0o700)
		os.Chown(d, 65534, 65534)
	}
	key := filepath.Join(cfg.DataDir, "token.key")
	os.WriteFile(key, []byte("x"), 0o600)
	os.Chown(key, 65534, 65534)
	var logs bytes.Buffer
	if err := prepareDirs(cfg, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{cfg.DataDir, cfg.RunDir, key} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s owned by %d:%d", p, st.Uid, st.Gid)
		}
		if !strings.Contains(logs.String(), "path="+p+" owner=65534:65534") {
			t.Errorf("ownership of %s not logged:\n%s", p, logs.String())
		}
	}
}

// TestAPISocketIsNeverLooserThan0660: the API socket is 0660 whatever the
// umask, replaces a stale socket, and works at a path too long for a unix
// socket address.
func TestAPISocketIsNeverLooserThan0660(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	path := filepath.Join(dir, "stead.sock")
	for i := 0; i < 2; i++ { // the second replaces the first's socket
		ln, err := listenUnixPrivate(path)
		if err != nil {
			t.Fatal(err)
		}
		if m := modeOf(t, dir); m != 0o700 {
			t.Errorf("new socket dir: mode %04o", m)
		}
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
			t.Fatalf("socket: %v %v", fi, err)
		}
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Close()
			}
		}()
		// The path is too long to dial: dial through a descriptor of dir.
		d, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("unix", "/proc/self/fd/"+strconv.Itoa(int(d.Fd()))+"/stead.sock")
		d.Close()
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		c.Close()
		ln.Close()
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			t.Fatalf("left in the socket dir: %v", ents)
		}
	}
}

func joinAll(dir string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = filepath.Join(dir, n)
	}
	return out
}
