package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/blobstore/s3/s3test"
	"github.com/stead-dev/stead/internal/treedigest"
)

// opResult fails unless op succeeded and decodes its result.
func opResult(t *testing.T, op client.Operation, err error, v any) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if op.State != "succeeded" {
		t.Fatalf("%s %s: %s: %s", op.Kind, op.ID, op.State, op.Error)
	}
	if v != nil {
		if err := json.Unmarshal(op.Result, v); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPushToS3RestoresExactlyOnAnEmptyDaemon: a sandbox pushed to a real
// S3 server restores, on a second daemon that has nothing but the
// repository URL and the key file, to a root whose digest equals the
// pushed snapshot's (sparse file, hardlinks, symlinks, xattrs, owners);
// an incremental push of an unchanged btrfs snapshot reads no file; an
// empty-data-dir drill from the second daemon passes and is recorded.
func TestPushToS3RestoresExactlyOnAnEmptyDaemon(t *testing.T) {
	cfg := s3test.Start(t)
	repoURL := fmt.Sprintf("s3://%s:%s@%s/%s/stead?secure=false", url.PathEscape(cfg.AccessKey), url.PathEscape(cfg.SecretKey), cfg.Endpoint, cfg.Bucket)
	d := newDaemon(t, "--repo", repoURL)
	ctx := ctxT(t)
	if info, err := d.c.InitRepo(ctx); err != nil || !info.Initialized {
		t.Fatalf("repo init: %+v %v", info, err)
	}
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	writeAgentWork(t, d, sb.ID)
	d.sh(ctx, sb.ID, "root", `set -e
		head -c 24000000 /dev/urandom > /workspace/model.bin
		truncate -s 2G /data/sparse.img && dd if=/dev/urandom of=/data/sparse.img bs=1M count=3 seek=700 conv=notrunc 2>/dev/null
		ln /workspace/model.bin /workspace/model-link.bin
		ln -s ../workspace/model.bin /data/model
		mkdir -p /data/deep/a/b && echo hi > /data/deep/a/b/c && chown -R 1234:4321 /data/deep`)
	var p1 client.PushResult
	op, err := d.c.Push(ctx, sb.ID, client.PushRequest{Wait: true})
	opResult(t, op, err, &p1)
	snapDir := filepath.Join(d.dataDir, "pool", "snapshots", p1.RemoteSnapshot.Labels["local_snapshot"])
	want, err := treedigest.Entries(ctx, snapDir, digestOpts)
	if err != nil {
		t.Fatal(err)
	}
	// Incremental, nothing changed: btrfs snapshots keep inode numbers and
	// ctimes, so no file is read again.
	var p2 client.PushResult
	op, err = d.c.Push(ctx, sb.ID, client.PushRequest{Wait: true})
	opResult(t, op, err, &p2)
	if p2.FilesRead > 3 || p2.FilesReused < p1.FilesRead-3 || p2.BytesUploaded > 256<<10 {
		t.Fatalf("no-change push read %d files (reused %d), uploaded %d bytes", p2.FilesRead, p2.FilesReused, p2.BytesUploaded)
	}
	// The first push's local snapshot was kept: the second looked only at
	// what btrfs says changed since (O(changes)), not at every file.
	if p1.Incremental || !p2.Incremental {
		t.Fatalf("incremental: first push %v, second %v (want false, true)", p1.Incremental, p2.Incremental)
	}
	t.Logf("full push: %d files, %d bytes uploaded in %.2fs; no-change push: %d read, %d reused, %d bytes in %.3fs",
		p1.FilesRead, p1.BytesUploaded, p1.Seconds, p2.FilesRead, p2.FilesReused, p2.BytesUploaded, p2.Seconds)

	// The machine is lost: a new daemon with only the URL and the key file.
	// (The old sandbox is purged first so no process of it outlives the test.)
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	d.kill9()
	d2 := newDaemon(t, "--repo", repoURL, "--repo-key-file", filepath.Join(d.dataDir, "repo.key"))
	list, err := d2.c.ListRemoteSnapshots(ctx, "")
	if err != nil || len(list) != 2 {
		t.Fatalf("the empty daemon lists %d pushed snapshots: %v", len(list), err)
	}
	var rr client.RestoreResult
	op, err = d2.c.RestoreRemote(ctx, client.RestoreRequest{Snapshot: p1.RemoteSnapshot.ID[:12], NoStart: true, Wait: true})
	opResult(t, op, err, &rr)
	got, err := treedigest.Entries(ctx, d2.rootDir(rr.Sandbox.ID), digestOpts)
	if err != nil {
		t.Fatal(err)
	}
	if diff := treedigest.Diff(want, got); len(diff) > 0 {
		t.Fatalf("restored root differs from the pushed snapshot (%d lines):\n%s", len(diff), strings.Join(diff[:min(20, len(diff))], "\n"))
	}
	if _, err := d2.c.StartSandbox(ctx, rr.Sandbox.ID); err != nil {
		t.Fatal(err)
	}
	if out := d2.sh(ctx, rr.Sandbox.ID, "agent", "cat /data/deep/a/b/c; stat -c %s /data/sparse.img"); out != "hi\n2147483648\n" {
		t.Fatalf("restored sandbox sees %q", out)
	}

	// A drill through a third, empty data dir, with a verify command.
	var dr client.Drill
	op, err = d2.c.Drill(ctx, sb.ID, client.DrillRequest{EmptyDataDir: true, Verify: []string{"sh", "-c", "test -s /workspace/model.bin"}, Wait: true})
	opResult(t, op, err, &dr)
	if !dr.OK || !dr.DigestOK || dr.RecoverySeconds <= 0 {
		t.Fatalf("drill: %+v", dr)
	}
	t.Logf("drill into an empty data dir: recovery %.2fs (restore %.2fs, verify %.2fs), %d files, %d bytes",
		dr.RecoverySeconds, dr.RestoreSeconds, dr.VerifySeconds, dr.Files, dr.Bytes)
	drills, err := d2.c.ListDrills(ctx, sb.ID)
	if err != nil || len(drills) != 1 || !drills[0].OK {
		t.Fatalf("drill history: %+v %v", drills, err)
	}
	var cr client.CheckResult
	op, err = d2.c.CheckRepo(ctx, client.CheckRequest{ReadData: true, Wait: true})
	opResult(t, op, err, &cr)
	if !cr.OK {
		t.Fatalf("check: %+v", cr)
	}
}
