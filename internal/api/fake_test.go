package api

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// Test API keys and the principals they resolve to.
const (
	aliceKey = "key-alice"
	adminKey = "key-admin"
	// aliceAdminKey is an admin key whose home tenant is t-alice.
	aliceAdminKey = "key-alice-admin"
)

// fakeBackend is a function-field Backend that isolates the HTTP layer. Every
// method records the tenant it was called with, then calls its Func if set
// (otherwise it returns zero values, or Err when set).
type fakeBackend struct {
	mu    sync.Mutex
	calls []fakeCall
	// Err, when set, is returned by every method without a Func.
	Err error

	AuthenticateFunc   func(ctx context.Context, secret string) (Principal, error)
	CreateAPIKeyFunc   func(ctx context.Context, p Principal, req client.CreateAPIKeyRequest) (client.APIKey, error)
	CreateSandboxFunc  func(ctx context.Context, tenant string, req client.CreateSandboxRequest) (client.Sandbox, error)
	GetSandboxFunc     func(ctx context.Context, tenant, id string) (client.Sandbox, error)
	ListSandboxesFunc  func(ctx context.Context, tenant string, all bool) ([]client.Sandbox, error)
	DeleteSandboxFunc  func(ctx context.Context, tenant, id string, purge bool) (client.Sandbox, error)
	ExecFunc           func(ctx context.Context, tenant, id string, req client.ExecRequest, out ExecStream) (client.ExecResult, error)
	OpenPTYFunc        func(ctx context.Context, tenant, id string, req PTYRequest) (PTY, error)
	AgentLogFunc       func(ctx context.Context, tenant, id string) (io.ReadCloser, error)
	ReadFileFunc       func(ctx context.Context, tenant, id, path string) (io.ReadCloser, client.FileInfo, error)
	WriteFileFunc      func(ctx context.Context, tenant, id, path string, mode uint32, r io.Reader) (client.FileInfo, error)
	DownloadTarFunc    func(ctx context.Context, tenant, id, path string, w io.Writer) error
	UploadTarFunc      func(ctx context.Context, tenant, id, path string, r io.Reader) error
	ImportTemplateFunc func(ctx context.Context, tenant string, req client.ImportTemplateRequest) (client.Template, error)
	ListTemplatesFunc  func(ctx context.Context, tenant string) ([]client.Template, error)
	StatFileFunc       func(ctx context.Context, tenant, id, path string) (client.FileInfo, error)
	ListFilesFunc      func(ctx context.Context, tenant, id, path string) ([]client.FileInfo, error)
	ResizeSandboxFunc  func(ctx context.Context, tenant, id string, req client.ResizeRequest) (client.Sandbox, error)
	RenameFileFunc     func(ctx context.Context, tenant, id, from, to string) error
	MkdirFunc          func(ctx context.Context, tenant, id, path string, parents bool) error
	RemoveFileFunc     func(ctx context.Context, tenant, id, path string, recursive bool) error
	DeleteTemplateFunc func(ctx context.Context, tenant, id string) error
	LifecycleFunc      func(ctx context.Context, op, tenant, id string) (client.Sandbox, error)

	PutCheckpointFunc       func(ctx context.Context, p Principal, sandbox string, w CheckpointWrite) (client.Checkpoint, error)
	GetCheckpointFunc       func(ctx context.Context, tenant, sandbox, agent, name string, version int64) (client.Checkpoint, error)
	ListCheckpointsFunc     func(ctx context.Context, tenant, sandbox string) ([]client.CheckpointInfo, error)
	CheckpointVersionsFunc  func(ctx context.Context, tenant, sandbox, agent, name string) ([]client.Checkpoint, error)
	RollbackCheckpointFunc  func(ctx context.Context, p Principal, sandbox, agent, name string, req client.RollbackCheckpointRequest) (client.Checkpoint, error)
	SetCheckpointSchemaFunc func(ctx context.Context, p Principal, sandbox, agent, name string, schema []byte) (client.CheckpointInfo, error)
	DeleteCheckpointFunc    func(ctx context.Context, p Principal, sandbox, agent, name string) error
	SetCheckpointPolicyFunc func(ctx context.Context, p Principal, sandbox, agent, name string, req client.SetCheckpointPolicyRequest) (client.CheckpointInfo, error)

	CreateSnapshotFunc func(ctx context.Context, tenant, sandbox string, req client.CreateSnapshotRequest) (client.Snapshot, error)
	ListSnapshotsFunc  func(ctx context.Context, tenant, sandbox string) ([]client.Snapshot, error)
	GetSnapshotFunc    func(ctx context.Context, tenant, id string) (client.Snapshot, error)
	DeleteSnapshotFunc func(ctx context.Context, tenant, id string) error
	ForkFunc           func(ctx context.Context, tenant, source string, req client.ForkRequest) ([]client.Sandbox, error)
	RollbackFunc       func(ctx context.Context, tenant, sandbox string, req client.RollbackRequest) (client.RollbackResult, error)

	CreateVolumeFunc   func(ctx context.Context, tenant string, req client.CreateVolumeRequest) (client.Volume, error)
	ListVolumesFunc    func(ctx context.Context, tenant string, all bool) ([]client.Volume, error)
	GetVolumeFunc      func(ctx context.Context, tenant, id string) (client.Volume, error)
	DeleteVolumeFunc   func(ctx context.Context, tenant, id string, purge bool) (client.Volume, error)
	UndeleteVolumeFunc func(ctx context.Context, tenant, id string) (client.Volume, error)
	AttachVolumeFunc   func(ctx context.Context, tenant, sandbox string, m client.VolumeMount) (client.Sandbox, error)
	DetachVolumeFunc   func(ctx context.Context, tenant, sandbox, path string) (client.Sandbox, error)

	GetNetworkFunc   func(ctx context.Context, tenant, sandbox string) (client.NetworkInfo, error)
	SetNetworkFunc   func(ctx context.Context, tenant, sandbox string, p client.NetworkPolicy) (client.NetworkInfo, error)
	ListPortsFunc    func(ctx context.Context, tenant, sandbox string) ([]client.Port, error)
	ExposePortFunc   func(ctx context.Context, tenant, sandbox string, port int, req client.ExposePortRequest) (client.ExposedPort, error)
	UnexposePortFunc func(ctx context.Context, tenant, sandbox string, port int) error
}

