package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/treedigest"
)

// volumeDir is the pool directory of a volume.
func (d *daemon) volumeDir(id string) string { return filepath.Join(d.dataDir, "pool", "volumes", id) }

// volumeDigest is the tree digest of a volume's files.
func (d *daemon) volumeDigest(t *testing.T, id string) []string {
	t.Helper()
	e, err := treedigest.Entries(context.Background(), d.volumeDir(id), treedigest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// cliAll runs the CLI against d and returns its exit code and its stdout
// and stderr together.
func (d *daemon) cliAll(args ...string) (int, string) {
	code, out, errOut := d.cli(args...)
	return code, out + errOut
}

// mountOf returns the volume mounted at path in sb ("" for none).
func mountOf(sb client.Sandbox, path string) client.VolumeMount {
	for _, m := range sb.Volumes {
		if m.Path == path {
			return m
		}
	}
	return client.VolumeMount{}
}

// TestSandboxWithTwoVolumesRestoresOnAnEmptyDaemon: a sandbox mounting two
// volumes (one whole, one by sub-path and read-only) is pushed with them;
// on a daemon that has only the repository and the key, a restore without
// the volumes is refused (which volume, what to do) and leaves nothing; the
// volumes' pushes are found by name; with one volume restored by name
// under another name (found by its origin) and the other restored with
// --restore-volumes, both are mounted where they were and hold exactly what
// was pushed. A fork with --volume re-points one mount; a stopped sandbox's
// volumes are attached and detached, and a running one refuses.
func TestSandboxWithTwoVolumesRestoresOnAnEmptyDaemon(t *testing.T) {
	repoDir := filepath.Join(t.TempDir(), "repo")
	d := newDaemon(t, "--repo", repoDir)
	ctx := ctxT(t)
	if _, err := d.c.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"shared", "refs"} {
		if _, err := d.c.CreateVolume(ctx, client.CreateVolumeRequest{Name: name, SizeBytes: 256 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	// refs/docs is filled first through a writable mount.
	sb0, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "filler", Volumes: []client.VolumeMount{{Volume: "refs", Path: "/refs"}}})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, sb0.ID, "agent", `set -e; mkdir -p /refs/docs; echo manual > /refs/docs/readme; head -c 3000000 /dev/urandom > /refs/docs/blob; ln -s readme /refs/docs/link`)
	if _, err := d.c.DeleteSandbox(ctx, sb0.ID, true); err != nil {
		t.Fatal(err)
	}
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "agent", Volumes: []client.VolumeMount{
		{Volume: "shared", Path: "/data"}, {Volume: "refs", SubPath: "docs", Path: "/docs", ReadOnly: true}}})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, sb.ID, "agent", `set -e; echo state-1 > /data/state; mkdir -p /data/db; head -c 2000000 /dev/urandom > /data/db/pages
		echo root-file > /workspace/notes`)
	var pr client.PushResult
	op, err := d.c.Push(ctx, sb.ID, client.PushRequest{IncludeVolumes: true, Wait: true})
	opResult(t, op, err, &pr)
	if len(pr.Volumes) != 2 || len(pr.RemoteSnapshot.Mounts) != 2 {
		t.Fatalf("push with volumes: %d volume pushes, mounts recorded %+v", len(pr.Volumes), pr.RemoteSnapshot.Mounts)
	}
	for _, m := range pr.RemoteSnapshot.Mounts {
		if m.VolumeName == "" || m.VolumeID == "" || (m.Path == "/docs" && (m.SubPath != "docs" || !m.ReadOnly)) {
			t.Fatalf("recorded mount %+v", m)
		}
	}
	sharedV, _ := d.c.GetVolume(ctx, "shared")
	refsV, _ := d.c.GetVolume(ctx, "refs")
	wantShared, wantRefs := d.volumeDigest(t, sharedV.ID), d.volumeDigest(t, refsV.ID)
	// A separate volume push after the sandbox's (the order):
	// restore takes the one pushed with the sandbox.
	d.sh(ctx, sb.ID, "agent", `echo state-2 > /data/state`)
	op, err = d.c.PushVolume(ctx, "shared", client.PushVolumeRequest{Wait: true})
	opResult(t, op, err, nil)
	// What /data held at the push: the volume push made with it.
	var sharedAtPush client.RemoteSnapshot
	for _, v := range pr.Volumes {
		if v.Volume == sharedV.ID {
			sharedAtPush = v
		}
	}

	// The machine is lost.
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	d.kill9()
	d2 := newDaemon(t, "--repo", repoDir, "--repo-key-file", filepath.Join(d.dataDir, "repo.key"))

	// Missing volumes: refused, saying which and what to do; nothing made.
	_, err = d2.c.RestoreRemote(ctx, client.RestoreRequest{Snapshot: pr.RemoteSnapshot.ID, Name: "agent", Wait: true})
	if !client.IsConflict(err) || !strings.Contains(err.Error(), "shared") || !strings.Contains(err.Error(), "stead volume restore") {
		t.Fatalf("restore without its volumes: %v", err)
	}
	if code, out := d2.cliAll("restore", pr.RemoteSnapshot.ID[:12], "--name", "agent"); code != 4 || !strings.Contains(out, "/data") {
		t.Fatalf("stead restore without volumes: exit %d: %s", code, out)
	}
	if l, _ := d2.c.ListSandboxes(ctx, true); len(l) != 0 {
		t.Fatalf("a refused restore left %d sandboxes", len(l))
	}

	// Item 5: the volume's pushes are found by its name on the new machine.
	code, out, _ := d2.cli("volume", "pushes", "shared", "--json")
	var pushes []client.RemoteSnapshot
	if err := json.Unmarshal([]byte(out), &pushes); code != 0 || err != nil || len(pushes) != 2 || pushes[1].Volume != sharedV.ID {
		t.Fatalf("stead volume pushes shared: exit %d:\n%s", code, out)
	}
	if code, out := d2.cliAll("volume", "restore", "--latest", "shared", "--name", "shared-latest"); code != 0 {
		t.Fatalf("stead volume restore --latest shared: exit %d: %s", code, out)
	}
	// The push made with the sandbox, under another name: found by origin.
	op, err = d2.c.RestoreVolume(ctx, client.RestoreVolumeRequest{Snapshot: sharedAtPush.ID, Name: "shared-copy", Wait: true})
	var vr client.VolumeRestoreResult
	opResult(t, op, err, &vr)
	if vr.Volume.Origin != sharedV.ID {
		t.Fatalf("restored volume's origin %q, want %s", vr.Volume.Origin, sharedV.ID)
	}
	// shared-latest has the same origin and is newer: the recorded name
	// decides neither, so the newest wins; purge it to make the choice
	// the push-time copy.
	if _, err := d2.c.DeleteVolume(ctx, "shared-latest", true); err != nil {
		t.Fatal(err)
	}

	// refs comes back with --restore-volumes; shared is found by origin.
	var rr client.RestoreResult
	op, err = d2.c.RestoreRemote(ctx, client.RestoreRequest{Snapshot: pr.RemoteSnapshot.ID, Name: "agent", RestoreVolumes: true, Wait: true})
	opResult(t, op, err, &rr)
	if len(rr.Volumes) != 1 || rr.Volumes[0].Name != "refs" {
		t.Fatalf("restored with the sandbox: %+v", rr.Volumes)
	}
	got := rr.Sandbox
	if m := mountOf(*got, "/data"); m.Volume != vr.Volume.ID || m.ReadOnly {
		t.Fatalf("/data mount %+v, want %s", m, vr.Volume.ID)
	}
	if m := mountOf(*got, "/docs"); m.Volume != rr.Volumes[0].ID || m.SubPath != "docs" || !m.ReadOnly {
		t.Fatalf("/docs mount %+v", m)
	}
	for _, c := range []struct {
		want []string
		id   string
	}{{wantShared, vr.Volume.ID}, {wantRefs, rr.Volumes[0].ID}} {
		if diff := treedigest.Diff(c.want, d2.volumeDigest(t, c.id)); len(diff) > 0 {
			t.Fatalf("restored volume %s differs from the pushed one:\n%s", c.id, strings.Join(diff[:min(10, len(diff))], "\n"))
		}
	}
	if out := d2.sh(ctx, got.ID, "agent", `cat /data/state /docs/readme /workspace/notes; test -s /data/db/pages && test ! -w /docs/readme && ! touch /docs/x 2>/dev/null && echo ro`); out != "state-1\nmanual\nroot-file\nro\n" {
		t.Fatalf("restored sandbox sees %q", out)
	}

	// A fork re-points /data to another volume and keeps /docs.
	if _, err := d2.c.CreateVolume(ctx, client.CreateVolumeRequest{Name: "scratch", SizeBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	code, out, _ = d2.cli("fork", "agent", "--volume", "scratch:/data", "--json")
	if code != 0 {
		t.Fatalf("stead fork --volume: exit %d: %s", code, out)
	}
	forks, err := d2.c.ListSandboxes(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	var fork client.Sandbox
	for _, f := range forks {
		if f.ID != got.ID {
			fork = f
		}
	}
	scratch, _ := d2.c.GetVolume(ctx, "scratch")
	if m := mountOf(fork, "/data"); m.Volume != scratch.ID {
		t.Fatalf("fork's /data: %+v", fork.Volumes)
	}
	if m := mountOf(fork, "/docs"); m.Volume != rr.Volumes[0].ID || !m.ReadOnly {
		t.Fatalf("fork's /docs: %+v", fork.Volumes)
	}
	if out := d2.sh(ctx, fork.ID, "agent", `ls -A /data; cat /docs/readme`); out != "manual\n" {
		t.Fatalf("fork sees %q", out)
	}

	// Attach and detach: refused while running, done while stopped.
	if code, out := d2.cliAll("volume", "attach", "agent", "scratch/extra:/extra"); code != 4 || !strings.Contains(out, "stop it first") {
		t.Fatalf("attach to a running sandbox: exit %d: %s", code, out)
	}
	if _, err := d2.c.StopSandbox(ctx, got.ID); err != nil {
		t.Fatal(err)
	}
	if code, out := d2.cliAll("volume", "attach", "agent", "scratch/extra:/extra"); code != 0 || !strings.Contains(out, "agent: scratch/extra on /extra") {
		t.Fatalf("attach: exit %d: %s", code, out)
	}
	if code, out := d2.cliAll("volume", "attach", "agent", "scratch:/data"); code != 4 {
		t.Fatalf("attach over a used mount path: exit %d: %s", code, out)
	}
	if code, out := d2.cliAll("volume", "detach", "agent", "/docs"); code != 0 || strings.Contains(out, "/docs") {
		t.Fatalf("detach: exit %d: %s", code, out)
	}
	if code, out := d2.cliAll("volume", "detach", "agent", "/docs"); code != 3 {
		t.Fatalf("detach again: exit %d: %s", code, out)
	}
	if _, err := d2.c.StartSandbox(ctx, got.ID); err != nil {
		t.Fatal(err)
	}
	d2.sh(ctx, got.ID, "agent", `echo x > /extra/f && test ! -e /docs/readme && cat /data/state`)
	if b, err := os.ReadFile(filepath.Join(d2.volumeDir(scratch.ID), "extra", "f")); err != nil || string(b) != "x\n" {
		t.Fatalf("attached sub-path: %q %v", b, err)
	}

	// Drills bring the volumes back too: here into temporary volumes
	// (removed after), and through an empty data dir.
	verify := []string{"sh", "-c", "grep -qx state-1 /data/state && grep -qx manual /docs/readme && ! touch /docs/x"}
	for _, empty := range []bool{false, true} {
		var dr client.Drill
		op, err = d2.c.Drill(ctx, sb.ID, client.DrillRequest{EmptyDataDir: empty, Verify: verify, Wait: true})
		opResult(t, op, err, &dr)
		if !dr.OK || dr.VerifyExit == nil || *dr.VerifyExit != 0 {
			t.Fatalf("drill (empty data dir %v): %+v", empty, dr)
		}
	}
	vols, err := d2.c.ListVolumes(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if strings.HasPrefix(v.Name, "drill-") {
			t.Fatalf("drill left volume %s", v.Name)
		}
	}
}
