package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/blobstore/local"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/treedigest"
)

// withRepo points a test service at a local repository directory and key file.
func withRepo(t *testing.T, s *Service, dir string) {
	t.Helper()
	bs, err := local.New(filepath.Join(dir, "repo"))
	if err != nil {
		t.Fatal(err)
	}
	s.opts.Repo = &RepoConfig{Store: bs, KeyFile: filepath.Join(dir, "repo.key"), CacheDir: filepath.Join(t.TempDir(), "cache")}
}

// opDone fails the test unless op succeeded, and decodes its result.
func opDone(t *testing.T, op client.Operation, err error, result any) client.Operation {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if op.State != "succeeded" {
		t.Fatalf("operation %s %s: %s %s", op.Kind, op.ID, op.State, op.Error)
	}
	if result != nil {
		if err := json.Unmarshal(op.Result, result); err != nil {
			t.Fatal(err)
		}
	}
	return op
}

func TestPushRestoreArchiveHydratePrune(t *testing.T) {
	s := newService(t)
	repoDir := t.TempDir()
	withRepo(t, s, repoDir)
	ctx := context.Background()
	tn := store.DefaultTenant

	if _, err := s.PushSandbox(ctx, tn, "x", client.PushRequest{}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("push before repo init: %v, want a conflict telling to init", err)
	}
	info, err := s.InitRepo(ctx)
	if err != nil || !info.Initialized {
		t.Fatalf("init: %+v %v", info, err)
	}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	s.testWrite(t, sb.ID, "/workspace/notes.md", "hour 1")
	var p1 client.PushResult
	op, err := s.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Wait: true})
	opDone(t, op, err, &p1)
	if p1.FilesRead == 0 || p1.BytesUploaded == 0 {
		t.Fatalf("first push: %+v", p1)
	}
	s.testWrite(t, sb.ID, "/workspace/notes.md", "hour 2")
	var p2 client.PushResult
	op, err = s.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Wait: true})
	opDone(t, op, err, &p2)
	// (The dir pool's snapshots are copies with new inodes, so every file
	// is read again; only new chunks are sent. On btrfs unchanged files are
	// not even read: see the e2e test.)
	if p2.BytesUploaded > p1.BytesUploaded/4 || p2.RemoteSnapshot.Parent != p1.RemoteSnapshot.ID {
		t.Fatalf("incremental push: %+v", p2)
	}
	// Only the newest push snapshot is kept locally.
	snaps, _ := s.ListSnapshots(ctx, tn, sb.ID)
	if len(snaps) != 1 || snaps[0].Kind != "push" {
		t.Fatalf("local snapshots after two pushes: %+v", snaps)
	}
	remote, err := s.ListRemoteSnapshots(ctx, tn, "agent")
	if err != nil || len(remote) != 2 {
		t.Fatalf("remote snapshots: %d %v", len(remote), err)
	}
	if other, _ := s.ListRemoteSnapshots(ctx, "tenant-b", ""); len(other) != 0 {
		t.Fatalf("another tenant sees %d pushes", len(other))
	}
	if _, err := s.GetOperation(ctx, api.Principal{TenantID: "tenant-b"}, op.ID); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's operation: %v", err)
	}

	// Restore the latest push into a new, running sandbox.
	var rr client.RestoreResult
	op, err = s.RestoreRemote(ctx, tn, client.RestoreRequest{Sandbox: sb.ID, Name: "restored", Wait: true})
	opDone(t, op, err, &rr)
	if rr.Sandbox == nil || rr.Sandbox.State != "running" {
		t.Fatalf("restored sandbox: %+v", rr.Sandbox)
	}
	if got := s.testRead(t, rr.Sandbox.ID, "/workspace/notes.md"); got != "hour 2" {
		t.Fatalf("restored notes = %q", got)
	}

	// Pull the first push into a local snapshot.
	op, err = s.PullRemote(ctx, tn, client.PullRequest{Snapshot: p1.RemoteSnapshot.ID[:8], Wait: true})
	opDone(t, op, err, &rr)
	if rr.Snapshot == nil || rr.Snapshot.Kind != "pull" {
		t.Fatalf("pull: %+v", rr)
	}

	// Archive: the root leaves the local disk; start hydrates it.
	if _, err := s.ArchiveSandbox(ctx, tn, sb.ID, true); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("archive of a running sandbox: %v", err)
	}
	if _, err := s.StopSandbox(ctx, tn, sb.ID); err != nil {
		t.Fatal(err)
	}
	var ar client.ArchiveResult
	op, err = s.ArchiveSandbox(ctx, tn, sb.ID, true)
	opDone(t, op, err, &ar)
	got, _ := s.GetSandbox(ctx, tn, sb.ID)
	if got.State != "archived" || ar.VerifiedBytes == 0 {
		t.Fatalf("after archive: %s %+v", got.State, ar)
	}
	if ok, _ := s.pool.Exists(ctx, datasetName(sb.ID)); ok {
		t.Fatal("archived sandbox still has its root on disk")
	}
	if _, err := s.StartSandbox(ctx, tn, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := s.testRead(t, sb.ID, "/workspace/notes.md"); got != "hour 2" {
		t.Fatalf("hydrated notes = %q", got)
	}

	// Retention keep-last 1, then prune; check stays clean.
	if _, err := s.SetBackupPolicy(ctx, tn, sb.ID, client.BackupPolicy{Interval: "1h", Retention: client.BackupRetention{KeepLast: 1}}); err != nil {
		t.Fatal(err)
	}
	var pr client.RepoPruneResult
	op, err = s.PruneRepo(ctx, tn, client.PruneRequest{Sandbox: sb.ID, Wait: true})
	opDone(t, op, err, &pr)
	if len(pr.Forgotten) != 2 {
		t.Fatalf("prune forgot %d, want 2 of 3 pushes", len(pr.Forgotten))
	}
	var cr client.CheckResult
	op, err = s.CheckRepo(ctx, tn, true, client.CheckRequest{ReadData: true, Wait: true})
	opDone(t, op, err, &cr)
	if !cr.OK || len(cr.Scopes) != 1 {
		t.Fatalf("check: %+v", cr)
	}

	// An empty daemon with the same repository and key lists and restores.
	s2 := newService(t)
	withRepo(t, s2, repoDir)
	list, err := s2.ListRemoteSnapshots(ctx, tn, sb.ID)
	if err != nil || len(list) != 1 {
		t.Fatalf("empty daemon lists %d: %v", len(list), err)
	}
	op, err = s2.RestoreRemote(ctx, tn, client.RestoreRequest{Snapshot: list[0].ID, NoStart: true, Wait: true})
	opDone(t, op, err, &rr)
	if got := s2.testRead(t, rr.Sandbox.ID, "/workspace/notes.md"); got != "hour 2" {
		t.Fatalf("notes restored on the empty daemon = %q", got)
	}
}

