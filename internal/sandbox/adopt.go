package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/repo/seal"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/store"
)

// Adoption: this node takes over a sandbox whose root is elsewhere (a lost
// node's, or a node being evacuated) and restores it from its latest push
// recorded in the store (docs/cluster.md, sections 5 and 7).
//
// Order, each step redone by a retried adopt:
//  1. the lease: Owner.Acquire gives this node the sandbox at a higher
//     epoch than the node it leaves (whose lease lapsed, was expired by
//     the failover coordinator, or was released by an evacuation); a lease
//     another node holds in force refuses the adoption, and a failed
//     adoption releases the lease again, so the coordinator may retry on
//     another node;
//  2. the volumes the sandbox mounts that have no dataset here are each
//     restored from their push (the one made with the sandbox's push, else
//     the volume's latest) into a temporary dataset, renamed into place
//     under the volume's own id once complete (so a dataset under the
//     volume's id is always whole; a crash leaves a temporary one that the
//     retry, or Reconcile, deletes). A volume without a push refuses the
//     adoption before anything is restored;
//  3. the root: any leftover of an earlier attempt (runtime state, dataset)
//     is removed, and the push is restored into the dataset of the same id;
//  4. the record, under the lease's fence: the lost mark and a hand-over's
//     mark cleared, an "adopted" mark with the epoch, stopped; then, if
//     the sandbox was running or paused, it is started (a start failure
//     leaves it stopped and adopted: the adoption itself is done).
//
// The record (name, spec with network policy, exposed ports, volumes,
// labels), the address lease and the agent state (checkpoints, session
// log, tasks) are in the store already, and are the same after.

// adoptedMark is what an adoption records in the spec (key "adopted").
type adoptedMark struct {
	Node  string    `json:"node,omitempty"`
	Epoch int64     `json:"epoch"`
	Push  string    `json:"push"`
	At    time.Time `json:"at"`
}

// failoverPolicy checks a create's failover policy ("" is restore).
func failoverPolicy(p string) (string, error) {
	switch p {
	case "", client.FailoverRestore:
		return client.FailoverRestore, nil
	case client.FailoverNone:
		return client.FailoverNone, nil
	}
	return "", fmt.Errorf("failover %q (want restore or none): %w", p, errs.ErrInvalid)
}

// failoverView is a sandbox's failover policy and its RPO facts, as the
// failover coordinator reads them.
func failoverView(sb store.Sandbox) (policy string, lastPushAt *time.Time, lastPushID string) {
	lastPushID, lastPushAt = cluster.LastPushOf(sb)
	return cluster.FailoverPolicyOf(sb), lastPushAt, lastPushID
}

// volumeRestore is a volume of an adopted sandbox to restore here.
type volumeRestore struct {
	id string
	sc *repo.Scope
	m  *repo.Manifest
}

// Adopt makes this node the owner of sandbox id and restores it from its
// latest push recorded in the store, with the same id, name, spec,
// network policy, exposed ports and volumes; it runs again if it ran (or
// was paused) when it was lost or handed over. The sandbox must be lost
// (its node lapsed) or released by its node (an evacuation); a lease in
// force of another node is an errs.ErrConflict, and so is a sandbox without
// a recorded push or with a mounted volume that has no push (it stays as
// it was). Adopt is idempotent: a retry after a partial adoption removes
// what that one left and redoes it; a retry after a complete one under the
// same lease returns the sandbox.
func (s *Service) Adopt(ctx context.Context, id string) (client.Sandbox, error) {
	sb, err := s.st.GetSandbox(ctx, "", id)
	if err == nil && sb.ID != id {
		err = fmt.Errorf("sandbox %s: give its id: %w", id, errs.ErrNotFound)
	}
	if err != nil {
		return client.Sandbox{}, fmt.Errorf("adopt sandbox %s: %w", id, err)
	}
	unlock := s.lock(id)
	defer unlock()
	out, err := s.adoptLocked(ctx, id)
	s.record(ctx, sb.TenantID, "sandbox.adopt", id, err)
	if err != nil {
		s.event(ctx, events.FailoverFailed, sb.TenantID, id, map[string]string{"error": err.Error(), "step": "adopt"})
		return out, fmt.Errorf("adopt sandbox %s: %w", id, err)
	}
	return out, nil
}

