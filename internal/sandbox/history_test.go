package sandbox

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/store"
)

// TestFailedRestorePathLeavesTheParentUnchanged: a restore-path that fails
// after it made its temporary copy beside the destination (the agent may
// not read a file of the snapshot; the destination is a mount point that
// cannot be swapped) leaves the parent directory as it was: no temporary
// entry, no new entry, and its modification and access times unchanged.
func TestFailedRestorePathLeavesTheParentUnchanged(t *testing.T) {
	s := newService(t)
	s.opts.TokenKey = []byte("restore-path-test-key-0123456789")
	s.wireTenancy() // the token key is checked there
	ctx := context.Background()
	tn := store.DefaultTenant
	srv := httptest.NewServer(api.NewHandler(s, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "undo", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Mkdir(ctx, tn, sb.ID, "/workspace/proj", false); err != nil {
		t.Fatal(err)
	}
	s.testWrite(t, sb.ID, "/workspace/proj/notes.md", "notes")
	s.testWrite(t, sb.ID, "/workspace/proj/secret", "root only")
	if err := s.Mkdir(ctx, tn, sb.ID, "/workspace/busy", false); err != nil {
		t.Fatal(err)
	}
	// The test, not the daemon, reaches into the root by host path.
	root := s.pool.Path(datasetName(sb.ID))
	secret := filepath.Join(root, "workspace/proj/secret")
	if err := os.Chown(secret, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(secret, 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := s.CreateSnapshot(ctx, tn, sb.ID, client.CreateSnapshotRequest{Label: "before"})
	if err != nil {
		t.Fatal(err)
	}
	parent := filepath.Join(root, "workspace")
	then := time.Date(2020, 1, 2, 3, 4, 5, 6, time.UTC)
	unchanged := func(t *testing.T) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(parent, &st); err != nil {
			t.Fatal(err)
		}
		if got := time.Unix(st.Mtim.Unix()); !got.Equal(then) {
			t.Errorf("parent's mtime moved: %s, was %s", got.UTC(), then)
		}
		if got := time.Unix(st.Atim.Unix()); !got.Equal(then) {
			t.Errorf("parent's atime moved: %s, was %s", got.UTC(), then)
		}
		ents, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if got := strings.Join(names, " "); got != "busy proj" {
			t.Errorf("parent's entries after the failed restore: %s", got)
		}
	}

	t.Run("copy fails", func(t *testing.T) {
		if err := os.Chtimes(parent, then, then); err != nil {
			t.Fatal(err)
		}
		agent := agentHTTP{t: t, url: srv.URL, token: s.SandboxToken(sb.ID)}
		var op client.Operation
		agent.must(http.StatusOK, &op, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/restore-path",
			`{"path":"/workspace/proj","snapshot":"`+snap.ID+`","to":"/workspace/proj-old","wait":true}`)
		if op.State != client.OperationFailed || !strings.Contains(op.Error, "secret") {
			t.Fatalf("restore of a tree the agent may not read: %s %q", op.State, op.Error)
		}
		unchanged(t)
	})

	t.Run("swap fails", func(t *testing.T) {
		busy := filepath.Join(parent, "busy")
		if err := unix.Mount("stead-test", busy, "tmpfs", 0, "size=64k"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(busy, unix.MNT_DETACH) })
		if err := os.Chtimes(parent, then, then); err != nil {
			t.Fatal(err)
		}
		op, err := s.RestorePath(ctx, tn, sb.ID, client.RestorePathRequest{Path: "/workspace/proj", Snapshot: snap.ID, To: "/workspace/busy", Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		if op.State != client.OperationFailed || !strings.Contains(op.Error, "swap") {
			t.Fatalf("restore onto a mount point: %s %q", op.State, op.Error)
		}
		unchanged(t)
	})
}