// fakeCall is one recorded backend call.
type fakeCall struct {
	Method, Tenant, ID string
}

var (
	_ Backend           = (*fakeBackend)(nil)
	_ CheckpointBackend = (*fakeBackend)(nil)
	_ SnapshotBackend   = (*fakeBackend)(nil)
	_ VolumeBackend     = (*fakeBackend)(nil)
	_ NetworkBackend    = (*fakeBackend)(nil)
)

func (f *fakeBackend) record(method, tenant, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fakeCall{method, tenant, id})
}

// Calls returns the calls recorded so far.
func (f *fakeBackend) Calls() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeCall(nil), f.calls...)
}

func (f *fakeBackend) sandbox(tenant, id string) (client.Sandbox, error) {
	if f.Err != nil {
		return client.Sandbox{}, f.Err
	}
	return client.Sandbox{ID: id, Name: id, Tenant: tenant, State: "running"}, nil
}

func (f *fakeBackend) Info(ctx context.Context) client.Info {
	f.record("Info", "", "")
	return client.Info{Pool: "dir", Runtime: "fake"}
}

func (f *fakeBackend) Authenticate(ctx context.Context, secret string) (Principal, error) {
	if f.AuthenticateFunc != nil {
		return f.AuthenticateFunc(ctx, secret)
	}
	switch secret {
	case aliceKey:
		return Principal{TenantID: "t-alice", KeyID: "k1"}, nil
	case adminKey:
		return Principal{TenantID: "t-admin", KeyID: "k0", Admin: true}, nil
	case aliceAdminKey:
		return Principal{TenantID: "t-alice", KeyID: "k3", Admin: true}, nil
	}
	return Principal{}, errs.ErrUnauthenticated
}

func (f *fakeBackend) CreateAPIKey(ctx context.Context, p Principal, req client.CreateAPIKeyRequest) (client.APIKey, error) {
	f.record("CreateAPIKey", p.TenantID, req.Name)
	if f.CreateAPIKeyFunc != nil {
		return f.CreateAPIKeyFunc(ctx, p, req)
	}
	return client.APIKey{ID: "k2", Tenant: p.TenantID, Name: req.Name, Admin: req.Admin, Role: req.Role, Secret: "s3cret"}, f.Err
}

func (f *fakeBackend) CreateSandbox(ctx context.Context, tenant string, req client.CreateSandboxRequest) (client.Sandbox, error) {
	f.record("CreateSandbox", tenant, req.Name)
	if f.CreateSandboxFunc != nil {
		return f.CreateSandboxFunc(ctx, tenant, req)
	}
	return f.sandbox(tenant, req.Name)
}