func (s *Service) adoptLocked(ctx context.Context, id string) (client.Sandbox, error) {
	sb, err := s.st.GetSandbox(ctx, "", id)
	if err != nil {
		return client.Sandbox{}, err
	}
	switch sb.State {
	case store.StateDeleted, store.StateArchived, store.StateCreating:
		return client.Sandbox{}, fmt.Errorf("it is %s: %w", sb.State, errs.ErrConflict)
	}
	mark, lost := cluster.LostMarkOf(sb)
	want := sb.State
	if lost {
		want = mark.State
	}
	pushID, _ := cluster.LastPushOf(sb)
	if pushID == "" {
		return client.Sandbox{}, fmt.Errorf("it has no push recorded, so there is nothing to restore (its files were only on its node): %w", errs.ErrConflict)
	}
	mid, err := seal.ParseID(pushID)
	if err != nil {
		return client.Sandbox{}, fmt.Errorf("its recorded push %q: %w", pushID, errs.ErrInvalid)
	}
	if !lost {
		// Never over a live copy on this node: only a sandbox that is not
		// here is adopted.
		if st, _ := s.rt.Status(ctx, id); st == steadrt.StatusRunning || st == steadrt.StatusPaused {
			if _, held := s.opts.Owner.Held(id); held {
				return client.Sandbox{}, fmt.Errorf("it runs on this node already: %w", errs.ErrConflict)
			}
		}
	}
	own, err := s.opts.Owner.Acquire(ctx, id)
	if err != nil {
		return client.Sandbox{}, fmt.Errorf("take its lease: %w", err)
	}
	if am, ok := adoptedOf(sb); ok && !lost && am.Epoch == own.Epoch && am.Push == pushID {
		if ok, _ := s.pool.Exists(ctx, datasetName(id)); ok {
			return s.view(sb), nil // done already, under this lease
		}
	}
	done := false
	defer func() {
		if !done {
			// Another node may try: the coordinator restores only sandboxes
			// whose lease no node holds.
			if err := s.opts.Owner.Release(context.WithoutCancel(ctx), id); err != nil {
				s.log.Error("release the lease of a failed adoption", "sandbox", id, "err", err)
			}
		}
	}()
	fctx, err := s.opts.Owner.Fence(ctx, id)
	if err != nil {
		return client.Sandbox{}, err
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		return client.Sandbox{}, err
	}
	sc, err := s.scope(ctx, sb.TenantID, false)
	if err != nil {
		return client.Sandbox{}, err
	}
	vols, err := s.adoptVolumePlan(ctx, sp, pushID)
	if err != nil {
		return client.Sandbox{}, err
	}
	t0 := time.Now()
	if err := s.restoreAdoptedVolumes(ctx, sb.TenantID, vols); err != nil {
		return client.Sandbox{}, err
	}
	rs, err := s.restoreAdoptedRoot(ctx, sb, sp, sc, mid)
	if err != nil {
		return client.Sandbox{}, err
	}
	// The record, fenced by the new lease.
	// Both marks go: the lost one, and a hand-over's (so its source never
	// takes the sandbox back: FinishHandOff).
	spec, err := cluster.ClearLostMark(sb.Spec)
	if err == nil {
		spec, err = cluster.ClearHandOffMark(spec)
	}
	if err == nil {
		spec, err = setSpecJSON(spec, "adopted", adoptedMark{Epoch: own.Epoch, Node: own.Node, Push: pushID, At: s.now()})
	}
	if err != nil {
		return client.Sandbox{}, err
	}
	now := s.now()
	sb.Spec, sb.State, sb.StopReason, sb.StoppedAt, sb.UpdatedAt = spec, store.StateStopped, "adopted", &now, now
	if sb, err = s.st.UpdateSandbox(fctx, sb); err != nil {
		return client.Sandbox{}, fmt.Errorf("record the adoption: %w", err)
	}
	done = true
	s.log.Info("sandbox adopted from its push", "sandbox", id, "tenant", sb.TenantID, "push", pushID[:12], "epoch", own.Epoch,
		"from", mark.Node, "files", rs.Files, "bytes", rs.BytesWritten, "volumes", len(vols), "dur", time.Since(t0))
	s.event(ctx, events.SandboxAdopted, sb.TenantID, id, map[string]string{"epoch": strconv.FormatInt(own.Epoch, 10),
		"push": pushID, "from": mark.Node, "node": own.Node})
	if want != store.StateRunning && want != store.StatePaused {
		return s.view(sb), nil
	}
	tmpl, err := s.template(ctx, sb.TenantID, sb.TemplateID)
	if err != nil {
		return s.view(sb), fmt.Errorf("adopted, but not started: %w", err)
	}
	started, err := s.startLocked(fctx, sb, tmpl)
	if err != nil {
		return s.view(sb), fmt.Errorf("adopted, but not started: %w", err)
	}
	return s.view(started), nil
}

