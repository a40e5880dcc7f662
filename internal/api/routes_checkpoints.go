package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// CheckpointRef is the {name} path parameter and ?agent= query of the
// checkpoint document routes (exported only because huma ignores unexported
// embedded fields).
type CheckpointRef struct {
	SandboxRef
	Name  string `path:"name" minLength:"1" maxLength:"128" doc:"Document name: letters, digits, '.', '_' and '-', not starting with '.' or '-'"`
	Agent string `query:"agent" maxLength:"128" doc:"Named agent within the sandbox (same characters as a name); empty for the default agent"`
}

// putCheckpointInput is PUT /checkpoints/{name}: the body is the document.
type putCheckpointInput struct {
	CheckpointRef
	IfMatch string          `header:"If-Match" doc:"Version the document's latest must have (0: it must not exist yet), as N or \"N\"; absent: no check"`
	Run     string          `query:"run" maxLength:"256" doc:"Run id recorded as provenance"`
	Keep    int             `query:"keep" minimum:"0" maximum:"1000" doc:"Set the history depth (default 10 for a new document; 0 keeps the current)"`
	Body    json.RawMessage `doc:"The JSON document"`
}

// checkpointOut is a checkpoint version with its version as ETag.
type checkpointOut struct {
	ETag string `header:"ETag" doc:"The version, quoted; usable as If-Match"`
	Body client.Checkpoint
}

// parseIfMatch reads an If-Match header holding a version: N or "N".
// Empty means no check.
func parseIfMatch(h string) (*int64, error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return nil, nil
	}
	v, err := strconv.ParseInt(strings.Trim(h, `"`), 10, 64)
	if err != nil || v < 0 {
		return nil, fmt.Errorf("If-Match %q: want a version number such as 3 or \"3\" (0: the document must not exist): %w", h, errs.ErrInvalid)
	}
	return &v, nil
}

