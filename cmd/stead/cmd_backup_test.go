package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/sandbox"
)

// backupBackend is an in-memory api.BackupBackend for the CLI tests; the
// other routes come from cliBackend. Every long method records its request
// under its name and starts an operation that, watched, reports one
// running state with progress and then ends: failed with "disk on fire"
// when its target is "doomed", else succeeded with a kind-specific result.
// Sandbox "missing" does not exist.
type backupBackend struct {
	*cliBackend
	mu     sync.Mutex
	reqs   map[string]any
	ops    map[string]client.Operation // final states
	next   int
	policy client.BackupPolicy
	broken bool // checks find errors
}

var (
	_ api.BackupBackend = (*backupBackend)(nil)
	// The daemon's service serves the backup routes: NewHandler registers
	// them by this interface, so a drifted signature would drop them.
	_ api.BackupBackend = (*sandbox.Service)(nil)
)

func newBackupServer(t *testing.T) (*httptest.Server, *backupBackend) {
	t.Helper()
	b := &backupBackend{cliBackend: &cliBackend{}, reqs: map[string]any{}, ops: map[string]client.Operation{},
		policy: client.BackupPolicy{Interval: "1h", Retention: client.BackupRetention{KeepLast: 3}, ArchiveAfter: "168h"}}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	return srv, b
}

// req returns the last request recorded under name.
func (b *backupBackend) req(name string) any {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reqs[name]
}

