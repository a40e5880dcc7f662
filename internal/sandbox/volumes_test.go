package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

func TestVolumesOutliveSandboxesAndShareFiles(t *testing.T) {
	s := newService(t)
	s.opts.StageDir = t.TempDir()
	ctx := context.Background()
	tn := store.DefaultTenant
	v, err := s.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: "shared", SizeBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "a", Volumes: []client.VolumeMount{{Volume: "shared", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "b", Volumes: []client.VolumeMount{
		{Volume: "shared", Path: "/shared", ReadOnly: true},
		{Volume: v.ID, SubPath: "agents/b", Path: "/mine"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(id, cmd string) (string, int) {
		res, err := s.Exec(ctx, tn, id, client.ExecRequest{Command: []string{"sh", "-c", cmd}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout) + string(res.Stderr), res.ExitCode
	}
	if out, code := run(a.ID, "echo from-a > /data/note"); code != 0 {
		t.Fatalf("write to the volume: %s", out)
	}
	if out, _ := run(b.ID, "cat /shared/note"); out != "from-a\n" {
		t.Fatalf("b reads %q", out)
	}
	if out, code := run(b.ID, "echo x > /shared/nope"); code == 0 {
		t.Fatalf("read-only mount written: %s", out)
	}
	if out, code := run(b.ID, "echo mine > /mine/f"); code != 0 {
		t.Fatalf("sub-path mount: %s", out)
	}
	if out, _ := run(a.ID, "cat /data/agents/b/f"); out != "mine\n" {
		t.Fatalf("sub-path content seen from the root: %q", out)
	}
	// An agent plants a symlink where another agent's sub-path would go:
	// the sub-path is refused rather than followed to the host.
	if out, code := run(a.ID, "ln -s / /data/agents/evil"); code != 0 {
		t.Fatal(out)
	}
	_, err = s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Volumes: []client.VolumeMount{{Volume: "shared", SubPath: "agents/evil", Path: "/x"}}})
	if !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("sub-path through a symlink: %v", err)
	}
	for _, bad := range []client.VolumeMount{
		{Volume: "shared", Path: "relative"}, {Volume: "shared", Path: "/"}, {Volume: "shared", Path: "/proc/x"},
		{Volume: "shared", Path: "/d", SubPath: "../../etc"}, {Volume: "shared", Path: "/d", SubPath: "/abs"},
		{Volume: "nope", Path: "/d"},
	} {
		if _, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Volumes: []client.VolumeMount{bad}}); err == nil {
			t.Fatalf("bad mount %+v accepted", bad)
		}
	}
	if _, err := s.DeleteVolume(ctx, tn, "shared", false); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("delete of a mounted volume: %v", err)
	}
	got, _ := s.GetVolume(ctx, tn, "shared")
	if len(got.AttachedTo) != 2 || got.UsedBytes == 0 && s.pool.Caps().Quota {
		t.Fatalf("volume view: %+v", got)
	}
	// Deleting every sandbox leaves the volume and its files.
	for _, id := range []string{a.ID, b.ID} {
		if _, err := s.DeleteSandbox(ctx, tn, id, true); err != nil {
			t.Fatal(err)
		}
	}
	if data, err := os.ReadFile(filepath.Join(s.pool.Path(volumeDataset(v.ID)), "note")); err != nil || string(data) != "from-a\n" {
		t.Fatalf("volume data after the sandboxes are gone: %q %v", data, err)
	}
	if _, err := s.DeleteVolume(ctx, tn, "shared", false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Volumes: []client.VolumeMount{{Volume: "shared", Path: "/d"}}}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("mount of a deleted volume: %v", err)
	}
	if _, err := s.UndeleteVolume(ctx, tn, "shared"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVolume(ctx, tn, "shared", true); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.pool.Exists(ctx, volumeDataset(v.ID)); ok {
		t.Fatal("purged volume's data is still there")
	}
	if _, err := s.GetVolume(ctx, "other", v.ID); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant: %v", err)
	}
	if ents, _ := os.ReadDir(s.opts.StageDir); len(ents) != 0 {
		t.Fatalf("staging mounts left: %v", ents)
	}
	if _, err := s.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: strings.Repeat("x", 64)}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("long name: %v", err)
	}
}

// TestAbsentVolumeIsNamedOnce: an absent volume's error names it once and
// says where to look, whichever verb meets it.
func TestAbsentVolumeIsNamedOnce(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	tn := store.DefaultTenant
	_, e1 := s.GetVolume(ctx, tn, "nope")
	_, e2 := s.DeleteVolume(ctx, tn, "nope", false)
	_, e3 := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Volumes: []client.VolumeMount{{Volume: "nope", Path: "/data"}}})
	for _, err := range []error{e1, e2, e3} {
		if !errors.Is(err, errs.ErrNotFound) || strings.Count(err.Error(), "nope") != 1 || !strings.Contains(err.Error(), "stead volume ls") {
			t.Errorf("absent volume: %v", err)
		}
	}
}

// TestReconcileSetsVolumeQuotasAgain: a volume whose quota was lost (a
// crash of the machine before the file system committed the limit) has it
// again after the next daemon's Reconcile.
func TestReconcileSetsVolumeQuotasAgain(t *testing.T) {
	e := newBtrfsEnv(t, 2<<30, Options{})
	ctx := context.Background()
	v, err := e.s.CreateVolume(ctx, store.DefaultTenant, client.CreateVolumeRequest{Name: "q", SizeBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ds := volumeDataset(v.ID)
	if err := e.pool.SetQuota(ctx, ds, 0); err != nil { // what the crash lost
		t.Fatal(err)
	}
	next := New(e.s.opts)
	if err := next.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(e.pool.Path(ds), "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for i := range 100 {
		if _, err = f.Write(chunk); err != nil {
			break
		}
		if i%8 == 7 {
			if err = f.Sync(); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("100 MiB into a 64 MiB volume after a lost quota and a Reconcile: %v, want EDQUOT", err)
	}
}
