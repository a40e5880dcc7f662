package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/store"
)

// Local snapshots, forks and rollback.
//
// A snapshot is a read-only clone of a sandbox's root dataset
// (snapshots/<id>: an O(1) btrfs snapshot), taken with the sandbox's
// processes frozen for only the instant it takes. A fork clones a snapshot
// into new sandboxes. A rollback clones the snapshot beside the sandbox's
// root and swaps the two atomically (Pool.Exchange), after a safety
// snapshot of what it replaces.
//
// Crash ordering: a snapshot's dataset is made before its record, so a
// crash leaves at most an unrecorded dataset, which Reconcile deletes. A
// rollback's temporary dataset (sandboxes/rb-<id>) holds either the new
// clone (before the swap) or the old root (after it, already kept by the
// safety snapshot); Reconcile deletes it either way.

const (
	snapshotPrefix = "snap-"
	rollbackPrefix = "rb-"
	maxFork        = 50
	forkParallel   = 4
)

func newSnapshotID() string {
	var b [8]byte
	rand.Read(b[:])
	return snapshotPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

func snapshotDataset(id string) string { return pool.KindSnapshot + "/" + id }

func snapshotView(sn store.Snapshot) client.Snapshot {
	v := client.Snapshot{ID: sn.ID, Sandbox: sn.SandboxID, SandboxName: sn.SandboxName, Parent: sn.ParentID,
		Label: sn.Label, Description: sn.Description, Kind: sn.Kind, CreatedAt: sn.CreatedAt}
	if sn.FrozenFor > 0 {
		v.FrozenFor = sn.FrozenFor.String()
	}
	return v
}

// CreateSnapshot takes a read-only snapshot of a running, paused or stopped
// sandbox.
func (s *Service) CreateSnapshot(ctx context.Context, tenant, id string, req client.CreateSnapshotRequest) (client.Snapshot, error) {
	var out store.Snapshot
	var clones map[string]string // volume id → clone dataset
	releaseQuota := func() {}
	defer func() { releaseQuota() }() // once every snapshot record is stored
	_, err := s.transition(ctx, tenant, id, "snapshot",
		[]store.SandboxState{store.StateRunning, store.StatePaused, store.StateStopped}, nil,
		func(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
			r, err := s.admitQuota(ctx, sb.TenantID, "snapshot sandbox "+sb.Name, quotaUse{snapshots: snapshotCount(sb, req.IncludeVolumes)})
			if err != nil {
				return sb, err
			}
			releaseQuota = r
			var also func(context.Context) error
			if req.IncludeVolumes {
				also = func(ctx context.Context) error {
					var err error
					clones, err = s.cloneVolumes(ctx, sb, func() string { return snapshotDataset(newSnapshotID()) })
					return err
				}
			}
			sn, err := s.snapshotLockedWith(ctx, sb, "user", req.Label, req.Description, also)
			out = sn
			return sb, err
		})
	if err != nil {
		for _, c := range clones {
			s.pool.Delete(context.WithoutCancel(ctx), c)
		}
		return client.Snapshot{}, err
	}
	v := snapshotView(out)
	// Record the volume clones as volume snapshots whose parent is the
	// sandbox's snapshot.
	for volID, clone := range clones {
		vs, err := s.recordVolumeSnapshot(ctx, tenant, volID, clone, out.ID, req.Label)
		if err != nil {
			return v, err
		}
		v.Volumes = append(v.Volumes, vs.ID)
	}
	return v, nil
}

// snapshotLocked snapshots a sandbox whose lock the caller holds. A
// running sandbox is frozen for the snapshot alone.
func (s *Service) snapshotLocked(ctx context.Context, sb store.Sandbox, kind, label, desc string) (store.Snapshot, error) {
	return s.snapshotLockedWith(ctx, sb, kind, label, desc, nil)
}

// snapshotLockedWith is snapshotLocked that also runs alsoFrozen right
// after the root's clone, while a running sandbox is still frozen (to clone
// its volumes at the same instant).
func (s *Service) snapshotLockedWith(ctx context.Context, sb store.Sandbox, kind, label, desc string, alsoFrozen func(context.Context) error) (store.Snapshot, error) {
	sp, err := decodeSpec(sb)
	if err != nil {
		return store.Snapshot{}, err
	}
	sn := store.Snapshot{ID: newSnapshotID(), TenantID: sb.TenantID, SandboxID: sb.ID, SandboxName: sb.Name,
		ParentID: sp.Origin, Label: label, Description: desc, Kind: kind, TemplateID: sb.TemplateID, Spec: sb.Spec}
	freeze := sb.State == store.StateRunning
	if freeze {
		// Write dirty data back while the sandbox still runs, so the freeze
		// covers only what is written in the meantime.
		if fd, err := unix.Open(s.pool.Path(datasetName(sb.ID)), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			unix.Syncfs(fd)
			unix.Close(fd)
		}
	}
	var frozenAt time.Time
	if freeze {
		if err := s.rt.Pause(ctx, sb.ID); err != nil {
			return sn, fmt.Errorf("freeze for snapshot: %w", err)
		}
		frozenAt = time.Now()
	}
	err = s.pool.Clone(ctx, datasetName(sb.ID), snapshotDataset(sn.ID), pool.CloneOptions{ReadOnly: true})
	if err == nil && alsoFrozen != nil {
		if err = alsoFrozen(ctx); err != nil {
			s.pool.Delete(context.WithoutCancel(ctx), snapshotDataset(sn.ID))
		}
	}
	if freeze {
		sn.FrozenFor = time.Since(frozenAt)
		if rerr := s.rt.Resume(ctx, sb.ID); rerr != nil && err == nil {
			err = fmt.Errorf("thaw after snapshot: %w", rerr)
		}
	}
	if err != nil {
		return sn, err
	}
	sn.CreatedAt = s.now()
	if err := s.st.CreateSnapshot(ctx, sn); err != nil {
		s.pool.Delete(context.WithoutCancel(ctx), snapshotDataset(sn.ID))
		return sn, err
	}
	s.log.Info("snapshot taken", "sandbox", sb.ID, "snapshot", sn.ID, "kind", kind, "frozen", sn.FrozenFor)
	s.event(ctx, events.SnapshotCreated, sb.TenantID, sb.ID, map[string]string{"snapshot": sn.ID, "kind": kind, "label": label})
	return sn, nil
}

// ListSnapshots lists the tenant's snapshots, of one sandbox when id is set.
func (s *Service) ListSnapshots(ctx context.Context, tenant, id string) ([]client.Snapshot, error) {
	sandboxID := ""
	if id != "" {
		sb, err := s.get(ctx, tenant, id)
		if err != nil {
			return nil, err
		}
		sandboxID = sb.ID
	}
	list, err := s.st.ListSnapshots(ctx, tenant, sandboxID)
	if err != nil {
		return nil, err
	}
	out := make([]client.Snapshot, 0, len(list))
	for _, sn := range list {
		out = append(out, snapshotView(sn))
	}
	return out, nil
}

// GetSnapshot returns one snapshot.
func (s *Service) GetSnapshot(ctx context.Context, tenant, id string) (client.Snapshot, error) {
	sn, err := s.getSnapshot(ctx, tenant, id)
	if err != nil {
		return client.Snapshot{}, err
	}
	return snapshotView(sn), nil
}

// getSnapshot reads a snapshot record; a missing one is said once, as a
// user reads it (the store's error already names the snapshot).
func (s *Service) getSnapshot(ctx context.Context, tenant, id string) (store.Snapshot, error) {
	sn, err := s.st.GetSnapshot(ctx, tenant, id)
	if errors.Is(err, errs.ErrNotFound) {
		return sn, fmt.Errorf("snapshot %s: %w (stead snapshot ls shows the snapshots)", id, errs.ErrNotFound)
	}
	return sn, err
}

// DeleteSnapshot deletes a snapshot's dataset, then its record.
func (s *Service) DeleteSnapshot(ctx context.Context, tenant, id string) error {
	sn, err := s.getSnapshot(ctx, tenant, id)
	if err != nil {
		return err
	}
	unlock := s.lock(sn.ID)
	defer unlock()
	ctx = context.WithoutCancel(ctx)
	if err := s.pool.Delete(ctx, snapshotDataset(sn.ID)); err != nil && !errors.Is(err, errs.ErrNotFound) {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if err := s.st.DeleteSnapshot(ctx, tenant, sn.ID); err != nil && !errors.Is(err, errs.ErrNotFound) {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	s.log.Info("snapshot deleted", "snapshot", sn.ID, "tenant", tenant)
	s.event(ctx, events.SnapshotDeleted, tenant, sn.SandboxID, map[string]string{"snapshot": sn.ID, "kind": sn.Kind})
	return nil
}

// checkForkDisk refuses n forks of source whose disk quotas (disk each)
// cannot all be promised now, so that a fork is all or nothing where the
// pool can tell (each new sandbox still promises its own as it is made).
func (s *Service) checkForkDisk(ctx context.Context, n int, source string, disk int64) error {
	what := "disk quota of a fork of " + source
	if n > 1 {
		what = fmt.Sprintf("disk quotas of %d forks of %s", n, source)
	}
	release, err := s.admitDisk(ctx, what, disk, int64(n)*disk)
	if err != nil {
		return err
	}
	release()
	return nil
}

// Fork makes req.Count new sandboxes from a snapshot, or from a sandbox
// (snapshotted first, kind "fork").
func (s *Service) Fork(ctx context.Context, tenant, source string, req client.ForkRequest) ([]client.Sandbox, error) {
	n := req.Count
	if n == 0 {
		n = 1
	}
	if n < 0 || n > maxFork {
		return nil, fmt.Errorf("fork count %d (want 1 to %d): %w", n, maxFork, errs.ErrInvalid)
	}
	forkNames := make([]string, n)
	for i := range forkNames {
		switch {
		case req.Name == "":
			continue // named by its id
		case n == 1:
			forkNames[i] = req.Name
		default:
			forkNames[i] = fmt.Sprintf("%s-%d", req.Name, i+1)
		}
		if err := checkName("fork", forkNames[i]); err != nil {
			return nil, err
		}
		if _, err := s.st.GetSandbox(ctx, tenant, forkNames[i]); err == nil {
			return nil, fmt.Errorf("fork: the name %s is taken (a deleted sandbox keeps its name until it is purged): %w", forkNames[i], errs.ErrConflict)
		}
	}
	var sn store.Snapshot
	if strings.HasPrefix(source, snapshotPrefix) {
		var err error
		if sn, err = s.getSnapshot(ctx, tenant, source); err != nil {
			return nil, err
		}
		if sn.Kind == "volume" {
			return nil, fmt.Errorf("snapshot %s is of a volume: restore it into a new volume (stead volume restore): %w", sn.ID, errs.ErrInvalid)
		}
	} else {
		// The forks' disk must fit before the source is snapshotted: a
		// refused fork leaves nothing behind.
		sb, err := s.get(ctx, tenant, source)
		if err != nil {
			return nil, err
		}
		sp, err := decodeSpec(sb)
		if err != nil {
			return nil, err
		}
		if err := s.checkForkDisk(ctx, n, sb.Name, sp.Limits.DiskBytes); err != nil {
			return nil, err
		}
		if err := s.checkQuota(ctx, tenant, "fork sandbox "+sb.Name, forkUse(n, sp.Limits, req.NoStart, 1)); err != nil {
			return nil, fmt.Errorf("fork sandbox %s: %w", sb.Name, err)
		}
		// The mounts must resolve before the source is snapshotted too.
		if _, err := s.forkMounts(ctx, tenant, "fork "+sb.Name, sp.Volumes, req.Volumes); err != nil {
			return nil, err
		}
		_, err = s.transition(ctx, tenant, source, "fork",
			[]store.SandboxState{store.StateRunning, store.StatePaused, store.StateStopped}, nil,
			func(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
				release, err := s.admitQuota(ctx, sb.TenantID, "fork sandbox "+sb.Name, quotaUse{snapshots: 1})
				if err != nil {
					return sb, err
				}
				defer release()
				sn, err = s.snapshotLocked(ctx, sb, "fork", "fork of "+sb.Name, "")
				return sb, err
			})
		if err != nil {
			return nil, err
		}
	}
	tmpl, err := s.st.GetTemplate(ctx, tenant, sn.TemplateID)
	if err != nil {
		return nil, fmt.Errorf("template %s of snapshot %s: %w", sn.TemplateID, sn.ID, err)
	}
	var sp spec
	if err := json.Unmarshal(sn.Spec, &sp); err != nil {
		return nil, fmt.Errorf("spec of snapshot %s: %w", sn.ID, err)
	}
	// Opened here, sealed again for each new sandbox by materialize.
	if err := s.openEnv(sn.SandboxID, &sp); err != nil {
		return nil, fmt.Errorf("spec of snapshot %s: %w", sn.ID, err)
	}
	sp.Origin = sn.ID
	if sp.Volumes, err = s.forkMounts(ctx, tenant, "fork "+sn.ID, sp.Volumes, req.Volumes); err != nil {
		return nil, err
	}
	specJSON, _ := json.Marshal(sp)
	if err := s.checkForkDisk(ctx, n, sn.ID, sp.Limits.DiskBytes); err != nil {
		return nil, err
	}
	if err := s.checkQuota(ctx, tenant, "fork "+sn.ID, forkUse(n, sp.Limits, req.NoStart, 0)); err != nil {
		return nil, fmt.Errorf("fork %s: %w", sn.ID, err)
	}
	// The new sandboxes are made a few at a time: starts overlap well.
	out := make([]client.Sandbox, n)
	errsByIdx := make([]error, n)
	sem := make(chan struct{}, forkParallel)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			id := newID()
			name := forkNames[i]
			if name == "" {
				name = id
			}
			out[i], errsByIdx[i] = s.materialize(ctx, tenant, id, name, tmpl, specJSON, snapshotDataset(sn.ID), req.NoStart)
		}(i)
	}
	wg.Wait()
	made := out[:0]
	var firstErr error
	for i := range out {
		if errsByIdx[i] != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("fork %d of %d from %s: %w", i+1, n, sn.ID, errsByIdx[i])
			}
			continue
		}
		made = append(made, out[i])
	}
	if len(made) > 0 {
		forks := make([]string, len(made))
		for i, f := range made {
			forks[i] = f.ID
		}
		s.event(ctx, events.SandboxForked, tenant, sn.SandboxID, map[string]string{"snapshot": sn.ID, "forks": strings.Join(forks, ",")})
	}
	return made, firstErr
}