var testOpStart = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// start records req and starts an operation of kind on target whose final
// result is result.
func (b *backupBackend) start(name, kind, target string, req, result any) (client.Operation, error) {
	if target == "missing" {
		return client.Operation{}, fmt.Errorf("sandbox %q: %w", target, errs.ErrNotFound)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reqs[name] = req
	b.next++
	op := client.Operation{ID: fmt.Sprintf("op-%d", b.next), Kind: kind, Target: target, State: client.OperationRunning,
		StartedAt: testOpStart, Progress: &client.Progress{Phase: kind, BytesDone: 50 << 20, BytesTotal: 100 << 20,
			FilesDone: 5, FilesTotal: 10, Elapsed: 1}}
	final := op
	end := testOpStart.Add(2 * time.Second)
	final.EndedAt = &end
	final.Progress = &client.Progress{Phase: kind, BytesDone: 100 << 20, BytesTotal: 100 << 20, FilesDone: 10, FilesTotal: 10, Elapsed: 2}
	if target == "doomed" {
		final.State, final.Error = client.OperationFailed, "disk on fire"
	} else {
		final.State = client.OperationSucceeded
		if result != nil {
			raw, err := json.Marshal(result)
			if err != nil {
				return client.Operation{}, err
			}
			final.Result = raw
		}
	}
	b.ops[op.ID] = final
	return op, nil
}

func (b *backupBackend) RepoInfo(_ context.Context, admin bool) (client.RepoInfo, error) {
	return client.RepoInfo{Configured: true, Initialized: true, Location: "s3://127.0.0.1:9000/stead", ID: "r-1",
		KeyFile: "/var/lib/stead/repo.key"}, nil
}

func (b *backupBackend) InitRepo(context.Context) (client.RepoInfo, error) {
	return client.RepoInfo{}, fmt.Errorf("init repository: already initialised: %w", errs.ErrConflict)
}

func (b *backupBackend) GetOperation(_ context.Context, _ api.Principal, id string) (client.Operation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	final, ok := b.ops[id]
	if !ok {
		return client.Operation{}, fmt.Errorf("operation %s: %w", id, errs.ErrNotFound)
	}
	return final, nil
}

func (b *backupBackend) WatchOperation(ctx context.Context, p api.Principal, id string) (<-chan client.Operation, error) {
	final, err := b.GetOperation(ctx, p, id)
	if err != nil {
		return nil, err
	}
	running := final
	running.State, running.EndedAt, running.Result, running.Error = client.OperationRunning, nil, nil, ""
	running.Progress = &client.Progress{Phase: final.Kind, BytesDone: 50 << 20, BytesTotal: 100 << 20, Elapsed: 1}
	ch := make(chan client.Operation, 2)
	ch <- running
	ch <- final
	close(ch)
	return ch, nil
}

func (b *backupBackend) PushSandbox(_ context.Context, _, id string, req client.PushRequest) (client.Operation, error) {
	res := client.PushResult{
		RemoteSnapshot: client.RemoteSnapshot{ID: "3f9a1c2b5d6e7f80", SandboxName: id, Source: "snap-7"},
		FilesRead:      3, FilesReused: 2, BytesRead: 3 << 20, BytesUploaded: 1 << 20, Seconds: 1.5}
	if req.IncludeVolumes {
		res.Volumes = []client.RemoteSnapshot{{ID: "0badcafe0badcafe", Volume: "shared"}}
	}
	return b.start("push", "push", id, req, res)
}

func (b *backupBackend) ListRemoteSnapshots(_ context.Context, _, sandbox string) ([]client.RemoteSnapshot, error) {
	if sandbox == "none" {
		return nil, nil
	}
	return []client.RemoteSnapshot{
		{ID: "3f9a1c2b5d6e7f80", Sandbox: "sb-1", SandboxName: "agent-1", Source: "snap-7", Time: testOpStart, Files: 12, Bytes: 3 << 20, DataBytes: 1 << 20, AddedBytes: 1536},
		{ID: "77c1aa00", Sandbox: "sb-2", Time: testOpStart.Add(time.Hour), Files: 1},
	}, nil
}

func (b *backupBackend) RestoreRemote(_ context.Context, _ string, req client.RestoreRequest) (client.Operation, error) {
	return b.start("restore", "restore", req.Snapshot+req.Sandbox, req, client.RestoreResult{
		Sandbox: &client.Sandbox{ID: "sb-9", Name: "copy", State: "running"}, Files: 12, BytesWritten: 3 << 20, BytesDownloaded: 1 << 20, Seconds: 0.8})
}

func (b *backupBackend) PullRemote(_ context.Context, _ string, req client.PullRequest) (client.Operation, error) {
	return b.start("pull", "pull", req.Snapshot, req, client.RestoreResult{Snapshot: &client.Snapshot{ID: "snap-20"}, Files: 12})
}

func (b *backupBackend) CheckRepo(_ context.Context, _ string, _ bool, req client.CheckRequest) (client.Operation, error) {
	b.mu.Lock()
	broken := b.broken
	b.mu.Unlock()
	res := client.CheckResult{OK: !broken, Scopes: []client.ScopeCheck{{Scope: "t1", Snapshots: 4, Packs: 9, Blobs: 120, PacksRead: 2}}}
	if broken {
		res.Scopes[0].Errors = []string{"pack 9a0b: missing", "pack 9a0b: blob 77ee: authentication failed"}
		res.Scopes[0].DamagedPacks = []client.DamagedPack{{ID: testDamagedPack, Found: testOpStart, Reason: "1 of 12 blobs unreadable", BlobsLost: 1}}
		res.Scopes[0].DamagedSnapshots = []client.DamagedSnapshot{{ID: "3f9a1c2b5d6e7f80", Time: testOpStart, Source: "sandbox/sb-1",
			Sandbox: "sb-1", SandboxName: "agent-1", Packs: []string{testDamagedPack}, Problem: "tree 1d2e: file \"notes.md\": chunk 77ee is unreadable in damaged pack 9a0b"}}
	}
	op, err := b.start("check", "check", "", req, res)
	if err == nil && broken {
		// As the daemon does: the operation fails, with its result.
		b.mu.Lock()
		final := b.ops[op.ID]
		final.State, final.Error = client.OperationFailed, "check found 2 error(s): 1 damaged pack(s), 1 damaged snapshot(s); run `stead repo repair`"
		b.ops[op.ID] = final
		b.mu.Unlock()
	}
	return op, err
}

const testDamagedPack = "9a0b5c6d7e8f90112233445566778899aabbccddeeff00112233445566778899"

func (b *backupBackend) RepairRepo(_ context.Context, _ string, _ bool, req client.RepairRequest) (client.Operation, error) {
	b.mu.Lock()
	broken := b.broken
	b.mu.Unlock()
	sr := client.ScopeRepair{Scope: "t1", PacksRemoved: []string{testDamagedPack}, PacksIntact: []string{}, BlobsSalvaged: 11, BlobsUploaded: 1,
		BytesUploaded: 1 << 20, Damaged: []client.DamagedSnapshot{},
		Repaired: []client.DamagedSnapshot{{ID: "3f9a1c2b5d6e7f80", Time: testOpStart, Source: "sandbox/sb-1", Sandbox: "sb-1", SandboxName: "agent-1",
			Problem: "chunk 77ee is unreadable", RepairedFrom: "local snapshot snap-7"}}}
	if broken {
		sr.Damaged = []client.DamagedSnapshot{{ID: "77c1aa0011223344", Time: testOpStart, Source: "sandbox/sb-2", Sandbox: "sb-2",
			Problem: "chunk 5566 is missing"}}
	}
	op, err := b.start("repair", "repair", "", req, client.RepairResult{OK: !broken, Scopes: []client.ScopeRepair{sr}})
	if err == nil && broken {
		b.mu.Lock()
		final := b.ops[op.ID]
		final.State, final.Error = client.OperationFailed, "1 snapshot(s) are still damaged"
		b.ops[op.ID] = final
		b.mu.Unlock()
	}
	return op, err
}

func (b *backupBackend) PruneRepo(_ context.Context, _ string, req client.PruneRequest) (client.Operation, error) {
	return b.start("prune", "prune", req.Sandbox, req, client.RepoPruneResult{Forgotten: []string{"3f9a1c2b5d6e7f80"},
		PacksDeleted: 2, PacksRepacked: 1, BytesFreed: 5 << 20, DryRun: req.DryRun})
}

func (b *backupBackend) GetBackupPolicy(_ context.Context, _, id string) (client.BackupPolicy, error) {
	if id == "missing" {
		return client.BackupPolicy{}, fmt.Errorf("sandbox %q: %w", id, errs.ErrNotFound)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.policy, nil
}

func (b *backupBackend) SetBackupPolicy(_ context.Context, _, _ string, p client.BackupPolicy) (client.BackupPolicy, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reqs["policy"] = p
	b.policy = p
	return p, nil
}

func (b *backupBackend) DrillSandbox(_ context.Context, _, id string, req client.DrillRequest) (client.Operation, error) {
	ok := id != "flaky"
	d := client.Drill{ID: "drill-1", Sandbox: id, RemoteSnapshot: "3f9a1c2b5d6e7f80", StartedAt: testOpStart, OK: ok,
		EmptyDataDir: req.EmptyDataDir, RecoverySeconds: 4.2, RestoreSeconds: 3.1, VerifySeconds: 0.4, Files: 12, Bytes: 3 << 20, DigestOK: ok}
	if len(req.Verify) > 0 {
		code := 0
		d.VerifyExit, d.VerifyOutput = &code, "all good\n"
	}
	return b.start("drill", "drill", id, req, d)
}

func (b *backupBackend) ListDrills(_ context.Context, _, sandbox string) ([]client.Drill, error) {
	b.mu.Lock()
	b.reqs["drills"] = sandbox
	b.mu.Unlock()
	code := 1
	return []client.Drill{
		{ID: "drill-2", Sandbox: "sb-1", RemoteSnapshot: "3f9a1c2b5d6e7f80", StartedAt: testOpStart, OK: false, RecoverySeconds: 61,
			VerifyExit: &code, DigestOK: true, EmptyDataDir: true},
		{ID: "drill-1", Sandbox: "sb-1", RemoteSnapshot: "3f9a1c2b5d6e7f80", StartedAt: testOpStart, OK: true, RecoverySeconds: 4.2, DigestOK: true},
	}, nil
}

func (b *backupBackend) ArchiveSandbox(_ context.Context, _, id string, wait bool) (client.Operation, error) {
	return b.start("archive", "archive", id, wait, map[string]any{"remote_snapshot": client.RemoteSnapshot{ID: "aa11bb22cc33"},
		"freed_bytes": 3 << 20, "verified_bytes": 3 << 20})
}

func (b *backupBackend) HydrateSandbox(_ context.Context, _, id string, wait bool) (client.Operation, error) {
	return b.start("hydrate", "hydrate", id, wait, client.Sandbox{ID: id, State: "stopped"})
}

func (b *backupBackend) PushVolume(_ context.Context, _, id string, req client.PushVolumeRequest) (client.Operation, error) {
	return b.start("volume-push", "volume-push", id, req.Wait, client.PushResult{RemoteSnapshot: client.RemoteSnapshot{ID: "dd44ee55ff66", Volume: id}})
}

func (b *backupBackend) ListVolumePushes(_ context.Context, _, volume string) ([]client.RemoteSnapshot, error) {
	return []client.RemoteSnapshot{{ID: "dd44ee55ff66", Volume: "vol-1", Source: "volume/vol-1"}}, nil
}

func (b *backupBackend) RestoreVolume(_ context.Context, _ string, req client.RestoreVolumeRequest) (client.Operation, error) {
	return b.start("volume-restore", "volume-restore", req.Snapshot, req.Wait,
		client.VolumeRestoreResult{Volume: client.Volume{ID: "vol-2", Name: req.Name}, Files: 3})
}

func (b *backupBackend) CreateVolumeSnapshot(_ context.Context, _, id string, req client.CreateSnapshotRequest) (client.Snapshot, error) {
	return client.Snapshot{ID: "snap-v1", Sandbox: id, Kind: "volume", Label: req.Label}, nil
}

func (b *backupBackend) ListVolumeSnapshots(_ context.Context, _, id string) ([]client.Snapshot, error) {
	return []client.Snapshot{{ID: "snap-v1", Sandbox: id, Kind: "volume"}}, nil
}

func (b *backupBackend) FileHistory(_ context.Context, _, id, path string) ([]client.FileVersion, error) {
	b.mu.Lock()
	b.reqs["history"] = id + ":" + path
	b.mu.Unlock()
	return []client.FileVersion{
		{Source: "remote", Snapshot: "3f9a1c2b5d6e7f80", Time: testOpStart.Add(time.Hour), Type: "file", Size: 2048, Mode: 0o644,
			Digest: "sha256:0123456789abcdef0123", Changed: true},
		{Source: "local", Snapshot: "snap-7", Time: testOpStart, Type: "file", Size: 1024, Mode: 0o600, Digest: "sha256:fedcba9876543210"},
	}, nil
}

func (b *backupBackend) RestorePath(_ context.Context, _, id string, req client.RestorePathRequest) (client.Operation, error) {
	to := req.To
	if to == "" {
		to = req.Path
	}
	return b.start("restore-path", "restore-path", id, req, map[string]any{"path": to, "from": req.Snapshot, "replaced": req.To == ""})
}

// mustStead runs the CLI and fails the test unless it exits 0.
func mustStead(t *testing.T, srv *httptest.Server, a ...string) (stdout, stderr string) {
	t.Helper()
	code, out, errOut := stead(t, srv, a...)
	if code != exitOK {
		t.Fatalf("stead %s: exit %d: %s", strings.Join(a, " "), code, errOut)
	}
	return out, errOut
}

func TestPushFollowsTheOperationAndPrintsTheRemoteSnapshot(t *testing.T) {
	srv, b := newBackupServer(t)
	out, errOut := mustStead(t, srv, "push", "agent-1", "--snapshot", "snap-7")
	if got := b.req("push"); got != (client.PushRequest{Snapshot: "snap-7"}) {
		t.Errorf("push request %+v", got)
	}
	want := "remote snapshot 3f9a1c2b saved (agent-1, from snap-7)\nfiles: 3 read, 2 unchanged; 3.0 MiB read, 1.0 MiB uploaded in 1.5s\n"
	if out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	// stderr is not a terminal here: no redraws, one final progress line.
	if strings.Contains(errOut, "\r") || !strings.Contains(errOut, "push agent-1: succeeded 100%") ||
		!strings.Contains(errOut, "files 10/10") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("stderr %q", errOut)
	}

	out, _ = mustStead(t, srv, "push", "agent-1", "--json")
	var op client.Operation
	if err := json.Unmarshal([]byte(out), &op); err != nil || op.State != client.OperationSucceeded {
		t.Fatalf("push --json: %q", out)
	}
	var res client.PushResult
	if err := op.DecodeResult(&res); err != nil || res.RemoteSnapshot.ID != "3f9a1c2b5d6e7f80" {
		t.Fatalf("push --json result: %+v %v", res, err)
	}
}

func TestLongVerbsWithNoWaitPrintTheOperationID(t *testing.T) {
	srv, _ := newBackupServer(t)
	for _, a := range [][]string{
		{"push", "agent-1"}, {"pull", "3f9a"}, {"restore", "3f9a"}, {"restore", "agent-1", "--path", "/a", "--from", "snap-1"},
		{"drill", "agent-1"}, {"archive", "agent-1"}, {"repo", "check"}, {"repo", "repair"}, {"repo", "prune"},
	} {
		out, errOut := mustStead(t, srv, append(a, "--no-wait")...)
		if !strings.HasPrefix(out, "op-") || strings.Count(out, "\n") != 1 || !strings.Contains(errOut, "stead op "+strings.TrimSpace(out)+" --wait") {
			t.Errorf("%v --no-wait: %q %q", a, out, errOut)
		}
		out, _ = mustStead(t, srv, append(a, "--no-wait", "--json")...)
		var op client.Operation
		if err := json.Unmarshal([]byte(out), &op); err != nil || op.State != client.OperationRunning || op.ID == "" {
			t.Errorf("%v --no-wait --json: %q", a, out)
		}
	}
}

func TestLongVerbFlagsMapToRequests(t *testing.T) {
	cases := []struct {
		args []string
		name string
		want any
	}{
		{[]string{"push", "agent-1"}, "push", client.PushRequest{}},
		{[]string{"push", "agent-1", "--include-volumes"}, "push", client.PushRequest{IncludeVolumes: true}},
		{[]string{"pull", "3f9a"}, "pull", client.PullRequest{Snapshot: "3f9a"}},
		{[]string{"restore", "3f9a", "--name", "copy", "--no-start"}, "restore", client.RestoreRequest{Snapshot: "3f9a", Name: "copy", NoStart: true}},
		{[]string{"restore", "--latest", "sb-0123", "--name", "copy"}, "restore", client.RestoreRequest{Sandbox: "sb-0123", Name: "copy"}},
		{[]string{"restore", "3f9a", "--volume", "shared-copy/a1:/data", "-v", "refs:/refs:ro", "--restore-volumes"}, "restore",
			client.RestoreRequest{Snapshot: "3f9a", RestoreVolumes: true, Volumes: []client.VolumeMount{
				{Volume: "shared-copy", SubPath: "a1", Path: "/data"}, {Volume: "refs", Path: "/refs", ReadOnly: true}}}},
		{[]string{"restore", "agent-1", "--path", "/workspace/a", "--from", "snap-1"}, "restore-path",
			client.RestorePathRequest{Path: "/workspace/a", Snapshot: "snap-1"}},
		{[]string{"restore", "agent-1", "--path", "/workspace", "--from", "3f9a", "--to", "/old"}, "restore-path",
			client.RestorePathRequest{Path: "/workspace", Snapshot: "3f9a", To: "/old"}},
		{[]string{"repo", "check"}, "check", client.CheckRequest{}},
		{[]string{"repo", "check", "--read-data"}, "check", client.CheckRequest{ReadData: true}},
		{[]string{"repo", "check", "--read-data-subset", "1/5"}, "check", client.CheckRequest{ReadData: true, ReadDataSubset: "1/5"}},
		{[]string{"repo", "prune"}, "prune", client.PruneRequest{}},
		{[]string{"repo", "prune", "--dry-run", "--sandbox", "agent-1", "--keep-last", "3", "--keep-hourly", "24", "--keep-daily", "7",
			"--keep-weekly", "4", "--keep-monthly", "12", "--keep-within", "72h"}, "prune",
			client.PruneRequest{Sandbox: "agent-1", DryRun: true, Retention: &client.BackupRetention{KeepLast: 3, Hourly: 24, Daily: 7,
				Weekly: 4, Monthly: 12, Within: "72h"}}},
		{[]string{"repo", "prune", "--keep-last", "0"}, "prune", client.PruneRequest{Retention: &client.BackupRetention{}}},
		{[]string{"drill", "agent-1"}, "drill", client.DrillRequest{}},
		{[]string{"drill", "agent-1", "--empty-data-dir", "--verify", `sh -c 'test -s "/workspace/my notes.md"'`}, "drill",
			client.DrillRequest{EmptyDataDir: true, Verify: []string{"sh", "-c", `test -s "/workspace/my notes.md"`}}},
		{[]string{"archive", "agent-1"}, "archive", false},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			srv, b := newBackupServer(t)
			mustStead(t, srv, tc.args...)
			got := b.req(tc.name)
			if pr, ok := got.(client.PruneRequest); ok {
				want := tc.want.(client.PruneRequest)
				if pr.Sandbox != want.Sandbox || pr.DryRun != want.DryRun || (pr.Retention == nil) != (want.Retention == nil) ||
					(pr.Retention != nil && *pr.Retention != *want.Retention) {
					t.Fatalf("prune request %+v (retention %+v), want %+v", pr, pr.Retention, want)
				}
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%s request %#v, want %#v", tc.name, got, tc.want)
			}
		})
	}
}

