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

// snapshotBackend is an in-memory api.SnapshotBackend for the CLI tests;
// the sandbox routes come from cliBackend. Its sandbox "agent-1" (sb-1)
// exists; "busy" is in a state that forbids snapshots.
type snapshotBackend struct {
	*cliBackend
	mu    sync.Mutex
	snaps []client.Snapshot
	forks []string // fork sources, in call order
	// forkVolumes are the --volume mounts of the forks, as given.
	forkVolumes []string
	next        int
}

var _ api.SnapshotBackend = (*snapshotBackend)(nil)

func (b *snapshotBackend) CreateSnapshot(_ context.Context, _, sandbox string, req client.CreateSnapshotRequest) (client.Snapshot, error) {
	switch sandbox {
	case "missing":
		return client.Snapshot{}, fmt.Errorf("sandbox %q: %w", sandbox, errs.ErrNotFound)
	case "busy":
		return client.Snapshot{}, fmt.Errorf("snapshot %s: sandbox is being created: %w", sandbox, errs.ErrConflict)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	s := client.Snapshot{ID: fmt.Sprintf("snap-%d", b.next), Sandbox: "sb-1", SandboxName: sandbox, Label: req.Label,
		Description: req.Description, Kind: "user", CreatedAt: time.Now(), FrozenFor: "2ms"}
	b.snaps = append(b.snaps, s)
	return s, nil
}

func (b *snapshotBackend) ListSnapshots(_ context.Context, _, sandbox string) ([]client.Snapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []client.Snapshot
	for _, s := range b.snaps {
		if sandbox == "" || s.SandboxName == sandbox || s.Sandbox == sandbox {
			out = append(out, s)
		}
	}
	return out, nil
}

func (b *snapshotBackend) GetSnapshot(_ context.Context, _, id string) (client.Snapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.snaps {
		if s.ID == id {
			return s, nil
		}
	}
	return client.Snapshot{}, fmt.Errorf("snapshot %s: %w", id, errs.ErrNotFound)
}

func (b *snapshotBackend) DeleteSnapshot(_ context.Context, _, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, s := range b.snaps {
		if s.ID == id {
			b.snaps = append(b.snaps[:i], b.snaps[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("snapshot %s: %w", id, errs.ErrNotFound)
}

func (b *snapshotBackend) Fork(_ context.Context, _, source string, req client.ForkRequest) ([]client.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.forks = append(b.forks, source)
	for _, m := range req.Volumes {
		b.forkVolumes = append(b.forkVolumes, client.FormatVolumeMount(m))
	}
	state := "running"
	if req.NoStart {
		state = "stopped"
	}
	out := make([]client.Sandbox, max(req.Count, 1))
	for i := range out {
		out[i] = client.Sandbox{ID: fmt.Sprintf("sb-f%d", i), Name: fmt.Sprintf("%s-fork-%d", source, i), State: state}
	}
	return out, nil
}

func (b *snapshotBackend) Rollback(_ context.Context, _, sandbox string, req client.RollbackRequest) (client.RollbackResult, error) {
	if _, err := b.GetSnapshot(context.Background(), "", req.Snapshot); err != nil {
		return client.RollbackResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	safety := client.Snapshot{ID: fmt.Sprintf("snap-%d", b.next), Sandbox: "sb-1", SandboxName: sandbox, Kind: "safety", CreatedAt: time.Now()}
	b.snaps = append(b.snaps, safety)
	return client.RollbackResult{Sandbox: client.Sandbox{ID: "sb-1", Name: sandbox, State: "running"}, Safety: safety}, nil
}

func newSnapshotServer(t *testing.T) (*httptest.Server, *snapshotBackend) {
	t.Helper()
	b := &snapshotBackend{cliBackend: &cliBackend{}}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	return srv, b
}

func TestSnapshotForkRollbackCommands(t *testing.T) {
	srv, b := newSnapshotServer(t)
	must := func(a ...string) string {
		t.Helper()
		code, out, errOut := stead(t, srv, a...)
		if code != exitOK {
			t.Fatalf("stead %s: exit %d: %s", strings.Join(a, " "), code, errOut)
		}
		return out
	}

	if code, _, errOut := stead(t, srv, "snapshot", "ls"); code != exitOK || !strings.Contains(errOut, "no snapshots") {
		t.Fatalf("empty ls: exit %d: %q", code, errOut)
	}
	if out := must("snapshot", "ls", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty ls --json: %q", out)
	}
	out := must("snapshot", "create", "agent-1", "--label", "hour 4", "--description", "tests pass")
	if out != "snap-1: snapshot of agent-1 \"hour 4\" (frozen for 2ms)\n" {
		t.Fatalf("create: %q", out)
	}
	if out := must("snapshot", "create", "agent-1", "-q"); out != "snap-2\n" {
		t.Fatalf("create -q: %q", out)
	}
	out = must("snapshot", "info", "snap-1")
	if !strings.Contains(out, "tests pass") || !strings.Contains(out, "user") {
		t.Fatalf("info: %q", out)
	}
	out = must("snapshot", "ls", "agent-1")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "SNAPSHOT") ||
		!strings.HasPrefix(lines[1], "snap-1") || !strings.Contains(lines[1], "hour 4") {
		t.Fatalf("ls:\n%s", out)
	}
	out = must("snapshot", "ls", "--json")
	var list []client.Snapshot
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 || list[0].Description != "tests pass" {
		t.Fatalf("ls --json: %q", out)
	}

	// Fork from a snapshot and from a sandbox: the client picks the route.
	out = must("fork", "snap-1", "--count", "3", "--no-start")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[0], "ID") ||
		!strings.Contains(lines[3], "sb-f2") || !strings.Contains(lines[3], "stopped") {
		t.Fatalf("fork table:\n%s", out)
	}
	out = must("fork", "agent-1", "--json")
	var sbs []client.Sandbox
	if err := json.Unmarshal([]byte(out), &sbs); err != nil || len(sbs) != 1 || sbs[0].State != "running" {
		t.Fatalf("fork --json: %q", out)
	}
	must("fork", "agent-1", "--volume", "scratch:/data", "-v", "refs/docs:/docs:ro")
	b.mu.Lock()
	if strings.Join(b.forks, ",") != "snap-1,agent-1,agent-1" {
		t.Errorf("fork sources %v", b.forks)
	}
	if strings.Join(b.forkVolumes, " ") != "scratch:/data refs/docs:/docs:ro" {
		t.Errorf("fork --volume sent %v", b.forkVolumes)
	}
	b.mu.Unlock()
	if code, _, errOut := stead(t, srv, "fork", "agent-1", "--volume", "scratch"); code != exitUsage || !strings.Contains(errOut, "mount path") {
		t.Fatalf("fork --volume without a path: exit %d: %s", code, errOut)
	}

	out = must("rollback", "agent-1", "snap-1")
	if out != "agent-1 (sb-1): running\nsafety snapshot snap-3 (roll back to it to undo)\n" {
		t.Fatalf("rollback: %q", out)
	}
	out = must("rollback", "agent-1", "snap-3", "--json")
	var res client.RollbackResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Safety.Kind != "safety" || res.Sandbox.ID != "sb-1" {
		t.Fatalf("rollback --json: %q", out)
	}

	if out := must("snapshot", "rm", "snap-2", "snap-3"); out != "snap-2: deleted\nsnap-3: deleted\n" {
		t.Fatalf("rm: %q", out)
	}
}

func TestSnapshotCommandsExitCodes(t *testing.T) {
	srv, _ := newSnapshotServer(t)
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"snapshot", "create", "missing"}, exitNotFound},
		{[]string{"snapshot", "create", "busy"}, exitConflict},
		{[]string{"snapshot", "create"}, exitUsage},
		{[]string{"snapshot", "rm", "snap-404"}, exitNotFound},
		{[]string{"snapshot", "info", "snap-404"}, exitNotFound},
		{[]string{"snapshot", "ls", "a", "b"}, exitUsage},
		{[]string{"snapshot", "bogus"}, exitUsage},
		{[]string{"rollback", "agent-1", "snap-404"}, exitNotFound},
		{[]string{"rollback", "agent-1"}, exitUsage},
		{[]string{"fork"}, exitUsage},
		{[]string{"fork", "agent-1", "--count", "0"}, exitUsage},
		{[]string{"fork", "agent-1", "--count", "51"}, exitUsage},
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

func TestSnapshotTreeRendering(t *testing.T) {
	t0 := time.Now().Add(-time.Hour)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	// Given newest first on purpose: the tree orders by age at each level.
	list := []client.Snapshot{
		{ID: "snap-g", Parent: "snap-gone", Kind: "user", SandboxName: "orphan", CreatedAt: at(9)},
		{ID: "snap-e", Parent: "snap-c", Kind: "safety", SandboxName: "v2", CreatedAt: at(8)},
		{ID: "snap-f", Kind: "user", SandboxName: "other", CreatedAt: at(7)},
		{ID: "snap-d", Parent: "snap-a", Kind: "user", SandboxName: "v3", CreatedAt: at(6)},
		{ID: "snap-c", Parent: "snap-a", Kind: "fork", SandboxName: "v2", CreatedAt: at(4)},
		{ID: "snap-b", Parent: "snap-a", Label: "two\twords", Kind: "user", SandboxName: "v1", CreatedAt: at(3)},
		{ID: "snap-a", Label: "hour 4", Kind: "user", SandboxName: "agent-1", CreatedAt: at(1)},
	}
	var got []string
	for _, r := range snapshotTree(list) {
		got = append(got, r.prefix+r.snap.ID)
	}
	want := []string{
		"snap-a",
		"├─ snap-b",
		"├─ snap-c",
		"│  └─ snap-e",
		"└─ snap-d",
		"snap-f",
		"snap-g",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	var buf strings.Builder
	if err := writeSnapshotTree(&buf, list); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 8 {
		t.Fatalf("table:\n%s", buf.String())
	}
	// Columns line up although the tree drawing is multi-byte.
	kindAt := strings.Index(lines[0], "KIND") // the header is ASCII: bytes are runes
	for _, l := range lines[1:] {
		r := []rune(l)
		if len(r) <= kindAt || r[kindAt-1] != ' ' || r[kindAt] == ' ' {
			t.Fatalf("KIND column misaligned at %q:\n%s", l, buf.String())
		}
	}
	if !strings.Contains(lines[4], "│  └─ snap-e") || !strings.Contains(lines[4], "safety") {
		t.Errorf("line %q", lines[4])
	}
	if !strings.Contains(lines[7], "snap-g (from snap-gone)") {
		t.Errorf("orphan root does not name its parent: %q", lines[7])
	}
	if !strings.Contains(lines[2], "two words") {
		t.Errorf("label not kept on one line: %q", lines[2])
	}

	// A parent loop still lists every snapshot once.
	loop := []client.Snapshot{{ID: "snap-x", Parent: "snap-y"}, {ID: "snap-y", Parent: "snap-x"}, {ID: "snap-z", Parent: "snap-z"}}
	if rows := snapshotTree(loop); len(rows) != 3 {
		t.Fatalf("loop: %d rows", len(rows))
	}
}