func (f *fakeBackend) GetSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	f.record("GetSandbox", tenant, id)
	if f.GetSandboxFunc != nil {
		return f.GetSandboxFunc(ctx, tenant, id)
	}
	return f.sandbox(tenant, id)
}

func (f *fakeBackend) ListSandboxes(ctx context.Context, tenant string, all bool) ([]client.Sandbox, error) {
	f.record("ListSandboxes", tenant, "")
	if f.ListSandboxesFunc != nil {
		return f.ListSandboxesFunc(ctx, tenant, all)
	}
	return nil, f.Err
}

func (f *fakeBackend) lifecycle(ctx context.Context, op, tenant, id string) (client.Sandbox, error) {
	f.record(op, tenant, id)
	if f.LifecycleFunc != nil {
		return f.LifecycleFunc(ctx, op, tenant, id)
	}
	return f.sandbox(tenant, id)
}

func (f *fakeBackend) StartSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	return f.lifecycle(ctx, "StartSandbox", tenant, id)
}

func (f *fakeBackend) StopSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	return f.lifecycle(ctx, "StopSandbox", tenant, id)
}

func (f *fakeBackend) PauseSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	return f.lifecycle(ctx, "PauseSandbox", tenant, id)
}

func (f *fakeBackend) ResumeSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	return f.lifecycle(ctx, "ResumeSandbox", tenant, id)
}

func (f *fakeBackend) UndeleteSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	return f.lifecycle(ctx, "UndeleteSandbox", tenant, id)
}

func (f *fakeBackend) DeleteSandbox(ctx context.Context, tenant, id string, purge bool) (client.Sandbox, error) {
	f.record("DeleteSandbox", tenant, id)
	if f.DeleteSandboxFunc != nil {
		return f.DeleteSandboxFunc(ctx, tenant, id, purge)
	}
	return f.sandbox(tenant, id)
}

func (f *fakeBackend) ResizeSandbox(ctx context.Context, tenant, id string, req client.ResizeRequest) (client.Sandbox, error) {
	f.record("ResizeSandbox", tenant, id)
	if f.ResizeSandboxFunc != nil {
		return f.ResizeSandboxFunc(ctx, tenant, id, req)
	}
	return f.sandbox(tenant, id)
}

func (f *fakeBackend) Exec(ctx context.Context, tenant, id string, req client.ExecRequest, out ExecStream) (client.ExecResult, error) {
	f.record("Exec", tenant, id)
	if f.ExecFunc != nil {
		return f.ExecFunc(ctx, tenant, id, req, out)
	}
	if f.Err != nil {
		return client.ExecResult{}, f.Err
	}
	if err := out.Stdout([]byte(strings.Join(req.Command, " "))); err != nil {
		return client.ExecResult{}, err
	}
	return client.ExecResult{ExitCode: 0}, nil
}

func (f *fakeBackend) OpenPTY(ctx context.Context, tenant, id string, req PTYRequest) (PTY, error) {
	f.record("OpenPTY", tenant, id)
	if f.OpenPTYFunc != nil {
		return f.OpenPTYFunc(ctx, tenant, id, req)
	}
	if f.Err != nil {
		return nil, f.Err
	}
	return newEchoPTY(), nil
}

func (f *fakeBackend) ServiceInput(ctx context.Context, tenant, id string, data []byte) error {
	f.record("ServiceInput", tenant, id)
	return f.Err
}

func (f *fakeBackend) AgentLog(ctx context.Context, tenant, id string) (io.ReadCloser, error) {
	f.record("AgentLog", tenant, id)
	if f.AgentLogFunc != nil {
		return f.AgentLogFunc(ctx, tenant, id)
	}
	if f.Err != nil {
		return nil, f.Err
	}
	return io.NopCloser(strings.NewReader("agent started\n")), nil
}

func (f *fakeBackend) ReadFile(ctx context.Context, tenant, id, path string) (io.ReadCloser, client.FileInfo, error) {
	f.record("ReadFile", tenant, id)
	if f.ReadFileFunc != nil {
		return f.ReadFileFunc(ctx, tenant, id, path)
	}
	if f.Err != nil {
		return nil, client.FileInfo{}, f.Err
	}
	return io.NopCloser(strings.NewReader("hello")), client.FileInfo{Path: path, Type: "file", Size: 5}, nil
}

