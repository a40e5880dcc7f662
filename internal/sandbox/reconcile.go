package sandbox

import (
	"context"
	"errors"
	"fmt"

	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/store"
)

// Reconcile makes the store and the runtime agree at daemon start-up:
//   - a running or paused sandbox whose runtime is alive is adopted, its
//     state taken from the runtime (running or paused);
//   - a running or paused sandbox whose runtime is gone (host reboot, or
//     init died while the daemon was down) is cleaned up and marked
//     stopped with reason "crashed";
//   - a sandbox left in "creating" by a crash is removed with its dataset;
//   - a sandbox whose root was a spare clone renamed into place, a rename
//     a crash of the machine undid, gets it again (redoSpareTake), and
//     every other spare clone in the pool is deleted (spares.go);
//   - runtime state with no running sandbox behind it is destroyed, so no
//     cgroup or mount is orphaned;
//   - the warm sandboxes of an earlier daemon (marked, without a record)
//     are removed (warm.go);
//   - in a cluster, the root of a sandbox another node purged while this
//     node was away is kept as a lost copy (keepPurgedRoots);
//   - the volume and snapshot datasets no record names, and the template
//     datasets of tenants that no longer exist (a tenant deleted while
//     this node was away), are deleted;
//   - every sandbox root and volume gets its disk quota set again (a crash
//     of the machine can lose a limit the file system had not committed);
//   - in a cluster, the quota rises this node admitted before it started
//     are forgotten (tenancy.ForgetNodeRises);
//   - an environment stored in plaintext by an earlier stead is sealed.
func (s *Service) Reconcile(ctx context.Context) error {
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{IncludeDeleted: true})
	if err != nil {
		return fmt.Errorf("reconcile: list sandboxes: %w", err)
	}
	s.dropSecretStages()
	if err := s.ForgetNodeRises(ctx); err != nil { // tenancy: this node's quota rises from before
		s.log.Error("reconcile: forget this node's quota rises from before it started (they count until they expire)", "err", err)
	}
	all := list
	list = s.claim(ctx, list) // in a cluster: the sandboxes this node owns
	s.keepPurgedRoots(ctx, all)
	wanted := map[string]bool{}
	for _, sb := range list {
		unlock := s.lock(sb.ID)
		if sealed, err := s.sealStoredEnv(ctx, sb); err != nil {
			s.log.Error("seal the stored environment", "sandbox", sb.ID, "err", err)
		} else {
			sb = sealed
		}
		err := s.reconcileOne(ctx, sb, wanted)
		unlock()
		if err != nil {
			s.log.Error("reconcile sandbox", "sandbox", sb.ID, "err", err)
		}
	}
	ids, err := s.rt.List(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: list runtime: %w", err)
	}
	for _, id := range ids {
		if !wanted[id] {
			s.log.Warn("destroying orphaned runtime state", "sandbox", id)
			if err := s.rt.Kill(ctx, id); err != nil {
				s.log.Error("destroy orphan", "sandbox", id, "err", err)
			}
		}
	}
	// The cleanups' failures do not keep the network's sync from
	// running: it is what gives the running sandboxes their rules (an
	// earlier version's bridged ones reach nothing until it has).
	var cleanErrs []error
	if err := s.cleanVolumeLeftovers(ctx); err != nil {
		cleanErrs = append(cleanErrs, fmt.Errorf("reconcile: volume leftovers: %w", err))
	}
	if err := s.cleanSnapshotLeftovers(ctx); err != nil {
		cleanErrs = append(cleanErrs, fmt.Errorf("reconcile: snapshot leftovers: %w", err))
	}
	if err := s.cleanTemplateLeftovers(ctx); err != nil { // tenant_local.go
		cleanErrs = append(cleanErrs, fmt.Errorf("reconcile: template leftovers: %w", err))
	}
	if err := s.cleanSpareLeftovers(ctx, all); err != nil { // spares.go; after every redo
		cleanErrs = append(cleanErrs, fmt.Errorf("reconcile: spare clones: %w", err))
	}
	s.dropWarmLeftovers(ctx, all) // warm.go
	if err := s.syncNetwork(ctx); err != nil {
		return errors.Join(append(cleanErrs, fmt.Errorf("reconcile: network: %w", err))...)
	}
	if err := errors.Join(cleanErrs...); err != nil {
		return err
	}
	swept, err := s.rt.Sweep(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: sweep runtime leftovers: %w", err)
	}
	if len(swept) > 0 {
		s.log.Warn("removed runtime leftovers of a crash", "sandboxes", swept)
	}
	return nil
}

