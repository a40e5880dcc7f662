package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// LostCopyBackend serves the kept copies of lost sandboxes: the root a
// node kept when it lost a sandbox's lease to another node (what the
// agent wrote there after the last push). A NodeBackend that also
// implements it gets the routes below (admin keys only, as every
// /v1/nodes route and /v1/lost-copies).
type LostCopyBackend interface {
	// ListLostCopies lists the copies kept on node, or on every live node
	// when node is "" (errs.ErrNotFound for an unknown node).
	ListLostCopies(ctx context.Context, node string) ([]client.LostCopy, error)
	// RecoverLostCopy makes a new, stopped sandbox of the copy's tenant on
	// node from the copy (a clone of it); the copy stays. An invalid copy
	// name is errs.ErrInvalid, an absent one errs.ErrNotFound.
	RecoverLostCopy(ctx context.Context, node, copy string, req client.RecoverLostCopyRequest) (client.Sandbox, error)
	// DiscardLostCopy deletes the copy from node's pool.
	DiscardLostCopy(ctx context.Context, node, copy string) error
}

// LostCopyRef is the {name} and {copy} path parameters of a kept copy.
type LostCopyRef struct {
	NodeRef
	Copy string `path:"copy" minLength:"1" maxLength:"128" doc:"Kept copy (lost-<epoch>-<sandbox id>)"`
}

// registerLostCopies adds the routes of LostCopyBackend.
func (s *server) registerLostCopies(b LostCopyBackend) {
	const tag = "nodes"
	huma.Register(s.api, s.op(http.MethodGet, "/v1/lost-copies", "list-lost-copies",
		"List the kept copies of lost sandboxes on every live node (admin keys only)", tag, 0),
		func(ctx context.Context, in *PageQuery) (*out[client.Page[client.LostCopy]], error) {
			list, err := b.ListLostCopies(ctx, "")
			if err != nil {
				return nil, s.fail(ctx, "list lost copies", err)
			}
			return pageOf(list, *in)
		})
	huma.Register(s.api, s.op(http.MethodGet, "/v1/nodes/{name}/lost", "list-node-lost-copies",
		"List the kept copies of lost sandboxes on a node (admin keys only)", tag, 0),
		func(ctx context.Context, in *struct {
			NodeRef
			PageQuery
		}) (*out[client.Page[client.LostCopy]], error) {
			list, err := b.ListLostCopies(ctx, in.Name)
			if err != nil {
				return nil, s.fail(ctx, "list lost copies", err)
			}
			return pageOf(list, in.PageQuery)
		})
	rec := s.op(http.MethodPost, "/v1/nodes/{name}/lost/{copy}/recover", "recover-lost-copy",
		"Make a new sandbox from a kept copy (admin keys only)", tag, http.StatusCreated)
	rec.Description = "Makes a new sandbox (a new id, the copy's tenant, template, limits, environment, network policy " +
		"and labels; no volumes) on the node that holds the copy, stopped, with a clone of the copy as its root: what the " +
		"agent wrote after its last push. The tenant's quotas apply. The copy stays until it is discarded."
	huma.Register(s.api, rec, func(ctx context.Context, in *struct {
		LostCopyRef
		Body *client.RecoverLostCopyRequest
	}) (*out[client.Sandbox], error) {
		var req client.RecoverLostCopyRequest
		if in.Body != nil {
			req = *in.Body
		}
		sb, err := b.RecoverLostCopy(ctx, in.Name, in.Copy, req)
		if err != nil {
			return nil, s.fail(ctx, "recover lost copy", err)
		}
		return &out[client.Sandbox]{Body: sb}, nil
	})
	huma.Register(s.api, s.op(http.MethodDelete, "/v1/nodes/{name}/lost/{copy}", "discard-lost-copy",
		"Delete a kept copy from its node's pool (admin keys only)", tag, http.StatusNoContent),
		func(ctx context.Context, in *LostCopyRef) (*struct{}, error) {
			if err := b.DiscardLostCopy(ctx, in.Name, in.Copy); err != nil {
				return nil, s.fail(ctx, "discard lost copy", err)
			}
			return nil, nil
		})
}
