package e2e

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/template/testimage"
	"github.com/stead-dev/stead/internal/treedigest"
)

var digestOpts = treedigest.Options{Exclude: []string{"/tmp", "/proc", "/sys", "/dev", "/.stead"}}

func (d *daemon) rootDir(id string) string { return filepath.Join(d.dataDir, "pool", "sandboxes", id) }

func (d *daemon) digest(t *testing.T, id string) (string, []string) {
	t.Helper()
	ctx := context.Background()
	entries, err := treedigest.Entries(ctx, d.rootDir(id), digestOpts)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := treedigest.Digest(ctx, d.rootDir(id), digestOpts)
	if err != nil {
		t.Fatal(err)
	}
	return sum, entries
}

// writeAgentWork leaves the kind of state an agent accumulates: notes,
// checkpoints, symlinks, hardlinks, a sparse file, an xattr, config in /etc
// and logs in /var/log.
func writeAgentWork(t *testing.T, d *daemon, id string) {
	ctx := ctxT(t)
	d.sh(ctx, id, "agent", `set -e
mkdir -p /workspace/proj/src /data /home/agent/notes
echo "# plan: step 1 done" > /workspace/plan.md
echo '{"step": 2}' > /data/state.json
echo "remember the API quirk" > /home/agent/notes/a.txt
ln -s plan.md /workspace/plan-link
ln -s /data/state.json /workspace/state-link
ln /workspace/plan.md /workspace/plan-hard
dd if=/dev/zero of=/workspace/sparse bs=1 count=0 seek=67108864 2>/dev/null
printf 'middle' | dd of=/workspace/sparse bs=1 seek=33554432 conv=notrunc 2>/dev/null
chmod 0751 /workspace/proj
`)
	d.sh(ctx, id, "root", `set -e
echo "agent_mode=long" > /etc/agent.conf
mkdir -p /var/log/myagent && echo started > /var/log/myagent/run.log
mkfifo /workspace/fifo 2>/dev/null || true
`)
	if err := unix.Setxattr(filepath.Join(d.rootDir(id), "workspace/plan.md"), "user.agent.step", []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, d *daemon, id, path string) string {
	t.Helper()
	rc, _, err := d.c.ReadFile(context.Background(), id, path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

func assertSameTree(t *testing.T, before []string, d *daemon, id string) {
	t.Helper()
	_, after := d.digest(t, id)
	if diff := treedigest.Diff(before, after); len(diff) > 0 {
		t.Fatalf("root changed across stop/kill -9/restart/start:\n%s", strings.Join(diff, "\n"))
	}
}

func TestRootSurvivesStopKill9AndRestart(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "agent-1"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != "running" {
		t.Fatalf("state %s", sb.State)
	}
	writeAgentWork(t, d, sb.ID)
	d.sh(ctx, sb.ID, "agent", "echo scratch > /tmp/scratch")
	sum1, before := d.digest(t, sb.ID)

	if _, err := d.c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	d.kill9()
	d.start()
	got, err := d.c.GetSandbox(ctx, "agent-1")
	if err != nil || got.State != "stopped" {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	if _, err := d.c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	assertSameTree(t, before, d, sb.ID)
	if sum2, _ := d.digest(t, sb.ID); sum2 != sum1 {
		t.Fatalf("digest %s != %s", sum2, sum1)
	}
	if s := d.sh(ctx, sb.ID, "agent", "cat /workspace/plan-link /data/state.json /home/agent/notes/a.txt /etc/agent.conf"); !strings.Contains(s, "step 1 done") || !strings.Contains(s, "agent_mode=long") {
		t.Fatalf("content after restart: %q", s)
	}
	if s := d.sh(ctx, sb.ID, "agent", "ls /tmp"); strings.Contains(s, "scratch") {
		t.Fatalf("/tmp survived a stop (it is documented as tmpfs): %q", s)
	}
	if readAll(t, d, sb.ID, "/workspace/plan.md") != "# plan: step 1 done\n" {
		t.Fatal("files API read wrong content")
	}
}

func TestRunningSandboxSurvivesDaemonKill9(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	bg, err := d.c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /workspace/counter; sleep 0.05; done"}, Background: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(bg.LogPath, "/var/log/stead/exec-") {
		t.Fatalf("background exec log path %q", bg.LogPath)
	}
	stopped, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	d.kill9()
	time.Sleep(300 * time.Millisecond)
	d.start()
	got, err := d.c.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != "running" {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	a := d.sh(ctx, sb.ID, "agent", "cat /workspace/counter")
	time.Sleep(300 * time.Millisecond)
	b := d.sh(ctx, sb.ID, "agent", "cat /workspace/counter; kill "+itoa(bg.Pid))
	if a == b {
		t.Fatalf("background process did not keep running across the restart: %q then %q", a, b)
	}
	if got, _ := d.c.GetSandbox(ctx, stopped.ID); got.State != "stopped" {
		t.Fatalf("stopped sandbox is %s after restart", got.State)
	}
	// Reconciliation leaves exactly one pool mount and one loop device.
	if n := mountsUnder(t, filepath.Join(d.dataDir, "pool")); n != 1 {
		t.Fatalf("%d mounts under the pool after restart, want 1", n)
	}
	if n := loopDevicesFor(t, filepath.Join(d.dataDir, "pool.img")); n != 1 {
		t.Fatalf("%d loop devices for the pool image, want 1", n)
	}
}

func TestSandboxDeadWhileDaemonDownIsMarkedStopped(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	d.kill9()
	// The sandbox's init dies while no daemon watches.
	killCgroup(t, cgroupFile(t, "pids", sb.ID, "cgroup.procs"))
	d.start()
	got, err := d.c.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != "stopped" || got.StopReason != "crashed" {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	for _, ctrl := range []string{"pids", "memory", "cpu", "freezer"} {
		if m, _ := filepath.Glob("/sys/fs/cgroup/" + ctrl + "/stead*/" + sb.ID); len(m) > 0 {
			t.Fatalf("orphaned %s cgroup for %s: %v", ctrl, sb.ID, m)
		}
	}
	if _, err := d.c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, sb.ID, "agent", "true")
}

func TestOCITemplateRootSurvivesRestart(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	layout, tarball := testimage.Build(t, t.TempDir())
	for _, src := range []struct{ id, source string }{{"busybox-layout", "oci-layout:" + layout}, {"busybox-tar", "docker-archive:" + tarball}} {
		if _, err := d.c.ImportTemplate(ctx, client.ImportTemplateRequest{ID: src.id, Source: src.source}); err != nil {
			t.Fatalf("import %s: %v", src.source, err)
		}
	}
	var ids []string
	for _, tmpl := range []string{"busybox-layout", "busybox-tar"} {
		sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: tmpl})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		if out := d.sh(ctx, sb.ID, "agent", "id -u; echo $HOME"); out != "1000\n/home/agent\n" {
			t.Fatalf("busybox sandbox: %q", out)
		}
		d.sh(ctx, sb.ID, "agent", "mkdir -p /workspace/x && echo hi > /workspace/x/f && ln -s f /workspace/x/l && ln /workspace/x/f /workspace/x/h")
	}
	var before [][]string
	for _, id := range ids {
		_, e := d.digest(t, id)
		before = append(before, e)
		if _, err := d.c.StopSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	d.kill9()
	d.start()
	for i, id := range ids {
		if _, err := d.c.StartSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		assertSameTree(t, before[i], d, id)
	}
}
