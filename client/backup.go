package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// States of an Operation.
const (
	OperationRunning   = "running"
	OperationSucceeded = "succeeded"
	OperationFailed    = "failed"
)

// Done reports whether the operation has ended (succeeded or failed).
func (o Operation) Done() bool { return o.State != "" && o.State != OperationRunning }

// Err returns an *OperationError when the operation failed, else nil.
func (o Operation) Err() error {
	if o.State != OperationFailed {
		return nil
	}
	return &OperationError{Op: o}
}

// DecodeResult decodes the operation's kind-specific Result (PushResult,
// RestoreResult, CheckResult, RepairResult, RepoPruneResult, Drill) into v. An operation
// without a result leaves v unchanged.
func (o Operation) DecodeResult(v any) error {
	if len(o.Result) == 0 || string(o.Result) == "null" {
		return nil
	}
	if err := json.Unmarshal(o.Result, v); err != nil {
		return fmt.Errorf("decode result of operation %s (%s): %w", o.ID, o.Kind, err)
	}
	return nil
}

// OperationError is a failed operation.
type OperationError struct {
	Op Operation
}

// Error names the operation and says why it failed.
func (e *OperationError) Error() string {
	msg := e.Op.Error
	if msg == "" {
		msg = "failed"
	}
	what := e.Op.Kind
	if e.Op.Target != "" {
		what += " " + e.Op.Target
	}
	return fmt.Sprintf("%s (operation %s): %s", what, e.Op.ID, msg)
}

// operationPath returns the escaped path of an operation, plus suffix.
func operationPath(id, suffix string) string {
	return "/v1/operations/" + url.PathEscape(id) + suffix
}

// startOperation sends a request that starts an operation and returns it
// (running, or final when the request asked to wait).
func (c *Client) startOperation(ctx context.Context, path string, query url.Values, in any) (Operation, error) {
	var o Operation
	err := c.do(ctx, http.MethodPost, path, query, in, &o)
	return o, err
}

// RepoInfo describes the daemon's off-box repository (every key scope in
// it for an admin key).
func (c *Client) RepoInfo(ctx context.Context) (RepoInfo, error) {
	var ri RepoInfo
	err := c.do(ctx, http.MethodGet, "/v1/repo", nil, nil, &ri)
	return ri, err
}

// InitRepo initialises the daemon's configured repository and its master
// key; it needs an admin key. Back up RepoInfo.KeyFile.
func (c *Client) InitRepo(ctx context.Context) (RepoInfo, error) {
	var ri RepoInfo
	err := c.do(ctx, http.MethodPost, "/v1/repo/init", nil, nil, &ri)
	return ri, err
}

// CheckRepo starts a check of the repository (the caller's tenant scope;
// every scope for an admin). Its Result is a CheckResult.
func (c *Client) CheckRepo(ctx context.Context, req CheckRequest) (Operation, error) {
	return c.startOperation(ctx, "/v1/repo/check", nil, req)
}

// RepairRepo starts repairing what a check found damaged (the caller's
// tenant scope; every scope for an admin). Its Result is a RepairResult.
func (c *Client) RepairRepo(ctx context.Context, req RepairRequest) (Operation, error) {
	return c.startOperation(ctx, "/v1/repo/repair", nil, req)
}

// PruneRepo starts applying retention to the tenant's pushed snapshots
// and dropping unreferenced data. Its Result is a RepoPruneResult.
func (c *Client) PruneRepo(ctx context.Context, req PruneRequest) (Operation, error) {
	return c.startOperation(ctx, "/v1/repo/prune", nil, req)
}

// GetOperation returns an operation's current state.
func (c *Client) GetOperation(ctx context.Context, id string) (Operation, error) {
	var o Operation
	err := c.do(ctx, http.MethodGet, operationPath(id, ""), nil, nil, &o)
	return o, err
}

