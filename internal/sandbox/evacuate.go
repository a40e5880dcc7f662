package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// The source node's half of an evacuation (internal/cluster
// failover_evacuate.go has the sequence): HandOff pushes, pauses, pushes
// the delta and releases the lease, keeping the sandbox frozen here;
// FinishHandOff then drops that frozen copy (the target adopted it) or
// takes the lease back and resumes it (the adoption failed).

// StopReasonEvacuate is the pause reason of a sandbox being handed over.
const StopReasonEvacuate = "evacuate"

// HandOff prepares sandbox id, which this node owns, to move to another
// node: a push while it runs (the bulk), a pause, a push of the delta
// (with its volumes; the push the target restores, recorded in the store),
// and the release of its lease. The sandbox stays here frozen until
// FinishHandOff. Any failure before the release resumes it and returns the
// error: it stays here, owned by this node.
func (s *Service) HandOff(ctx context.Context, id string) (cluster.HandOffResult, error) {
	var h cluster.HandOffResult
	sb, err := s.st.GetSandbox(ctx, "", id)
	if err == nil && sb.ID != id {
		err = fmt.Errorf("sandbox %s: give its id: %w", id, errs.ErrNotFound)
	}
	if err != nil {
		return h, fmt.Errorf("hand over sandbox %s: %w", id, err)
	}
	if _, ok := s.opts.Owner.Held(id); !ok {
		return h, notOwnedError(id, "hand over")
	}
	switch sb.State {
	case store.StateRunning, store.StatePaused, store.StateStopped:
	default:
		return h, fmt.Errorf("hand over sandbox %s: it is %s: %w", id, sb.State, errs.ErrConflict)
	}
	if _, err := s.repository(ctx); err != nil {
		return h, fmt.Errorf("hand over sandbox %s: %w", id, err)
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		return h, err
	}
	withVolumes := len(sp.Volumes) > 0
	h.Was = sb.State
	op := &operation{tenant: sb.TenantID, sandbox: id, changed: make(chan struct{}), v: client.Operation{StartedAt: s.now()}}
	if sb.State == store.StateRunning {
		// The bulk while it runs: the delta after the pause is small.
		if _, _, err := s.push(ctx, op, sb.TenantID, id, "", "push", withVolumes); err != nil {
			return h, fmt.Errorf("hand over sandbox %s: push: %w", id, err)
		}
		if _, err := s.pause(ctx, sb.TenantID, id, StopReasonEvacuate); err != nil {
			return h, fmt.Errorf("hand over sandbox %s: pause: %w", id, err)
		}
		h.PausedAt = s.now()
	}
	undo := func(err error) (cluster.HandOffResult, error) {
		if !h.PausedAt.IsZero() {
			if rerr := s.resumeHandedOff(context.WithoutCancel(ctx), id); rerr != nil {
				s.log.Error("resume a sandbox whose hand-over failed", "sandbox", id, "err", rerr)
			}
		}
		return cluster.HandOffResult{}, fmt.Errorf("hand over sandbox %s (it stays on this node): %w", id, err)
	}
	_, m, err := s.push(ctx, op, sb.TenantID, id, "", "push", withVolumes)
	if err != nil {
		return undo(fmt.Errorf("push the delta: %w", err))
	}
	h.Push = m.ID.String()
	// The target restores the push the store records: it must be this one.
	cur, err := s.st.GetSandbox(ctx, sb.TenantID, id)
	if err != nil {
		return undo(err)
	}
	if recorded, _ := cluster.LastPushOf(cur); recorded != h.Push {
		return undo(fmt.Errorf("the store records push %q, not the delta push %s: %w", recorded, h.Push, errs.ErrConflict))
	}
	// The mark lets the failover coordinator finish the hand-over if the
	// node running the evacuation dies before it does.
	epoch, _ := s.opts.Owner.Held(id)
	mark := cluster.HandOffMark{Node: s.opts.Owner.Node(), Epoch: epoch, Push: h.Push, Was: h.Was, PausedAt: h.PausedAt, At: s.now()}
	if cur.Spec, err = cluster.SetHandOffMark(cur.Spec, mark); err != nil {
		return undo(err)
	}
	if _, err := s.st.UpdateSandbox(ctx, cur); err != nil {
		return undo(fmt.Errorf("record the hand-over: %w", err))
	}
	if err := s.opts.Owner.Release(ctx, id); err != nil {
		s.clearHandOffMark(context.WithoutCancel(ctx), id)
		return undo(fmt.Errorf("release the lease: %w", err))
	}
	s.log.Info("sandbox handed over", "sandbox", id, "push", h.Push[:12], "was", h.Was)
	return h, nil
}

