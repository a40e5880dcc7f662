package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// PutCheckpointOptions qualify a checkpoint put.
type PutCheckpointOptions struct {
	// Agent is the named agent within the sandbox ("" for the default).
	Agent string
	// IfVersion, when set, is the latest version the document must have
	// (0: it must not exist yet); otherwise the put fails with a 409
	// (IsConflict) and changes nothing. new(int64(3)) makes one.
	IfVersion *int64
	// Run is a run id recorded as provenance.
	Run string
	// Keep, when > 0, sets the document's history depth (default 10).
	Keep int
}

// checkpointsPath returns the path of a sandbox's checkpoint route: the
// collection, or a document (name) plus suffix.
func checkpointsPath(sandbox, name, suffix string) string {
	p := sandboxPath(sandbox, "/checkpoints")
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p + suffix
}

// agentQuery is ?agent= for a non-default agent.
func agentQuery(agent string) url.Values {
	q := url.Values{}
	if agent != "" {
		q.Set("agent", agent)
	}
	return q
}

// PutCheckpoint writes body, a JSON document, as the next version of
// checkpoint document name of a sandbox, atomically. A body that is not
// JSON or fails the document's schema is a 400 (IsInvalid); a failed
// IfVersion check is a 409 (IsConflict). The returned version carries no
// body.
func (c *Client) PutCheckpoint(ctx context.Context, sandbox, name string, body []byte, opts PutCheckpointOptions) (Checkpoint, error) {
	q := agentQuery(opts.Agent)
	if opts.Run != "" {
		q.Set("run", opts.Run)
	}
	if opts.Keep != 0 {
		q.Set("keep", strconv.Itoa(opts.Keep))
	}
	h := http.Header{}
	if opts.IfVersion != nil {
		h.Set("If-Match", `"`+strconv.FormatInt(*opts.IfVersion, 10)+`"`)
	}
	resp, err := c.send(ctx, request{
		method: http.MethodPut,
		path:   checkpointsPath(sandbox, name, ""),
		query:  q,
		body:   bytes.NewReader(body),
		ctype:  "application/json",
		header: h,
	})
	if err != nil {
		return Checkpoint{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	var cp Checkpoint
	if err := json.NewDecoder(resp.Body).Decode(&cp); err != nil {
		return Checkpoint{}, fmt.Errorf("decode put checkpoint result: %w", err)
	}
	return cp, nil
}

// GetCheckpoint reads version (0: the latest) of a checkpoint document,
// body included.
func (c *Client) GetCheckpoint(ctx context.Context, sandbox, agent, name string, version int64) (Checkpoint, error) {
	q := agentQuery(agent)
	if version != 0 {
		q.Set("version", strconv.FormatInt(version, 10))
	}
	var cp Checkpoint
	err := c.do(ctx, http.MethodGet, checkpointsPath(sandbox, name, ""), q, nil, &cp)
	return cp, err
}

// ListCheckpoints describes every checkpoint document of a sandbox, all
// agents, ordered by agent, then name.
func (c *Client) ListCheckpoints(ctx context.Context, sandbox string) ([]CheckpointInfo, error) {
	list, err := listAll[CheckpointInfo](ctx, c, checkpointsPath(sandbox, "", ""), nil)
	return list, err
}

// CheckpointVersions lists the kept versions of a checkpoint document,
// oldest first, without bodies.
func (c *Client) CheckpointVersions(ctx context.Context, sandbox, agent, name string) ([]Checkpoint, error) {
	list, err := listAll[Checkpoint](ctx, c, checkpointsPath(sandbox, name, "/versions"), agentQuery(agent))
	return list, err
}

// RollbackCheckpoint writes version req.Version's body as the document's
// next version (its note says "rollback from N"); history is kept.
func (c *Client) RollbackCheckpoint(ctx context.Context, sandbox, agent, name string, req RollbackCheckpointRequest) (Checkpoint, error) {
	var cp Checkpoint
	err := c.do(ctx, http.MethodPost, checkpointsPath(sandbox, name, "/rollback"), agentQuery(agent), req, &cp)
	return cp, err
}

// SetCheckpointSchema sets the JSON Schema every later write of the
// document must pass; nil (or JSON null) removes it. A schema that does not
// compile is a 400 (IsInvalid).
func (c *Client) SetCheckpointSchema(ctx context.Context, sandbox, agent, name string, schema []byte) (CheckpointInfo, error) {
	var info CheckpointInfo
	path := checkpointsPath(sandbox, name, "/schema")
	if len(bytes.TrimSpace(schema)) == 0 || string(bytes.TrimSpace(schema)) == "null" {
		err := c.do(ctx, http.MethodDelete, path, agentQuery(agent), nil, &info)
		return info, err
	}
	err := c.do(ctx, http.MethodPut, path, agentQuery(agent), json.RawMessage(schema), &info)
	return info, err
}

// DeleteCheckpoint deletes a checkpoint document with every version.
func (c *Client) DeleteCheckpoint(ctx context.Context, sandbox, agent, name string) error {
	return c.do(ctx, http.MethodDelete, checkpointsPath(sandbox, name, ""), agentQuery(agent), nil, nil)
}

// SetCheckpointPolicy replaces the governance of a checkpoint document
// (creating the document, without versions, if it does not exist): who may
// write it, who may read it, its mutability and, when req.Keep > 0, its
// history depth. A caller the policy does not allow to change it gets a 403
// (IsForbidden).
func (c *Client) SetCheckpointPolicy(ctx context.Context, sandbox, agent, name string, req SetCheckpointPolicyRequest) (CheckpointInfo, error) {
	var info CheckpointInfo
	err := c.do(ctx, http.MethodPut, checkpointsPath(sandbox, name, "/policy"), agentQuery(agent), req, &info)
	return info, err
}
