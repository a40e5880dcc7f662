package sandbox

import (
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// treeBytes maps every file below dir to a hash of its bytes and mode.
func treeBytes(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var b []byte
		if d.Type().IsRegular() {
			if b, err = os.ReadFile(p); err != nil {
				return err
			}
		}
		out[p] = sha256.Sum256(append(b, []byte(fi.Mode().String())...))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(a, b map[string][32]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestRefusedRepoInitChangesNothing: `repo init` on an initialised
// repository, with the key file missing, wrong or right, is refused, and
// neither the repository's bytes nor any key file change; a missing key
// file is reported as such (restore the copy) by init and by every verb,
// and restoring the copy makes the repository readable again.
func TestRefusedRepoInitChangesNothing(t *testing.T) {
	s := newService(t)
	dir := t.TempDir()
	withRepo(t, s, dir)
	ctx := context.Background()
	tn := store.DefaultTenant
	repoDir, keyFile := filepath.Join(dir, "repo"), filepath.Join(dir, "repo.key")

	// Before init: info says "not initialised" (no key file yet is fine).
	if info, err := s.RepoInfo(ctx, true); err != nil || info.Initialized {
		t.Fatalf("info before init: %+v %v", info, err)
	}
	if _, err := s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	s.testWrite(t, sb.ID, "/workspace/notes.md", "hour 1")
	op, err := s.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Wait: true})
	opDone(t, op, err, nil)
	key, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	before := treeBytes(t, repoDir)

	reopen := func(keyFile string) {
		s.bk.mu.Lock()
		s.bk.repo = nil
		s.opts.Repo.KeyFile = keyFile
		s.bk.mu.Unlock()
	}
	unchanged := func(what string) {
		t.Helper()
		if !sameTree(before, treeBytes(t, repoDir)) {
			t.Fatalf("%s: the repository's bytes changed", what)
		}
		if b, err := os.ReadFile(keyFile); err != nil || string(b) != string(key) {
			t.Fatalf("%s: the key file changed: %v", what, err)
		}
	}

	// A key file path that does not exist on an initialised repository.
	missing := filepath.Join(t.TempDir(), "copy-of-repo.key")
	reopen(missing)
	_, err = s.InitRepo(ctx)
	if !errors.Is(err, errs.ErrConflict) || !strings.Contains(err.Error(), "already initialised") ||
		!strings.Contains(err.Error(), "missing") || !strings.Contains(err.Error(), "restore your copy") {
		t.Fatalf("init with a missing key file: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused init wrote a key file: %v", err)
	}
	unchanged("init refused (key file missing)")
	// Every verb says the same, not "wrong master key".
	for name, call := range map[string]func() error{
		"info":  func() error { _, err := s.RepoInfo(ctx, true); return err },
		"push":  func() error { _, err := s.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Wait: true}); return err },
		"list":  func() error { _, err := s.ListRemoteSnapshots(ctx, tn, ""); return err },
		"drill": func() error { _, err := s.DrillSandbox(ctx, tn, sb.ID, client.DrillRequest{Wait: true}); return err },
	} {
		err := call()
		if err == nil || !strings.Contains(err.Error(), "is missing: restore your copy of the key file to "+missing) {
			t.Errorf("%s with the key file missing: %v", name, err)
		}
	}
	unchanged("verbs with the key file missing")

	// A key file of another repository.
	other := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(other, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reopen(other)
	if _, err := s.InitRepo(ctx); !errors.Is(err, errs.ErrConflict) || !strings.Contains(err.Error(), "another master key") {
		t.Fatalf("init with a wrong key file: %v", err)
	}
	if b, _ := os.ReadFile(other); string(b) != strings.Repeat("ab", 32)+"\n" {
		t.Fatal("a refused init changed the wrong key file")
	}
	unchanged("init refused (wrong key)")

	// The right key file: refused as already done.
	reopen(keyFile)
	if _, err := s.InitRepo(ctx); !errors.Is(err, errs.ErrConflict) || !strings.Contains(err.Error(), "already initialised") {
		t.Fatalf("second init: %v", err)
	}
	unchanged("init refused (right key)")

	// Restoring the copy where the daemon looks makes everything work.
	if err := os.WriteFile(missing, key, 0o600); err != nil {
		t.Fatal(err)
	}
	reopen(missing)
	if list, err := s.ListRemoteSnapshots(ctx, tn, sb.ID); err != nil || len(list) != 1 {
		t.Fatalf("list after restoring the key file: %d %v", len(list), err)
	}
}

// TestRepoInitKeyFileLifecycle: init makes the key file only when it is
// missing and keeps a key file it finds; a malformed key file stops init
// before anything is written.
func TestRepoInitKeyFileLifecycle(t *testing.T) {
	s := newService(t)
	dir := t.TempDir()
	withRepo(t, s, dir)
	ctx := context.Background()
	keyFile := s.opts.Repo.KeyFile

	if err := os.WriteFile(keyFile, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InitRepo(ctx); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("init with a malformed key file: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "repo")); len(ents) != 0 {
		t.Fatalf("init with a malformed key file wrote %d entries to the repository", len(ents))
	}
	if b, _ := os.ReadFile(keyFile); string(b) != "not a key\n" {
		t.Fatal("init replaced a malformed key file")
	}
	// A key made beforehand (an operator's own) is used, not replaced.
	own := strings.Repeat("5a", 32) + "\n"
	if err := os.WriteFile(keyFile, []byte(own), 0o600); err != nil {
		t.Fatal(err)
	}
	if info, err := s.InitRepo(ctx); err != nil || !info.Initialized {
		t.Fatalf("init with an existing key: %+v %v", info, err)
	}
	if b, _ := os.ReadFile(keyFile); string(b) != own {
		t.Fatal("init replaced the operator's key file")
	}
}
