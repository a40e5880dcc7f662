package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// volumeBackend is an in-memory api.VolumeBackend for the CLI tests; the
// other sandbox routes come from cliBackend. Its volume "busy" is used by a
// sandbox, so deleting it is a conflict. CreateSandbox records its request.
type volumeBackend struct {
	*cliBackend
	mu      sync.Mutex
	vols    []client.Volume
	created []client.CreateSandboxRequest
	// attached are the mounts of AttachVolume, in order.
	attached []client.VolumeMount
	next     int
}

var _ api.VolumeBackend = (*volumeBackend)(nil)

func (b *volumeBackend) find(id string) (int, error) {
	for i, v := range b.vols {
		if v.ID == id || v.Name == id {
			return i, nil
		}
	}
	return -1, fmt.Errorf("volume %s: %w", id, errs.ErrNotFound)
}

func (b *volumeBackend) CreateVolume(_ context.Context, tenant string, req client.CreateVolumeRequest) (client.Volume, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.find(req.Name); err == nil {
		return client.Volume{}, fmt.Errorf("volume %s: name taken: %w", req.Name, errs.ErrConflict)
	}
	b.next++
	size := req.SizeBytes
	if size == 0 {
		size = 10 << 30
	}
	v := client.Volume{ID: fmt.Sprintf("vol-%d", b.next), Name: req.Name, Tenant: tenant, SizeBytes: size,
		State: "available", CreatedAt: time.Now()}
	if req.Name == "busy" {
		v.AttachedTo = []string{"sb-1", "sb-2", "sb-3", "sb-4"}
		v.UsedBytes = size / 4
	}
	b.vols = append(b.vols, v)
	return v, nil
}

func (b *volumeBackend) ListVolumes(_ context.Context, _ string, all bool) ([]client.Volume, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []client.Volume
	for _, v := range b.vols {
		if all || v.State != "deleted" {
			out = append(out, v)
		}
	}
	return out, nil
}

func (b *volumeBackend) GetVolume(_ context.Context, _, id string) (client.Volume, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.find(id)
	if err != nil {
		return client.Volume{}, err
	}
	return b.vols[i], nil
}

func (b *volumeBackend) DeleteVolume(_ context.Context, _, id string, purge bool) (client.Volume, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.find(id)
	if err != nil {
		return client.Volume{}, err
	}
	v := b.vols[i]
	if len(v.AttachedTo) > 0 {
		return client.Volume{}, fmt.Errorf("delete volume %s: used by %s: %w", id, strings.Join(v.AttachedTo, ", "), errs.ErrConflict)
	}
	if purge {
		b.vols = append(b.vols[:i], b.vols[i+1:]...)
		v.State = "deleted"
		return v, nil
	}
	now := time.Now()
	purgeAt := now.Add(30 * 24 * time.Hour)
	v.State, v.DeletedAt, v.PurgeAt = "deleted", &now, &purgeAt
	b.vols[i] = v
	return v, nil
}

func (b *volumeBackend) UndeleteVolume(_ context.Context, _, id string) (client.Volume, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.find(id)
	if err != nil {
		return client.Volume{}, err
	}
	v := b.vols[i]
	if v.State != "deleted" {
		return client.Volume{}, fmt.Errorf("undelete volume %s: not deleted: %w", id, errs.ErrConflict)
	}
	v.State, v.DeletedAt, v.PurgeAt = "available", nil, nil
	b.vols[i] = v
	return v, nil
}

func (b *volumeBackend) CreateSandbox(_ context.Context, tenant string, req client.CreateSandboxRequest) (client.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.created = append(b.created, req)
	return client.Sandbox{ID: "sb-9", Name: req.Name, Tenant: tenant, State: "running", Volumes: req.Volumes}, nil
}