func (f *fakeBackend) WriteFile(ctx context.Context, tenant, id, path string, mode uint32, r io.Reader) (client.FileInfo, error) {
	f.record("WriteFile", tenant, id)
	if f.WriteFileFunc != nil {
		return f.WriteFileFunc(ctx, tenant, id, path, mode, r)
	}
	n, err := io.Copy(io.Discard, r)
	if err != nil {
		return client.FileInfo{}, err
	}
	return client.FileInfo{Path: path, Type: "file", Size: n, Mode: mode}, f.Err
}

func (f *fakeBackend) StatFile(ctx context.Context, tenant, id, path string) (client.FileInfo, error) {
	f.record("StatFile", tenant, id)
	if f.StatFileFunc != nil {
		return f.StatFileFunc(ctx, tenant, id, path)
	}
	return client.FileInfo{Path: path, Type: "dir"}, f.Err
}

func (f *fakeBackend) ListFiles(ctx context.Context, tenant, id, path string) ([]client.FileInfo, error) {
	f.record("ListFiles", tenant, id)
	if f.ListFilesFunc != nil {
		return f.ListFilesFunc(ctx, tenant, id, path)
	}
	return []client.FileInfo{{Name: "a", Path: path + "/a", Type: "file"}}, f.Err
}

func (f *fakeBackend) Mkdir(ctx context.Context, tenant, id, path string, parents bool) error {
	f.record("Mkdir", tenant, id)
	if f.MkdirFunc != nil {
		return f.MkdirFunc(ctx, tenant, id, path, parents)
	}
	return f.Err
}

func (f *fakeBackend) RemoveFile(ctx context.Context, tenant, id, path string, recursive bool) error {
	f.record("RemoveFile", tenant, id)
	if f.RemoveFileFunc != nil {
		return f.RemoveFileFunc(ctx, tenant, id, path, recursive)
	}
	return f.Err
}

func (f *fakeBackend) RenameFile(ctx context.Context, tenant, id, from, to string) error {
	f.record("RenameFile", tenant, id)
	if f.RenameFileFunc != nil {
		return f.RenameFileFunc(ctx, tenant, id, from, to)
	}
	return f.Err
}

func (f *fakeBackend) DownloadTar(ctx context.Context, tenant, id, path string, w io.Writer) error {
	f.record("DownloadTar", tenant, id)
	if f.DownloadTarFunc != nil {
		return f.DownloadTarFunc(ctx, tenant, id, path, w)
	}
	return f.Err
}

func (f *fakeBackend) UploadTar(ctx context.Context, tenant, id, path string, r io.Reader) error {
	f.record("UploadTar", tenant, id)
	if f.UploadTarFunc != nil {
		return f.UploadTarFunc(ctx, tenant, id, path, r)
	}
	_, _ = io.Copy(io.Discard, r)
	return f.Err
}

func (f *fakeBackend) ListTemplates(ctx context.Context, tenant string) ([]client.Template, error) {
	f.record("ListTemplates", tenant, "")
	if f.ListTemplatesFunc != nil {
		return f.ListTemplatesFunc(ctx, tenant)
	}
	return []client.Template{{ID: "host", Kind: "host"}}, f.Err
}

func (f *fakeBackend) ImportTemplate(ctx context.Context, tenant string, req client.ImportTemplateRequest) (client.Template, error) {
	f.record("ImportTemplate", tenant, req.ID)
	if f.ImportTemplateFunc != nil {
		return f.ImportTemplateFunc(ctx, tenant, req)
	}
	return client.Template{ID: req.ID, Kind: "oci", Source: req.Source}, f.Err
}

func (f *fakeBackend) DeleteTemplate(ctx context.Context, tenant, id string) error {
	f.record("DeleteTemplate", tenant, id)
	if f.DeleteTemplateFunc != nil {
		return f.DeleteTemplateFunc(ctx, tenant, id)
	}
	return f.Err
}

func (f *fakeBackend) PutCheckpoint(ctx context.Context, p Principal, sandbox string, w CheckpointWrite) (client.Checkpoint, error) {
	f.record("PutCheckpoint", p.TenantID, sandbox)
	if f.PutCheckpointFunc != nil {
		return f.PutCheckpointFunc(ctx, p, sandbox, w)
	}
	return client.Checkpoint{Name: w.Name, Agent: w.Agent, Version: 1, Principal: p.KeyID, Run: w.Run}, f.Err
}

