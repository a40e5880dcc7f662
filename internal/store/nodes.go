package store

import (
	"context"
	"time"
)

// Node states (Node.State).
const (
	// NodeActive nodes take new sandboxes.
	NodeActive = "active"
	// NodeCordoned nodes take no new sandboxes; the ones they run stay.
	NodeCordoned = "cordoned"
	// NodeDraining nodes take no new sandboxes and are to be emptied of
	// the ones they run.
	NodeDraining = "draining"
)

// ValidNodeState reports whether st is one of the node states.
func ValidNodeState(st string) bool {
	return st == NodeActive || st == NodeCordoned || st == NodeDraining
}

// Node is one stead daemon of a cluster, as it last reported itself.
type Node struct {
	// Name is the node's unique name (its host name by default).
	Name string `json:"name"`
	// Address is where other nodes reach the node's internal API
	// (host:port).
	Address string `json:"address"`
	// CPUs, MemoryBytes and PoolFreeBytes are the node's capacity: its
	// cpus, its memory and the free space of its storage pool.
	CPUs          float64 `json:"cpus"`
	MemoryBytes   int64   `json:"memory_bytes"`
	PoolFreeBytes int64   `json:"pool_free_bytes"`
	// Version is the stead version the node runs.
	Version string `json:"version"`
	// State is NodeActive, NodeCordoned or NodeDraining; an operator
	// sets it, and it outlives the node's restarts.
	State string `json:"state"`
	// StartedAt is when the node's daemon process started.
	StartedAt time.Time `json:"started_at"`
	// HeartbeatAt is the node's last heartbeat.
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// CreatedAt is when the node first registered.
	CreatedAt time.Time `json:"created_at"`
	// Templates are the dataset ids of the templates in the node's pool
	// (pool.KindTemplate), sorted, as of its last heartbeat; never nil
	// when read from the store.
	Templates []string `json:"templates"`
}

// NodeStore is the registry of the cluster's nodes.
//
// Contract, checked by storetest:
//   - HeartbeatNode registers n.Name or refreshes it: Address, capacity,
//     Version, Templates (stored sorted, without duplicates), StartedAt
//     and HeartbeatAt (zero: now) replace the stored ones. A new node is NodeActive with CreatedAt = HeartbeatAt; an
//     existing one keeps its State and CreatedAt (n.State is ignored), so
//     a cordon outlives the node's restarts. It returns the stored node.
//     An empty name or address, or a negative capacity, is errs.ErrInvalid
//     and stores nothing.
//   - GetNode returns errs.ErrNotFound for an unknown name.
//   - ListNodes is ordered by name; an empty registry is an empty list.
//   - SetNodeState sets the state of a registered node and returns it
//     (errs.ErrNotFound for an unknown name, errs.ErrInvalid for an unknown
//     state, and nothing changes); it is idempotent.
type NodeStore interface {
	HeartbeatNode(ctx context.Context, n Node) (Node, error)
	GetNode(ctx context.Context, name string) (Node, error)
	ListNodes(ctx context.Context) ([]Node, error)
	SetNodeState(ctx context.Context, name, state string) (Node, error)
}
