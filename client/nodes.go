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
