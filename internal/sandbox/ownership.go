package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/pool"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/store"
)

// In a cluster (Options.Owner is not the sole owner) this node acts only on
// the sandboxes whose owner lease it holds:
//   - a create acquires the new sandbox's lease before its record exists;
//   - every write of a sandbox record goes through fencedStore, which
//     commits only while this node holds that sandbox's lease (checked in
//     the store's transaction: a node that lost the lease cannot overwrite
//     the new owner's record, whatever it believes);
//   - lifecycle verbs, exec, files and pushes check the lease first and
//     refuse with errs.ErrConflict when it is not held;
//   - the node-local loops (idle policy, limits, retention, pushes on a
//     policy, metering of disk) see only the sandboxes this node holds;
//   - at start-up Reconcile claims the sandboxes whose lease names this
//     node (or that have none and whose root is in this pool), and treats
//     the rest as other nodes' business;
//   - a lease lost while running (taken over after a partition, expired by
//     failover) stops the local copy without pushing it and keeps its root
//     as a recoverable dataset (LeaseLost).

// lostPrefix names the root of a sandbox copy this node lost the lease
// of: sandboxes/lost-<epoch>-<id>, kept until an operator discards it.
const lostPrefix = "lost-"

// clustered reports whether sandboxes have owners other than this node.
func (s *Service) clustered() bool {
	_, sole := s.opts.Owner.(soleOwner)
	return !sole
}

// holds reports whether this node may act on sandbox id now.
func (s *Service) holds(id string) bool {
	_, ok := s.opts.Owner.Held(id)
	return ok
}

// mustHold refuses verb on sandbox id unless this node holds its lease.
func (s *Service) mustHold(id, verb string) error {
	if s.holds(id) {
		return nil
	}
	return notOwnedError(id, verb)
}

// owned keeps the sandboxes of list this node holds the lease of (all of
// them on a single node).
func (s *Service) owned(list []store.Sandbox) []store.Sandbox {
	if !s.clustered() {
		return list
	}
	out := list[:0:0]
	for _, sb := range list {
		if s.holds(sb.ID) {
			out = append(out, sb)
		}
	}
	return out
}

// fencedStore makes every write of a sandbox record under the fence of
// that sandbox's lease (cluster.Leases.Fence): it commits only while this
// node holds the lease, checked by the store in the write's transaction.
type fencedStore struct {
	store.Store
	owner Owner
}

func (f fencedStore) fence(ctx context.Context, id string) (context.Context, error) {
	if fc, ok := store.FenceFrom(ctx); ok && fc.SandboxID == id {
		return ctx, nil
	}
	return f.owner.Fence(ctx, id)
}

// CreateSandbox stores s under the fence of its lease.
func (f fencedStore) CreateSandbox(ctx context.Context, s store.Sandbox) (store.Sandbox, error) {
	ctx, err := f.fence(ctx, s.ID)
	if err != nil {
		return store.Sandbox{}, err
	}
	return f.Store.CreateSandbox(ctx, s)
}

// UpdateSandbox stores s under the fence of its lease.
func (f fencedStore) UpdateSandbox(ctx context.Context, s store.Sandbox) (store.Sandbox, error) {
	ctx, err := f.fence(ctx, s.ID)
	if err != nil {
		return store.Sandbox{}, err
	}
	return f.Store.UpdateSandbox(ctx, s)
}

// DeleteSandbox removes the record under the fence of its lease.
func (f fencedStore) DeleteSandbox(ctx context.Context, tenant, id string) error {
	ctx, err := f.fence(ctx, id)
	if err != nil {
		return err
	}
	return f.Store.DeleteSandbox(ctx, tenant, id)
}

// CreateSnapshot stores a snapshot of a sandbox under the fence of the
// sandbox's lease: a push or a snapshot is published only by its owner.
func (f fencedStore) CreateSnapshot(ctx context.Context, sn store.Snapshot) error {
	if sn.SandboxID != "" && sn.Kind != "volume" {
		var err error
		if ctx, err = f.fence(ctx, sn.SandboxID); err != nil {
			return err
		}
	}
	return f.Store.CreateSnapshot(ctx, sn)
}

