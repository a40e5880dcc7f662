package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// backupFake is a fakeBackend that also serves the backup routes. It
// records every call with its tenant and subject (as fakeBackend does) and
// keeps the last arguments of each method. Operations it starts are in
// State (default running), with the path's id as their target.
type backupFake struct {
	*fakeBackend

	mu         sync.Mutex
	State      string
	repoAdmin  *bool
	checkAdmin *bool
	push       client.PushRequest
	restore    client.RestoreRequest
	pull       client.PullRequest
	check      client.CheckRequest
	prune      client.PruneRequest
	policy     client.BackupPolicy
	drill      client.DrillRequest
	wait       bool
	histPath   string
	restoreP   client.RestorePathRequest
	listSB     string

	GetOperationFunc   func(ctx context.Context, p Principal, id string) (client.Operation, error)
	WatchOperationFunc func(ctx context.Context, p Principal, id string) (<-chan client.Operation, error)
}

var _ BackupBackend = (*backupFake)(nil)

func newBackupFake() *backupFake { return &backupFake{fakeBackend: &fakeBackend{}} }

var opStart = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// op returns the operation the fake starts, or f.Err.
func (f *backupFake) op(kind, target string) (client.Operation, error) {
	if f.Err != nil {
		return client.Operation{}, f.Err
	}
	f.mu.Lock()
	state := f.State
	f.mu.Unlock()
	if state == "" {
		state = client.OperationRunning
	}
	o := client.Operation{ID: "op-" + kind, Kind: kind, Target: target, State: state, StartedAt: opStart,
		Progress: &client.Progress{Phase: kind, BytesDone: 5, BytesTotal: 10}}
	if state != client.OperationRunning {
		end := opStart.Add(time.Second)
		o.EndedAt = &end
		o.Result = json.RawMessage(`{"ok":true}`)
	}
	return o, nil
}

func (f *backupFake) RepoInfo(_ context.Context, admin bool) (client.RepoInfo, error) {
	f.record("RepoInfo", "", "")
	f.mu.Lock()
	f.repoAdmin = &admin
	f.mu.Unlock()
	ri := client.RepoInfo{Configured: true, Initialized: true, Location: "file:///repo", ID: "r1"}
	if admin {
		ri.Scopes = []string{"t-admin", "t-alice"}
	}
	return ri, f.Err
}

func (f *backupFake) InitRepo(context.Context) (client.RepoInfo, error) {
	f.record("InitRepo", "", "")
	return client.RepoInfo{Configured: true, Initialized: true, KeyFile: "/var/lib/stead/repo.key"}, f.Err
}

func (f *backupFake) GetOperation(ctx context.Context, p Principal, id string) (client.Operation, error) {
	f.record("GetOperation", p.TenantID, id)
	if f.GetOperationFunc != nil {
		return f.GetOperationFunc(ctx, p, id)
	}
	o, err := f.op("push", "sb-1")
	o.ID = id
	return o, err
}

func (f *backupFake) WatchOperation(ctx context.Context, p Principal, id string) (<-chan client.Operation, error) {
	f.record("WatchOperation", p.TenantID, id)
	if f.WatchOperationFunc != nil {
		return f.WatchOperationFunc(ctx, p, id)
	}
	if f.Err != nil {
		return nil, f.Err
	}
	ch := make(chan client.Operation, 2)
	o, _ := f.op("push", "sb-1")
	o.ID, o.State = id, client.OperationRunning
	ch <- o
	end := opStart.Add(time.Second)
	o.State, o.EndedAt = client.OperationSucceeded, &end
	ch <- o
	close(ch)
	return ch, nil
}

func (f *backupFake) PushSandbox(_ context.Context, tenant, id string, req client.PushRequest) (client.Operation, error) {
	f.record("PushSandbox", tenant, id)
	f.mu.Lock()
	f.push = req
	f.mu.Unlock()
	return f.op("push", id)
}

func (f *backupFake) ListRemoteSnapshots(_ context.Context, tenant, sandbox string) ([]client.RemoteSnapshot, error) {
	f.record("ListRemoteSnapshots", tenant, sandbox)
	f.mu.Lock()
	f.listSB = sandbox
	f.mu.Unlock()
	if sandbox == "none" {
		return nil, f.Err
	}
	return []client.RemoteSnapshot{{ID: "3f9a1c2b", Sandbox: "sb-1", Files: 3}}, f.Err
}

func (f *backupFake) RestoreRemote(_ context.Context, tenant string, req client.RestoreRequest) (client.Operation, error) {
	f.record("RestoreRemote", tenant, req.Snapshot+req.Sandbox)
	f.mu.Lock()
	f.restore = req
	f.mu.Unlock()
	return f.op("restore", req.Snapshot+req.Sandbox)
}

func (f *backupFake) PullRemote(_ context.Context, tenant string, req client.PullRequest) (client.Operation, error) {
	f.record("PullRemote", tenant, req.Snapshot)
	f.mu.Lock()
	f.pull = req
	f.mu.Unlock()
	return f.op("pull", req.Snapshot)
}

func (f *backupFake) CheckRepo(_ context.Context, tenant string, admin bool, req client.CheckRequest) (client.Operation, error) {
	f.record("CheckRepo", tenant, "")
	f.mu.Lock()
	f.check, f.checkAdmin = req, &admin
	f.mu.Unlock()
	return f.op("check", "")
}

func (f *backupFake) RepairRepo(_ context.Context, tenant string, _ bool, _ client.RepairRequest) (client.Operation, error) {
	f.record("RepairRepo", tenant, "")
	return f.op("repair", "")
}

