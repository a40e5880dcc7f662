package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stead-dev/stead/client"
)

// The containment issue's five routes out, each written as the attack.

// hostCanary is a host directory the attacks aim at (it must stay empty)
// and a host file they try to read (its secret must never come back).
type hostCanary struct {
	dir, file, secret string
}

func newHostCanary(t *testing.T) hostCanary {
	base := t.TempDir()
	os.Chmod(base, 0o755)
	var b [8]byte
	rand.Read(b[:])
	c := hostCanary{dir: filepath.Join(base, "in"), file: filepath.Join(base, "secret"), secret: "HOST-SECRET-" + hex.EncodeToString(b[:])}
	if err := os.Mkdir(c.dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.file, []byte(c.secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

// check fails the test if anything landed in the canary directory or the
// secret shows in got.
func (c hostCanary) check(t *testing.T, what string, got ...string) {
	t.Helper()
	if ents, _ := os.ReadDir(c.dir); len(ents) > 0 {
		t.Fatalf("%s: %d entries written on the host in %s (first %s)", what, len(ents), c.dir, ents[0].Name())
	}
	for _, g := range got {
		if strings.Contains(g, c.secret) {
			t.Fatalf("%s: the host's secret came back: %.200q", what, g)
		}
	}
}

// newRepoDaemon is a daemon with an initialised repository in a directory.
func newRepoDaemon(t *testing.T) *daemon {
	d := newDaemon(t, "--repo", filepath.Join(t.TempDir(), "repo"))
	if _, err := d.c.InitRepo(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return d
}

// agentClient is a client holding a sandbox's own token (what the agent
// finds in $STEAD_TOKEN), talking to the daemon's TCP listener.
func agentClient(t *testing.T, d *daemon, id string) *client.Client {
	c, err := client.New("http://"+d.addr, tokenOf(t, d, id))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// adversary runs script in the background inside sandbox id as root (the
// strongest agent: `exec --user root`) until the test ends.
func (d *daemon) adversary(ctx context.Context, id, script string) {
	d.t.Helper()
	d.sh(ctx, id, "root", "nohup sh -c '"+strings.ReplaceAll(script, "'", `'\''`)+"' >/dev/null 2>&1 &")
}

// TestHostSideTreeOperationsNeverLeaveTheSandbox: an adversary inside the
// sandbox renames every restore temporary away and plants a symlink to a
// host directory in its place, and swaps a directory of the tree for
// symlinks to host paths, in a tight loop, while the daemon runs every
// host-side tree operation over and over (restore-path from a local
// snapshot and from a push, with the agent's token and the admin's;
// history; orient's files; files read, stat, list, write, mkdir and tar in
// both directions; push and restore). Nothing is written outside the tree
// and nothing of the host is read, on every iteration.
func TestHostSideTreeOperationsNeverLeaveTheSandbox(t *testing.T) {
	d := newRepoDaemon(t)
	ctx := ctxT(t)
	can := newHostCanary(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "victim"})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, sb.ID, "agent", `mkdir -p /workspace/tree/sub && cd /workspace/tree/sub && for i in $(seq 1 200); do echo file$i > f$i; done`)
	d.sh(ctx, sb.ID, "root", `cp /usr/bin/id /workspace/tree/suid && chmod 4755 /workspace/tree/suid`)
	snap, err := d.c.CreateSnapshot(ctx, sb.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var pushed client.PushResult
	op, err := d.c.Push(ctx, sb.ID, client.PushRequest{Snapshot: snap.ID, Wait: true})
	opResult(t, op, err, &pushed)
	ac := agentClient(t, d, sb.ID)

	d.adversary(ctx, sb.ID, `
while :; do
  for x in /workspace/.stead-restore-* /workspace/tree/.stead-*; do
    [ -e "$x" ] || [ -L "$x" ] || continue
    mv -T "$x" /workspace/grabbed 2>/dev/null; ln -sfn `+can.dir+` "$x" 2>/dev/null; rm -rf /workspace/grabbed
  done
  mv -T /workspace/tree/sub /workspace/tree/sub.x 2>/dev/null
  ln -sfn `+can.dir+` /workspace/tree/sub; ln -sfn `+can.file+` /workspace/tree/peek
  rm -f /workspace/tree/sub; mv -T /workspace/tree/sub.x /workspace/tree/sub 2>/dev/null
done`)

	restored := 0
	for i := range 30 {
		// restore-path, as the agent and as the admin, local and pushed.
		for _, rc := range []struct {
			c    *client.Client
			snap string
		}{{ac, snap.ID}, {d.c, snap.ID}, {ac, pushed.RemoteSnapshot.ID}, {d.c, pushed.RemoteSnapshot.ID}} {
			op, err := rc.c.RestorePath(ctx, sb.ID, client.RestorePathRequest{Path: "/workspace/tree", Snapshot: rc.snap, To: "/workspace/r", Wait: true})
			if err == nil && op.State == "succeeded" {
				restored++
			}
			can.check(t, "restore-path")
		}
		var got []string
		if h, err := ac.FileHistory(ctx, sb.ID, "/workspace/tree/peek"); err == nil {
			got = append(got, h[0].Digest)
		}
		if or, err := ac.Orient(ctx, sb.ID, []string{"/workspace/tree/peek", "/workspace/tree/sub/secret"}, 0); err == nil {
			for _, f := range or.Files {
				got = append(got, f.Tail)
			}
		}
		for _, p := range []string{"/workspace/tree/peek", "/workspace/tree/sub/secret"} {
			if rc, _, err := d.c.ReadFile(ctx, sb.ID, p); err == nil {
				b, _ := io.ReadAll(rc)
				rc.Close()
				got = append(got, string(b))
			}
		}
		if l, err := d.c.ListFiles(ctx, sb.ID, "/workspace/tree/sub"); err == nil {
			for _, f := range l {
				got = append(got, f.Name)
			}
		}
		if tr, err := d.c.DownloadTar(ctx, sb.ID, "/workspace/tree"); err == nil {
			b, _ := io.ReadAll(tr)
			tr.Close()
			got = append(got, string(b))
		}
		d.c.WriteFile(ctx, sb.ID, "/workspace/tree/sub/w", 0o644, strings.NewReader("w"))
		d.c.Mkdir(ctx, sb.ID, "/workspace/tree/sub/m/n", true)
		d.c.UploadTar(ctx, sb.ID, "/workspace/tree/sub", tarOf(t, "up.txt", "up"))
		can.check(t, "files", got...)
		if i%10 == 0 {
			op, err := d.c.Push(ctx, sb.ID, client.PushRequest{Wait: true})
			if err == nil && op.State == "succeeded" {
				var pr client.PushResult
				opResult(t, op, err, &pr)
				var rr client.RestoreResult
				op, err = d.c.RestoreRemote(ctx, client.RestoreRequest{Snapshot: pr.RemoteSnapshot.ID, NoStart: true, Wait: true})
				opResult(t, op, err, &rr)
			}
			can.check(t, "push and restore")
		}
	}
	if restored == 0 {
		t.Fatal("no restore-path succeeded: the test proves nothing")
	}
	t.Logf("%d of 120 restore-paths succeeded under attack", restored)
}

// tarOf is a one-file tar stream.
func tarOf(t *testing.T, name, body string) io.Reader {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	out, err := exec.Command("tar", "-C", dir, "-cf", "-", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.NewReader(string(out))
}

// TestSandboxTokenFindsOnlyItsOwnSnapshots: with its own token, a sandbox
// asking for another sandbox's snapshot or push, or a snapshot of a volume
// it does not mount, gets exactly what an absent id gets.
func TestSandboxTokenFindsOnlyItsOwnSnapshots(t *testing.T) {
	d := newRepoDaemon(t)
	ctx := ctxT(t)
	if _, err := d.c.CreateVolume(ctx, client.CreateVolumeRequest{Name: "mine", SizeBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	a, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "a", Volumes: []client.VolumeMount{{Volume: "mine", SubPath: "agents/a", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, b.ID, "agent", "echo b-secret > /workspace/s")
	bSnap, err := d.c.CreateSnapshot(ctx, b.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var bPush client.PushResult
	op, err := d.c.Push(ctx, b.ID, client.PushRequest{Snapshot: bSnap.ID, Wait: true})
	opResult(t, op, err, &bPush)
	if _, err := d.c.CreateVolume(ctx, client.CreateVolumeRequest{Name: "other", SizeBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	vSnap, err := d.c.CreateVolumeSnapshot(ctx, "other", client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ac := agentClient(t, d, a.ID)
	answer := func(snap string) string {
		_, err := ac.RestorePath(ctx, a.ID, client.RestorePathRequest{Path: "/workspace/s", Snapshot: snap, Wait: true})
		var ae *client.APIError
		if !errors.As(err, &ae) {
			t.Fatalf("restore-path from %s with a's token: want an API error, got %v", snap, err)
		}
		return strings.ReplaceAll(ae.Error(), snap, "ID")
	}
	absentLocal, absentRemote := answer("snap-aaaaaaaaaaaaaaaa"), answer("0123456789abcdef")
	for _, c := range []struct{ name, id, want string }{
		{"another sandbox's snapshot", bSnap.ID, absentLocal},
		{"a volume's snapshot", vSnap.ID, absentLocal},
		{"another sandbox's push", bPush.RemoteSnapshot.ID, absentRemote},
	} {
		if got := answer(c.id); got != c.want {
			t.Errorf("%s: %q, an absent id: %q", c.name, got, c.want)
		}
	}
	if _, err := d.c.StatFile(ctx, a.ID, "/workspace/s"); err == nil {
		t.Fatal("b's file reached a")
	}
	// A snapshot of a volume a mounts: its own sub-path, and only that.
	d.sh(ctx, a.ID, "agent", "echo mine > /data/f")
	mSnap, err := d.c.CreateVolumeSnapshot(ctx, "mine", client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, a.ID, "agent", "rm /data/f")
	op, err = ac.RestorePath(ctx, a.ID, client.RestorePathRequest{Path: "/data/f", Snapshot: mSnap.ID, Wait: true})
	opResult(t, op, err, nil)
	if got := d.sh(ctx, a.ID, "agent", "cat /data/f"); got != "mine\n" {
		t.Fatalf("restored from the mounted volume's snapshot: %q", got)
	}
	// ... but not for a path outside that mount.
	if got := answer(mSnap.ID); got != absentLocal {
		t.Errorf("the mounted volume's snapshot for a path outside the mount: %q, an absent id: %q", got, absentLocal)
	}
	if h, err := ac.FileHistory(ctx, a.ID, "/workspace/s"); err == nil {
		t.Fatalf("a's history shows b's versions: %+v", h)
	}
}

// TestVolumeSubPathIsARootOfItsOwn: a sandbox mounting team/agents/a1 at
// /data plants a symlink to a sibling's file; neither the agent's orient
// nor the files API follows it out of agents/a1.
func TestVolumeSubPathIsARootOfItsOwn(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	if _, err := d.c.CreateVolume(ctx, client.CreateVolumeRequest{Name: "team", SizeBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	a2, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "a2", Volumes: []client.VolumeMount{{Volume: "team", SubPath: "agents/a2", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, a2.ID, "agent", "echo a2-secret > /data/secret")
	a1, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "a1", Volumes: []client.VolumeMount{{Volume: "team", SubPath: "agents/a1", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, a1.ID, "agent", "ln -s /agents/a2/secret /data/peek; ln -s ../a2/secret /data/peek2; echo mine > /data/own")
	or, err := agentClient(t, d, a1.ID).Orient(ctx, a1.ID, []string{"/data/peek", "/data/peek2", "/data/own"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range or.Files {
		if strings.Contains(f.Tail, "a2-secret") {
			t.Fatalf("orient read a sibling's file through %s", f.Path)
		}
	}
	if len(or.Files) != 1 || or.Files[0].Path != "/data/own" {
		t.Fatalf("orient files: %+v", or.Files)
	}
	for _, p := range []string{"/data/peek", "/data/peek2"} {
		if rc, _, err := d.c.ReadFile(ctx, a1.ID, p); err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			if strings.Contains(string(b), "a2-secret") {
				t.Fatalf("files API read a sibling's file through %s", p)
			}
		}
	}
	if l, err := d.c.ListFiles(ctx, a1.ID, "/data"); err != nil || len(l) != 3 {
		t.Fatalf("list of the mounted sub-path: %+v %v", l, err)
	}
	// The sandbox's mount table names no host path of the daemon's.
	mi := d.sh(ctx, a1.ID, "agent", "cat /proc/self/mountinfo")
	for _, host := range []string{d.runDir, d.dataDir, filepath.Dir(d.bin)} {
		if strings.Contains(mi, host) {
			t.Errorf("mountinfo inside names %s:\n%s", host, mi)
		}
	}
}

// TestAgentRequestsActWithTheAgentsPermissions: with its token, the agent
// reads and writes only what uid 1000 could: not a 0600 root file (orient,
// history, restore-path from a local snapshot or a push), not
// /etc/profile.d (root's on the next login shell).
func TestAgentRequestsActWithTheAgentsPermissions(t *testing.T) {
	d := newRepoDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "perm"})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, sb.ID, "root", "echo root-only > /root/x && chmod 600 /root/x && echo open > /workspace/open-but-root && chmod 600 /workspace/open-but-root")
	d.sh(ctx, sb.ID, "agent", "mkdir -p /workspace/evil && echo 'echo pwned' > /workspace/evil/evil.sh")
	snap, err := d.c.CreateSnapshot(ctx, sb.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var pushed client.PushResult
	op, err := d.c.Push(ctx, sb.ID, client.PushRequest{Snapshot: snap.ID, Wait: true})
	opResult(t, op, err, &pushed)
	ac := agentClient(t, d, sb.ID)
	if or, err := ac.Orient(ctx, sb.ID, []string{"/root/x", "/workspace/open-but-root"}, 0); err == nil {
		for _, f := range or.Files {
			if strings.Contains(f.Tail, "root-only") || strings.Contains(f.Tail, "open") {
				t.Fatalf("orient read %s for the agent", f.Path)
			}
		}
	}
	for _, snapID := range []string{snap.ID, pushed.RemoteSnapshot.ID} {
		for _, p := range []string{"/root/x", "/workspace/open-but-root"} {
			op, err := ac.RestorePath(ctx, sb.ID, client.RestorePathRequest{Path: p, Snapshot: snapID, To: "/workspace/stolen", Wait: true})
			if err == nil && op.State == "succeeded" {
				t.Fatalf("the agent restored %s from %s", p, snapID)
			}
		}
		op, err := ac.RestorePath(ctx, sb.ID, client.RestorePathRequest{Path: "/workspace/evil/evil.sh", Snapshot: snapID, To: "/etc/profile.d/evil.sh", Wait: true})
		if err == nil && op.State == "succeeded" {
			t.Fatalf("the agent wrote /etc/profile.d from %s", snapID)
		}
		// Its own files come back, as its own.
		op, err = ac.RestorePath(ctx, sb.ID, client.RestorePathRequest{Path: "/workspace/evil", Snapshot: snapID, To: "/workspace/back", Wait: true})
		opResult(t, op, err, nil)
		if got := d.sh(ctx, sb.ID, "agent", "stat -c %U /workspace/back/evil.sh; rm -rf /workspace/back"); got != "agent\n" {
			t.Fatalf("restored file owner %q", got)
		}
	}
	if got := d.sh(ctx, sb.ID, "root", "ls /workspace; ls /etc/profile.d"); strings.Contains(got, "stolen") || strings.Contains(got, "evil.sh") {
		t.Fatalf("something was written: %s", got)
	}
	if h, err := ac.FileHistory(ctx, sb.ID, "/root/x"); err == nil {
		t.Fatalf("history of a root-only file for the agent: %+v", h)
	}
}

// TestSetuidAndDevicesFromSandboxRootNeverReachTheHost: root inside makes
// a setuid-root binary (device nodes it cannot make at all); after every
// host-side operation that copies it (restore-path, push → restore,
// snapshot → fork, archive → hydrate), no copy runs as host root for a host
// user, and inside it gives no privilege.
func TestSetuidAndDevicesFromSandboxRootNeverReachTheHost(t *testing.T) {
	d := newRepoDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "suid"})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, sb.ID, "root", "cp /usr/bin/id /workspace/rootid && chmod 4755 /workspace/rootid")
	if res, err := d.c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"sh", "-c", "mknod /workspace/disk b 8 0 || mknod /dev/disk2 b 8 0"}, User: "root"}); err != nil || res.ExitCode == 0 {
		t.Fatalf("root inside made a device node: %+v %v", res, err)
	}
	snap, err := d.c.CreateSnapshot(ctx, sb.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	op, err := d.c.RestorePath(ctx, sb.ID, client.RestorePathRequest{Path: "/workspace/rootid", Snapshot: snap.ID, To: "/workspace/rootid2", Wait: true})
	opResult(t, op, err, nil)
	var pushed client.PushResult
	op, err = d.c.Push(ctx, sb.ID, client.PushRequest{Wait: true})
	opResult(t, op, err, &pushed)
	var rr client.RestoreResult
	op, err = d.c.RestoreRemote(ctx, client.RestoreRequest{Snapshot: pushed.RemoteSnapshot.ID, Name: "suid-restored", Wait: true})
	opResult(t, op, err, &rr)
	forks, err := d.c.Fork(ctx, snap.ID, client.ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	op, err = d.c.Archive(ctx, sb.ID, true)
	opResult(t, op, err, nil)
	if _, err := d.c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{sb.ID, rr.Sandbox.ID, forks[0].ID} {
		if got := d.sh(ctx, id, "agent", "/workspace/rootid -u; test ! -e /workspace/rootid2 || /workspace/rootid2 -u"); strings.Contains(got, "0\n") && !strings.HasPrefix(got, "1000") {
			t.Fatalf("%s: the setuid copy gave root inside: %q", id, got)
		}
	}
	// On the host: every copy is in the pool, which is nosuid and closed
	// to other users; a host user cannot run any of them.
	pool := filepath.Join(d.dataDir, "pool")
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(pool, &sfs); err != nil || sfs.Flags&0x2 == 0 { // ST_NOSUID
		t.Fatalf("pool %s is not mounted nosuid: flags %#x %v", pool, sfs.Flags, err)
	}
	copies, _ := filepath.Glob(filepath.Join(pool, "*", "*", "workspace", "rootid*"))
	if len(copies) < 4 {
		t.Fatalf("found only %v", copies)
	}
	for _, p := range copies {
		cmd := exec.Command(p, "-u")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err == nil || strings.TrimSpace(string(out)) == "0" {
			t.Fatalf("host user nobody ran %s: %q %v", p, out, err)
		}
	}
}

// TestVolumeSubPathMountUnderAttack: while a sandbox that mounts a whole
// volume swaps one of its sub-directories for a symlink to a host
// directory as fast as it can, another sandbox mounting that sub-path is
// started and stopped again and again; each start either mounts the real
// sub-directory or is refused, and nothing lands on the host.
func TestVolumeSubPathMountUnderAttack(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	can := newHostCanary(t)
	if _, err := d.c.CreateVolume(ctx, client.CreateVolumeRequest{Name: "team", SizeBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	mover, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "mover", Volumes: []client.VolumeMount{{Volume: "team", Path: "/vol"}}})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, mover.ID, "root", "mkdir -p /vol/agents/a1 && chown 1000:1000 /vol/agents/a1")
	victim, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "victim", NoStart: true,
		Volumes: []client.VolumeMount{{Volume: "team", SubPath: "agents/a1", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	d.adversary(ctx, mover.ID, `
while :; do
  mv -T /vol/agents/a1 /vol/agents/a1.x 2>/dev/null; ln -sfn `+can.dir+` /vol/agents/a1
  rm -f /vol/agents/a1; mv -T /vol/agents/a1.x /vol/agents/a1 2>/dev/null
done`)
	started := 0
	for range 25 {
		if _, err := d.c.StartSandbox(ctx, victim.ID); err != nil {
			continue // refused: the sub-path was a symlink at that instant
		}
		started++
		d.c.Exec(ctx, victim.ID, client.ExecRequest{Command: []string{"sh", "-c", "echo x > /data/marker-$$"}})
		can.check(t, "sub-path mount")
		if _, err := d.c.StopSandbox(ctx, victim.ID); err != nil {
			t.Fatal(err)
		}
	}
	can.check(t, "sub-path mount")
	if started == 0 {
		t.Fatal("no start succeeded: the test proves nothing")
	}
	t.Logf("%d of 25 starts mounted the sub-path under attack", started)
}
