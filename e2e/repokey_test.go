package e2e

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
)

// dirDigest hashes every path, mode and file content below dir.
func dirDigest(t *testing.T, dir string) [32]byte {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		h.Write([]byte(p + "\x00" + fi.Mode().String() + "\x00"))
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// TestRefusedRepoInitOnANewDaemonChangesNothing: issue 10's case. A new
// daemon whose --repo-key-file names a missing file, on an initialised
// repository: `stead repo init` exits 4 saying to restore the key file,
// writes no key and leaves the repository's bytes as they were; every
// verb says the key file is missing (not "wrong master key"); once the
// copy is restored there, everything pushed is listed again.
func TestRefusedRepoInitOnANewDaemonChangesNothing(t *testing.T) {
	repoDir := filepath.Join(t.TempDir(), "repo")
	d := newDaemon(t, "--repo", repoDir)
	ctx := ctxT(t)
	if _, err := d.c.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "agent", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	op, err := d.c.Push(ctx, sb.ID, client.PushRequest{Wait: true})
	opResult(t, op, err, nil)
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	d.stopGracefully()
	before := dirDigest(t, repoDir)

	copyPath := filepath.Join(t.TempDir(), "repo.key")
	d2 := newDaemon(t, "--repo", repoDir, "--repo-key-file", copyPath)
	cli := exec.Command(d2.bin, "repo", "init")
	cli.Env = append(os.Environ(), "STEAD_ENDPOINT=http://"+d2.addr, "STEAD_API_KEY="+d2.key)
	out, err := cli.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 4 || !strings.Contains(string(out), "already initialised") ||
		!strings.Contains(string(out), "restore your copy of the key file to "+copyPath) {
		t.Fatalf("stead repo init: %v\n%s", err, out)
	}
	t.Logf("stead repo init: %s", strings.TrimSpace(string(out)))
	if _, err := os.Stat(copyPath); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused init wrote a key file: %v", err)
	}
	if dirDigest(t, repoDir) != before {
		t.Fatal("a refused init changed the repository")
	}
	if _, err := d2.c.ListRemoteSnapshots(ctx, ""); err == nil || !strings.Contains(err.Error(), "is missing: restore your copy") || strings.Contains(err.Error(), "wrong master key") {
		t.Fatalf("list with the key file missing: %v", err)
	}
	if !strings.Contains(d2.logText(), "the repository cannot be opened") {
		t.Error("the daemon did not say at start that the repository cannot be opened")
	}
	key, err := os.ReadFile(filepath.Join(d.dataDir, "repo.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if list, err := d2.c.ListRemoteSnapshots(ctx, ""); err != nil || len(list) != 1 {
		t.Fatalf("list after restoring the key file: %d %v", len(list), err)
	}
	if dirDigest(t, repoDir) != before {
		t.Fatal("listing changed the repository")
	}
}