func (f *backupFake) PruneRepo(_ context.Context, tenant string, req client.PruneRequest) (client.Operation, error) {
	f.record("PruneRepo", tenant, req.Sandbox)
	f.mu.Lock()
	f.prune = req
	f.mu.Unlock()
	return f.op("prune", req.Sandbox)
}

func (f *backupFake) GetBackupPolicy(_ context.Context, tenant, id string) (client.BackupPolicy, error) {
	f.record("GetBackupPolicy", tenant, id)
	return client.BackupPolicy{Interval: "1h", Retention: client.BackupRetention{KeepLast: 3}, LastPushID: "3f9a"}, f.Err
}

func (f *backupFake) SetBackupPolicy(_ context.Context, tenant, id string, p client.BackupPolicy) (client.BackupPolicy, error) {
	f.record("SetBackupPolicy", tenant, id)
	f.mu.Lock()
	f.policy = p
	f.mu.Unlock()
	return p, f.Err
}

func (f *backupFake) DrillSandbox(_ context.Context, tenant, id string, req client.DrillRequest) (client.Operation, error) {
	f.record("DrillSandbox", tenant, id)
	f.mu.Lock()
	f.drill = req
	f.mu.Unlock()
	return f.op("drill", id)
}

func (f *backupFake) ListDrills(_ context.Context, tenant, sandbox string) ([]client.Drill, error) {
	f.record("ListDrills", tenant, sandbox)
	f.mu.Lock()
	f.listSB = sandbox
	f.mu.Unlock()
	if sandbox == "none" {
		return nil, f.Err
	}
	return []client.Drill{{ID: "drill-1", Sandbox: "sb-1", OK: true, RecoverySeconds: 4.5}}, f.Err
}

func (f *backupFake) ArchiveSandbox(_ context.Context, tenant, id string, wait bool) (client.Operation, error) {
	f.record("ArchiveSandbox", tenant, id)
	f.mu.Lock()
	f.wait = wait
	f.mu.Unlock()
	return f.op("archive", id)
}

func (f *backupFake) HydrateSandbox(_ context.Context, tenant, id string, wait bool) (client.Operation, error) {
	f.record("HydrateSandbox", tenant, id)
	return f.op("hydrate", id)
}

func (f *backupFake) PushVolume(_ context.Context, tenant, id string, req client.PushVolumeRequest) (client.Operation, error) {
	f.record("PushVolume", tenant, id)
	return f.op("volume-push", id)
}

func (f *backupFake) ListVolumePushes(_ context.Context, tenant, volume string) ([]client.RemoteSnapshot, error) {
	f.record("ListVolumePushes", tenant, volume)
	return nil, f.Err
}

func (f *backupFake) RestoreVolume(_ context.Context, tenant string, req client.RestoreVolumeRequest) (client.Operation, error) {
	f.record("RestoreVolume", tenant, req.Name)
	return f.op("volume-restore", req.Snapshot)
}

func (f *backupFake) CreateVolumeSnapshot(_ context.Context, tenant, id string, req client.CreateSnapshotRequest) (client.Snapshot, error) {
	f.record("CreateVolumeSnapshot", tenant, id)
	return client.Snapshot{ID: "snap-v", Sandbox: id, Kind: "volume"}, f.Err
}

func (f *backupFake) ListVolumeSnapshots(_ context.Context, tenant, id string) ([]client.Snapshot, error) {
	f.record("ListVolumeSnapshots", tenant, id)
	return nil, f.Err
}

func (f *backupFake) FileHistory(_ context.Context, tenant, id, path string) ([]client.FileVersion, error) {
	f.record("FileHistory", tenant, id)
	f.mu.Lock()
	f.histPath = path
	f.mu.Unlock()
	if path == "/none" {
		return nil, f.Err
	}
	return []client.FileVersion{{Source: "local", Snapshot: "snap-1", Type: "file", Size: 5, Changed: true}}, f.Err
}

func (f *backupFake) RestorePath(_ context.Context, tenant, id string, req client.RestorePathRequest) (client.Operation, error) {
	f.record("RestorePath", tenant, id)
	f.mu.Lock()
	f.restoreP = req
	f.mu.Unlock()
	return f.op("restore-path", id)
}