// GetSandbox describes "with-vols" with two volumes, the rest as cliBackend.
func (b *volumeBackend) GetSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	sb, err := b.cliBackend.GetSandbox(ctx, tenant, id)
	if id == "with-vols" {
		sb.Volumes = []client.VolumeMount{
			{Volume: "shared", SubPath: "agents/a1", Path: "/data"},
			{Volume: "refs", Path: "/refs", ReadOnly: true},
		}
	}
	return sb, err
}

// AttachVolume records the mount; "running" is refused as the daemon does.
func (b *volumeBackend) AttachVolume(_ context.Context, tenant, id string, m client.VolumeMount) (client.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if id == "running" {
		return client.Sandbox{}, fmt.Errorf("attach a volume to sandbox running: it is running: stop it first: %w", errs.ErrConflict)
	}
	b.attached = append(b.attached, m)
	return client.Sandbox{ID: "sb-1", Name: id, Tenant: tenant, State: "stopped", Volumes: b.attached}, nil
}

// DetachVolume removes the recorded mount at path.
func (b *volumeBackend) DetachVolume(_ context.Context, tenant, id, path string) (client.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, m := range b.attached {
		if m.Path == path {
			b.attached = append(b.attached[:i], b.attached[i+1:]...)
			return client.Sandbox{ID: "sb-1", Name: id, Tenant: tenant, State: "stopped", Volumes: b.attached}, nil
		}
	}
	return client.Sandbox{}, fmt.Errorf("sandbox %s has no volume mounted at %s: %w", id, path, errs.ErrNotFound)
}

func newVolumeServer(t *testing.T) (*httptest.Server, *volumeBackend) {
	t.Helper()
	b := &volumeBackend{cliBackend: &cliBackend{}}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	return srv, b
}

func TestVolumeCommands(t *testing.T) {
	srv, _ := newVolumeServer(t)
	must := func(a ...string) string {
		t.Helper()
		code, out, errOut := stead(t, srv, a...)
		if code != exitOK {
			t.Fatalf("stead %s: exit %d: %s", strings.Join(a, " "), code, errOut)
		}
		return out
	}

	if code, _, errOut := stead(t, srv, "volume", "ls"); code != exitOK || !strings.Contains(errOut, "no volumes") {
		t.Fatalf("empty ls: exit %d: %q", code, errOut)
	}
	if out := must("volume", "ls", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty ls --json: %q", out)
	}
	if out := must("volume", "create", "shared"); out != "shared (vol-1): available, size 10 GiB\n" {
		t.Fatalf("create: %q", out)
	}
	if out := must("volume", "create", "cache", "--size", "512MiB", "-q"); out != "vol-2\n" {
		t.Fatalf("create -q: %q", out)
	}
	out := must("volume", "create", "busy", "--size", "1GB", "--json")
	var v client.Volume
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.SizeBytes != 1_000_000_000 || v.Name != "busy" {
		t.Fatalf("create --json: %q", out)
	}

	out = must("vol", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "NAME ID SIZE USED STATE ATTACHED" {
		t.Fatalf("ls:\n%s", out)
	}
	if f := strings.Fields(lines[2]); strings.Join(f, " ") != "cache vol-2 512 MiB 0 B available -" {
		t.Fatalf("ls cache row %q", lines[2])
	}
	if !strings.Contains(lines[3], "sb-1,sb-2,sb-3,+1") || !strings.Contains(lines[3], "954 MiB") {
		t.Fatalf("ls busy row %q", lines[3])
	}

	out = must("volume", "inspect", "busy")
	for _, want := range []string{"vol-3", "Used:", "(25%)", "sb-1,sb-2,sb-3,sb-4", "available"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect does not show %q:\n%s", want, out)
		}
	}
	out = must("volume", "inspect", "vol-1", "--json")
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Name != "shared" {
		t.Fatalf("inspect --json: %q", out)
	}

	out = must("volume", "rm", "shared")
	if !strings.HasPrefix(out, "shared: deleted (stead volume undelete shared brings it back until ") {
		t.Fatalf("rm: %q", out)
	}
	if out := must("volume", "ls"); strings.Contains(out, "shared") {
		t.Fatalf("deleted volume listed without --all:\n%s", out)
	}
	out = must("volume", "ls", "--all")
	if !strings.Contains(out, "PURGE") || !strings.Contains(out, "deleted") {
		t.Fatalf("ls --all:\n%s", out)
	}
	out = must("volume", "inspect", "shared")
	if !strings.Contains(out, "Deleted:") || !strings.Contains(out, "Purged:") {
		t.Fatalf("inspect of a deleted volume:\n%s", out)
	}
	if out := must("volume", "undelete", "shared"); out != "shared (vol-1): available\n" {
		t.Fatalf("undelete: %q", out)
	}
	if out := must("volume", "rm", "cache", "--purge"); out != "cache: purged\n" {
		t.Fatalf("rm --purge: %q", out)
	}
	if out := must("volume", "purge", "shared"); out != "shared: purged\n" {
		t.Fatalf("purge: %q", out)
	}

	code, _, errOut := stead(t, srv, "volume", "rm", "busy")
	if code != exitConflict || !strings.Contains(errOut, "used by sb-1") {
		t.Fatalf("rm of a volume in use: exit %d: %q", code, errOut)
	}
}