func TestLongVerbResultsAreReadable(t *testing.T) {
	srv, _ := newBackupServer(t)
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"pull", "3f9a"}, []string{"local snapshot snap-20 made from 3f9a", "stead fork snap-20"}},
		{[]string{"restore", "3f9a"}, []string{"restored 3f9a into copy (sb-9): running", "files: 12, 3.0 MiB written, 1.0 MiB downloaded"}},
		{[]string{"restore", "agent-1", "--path", "/a", "--from", "snap-1", "--to", "/b"}, []string{"/a of agent-1 restored from snap-1 to /b (created)"}},
		{[]string{"restore", "agent-1", "--path", "/a", "--from", "snap-1"}, []string{"/a of agent-1 restored from snap-1 to /a (replaced)"}},
		{[]string{"push", "agent-1", "--include-volumes"}, []string{"remote snapshot 3f9a1c2b saved (agent-1, from snap-7)\nremote snapshot 0badcafe saved (volume shared)\nfiles: 3 read"}},
		{[]string{"repo", "check"}, []string{"SCOPE", "t1", "no errors were found"}},
		{[]string{"repo", "prune", "--dry-run"}, []string{"would forget 1 snapshot(s): 3f9a1c2b", "would delete 2 pack(s), repacked 1, freed 5.0 MiB", "dry run"}},
		{[]string{"repo", "prune"}, []string{"forgot 1 snapshot(s)", "deleted 2 pack(s)"}},
		{[]string{"drill", "agent-1", "--verify", "true"}, []string{"drill drill-1 of agent-1 (remote snapshot 3f9a1c2b): PASSED",
			"recovery time: 4.2s (restore 3.1s, verify 400ms)", "tree digest: match", "verify: exit 0", "  all good"}},
		{[]string{"archive", "agent-1"}, []string{"agent-1: archived as remote snapshot aa11bb22; 3.0 MiB of local disk freed (stead start agent-1 hydrates it back)"}},
		{[]string{"repo", "info"}, []string{"s3://127.0.0.1:9000/stead", "/var/lib/stead/repo.key"}},
	}
	for _, tc := range cases {
		out, _ := mustStead(t, srv, tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("stead %s: output lacks %q:\n%s", strings.Join(tc.args, " "), w, out)
			}
		}
	}
}

