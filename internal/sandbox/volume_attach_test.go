package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// mountAt returns the mount of sb at path (zero if none).
func mountAt(sb client.Sandbox, path string) client.VolumeMount {
	for _, m := range sb.Volumes {
		if m.Path == path {
			return m
		}
	}
	return client.VolumeMount{}
}

// TestMountsChangeOnlyWhenStoppedAndKeepTheBackupPolicy: attach and detach
// are refused while the sandbox runs (saying to stop it), work while it is
// stopped, refuse a used mount path and an unknown one, and leave the
// sandbox's push schedule as it was.
func TestMountsChangeOnlyWhenStoppedAndKeepTheBackupPolicy(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	tn := store.DefaultTenant
	for _, n := range []string{"a", "b"} {
		if _, err := s.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "agent", Volumes: []client.VolumeMount{{Volume: "a", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetBackupPolicy(ctx, tn, sb.ID, client.BackupPolicy{Interval: "1h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AttachVolume(ctx, tn, sb.ID, client.VolumeMount{Volume: "b", Path: "/b"}); !errors.Is(err, errs.ErrConflict) || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("attach to a running sandbox: %v", err)
	}
	if _, err := s.DetachVolume(ctx, tn, sb.ID, "/data"); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("detach from a running sandbox: %v", err)
	}
	if _, err := s.StopSandbox(ctx, tn, sb.ID); err != nil {
		t.Fatal(err)
	}
	got, err := s.AttachVolume(ctx, tn, sb.ID, client.VolumeMount{Volume: "b", SubPath: "x/y", Path: "/b/", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if m := mountAt(got, "/b"); m.SubPath != "x/y" || !m.ReadOnly || !strings.HasPrefix(m.Volume, volumePrefix) {
		t.Fatalf("attached mount %+v", got.Volumes)
	}
	if _, err := s.AttachVolume(ctx, tn, sb.ID, client.VolumeMount{Volume: "a", Path: "/data"}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("attach over a used path: %v", err)
	}
	if _, err := s.AttachVolume(ctx, tn, sb.ID, client.VolumeMount{Volume: "nope", Path: "/n"}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("attach of an unknown volume: %v", err)
	}
	if _, err := s.AttachVolume(ctx, tn, sb.ID, client.VolumeMount{Volume: "a", Path: "/proc/x"}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("attach over /proc: %v", err)
	}
	if got, err = s.DetachVolume(ctx, tn, sb.ID, "/data"); err != nil || len(got.Volumes) != 1 {
		t.Fatalf("detach: %+v %v", got.Volumes, err)
	}
	if _, err := s.DetachVolume(ctx, tn, sb.ID, "/data"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("detach of nothing: %v", err)
	}
	if _, err := s.ResizeSandbox(ctx, tn, sb.ID, client.ResizeRequest{MemoryBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.GetBackupPolicy(ctx, tn, sb.ID); p.Interval != "1h0m0s" {
		t.Fatalf("the push schedule after attach, detach and resize: %+v", p)
	}
	if v, _ := s.GetVolume(ctx, tn, "a"); len(v.AttachedTo) != 0 {
		t.Fatalf("detached volume still attached to %v", v.AttachedTo)
	}
	// The sub-path mount works at the next start.
	if _, err := s.StartSandbox(ctx, tn, sb.ID); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Exec(ctx, tn, sb.ID, client.ExecRequest{Command: []string{"sh", "-c", "test -d /b && ! touch /b/f 2>/dev/null"}}, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("read-only sub-path mount after start: %+v %v", res, err)
	}
}

// TestForkAndRestoreFindTheirVolumesOrRefuse: a fork and a restore attach
// the recorded volumes (by id here); --volume replaces one; a fork of a
// snapshot whose volume was purged, and a restore on a daemon without the
// volumes, are refused naming the volume and leave nothing behind; a
// volume without a push cannot be restored with the sandbox.
func TestForkAndRestoreFindTheirVolumesOrRefuse(t *testing.T) {
	s := newService(t)
	repoDir := t.TempDir()
	withRepo(t, s, repoDir)
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	vols := map[string]client.Volume{}
	for _, n := range []string{"a", "b", "c", "gone"} {
		v, err := s.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: n})
		if err != nil {
			t.Fatal(err)
		}
		vols[n] = v
	}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "agent", NoStart: true, Volumes: []client.VolumeMount{
		{Volume: "a", Path: "/data"}, {Volume: "b", SubPath: "s", Path: "/b", ReadOnly: true}}})
	if err != nil {
		t.Fatal(err)
	}
	var pr client.PushResult
	op, err := s.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Wait: true})
	opDone(t, op, err, &pr)
	if len(pr.RemoteSnapshot.Mounts) != 2 || pr.RemoteSnapshot.Mounts[0].VolumeName != "a" {
		t.Fatalf("recorded mounts %+v", pr.RemoteSnapshot.Mounts)
	}

	forks, err := s.Fork(ctx, tn, sb.ID, client.ForkRequest{NoStart: true, Volumes: []client.VolumeMount{{Volume: "c", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	if f := forks[0]; mountAt(f, "/data").Volume != vols["c"].ID || mountAt(f, "/b").Volume != vols["b"].ID || !mountAt(f, "/b").ReadOnly {
		t.Fatalf("fork's mounts %+v", f.Volumes)
	}
	var rr client.RestoreResult
	op, err = s.RestoreRemote(ctx, tn, client.RestoreRequest{Snapshot: pr.RemoteSnapshot.ID, NoStart: true, Wait: true})
	opDone(t, op, err, &rr)
	if mountAt(*rr.Sandbox, "/data").Volume != vols["a"].ID || mountAt(*rr.Sandbox, "/b").SubPath != "s" || len(rr.Volumes) != 0 {
		t.Fatalf("restored mounts %+v, volumes restored %+v", rr.Sandbox.Volumes, rr.Volumes)
	}
	before, _ := s.ListSandboxes(ctx, tn, true)
	if _, err := s.RestoreRemote(ctx, tn, client.RestoreRequest{Snapshot: pr.RemoteSnapshot.ID, Volumes: []client.VolumeMount{{Volume: "nope", Path: "/data"}}}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("restore with an unknown --volume: %v", err)
	}

	// A snapshot whose volume was purged since.
	sb2, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "user-of-gone", NoStart: true, Volumes: []client.VolumeMount{{Volume: "gone", Path: "/g"}}})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.CreateSnapshot(ctx, tn, sb2.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteSandbox(ctx, tn, sb2.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVolume(ctx, tn, "gone", true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fork(ctx, tn, snap.ID, client.ForkRequest{NoStart: true}); !errors.Is(err, errs.ErrConflict) || !strings.Contains(err.Error(), vols["gone"].ID) || !strings.Contains(err.Error(), "--volume OTHER:/g") {
		t.Fatalf("fork of a snapshot whose volume is gone: %v", err)
	}
	if after, _ := s.ListSandboxes(ctx, tn, true); len(after) != len(before) {
		t.Fatalf("refused restore and fork left %d sandboxes (had %d)", len(after), len(before))
	}
	if forks, err := s.Fork(ctx, tn, snap.ID, client.ForkRequest{NoStart: true, Volumes: []client.VolumeMount{{Volume: "c", Path: "/g"}}}); err != nil || mountAt(forks[0], "/g").Volume != vols["c"].ID {
		t.Fatalf("fork re-pointing the gone volume: %v", err)
	}

	// An empty daemon: both volumes missing; /data re-pointed leaves b;
	// b has no push, so restore_volumes cannot bring it back; once pushed
	// it can.
	s2 := newService(t)
	withRepo(t, s2, repoDir)
	if _, err := s2.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: "c2"}); err != nil {
		t.Fatal(err)
	}
	_, err = s2.RestoreRemote(ctx, tn, client.RestoreRequest{Snapshot: pr.RemoteSnapshot.ID})
	if !errors.Is(err, errs.ErrConflict) || !strings.Contains(err.Error(), "volumes a (") || !strings.Contains(err.Error(), "b (") {
		t.Fatalf("restore without its volumes: %v", err)
	}
	over := []client.VolumeMount{{Volume: "c2", Path: "/data"}}
	_, err = s2.RestoreRemote(ctx, tn, client.RestoreRequest{Snapshot: pr.RemoteSnapshot.ID, Volumes: over})
	if !errors.Is(err, errs.ErrConflict) || strings.Contains(err.Error(), "a (") || !strings.Contains(err.Error(), "volume b (") {
		t.Fatalf("restore with /data re-pointed: %v", err)
	}
	_, err = s2.RestoreRemote(ctx, tn, client.RestoreRequest{Snapshot: pr.RemoteSnapshot.ID, Volumes: over, RestoreVolumes: true})
	if !errors.Is(err, errs.ErrConflict) || !strings.Contains(err.Error(), "no push") {
		t.Fatalf("restore_volumes of a volume never pushed: %v", err)
	}
	if l, _ := s2.ListSandboxes(ctx, tn, true); len(l) != 0 {
		t.Fatalf("refused restores left %d sandboxes", len(l))
	}
	op, err = s.PushVolume(ctx, tn, "b", client.PushVolumeRequest{Wait: true})
	opDone(t, op, err, nil)
	op, err = s2.RestoreRemote(ctx, tn, client.RestoreRequest{Snapshot: pr.RemoteSnapshot.ID, Volumes: over, RestoreVolumes: true, NoStart: true, Wait: true})
	opDone(t, op, err, &rr)
	if len(rr.Volumes) != 1 || rr.Volumes[0].Name != "b" || rr.Volumes[0].Origin != vols["b"].ID {
		t.Fatalf("volumes restored with the sandbox: %+v", rr.Volumes)
	}
	c2, _ := s2.GetVolume(ctx, tn, "c2")
	if mountAt(*rr.Sandbox, "/data").Volume != c2.ID || mountAt(*rr.Sandbox, "/b").Volume != rr.Volumes[0].ID {
		t.Fatalf("mounts on the empty daemon: %+v", rr.Sandbox.Volumes)
	}
	// Found by its name there now, even under a new id.
	if l, err := s2.ListVolumePushes(ctx, tn, "b"); err != nil || len(l) != 1 {
		t.Fatalf("pushes of b by name on the empty daemon: %d %v", len(l), err)
	}
}