// backupRoutes covers every backup route but repo init (admin only, tested
// on its own). Sandbox ids are given as names on purpose.
func backupRoutes() []route {
	const sb = "my-sandbox.v2"
	return []route{
		{"get-repo", "RepoInfo", func(ctx context.Context, c *client.Client) error { _, err := c.RepoInfo(ctx); return err }},
		{"check-repo", "CheckRepo", func(ctx context.Context, c *client.Client) error {
			_, err := c.CheckRepo(ctx, client.CheckRequest{ReadData: true})
			return err
		}},
		{"repair-repo", "RepairRepo", func(ctx context.Context, c *client.Client) error {
			_, err := c.RepairRepo(ctx, client.RepairRequest{})
			return err
		}},
		{"prune-repo", "PruneRepo", func(ctx context.Context, c *client.Client) error {
			_, err := c.PruneRepo(ctx, client.PruneRequest{Sandbox: sb})
			return err
		}},
		{"get-operation", "GetOperation", func(ctx context.Context, c *client.Client) error {
			_, err := c.GetOperation(ctx, "op-1")
			return err
		}},
		{"watch-operation", "WatchOperation", func(ctx context.Context, c *client.Client) error {
			_, err := c.WatchOperation(ctx, "op-1", nil)
			return err
		}},
		{"push-sandbox", "PushSandbox", func(ctx context.Context, c *client.Client) error {
			_, err := c.Push(ctx, sb, client.PushRequest{})
			return err
		}},
		{"list-remote-snapshots", "ListRemoteSnapshots", func(ctx context.Context, c *client.Client) error {
			_, err := c.ListRemoteSnapshots(ctx, sb)
			return err
		}},
		{"restore-remote-snapshot", "RestoreRemote", func(ctx context.Context, c *client.Client) error {
			_, err := c.RestoreRemote(ctx, client.RestoreRequest{Snapshot: "3f9a"})
			return err
		}},
		{"pull-remote-snapshot", "PullRemote", func(ctx context.Context, c *client.Client) error {
			_, err := c.PullRemote(ctx, client.PullRequest{Snapshot: "3f9a"})
			return err
		}},
		{"get-backup-policy", "GetBackupPolicy", func(ctx context.Context, c *client.Client) error {
			_, err := c.GetBackupPolicy(ctx, sb)
			return err
		}},
		{"set-backup-policy", "SetBackupPolicy", func(ctx context.Context, c *client.Client) error {
			_, err := c.SetBackupPolicy(ctx, sb, client.BackupPolicy{Interval: "1h"})
			return err
		}},
		{"drill-sandbox", "DrillSandbox", func(ctx context.Context, c *client.Client) error {
			_, err := c.Drill(ctx, sb, client.DrillRequest{})
			return err
		}},
		{"list-drills", "ListDrills", func(ctx context.Context, c *client.Client) error { _, err := c.ListDrills(ctx, ""); return err }},
		{"archive-sandbox", "ArchiveSandbox", func(ctx context.Context, c *client.Client) error {
			_, err := c.Archive(ctx, sb, false)
			return err
		}},
		{"file-history", "FileHistory", func(ctx context.Context, c *client.Client) error {
			_, err := c.FileHistory(ctx, sb, "/workspace/notes.md")
			return err
		}},
		{"restore-path", "RestorePath", func(ctx context.Context, c *client.Client) error {
			_, err := c.RestorePath(ctx, sb, client.RestorePathRequest{Path: "/workspace/notes.md", Snapshot: "snap-1"})
			return err
		}},
		{"hydrate-sandbox", "HydrateSandbox", func(ctx context.Context, c *client.Client) error {
			_, err := c.Hydrate(ctx, sb, false)
			return err
		}},
		{"push-volume", "PushVolume", func(ctx context.Context, c *client.Client) error {
			_, err := c.PushVolume(ctx, "data", client.PushVolumeRequest{})
			return err
		}},
		{"list-volume-pushes", "ListVolumePushes", func(ctx context.Context, c *client.Client) error {
			_, err := c.ListVolumePushes(ctx, "")
			return err
		}},
		{"create-volume-snapshot", "CreateVolumeSnapshot", func(ctx context.Context, c *client.Client) error {
			_, err := c.CreateVolumeSnapshot(ctx, "data", client.CreateSnapshotRequest{})
			return err
		}},
		{"list-volume-snapshots", "ListVolumeSnapshots", func(ctx context.Context, c *client.Client) error {
			_, err := c.ListVolumeSnapshots(ctx, "data")
			return err
		}},
		{"restore-volume", "RestoreVolume", func(ctx context.Context, c *client.Client) error {
			_, err := c.RestoreVolume(ctx, client.RestoreVolumeRequest{Volume: "data", Name: "copy"})
			return err
		}},
	}
}

func TestEveryBackupRoutePassesThePrincipalsTenant(t *testing.T) {
	for _, r := range backupRoutes() {
		t.Run(r.name, func(t *testing.T) {
			f := newBackupFake()
			c, _ := newTestServer(t, f, aliceKey)
			if err := r.call(testCtx(t), c); err != nil {
				t.Fatal(err)
			}
			var seen bool
			for _, call := range f.Calls() {
				if call.Method == "RepoInfo" {
					seen = true // the repository is the daemon's: no tenant
					continue
				}
				if call.Tenant != "t-alice" {
					t.Fatalf("%s called with tenant %q, want t-alice", call.Method, call.Tenant)
				}
				if call.Method == r.backend {
					seen = true
				}
			}
			if !seen {
				t.Fatalf("backend %s not called; calls: %v", r.backend, f.Calls())
			}
		})
	}
}

func TestEveryBackupRouteRejectsMissingAndBadKeys(t *testing.T) {
	for _, key := range []string{"", "not-a-key"} {
		f := newBackupFake()
		c, _ := newTestServer(t, f, key)
		routes := append(backupRoutes(), route{"init-repo", "InitRepo", func(ctx context.Context, c *client.Client) error {
			_, err := c.InitRepo(ctx)
			return err
		}})
		for _, r := range routes {
			if err := r.call(testCtx(t), c); !client.IsUnauthenticated(err) {
				t.Errorf("%s with key %q: %v, want 401", r.name, key, err)
			}
		}
		if calls := f.Calls(); len(calls) != 0 {
			t.Fatalf("backend called without a valid key: %v", calls)
		}
	}
}