func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// registerCheckpoints adds the /v1/sandboxes/{id}/checkpoints routes.
func (s *server) registerCheckpoints(b CheckpointBackend) {
	const tag = "checkpoints"
	const base = "/v1/sandboxes/{id}/checkpoints"

	put := s.agentOp(agentOwnSandbox, http.MethodPut, base+"/{name}", "put-checkpoint",
		"Write a checkpoint document's next version (atomic; optimistic concurrency with If-Match)", tag, 0)
	put.Description = "The body is the JSON document (at most 1 MiB). It must pass the document's JSON Schema, if one is set. " +
		"With If-Match: N the write succeeds only if the latest version is N (0: the document must not exist), else 409 and nothing changes. " +
		"The oldest versions beyond the document's history depth (keep, default 10) are deleted in the same transaction."
	put.Description += " The document's policy applies: a writer it does not admit gets 403; " +
		"a body that breaks its mutability (append-only, immutable) gets 409; both change nothing."
	put.Errors = append(put.Errors, http.StatusForbidden, http.StatusConflict, http.StatusRequestEntityTooLarge)
	huma.Register(s.api, put, func(ctx context.Context, in *putCheckpointInput) (*checkpointOut, error) {
		const op = "put checkpoint"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		ifv, err := parseIfMatch(in.IfMatch)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		c, err := b.PutCheckpoint(ctx, p, in.ID, CheckpointWrite{
			Agent: in.Agent, Name: in.Name, Body: in.Body, IfVersion: ifv, Run: in.Run, Keep: in.Keep,
		})
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &checkpointOut{ETag: etag(c.Version), Body: c}, nil
	})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodGet, base+"/{name}", "get-checkpoint",
		"Read a checkpoint document: the latest version, or ?version=N, with its provenance", tag, 0),
		func(ctx context.Context, in *struct {
			CheckpointRef
			Version int64 `query:"version" minimum:"0" doc:"Version to read; 0 or absent for the latest"`
		}) (*checkpointOut, error) {
			const op = "get checkpoint"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			var c client.Checkpoint
			if r, ok := b.(ScopedCheckpointReader); ok {
				c, err = r.ReadCheckpoint(ctx, p, in.ID, in.Agent, in.Name, in.Version)
			} else {
				c, err = b.GetCheckpoint(ctx, p.TenantID, in.ID, in.Agent, in.Name, in.Version)
			}
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return &checkpointOut{ETag: etag(c.Version), Body: c}, nil
		})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodGet, base, "list-checkpoints",
		"List a sandbox's checkpoint documents (every agent)", tag, 0),
		func(ctx context.Context, in *struct {
			SandboxRef
			PageQuery
		}) (*out[client.Page[client.CheckpointInfo]], error) {
			const op = "list checkpoints"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			list, err := b.ListCheckpoints(ctx, p.TenantID, in.ID)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			if list == nil {
				list = []client.CheckpointInfo{}
			}
			return pageOf(list, in.PageQuery)
		})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodGet, base+"/{name}/versions", "list-checkpoint-versions",
		"List the kept versions of a checkpoint document, oldest first (without bodies)", tag, 0),
		func(ctx context.Context, in *struct {
			CheckpointRef
			PageQuery
		}) (*out[client.Page[client.Checkpoint]], error) {
			const op = "list checkpoint versions"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			var list []client.Checkpoint
			if r, ok := b.(ScopedCheckpointReader); ok {
				list, err = r.ReadCheckpointVersions(ctx, p, in.ID, in.Agent, in.Name)
			} else {
				list, err = b.CheckpointVersions(ctx, p.TenantID, in.ID, in.Agent, in.Name)
			}
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			if list == nil {
				list = []client.Checkpoint{}
			}
			return pageOf(list, in.PageQuery)
		})

	rb := s.agentOp(agentOwnSandbox, http.MethodPost, base+"/{name}/rollback", "rollback-checkpoint",
		"Roll a checkpoint document back: write version N's body as a new version", tag, 0)
	rb.Description = "History is never rewritten: the new version records \"rollback from N\" as provenance. " +
		"The body must pass the document's current schema."
	rb.Errors = append(rb.Errors, http.StatusForbidden, http.StatusConflict)
	huma.Register(s.api, rb, func(ctx context.Context, in *struct {
		CheckpointRef
		Body client.RollbackCheckpointRequest
	}) (*checkpointOut, error) {
		const op = "rollback checkpoint"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		c, err := b.RollbackCheckpoint(ctx, p, in.ID, in.Agent, in.Name, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &checkpointOut{ETag: etag(c.Version), Body: c}, nil
	})

	setSchema := s.agentOp(agentOwnSandbox, http.MethodPut, base+"/{name}/schema", "set-checkpoint-schema",
		"Set a checkpoint document's JSON Schema (every later write must pass it)", tag, 0)
	setSchema.Description = "The body is a JSON Schema (draft 2020-12 unless it says otherwise in $schema); " +
		"references to other documents are not loaded. The document is created, without versions, if it does not exist."
	setSchema.Errors = append(setSchema.Errors, http.StatusForbidden, http.StatusRequestEntityTooLarge)
	huma.Register(s.api, setSchema, func(ctx context.Context, in *struct {
		CheckpointRef
		Body json.RawMessage `doc:"The JSON Schema"`
	}) (*out[client.CheckpointInfo], error) {
		const op = "set checkpoint schema"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		info, err := b.SetCheckpointSchema(ctx, p, in.ID, in.Agent, in.Name, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.CheckpointInfo]{Body: info}, nil
	})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodDelete, base+"/{name}/schema", "remove-checkpoint-schema",
		"Remove a checkpoint document's JSON Schema", tag, 0),
		func(ctx context.Context, in *CheckpointRef) (*out[client.CheckpointInfo], error) {
			const op = "remove checkpoint schema"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			info, err := b.SetCheckpointSchema(ctx, p, in.ID, in.Agent, in.Name, nil)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return &out[client.CheckpointInfo]{Body: info}, nil
		})

	pol := s.agentOp(agentOwnSandbox, http.MethodPut, base+"/{name}/policy", "set-checkpoint-policy",
		"Set a checkpoint document's governance: who may write, who may read, mutability and history depth", tag, 0)
	pol.Description = "Replaces the policy; empty fields take their defaults (write and read: any principal of the tenant; mutable). " +
		"keep > 0 sets the history depth (1: no history) and deletes older versions at once; 0 leaves it. " +
		"A document with the default policy may be governed by any principal that may write it; " +
		"once governed, only an admin key may change its policy (403 otherwise). " +
		"The document is created, without versions, if it does not exist. The policy is shown in the document's info (list)."
	pol.Errors = append(pol.Errors, http.StatusForbidden, http.StatusConflict)
	huma.Register(s.api, pol, func(ctx context.Context, in *struct {
		CheckpointRef
		Body client.SetCheckpointPolicyRequest
	}) (*out[client.CheckpointInfo], error) {
		const op = "set checkpoint policy"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		info, err := b.SetCheckpointPolicy(ctx, p, in.ID, in.Agent, in.Name, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.CheckpointInfo]{Body: info}, nil
	})

	huma.Register(s.api, s.agentOp(agentOwnSandbox, http.MethodDelete, base+"/{name}", "delete-checkpoint",
		"Delete a checkpoint document with every version and its schema", tag, http.StatusNoContent),
		func(ctx context.Context, in *CheckpointRef) (*struct{}, error) {
			const op = "delete checkpoint"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			if err := b.DeleteCheckpoint(ctx, p, in.ID, in.Agent, in.Name); err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return nil, nil
		})
}