// adoptVolumePlan finds the push of each volume sp mounts that has no
// dataset here; a volume without one refuses the adoption.
func (s *Service) adoptVolumePlan(ctx context.Context, sp spec, pushID string) ([]volumeRestore, error) {
	var out []volumeRestore
	seen := map[string]bool{}
	for _, vm := range sp.Volumes {
		if seen[vm.Volume] {
			continue
		}
		seen[vm.Volume] = true
		if ok, err := s.pool.Exists(ctx, volumeDataset(vm.Volume)); err != nil {
			return nil, err
		} else if ok {
			continue // it lives here (or an earlier attempt restored it whole)
		}
		sc, m, err := s.volumePushOf(ctx, vm.Volume, pushID)
		if errors.Is(err, errs.ErrNotFound) {
			return nil, fmt.Errorf("volume %s mounted at %s has no push, so it cannot follow the sandbox (push it with stead volume push, or push the sandbox with --include-volumes): %w",
				vm.Volume, vm.Path, errs.ErrConflict)
		}
		if err != nil {
			return nil, fmt.Errorf("find the push of volume %s: %w", vm.Volume, err)
		}
		out = append(out, volumeRestore{id: vm.Volume, sc: sc, m: m})
	}
	return out, nil
}

// volumePushOf finds, in volume id's own scope, the push made with the
// sandbox push pushID (include_volumes), else the volume's latest.
func (s *Service) volumePushOf(ctx context.Context, id, pushID string) (*repo.Scope, *repo.Manifest, error) {
	r, err := s.repository(ctx)
	if err != nil {
		return nil, nil, err
	}
	sc, err := r.Scope(ctx, volumeScope(id), false)
	if err != nil {
		return nil, nil, err // errs.ErrNotFound: never pushed
	}
	ms, err := sc.Snapshots(ctx)
	if err != nil {
		return nil, nil, err
	}
	var latest *repo.Manifest
	for _, m := range ms {
		if m.Source != "volume/"+id {
			continue
		}
		if m.Labels["sandbox_push"] == pushID {
			return sc, m, nil
		}
		if latest == nil || m.Time.After(latest.Time) {
			latest = m
		}
	}
	if latest == nil {
		return nil, nil, fmt.Errorf("volume %s has no push: %w", id, errs.ErrNotFound)
	}
	return sc, latest, nil
}

// adoptTempVolume names the temporary dataset a volume is restored into.
func adoptTempVolume(id string) string {
	return volumeDataset("adopt-" + strings.TrimPrefix(id, volumePrefix))
}

