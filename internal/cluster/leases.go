package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// DefaultLeaseTTL is how long a sandbox's owner lease lasts unless renewed.
const DefaultLeaseTTL = 30 * time.Second

// LeaseOptions configure a node's Leases.
type LeaseOptions struct {
	// Store holds the leases.
	Store store.OwnershipStore
	// Node is this node's name.
	Node string
	// TTL is the lease duration (0: DefaultLeaseTTL).
	TTL time.Duration
	// RenewEvery is how often Run renews the held leases (0: TTL/3, so two
	// renews can fail before a lease lapses).
	RenewEvery time.Duration
	// Margin is how long before its expiry a lease stops counting as held
	// (0: TTL/10): room for clock skew between this node and the one that
	// may take the sandbox over once the lease lapsed.
	Margin time.Duration
	// Clock is this node's clock (nil: time.Now).
	Clock func() time.Time
	// OnLost, when set, is called (without locks held) for every lease
	// this node learns it lost: another node took the sandbox, or the lease
	// lapsed or was expired. The node must stop acting on the sandbox.
	OnLost func(sandboxID string, err error)
	// Logger receives renew failures (default slog.Default()).
	Logger *slog.Logger
}

// heldLease is one lease this node holds, as last acquired or renewed.
type heldLease struct {
	own store.Ownership
	// suspended is set when the last renew failed for a reason other than
	// fencing (the store was unreachable): the node stops acting at once,
	// and acts again if a later renew, before the expiry, succeeds.
	suspended bool
}

// Leases is the set of sandbox owner leases one node holds. The daemon
// acquires a sandbox's lease before it creates or starts it, runs Run to
// renew every lease well before it lapses, checks Held before it acts on a
// sandbox, and makes the sandbox's store writes under Fence, so a node that
// lost a lease neither acts on nor writes for that sandbox.
type Leases struct {
	o LeaseOptions

	mu   sync.Mutex
	held map[string]*heldLease
}

// NewLeases returns the empty lease set of node o.Node.
func NewLeases(o LeaseOptions) (*Leases, error) {
	if o.Store == nil || o.Node == "" {
		return nil, fmt.Errorf("node leases: a store and a node name are needed: %w", errs.ErrInvalid)
	}
	if o.TTL <= 0 {
		o.TTL = DefaultLeaseTTL
	}
	if o.RenewEvery <= 0 {
		o.RenewEvery = o.TTL / 3
	}
	if o.Margin <= 0 {
		o.Margin = o.TTL / 10
	}
	if o.RenewEvery >= o.TTL-o.Margin {
		return nil, fmt.Errorf("node leases: renewing every %s does not keep a %s lease (margin %s): %w", o.RenewEvery, o.TTL, o.Margin, errs.ErrInvalid)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Leases{o: o, held: map[string]*heldLease{}}, nil
}

// Acquire takes (or refreshes) the lease of sandbox id for this node and
// returns it. A lease in force held by another node is an error wrapping
// errs.ErrConflict.
func (l *Leases) Acquire(ctx context.Context, id string) (store.Ownership, error) {
	o, err := l.o.Store.AcquireOwnership(ctx, id, l.o.Node, l.o.TTL, l.o.Clock())
	if err != nil {
		return store.Ownership{}, err
	}
	l.mu.Lock()
	l.held[id] = &heldLease{own: o}
	l.mu.Unlock()
	return o, nil
}

// Release gives the lease of sandbox id up (after the node stopped acting
// on it, e.g. once another node restored it). Releasing a lease this node
// does not hold is nil.
func (l *Leases) Release(ctx context.Context, id string) error {
	l.mu.Lock()
	h, ok := l.held[id]
	delete(l.held, id)
	l.mu.Unlock()
	if !ok {
		return nil
	}
	err := l.o.Store.ReleaseOwnership(ctx, id, l.o.Node, h.own.Epoch, l.o.Clock())
	if store.IsFenced(err) {
		return nil // already someone else's: nothing of ours to release
	}
	return err
}

// Held returns the epoch of sandbox id's lease if this node may act on the
// sandbox now: it holds the lease, its last renew did not fail, and the
// lease is not within Margin of its expiry by this node's clock.
func (l *Leases) Held(id string) (epoch int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, found := l.held[id]
	if !found || h.suspended || !l.o.Clock().Before(h.own.ExpiresAt.Add(-l.o.Margin)) {
		return 0, false
	}
	return h.own.Epoch, true
}

// Fence returns ctx carrying the store fence of sandbox id's lease, for the
// store writes made on the sandbox's behalf; it fails with a
// *store.FencedError when Held does.
func (l *Leases) Fence(ctx context.Context, id string) (context.Context, error) {
	epoch, ok := l.Held(id)
	if !ok {
		return ctx, fmt.Errorf("act on sandbox %s: %w", id, &store.FencedError{SandboxID: id, Node: l.o.Node, Epoch: epoch})
	}
	return store.WithFence(ctx, store.Fence{SandboxID: id, Node: l.o.Node, Epoch: epoch, At: l.o.Clock()}), nil
}

// Node returns this node's name.
func (l *Leases) Node() string { return l.o.Node }

// List returns the leases this node holds, as last acquired or renewed
// (suspended ones included).
func (l *Leases) List() []store.Ownership {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]store.Ownership, 0, len(l.held))
	for _, h := range l.held {
		out = append(out, h.own)
	}
	return out
}

// RenewAll renews every held lease once. A lease the store fences off
// (taken over, lapsed, expired by failover) is dropped and reported to
// OnLost; one whose renew failed otherwise is suspended (Held is false)
// until a renew succeeds, and dropped once it lapsed. It returns how many
// leases were lost.
func (l *Leases) RenewAll(ctx context.Context) int {
	l.mu.Lock()
	ids := make(map[string]store.Ownership, len(l.held))
	for id, h := range l.held {
		ids[id] = h.own
	}
	l.mu.Unlock()

	type loss struct {
		id  string
		err error
	}
	var lost []loss
	for id, own := range ids {
		now := l.o.Clock()
		renewed, err := l.o.Store.RenewOwnership(ctx, id, l.o.Node, own.Epoch, l.o.TTL, now)
		l.mu.Lock()
		h, ok := l.held[id]
		if !ok || h.own.Epoch != own.Epoch {
			l.mu.Unlock() // released or re-acquired meanwhile
			continue
		}
		switch {
		case err == nil:
			h.own, h.suspended = renewed, false
		case store.IsFenced(err) || !now.Before(own.ExpiresAt):
			delete(l.held, id)
			lost = append(lost, loss{id, err})
		default:
			h.suspended = true
		}
		l.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			l.o.Logger.Warn("sandbox lease renew failed", "sandbox", id, "node", l.o.Node, "epoch", own.Epoch,
				"lost", store.IsFenced(err), "err", err)
		}
	}
	for _, x := range lost {
		if l.o.OnLost != nil {
			l.o.OnLost(x.id, x.err)
		}
	}
	return len(lost)
}

// Run renews the held leases every RenewEvery until ctx ends.
func (l *Leases) Run(ctx context.Context) {
	t := time.NewTicker(l.o.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.RenewAll(ctx)
		}
	}
}
