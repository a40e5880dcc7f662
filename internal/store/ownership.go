package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stead-dev/stead/internal/errs"
)

// Ownership is a sandbox's owner lease: the node that may act on the
// sandbox, until ExpiresAt, under Epoch. (Lease, by contrast, is a
// sandbox's network address.)
type Ownership struct {
	// SandboxID is the owned sandbox.
	SandboxID string `json:"sandbox_id"`
	// Node is the owning node's name.
	Node string `json:"node"`
	// Epoch grows by one each time the sandbox's lease is taken anew (by
	// another node, or after it lapsed or was released); it never goes
	// back, so a write carrying an older epoch is recognisably stale.
	Epoch int64 `json:"epoch"`
	// AcquiredAt is when the current epoch began.
	AcquiredAt time.Time `json:"acquired_at"`
	// ExpiresAt is when the lease lapses unless renewed. A released or
	// expired lease has ExpiresAt at or before the time it ended.
	ExpiresAt time.Time `json:"expires_at"`
}

// ValidAt reports whether the lease is in force at now.
func (o Ownership) ValidAt(now time.Time) bool { return now.Before(o.ExpiresAt) }

// FencedError is the error of a renew, release or fenced write whose
// caller no longer holds the sandbox's lease under the epoch it names: the
// lease lapsed, was released, or another node took it over. It wraps
// errs.ErrConflict.
type FencedError struct {
	// SandboxID is the sandbox, Node and Epoch what the caller claimed.
	SandboxID string
	Node      string
	Epoch     int64
	// Current is the stored lease (zero if there is none).
	Current Ownership
}

// Error says who holds the lease now.
func (e *FencedError) Error() string {
	switch {
	case e.Current.Node == "":
		return fmt.Sprintf("node %s is fenced off sandbox %s (epoch %d): the sandbox has no lease", e.Node, e.SandboxID, e.Epoch)
	case e.Current.Node != e.Node || e.Current.Epoch != e.Epoch:
		return fmt.Sprintf("node %s is fenced off sandbox %s (epoch %d): node %s holds it at epoch %d",
			e.Node, e.SandboxID, e.Epoch, e.Current.Node, e.Current.Epoch)
	default:
		return fmt.Sprintf("node %s is fenced off sandbox %s (epoch %d): its lease lapsed at %s",
			e.Node, e.SandboxID, e.Epoch, e.Current.ExpiresAt.Format(time.RFC3339Nano))
	}
}

// Unwrap makes a FencedError an errs.ErrConflict.
func (e *FencedError) Unwrap() error { return errs.ErrConflict }

// IsFenced reports whether err is (or wraps) a FencedError.
func IsFenced(err error) bool {
	var f *FencedError
	return errors.As(err, &f)
}

// Fence is what a fenced write claims: that Node holds SandboxID's lease
// under Epoch, and that the lease is in force at At.
type Fence struct {
	SandboxID string
	Node      string
	Epoch     int64
	// At is the caller's clock for the expiry check (zero: the store's
	// clock). The epoch check does not depend on any clock.
	At time.Time
}

// Holds reports whether o is f's lease in force at now (f.At when set).
func (f Fence) Holds(o Ownership, now time.Time) bool {
	if !f.At.IsZero() {
		now = f.At
	}
	return o.SandboxID == f.SandboxID && o.Node == f.Node && o.Epoch == f.Epoch && o.ValidAt(now)
}

type fenceKey struct{}

// WithFence returns a context under which every write of a Store is
// fenced by f: the store checks, inside the write's own transaction (on
// PostgreSQL under the store's write lock), that f holds, and otherwise
// commits nothing and returns a *FencedError. A node passes its (sandbox,
// epoch) this way to every store write it makes on behalf of a sandbox it
// owns, so a node that lost the lease cannot overwrite its new owner's
// state. Reads ignore the fence.
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceFrom returns the fence of ctx, if it carries one.
func FenceFrom(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}

// OwnershipStore keeps the sandboxes' owner leases, one per sandbox.
// Times are the caller's clock: a node passes its own now, so the cluster's
// clocks must agree to well within a lease's TTL; the epoch is what fences,
// whatever the clocks say.
//
// Contract, checked by storetest:
//   - AcquireOwnership gives node the sandbox's lease until now+ttl. It
//     succeeds when there is no lease (epoch 1), when the lease lapsed or
//     was released (epoch+1, whichever node held it), or when node holds
//     it in force (same epoch, expiry moved to now+ttl). A lease in force
//     held by another node is an error wrapping errs.ErrConflict, and
//     nothing changes. Of concurrent acquires of one sandbox, exactly one
//     wins. An empty id or node, or ttl <= 0, is errs.ErrInvalid.
//   - RenewOwnership moves the expiry of node's lease under epoch to
//     now+ttl; if node does not hold that lease in force at now it returns
//     a *FencedError and nothing changes.
//   - ReleaseOwnership ends node's lease under epoch at now (the row and its
//     epoch stay, so the next acquire bumps the epoch); releasing a lease
//     that node held under epoch and that already ended is nil; a lease of
//     another node or epoch is a *FencedError and nothing changes.
//   - GetOwnership returns the sandbox's lease, lapsed or not
//     (errs.ErrNotFound if it never had one).
//   - ListOwnerships returns node's leases (every node's for ""), lapsed
//     ones included, ordered by sandbox id.
//   - ExpireNodeOwnerships ends at now every lease of node in force at now
//     (failover: its sandboxes may then be acquired by other nodes) and
//     returns how many it ended.
//   - Every write made under a context of WithFence commits only if the
//     fence holds, checked in the same transaction; otherwise it returns a
//     *FencedError and changes nothing.
type OwnershipStore interface {
	AcquireOwnership(ctx context.Context, sandboxID, node string, ttl time.Duration, now time.Time) (Ownership, error)
	RenewOwnership(ctx context.Context, sandboxID, node string, epoch int64, ttl time.Duration, now time.Time) (Ownership, error)
	ReleaseOwnership(ctx context.Context, sandboxID, node string, epoch int64, now time.Time) error
	GetOwnership(ctx context.Context, sandboxID string) (Ownership, error)
	ListOwnerships(ctx context.Context, node string) ([]Ownership, error)
	ExpireNodeOwnerships(ctx context.Context, node string, now time.Time) (int, error)
}