// restoreAdoptedVolumes restores each volume of vols into a temporary
// dataset and renames it into place once whole.
func (s *Service) restoreAdoptedVolumes(ctx context.Context, tenant string, vols []volumeRestore) error {
	for _, v := range vols {
		tmp := adoptTempVolume(v.id)
		if ok, _ := s.pool.Exists(ctx, tmp); ok {
			if err := s.pool.Delete(ctx, tmp); err != nil {
				return fmt.Errorf("remove the leftover of an earlier adoption: %w", err)
			}
		}
		if err := s.pool.Create(ctx, tmp); err != nil {
			return fmt.Errorf("restore volume %s: %w", v.id, err)
		}
		fail := func(err error) error {
			s.pool.Delete(context.WithoutCancel(ctx), tmp)
			return fmt.Errorf("restore volume %s from %s: %w", v.id, v.m.ID, err)
		}
		// The restore brings the root's own owner and mode back.
		if err := os.Chown(s.pool.Path(tmp), 0, 0); err != nil {
			return fail(err)
		}
		if _, err := v.sc.Restore(ctx, v.m.ID, s.pool.Path(tmp), repo.RestoreOptions{}); err != nil {
			return fail(err)
		}
		vr, err := s.st.GetVolume(ctx, tenant, v.id)
		if err != nil {
			return fail(err)
		}
		if s.pool.Caps().Quota && vr.SizeBytes > 0 {
			if err := s.pool.SetQuota(ctx, tmp, vr.SizeBytes); err != nil {
				return fail(err)
			}
		}
		if err := s.pool.Rename(ctx, tmp, volumeDataset(v.id)); err != nil {
			return fail(err)
		}
		// The volume's data is here now: its routes and the placement of
		// creates that mount it follow it.
		if vr.Node != s.opts.Owner.Node() {
			vr.Node = s.opts.Owner.Node()
			if err := s.st.UpdateVolume(ctx, vr); err != nil {
				return fmt.Errorf("record volume %s on node %s: %w", v.id, vr.Node, err)
			}
		}
	}
	return nil
}

// restoreAdoptedRoot removes what an earlier attempt left of the sandbox
// here and restores push mid into its root dataset.
func (s *Service) restoreAdoptedRoot(ctx context.Context, sb store.Sandbox, sp spec, sc *repo.Scope, mid seal.ID) (repo.RestoreStats, error) {
	var rs repo.RestoreStats
	if st, _ := s.rt.Status(ctx, sb.ID); st != steadrt.StatusAbsent {
		s.rt.Kill(ctx, sb.ID)
	}
	s.closeAgentSocket(sb.ID)
	s.detachNetwork(ctx, sb.ID)
	ds := datasetName(sb.ID)
	if ok, _ := s.pool.Exists(ctx, ds); ok {
		if err := s.pool.Delete(ctx, ds); err != nil {
			return rs, fmt.Errorf("remove the leftover root: %w", err)
		}
	}
	if err := s.pool.Create(ctx, ds); err != nil {
		return rs, err
	}
	rs, err := sc.Restore(ctx, mid, s.pool.Path(ds), repo.RestoreOptions{})
	if err != nil {
		s.pool.Delete(context.WithoutCancel(ctx), ds)
		return rs, fmt.Errorf("restore the root from push %s: %w", mid.String()[:12], err)
	}
	if s.pool.Caps().Quota && sp.Limits.DiskBytes > 0 {
		if err := s.pool.SetQuota(ctx, ds, sp.Limits.DiskBytes); err != nil {
			return rs, err
		}
	}
	return rs, nil
}

// adoptedOf returns the adopted mark of a sandbox, if any.
func adoptedOf(sb store.Sandbox) (adoptedMark, bool) {
	var v struct {
		Adopted *adoptedMark `json:"adopted"`
	}
	if json.Unmarshal(sb.Spec, &v) != nil || v.Adopted == nil {
		return adoptedMark{}, false
	}
	return *v.Adopted, true
}

// setSpecJSON sets key of a spec's JSON object to v.
func setSpecJSON(spec []byte, key string, v any) ([]byte, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(spec, &raw); err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	raw[key] = b
	return json.Marshal(raw)
}

// lostHint is what a verb refused on a lost sandbox says.
const lostHint = " (its node stopped answering: with failover restore and a push it runs again on another node; stead show gives its last push)"
