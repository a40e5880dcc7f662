package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/store"
)

// ScopeGuard is the repository's one writer per scope, by lease
// (repo.ScopeGuard for a cluster's nodes): a prune or repair of a scope
// holds the lease "scope/<scope>" and waits until no other node pushes
// into the scope; a push holds its node's lease "scope/<scope>/push/<node>"
// (one per node, counted for the node's concurrent pushes) and waits while
// another node holds the scope alone. Each side registers before it looks
// at the other, and the store orders the writes, so at least one of two
// racing sides sees the other: a push then steps back and waits, a prune
// waits for the push. The leases are renewed by the node's Leases; within
// one node the scope's own lock orders pushes and prunes, so a node never
// waits for itself.
type ScopeGuard struct {
	st     store.OwnershipStore
	leases *Leases
	clock  func() time.Time
	poll   time.Duration
	log    *slog.Logger

	mu     sync.Mutex
	pushes map[string]int // scope → this node's pushes holding it
}

var _ repo.ScopeGuard = (*ScopeGuard)(nil)

// NewScopeGuard returns the guard of the node whose leases are l; poll is
// how often a waiting side looks again (0: one second).
func NewScopeGuard(st store.OwnershipStore, l *Leases, poll time.Duration, log *slog.Logger) *ScopeGuard {
	if poll <= 0 {
		poll = time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	return &ScopeGuard{st: st, leases: l, clock: l.o.Clock, poll: poll, log: log, pushes: map[string]int{}}
}

// ScopeKey is the lease key of a scope held alone.
func ScopeKey(scope string) string { return "scope/" + scope }

// pushKey is the lease key of node's pushes into scope.
func pushKey(scope, node string) string { return ScopeKey(scope) + "/push/" + node }

// othersHold reports whether another node holds key in force.
func (g *ScopeGuard) othersHold(ctx context.Context, key string) (string, bool, error) {
	o, err := g.st.GetOwnership(ctx, key)
	if errors.Is(err, errs.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return o.Node, o.Node != g.leases.Node() && o.ValidAt(g.clock()), nil
}

// wait sleeps one poll, or returns ctx's error.
func (g *ScopeGuard) wait(ctx context.Context) error {
	t := time.NewTimer(g.poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Shared holds scope for one push of this node.
func (g *ScopeGuard) Shared(ctx context.Context, scope string) (func(), error) {
	key := pushKey(scope, g.leases.Node())
	logged := false
	for {
		g.mu.Lock()
		if g.pushes[scope] > 0 {
			// This node already holds the scope for a push: the prune
			// that would wait for it waits for this one as well.
			g.pushes[scope]++
			g.mu.Unlock()
			return g.releaser(scope, key), nil
		}
		g.mu.Unlock()
		if node, busy, err := g.othersHold(ctx, ScopeKey(scope)); err != nil {
			return nil, fmt.Errorf("hold scope %s for a push: %w", scope, err)
		} else if busy {
			if !logged {
				g.log.Info("push waits: another node prunes or repairs the scope", "scope", scope, "node", node)
				logged = true
			}
			if err := g.wait(ctx); err != nil {
				return nil, fmt.Errorf("hold scope %s for a push (node %s prunes or repairs it): %w", scope, node, err)
			}
			continue
		}
		g.mu.Lock()
		if g.pushes[scope] > 0 { // another push of this node got there first
			g.pushes[scope]++
			g.mu.Unlock()
			return g.releaser(scope, key), nil
		}
		if _, err := g.leases.Acquire(ctx, key); err != nil {
			g.mu.Unlock()
			return nil, fmt.Errorf("hold scope %s for a push: %w", scope, err)
		}
		g.pushes[scope] = 1
		g.mu.Unlock()
		// Registered; now look again: a prune that registered meanwhile
		// may not have seen this push, so the push steps back for it.
		if _, busy, err := g.othersHold(ctx, ScopeKey(scope)); err != nil || busy {
			g.releaser(scope, key)()
			if err != nil {
				return nil, fmt.Errorf("hold scope %s for a push: %w", scope, err)
			}
			continue
		}
		return g.releaser(scope, key), nil
	}
}

// releaser ends one push's hold of scope; the node's lease goes with its
// last push.
func (g *ScopeGuard) releaser(scope, key string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.pushes[scope]--
			last := g.pushes[scope] <= 0
			if last {
				delete(g.pushes, scope)
				// Under mu: a push starting now takes the lease again
				// after this release, not before it.
				if err := g.leases.Release(context.Background(), key); err != nil {
					g.log.Warn("release a push's scope lease (it lapses on its own)", "scope", scope, "err", err)
				}
			}
			g.mu.Unlock()
		})
	}
}

// Exclusive holds scope alone (prune, repair, forget): it takes the
// scope's lease (waiting while another node holds it) and then waits until
// no other node's push holds the scope. held ends when the lease does
// (Leases.Watch: lost to another node, or lapsing without a renew), so the
// operation stops deleting once another node may hold the scope.
func (g *ScopeGuard) Exclusive(ctx context.Context, scope string) (held context.Context, release func(), err error) {
	key := ScopeKey(scope)
	logged := false
	for {
		_, err := g.leases.Acquire(ctx, key)
		if err == nil {
			break
		}
		if !errors.Is(err, errs.ErrConflict) {
			return nil, nil, fmt.Errorf("hold scope %s alone: %w", scope, err)
		}
		if !logged {
			g.log.Info("prune or repair waits: another node holds the scope alone", "scope", scope)
			logged = true
		}
		if err := g.wait(ctx); err != nil {
			return nil, nil, fmt.Errorf("hold scope %s alone (another node prunes or repairs it): %w", scope, err)
		}
	}
	held, stop := g.leases.Watch(ctx, key)
	release = func() {
		stop()
		if err := g.leases.Release(context.Background(), key); err != nil {
			g.log.Warn("release a scope lease (it lapses on its own)", "scope", scope, "err", err)
		}
	}
	prefix := key + "/push/"
	logged = false
	for {
		owns, err := g.st.ListOwnerships(ctx, "")
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("hold scope %s alone: list leases: %w", scope, err)
		}
		now := g.clock()
		var busy []string
		for _, o := range owns {
			if strings.HasPrefix(o.SandboxID, prefix) && o.Node != g.leases.Node() && o.ValidAt(now) {
				busy = append(busy, o.Node)
			}
		}
		if len(busy) == 0 {
			if held.Err() != nil {
				release()
				return nil, nil, fmt.Errorf("hold scope %s alone: %w", scope, context.Cause(held))
			}
			return held, release, nil
		}
		if !logged {
			g.log.Info("prune or repair waits for other nodes' pushes into the scope", "scope", scope, "nodes", busy)
			logged = true
		}
		if err := g.wait(ctx); err != nil {
			release()
			return nil, nil, fmt.Errorf("hold scope %s alone (nodes %v push into it): %w", scope, busy, err)
		}
	}
}