// forkMounts returns the mounts of a fork of a sandbox that had mounts
// vols: each volume found again (by id, origin or name; see planMounts),
// the request's mounts replacing those at the same path or added.
func (s *Service) forkMounts(ctx context.Context, tenant, verb string, vols, given []client.VolumeMount) ([]client.VolumeMount, error) {
	recorded := make([]client.PushedMount, 0, len(vols))
	for _, vm := range vols {
		recorded = append(recorded, client.PushedMount{VolumeID: vm.Volume, SubPath: vm.SubPath, Path: vm.Path, ReadOnly: vm.ReadOnly})
	}
	plan, err := s.planMounts(ctx, tenant, recorded, given)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	if len(plan.missing) > 0 {
		return nil, missingVolumesError(verb, plan.missing, false)
	}
	out, err := s.resolveVolumeMounts(ctx, tenant, plan.mounts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	return out, nil
}

// Rollback returns a sandbox's files to a snapshot, in place: a safety
// snapshot first, then (a running sandbox is stopped with its stop hook)
// the snapshot is cloned beside the root and swapped in atomically, and the
// sandbox starts again if it was running.
func (s *Service) Rollback(ctx context.Context, tenant, id string, req client.RollbackRequest) (client.RollbackResult, error) {
	target, err := s.getSnapshot(ctx, tenant, req.Snapshot)
	if err != nil {
		return client.RollbackResult{}, err
	}
	if target.Kind == "volume" {
		return client.RollbackResult{}, fmt.Errorf("snapshot %s is of a volume, not of a sandbox: %w", target.ID, errs.ErrInvalid)
	}
	var safety store.Snapshot
	view, err := s.transition(ctx, tenant, id, "roll back",
		[]store.SandboxState{store.StateRunning, store.StatePaused, store.StateStopped}, nil,
		func(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
			release, err := s.admitQuota(ctx, sb.TenantID, "roll back sandbox "+sb.Name+" (a safety snapshot)", quotaUse{snapshots: 1})
			if err != nil {
				return sb, err
			}
			safety, err = s.snapshotLocked(ctx, sb, "safety", "before rollback to "+target.ID, "")
			release()
			if err != nil {
				return sb, err
			}
			wasRunning := sb.State == store.StateRunning || sb.State == store.StatePaused
			if wasRunning {
				if sb, err = s.stopLocked(ctx, sb, "rollback"); err != nil {
					return sb, err
				}
			}
			tmp := pool.KindSandbox + "/" + rollbackPrefix + sb.ID
			s.pool.Delete(ctx, tmp) // a leftover of a crash
			if err := s.pool.Clone(ctx, snapshotDataset(target.ID), tmp, pool.CloneOptions{}); err != nil {
				return sb, err
			}
			if err := s.pool.Exchange(ctx, tmp, datasetName(sb.ID)); err != nil {
				s.pool.Delete(ctx, tmp)
				return sb, err
			}
			if err := s.pool.Delete(ctx, tmp); err != nil {
				s.log.Warn("delete the replaced root after a rollback", "sandbox", sb.ID, "err", err)
			}
			sp, err := decodeSpec(sb)
			if err != nil {
				return sb, err
			}
			if s.pool.Caps().Quota && sp.Limits.DiskBytes > 0 {
				if err := s.pool.SetQuota(ctx, datasetName(sb.ID), sp.Limits.DiskBytes); err != nil {
					return sb, err
				}
			}
			sp.Origin = target.ID
			if err := setSpec(&sb, sp); err != nil { // keeps the push schedule
				return sb, err
			}
			sb.StopReason = "rollback"
			if sb, err = s.st.UpdateSandbox(ctx, sb); err != nil {
				return sb, err
			}
			if wasRunning {
				tmpl, err := s.st.GetTemplate(ctx, sb.TenantID, sb.TemplateID)
				if err != nil {
					return sb, err
				}
				return s.startLocked(ctx, sb, tmpl)
			}
			return sb, nil
		})
	if err != nil {
		return client.RollbackResult{}, err
	}
	s.event(ctx, events.SandboxRolledBack, tenant, view.ID, map[string]string{"snapshot": target.ID, "safety": safety.ID})
	return client.RollbackResult{Sandbox: view, Safety: snapshotView(safety)}, nil
}

// cleanSnapshotLeftovers deletes what a crash can leave in the pool:
// snapshot datasets without a record and rollback temporaries.
func (s *Service) cleanSnapshotLeftovers(ctx context.Context) error {
	known := map[string]bool{}
	tenants, err := s.st.ListTenants(ctx)
	if err != nil {
		return err
	}
	for _, t := range tenants {
		list, err := s.st.ListSnapshots(ctx, t.ID, "")
		if err != nil {
			return err
		}
		for _, sn := range list {
			known[sn.ID] = true
		}
	}
	ids, err := s.pool.List(ctx, pool.KindSnapshot)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if !known[id] {
			s.log.Warn("deleting unrecorded snapshot dataset", "snapshot", id)
			s.pool.Delete(ctx, snapshotDataset(id))
		}
	}
	sbs, err := s.pool.List(ctx, pool.KindSandbox)
	if err != nil {
		return err
	}
	for _, id := range sbs {
		if strings.HasPrefix(id, rollbackPrefix) {
			s.log.Warn("deleting rollback leftover", "dataset", id)
			s.pool.Delete(ctx, pool.KindSandbox+"/"+id)
		}
	}
	return nil
}