func TestFailedOperationsExitNonZeroWithTheirError(t *testing.T) {
	srv, b := newBackupServer(t)
	for _, a := range [][]string{{"push", "doomed"}, {"drill", "doomed"}, {"archive", "doomed"}, {"restore", "doomed"}} {
		code, out, errOut := stead(t, srv, a...)
		if code != exitError || out != "" || !strings.Contains(errOut, "disk on fire") || !strings.Contains(errOut, "failed") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", a, code, out, errOut)
		}
	}
	// With --json the failed operation is still printed, and the exit is 1.
	code, out, _ := stead(t, srv, "push", "doomed", "--json")
	var op client.Operation
	if code != exitError || json.Unmarshal([]byte(out), &op) != nil || op.Error != "disk on fire" {
		t.Errorf("push --json of a failed op: exit %d: %q", code, out)
	}
	// A drill that ran but failed its checks, and a check that found errors.
	code, out, errOut := stead(t, srv, "drill", "flaky")
	if code != exitError || !strings.Contains(out, "FAILED") || !strings.Contains(out, "MISMATCH") || !strings.Contains(errOut, "tree digest differs") {
		t.Errorf("failed drill: exit %d: %q %q", code, out, errOut)
	}
	b.mu.Lock()
	b.broken = true
	b.mu.Unlock()
	code, out, errOut = stead(t, srv, "repo", "check")
	if code != exitError || !strings.Contains(out, "error: t1: pack 9a0b: missing") || !strings.Contains(errOut, "found 2 error") {
		t.Errorf("check with errors: exit %d: %q %q", code, out, errOut)
	}
}