// claim decides, at start-up in a cluster, which records of list are this
// node's: those whose lease names this node, and those with no lease whose
// root is in this node's pool (a single-node daemon's sandboxes when it
// joins a cluster). It acquires their leases; a lease another node took
// meanwhile (failover while this node was away) makes the local copy a
// lost one (LeaseLost's keeping, without the stop: nothing runs yet).
func (s *Service) claim(ctx context.Context, list []store.Sandbox) []store.Sandbox {
	self := s.opts.Owner.Node()
	if !s.clustered() {
		return list
	}
	var mine []store.Sandbox
	for _, sb := range list {
		own, err := s.st.GetOwnership(ctx, sb.ID)
		switch {
		case err == nil && own.Node != self:
			// Another node's. A root of it here is a copy this node ran
			// before the sandbox moved (failover while this node was away,
			// or a partition): kept, never run.
			if ok, _ := s.pool.Exists(ctx, datasetName(sb.ID)); ok {
				s.keepLostCopy(ctx, sb, own.Epoch, "node "+own.Node+" owns it now")
			}
			continue
		case errors.Is(err, errs.ErrNotFound):
			if ok, _ := s.pool.Exists(ctx, datasetName(sb.ID)); !ok {
				continue
			}
		case err != nil:
			s.log.Error("reconcile: read the sandbox's lease; leaving it alone", "sandbox", sb.ID, "err", err)
			continue
		}
		if sb.State == store.StateLost {
			// Failover marked it lost while this node was away. If no
			// node restored it meanwhile, this node's copy is newer than
			// any push: take it back. Otherwise keep the copy, never run.
			if back, ok := s.takeBack(ctx, sb); ok {
				mine = append(mine, back)
			} else {
				s.keepLostCopy(ctx, sb, own.Epoch, "marked lost while this node was away")
			}
			continue
		}
		if _, err := s.opts.Owner.Acquire(ctx, sb.ID); err != nil {
			if errors.Is(err, errs.ErrConflict) {
				s.keepLostCopy(ctx, sb, own.Epoch, "another node took its lease while this node was away")
			} else {
				s.log.Error("reconcile: acquire the sandbox's lease; leaving it alone", "sandbox", sb.ID, "err", err)
			}
			continue
		}
		mine = append(mine, sb)
	}
	return mine
}

// keepPurgedRoots keeps, at start-up in a cluster, the roots in this
// node's pool of sandboxes whose record is gone and whose lease another
// node took: a node that purged them while this node was away (a tenant's
// deletion, which purges a dead node's sandboxes under their lapsed
// lease). Each becomes a lost copy (keepLostCopy), never run, for an
// operator to discard. records are all the sandbox records; a root whose
// lease is this node's, or that has none (a warm sandbox, a crashed
// create), and a spare clone (spares.go) are left to the rest of Reconcile.
func (s *Service) keepPurgedRoots(ctx context.Context, records []store.Sandbox) {
	if !s.clustered() {
		return
	}
	ids, err := s.pool.List(ctx, pool.KindSandbox)
	if err != nil {
		s.log.Error("reconcile: list the pool's sandbox roots", "err", err)
		return
	}
	known := make(map[string]bool, len(records))
	for _, sb := range records {
		known[sb.ID] = true
	}
	self := s.opts.Owner.Node()
	for _, id := range ids {
		if known[id] || strings.HasPrefix(id, lostPrefix) || strings.HasPrefix(id, rollbackPrefix) || isSpare(id) {
			continue
		}
		own, err := s.st.GetOwnership(ctx, id)
		if err != nil || own.Node == self {
			continue
		}
		s.keepLostCopy(ctx, store.Sandbox{ID: id}, own.Epoch, "node "+own.Node+" purged it while this node was away")
	}
}

// takeBack resumes ownership of a sandbox failover marked lost from this
// node, when no other node has taken its lease since: the lease is
// acquired (epoch + 1), the lost mark cleared and the state before the
// loss restored (Reconcile then finds its processes alive or crashed).
func (s *Service) takeBack(ctx context.Context, sb store.Sandbox) (store.Sandbox, bool) {
	m, ok := cluster.LostMarkOf(sb)
	if !ok || m.Node != s.opts.Owner.Node() {
		return sb, false
	}
	if ok, _ := s.pool.Exists(ctx, datasetName(sb.ID)); !ok {
		return sb, false
	}
	own, err := s.opts.Owner.Acquire(ctx, sb.ID)
	if err != nil {
		return sb, false
	}
	back, err := s.clearLost(ctx, sb, m)
	if err != nil {
		s.log.Error("take back a sandbox marked lost", "sandbox", sb.ID, "err", err)
		s.opts.Owner.Release(ctx, sb.ID)
		return sb, false
	}
	s.log.Info("took back a sandbox marked lost while this node was away (no other node restored it)", "sandbox", sb.ID, "epoch", own.Epoch)
	return back, true
}

// clearLost writes sb back as it was before failover marked it lost with
// m: the mark gone, its state before the loss (under the lease this node
// holds again).
func (s *Service) clearLost(ctx context.Context, sb store.Sandbox, m cluster.LostMark) (store.Sandbox, error) {
	spec, err := cluster.ClearLostMark(sb.Spec)
	if err != nil {
		return sb, err
	}
	sb.Spec, sb.State, sb.StopReason = spec, m.State, ""
	return s.st.UpdateSandbox(ctx, sb)
}

