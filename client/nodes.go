package client

import (
	"context"
	"net/http"
	"net/url"
)

// ListNodes lists the cluster's nodes by name (admin keys only).
func (c *Client) ListNodes(ctx context.Context) ([]Node, error) {
	return listAll[Node](ctx, c, "/v1/nodes", nil)
}

// GetNode describes one node (admin keys only).
func (c *Client) GetNode(ctx context.Context, name string) (Node, error) {
	var n Node
	err := c.do(ctx, http.MethodGet, "/v1/nodes/"+url.PathEscape(name), nil, nil, &n)
	return n, err
}

// CordonNode stops placing new sandboxes on the node (admin keys only).
func (c *Client) CordonNode(ctx context.Context, name string) (Node, error) {
	return c.nodeVerb(ctx, name, "cordon")
}

// DrainNode marks the node to be emptied of its sandboxes; it takes no new
// ones (admin keys only).
func (c *Client) DrainNode(ctx context.Context, name string) (Node, error) {
	return c.nodeVerb(ctx, name, "drain")
}

// UncordonNode makes a cordoned or draining node take new sandboxes again
// (admin keys only).
func (c *Client) UncordonNode(ctx context.Context, name string) (Node, error) {
	return c.nodeVerb(ctx, name, "uncordon")
}

func (c *Client) nodeVerb(ctx context.Context, name, verb string) (Node, error) {
	var n Node
	err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(name)+"/"+verb, nil, nil, &n)
	return n, err
}

// EvacuateNode drains a node and moves each of its sandboxes to another
// node (push, pause, push the delta, hand over, restore there), as an
// operation whose result is an EvacuateResult (admin keys only).
func (c *Client) EvacuateNode(ctx context.Context, name string, req EvacuateRequest) (Operation, error) {
	var op Operation
	err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(name)+"/evacuate", nil, req, &op)
	return op, err
}

// ListLostCopies lists the kept copies of lost sandboxes on node, or on
// every node when node is "" (admin keys only).
func (c *Client) ListLostCopies(ctx context.Context, node string) ([]LostCopy, error) {
	if node == "" {
		return listAll[LostCopy](ctx, c, "/v1/lost-copies", nil)
	}
	return listAll[LostCopy](ctx, c, "/v1/nodes/"+url.PathEscape(node)+"/lost", nil)
}

// RecoverLostCopy makes a new, stopped sandbox of the copy's tenant on
// node from the kept copy (admin keys only); the copy stays until it is
// discarded.
func (c *Client) RecoverLostCopy(ctx context.Context, node, copy string, req RecoverLostCopyRequest) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(node)+"/lost/"+url.PathEscape(copy)+"/recover", nil, req, &sb)
	return sb, err
}

// DiscardLostCopy deletes a kept copy from node's pool (admin keys only).
func (c *Client) DiscardLostCopy(ctx context.Context, node, copy string) error {
	return c.do(ctx, http.MethodDelete, "/v1/nodes/"+url.PathEscape(node)+"/lost/"+url.PathEscape(copy), nil, nil, nil)
}