// TestCheckAndRepairNameDamagedPacksSnapshotsAndSandboxes: a check that
// found a damaged pack prints, on stdout, the pack, the snapshot it
// damages and that snapshot's sandbox (name and id), and says what to do;
// --json carries the same in the operation's result. Repair prints what
// it removed, what it repaired and from which local copy, and what is
// still damaged (exit 1 then).
func TestCheckAndRepairNameDamagedPacksSnapshotsAndSandboxes(t *testing.T) {
	srv, b := newBackupServer(t)
	b.mu.Lock()
	b.broken = true
	b.mu.Unlock()
	code, out, errOut := stead(t, srv, "repo", "check", "--read-data")
	for _, w := range []string{"Damaged packs:", testDamagedPack, "1 of 12 blobs unreadable", "Damaged snapshots:", "3f9a1c2b",
		"agent-1 (sb-1)", "chunk 77ee is unreadable", "stead repo repair"} {
		if !strings.Contains(out, w) {
			t.Errorf("check text output lacks %q:\n%s", w, out)
		}
	}
	if code != exitError || !strings.Contains(errOut, "found 2 error(s)") || strings.Contains(errOut, "conflict") {
		t.Errorf("check: exit %d, stderr %q", code, errOut)
	}
	code, out, _ = stead(t, srv, "repo", "check", "--read-data", "--json")
	var op client.Operation
	var res client.CheckResult
	if code != exitError || json.Unmarshal([]byte(out), &op) != nil || op.DecodeResult(&res) != nil || len(res.Scopes) != 1 {
		t.Fatalf("check --json: exit %d: %q", code, out)
	}
	sc := res.Scopes[0]
	if res.OK || len(sc.DamagedPacks) != 1 || sc.DamagedPacks[0].ID != testDamagedPack || len(sc.DamagedSnapshots) != 1 ||
		sc.DamagedSnapshots[0].Sandbox != "sb-1" || sc.DamagedSnapshots[0].SandboxName != "agent-1" ||
		sc.DamagedSnapshots[0].Packs[0] != testDamagedPack || !strings.Contains(op.Error, "1 damaged pack(s), 1 damaged snapshot(s)") {
		t.Errorf("check --json result: %+v (error %q)", res, op.Error)
	}

	code, out, errOut = stead(t, srv, "repo", "repair")
	for _, w := range []string{"removed damaged pack " + testDamagedPack, "Repaired snapshots:", "3f9a1c2b", "agent-1 (sb-1)",
		"local snapshot snap-7", "Still damaged", "77c1aa00", "sb-2", "chunk 5566 is missing"} {
		if !strings.Contains(out, w) {
			t.Errorf("repair output lacks %q:\n%s", w, out)
		}
	}
	if code != exitError || !strings.Contains(errOut, "1 snapshot(s) are still damaged") {
		t.Errorf("repair with snapshots left damaged: exit %d, stderr %q", code, errOut)
	}
	code, out, _ = stead(t, srv, "repo", "repair", "--json")
	var rr client.RepairResult
	if code != exitError || json.Unmarshal([]byte(out), &op) != nil || op.DecodeResult(&rr) != nil ||
		rr.OK || len(rr.Scopes[0].Repaired) != 1 || rr.Scopes[0].Repaired[0].RepairedFrom != "local snapshot snap-7" || len(rr.Scopes[0].Damaged) != 1 {
		t.Errorf("repair --json: exit %d: %q", code, out)
	}
	if got := b.req("repair"); !reflect.DeepEqual(got, client.RepairRequest{}) {
		t.Errorf("repair request %#v", got)
	}

	b.mu.Lock()
	b.broken = false
	b.mu.Unlock()
	out, _ = mustStead(t, srv, "repo", "repair")
	if !strings.Contains(out, "no damaged snapshots are left") {
		t.Errorf("clean repair: %q", out)
	}
}