func TestDrillRestoresVerifiesAndRecords(t *testing.T) {
	s := newService(t)
	withRepo(t, s, t.TempDir())
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DrillSandbox(ctx, tn, sb.ID, client.DrillRequest{}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("drill before any push: %v", err)
	}
	s.testWrite(t, sb.ID, "/workspace/result.txt", "42")
	op, err := s.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Wait: true})
	opDone(t, op, err, nil)
	var d client.Drill
	op, err = s.DrillSandbox(ctx, tn, sb.ID, client.DrillRequest{Verify: []string{"sh", "-c", "test \"$(cat /workspace/result.txt)\" = 42"}, Wait: true})
	opDone(t, op, err, &d)
	if !d.OK || !d.DigestOK || d.VerifyExit == nil || *d.VerifyExit != 0 || d.RecoverySeconds <= 0 {
		t.Fatalf("drill: %+v", d)
	}
	// A failing verify command fails the drill, and both are recorded.
	op, _ = s.DrillSandbox(ctx, tn, sb.ID, client.DrillRequest{Verify: []string{"false"}, Wait: true})
	if op.State != "failed" {
		t.Fatalf("drill with a failing verify command: %s", op.State)
	}
	list, err := s.ListDrills(ctx, tn, "agent")
	if err != nil || len(list) != 2 || list[0].OK || !list[1].OK {
		t.Fatalf("drill history: %+v %v", list, err)
	}
	// The drill sandboxes are gone.
	all, _ := s.ListSandboxes(ctx, tn, true)
	if len(all) != 1 {
		t.Fatalf("%d sandboxes left after drills", len(all))
	}
}