func TestCreateWithVolumes(t *testing.T) {
	srv, b := newVolumeServer(t)
	code, out, errOut := stead(t, srv, "create", "agent-1", "--no-start",
		"--volume", "shared/agents/a1:/data", "-v", "refs:/refs:ro", "--", "sleep", "1")
	if code != exitOK || out != "sb-9\n" {
		t.Fatalf("create: exit %d: %q %q", code, out, errOut)
	}
	b.mu.Lock()
	got := b.created
	b.mu.Unlock()
	want := []client.VolumeMount{
		{Volume: "shared", SubPath: "agents/a1", Path: "/data"},
		{Volume: "refs", Path: "/refs", ReadOnly: true},
	}
	if len(got) != 1 || fmt.Sprint(got[0].Volumes) != fmt.Sprint(want) || !got[0].NoStart || got[0].Service == nil {
		t.Fatalf("create request %+v", got)
	}

	// Without --volume the request carries none.
	if code, _, errOut := stead(t, srv, "create", "plain"); code != exitOK {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	b.mu.Lock()
	if len(b.created) != 2 || b.created[1].Volumes != nil {
		t.Errorf("create without --volume sent %+v", b.created[1].Volumes)
	}
	b.mu.Unlock()

	// A bad mount is a usage error and nothing is created.
	for _, spec := range []string{"shared", "shared:data", "shared/../x:/data", ":/data", "shared:/data:rx"} {
		code, _, errOut := stead(t, srv, "create", "bad", "--volume", spec)
		if code != exitUsage || !strings.Contains(errOut, "--volume") || !strings.Contains(errOut, volumeMountSyntax) {
			t.Errorf("--volume %q: exit %d: %q", spec, code, errOut)
		}
	}
	b.mu.Lock()
	if len(b.created) != 2 {
		t.Errorf("sandboxes created with bad --volume: %+v", b.created[2:])
	}
	b.mu.Unlock()

	// stead info shows the mounts.
	code, out, errOut = stead(t, srv, "info", "with-vols")
	if code != exitOK {
		t.Fatalf("info: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "shared/agents/a1 on /data") || !strings.Contains(out, "refs on /refs (read-only)") {
		t.Fatalf("info does not show the volumes:\n%s", out)
	}
	if code, out, _ = stead(t, srv, "info", "agent"); code != exitOK || strings.Contains(out, "Volumes:") {
		t.Fatalf("info of a sandbox without volumes:\n%s", out)
	}
}

func TestVolumeCommandsExitCodes(t *testing.T) {
	srv, _ := newVolumeServer(t)
	if code, _, errOut := stead(t, srv, "volume", "create", "taken"); code != exitOK {
		t.Fatalf("create: %s", errOut)
	}
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"volume", "create", "taken"}, exitConflict},
		{[]string{"volume", "create"}, exitUsage},
		{[]string{"volume", "create", "a", "b"}, exitUsage},
		{[]string{"volume", "create", "x", "--size", "lots"}, exitUsage},
		{[]string{"volume", "create", "x", "--size", "0"}, exitUsage},
		{[]string{"volume", "create", "x", "--size", "-1GiB"}, exitUsage},
		{[]string{"volume", "create", "x", "--size", "100EiB"}, exitUsage},
		{[]string{"volume", "inspect", "missing"}, exitNotFound},
		{[]string{"volume", "inspect"}, exitUsage},
		{[]string{"volume", "rm", "missing"}, exitNotFound},
		{[]string{"volume", "rm"}, exitUsage},
		{[]string{"volume", "purge", "missing"}, exitNotFound},
		{[]string{"volume", "undelete", "missing"}, exitNotFound},
		{[]string{"volume", "undelete", "taken"}, exitConflict},
		{[]string{"volume", "ls", "x"}, exitUsage},
		{[]string{"volume", "bogus"}, exitUsage},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := stead(t, srv, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, stderr)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"512MiB": 512 << 20, "10GiB": 10 << 30, "10gib": 10 << 30, "1.5GiB": 3 << 29,
		"10GB": 10_000_000_000, "4096": 4096, "1 TiB": 1 << 40,
	} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "0GiB", "x", "-1", "10 parsecs", "20EiB"} {
		if n, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, n)
		}
	}
}