func TestBackupCommandsExitCodes(t *testing.T) {
	srv, _ := newBackupServer(t)
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"push"}, exitUsage},
		{[]string{"push", "a", "b"}, exitUsage},
		{[]string{"push", "missing"}, exitNotFound},
		{[]string{"pull"}, exitUsage},
		{[]string{"restore"}, exitUsage},
		{[]string{"restore", "agent-1", "--path", "/a"}, exitUsage},
		{[]string{"restore", "agent-1", "--from", "snap-1"}, exitUsage},
		{[]string{"restore", "agent-1", "--to", "/b"}, exitUsage},
		{[]string{"restore", "agent-1", "--path", "/a", "--from", "snap-1", "--latest"}, exitUsage},
		{[]string{"restore", "agent-1", "--path", "/a", "--from", "snap-1", "--name", "x"}, exitUsage},
		{[]string{"repo"}, exitOK},
		{[]string{"repo", "bogus"}, exitUsage},
		{[]string{"repo", "prune", "--keep-within", "3 days"}, exitUsage},
		{[]string{"backup-policy"}, exitUsage},
		{[]string{"backup-policy", "missing"}, exitNotFound},
		{[]string{"backup-policy", "agent-1", "--every", "hourly"}, exitUsage},
		{[]string{"backup-policy", "agent-1", "--archive-after", "-1h"}, exitUsage},
		{[]string{"schedule", "missing"}, exitNotFound}, // the old form of backup-policy
		{[]string{"schedule", "agent-1", "--every", "hourly"}, exitUsage},
		{[]string{"drill"}, exitUsage},
		{[]string{"drill", "agent-1", "--verify", "sh -c 'unterminated"}, exitUsage},
		{[]string{"drill", "ls", "a", "b"}, exitUsage},
		{[]string{"history", "agent-1"}, exitUsage},
		{[]string{"op"}, exitUsage},
		{[]string{"op", "op-404"}, exitNotFound},
		{[]string{"remote", "ls", "a", "b"}, exitUsage},
		{[]string{"remote", "bogus"}, exitUsage},
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

func TestRepoInitNeedsAnAdminKey(t *testing.T) {
	srv, _ := newBackupServer(t) // the test key is not an admin key
	code, out, errOut := stead(t, srv, "repo", "init")
	if code != exitError || out != "" || !strings.Contains(errOut, "needs an admin key") {
		t.Fatalf("repo init with a tenant key: exit %d: %q %q", code, out, errOut)
	}
}

func TestBackupPolicyShowsThePolicyAndChangesOnlyTheFlagsGiven(t *testing.T) {
	srv, b := newBackupServer(t)
	out, _ := mustStead(t, srv, "backup-policy", "agent-1")
	for _, w := range []string{"Push every:", "1h", "last 3", "after 168h stopped"} {
		if !strings.Contains(out, w) {
			t.Errorf("backup-policy output lacks %q:\n%s", w, out)
		}
	}
	if b.req("policy") != nil {
		t.Fatal("showing the policy wrote it")
	}
	mustStead(t, srv, "backup-policy", "agent-1", "--every", "30m", "--keep-daily", "7", "--keep-within", "48h")
	want := client.BackupPolicy{Interval: "30m", ArchiveAfter: "168h",
		Retention: client.BackupRetention{KeepLast: 3, Daily: 7, Within: "48h"}}
	if got := b.req("policy"); !reflect.DeepEqual(got, want) {
		t.Fatalf("policy set %+v, want %+v", got, want)
	}
	out, _ = mustStead(t, srv, "backup-policy", "agent-1", "--every", "0", "--archive-after", "0", "--keep-last", "0", "--json")
	var p client.BackupPolicy
	if err := json.Unmarshal([]byte(out), &p); err != nil || p.Interval != "0" || p.ArchiveAfter != "0" ||
		p.Retention != (client.BackupRetention{Daily: 7, Within: "48h"}) {
		t.Fatalf("backup-policy --json: %q", out)
	}
	out, _ = mustStead(t, srv, "backup-policy", "agent-1")
	if !strings.Contains(out, "off") || !strings.Contains(out, "never") || !strings.Contains(out, "daily 7, within 48h") {
		t.Errorf("disabled policy:\n%s", out)
	}
}