func (f *fakeBackend) GetCheckpoint(ctx context.Context, tenant, sandbox, agent, name string, version int64) (client.Checkpoint, error) {
	f.record("GetCheckpoint", tenant, sandbox)
	if f.GetCheckpointFunc != nil {
		return f.GetCheckpointFunc(ctx, tenant, sandbox, agent, name, version)
	}
	if version == 0 {
		version = 1
	}
	return client.Checkpoint{Name: name, Agent: agent, Version: version, Body: []byte(`{"fake":true}`)}, f.Err
}

func (f *fakeBackend) ListCheckpoints(ctx context.Context, tenant, sandbox string) ([]client.CheckpointInfo, error) {
	f.record("ListCheckpoints", tenant, sandbox)
	if f.ListCheckpointsFunc != nil {
		return f.ListCheckpointsFunc(ctx, tenant, sandbox)
	}
	return nil, f.Err
}

func (f *fakeBackend) CheckpointVersions(ctx context.Context, tenant, sandbox, agent, name string) ([]client.Checkpoint, error) {
	f.record("CheckpointVersions", tenant, sandbox)
	if f.CheckpointVersionsFunc != nil {
		return f.CheckpointVersionsFunc(ctx, tenant, sandbox, agent, name)
	}
	return []client.Checkpoint{{Name: name, Agent: agent, Version: 1}}, f.Err
}

func (f *fakeBackend) RollbackCheckpoint(ctx context.Context, p Principal, sandbox, agent, name string, req client.RollbackCheckpointRequest) (client.Checkpoint, error) {
	f.record("RollbackCheckpoint", p.TenantID, sandbox)
	if f.RollbackCheckpointFunc != nil {
		return f.RollbackCheckpointFunc(ctx, p, sandbox, agent, name, req)
	}
	return client.Checkpoint{Name: name, Agent: agent, Version: 2, Principal: p.KeyID}, f.Err
}

func (f *fakeBackend) SetCheckpointSchema(ctx context.Context, p Principal, sandbox, agent, name string, schema []byte) (client.CheckpointInfo, error) {
	f.record("SetCheckpointSchema", p.TenantID, sandbox)
	if f.SetCheckpointSchemaFunc != nil {
		return f.SetCheckpointSchemaFunc(ctx, p, sandbox, agent, name, schema)
	}
	return client.CheckpointInfo{Name: name, Agent: agent, Schema: schema}, f.Err
}

func (f *fakeBackend) DeleteCheckpoint(ctx context.Context, p Principal, sandbox, agent, name string) error {
	f.record("DeleteCheckpoint", p.TenantID, sandbox)
	if f.DeleteCheckpointFunc != nil {
		return f.DeleteCheckpointFunc(ctx, p, sandbox, agent, name)
	}
	return f.Err
}

func (f *fakeBackend) SetCheckpointPolicy(ctx context.Context, p Principal, sandbox, agent, name string, req client.SetCheckpointPolicyRequest) (client.CheckpointInfo, error) {
	f.record("SetCheckpointPolicy", p.TenantID, sandbox)
	if f.SetCheckpointPolicyFunc != nil {
		return f.SetCheckpointPolicyFunc(ctx, p, sandbox, agent, name, req)
	}
	return client.CheckpointInfo{Name: name, Agent: agent, Keep: req.Keep,
		Policy: client.CheckpointPolicy{Write: req.Write, Read: req.Read, Mutability: req.Mutability}}, f.Err
}

func (f *fakeBackend) CreateSnapshot(ctx context.Context, tenant, sandbox string, req client.CreateSnapshotRequest) (client.Snapshot, error) {
	f.record("CreateSnapshot", tenant, sandbox)
	if f.CreateSnapshotFunc != nil {
		return f.CreateSnapshotFunc(ctx, tenant, sandbox, req)
	}
	return client.Snapshot{ID: "snap-1", Sandbox: sandbox, SandboxName: sandbox, Label: req.Label,
		Description: req.Description, Kind: "user"}, f.Err
}

func (f *fakeBackend) ListSnapshots(ctx context.Context, tenant, sandbox string) ([]client.Snapshot, error) {
	f.record("ListSnapshots", tenant, sandbox)
	if f.ListSnapshotsFunc != nil {
		return f.ListSnapshotsFunc(ctx, tenant, sandbox)
	}
	return nil, f.Err
}