// TestVolumeAttachDetachCommands: attach parses NAME[/SUB]:/path[:ro] and
// prints the sandbox's mounts; a running sandbox is a conflict (exit 4); a
// bad mount is a usage error (exit 2) that never reaches the daemon;
// detach of a path with no volume is not found (exit 3).
func TestVolumeAttachDetachCommands(t *testing.T) {
	srv, b := newVolumeServer(t)
	code, out, errOut := stead(t, srv, "volume", "attach", "agent-1", "shared/agents/a1:/data:ro")
	if code != exitOK || out != "agent-1: shared/agents/a1 on /data (read-only)\n" {
		t.Fatalf("attach: exit %d: %q %s", code, out, errOut)
	}
	if code, out, _ = stead(t, srv, "volume", "attach", "agent-1", "refs:/refs", "--json"); code != exitOK {
		t.Fatalf("attach --json: exit %d", code)
	}
	var sb client.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); err != nil || len(sb.Volumes) != 2 || sb.Volumes[1] != (client.VolumeMount{Volume: "refs", Path: "/refs"}) {
		t.Fatalf("attach --json: %q", out)
	}
	if code, _, errOut = stead(t, srv, "volume", "attach", "running", "shared:/x"); code != exitConflict || !strings.Contains(errOut, "stop it first") {
		t.Fatalf("attach to a running sandbox: exit %d: %s", code, errOut)
	}
	for _, bad := range []string{"shared", "shared:relative", "shared/../x:/data", "shared:/data:rx"} {
		if code, _, errOut = stead(t, srv, "volume", "attach", "agent-1", bad); code != exitUsage {
			t.Fatalf("attach %q: exit %d: %s", bad, code, errOut)
		}
	}
	if code, out, errOut = stead(t, srv, "volume", "detach", "agent-1", "/data"); code != exitOK || out != "agent-1: refs on /refs\n" {
		t.Fatalf("detach: exit %d: %q %s", code, out, errOut)
	}
	if code, _, errOut = stead(t, srv, "volume", "detach", "agent-1", "/data"); code != exitNotFound || !strings.Contains(errOut, "/data") {
		t.Fatalf("detach again: exit %d: %s", code, errOut)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.attached) != 1 {
		t.Fatalf("mounts left: %+v", b.attached)
	}
}
