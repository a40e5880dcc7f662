package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// NodeRef is the {name} path parameter of the node routes.
type NodeRef struct {
	Name string `path:"name" minLength:"1" maxLength:"253" doc:"Node name"`
}

// registerNodes adds the /v1/nodes routes.
func (s *server) registerNodes(b NodeBackend) {
	const tag = "nodes"
	huma.Register(s.api, s.op(http.MethodGet, "/v1/nodes", "list-nodes", "List the cluster's nodes with their capacity and heartbeat (admin keys only)", tag, 0),
		func(ctx context.Context, in *PageQuery) (*out[client.Page[client.Node]], error) {
			ns, err := b.ListNodes(ctx)
			if err != nil {
				return nil, s.fail(ctx, "list nodes", err)
			}
			return pageOf(ns, *in)
		})
	huma.Register(s.api, s.op(http.MethodGet, "/v1/nodes/{name}", "get-node", "Describe a node (admin keys only)", tag, 0),
		func(ctx context.Context, in *NodeRef) (*out[client.Node], error) {
			n, err := b.GetNode(ctx, in.Name)
			if err != nil {
				return nil, s.fail(ctx, "get node", err)
			}
			return &out[client.Node]{Body: n}, nil
		})
	for _, a := range []struct{ verb, state, summary string }{
		{"cordon", client.NodeCordoned, "Cordon a node: it takes no new sandboxes; the ones it runs stay (admin keys only)"},
		{"drain", client.NodeDraining, "Drain a node: it takes no new sandboxes and is to be emptied of its own (admin keys only)"},
		{"uncordon", client.NodeActive, "Uncordon a node: it takes new sandboxes again (admin keys only)"},
	} {
		huma.Register(s.api, s.op(http.MethodPost, "/v1/nodes/{name}/"+a.verb, a.verb+"-node", a.summary, tag, 0),
			func(ctx context.Context, in *NodeRef) (*out[client.Node], error) {
				n, err := b.SetNodeState(ctx, in.Name, a.state)
				if err != nil {
					return nil, s.fail(ctx, a.verb+" node", err)
				}
				return &out[client.Node]{Body: n}, nil
			})
	}
	if eb, ok := b.(EvacuateBackend); ok {
		s.registerEvacuate(eb) // routes_evacuate.go
	}
	if lb, ok := b.(LostCopyBackend); ok {
		s.registerLostCopies(lb) // routes_lost.go
	}
}