func TestFileHistoryAndRestorePath(t *testing.T) {
	s := newService(t)
	withRepo(t, s, t.TempDir())
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	s.testWrite(t, sb.ID, "/workspace/plan.md", "v1")
	op, err := s.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Wait: true})
	opDone(t, op, err, nil)
	s.testWrite(t, sb.ID, "/workspace/plan.md", "v2")
	snap, err := s.CreateSnapshot(ctx, tn, sb.ID, client.CreateSnapshotRequest{Label: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	s.testWrite(t, sb.ID, "/workspace/plan.md", "v3 broken")

	hist, err := s.FileHistory(ctx, tn, sb.ID, "/workspace/plan.md")
	if err != nil {
		t.Fatal(err)
	}
	// Newest first: the user snapshot (v2), the push's local snapshot (v1)
	// and the pushed snapshot (v1, same digest as its local snapshot).
	if len(hist) != 3 || hist[0].Snapshot != snap.ID || !hist[0].Changed {
		t.Fatalf("history: %+v", hist)
	}
	var remote client.FileVersion
	for _, v := range hist {
		if v.Source == "remote" {
			remote = v
		}
	}
	if remote.Digest == "" || remote.Digest != hist[1].Digest && remote.Digest != hist[2].Digest {
		t.Fatalf("pushed and local v1 digests differ: %+v", hist)
	}
	// Undo from the local snapshot, then from the pushed one, elsewhere.
	op, err = s.RestorePath(ctx, tn, sb.ID, client.RestorePathRequest{Path: "/workspace/plan.md", Snapshot: snap.ID, Wait: true})
	opDone(t, op, err, nil)
	if got := s.testRead(t, sb.ID, "/workspace/plan.md"); got != "v2" {
		t.Fatalf("after restore-path from local: %q", got)
	}
	op, err = s.RestorePath(ctx, tn, sb.ID, client.RestorePathRequest{Path: "/workspace", Snapshot: remote.Snapshot[:10], To: "/workspace-v1", Wait: true})
	opDone(t, op, err, nil)
	if got := s.testRead(t, sb.ID, "/workspace-v1/plan.md"); got != "v1" {
		t.Fatalf("directory restored elsewhere: %q", got)
	}
	if _, err := s.RestorePath(ctx, tn, sb.ID, client.RestorePathRequest{Path: "/../etc/passwd", Snapshot: snap.ID}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("escaping path: %v", err)
	}
	if _, err := s.RestorePath(ctx, "tenant-b", sb.ID, client.RestorePathRequest{Path: "/x", Snapshot: snap.ID}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant: %v", err)
	}
}

func TestVolumePushRestoreAndErasure(t *testing.T) {
	s := newService(t)
	repoDir := t.TempDir()
	withRepo(t, s, repoDir)
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	vol, err := s.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: "data"})
	if err != nil {
		t.Fatal(err)
	}
	marker := strings.Repeat("PATIENT-RECORD-7731;", 5000)
	if err := os.WriteFile(filepath.Join(s.pool.Path(volumeDataset(vol.ID)), "records.csv"), []byte(marker), 0o600); err != nil {
		t.Fatal(err)
	}
	var pr client.PushResult
	op, err := s.PushVolume(ctx, tn, vol.ID, client.PushVolumeRequest{Wait: true})
	opDone(t, op, err, &pr)
	if pr.RemoteSnapshot.Volume != vol.ID {
		t.Fatalf("push result: %+v", pr)
	}
	// Volume pushes follow the same retention verbs: keep the last one.
	op, err = s.PushVolume(ctx, tn, vol.ID, client.PushVolumeRequest{Wait: true})
	opDone(t, op, err, nil)
	var prr client.RepoPruneResult
	op, err = s.PruneRepo(ctx, tn, client.PruneRequest{Retention: &client.BackupRetention{KeepLast: 1}, Wait: true})
	opDone(t, op, err, &prr)
	if l, _ := s.ListVolumePushes(ctx, tn, vol.ID); len(l) != 1 || len(prr.Forgotten) != 1 {
		t.Fatalf("after keep-last 1: %d volume pushes, forgot %v", len(l), prr.Forgotten)
	}
	// A volume restores into an empty daemon with the same repository and key.
	s2 := newService(t)
	withRepo(t, s2, repoDir)
	list, err := s2.ListVolumePushes(ctx, tn, "")
	if err != nil || len(list) != 1 {
		t.Fatalf("empty daemon lists %d volume pushes: %v", len(list), err)
	}
	if other, _ := s2.ListVolumePushes(ctx, "tenant-b", ""); len(other) != 0 {
		t.Fatal("another tenant sees the volume push")
	}
	var vr client.VolumeRestoreResult
	op, err = s2.RestoreVolume(ctx, tn, client.RestoreVolumeRequest{Volume: vol.ID, Name: "data-restored", Wait: true})
	opDone(t, op, err, &vr)
	got, err := os.ReadFile(filepath.Join(s2.pool.Path(volumeDataset(vr.Volume.ID)), "records.csv"))
	if err != nil || string(got) != marker {
		t.Fatalf("restored volume content: %v", err)
	}

	// Purge destroys the volume's key and its pushed data: nothing in the
	// repository holds or can decrypt the records any more.
	if _, err := s.DeleteVolume(ctx, tn, vol.ID, true); err != nil {
		t.Fatal(err)
	}
	r, _ := s.repository(ctx)
	if left, _ := r.Store().List(ctx, "scopes/"+volumeScope(vol.ID)+"/"); len(left) != 0 {
		t.Fatalf("%d objects of the purged volume remain", len(left))
	}
	if _, err := r.Scope(ctx, volumeScope(vol.ID), false); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("purged volume's scope opens: %v", err)
	}
	if hit := grepTree(t, filepath.Join(repoDir, "repo"), "PATIENT-RECORD"); hit != "" {
		t.Fatalf("plaintext in the repository: %s", hit)
	}
	if list, _ := s2.ListVolumePushes(ctx, tn, ""); len(list) != 0 {
		t.Fatalf("purged volume's pushes still listed: %d", len(list))
	}
}

