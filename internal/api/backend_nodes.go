package api

import (
	"context"

	"github.com/stead-dev/stead/client"
)

// NodeBackend serves the cluster's node registry (Options.Nodes): the
// /v1/nodes routes, for admin keys only (authz.go).
type NodeBackend interface {
	// ListNodes lists the nodes by name.
	ListNodes(ctx context.Context) ([]client.Node, error)
	// GetNode describes one node (errs.ErrNotFound for an unknown name).
	GetNode(ctx context.Context, name string) (client.Node, error)
	// SetNodeState cordons, drains or uncordons (client.NodeActive) a
	// node; idempotent (errs.ErrNotFound for an unknown name).
	SetNodeState(ctx context.Context, name, state string) (client.Node, error)
}
