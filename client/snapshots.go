package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"
)

// SnapshotIDPrefix starts every snapshot id; Fork uses it to tell a
// snapshot from a sandbox.
const SnapshotIDPrefix = "snap-"

// ForkResult is the response of a fork: the new sandboxes.
type ForkResult struct {
	Sandboxes []Sandbox `json:"sandboxes" doc:"Sandboxes (ids or names)"`
}

// snapshotPath returns the escaped path of a snapshot, plus suffix.
func snapshotPath(id, suffix string) string {
	return "/v1/snapshots/" + url.PathEscape(id) + suffix
}

// CreateSnapshot takes a read-only snapshot of a sandbox (id or name),
// running or stopped; a running sandbox is frozen only for the instant it
// takes (Snapshot.FrozenFor).
func (c *Client) CreateSnapshot(ctx context.Context, sandbox string, req CreateSnapshotRequest) (Snapshot, error) {
	var s Snapshot
	err := c.do(ctx, http.MethodPost, sandboxPath(sandbox, "/snapshots"), nil, req, &s)
	return s, err
}

// ListSnapshots lists the tenant's snapshots, oldest first: all of them
// when sandbox is "", else those taken of that sandbox (id or name). Each
// names its Parent, which makes the list a tree.
func (c *Client) ListSnapshots(ctx context.Context, sandbox string) ([]Snapshot, error) {
	var q url.Values
	if sandbox != "" {
		q = url.Values{"sandbox": {sandbox}}
	}
	list, err := listAll[Snapshot](ctx, c, "/v1/snapshots", q)
	return list, err
}

// GetSnapshot describes a snapshot.
func (c *Client) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	var s Snapshot
	err := c.do(ctx, http.MethodGet, snapshotPath(id, ""), nil, nil, &s)
	return s, err
}

// DeleteSnapshot deletes a snapshot. Sandboxes made from it keep their
// files.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, snapshotPath(id, ""), nil, nil, nil)
}

// Fork creates req.Count new sandboxes (default 1) with the files of
// source and returns them. source is a snapshot id (starting with
// SnapshotIDPrefix, "snap-") or a sandbox id or name, which the daemon
// snapshots first. The new sandboxes are started unless req.NoStart.
func (c *Client) Fork(ctx context.Context, source string, req ForkRequest) ([]Sandbox, error) {
	path := sandboxPath(source, "/fork")
	if strings.HasPrefix(source, SnapshotIDPrefix) {
		path = snapshotPath(source, "/fork")
	}
	var res ForkResult
	if err := c.do(ctx, http.MethodPost, path, nil, req, &res); err != nil {
		return nil, err
	}
	return res.Sandboxes, nil
}

// Rollback returns a sandbox's files to a snapshot in place: the sandbox
// keeps its id, a running one is restarted (its supervised service with
// it), and a safety snapshot of the replaced files is taken first. Roll
// back to RollbackResult.Safety to undo.
func (c *Client) Rollback(ctx context.Context, sandbox, snapshot string) (RollbackResult, error) {
	var res RollbackResult
	err := c.do(ctx, http.MethodPost, sandboxPath(sandbox, "/rollback"), nil, RollbackRequest{Snapshot: snapshot}, &res)
	return res, err
}