// FinishHandOff ends a HandOff of sandbox id: when moved (another node
// adopted it) the frozen copy here goes (its processes, its network, its
// root, and the volumes it mounts that no other sandbox of this node
// does); otherwise this node takes the lease back and resumes it if the
// hand-over paused it (takeBack). The evacuator calls it after the
// adoption; the failover coordinator calls it (not moved) for an orphaned
// hand-over.
func (s *Service) FinishHandOff(ctx context.Context, id string, h cluster.HandOffResult, moved bool) error {
	unlock := s.lock(id)
	defer unlock()
	if !moved {
		return s.takeBackHandOffLocked(ctx, id, h)
	}
	s.rt.Kill(ctx, id)
	s.closeAgentSocket(id)
	s.detachNetwork(ctx, id)
	s.act.forget(id)
	if err := s.pool.Delete(ctx, datasetName(id)); err != nil && !errors.Is(err, errs.ErrNotFound) {
		return fmt.Errorf("drop the moved sandbox %s's root: %w", id, err)
	}
	sb, err := s.st.GetSandbox(ctx, "", id)
	if err != nil {
		return err
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		return err
	}
	for _, vm := range sp.Volumes {
		if s.volumeUsedHere(ctx, vm.Volume, id) {
			continue
		}
		if err := s.pool.Delete(ctx, volumeDataset(vm.Volume)); err != nil && !errors.Is(err, errs.ErrNotFound) {
			return fmt.Errorf("drop volume %s of the moved sandbox %s: %w", vm.Volume, id, err)
		}
	}
	s.log.Info("moved sandbox dropped from this node", "sandbox", id)
	return nil
}

// takeBackHandOffLocked takes sandbox id back after a hand-over nobody
// finished with an adoption: only while its record still carries this
// node's hand-over mark, which an adoption clears in its record write, so
// a copy frozen here never runs again once another node adopted the
// sandbox (whatever became of that node since). Such a copy is kept as a
// lost copy (sandboxes/lost-<epoch>-<id>, as a returning node's: never
// run, listed by stead node lost ls, discarded by an operator) rather than
// dropped: it is what the delta push holds, but nothing here can tell
// that the push, or the adopted sandbox, still exists. A lease another
// node holds in force (an adoption running) refuses the take-back and
// changes nothing. Without a root here (a restart kept it as a lost copy)
// it is an errs.ErrNotFound, and changes nothing: the coordinator then has
// the sandbox adopted elsewhere from the hand-over's push. Taking back
// twice is nil.
func (s *Service) takeBackHandOffLocked(ctx context.Context, id string, h cluster.HandOffResult) error {
	sb, err := s.st.GetSandbox(ctx, "", id)
	if err != nil {
		return fmt.Errorf("take sandbox %s back: %w", id, err)
	}
	self := s.opts.Owner.Node()
	m, marked := cluster.HandOffMarkOf(sb)
	marked = marked && m.Node == self
	if _, held := s.opts.Owner.Held(id); held && !marked {
		return nil // taken back already
	}
	adoptedElsewhere := func(epoch int64) error {
		s.keepLostCopy(ctx, sb, epoch, "adopted by another node after its hand-over")
		return fmt.Errorf("take sandbox %s back: another node adopted it after this node handed it over; the copy here is kept as a lost copy, never run: %w", id, errs.ErrConflict)
	}
	if !marked {
		epoch := int64(0)
		if own, err := s.st.GetOwnership(ctx, id); err == nil {
			epoch = own.Epoch
		}
		return adoptedElsewhere(epoch)
	}
	if ok, err := s.pool.Exists(ctx, datasetName(id)); err != nil {
		return fmt.Errorf("take sandbox %s back: %w", id, err)
	} else if !ok {
		// Kept as a lost copy by a restart meanwhile (Reconcile found the
		// lease another's: a target adopting, or one whose adoption failed).
		return fmt.Errorf("take sandbox %s back: this node has no copy of it any more (its root is gone; it can be adopted from the hand-over's push %s): %w",
			id, m.Push, errs.ErrNotFound)
	}
	own, err := s.opts.Owner.Acquire(ctx, id)
	if err != nil {
		return fmt.Errorf("take sandbox %s back: %w", id, err)
	}
	// Under the lease now: nobody else writes the record. Is the mark
	// still this hand-over's?
	if sb, err = s.st.GetSandbox(ctx, "", id); err != nil {
		return fmt.Errorf("take sandbox %s back: %w", id, err)
	}
	if cur, ok := cluster.HandOffMarkOf(sb); !ok || cur.Node != self || cur.Epoch != m.Epoch || cur.Push != m.Push {
		if rerr := s.opts.Owner.Release(context.WithoutCancel(ctx), id); rerr != nil {
			s.log.Error("release the lease of a sandbox adopted elsewhere", "sandbox", id, "err", rerr)
		}
		return adoptedElsewhere(own.Epoch)
	}
	spec, err := cluster.ClearHandOffMark(sb.Spec)
	if err != nil {
		return fmt.Errorf("take sandbox %s back: %w", id, err)
	}
	if lm, lost := cluster.LostMarkOf(sb); lost {
		// Marked lost while this node was away, and nobody adopted it:
		// its state before the loss (the hand-over's pause).
		if spec, err = cluster.ClearLostMark(spec); err != nil {
			return fmt.Errorf("take sandbox %s back: %w", id, err)
		}
		sb.State, sb.StopReason = lm.State, ""
		if lm.State == store.StatePaused && !m.PausedAt.IsZero() {
			sb.StopReason = StopReasonEvacuate
		}
	}
	sb.Spec, sb.UpdatedAt = spec, s.now()
	if _, err := s.st.UpdateSandbox(ctx, sb); err != nil {
		return fmt.Errorf("take sandbox %s back: %w", id, err)
	}
	if !m.PausedAt.IsZero() || !h.PausedAt.IsZero() {
		if err := s.resumeHandedOffLocked(ctx, id); err != nil {
			return fmt.Errorf("take sandbox %s back: resume: %w", id, err)
		}
	}
	s.log.Info("sandbox taken back after a hand-over that did not move it", "sandbox", id, "epoch", own.Epoch)
	return nil
}

