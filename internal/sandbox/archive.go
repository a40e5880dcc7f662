package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/repo/seal"
	"github.com/stead-dev/stead/internal/store"
)

// Archive and hydrate. Archiving a stopped sandbox pushes it, reads every
// blob of the push back from the repository (authenticated), records the
// sandbox as archived with the push's id, and only then deletes its root
// dataset. Hydrating restores the root from that push and clears the
// archive mark before the sandbox starts. A crash between recording and
// deleting leaves an archived sandbox with a root still on disk; hydrate
// deletes such a leftover before restoring.

// ArchiveSandbox pushes a stopped sandbox, verifies the push and frees its
// local disk; StartSandbox hydrates it back.
func (s *Service) ArchiveSandbox(ctx context.Context, tenant, id string, wait bool) (client.Operation, error) {
	if _, err := s.repository(ctx); err != nil {
		return client.Operation{}, err
	}
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return client.Operation{}, err
	}
	if sb.State != store.StateStopped {
		return client.Operation{}, fmt.Errorf("cannot archive sandbox %s: it is %s (stop it first): %w", sb.Name, sb.State, errs.ErrConflict)
	}
	if err := s.checkRepoQuota(ctx, tenant, "archive sandbox "+sb.Name); err != nil {
		return client.Operation{}, fmt.Errorf("archive sandbox %s: %w", sb.Name, err)
	}
	return s.startOp(ctx, tenant, "archive", sb.ID, wait, func(ctx context.Context, op *operation) (any, error) {
		return s.archive(ctx, op, tenant, sb.ID)
	})
}

func (s *Service) archive(ctx context.Context, op *operation, tenant, id string) (client.ArchiveResult, error) {
	var out client.ArchiveResult
	used, _ := s.pool.Usage(ctx, datasetName(id))
	res, m, err := s.push(ctx, op, tenant, id, "", "archive", false)
	if err != nil {
		return out, err
	}
	out.RemoteSnapshot = res.RemoteSnapshot
	sc, err := s.scope(ctx, tenant, false)
	if err != nil {
		return out, err
	}
	if out.VerifiedBytes, err = sc.ReadAll(ctx, m.ID, op.progress("verify")); err != nil {
		return out, fmt.Errorf("archive: the push does not read back: %w (nothing was deleted)", err)
	}
	unlock := s.lock(id)
	defer unlock()
	sb, err := s.st.GetSandbox(ctx, tenant, id)
	if err != nil {
		return out, err
	}
	if sb.State != store.StateStopped {
		return out, fmt.Errorf("archive: sandbox %s was %s meanwhile; nothing was deleted: %w", sb.Name, sb.State, errs.ErrConflict)
	}
	if err := setArchive(&sb, m.ID.String()); err != nil {
		return out, err
	}
	if err := setArchivedAt(&sb, s.now()); err != nil { // retention counts from it
		return out, err
	}
	sb.State, sb.UpdatedAt = store.StateArchived, s.now()
	if _, err := s.st.UpdateSandbox(ctx, sb); err != nil {
		return out, err
	}
	if err := s.pool.Delete(ctx, datasetName(id)); err != nil && !errors.Is(err, errs.ErrNotFound) {
		return out, fmt.Errorf("archive: free the root: %w", err)
	}
	if list, err := s.st.ListSnapshots(ctx, tenant, id); err == nil {
		for _, sn := range list {
			if sn.Kind == "archive" || sn.Kind == "push" {
				s.pool.Delete(ctx, snapshotDataset(sn.ID))
				s.st.DeleteSnapshot(ctx, tenant, sn.ID)
			}
		}
	}
	out.FreedBytes = used
	s.log.Info("sandbox archived", "sandbox", id, "snapshot", m.ID.String()[:12], "freed", used)
	return out, nil
}

// setArchive sets (or with "" clears) the archive mark in a sandbox's spec.
func setArchive(sb *store.Sandbox, manifest string) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(sb.Spec, &raw); err != nil {
		return err
	}
	if manifest == "" {
		delete(raw, "archive")
	} else {
		raw["archive"], _ = json.Marshal(manifest)
	}
	b, err := json.Marshal(raw)
	sb.Spec = b
	return err
}

func archiveOf(sb store.Sandbox) string {
	var v struct {
		Archive string `json:"archive"`
	}
	json.Unmarshal(sb.Spec, &v)
	return v.Archive
}

// HydrateSandbox brings an archived sandbox's root back from the
// repository (stopped); StartSandbox does the same on its own.
func (s *Service) HydrateSandbox(ctx context.Context, tenant, id string, wait bool) (client.Operation, error) {
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return client.Operation{}, err
	}
	return s.startOp(ctx, tenant, "hydrate", sb.ID, wait, func(ctx context.Context, op *operation) (any, error) {
		v, err := s.transition(ctx, tenant, sb.ID, "hydrate", []store.SandboxState{store.StateArchived}, []store.SandboxState{store.StateStopped, store.StateRunning, store.StatePaused},
			func(ctx context.Context, cur store.Sandbox) (store.Sandbox, error) {
				return s.hydrateLocked(ctx, op, cur)
			})
		if isAlready(err) {
			// Hydrated meanwhile (by a start): what the caller wanted.
			return s.GetSandbox(ctx, tenant, sb.ID)
		}
		return v, err
	})
}

// hydrateLocked restores an archived sandbox's root; the caller holds its
// lock. op may be nil.
func (s *Service) hydrateLocked(ctx context.Context, op *operation, sb store.Sandbox) (store.Sandbox, error) {
	if sp, err := decodeSpec(sb); err == nil {
		release, err := s.admitQuota(ctx, sb.TenantID, "hydrate sandbox "+sb.Name, quotaUse{disk: sp.Limits.DiskBytes})
		if err != nil {
			return sb, err
		}
		defer release()
	}
	sc, err := s.scope(ctx, sb.TenantID, false)
	if err != nil {
		return sb, err
	}
	id, err := seal.ParseID(archiveOf(sb))
	if err != nil {
		return sb, fmt.Errorf("hydrate: archive mark: %w", err)
	}
	ds := datasetName(sb.ID)
	if ok, _ := s.pool.Exists(ctx, ds); ok {
		if err := s.pool.Delete(ctx, ds); err != nil {
			return sb, err
		}
	}
	if err := s.pool.Create(ctx, ds); err != nil {
		return sb, err
	}
	var progress func(repo.Progress)
	if op != nil {
		progress = op.progress("hydrate")
	}
	if _, err := sc.Restore(ctx, id, s.pool.Path(ds), repo.RestoreOptions{Progress: progress}); err != nil {
		s.pool.Delete(context.WithoutCancel(ctx), ds)
		return sb, fmt.Errorf("hydrate: %w", err)
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		return sb, err
	}
	if s.pool.Caps().Quota && sp.Limits.DiskBytes > 0 {
		if err := s.pool.SetQuota(ctx, ds, sp.Limits.DiskBytes); err != nil {
			return sb, err
		}
	}
	if err := setArchive(&sb, ""); err != nil {
		return sb, err
	}
	sb.State, sb.StopReason, sb.UpdatedAt = store.StateStopped, "hydrated", s.now()
	sb, err = s.st.UpdateSandbox(ctx, sb)
	if err == nil {
		s.log.Info("sandbox hydrated", "sandbox", sb.ID, "snapshot", id.String()[:12])
	}
	return sb, err
}