// TestScheduleSandboxIsStillTheBackupPolicy: the old form stead schedule
// SANDBOX [--every ...] shows and sets the backup policy as before, with a
// note naming stead backup-policy.
func TestScheduleSandboxIsStillTheBackupPolicy(t *testing.T) {
	srv, b := newBackupServer(t)
	out, errOut := mustStead(t, srv, "schedule", "agent-1", "--every", "45m")
	if got := b.req("policy"); got == nil || got.(client.BackupPolicy).Interval != "45m" {
		t.Fatalf("policy set %+v", got)
	}
	if !strings.Contains(out, "Push every:") || !strings.Contains(errOut, "stead backup-policy agent-1") {
		t.Fatalf("old form: %q %q", out, errOut)
	}
}

func TestRemoteLsDrillLsAndHistoryTables(t *testing.T) {
	srv, b := newBackupServer(t)
	out, _ := mustStead(t, srv, "remote", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "ID TIME SANDBOX FILES SIZE DATA ADDED SOURCE" ||
		!strings.HasPrefix(lines[1], "3f9a1c2b ") || !strings.Contains(lines[1], "agent-1") || !strings.Contains(lines[2], "sb-2") ||
		!strings.Contains(lines[1], "1.5 KiB") || !strings.Contains(lines[2], " - ") {
		t.Fatalf("remote ls:\n%s", out)
	}
	if code, _, errOut := stead(t, srv, "remote", "ls", "none"); code != exitOK || !strings.Contains(errOut, "no pushed snapshots") {
		t.Fatalf("empty remote ls: %d %q", code, errOut)
	}
	if out, _ := mustStead(t, srv, "remote", "ls", "none", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty remote ls --json: %q", out)
	}

	out, _ = mustStead(t, srv, "drill", "ls", "agent-1")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "FAILED") || !strings.Contains(lines[1], "exit 1") ||
		!strings.Contains(lines[1], "1m1s") || !strings.Contains(lines[2], "ok") || !strings.Contains(lines[2], "4.2s") {
		t.Fatalf("drill ls:\n%s", out)
	}
	if got := b.req("drills"); got != "agent-1" {
		t.Errorf("drill ls asked for %v", got)
	}

	out, errOut := mustStead(t, srv, "history", "agent-1", "/workspace/notes.md")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "remote") || !strings.Contains(lines[1], "3f9a1c2b ") ||
		!strings.HasSuffix(lines[1], "sha256:0123456789ab") || !strings.Contains(lines[1], "-rw-r--r--") ||
		!strings.Contains(lines[2], "snap-7") || !strings.Contains(lines[2], "-rw-------") {
		t.Fatalf("history:\n%s", out)
	}
	if !strings.Contains(errOut, "stead restore agent-1 --path /workspace/notes.md --from SNAPSHOT") {
		t.Errorf("history hint %q", errOut)
	}
	if got := b.req("history"); got != "agent-1:/workspace/notes.md" {
		t.Errorf("history asked for %v", got)
	}
}

func TestOpShowsAnOperationAndWaitsForIt(t *testing.T) {
	srv, _ := newBackupServer(t)
	id, _ := mustStead(t, srv, "push", "agent-1", "--no-wait")
	id = strings.TrimSpace(id)
	out, _ := mustStead(t, srv, "op", id)
	for _, w := range []string{"ID:", id, "Kind:", "push", "State:", "succeeded", "Result:", `"files_read": 3`} {
		if !strings.Contains(out, w) {
			t.Errorf("op output lacks %q:\n%s", w, out)
		}
	}
	out, errOut := mustStead(t, srv, "op", id, "--wait")
	if !strings.HasPrefix(out, "remote snapshot 3f9a1c2b saved") || !strings.Contains(errOut, "push agent-1: succeeded") {
		t.Errorf("op --wait: %q %q", out, errOut)
	}
	out, _ = mustStead(t, srv, "op", id, "--json")
	var op client.Operation
	if err := json.Unmarshal([]byte(out), &op); err != nil || op.ID != id {
		t.Errorf("op --json: %q", out)
	}
}

// fakeClock is a settable time source for the progress bar.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestProgressOnANonTerminalWritesALineEveryTwoSecondsAndAtTheEnd(t *testing.T) {
	var buf bytes.Buffer
	clock := &fakeClock{t: testOpStart}
	p := newProgressBar(&buf, "push agent-1")
	p.now = clock.now
	p.lastPlain = clock.t
	if p.tty {
		t.Fatal("a bytes.Buffer was taken for a terminal")
	}
	for i := 1; i <= 10; i++ { // every 500 ms for 5 s
		clock.t = testOpStart.Add(time.Duration(i) * 500 * time.Millisecond)
		p.Update(client.Operation{ID: "op-1", State: client.OperationRunning, StartedAt: testOpStart,
			Progress: &client.Progress{Phase: "push", BytesDone: int64(i) * 25_000_000, BytesTotal: 500_000_000,
				FilesDone: int64(i), FilesTotal: 20, Elapsed: float64(i) / 2}})
	}
	end := testOpStart.Add(12 * time.Second)
	p.Finish(client.Operation{ID: "op-1", State: client.OperationSucceeded, StartedAt: testOpStart, EndedAt: &end,
		Progress: &client.Progress{Phase: "push", BytesDone: 500_000_000, BytesTotal: 500_000_000, FilesDone: 20, FilesTotal: 20,
			BytesMoved: 1 << 20, Elapsed: 12}})
	p.Update(client.Operation{State: client.OperationRunning}) // ignored after Finish

	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	want := []string{
		"push agent-1: push  20%  95 MiB / 477 MiB, 50.0 MB/s, files 4/20, ETA 8s",
		"push agent-1: push  40%  191 MiB / 477 MiB, 50.0 MB/s, files 8/20, ETA 6s",
		"push agent-1: succeeded 100%  477 MiB / 477 MiB, 41.7 MB/s, files 20/20, moved 1.0 MiB, in 12s",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") || strings.Contains(buf.String(), "\r") {
		t.Fatalf("progress lines:\n%s\nwant:\n%s", buf.String(), strings.Join(want, "\n"))
	}
}