// LeaseLapsed is called (cluster.LeaseOptions.OnLapse) when sandbox id's
// lease is about to lapse with no renew: the store is out of reach, and
// once it lapsed another node may run the sandbox. Its processes are
// frozen at once (kept, not killed); LeaseRegained thaws them, LeaseLost
// kills them and keeps the root. No store write is made.
func (s *Service) LeaseLapsed(ctx context.Context, id string) {
	ctx = context.WithoutCancel(ctx)
	st, err := s.rt.Status(ctx, id)
	if err != nil || st != steadrt.StatusRunning {
		return // nothing runs here (or already frozen by a pause)
	}
	if err := s.rt.Pause(ctx, id); err != nil {
		s.log.Error("freeze a sandbox whose lease is lapsing", "sandbox", id, "err", err)
		return
	}
	s.lapsedMu.Lock()
	if s.lapsed == nil {
		s.lapsed = map[string]bool{}
	}
	s.lapsed[id] = true
	s.lapsedMu.Unlock()
	s.log.Warn("froze the sandbox: its lease is lapsing without a renew (store out of reach)", "sandbox", id)
}

// LeaseRegained is called (cluster.LeaseOptions.OnRegain) when this node
// took a lapsed lease again with no other node having held it since: what
// LeaseLapsed froze runs again, and a lost mark failover wrote meanwhile
// is cleared (the sandbox is this node's again, with newer data than any
// push).
func (s *Service) LeaseRegained(ctx context.Context, id string) {
	ctx = context.WithoutCancel(ctx)
	unlock := s.lock(id)
	defer unlock()
	if sb, err := s.opts.Store.GetSandbox(ctx, "", id); err == nil && sb.State == store.StateLost {
		if m, ok := cluster.LostMarkOf(sb); ok && m.Node == s.opts.Owner.Node() {
			if _, err := s.clearLost(ctx, sb, m); err != nil {
				s.log.Error("clear the lost mark of a regained sandbox", "sandbox", id, "err", err)
			}
		}
	}
	s.lapsedMu.Lock()
	froze := s.lapsed[id]
	delete(s.lapsed, id)
	s.lapsedMu.Unlock()
	if froze {
		if err := s.rt.Resume(ctx, id); err != nil {
			s.log.Error("thaw a sandbox whose lease was regained", "sandbox", id, "err", err)
			return
		}
		s.log.Info("thawed the sandbox: its lease is this node's again", "sandbox", id)
	}
}

// LeaseLost is called (cluster.LeaseOptions.OnLost) when this node learns
// it lost sandbox id's lease: another node took it over, or it lapsed or
// was expired by failover. The local copy stops at once, without a push
// (it would be fenced, and the new owner's state wins), and its root is
// kept as sandboxes/lost-<epoch>-<id> for an operator to inspect or
// discard. No store write is made: they would be fenced.
func (s *Service) LeaseLost(ctx context.Context, id string, cause error) {
	ctx = context.WithoutCancel(ctx)
	unlock := s.lock(id)
	defer unlock()
	sb, err := s.opts.Store.GetSandbox(ctx, "", id)
	if err != nil {
		sb = store.Sandbox{ID: id}
	}
	epoch := int64(0)
	if own, err := s.st.GetOwnership(ctx, id); err == nil {
		epoch = own.Epoch
	}
	s.lapsedMu.Lock()
	delete(s.lapsed, id)
	s.lapsedMu.Unlock()
	s.log.Warn("lost the sandbox's lease: stopping the local copy without pushing it", "sandbox", id, "cause", cause)
	s.keepLostCopy(ctx, sb, epoch, "lease lost: "+errString(cause))
}

// keepLostCopy stops whatever runs of sandbox sb here and renames its root
// to a lost copy, so a later adopt of the same id on this node starts
// clean and the divergent data stays recoverable.
func (s *Service) keepLostCopy(ctx context.Context, sb store.Sandbox, epoch int64, why string) {
	if err := s.rt.Kill(ctx, sb.ID); err != nil && !errors.Is(err, errs.ErrNotFound) {
		s.log.Error("stop the lost sandbox's copy", "sandbox", sb.ID, "err", err)
	}
	s.closeAgentSocket(sb.ID)
	s.detachNetwork(ctx, sb.ID)
	s.act.forget(sb.ID)
	ok, err := s.pool.Exists(ctx, datasetName(sb.ID))
	if err != nil || !ok {
		return
	}
	dst := lostCopyDataset(epoch, sb.ID)
	if err := s.pool.Rename(ctx, datasetName(sb.ID), dst); err != nil {
		s.log.Error("keep the lost sandbox's copy", "sandbox", sb.ID, "dataset", dst, "err", err)
		return
	}
	s.log.Warn("kept the root of a sandbox this node no longer owns", "sandbox", sb.ID, "dataset", dst, "why", why)
	s.event(ctx, events.SandboxLostCopy, sb.TenantID, sb.ID, map[string]string{"dataset": dst, "epoch": strconv.FormatInt(epoch, 10), "why": why})
}

func errString(err error) string {
	if err == nil {
		return "unknown"
	}
	return err.Error()
}

// notOwnedError says this node may not act on a sandbox: another node owns
// it, or this node's lease lapsed.
func notOwnedError(id, verb string) error {
	return fmt.Errorf("%s sandbox %s: this node does not hold its lease (another node owns it, or the lease lapsed): %w", verb, id, errs.ErrConflict)
}