// reapplyDiskQuota sets sb's disk quota on its root again: setting a
// quota (a btrfs qgroup limit) is made durable only by the file system's
// next commit, so a crash of the machine soon after a create, a restore
// or a resize can leave the root without it.
func (s *Service) reapplyDiskQuota(ctx context.Context, sb store.Sandbox) error {
	// A deleted sandbox's root is kept until its purge and an undelete
	// brings it back as it is: its limit is set again too.
	if !s.pool.Caps().Quota {
		return nil
	}
	sp, err := decodeSpec(sb)
	if err != nil || sp.Limits.DiskBytes <= 0 {
		return err
	}
	if ok, err := s.pool.Exists(ctx, datasetName(sb.ID)); err != nil || !ok {
		return err
	}
	return s.pool.SetQuota(ctx, datasetName(sb.ID), sp.Limits.DiskBytes)
}

func (s *Service) reconcileOne(ctx context.Context, sb store.Sandbox, wanted map[string]bool) error {
	if sb.State != store.StateCreating {
		if err := s.redoSpareTake(ctx, sb); err != nil { // spares.go
			s.log.Error("reconcile: redo the take of the sandbox's spare clone", "sandbox", sb.ID, "err", err)
		}
		if err := s.reapplyDiskQuota(ctx, sb); err != nil {
			s.log.Error("reconcile: set the sandbox's disk quota again", "sandbox", sb.ID, "err", err)
		}
	}
	switch sb.State {
	case store.StateCreating:
		s.log.Warn("removing half-created sandbox", "sandbox", sb.ID)
		err := s.purgeLocked(ctx, sb)
		s.record(ctx, sb.TenantID, "sandbox.reconcile_removed", sb.ID, err)
		return err
	case store.StateRunning, store.StatePaused:
		st, err := s.rt.Status(ctx, sb.ID)
		if err != nil {
			// Unsure: leave it alone rather than let the orphan sweep kill
			// a sandbox that may be fine.
			wanted[sb.ID] = true
			return err
		}
		switch st {
		case steadrt.StatusRunning, steadrt.StatusPaused:
			wanted[sb.ID] = true
			now := s.now()
			s.act.started(sb.ID, now)
			want := store.StateRunning
			if st == steadrt.StatusPaused {
				want = store.StatePaused
			}
			if sb.State != want {
				sb.State = want
				_, err = s.st.UpdateSandbox(ctx, sb)
			}
			if _, err := s.openAgentSocket(sb.ID); err != nil {
				s.log.Error("reopen the sandbox's agent socket", "sandbox", sb.ID, "err", err)
			}
			s.log.Info("sandbox adopted", "sandbox", sb.ID, "state", want)
			return err
		default:
			s.rt.Kill(ctx, sb.ID)
			s.detachNetwork(ctx, sb.ID)
			now := s.now()
			sb.State = store.StateStopped
			sb.StoppedAt = &now
			sb.StopReason = "crashed"
			s.log.Warn("sandbox found dead; marked stopped", "sandbox", sb.ID)
			_, err = s.st.UpdateSandbox(ctx, sb)
			s.record(ctx, sb.TenantID, "sandbox.reconcile_crashed", sb.ID, err)
			return err
		}
	}
	return nil
}