// WatchOperation follows an operation over its event stream, calling fn
// (when not nil) with each state as it changes, the final one included,
// and returns the final state. A failed operation is returned without an
// error (see Operation.Err); the error is for the watch itself: the
// operation is unknown, ctx ended, or the stream broke (then the operation
// carries on in the daemon).
func (c *Client) WatchOperation(ctx context.Context, id string, fn func(Operation)) (Operation, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: operationPath(id, "/events"), accept: "text/event-stream"})
	if err != nil {
		return Operation{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	var last Operation
	err = readSSE(resp.Body, func(name string, data []byte) (bool, error) {
		switch name {
		case "operation":
			var o Operation
			if err := json.Unmarshal(data, &o); err != nil {
				return false, fmt.Errorf("watch operation %s: decode event: %w", id, err)
			}
			last = o
			if fn != nil {
				fn(o)
			}
			return o.Done(), nil
		case "error":
			var p struct {
				Error string `json:"error" doc:"What went wrong, if anything"`
			}
			_ = json.Unmarshal(data, &p)
			return false, fmt.Errorf("watch operation %s: %s", id, p.Error)
		}
		return false, nil
	})
	switch {
	case err == nil:
		return last, nil
	case ctx.Err() != nil:
		return last, fmt.Errorf("watch operation %s: %w", id, ctx.Err())
	case errors.Is(err, errStreamEnded):
		// The daemon closed the stream without a final state (it went
		// away, or a proxy cut the connection): ask once more.
		o, gerr := c.GetOperation(ctx, id)
		if gerr == nil && o.Done() {
			if fn != nil {
				fn(o)
			}
			return o, nil
		}
		return last, fmt.Errorf("watch operation %s: the event stream ended before the operation did "+
			"(it may still run: stead op %s)", id, id)
	}
	return last, err
}

// WaitOperation returns op if it has already ended, else follows it with
// WatchOperation (fn sees each state) until it does.
func (c *Client) WaitOperation(ctx context.Context, op Operation, fn func(Operation)) (Operation, error) {
	if op.Done() {
		return op, nil
	}
	return c.WatchOperation(ctx, op.ID, fn)
}

// Push starts pushing a sandbox (id or name) to the repository: a new
// snapshot of it, or req.Snapshot. Its Result is a PushResult.
func (c *Client) Push(ctx context.Context, sandbox string, req PushRequest) (Operation, error) {
	return c.startOperation(ctx, sandboxPath(sandbox, "/push"), nil, req)
}

// ListRemoteSnapshots lists the tenant's pushed snapshots, oldest first:
// all of them when sandbox is "", else those of that sandbox (id or name).
func (c *Client) ListRemoteSnapshots(ctx context.Context, sandbox string) ([]RemoteSnapshot, error) {
	var q url.Values
	if sandbox != "" {
		q = url.Values{"sandbox": {sandbox}}
	}
	list, err := listAll[RemoteSnapshot](ctx, c, "/v1/remote-snapshots", q)
	return list, err
}

// RestoreRemote starts restoring a pushed snapshot (req.Snapshot, or the
// latest of req.Sandbox) into a new sandbox. Its Result is a
// RestoreResult.
func (c *Client) RestoreRemote(ctx context.Context, req RestoreRequest) (Operation, error) {
	return c.startOperation(ctx, "/v1/remote-snapshots/restore", nil, req)
}

// PullRemote starts copying a pushed snapshot into a new local snapshot.
// Its Result is a RestoreResult whose Snapshot is the local snapshot.
func (c *Client) PullRemote(ctx context.Context, req PullRequest) (Operation, error) {
	return c.startOperation(ctx, "/v1/remote-snapshots/pull", nil, req)
}

// GetBackupPolicy returns a sandbox's push schedule and retention.
func (c *Client) GetBackupPolicy(ctx context.Context, sandbox string) (BackupPolicy, error) {
	var p BackupPolicy
	err := c.do(ctx, http.MethodGet, sandboxPath(sandbox, "/backup-policy"), nil, nil, &p)
	return p, err
}

// SetBackupPolicy replaces a sandbox's push schedule and retention and
// returns the policy now in force.
func (c *Client) SetBackupPolicy(ctx context.Context, sandbox string, p BackupPolicy) (BackupPolicy, error) {
	var res BackupPolicy
	err := c.do(ctx, http.MethodPut, sandboxPath(sandbox, "/backup-policy"), nil, p, &res)
	return res, err
}

// Drill starts a disaster-recovery drill of a sandbox's latest push. Its
// Result is a Drill.
func (c *Client) Drill(ctx context.Context, sandbox string, req DrillRequest) (Operation, error) {
	return c.startOperation(ctx, sandboxPath(sandbox, "/drill"), nil, req)
}

// ListDrills lists recorded drills, newest first: all of them when
// sandbox is "", else that sandbox's.
func (c *Client) ListDrills(ctx context.Context, sandbox string) ([]Drill, error) {
	var q url.Values
	if sandbox != "" {
		q = url.Values{"sandbox": {sandbox}}
	}
	list, err := listAll[Drill](ctx, c, "/v1/drills", q)
	return list, err
}

// Archive starts archiving a stopped sandbox: push, verify, free its local
// disk. With wait the call returns when that is done.
func (c *Client) Archive(ctx context.Context, sandbox string, wait bool) (Operation, error) {
	var q url.Values
	if wait {
		q = url.Values{"wait": {strconv.FormatBool(wait)}}
	}
	return c.startOperation(ctx, sandboxPath(sandbox, "/archive"), q, nil)
}

// FileHistory lists the versions of path across the sandbox's local and
// pushed snapshots, newest first.
func (c *Client) FileHistory(ctx context.Context, sandbox, path string) ([]FileVersion, error) {
	list, err := listAll[FileVersion](ctx, c, sandboxPath(sandbox, "/history"), url.Values{"path": {path}})
	return list, err
}

// RestorePath starts bringing back one path of a local or pushed snapshot
// into the sandbox.
func (c *Client) RestorePath(ctx context.Context, sandbox string, req RestorePathRequest) (Operation, error) {
	return c.startOperation(ctx, sandboxPath(sandbox, "/restore-path"), nil, req)
}

// Hydrate starts bringing an archived sandbox back from the repository
// (it stays stopped). Its Result is the Sandbox.
func (c *Client) Hydrate(ctx context.Context, sandbox string, wait bool) (Operation, error) {
	var q url.Values
	if wait {
		q = url.Values{"wait": {"true"}}
	}
	return c.startOperation(ctx, sandboxPath(sandbox, "/hydrate"), q, nil)
}

// PushVolume starts pushing a volume (id or name). Its Result is a PushResult.
func (c *Client) PushVolume(ctx context.Context, volume string, req PushVolumeRequest) (Operation, error) {
	return c.startOperation(ctx, "/v1/volumes/"+url.PathEscape(volume)+"/push", nil, req)
}

// ListVolumePushes lists the tenant's pushed volume snapshots (of one
// volume when set).
func (c *Client) ListVolumePushes(ctx context.Context, volume string) ([]RemoteSnapshot, error) {
	var q url.Values
	if volume != "" {
		q = url.Values{"volume": {volume}}
	}
	list, err := listAll[RemoteSnapshot](ctx, c, "/v1/volume-snapshots", q)
	return list, err
}

// RestoreVolume starts restoring a pushed volume snapshot into a new
// volume. Its Result is a VolumeRestoreResult.
func (c *Client) RestoreVolume(ctx context.Context, req RestoreVolumeRequest) (Operation, error) {
	return c.startOperation(ctx, "/v1/volume-snapshots/restore", nil, req)
}

// CreateVolumeSnapshot takes a read-only local snapshot of a volume.
func (c *Client) CreateVolumeSnapshot(ctx context.Context, volume string, req CreateSnapshotRequest) (Snapshot, error) {
	var sn Snapshot
	err := c.do(ctx, http.MethodPost, "/v1/volumes/"+url.PathEscape(volume)+"/snapshots", nil, req, &sn)
	return sn, err
}

// ListVolumeSnapshots lists a volume's local snapshots.
func (c *Client) ListVolumeSnapshots(ctx context.Context, volume string) ([]Snapshot, error) {
	list, err := listAll[Snapshot](ctx, c, "/v1/volumes/"+url.PathEscape(volume)+"/snapshots", nil)
	return list, err
}
