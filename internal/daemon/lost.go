package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/sandbox"
	"github.com/stead-dev/stead/internal/store"
)

// lostCopies serves the kept copies of lost sandboxes (api.LostCopyBackend):
// each node answers for its own pool, this node through the service and
// another by a signed node call (the node routes under /internal/v1/lost).
// On a single node the only node is this one.
type lostCopies struct {
	self string
	svc  *sandbox.Service
	// c is the cluster side (nil on a single node).
	c *clusterNode
}

var _ api.LostCopyBackend = lostCopies{}

// The node routes of the kept copies.
const nodeLostPrefix = "/internal/v1/lost"

// here lists this node's copies, each named with this node.
func (l lostCopies) here(ctx context.Context) ([]client.LostCopy, error) {
	list, err := l.svc.LostCopies(ctx)
	for i := range list {
		list[i].Node = l.self
	}
	return list, err
}

// node finds the live node name (errs.ErrNotFound when it is not
// registered, errs.ErrConflict when it does not answer heartbeats: its
// pool cannot be reached).
func (l lostCopies) node(ctx context.Context, name string) (store.Node, error) {
	if l.c == nil {
		if name != l.self {
			return store.Node{}, fmt.Errorf("node %s: this daemon is the only node, %s: %w", name, l.self, errs.ErrNotFound)
		}
		return store.Node{Name: l.self}, nil
	}
	n, err := l.c.st.GetNode(ctx, name)
	if errors.Is(err, errs.ErrNotFound) {
		return n, fmt.Errorf("node %s is not registered (stead node ls shows the nodes): %w", name, errs.ErrNotFound)
	}
	if err != nil {
		return n, err
	}
	if age := time.Since(n.HeartbeatAt); n.Name != l.self && age > l.c.grace {
		return n, fmt.Errorf("node %s has sent no heartbeat for %s: its copies are in its pool, which only it reaches; try when it is back: %w",
			name, age.Round(time.Second), errs.ErrConflict)
	}
	return n, nil
}

// ListLostCopies lists the copies of node, or of every live node.
func (l lostCopies) ListLostCopies(ctx context.Context, node string) ([]client.LostCopy, error) {
	if node != "" {
		n, err := l.node(ctx, node)
		if err != nil {
			return nil, err
		}
		return l.listOn(ctx, n)
	}
	if l.c == nil {
		return l.here(ctx)
	}
	nodes, err := l.c.st.ListNodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list lost copies: list nodes: %w", err)
	}
	out := []client.LostCopy{}
	for _, n := range nodes {
		if n.Name != l.self && time.Since(n.HeartbeatAt) > l.c.grace {
			continue // gone: its pool is out of reach
		}
		list, err := l.listOn(ctx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, list...)
	}
	return out, nil
}

func (l lostCopies) listOn(ctx context.Context, n store.Node) ([]client.LostCopy, error) {
	if n.Name == l.self {
		return l.here(ctx)
	}
	var list []client.LostCopy
	if err := l.c.nodeDo(ctx, n, http.MethodGet, nodeLostPrefix, nil, &list); err != nil {
		return nil, fmt.Errorf("list the lost copies of node %s: %w", n.Name, err)
	}
	for i := range list {
		list[i].Node = n.Name
	}
	return list, nil
}

// RecoverLostCopy makes a new sandbox from copy on node.
func (l lostCopies) RecoverLostCopy(ctx context.Context, node, copy string, req client.RecoverLostCopyRequest) (client.Sandbox, error) {
	n, err := l.node(ctx, node)
	if err != nil {
		return client.Sandbox{}, err
	}
	if n.Name == l.self {
		return l.svc.RecoverLostCopy(ctx, copy, req.Name)
	}
	var sb client.Sandbox
	if err := l.c.nodeDo(ctx, n, http.MethodPost, nodeLostPrefix+"/"+url.PathEscape(copy)+"/recover", req, &sb); err != nil {
		return sb, fmt.Errorf("node %s: recover lost copy %s: %w", n.Name, copy, err)
	}
	return sb, nil
}

// DiscardLostCopy deletes copy from node's pool.
func (l lostCopies) DiscardLostCopy(ctx context.Context, node, copy string) error {
	n, err := l.node(ctx, node)
	if err != nil {
		return err
	}
	if n.Name == l.self {
		return l.svc.DiscardLostCopy(ctx, copy)
	}
	if err := l.c.nodeDo(ctx, n, http.MethodDelete, nodeLostPrefix+"/"+url.PathEscape(copy), nil, nil); err != nil {
		return fmt.Errorf("node %s: discard lost copy %s: %w", n.Name, copy, err)
	}
	return nil
}