func TestProgressOnATerminalRedrawsOneLine(t *testing.T) {
	var buf bytes.Buffer
	p := newProgressBar(&buf, "restore 3f9a")
	p.tty, p.width = true, 200
	p.Update(client.Operation{State: client.OperationRunning, Progress: &client.Progress{Phase: "restore", BytesDone: 5 << 20,
		BytesTotal: 10 << 20, FilesDone: 1, FilesTotal: 2, Elapsed: 1}})
	p.Update(client.Operation{State: client.OperationRunning, Progress: &client.Progress{Phase: "verify"}})
	p.Finish(client.Operation{State: client.OperationFailed, Error: "boom"})
	got := buf.String()
	frames := strings.Split(strings.TrimSuffix(got, "\n"), "\r")
	if !strings.HasSuffix(got, "\n") || strings.Count(got, "\n") != 1 || len(frames) != 4 || frames[0] != "" {
		t.Fatalf("redraws %q", got)
	}
	if !strings.HasPrefix(frames[1], "restore 3f9a: restore [##########----------]  50%  5.0 MiB / 10 MiB  5.2 MB/s  files 1/2  ETA 1s") {
		t.Errorf("first frame %q", frames[1])
	}
	// A shorter frame blanks out what is left of the longer one before it.
	if len(frames[2]) != len(frames[1]) || !strings.HasPrefix(frames[2], "restore 3f9a: verify ["+strings.Repeat("?", barWidth)+"]") {
		t.Errorf("second frame %q", frames[2])
	}
	if !strings.HasPrefix(frames[3], "restore 3f9a: failed [") {
		t.Errorf("final frame %q", frames[3])
	}

	// A narrow terminal gets lines cut to its width.
	buf.Reset()
	p = newProgressBar(&buf, "push a-sandbox-with-a-long-name")
	p.tty, p.width = true, 40
	p.Update(client.Operation{State: client.OperationRunning, Progress: &client.Progress{Phase: "push", BytesDone: 1, BytesTotal: 2}})
	if l := len([]rune(strings.TrimPrefix(buf.String(), "\r"))); l != 39 {
		t.Errorf("line of %d columns on a 40-column terminal: %q", l, buf.String())
	}
}

func TestProgressLineWithoutTotals(t *testing.T) {
	for _, tc := range []struct {
		op   client.Operation
		want string
	}{
		{client.Operation{State: client.OperationRunning}, "check: running"},
		{client.Operation{State: client.OperationRunning, Progress: &client.Progress{Phase: "snapshot"}}, "check: snapshot"},
		{client.Operation{State: client.OperationRunning, Progress: &client.Progress{Phase: "check", FilesDone: 3, FilesTotal: 4}},
			"check: check  75%  files 3/4"},
		{client.Operation{State: client.OperationRunning, Progress: &client.Progress{Phase: "prune", BytesDone: 2e6, Elapsed: 2, FilesDone: 7}},
			"check: prune  1.9 MiB, 1.0 MB/s, files 7"},
		{client.Operation{State: client.OperationSucceeded}, "check: succeeded 100%"},
	} {
		if got := progressLine("check", tc.op, false); got != tc.want {
			t.Errorf("progressLine(%+v) = %q, want %q", tc.op.Progress, got, tc.want)
		}
	}
}

func TestSplitCommand(t *testing.T) {
	for in, want := range map[string][]string{
		"true":                         {"true"},
		"  test  -f  /x ":              {"test", "-f", "/x"},
		`sh -c 'cd /w && make test'`:   {"sh", "-c", "cd /w && make test"},
		`echo "a \"b\" c" d\ e`:        {"echo", `a "b" c`, "d e"},
		`echo ''`:                      {"echo", ""},
		`a'b'"c"`:                      {"abc"},
		`printf "%s\n" 'it''s'`:        {"printf", `%s\n`, "its"},
		"grep\tx\n/f":                  {"grep", "x", "/f"},
		`ls "/workspace/my notes.md"`:  {"ls", "/workspace/my notes.md"},
		`echo "back\\slash" 'no\\esc'`: {"echo", `back\slash`, `no\\esc`},
	} {
		got, err := splitCommand(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("splitCommand(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "   ", `sh -c 'x`, `echo "x`, `echo x\`} {
		if got, err := splitCommand(in); err == nil {
			t.Errorf("splitCommand(%q) = %q, want an error", in, got)
		}
	}
}

// shellQuote quotes a word so that splitCommand gives it back.
func shellQuote(w string) string { return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'" }

func FuzzSplitCommand(f *testing.F) {
	for _, s := range []string{"true", `sh -c 'a && b'`, `echo "x \" y" z\ w`, `'`, `"`, `\`, "a\tb\nc", `''""`, "é 'ü'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := splitCommand(s)
		if err != nil {
			return
		}
		if len(words) == 0 {
			t.Fatalf("splitCommand(%q) gave no words and no error", s)
		}
		// Quoting the words and splitting again gives the same words.
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = shellQuote(w)
		}
		again, err := splitCommand(strings.Join(quoted, " "))
		if err != nil || !reflect.DeepEqual(again, words) {
			t.Fatalf("round trip of %q: %q -> %q (%v)", s, words, again, err)
		}
	})
}