// clearHandOffMark removes the hand-over mark of sandbox id, which this
// node holds (a hand-over that failed before its release); a failure is
// logged: the coordinator ignores a mark whose lease is held.
func (s *Service) clearHandOffMark(ctx context.Context, id string) {
	sb, err := s.st.GetSandbox(ctx, "", id)
	if err == nil {
		if sb.Spec, err = cluster.ClearHandOffMark(sb.Spec); err == nil {
			_, err = s.st.UpdateSandbox(ctx, sb)
		}
	}
	if err != nil {
		s.log.Error("clear the mark of a failed hand-over", "sandbox", id, "err", err)
	}
}

// volumeUsedHere reports whether a sandbox other than except that this
// node holds mounts volume vol.
func (s *Service) volumeUsedHere(ctx context.Context, vol, except string) bool {
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{IncludeDeleted: true})
	if err != nil {
		return true // unsure: keep it
	}
	for _, sb := range list {
		if sb.ID == except {
			continue
		}
		if _, held := s.opts.Owner.Held(sb.ID); !held {
			continue
		}
		sp, err := decodeSpec(sb)
		if err != nil {
			return true
		}
		for _, vm := range sp.Volumes {
			if vm.Volume == vol {
				return true
			}
		}
	}
	return false
}

// resumeHandedOff resumes a sandbox a failed hand-over paused.
func (s *Service) resumeHandedOff(ctx context.Context, id string) error {
	unlock := s.lock(id)
	defer unlock()
	return s.resumeHandedOffLocked(ctx, id)
}

func (s *Service) resumeHandedOffLocked(ctx context.Context, id string) error {
	sb, err := s.st.GetSandbox(ctx, "", id)
	if err != nil {
		return err
	}
	if sb.State != store.StatePaused || sb.StopReason != StopReasonEvacuate {
		return nil // someone else changed it meanwhile: leave it
	}
	if err := s.rt.Resume(ctx, id); err != nil {
		return err
	}
	fctx, err := s.opts.Owner.Fence(ctx, id)
	if err != nil {
		return err
	}
	sb.State, sb.StopReason, sb.UpdatedAt = store.StateRunning, "", s.now()
	_, err = s.st.UpdateSandbox(fctx, sb)
	return err
}

// NodeEvacuation serves POST /v1/nodes/{name}/evacuate (api.EvacuateBackend)
// as an operation of Service: Evacuate (cluster.Evacuator.Evacuate) runs in
// it and its phases are the operation's progress.
type NodeEvacuation struct {
	Service  *Service
	Evacuate func(ctx context.Context, node string, phase func(string)) (client.EvacuateResult, error)
}

var _ api.EvacuateBackend = NodeEvacuation{}

// EvacuateNode starts the evacuation of node as an operation of p's
// tenant; it fails when a sandbox stayed on the node (the result lists
// them with their reasons).
func (e NodeEvacuation) EvacuateNode(ctx context.Context, p api.Principal, node string, req client.EvacuateRequest) (client.Operation, error) {
	if e.Service == nil || e.Evacuate == nil {
		return client.Operation{}, fmt.Errorf("evacuate node %s: this daemon is not part of a cluster: %w", node, errs.ErrUnsupported)
	}
	return e.Service.startOp(ctx, p.TenantID, "evacuate", node, req.Wait, func(ctx context.Context, op *operation) (any, error) {
		res, err := e.Evacuate(ctx, node, op.phase)
		if err == nil && len(res.Failed) > 0 {
			err = fmt.Errorf("%d of %d sandboxes stayed on node %s (see the result): %w", len(res.Failed), len(res.Failed)+len(res.Moved), node, errs.ErrConflict)
		}
		return res, err
	})
}
