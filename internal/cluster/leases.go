package cluster

import (
	"context"
	"errors"
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
	// OnLapse, when set, is called (without locks held) when a lease
	// comes within Margin of its expiry by this node's clock with no
	// successful renew (the store is out of reach: a partition, or the
	// store is down). The node must stop the sandbox's processes at once,
	// keeping them (a freeze): once the lease lapsed another node may take
	// the sandbox over.
	OnLapse func(sandboxID string)
	// OnRegain, when set, is called when this node took a lapsed lease
	// again with no other node having held it since (the epoch moved by
	// exactly one): the node may resume what OnLapse stopped.
	OnRegain func(sandboxID string, own store.Ownership)
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
	// lapsed is set once the lease came within Margin of its expiry
	// without a renew (OnLapse was called); it stays held, so that a later
	// renew or re-acquire can regain it (OnRegain) or lose it (OnLost).
	lapsed bool
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
	// watches are the contexts Watch handed out, by lease: each ends when
	// this node stops holding its lease.
	watches map[string]map[*leaseWatch]struct{}
}

// leaseWatch is one context handed out by Watch.
type leaseWatch struct{ cancel context.CancelCauseFunc }

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
	return &Leases{o: o, held: map[string]*heldLease{}, watches: map[string]map[*leaseWatch]struct{}{}}, nil
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
	l.endWatchesLocked(id, fmt.Errorf("lease %s of node %s released", id, l.o.Node))
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
	return l.heldLocked(id)
}

// heldLocked is Held with l.mu held.
func (l *Leases) heldLocked(id string) (epoch int64, ok bool) {
	h, found := l.held[id]
	if !found || h.suspended || !l.o.Clock().Before(h.own.ExpiresAt.Add(-l.o.Margin)) {
		return 0, false
	}
	return h.own.Epoch, true
}

// Watch returns a context derived from ctx that ends when this node stops
// holding lease id: it is lost (another node holds or held it since, or
// it was expired: found by a renew), it comes within Margin of its expiry
// without a renew (CheckLapse: the store is out of reach), or it is
// released. context.Cause then names the lease and why. It ends at once
// when the lease is not held now. A failed renew alone does not end it
// (the lease still holds until the margin: a later renew may succeed).
// stop ends the watch and the context; call it when done.
func (l *Leases) Watch(ctx context.Context, id string) (held context.Context, stop func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	w := &leaseWatch{cancel: cancel}
	l.mu.Lock()
	if _, ok := l.heldLocked(id); !ok {
		l.mu.Unlock()
		cancel(fmt.Errorf("lease %s is not held by node %s: %w", id, l.o.Node, errs.ErrConflict))
		return wctx, func() {}
	}
	if l.watches[id] == nil {
		l.watches[id] = map[*leaseWatch]struct{}{}
	}
	l.watches[id][w] = struct{}{}
	l.mu.Unlock()
	return wctx, func() {
		l.mu.Lock()
		delete(l.watches[id], w)
		if len(l.watches[id]) == 0 {
			delete(l.watches, id)
		}
		l.mu.Unlock()
		cancel(context.Canceled)
	}
}

// endWatchesLocked ends the watches of lease id with cause (l.mu held).
func (l *Leases) endWatchesLocked(id string, cause error) {
	for w := range l.watches[id] {
		w.cancel(cause)
	}
	delete(l.watches, id)
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

// RenewAll renews every held lease once. One whose renew failed without
// an answer from the store is suspended (Held is false) until a renew
// succeeds. One the store fences off is taken again if it lapsed and no
// other node held it since (the epoch moves by one: OnRegain); otherwise
// it is dropped and reported to OnLost. It returns how many leases were
// lost.
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
	var regained []store.Ownership
	for id, own := range ids {
		now := l.o.Clock()
		// A store out of reach must not hold the renews up past the
		// lease: each call gets until the next round.
		cctx, cancel := context.WithTimeout(ctx, l.o.RenewEvery)
		renewed, err := l.o.Store.RenewOwnership(cctx, id, l.o.Node, own.Epoch, l.o.TTL, now)
		if store.IsFenced(err) {
			// Lapsed (or taken): take it again if nobody held it since.
			var again store.Ownership
			if again, err = l.o.Store.AcquireOwnership(cctx, id, l.o.Node, l.o.TTL, now); err == nil {
				if again.Epoch == own.Epoch+1 {
					renewed = again
				} else {
					// Another node held it in between: its state wins.
					l.o.Store.ReleaseOwnership(cctx, id, l.o.Node, again.Epoch, now)
					err = fmt.Errorf("sandbox %s: another node held its lease since epoch %d: %w", id, own.Epoch,
						&store.FencedError{SandboxID: id, Node: l.o.Node, Epoch: own.Epoch})
				}
			} else if errors.Is(err, errs.ErrConflict) && !store.IsFenced(err) {
				err = fmt.Errorf("%w: %w", err, &store.FencedError{SandboxID: id, Node: l.o.Node, Epoch: own.Epoch})
			}
		}
		cancel()
		l.mu.Lock()
		h, ok := l.held[id]
		if !ok || h.own.Epoch != own.Epoch {
			l.mu.Unlock() // released or re-acquired meanwhile
			continue
		}
		switch {
		case err == nil:
			if h.lapsed || renewed.Epoch != own.Epoch {
				regained = append(regained, renewed)
			}
			h.own, h.suspended, h.lapsed = renewed, false, false
		case store.IsFenced(err):
			delete(l.held, id)
			l.endWatchesLocked(id, fmt.Errorf("lease %s of node %s lost: %w", id, l.o.Node, err))
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
	for _, own := range regained {
		l.o.Logger.Info("sandbox lease regained", "sandbox", own.SandboxID, "node", l.o.Node, "epoch", own.Epoch)
		if l.o.OnRegain != nil {
			l.o.OnRegain(own.SandboxID, own)
		}
	}
	return len(lost)
}

// CheckLapse marks the held leases that came within Margin of their expiry
// by this node's clock as lapsed and calls OnLapse for each (once). It
// reads no store: it must work when the store is out of reach.
func (l *Leases) CheckLapse() []string {
	now := l.o.Clock()
	var ids []string
	l.mu.Lock()
	for id, h := range l.held {
		if !h.lapsed && !now.Before(h.own.ExpiresAt.Add(-l.o.Margin)) {
			h.lapsed, h.suspended = true, true
			ids = append(ids, id)
			l.endWatchesLocked(id, fmt.Errorf("lease %s of node %s (epoch %d) lapsing without a renew (the store is out of reach): %w",
				id, l.o.Node, h.own.Epoch, errs.ErrConflict))
		}
	}
	l.mu.Unlock()
	for _, id := range ids {
		l.o.Logger.Warn("sandbox lease lapsing without a renew: stopping the sandbox here", "sandbox", id, "node", l.o.Node)
		if l.o.OnLapse != nil {
			l.o.OnLapse(id)
		}
	}
	return ids
}

// Run renews the held leases every RenewEvery until ctx ends and, apart
// from the renews (which may hang on a store out of reach), checks every
// Margin/2 for leases lapsing (CheckLapse).
func (l *Leases) Run(ctx context.Context) {
	go func() {
		t := time.NewTicker(max(l.o.Margin/2, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				l.CheckLapse()
			}
		}
	}()
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
