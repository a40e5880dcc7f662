package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// EvacuateBackend moves every sandbox off a node. A NodeBackend that also
// implements it gets POST /v1/nodes/{name}/evacuate (admin keys only, as
// every /v1/nodes route).
type EvacuateBackend interface {
	// EvacuateNode drains node and starts an operation of p's tenant
	// that moves each of its sandboxes to another node (push, pause, push
	// the delta, hand over, restore there); its result is a
	// client.EvacuateResult. errs.ErrNotFound for an unknown node.
	EvacuateNode(ctx context.Context, p Principal, node string, req client.EvacuateRequest) (client.Operation, error)
}

// registerEvacuate adds POST /v1/nodes/{name}/evacuate.
func (s *server) registerEvacuate(b EvacuateBackend) {
	o := s.opRoute(http.MethodPost, "/v1/nodes/{name}/evacuate", "evacuate-node",
		"Move every sandbox off a node (admin keys only)", "nodes",
		"Sets the node draining, then moves its sandboxes one at a time: a push while it runs, a pause, a push of "+
			"the delta, the hand-over of its lease, and a restore on another node, where it runs again with the same "+
			"id, name, volumes and agent state at a higher lease epoch. The pause is bounded by the delta push plus the "+
			"restore. A sandbox whose move fails before the hand-over stays on the node and runs on; one whose restore "+
			"fails is taken back by the node. The result is an EvacuateResult; the operation fails when a sandbox stayed.")
	huma.Register(s.api, o, func(ctx context.Context, in *struct {
		NodeRef
		Body *client.EvacuateRequest
	}) (*opOut, error) {
		const op = "evacuate node"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		var req client.EvacuateRequest
		if in.Body != nil {
			req = *in.Body
		}
		res, err := b.EvacuateNode(ctx, p, in.Name, req)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return opAnswer(res), nil
	})
}
