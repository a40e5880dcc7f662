// Package cluster holds what the nodes of a stead cluster share: the node
// registry, where every daemon registers itself with its internal address
// and capacity and refreshes a heartbeat, and an operator cordons, drains
// and uncordons nodes; and a node's sandbox owner leases (Leases), which
// say which node may act on a sandbox and fence the store writes of a node
// that lost one. It works on the metadata store (PostgreSQL for a cluster;
// the embedded SQLite store makes a cluster of one node). What one node
// does to its own sandboxes stays in internal/sandbox. docs/cluster.md is
// the design.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

var _ api.NodeBackend = (*Registry)(nil)

// DefaultInterval is how often a node refreshes its heartbeat.
const DefaultInterval = 10 * time.Second

// Capacity is what a node offers.
type Capacity struct {
	CPUs          float64
	MemoryBytes   int64
	PoolFreeBytes int64
	// Templates are the dataset ids of the templates in the node's pool
	// (placement sends a sandbox only where its template is; see
	// TemplateDataset).
	Templates []string
}

// Options configure a Registry.
type Options struct {
	// Store holds the registry.
	Store store.NodeStore
	// Name is this node's name, unique in the cluster.
	Name string
	// Address is where other nodes reach this node's internal API.
	Address string
	// Version is the stead version this node runs.
	Version string
	// Interval is how often the heartbeat is refreshed (0: DefaultInterval).
	Interval time.Duration
	// Grace is how old a heartbeat may be for its node to count as alive
	// (0: three intervals).
	Grace time.Duration
	// Capacity measures this node's capacity at each heartbeat.
	Capacity func(ctx context.Context) (Capacity, error)
	// Logger receives heartbeat failures (default slog.Default()).
	Logger *slog.Logger
}

// Registry keeps this node registered and serves the registry (it is the
// API's NodeBackend).
type Registry struct {
	o       Options
	started time.Time
}

// New returns the registry of o.Name; it registers nothing until Heartbeat
// or Run.
func New(o Options) (*Registry, error) {
	if o.Store == nil || o.Name == "" || o.Address == "" {
		return nil, fmt.Errorf("node registry: a store, a node name and an address are needed: %w", errs.ErrInvalid)
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Grace <= 0 {
		o.Grace = 3 * o.Interval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Registry{o: o, started: time.Now().UTC()}, nil
}

// Heartbeat registers this node, or refreshes its address, capacity and
// heartbeat; an operator's cordon or drain stays.
func (r *Registry) Heartbeat(ctx context.Context) (store.Node, error) {
	var c Capacity
	if r.o.Capacity != nil {
		var err error
		if c, err = r.o.Capacity(ctx); err != nil {
			return store.Node{}, fmt.Errorf("heartbeat node %s: measure capacity: %w", r.o.Name, err)
		}
	}
	n, err := r.o.Store.HeartbeatNode(ctx, store.Node{Name: r.o.Name, Address: r.o.Address, Version: r.o.Version,
		CPUs: c.CPUs, MemoryBytes: c.MemoryBytes, PoolFreeBytes: c.PoolFreeBytes, Templates: c.Templates, StartedAt: r.started})
	if err != nil {
		return store.Node{}, fmt.Errorf("heartbeat node %s: %w", r.o.Name, err)
	}
	return n, nil
}

// CheckAlone returns an error wrapping errs.ErrConflict when another node
// of the registry is alive (its heartbeat within the grace): stead does not
// yet give sandboxes an owning node, so two daemons on one store would each
// take the other's sandboxes for their own. A node that stopped or died is
// no obstacle once its heartbeat is older than the grace.
func (r *Registry) CheckAlone(ctx context.Context) error {
	ns, err := r.o.Store.ListNodes(ctx)
	if err != nil {
		return fmt.Errorf("check for other nodes: %w", err)
	}
	now := time.Now()
	for _, n := range ns {
		if n.Name != r.o.Name && now.Sub(n.HeartbeatAt) <= r.o.Grace {
			return fmt.Errorf("node %s (%s) uses this store (heartbeat %s ago): stead runs one node per store until sandbox ownership lands; stop it, or wait %s after it stopped: %w",
				n.Name, n.Address, now.Sub(n.HeartbeatAt).Round(time.Second), r.o.Grace, errs.ErrConflict)
		}
	}
	return nil
}

// Name returns this node's name.
func (r *Registry) Name() string { return r.o.Name }

// Run refreshes the heartbeat every interval until ctx ends; a failed
// heartbeat is logged and tried again at the next tick.
func (r *Registry) Run(ctx context.Context) {
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := r.Heartbeat(ctx); err != nil && ctx.Err() == nil {
				r.o.Logger.Warn("node heartbeat failed", "node", r.o.Name, "err", err)
			}
		}
	}
}

// ListNodes lists the nodes by name.
func (r *Registry) ListNodes(ctx context.Context) ([]client.Node, error) {
	ns, err := r.o.Store.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]client.Node, 0, len(ns))
	for _, n := range ns {
		out = append(out, r.view(n, now))
	}
	return out, nil
}

// GetNode describes one node.
func (r *Registry) GetNode(ctx context.Context, name string) (client.Node, error) {
	n, err := r.o.Store.GetNode(ctx, name)
	if err != nil {
		return client.Node{}, err
	}
	return r.view(n, time.Now()), nil
}

// SetNodeState cordons, drains or uncordons a node.
func (r *Registry) SetNodeState(ctx context.Context, name, state string) (client.Node, error) {
	if !store.ValidNodeState(state) {
		return client.Node{}, fmt.Errorf("node state %q: want active, cordoned or draining: %w", state, errs.ErrInvalid)
	}
	n, err := r.o.Store.SetNodeState(ctx, name, state)
	if errors.Is(err, errs.ErrNotFound) {
		return client.Node{}, fmt.Errorf("node %s is not registered: %w", name, errs.ErrNotFound)
	}
	if err != nil {
		return client.Node{}, err
	}
	r.o.Logger.Info("node state set", "node", name, "state", state)
	return r.view(n, time.Now()), nil
}

// view is the API's view of n at now.
func (r *Registry) view(n store.Node, now time.Time) client.Node {
	return client.Node{Name: n.Name, Address: n.Address, CPUs: n.CPUs, MemoryBytes: n.MemoryBytes, PoolFreeBytes: n.PoolFreeBytes,
		Version: n.Version, State: n.State, StartedAt: n.StartedAt, HeartbeatAt: n.HeartbeatAt, CreatedAt: n.CreatedAt,
		Alive: now.Sub(n.HeartbeatAt) <= r.o.Grace, Self: n.Name == r.o.Name, Templates: n.Templates}
}