func grepTree(t *testing.T, dir, needle string) string {
	t.Helper()
	hit := ""
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), needle) {
				hit = p
			}
		}
		return nil
	})
	return hit
}

func TestPushIncludesVolumesClonedAtTheSameInstant(t *testing.T) {
	s := newService(t)
	withRepo(t, s, t.TempDir())
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: "shared"}); err != nil {
		t.Fatal(err)
	}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "agent",
		Volumes: []client.VolumeMount{{Volume: "shared", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	s.testWrite(t, sb.ID, "/data/db.txt", "rows")
	s.testWrite(t, sb.ID, "/workspace/notes.md", "notes")
	var res client.PushResult
	op, err := s.PushSandbox(ctx, tn, sb.ID, client.PushRequest{IncludeVolumes: true, Wait: true})
	opDone(t, op, err, &res)
	if len(res.Volumes) != 1 || res.Volumes[0].Labels["sandbox_push"] != res.RemoteSnapshot.ID {
		t.Fatalf("push with volumes: %+v", res)
	}
	// The volume push holds the volume's files, not the sandbox root's.
	var vr client.VolumeRestoreResult
	op, err = s.RestoreVolume(ctx, tn, client.RestoreVolumeRequest{Snapshot: res.Volumes[0].ID, Name: "shared-copy", Wait: true})
	opDone(t, op, err, &vr)
	b, err := os.ReadFile(filepath.Join(s.pool.Path(volumeDataset(vr.Volume.ID)), "db.txt"))
	if err != nil || string(b) != "rows" {
		t.Fatalf("restored volume: %q %v", b, err)
	}
	// No temporary volume clone is left behind.
	ids, _ := s.pool.List(ctx, "snapshots")
	for _, id := range ids {
		if strings.HasPrefix(id, "vsnap-") {
			t.Fatalf("volume clone %s left behind", id)
		}
	}
}

// waitOps waits until no operation of the service is running.
func waitOps(t *testing.T, s *Service) {
	t.Helper()
	for range 600 {
		busy := false
		s.ops.mu.Lock()
		for _, o := range s.ops.m {
			if o.snapshot().EndedAt == nil {
				busy = true
			}
		}
		s.ops.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("operations still running after 30 s")
}

func TestSchedulePushesWhenDueAndArchivesLongStopped(t *testing.T) {
	s := newService(t)
	withRepo(t, s, t.TempDir())
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	s.opts.Now = func() time.Time { return now }
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetBackupPolicy(ctx, tn, sb.ID, client.BackupPolicy{Interval: "30s"}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("interval under a minute: %v", err)
	}
	if _, err := s.SetBackupPolicy(ctx, tn, sb.ID, client.BackupPolicy{Interval: "1h", ArchiveAfter: "48h", Retention: client.BackupRetention{KeepLast: 2}}); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		l, err := s.ListRemoteSnapshots(ctx, tn, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	s.RunBackupPolicies(ctx) // never pushed: due now
	waitOps(t, s)
	s.RunBackupPolicies(ctx) // pushed a moment ago: not due
	waitOps(t, s)
	if n := count(); n != 1 {
		t.Fatalf("after the first runs: %d pushes, want 1", n)
	}
	for range 3 { // three intervals later, retention keeps 2
		now = now.Add(61 * time.Minute)
		s.RunBackupPolicies(ctx)
		waitOps(t, s)
	}
	if n := count(); n != 2 {
		t.Fatalf("after three more intervals with keep-last 2: %d pushes", n)
	}
	p, _ := s.GetBackupPolicy(ctx, tn, sb.ID)
	if p.LastPush == nil || p.NextPush == nil || !p.NextPush.After(*p.LastPush) {
		t.Fatalf("policy view: %+v", p)
	}
	// Stopped for longer than archive_after (and no push due): archived.
	if _, err := s.StopSandbox(ctx, tn, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetBackupPolicy(ctx, tn, sb.ID, client.BackupPolicy{ArchiveAfter: "48h"}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(49 * time.Hour)
	s.RunBackupPolicies(ctx)
	waitOps(t, s)
	if got, _ := s.GetSandbox(ctx, tn, sb.ID); got.State != "archived" {
		t.Fatalf("after 49 h stopped: %s", got.State)
	}
}

func TestLocalVolumeSnapshotsWithTheSandboxAndOnTheirOwn(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	tn := store.DefaultTenant
	vol, err := s.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "agent",
		Volumes: []client.VolumeMount{{Volume: "shared", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	s.testWrite(t, sb.ID, "/data/db.txt", "v1")
	snap, err := s.CreateSnapshot(ctx, tn, sb.ID, client.CreateSnapshotRequest{Label: "both", IncludeVolumes: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Volumes) != 1 {
		t.Fatalf("snapshot with volumes: %+v", snap)
	}
	if vs, err := s.GetSnapshot(ctx, tn, snap.Volumes[0]); err != nil || vs.Kind != "volume" || vs.Parent != snap.ID || vs.Sandbox != vol.ID {
		t.Fatalf("the volume's snapshot: %+v %v", vs, err)
	}
	s.testWrite(t, sb.ID, "/data/db.txt", "v2")
	own, err := s.CreateVolumeSnapshot(ctx, tn, "shared", client.CreateSnapshotRequest{Label: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	if list, _ := s.ListVolumeSnapshots(ctx, tn, "shared"); len(list) != 2 {
		t.Fatalf("volume snapshots: %+v", list)
	}
	// Restore each into a new volume: the content of its instant.
	for want, id := range map[string]string{"v1": snap.Volumes[0], "v2": own.ID} {
		var vr client.VolumeRestoreResult
		op, err := s.RestoreVolume(ctx, tn, client.RestoreVolumeRequest{Snapshot: id, Name: "copy-" + want, Wait: true})
		opDone(t, op, err, &vr)
		b, err := os.ReadFile(filepath.Join(s.pool.Path(volumeDataset(vr.Volume.ID)), "db.txt"))
		if err != nil || string(b) != want {
			t.Fatalf("volume restored from %s: %q %v, want %q", id, b, err, want)
		}
	}
	// A volume snapshot is not a sandbox root.
	if _, err := s.Fork(ctx, tn, own.ID, client.ForkRequest{NoStart: true}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("fork of a volume snapshot: %v", err)
	}
	if _, err := s.Rollback(ctx, tn, sb.ID, client.RollbackRequest{Snapshot: own.ID}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("rollback to a volume snapshot: %v", err)
	}
	// Purging the volume deletes its local snapshots too (its data).
	if _, err := s.DeleteSandbox(ctx, tn, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVolume(ctx, tn, "shared", true); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{snap.Volumes[0], own.ID} {
		if ok, _ := s.pool.Exists(ctx, snapshotDataset(id)); ok {
			t.Fatalf("volume snapshot %s outlived the volume's purge", id)
		}
	}
}

// scopePacks lists the pack files of the default tenant's scope in a
// local repository directory.
func scopePacks(t *testing.T, repoDir string) []string {
	t.Helper()
	var out []string
	root := filepath.Join(repoDir, "repo", "scopes", tenantScope(store.DefaultTenant), "data")
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// newPacks returns the packs of after not in before.
func newPacks(before, after []string) []string {
	var out []string
	for _, p := range after {
		if !slices.Contains(before, p) {
			out = append(out, p)
		}
	}
	return out
}

// flipPack flips a byte a third into a pack file (inside a blob).
func flipPack(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 0x40
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return filepath.Base(path)
}

func poolDigest(t *testing.T, s *Service, dataset string) string {
	t.Helper()
	d, err := treedigest.Digest(context.Background(), s.pool.Path(dataset), treedigest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDamagedPackIsNotReusedAndRepairHealsFromLocalSnapshots: three
// sandboxes are pushed and a pack of each is damaged on disk. check
// --read-data fails naming the three packs, the snapshots and their
// sandboxes. A fork of the first is pushed: the push uploads the damaged
// data again and restores exactly. repo repair then fixes the first
// (healed by the fork's push) and the second (from its local snapshot,
// the one its push read), and lists the third, whose local snapshot is
// gone, as still damaged; a check then names only that one.
func TestDamagedPackIsNotReusedAndRepairHealsFromLocalSnapshots(t *testing.T) {
	s := newService(t)
	repoDir := t.TempDir()
	withRepo(t, s, repoDir)
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	rnd := func(seed uint64, n int) string {
		r := rand.New(rand.NewPCG(seed, seed))
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return string(b)
	}
	var sbs []client.Sandbox
	var pushes []client.PushResult
	var damaged []string
	for i, name := range []string{"agent", "kept", "gone"} {
		sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		s.testWrite(t, sb.ID, "/workspace/data.bin", rnd(uint64(i+1), 3<<20))
		s.testWrite(t, sb.ID, "/workspace/notes.md", name+" notes")
		before := scopePacks(t, repoDir)
		var p client.PushResult
		op, err := s.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Wait: true})
		opDone(t, op, err, &p)
		added := newPacks(before, scopePacks(t, repoDir))
		if len(added) == 0 {
			t.Fatalf("push of %s wrote no pack", name)
		}
		damaged = append(damaged, flipPack(t, added[0]))
		sbs, pushes = append(sbs, sb), append(pushes, p)
	}
	// The third's local copy is gone.
	if err := s.DeleteSnapshot(ctx, tn, pushes[2].RemoteSnapshot.Labels["local_snapshot"]); err != nil {
		t.Fatal(err)
	}

	op, err := s.CheckRepo(ctx, tn, false, client.CheckRequest{ReadData: true, Wait: true})
	if err != nil || op.State != "failed" || !strings.Contains(op.Error, "3 damaged pack(s), 3 damaged snapshot(s)") {
		t.Fatalf("check: %v %+v", err, op)
	}
	var cr client.CheckResult
	if err := op.DecodeResult(&cr); err != nil || len(cr.Scopes) != 1 {
		t.Fatalf("check result: %v %s", err, op.Result)
	}
	var gotPacks []string
	for _, p := range cr.Scopes[0].DamagedPacks {
		gotPacks = append(gotPacks, p.ID)
	}
	slices.Sort(gotPacks)
	slices.Sort(damaged)
	if !slices.Equal(gotPacks, damaged) || len(cr.Scopes[0].DamagedSnapshots) != 3 {
		t.Fatalf("check names packs %v (want %v) and %d snapshots", gotPacks, damaged, len(cr.Scopes[0].DamagedSnapshots))
	}
	for i, d := range cr.Scopes[0].DamagedSnapshots {
		if d.ID != pushes[i].RemoteSnapshot.ID || d.Sandbox != sbs[i].ID || d.SandboxName != sbs[i].Name || len(d.Packs) == 0 {
			t.Errorf("damaged snapshot %d: %+v, want %s of %s (%s)", i, d, pushes[i].RemoteSnapshot.ID, sbs[i].Name, sbs[i].ID)
		}
	}

	// A fork of the first, pushed: the new push restores exactly.
	forks, err := s.Fork(ctx, tn, sbs[0].ID, client.ForkRequest{NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	var fp client.PushResult
	op, err = s.PushSandbox(ctx, tn, forks[0].ID, client.PushRequest{Wait: true})
	opDone(t, op, err, &fp)
	if fp.BytesUploaded < 1<<20 || fp.BlobsReplaced == 0 {
		t.Fatalf("push of the fork uploaded %d bytes, %d blobs again: it reused the damaged pack's data", fp.BytesUploaded, fp.BlobsReplaced)
	}
	var rr client.RestoreResult
	op, err = s.RestoreRemote(ctx, tn, client.RestoreRequest{Snapshot: fp.RemoteSnapshot.ID, Name: "fork-restored", NoStart: true, Wait: true})
	opDone(t, op, err, &rr)
	if got, want := poolDigest(t, s, datasetName(rr.Sandbox.ID)), poolDigest(t, s, snapshotDataset(fp.RemoteSnapshot.Labels["local_snapshot"])); got != want {
		t.Fatalf("the fork's push restores to digest %s, its snapshot has %s", got, want)
	}

	// Repair: the first and second are fixed, the third is listed.
	op, err = s.RepairRepo(ctx, tn, false, client.RepairRequest{Wait: true})
	if err != nil || op.State != "failed" || !strings.Contains(op.Error, "1 snapshot(s) are still damaged") {
		t.Fatalf("repair: %v %+v", err, op)
	}
	var rep client.RepairResult
	if err := op.DecodeResult(&rep); err != nil || len(rep.Scopes) != 1 {
		t.Fatalf("repair result: %v %s", err, op.Result)
	}
	sr := rep.Scopes[0]
	if len(sr.PacksRemoved) != 3 || len(sr.Repaired) != 2 || len(sr.Damaged) != 1 || sr.Damaged[0].SandboxName != "gone" {
		t.Fatalf("repair: %+v", sr)
	}
	for _, d := range sr.Repaired {
		if d.Sandbox == sbs[1].ID && d.RepairedFrom != "local snapshot "+pushes[1].RemoteSnapshot.Labels["local_snapshot"] {
			t.Errorf("kept repaired from %q", d.RepairedFrom)
		}
	}
	for i := range 2 {
		op, err = s.RestoreRemote(ctx, tn, client.RestoreRequest{Snapshot: pushes[i].RemoteSnapshot.ID, Name: sbs[i].Name + "-restored", NoStart: true, Wait: true})
		opDone(t, op, err, &rr)
		if got := s.testRead(t, rr.Sandbox.ID, "/workspace/data.bin"); got != rnd(uint64(i+1), 3<<20) {
			t.Errorf("%s restored after repair: data differs", sbs[i].Name)
		}
	}
	op, err = s.CheckRepo(ctx, tn, false, client.CheckRequest{ReadData: true, Wait: true})
	cr = client.CheckResult{}
	if err != nil || op.DecodeResult(&cr) != nil {
		t.Fatal(err)
	}
	if sc := cr.Scopes[0]; len(sc.DamagedPacks) != 0 || len(sc.DamagedSnapshots) != 1 || sc.DamagedSnapshots[0].Sandbox != sbs[2].ID {
		t.Fatalf("check after repair: %+v", sc)
	}
}