func TestBackupRoutesPassTheirArguments(t *testing.T) {
	f := newBackupFake()
	c, _ := newTestServer(t, f, aliceKey)
	ctx := testCtx(t)
	const sb = "agent 1"
	lastID := func() string {
		calls := f.Calls()
		return calls[len(calls)-1].ID
	}

	o, err := c.Push(ctx, sb, client.PushRequest{Snapshot: "snap-7", Wait: true})
	if err != nil || o.ID != "op-push" || o.Target != sb || o.Progress == nil || o.Progress.BytesTotal != 10 {
		t.Fatalf("push: %+v %v", o, err)
	}
	if _, err := c.RestoreRemote(ctx, client.RestoreRequest{Sandbox: "sb-old", Name: "back", NoStart: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PullRemote(ctx, client.PullRequest{Snapshot: "3f9a", Wait: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CheckRepo(ctx, client.CheckRequest{ReadData: true, ReadDataSubset: "1/5"}); err != nil {
		t.Fatal(err)
	}
	ret := &client.BackupRetention{KeepLast: 2, Daily: 7, Within: "72h"}
	if _, err := c.PruneRepo(ctx, client.PruneRequest{Sandbox: sb, Retention: ret, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	pol := client.BackupPolicy{Interval: "30m", Retention: client.BackupRetention{Hourly: 24}, ArchiveAfter: "0"}
	if got, err := c.SetBackupPolicy(ctx, sb, pol); err != nil || got.Interval != "30m" || got.Retention.Hourly != 24 {
		t.Fatalf("set policy: %+v %v", got, err)
	}
	if lastID() != sb {
		t.Errorf("set policy reached %q", lastID())
	}
	if got, err := c.GetBackupPolicy(ctx, sb); err != nil || got.Interval != "1h" || got.LastPushID != "3f9a" {
		t.Fatalf("get policy: %+v %v", got, err)
	}
	if _, err := c.Drill(ctx, sb, client.DrillRequest{EmptyDataDir: true, Verify: []string{"test", "-f", "/x"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Archive(ctx, sb, true); err != nil {
		t.Fatal(err)
	}
	if lastID() != sb {
		t.Errorf("archive reached %q", lastID())
	}
	vs, err := c.FileHistory(ctx, sb, "/workspace/my notes.md")
	if err != nil || len(vs) != 1 || vs[0].Snapshot != "snap-1" || !vs[0].Changed {
		t.Fatalf("history: %+v %v", vs, err)
	}
	if _, err := c.RestorePath(ctx, sb, client.RestorePathRequest{Path: "/a", Snapshot: "snap-1", To: "/b"}); err != nil {
		t.Fatal(err)
	}
	rs, err := c.ListRemoteSnapshots(ctx, sb)
	if err != nil || len(rs) != 1 || rs[0].ID != "3f9a1c2b" {
		t.Fatalf("remote ls: %+v %v", rs, err)
	}
	ds, err := c.ListDrills(ctx, sb)
	if err != nil || len(ds) != 1 || !ds[0].OK {
		t.Fatalf("drills: %+v %v", ds, err)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.push.Snapshot != "snap-7" || !f.push.Wait {
		t.Errorf("push got %+v", f.push)
	}
	if !reflect.DeepEqual(f.restore, client.RestoreRequest{Sandbox: "sb-old", Name: "back", NoStart: true}) {
		t.Errorf("restore got %+v", f.restore)
	}
	if f.pull != (client.PullRequest{Snapshot: "3f9a", Wait: true}) {
		t.Errorf("pull got %+v", f.pull)
	}
	if f.check != (client.CheckRequest{ReadData: true, ReadDataSubset: "1/5"}) || f.checkAdmin == nil || *f.checkAdmin {
		t.Errorf("check got %+v admin %v", f.check, f.checkAdmin)
	}
	if f.prune.Sandbox != sb || !f.prune.DryRun || f.prune.Retention == nil || *f.prune.Retention != *ret {
		t.Errorf("prune got %+v", f.prune)
	}
	if f.policy.Interval != "30m" || f.policy.ArchiveAfter != "0" || f.policy.Retention.Hourly != 24 {
		t.Errorf("set policy got %+v", f.policy)
	}
	if !f.drill.EmptyDataDir || strings.Join(f.drill.Verify, " ") != "test -f /x" {
		t.Errorf("drill got %+v", f.drill)
	}
	if !f.wait {
		t.Error("archive ?wait=true not passed")
	}
	if f.histPath != "/workspace/my notes.md" {
		t.Errorf("history path %q", f.histPath)
	}
	if f.restoreP != (client.RestorePathRequest{Path: "/a", Snapshot: "snap-1", To: "/b"}) {
		t.Errorf("restore-path got %+v", f.restoreP)
	}
	if f.listSB != sb {
		t.Errorf("list got sandbox %q", f.listSB)
	}
}

func TestBackupRoutesWithoutABodyUseTheDefaults(t *testing.T) {
	f := newBackupFake()
	_, srv := newTestServer(t, f, aliceKey)
	for _, p := range []string{"/v1/sandboxes/sb/push", "/v1/repo/check", "/v1/repo/repair", "/v1/repo/prune", "/v1/sandboxes/sb/drill", "/v1/sandboxes/sb/archive"} {
		raw := doRaw(t, srv, http.MethodPost, p, "", http.StatusAccepted)
		var o client.Operation
		if err := json.Unmarshal([]byte(raw), &o); err != nil || o.State != "running" {
			t.Errorf("%s: %s", p, raw)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !reflect.DeepEqual(f.push, client.PushRequest{}) || !reflect.DeepEqual(f.prune, client.PruneRequest{}) ||
		!reflect.DeepEqual(f.drill, client.DrillRequest{}) || f.wait {
		t.Errorf("defaults not passed: %+v %+v %+v %v", f.push, f.prune, f.drill, f.wait)
	}
}

func TestOperationRoutesAnswer202WhileRunningAnd200WhenDone(t *testing.T) {
	f := newBackupFake()
	_, srv := newTestServer(t, f, aliceKey)
	reqs := []struct{ method, path, body string }{
		{http.MethodPost, "/v1/sandboxes/sb/push", `{}`},
		{http.MethodPost, "/v1/remote-snapshots/restore", `{"snapshot":"3f9a"}`},
		{http.MethodPost, "/v1/remote-snapshots/pull", `{"snapshot":"3f9a"}`},
		{http.MethodPost, "/v1/repo/check", `{}`},
		{http.MethodPost, "/v1/repo/repair", `{}`},
		{http.MethodPost, "/v1/repo/prune", `{}`},
		{http.MethodPost, "/v1/sandboxes/sb/drill", `{}`},
		{http.MethodPost, "/v1/sandboxes/sb/archive", ``},
		{http.MethodPost, "/v1/sandboxes/sb/restore-path", `{"path":"/a","snapshot":"snap-1"}`},
	}
	for _, state := range []string{client.OperationRunning, client.OperationSucceeded, client.OperationFailed} {
		f.mu.Lock()
		f.State = state
		f.mu.Unlock()
		want := http.StatusOK
		if state == client.OperationRunning {
			want = http.StatusAccepted
		}
		for _, r := range reqs {
			raw := doRaw(t, srv, r.method, r.path, r.body, want)
			var o client.Operation
			if err := json.Unmarshal([]byte(raw), &o); err != nil || o.State != state || o.ID == "" {
				t.Errorf("%s %s (%s): %s", r.method, r.path, state, raw)
			}
		}
	}
}

func TestRepoInitIsAdminOnlyAndAdminSeesEveryScope(t *testing.T) {
	f := newBackupFake()
	alice, srv := newTestServer(t, f, aliceKey)
	ctx := testCtx(t)
	if _, err := alice.InitRepo(ctx); !client.IsForbidden(err) {
		t.Fatalf("init by a non-admin: %v, want 403", err)
	}
	for _, call := range f.Calls() {
		if call.Method == "InitRepo" {
			t.Fatal("InitRepo reached the backend for a non-admin")
		}
	}
	ri, err := alice.RepoInfo(ctx)
	if err != nil || len(ri.Scopes) != 0 {
		t.Fatalf("repo info for a non-admin: %+v %v", ri, err)
	}
	f.mu.Lock()
	asAdmin := f.repoAdmin == nil || *f.repoAdmin
	f.mu.Unlock()
	if asAdmin {
		t.Fatal("repo info for a non-admin asked the backend as admin")
	}

	admin, err := client.New(srv.URL, adminKey)
	if err != nil {
		t.Fatal(err)
	}
	ri, err = admin.InitRepo(ctx)
	if err != nil || ri.KeyFile == "" {
		t.Fatalf("init by an admin: %+v %v", ri, err)
	}
	if ri, err = admin.RepoInfo(ctx); err != nil || len(ri.Scopes) != 2 {
		t.Fatalf("repo info for an admin: %+v %v", ri, err)
	}
	if _, err := admin.CheckRepo(ctx, client.CheckRequest{}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.checkAdmin == nil || !*f.checkAdmin {
		t.Fatal("check by an admin was not passed admin=true")
	}
}

func TestBackupRequestsAreValidatedBeforeTheBackend(t *testing.T) {
	f := newBackupFake()
	c, srv := newTestServer(t, f, aliceKey)
	ctx := testCtx(t)
	for _, req := range []client.RestoreRequest{{}, {Snapshot: "3f9a", Sandbox: "sb-1"}, {Name: "x"}} {
		if _, err := c.RestoreRemote(ctx, req); !client.IsInvalid(err) {
			t.Errorf("restore %+v: %v, want 400", req, err)
		}
	}
	if _, err := c.PullRemote(ctx, client.PullRequest{}); !client.IsInvalid(err) {
		t.Errorf("pull without a snapshot: %v, want 4xx invalid", err)
	}
	if _, err := c.FileHistory(ctx, "sb", ""); !client.IsInvalid(err) {
		t.Errorf("history without a path: %v, want 4xx invalid", err)
	}
	for _, req := range []client.RestorePathRequest{{Path: "/a"}, {Snapshot: "snap-1"}} {
		if _, err := c.RestorePath(ctx, "sb", req); !client.IsInvalid(err) {
			t.Errorf("restore-path %+v: %v, want 4xx invalid", req, err)
		}
	}
	doRaw(t, srv, http.MethodPost, "/v1/remote-snapshots/restore", "", http.StatusBadRequest)
	doRaw(t, srv, http.MethodPut, "/v1/sandboxes/sb/backup-policy", "{not json", http.StatusBadRequest)
	if calls := f.Calls(); len(calls) != 0 {
		t.Fatalf("backend called with refused requests: %v", calls)
	}
}

func TestBackupErrorsMapToStatusCodes(t *testing.T) {
	cases := []struct {
		err    error
		status int
	}{
		{fmt.Errorf("remote snapshot 3f9a: %w", errs.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("archive sb-1: sandbox is running: %w", errs.ErrConflict), http.StatusConflict},
		{fmt.Errorf("policy: interval \"soon\": %w", errs.ErrInvalid), http.StatusBadRequest},
		{fmt.Errorf("push: no repository configured: %w", errs.ErrUnsupported), http.StatusNotImplemented},
	}
	for _, tc := range cases {
		t.Run(tc.err.Error(), func(t *testing.T) {
			f := newBackupFake()
			f.Err = tc.err
			c, _ := newTestServer(t, f, aliceKey)
			for _, r := range backupRoutes() {
				err := r.call(testCtx(t), c)
				if client.StatusCode(err) != tc.status {
					t.Errorf("%s: %v, want %d", r.name, err, tc.status)
					continue
				}
				if !strings.Contains(err.Error(), strings.SplitN(tc.err.Error(), ":", 2)[0]) {
					t.Errorf("%s: %q does not carry the backend's message", r.name, err)
				}
			}
		})
	}
}

func TestBackupListsOfNoneAreEmptyArrays(t *testing.T) {
	_, srv := newTestServer(t, newBackupFake(), aliceKey)
	for _, p := range []string{"/v1/remote-snapshots?sandbox=none", "/v1/drills?sandbox=none", "/v1/sandboxes/sb/history?path=/none"} {
		if raw := doRaw(t, srv, http.MethodGet, p, "", http.StatusOK); strings.TrimSpace(raw) != emptyPage {
			t.Errorf("%s: %q, want []", p, raw)
		}
	}
}

func TestOperationsOfAnotherTenantAre404(t *testing.T) {
	f := newBackupFake()
	f.GetOperationFunc = func(_ context.Context, p Principal, id string) (client.Operation, error) {
		if p.TenantID != "t-alice" {
			return client.Operation{}, fmt.Errorf("operation %s: %w", id, errs.ErrNotFound)
		}
		return client.Operation{ID: id, State: client.OperationSucceeded}, nil
	}
	f.WatchOperationFunc = func(_ context.Context, p Principal, id string) (<-chan client.Operation, error) {
		if p.TenantID != "t-alice" {
			return nil, fmt.Errorf("operation %s: %w", id, errs.ErrNotFound)
		}
		ch := make(chan client.Operation, 1)
		ch <- client.Operation{ID: id, State: client.OperationSucceeded}
		return ch, nil // never closed: the stream must end after the final state anyway
	}
	alice, srv := newTestServer(t, f, aliceKey)
	admin, err := client.New(srv.URL, adminKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if _, err := alice.GetOperation(ctx, "op-1"); err != nil {
		t.Fatal(err)
	}
	if o, err := alice.WatchOperation(ctx, "op-1", nil); err != nil || o.State != client.OperationSucceeded {
		t.Fatalf("watch by the owner: %+v %v", o, err)
	}
	if _, err := admin.GetOperation(ctx, "op-1"); !client.IsNotFound(err) {
		t.Errorf("get from another tenant: %v, want 404", err)
	}
	if _, err := admin.WatchOperation(ctx, "op-1", nil); !client.IsNotFound(err) {
		t.Errorf("watch from another tenant: %v, want 404", err)
	}
}

func TestOperationEventsStreamEachStateUntilTheFinalOne(t *testing.T) {
	f := newBackupFake()
	release := make(chan struct{})
	f.WatchOperationFunc = func(ctx context.Context, _ Principal, id string) (<-chan client.Operation, error) {
		ch := make(chan client.Operation)
		go func() {
			defer close(ch)
			for i := int64(1); i <= 3; i++ {
				o := client.Operation{ID: id, Kind: "push", State: client.OperationRunning,
					Progress: &client.Progress{Phase: "push", BytesDone: i * 10, BytesTotal: 40}}
				select {
				case ch <- o:
				case <-ctx.Done():
					return
				}
				if i == 1 {
					<-release // the first event must reach the client before the next is made
				}
			}
			end := time.Now()
			select {
			case ch <- client.Operation{ID: id, Kind: "push", State: client.OperationFailed, Error: "disk on fire", EndedAt: &end}:
			case <-ctx.Done():
			}
		}()
		return ch, nil
	}
	c, srv := newTestServer(t, f, aliceKey)

	var seen []client.Operation
	o, err := c.WatchOperation(testCtx(t), "op-7", func(o client.Operation) {
		if len(seen) == 0 {
			close(release)
		}
		seen = append(seen, o)
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.State != client.OperationFailed || o.Error != "disk on fire" || o.Err() == nil ||
		!strings.Contains(o.Err().Error(), "disk on fire") {
		t.Fatalf("final %+v (err %v)", o, o.Err())
	}
	if len(seen) != 4 || seen[2].Progress.BytesDone != 30 || seen[3].State != client.OperationFailed {
		t.Fatalf("states seen: %+v", seen)
	}

	// On the wire: event: operation, data: the JSON, and the response ends.
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, srv.URL+"/v1/operations/op-7/events", nil)
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	var events, datas int
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == "event: operation":
			events++
		case strings.HasPrefix(line, "data: {"):
			datas++
		}
	}
	if events != 4 || datas != 4 {
		t.Fatalf("%d events, %d data lines; want 4 each", events, datas)
	}
}

func TestWatchOperationAsksAgainWhenTheStreamEndsEarly(t *testing.T) {
	f := newBackupFake()
	f.WatchOperationFunc = func(context.Context, Principal, string) (<-chan client.Operation, error) {
		ch := make(chan client.Operation, 1)
		ch <- client.Operation{ID: "op-1", State: client.OperationRunning}
		close(ch) // e.g. the daemon shutting down
		return ch, nil
	}
	var done atomic.Bool
	f.GetOperationFunc = func(_ context.Context, _ Principal, id string) (client.Operation, error) {
		if done.Load() {
			return client.Operation{ID: id, State: client.OperationSucceeded}, nil
		}
		return client.Operation{ID: id, State: client.OperationRunning}, nil
	}
	c, _ := newTestServer(t, f, aliceKey)
	_, err := c.WatchOperation(testCtx(t), "op-1", nil)
	if err == nil || !strings.Contains(err.Error(), "stead op op-1") {
		t.Fatalf("stream ended early on a running operation: %v, want an error naming stead op", err)
	}
	done.Store(true)
	var last client.Operation
	o, err := c.WatchOperation(testCtx(t), "op-1", func(o client.Operation) { last = o })
	if err != nil || o.State != client.OperationSucceeded || last.State != client.OperationSucceeded {
		t.Fatalf("stream ended early on a finished operation: %+v %v", o, err)
	}
}

func TestWaitOperationReturnsAFinishedOperationWithoutWatching(t *testing.T) {
	f := newBackupFake()
	c, _ := newTestServer(t, f, aliceKey)
	end := time.Now()
	in := client.Operation{ID: "op-1", State: client.OperationSucceeded, EndedAt: &end}
	o, err := c.WaitOperation(testCtx(t), in, func(client.Operation) { t.Error("fn called for a finished operation") })
	if err != nil || o.ID != "op-1" {
		t.Fatalf("%+v %v", o, err)
	}
	if len(f.Calls()) != 0 {
		t.Fatalf("backend called: %v", f.Calls())
	}
	o, err = c.WaitOperation(testCtx(t), client.Operation{ID: "op-2", State: client.OperationRunning}, nil)
	if err != nil || o.State != client.OperationSucceeded || o.ID != "op-2" {
		t.Fatalf("wait on a running operation: %+v %v", o, err)
	}
}

func TestOperationDecodeResult(t *testing.T) {
	o := client.Operation{ID: "op-1", Kind: "push", Result: json.RawMessage(`{"files_read":3,"remote_snapshot":{"id":"3f9a"}}`)}
	var pr client.PushResult
	if err := o.DecodeResult(&pr); err != nil || pr.FilesRead != 3 || pr.RemoteSnapshot.ID != "3f9a" {
		t.Fatalf("%+v %v", pr, err)
	}
	if err := (client.Operation{}).DecodeResult(&pr); err != nil {
		t.Fatalf("no result: %v", err)
	}
	if err := (client.Operation{Result: json.RawMessage(`[`)}).DecodeResult(&pr); err == nil {
		t.Fatal("a broken result decoded")
	}
	var oe *client.OperationError
	if err := (client.Operation{State: client.OperationFailed}).Err(); !errors.As(err, &oe) {
		t.Fatalf("failed operation: %v", err)
	}
	if (client.Operation{State: client.OperationRunning}).Done() || !(client.Operation{State: client.OperationFailed}).Done() {
		t.Fatal("Done is wrong")
	}
}

func TestSandboxTokenReachesOnlyItsFileUndoAndItsOperations(t *testing.T) {
	f := newBackupFake()
	f.AuthenticateFunc = func(context.Context, string) (Principal, error) {
		return Principal{TenantID: "t-alice", KeyID: "sandbox:sb-1", Sandbox: "sb-1", Admin: true}, nil
	}
	// The backend confines operations to the principal it is given (as
	// the service does); the routes must hand it the token's principal.
	var principals []Principal
	var mu sync.Mutex
	scoped := func(p Principal, id string) error {
		mu.Lock()
		principals = append(principals, p)
		mu.Unlock()
		if id == "op-other" && p.Sandbox != "" {
			return fmt.Errorf("operation %s: %w", id, errs.ErrNotFound)
		}
		return nil
	}
	f.GetOperationFunc = func(_ context.Context, p Principal, id string) (client.Operation, error) {
		if err := scoped(p, id); err != nil {
			return client.Operation{}, err
		}
		return client.Operation{ID: id, Target: "sb-1", State: client.OperationSucceeded}, nil
	}
	f.WatchOperationFunc = func(_ context.Context, p Principal, id string) (<-chan client.Operation, error) {
		if err := scoped(p, id); err != nil {
			return nil, err
		}
		ch := make(chan client.Operation, 1)
		ch <- client.Operation{ID: id, Target: "sb-1", State: client.OperationSucceeded}
		return ch, nil
	}
	_, srv := newTestServer(t, f, aliceKey)

	doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb-1/history?path=/workspace/a", "", http.StatusOK)
	doRaw(t, srv, http.MethodPost, "/v1/sandboxes/sb-1/restore-path", `{"path":"/workspace/a","snapshot":"snap-1"}`, http.StatusAccepted)
	doRaw(t, srv, http.MethodGet, "/v1/operations/op-mine", "", http.StatusOK)
	doRaw(t, srv, http.MethodGet, "/v1/operations/op-mine/events", "", http.StatusOK)
	doRaw(t, srv, http.MethodGet, "/v1/operations/op-other", "", http.StatusNotFound)
	doRaw(t, srv, http.MethodGet, "/v1/operations/op-other/events", "", http.StatusNotFound)

	for _, r := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/sandboxes/sb-2/history?path=/a", ""},
		{http.MethodPost, "/v1/sandboxes/sb-2/restore-path", `{"path":"/a","snapshot":"snap-1"}`},
		{http.MethodPost, "/v1/sandboxes/sb-1/push", `{}`},
		{http.MethodPost, "/v1/sandboxes/sb-1/drill", `{}`},
		{http.MethodPost, "/v1/sandboxes/sb-1/archive", ``},
		{http.MethodGet, "/v1/sandboxes/sb-1/backup-policy", ``},
		{http.MethodPut, "/v1/sandboxes/sb-1/backup-policy", `{}`},
		{http.MethodGet, "/v1/repo", ""},
		{http.MethodPost, "/v1/repo/init", ""},
		{http.MethodPost, "/v1/repo/check", `{}`},
		{http.MethodPost, "/v1/repo/repair", `{}`},
		{http.MethodPost, "/v1/repo/prune", `{}`},
		{http.MethodGet, "/v1/remote-snapshots", ""},
		{http.MethodPost, "/v1/remote-snapshots/restore", `{"snapshot":"3f9a"}`},
		{http.MethodPost, "/v1/remote-snapshots/pull", `{"snapshot":"3f9a"}`},
		{http.MethodGet, "/v1/drills", ""},
	} {
		doRaw(t, srv, r.method, r.path, r.body, http.StatusForbidden)
	}
	for _, call := range f.Calls() {
		switch call.Method {
		case "FileHistory", "RestorePath":
			if call.ID != "sb-1" {
				t.Errorf("%s reached sandbox %s", call.Method, call.ID)
			}
		case "GetOperation", "WatchOperation":
		default:
			t.Errorf("a sandbox token reached %s", call.Method)
		}
	}
	for _, p := range principals {
		if p.Sandbox != "sb-1" || p.TenantID != "t-alice" {
			t.Errorf("the operation backend was asked with principal %+v, not the token's", p)
		}
	}
}

func TestSandboxScopeAllowsFileUndoAndOperations(t *testing.T) {
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"/v1/sandboxes/sb-1/history", true},
		{"/v1/sandboxes/sb-1/restore-path", true},
		{"/v1/operations/op-1", true},
		{"/v1/operations/op-1/events", true},
		{"/v1/sandboxes/sb-2/history", false},
		{"/v1/sandboxes/sb-2/restore-path", false},
		{"/v1/sandboxes/sb-1/push", false},
		{"/v1/sandboxes/sb-1/drill", false},
		{"/v1/sandboxes/sb-1/archive", false},
		{"/v1/sandboxes/sb-1/backup-policy", false},
		{"/v1/operations", false},
		{"/v1/operations/", false},
		{"/v1/operations/op-1/cancel", false},
		{"/v1/operations/../sandboxes/sb-2/exec", false},
		{"/v1/operations/op-1/events/x", false},
		{"/v1/repo", false},
		{"/v1/repo/init", false},
		{"/v1/remote-snapshots", false},
		{"/v1/drills", false},
	} {
		if got := sandboxScopeAllows("sb-1", c.path); got != c.ok {
			t.Errorf("%s: got %v want %v", c.path, got, c.ok)
		}
	}
}

func TestBackupRoutesNeedABackupBackend(t *testing.T) {
	fb := &fakeBackend{}
	srv := httptest.NewServer(NewHandler(plainBackend{fb}, Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, aliceKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if _, err := c.RepoInfo(ctx); !client.IsNotFound(err) {
		t.Fatalf("repo info without a BackupBackend: %v, want 404", err)
	}
	if _, err := c.GetOperation(ctx, "op-1"); !client.IsNotFound(err) {
		t.Fatalf("get operation without a BackupBackend: %v, want 404", err)
	}
	doc, err := c.OpenAPI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{`"/v1/repo"`, `"/v1/operations/{id}"`, `/push"`, `"/v1/remote-snapshots"`, `/history"`} {
		if strings.Contains(string(doc), p) {
			t.Errorf("OpenAPI document lists %s, which the backend cannot serve", p)
		}
	}
}

func TestBackupOperationsAreTaggedAndDescribed(t *testing.T) {
	c, _ := newTestServer(t, newBackupFake(), "")
	raw, err := c.OpenAPI(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Summary     string                     `json:"summary"`
			Description string                     `json:"description"`
			Tags        []string                   `json:"tags"`
			Security    []map[string][]string      `json:"security"`
			Responses   map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{ // operation -> starts an operation (200 or 202)
		"GET /v1/repo": false, "POST /v1/repo/init": false, "POST /v1/repo/check": true, "POST /v1/repo/repair": true, "POST /v1/repo/prune": true,
		"GET /v1/operations/{id}": false, "GET /v1/operations/{id}/events": false,
		"POST /v1/sandboxes/{id}/push": true, "GET /v1/remote-snapshots": false,
		"POST /v1/remote-snapshots/restore": true, "POST /v1/remote-snapshots/pull": true,
		"GET /v1/sandboxes/{id}/backup-policy": false, "PUT /v1/sandboxes/{id}/backup-policy": false,
		"POST /v1/sandboxes/{id}/drill": true, "GET /v1/drills": false, "POST /v1/sandboxes/{id}/archive": true,
		"GET /v1/sandboxes/{id}/history": false, "POST /v1/sandboxes/{id}/restore-path": true,
	}
	for w, startsOp := range ops {
		method, path, _ := strings.Cut(w, " ")
		o, ok := doc.Paths[path][strings.ToLower(method)]
		if !ok {
			t.Errorf("%s missing", w)
			continue
		}
		if len(o.Tags) != 1 || o.Summary == "" || len(o.Description) < 80 || len(o.Security) == 0 {
			t.Errorf("%s: tags %v summary %q description %q security %v", w, o.Tags, o.Summary, o.Description, o.Security)
		}
		_, has202 := o.Responses["202"]
		_, has200 := o.Responses["200"]
		if startsOp && (!has202 || !has200) {
			t.Errorf("%s: responses %v, want 200 and 202", w, o.Responses)
		}
	}
}
