package sandbox

import (
	"context"

	"github.com/stead-dev/stead/internal/store"
)

// Owner is this node's side of the sandboxes' owner leases
// (cluster.Leases in a cluster): the service acquires a sandbox's lease
// before it creates, starts or restores it, checks Held before it acts on
// it, and makes the sandbox's store writes under Fence, so a node that
// lost a sandbox neither acts on it nor writes for it.
type Owner interface {
	// Acquire takes (or refreshes) sandbox id's lease for this node and
	// returns its epoch; another node's lease in force is an error
	// wrapping errs.ErrConflict.
	Acquire(ctx context.Context, id string) (store.Ownership, error)
	// Held returns the epoch of id's lease if this node may act on it now.
	Held(id string) (epoch int64, ok bool)
	// Release gives id's lease up (the sandbox was purged or moved).
	Release(ctx context.Context, id string) error
	// Fence returns ctx carrying the store fence of id's lease; it fails
	// with a *store.FencedError when Held does.
	Fence(ctx context.Context, id string) (context.Context, error)
	// Node is this node's name.
	Node() string
}

// soleOwner is the Owner of a single-node daemon: it holds every lease.
type soleOwner struct{}

func (soleOwner) Acquire(context.Context, string) (store.Ownership, error) {
	return store.Ownership{Epoch: 1}, nil
}
func (soleOwner) Held(string) (int64, bool)                                    { return 1, true }
func (soleOwner) Node() string                                                 { return "" }
func (soleOwner) Release(context.Context, string) error                        { return nil }
func (soleOwner) Fence(ctx context.Context, _ string) (context.Context, error) { return ctx, nil }