func (f *fakeBackend) GetSnapshot(ctx context.Context, tenant, id string) (client.Snapshot, error) {
	f.record("GetSnapshot", tenant, id)
	if f.GetSnapshotFunc != nil {
		return f.GetSnapshotFunc(ctx, tenant, id)
	}
	return client.Snapshot{ID: id, Sandbox: "sb-1", Kind: "user"}, f.Err
}

func (f *fakeBackend) DeleteSnapshot(ctx context.Context, tenant, id string) error {
	f.record("DeleteSnapshot", tenant, id)
	if f.DeleteSnapshotFunc != nil {
		return f.DeleteSnapshotFunc(ctx, tenant, id)
	}
	return f.Err
}

func (f *fakeBackend) Fork(ctx context.Context, tenant, source string, req client.ForkRequest) ([]client.Sandbox, error) {
	f.record("Fork", tenant, source)
	if f.ForkFunc != nil {
		return f.ForkFunc(ctx, tenant, source, req)
	}
	if f.Err != nil {
		return nil, f.Err
	}
	n := max(req.Count, 1)
	sbs := make([]client.Sandbox, n)
	for i := range sbs {
		sbs[i] = client.Sandbox{ID: fmt.Sprintf("sb-fork%d", i), Name: fmt.Sprintf("fork-%d", i), Tenant: tenant, State: "running"}
	}
	return sbs, nil
}

func (f *fakeBackend) Rollback(ctx context.Context, tenant, sandbox string, req client.RollbackRequest) (client.RollbackResult, error) {
	f.record("Rollback", tenant, sandbox)
	if f.RollbackFunc != nil {
		return f.RollbackFunc(ctx, tenant, sandbox, req)
	}
	sb, err := f.sandbox(tenant, sandbox)
	return client.RollbackResult{Sandbox: sb, Safety: client.Snapshot{ID: "snap-safety", Sandbox: sandbox, Kind: "safety", Parent: req.Snapshot}}, err
}

func (f *fakeBackend) volume(tenant, id, state string) (client.Volume, error) {
	if f.Err != nil {
		return client.Volume{}, f.Err
	}
	return client.Volume{ID: "vol-1", Name: id, Tenant: tenant, SizeBytes: 10 << 30, State: state}, nil
}

func (f *fakeBackend) CreateVolume(ctx context.Context, tenant string, req client.CreateVolumeRequest) (client.Volume, error) {
	f.record("CreateVolume", tenant, req.Name)
	if f.CreateVolumeFunc != nil {
		return f.CreateVolumeFunc(ctx, tenant, req)
	}
	return f.volume(tenant, req.Name, "available")
}

func (f *fakeBackend) ListVolumes(ctx context.Context, tenant string, all bool) ([]client.Volume, error) {
	f.record("ListVolumes", tenant, "")
	if f.ListVolumesFunc != nil {
		return f.ListVolumesFunc(ctx, tenant, all)
	}
	return nil, f.Err
}

func (f *fakeBackend) GetVolume(ctx context.Context, tenant, id string) (client.Volume, error) {
	f.record("GetVolume", tenant, id)
	if f.GetVolumeFunc != nil {
		return f.GetVolumeFunc(ctx, tenant, id)
	}
	return f.volume(tenant, id, "available")
}

func (f *fakeBackend) DeleteVolume(ctx context.Context, tenant, id string, purge bool) (client.Volume, error) {
	f.record("DeleteVolume", tenant, id)
	if f.DeleteVolumeFunc != nil {
		return f.DeleteVolumeFunc(ctx, tenant, id, purge)
	}
	return f.volume(tenant, id, "deleted")
}

func (f *fakeBackend) UndeleteVolume(ctx context.Context, tenant, id string) (client.Volume, error) {
	f.record("UndeleteVolume", tenant, id)
	if f.UndeleteVolumeFunc != nil {
		return f.UndeleteVolumeFunc(ctx, tenant, id)
	}
	return f.volume(tenant, id, "available")
}

func (f *fakeBackend) AttachVolume(ctx context.Context, tenant, sandbox string, m client.VolumeMount) (client.Sandbox, error) {
	f.record("AttachVolume", tenant, sandbox)
	if f.AttachVolumeFunc != nil {
		return f.AttachVolumeFunc(ctx, tenant, sandbox, m)
	}
	return f.sandbox(tenant, sandbox)
}

func (f *fakeBackend) DetachVolume(ctx context.Context, tenant, sandbox, path string) (client.Sandbox, error) {
	f.record("DetachVolume", tenant, sandbox)
	if f.DetachVolumeFunc != nil {
		return f.DetachVolumeFunc(ctx, tenant, sandbox, path)
	}
	return f.sandbox(tenant, sandbox)
}

func (f *fakeBackend) GetNetwork(ctx context.Context, tenant, sandbox string) (client.NetworkInfo, error) {
	f.record("GetNetwork", tenant, sandbox)
	if f.GetNetworkFunc != nil {
		return f.GetNetworkFunc(ctx, tenant, sandbox)
	}
	if f.Err != nil {
		return client.NetworkInfo{}, f.Err
	}
	return client.NetworkInfo{Enabled: true, Address: "10.88.0.2", Gateway: "10.88.0.1"}, nil
}

func (f *fakeBackend) SetNetwork(ctx context.Context, tenant, sandbox string, p client.NetworkPolicy) (client.NetworkInfo, error) {
	f.record("SetNetwork", tenant, sandbox)
	if f.SetNetworkFunc != nil {
		return f.SetNetworkFunc(ctx, tenant, sandbox, p)
	}
	if f.Err != nil {
		return client.NetworkInfo{}, f.Err
	}
	return client.NetworkInfo{Enabled: true, Address: "10.88.0.2", Gateway: "10.88.0.1", Policy: p}, nil
}

func (f *fakeBackend) ListPorts(ctx context.Context, tenant, sandbox string) ([]client.Port, error) {
	f.record("ListPorts", tenant, sandbox)
	if f.ListPortsFunc != nil {
		return f.ListPortsFunc(ctx, tenant, sandbox)
	}
	return nil, f.Err
}

func (f *fakeBackend) ExposePort(ctx context.Context, tenant, sandbox string, port int, req client.ExposePortRequest) (client.ExposedPort, error) {
	f.record("ExposePort", tenant, sandbox)
	if f.ExposePortFunc != nil {
		return f.ExposePortFunc(ctx, tenant, sandbox, port, req)
	}
	if f.Err != nil {
		return client.ExposedPort{}, f.Err
	}
	ep := client.ExposedPort{Port: client.Port{Port: port, Public: req.Public}}
	if !req.Public {
		ep.Token = "tok"
	}
	return ep, nil
}

func (f *fakeBackend) UnexposePort(ctx context.Context, tenant, sandbox string, port int) error {
	f.record("UnexposePort", tenant, sandbox)
	if f.UnexposePortFunc != nil {
		return f.UnexposePortFunc(ctx, tenant, sandbox, port)
	}
	return f.Err
}

// echoPTY is a terminal that echoes its input. Writing "exit N\n" ends the
// process with exit code N. Resizes are recorded.
type echoPTY struct {
	mu      sync.Mutex
	pr      *io.PipeReader
	pw      *io.PipeWriter
	resizes [][2]uint16
	done    chan struct{}
	code    int
	once    sync.Once
}

func newEchoPTY() *echoPTY {
	pr, pw := io.Pipe()
	return &echoPTY{pr: pr, pw: pw, done: make(chan struct{})}
}

func (p *echoPTY) Read(b []byte) (int, error) { return p.pr.Read(b) }

func (p *echoPTY) Write(b []byte) (int, error) {
	s := string(b)
	if rest, ok := strings.CutPrefix(s, "exit "); ok {
		code := 0
		for _, c := range strings.TrimSpace(rest) {
			code = code*10 + int(c-'0')
		}
		_, _ = p.pw.Write([]byte("bye\r\n"))
		p.finish(code)
		return len(b), nil
	}
	return p.pw.Write(b)
}

func (p *echoPTY) finish(code int) {
	p.once.Do(func() {
		p.mu.Lock()
		p.code = code
		p.mu.Unlock()
		_ = p.pw.Close()
		close(p.done)
	})
}

func (p *echoPTY) Resize(rows, cols uint16) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resizes = append(p.resizes, [2]uint16{rows, cols})
	_, _ = p.pw.Write([]byte("resized\r\n"))
	return nil
}

func (p *echoPTY) Resizes() [][2]uint16 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][2]uint16(nil), p.resizes...)
}

func (p *echoPTY) Close() error {
	p.finish(129)
	return nil
}

func (p *echoPTY) Wait() (int, error) {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code, nil
}
