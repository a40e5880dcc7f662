package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/store"
)

// Volume backup. Every volume has its own repository scope ("v-<id>") and
// so its own data key: purging the volume destroys that key (every pushed
// copy becomes unreadable at once) and then deletes the scope's objects.
// A push reads an O(1) read-only clone of the volume taken at one instant
// (crash-consistent, like pulling the power), deleted after the push; a
// crash leaves the clone unrecorded and Reconcile deletes it.

// volumeScope names the repository scope of a volume.
func volumeScope(id string) string { return "v-" + strings.TrimPrefix(id, volumePrefix) }

// PushVolume pushes a volume to the repository.
func (s *Service) PushVolume(ctx context.Context, tenant, id string, req client.PushVolumeRequest) (client.Operation, error) {
	r, err := s.repository(ctx)
	if err != nil {
		return client.Operation{}, err
	}
	v, err := s.getVolume(ctx, tenant, id)
	if err != nil {
		return client.Operation{}, err
	}
	if v.State != "available" {
		return client.Operation{}, fmt.Errorf("volume %s is %s: %w", v.Name, v.State, errs.ErrConflict)
	}
	if err := s.checkRepoQuota(ctx, tenant, "push volume "+v.Name); err != nil {
		return client.Operation{}, fmt.Errorf("push volume %s: %w", v.Name, err)
	}
	return s.startOp(ctx, tenant, "volume-push", v.ID, req.Wait, func(ctx context.Context, op *operation) (any, error) {
		if _, busy := s.bk.pushing.LoadOrStore(v.ID, true); busy {
			return nil, fmt.Errorf("volume %s is already being pushed: %w", v.Name, errs.ErrConflict)
		}
		defer s.bk.pushing.Delete(v.ID)
		op.phase("snapshot")
		clone := newVolumeClone()
		if err := s.pool.Clone(ctx, volumeDataset(v.ID), clone, pool.CloneOptions{ReadOnly: true}); err != nil {
			return nil, err
		}
		defer s.pool.Delete(context.WithoutCancel(ctx), clone)
		m, st, err := s.pushVolumeClone(ctx, op, r, tenant, v, clone, nil)
		if err != nil {
			return nil, err
		}
		return client.PushResult{RemoteSnapshot: remoteView(m), FilesRead: st.FilesRead, FilesReused: st.FilesReused,
			BytesRead: st.BytesRead, BytesUploaded: st.BytesUploaded, Seconds: st.Duration.Seconds()}, nil
	})
}

// newVolumeClone names a temporary read-only clone of a volume.
func newVolumeClone() string {
	return snapshotDataset("vsnap-" + strings.TrimPrefix(newSnapshotID(), snapshotPrefix))
}

// pushVolumeClone pushes a read-only clone of volume v to its scope,
// incrementally to the volume's latest push.
func (s *Service) pushVolumeClone(ctx context.Context, op *operation, r *repo.Repository, tenant string, v store.Volume, clone string, labels map[string]string) (*repo.Manifest, repo.PushStats, error) {
	sc, err := r.Scope(ctx, volumeScope(v.ID), true)
	if err != nil {
		return nil, repo.PushStats{}, err
	}
	source := "volume/" + v.ID
	var parent repo.Manifest
	if last, err := sc.Latest(ctx, source); err == nil {
		parent = *last
	}
	l := map[string]string{"volume_name": v.Name, "size_bytes": strconv.FormatInt(v.SizeBytes, 10)}
	for k, val := range labels {
		l[k] = val
	}
	return sc.Push(ctx, s.pool.Path(clone), repo.PushOptions{Parent: parent.ID, Source: source, Tenant: tenant,
		Labels: l, Progress: op.progress("push " + v.Name), Writer: s.writer("")})
}

// volumeManifests returns the tenant's pushed volume snapshots and the
// scope of each: every volume's, or those of one volume when volume is
// set. A volume is named by id (its pushes, wherever it lives now) or by
// name: the pushes of the local volume of that name and every push made
// under that name (label volume_name), so a daemon that knows only the
// repository finds a volume's pushes by its name.
func (s *Service) volumeManifests(ctx context.Context, tenant, volume string) ([]*repo.Manifest, map[string]*repo.Scope, error) {
	r, err := s.repository(ctx)
	if err != nil {
		return nil, nil, err
	}
	all, err := r.Scopes(ctx)
	if err != nil {
		return nil, nil, err
	}
	var names []string
	for _, n := range all {
		if strings.HasPrefix(n, "v-") {
			names = append(names, n)
		}
	}
	match := func(*repo.Manifest) bool { return true }
	if volume != "" {
		ids := map[string]bool{volume: true}
		if v, err := s.st.GetVolume(ctx, tenant, volume); err == nil {
			ids[v.ID] = true
		}
		match = func(m *repo.Manifest) bool {
			return ids[strings.TrimPrefix(m.Source, "volume/")] || m.Labels["volume_name"] == volume
		}
	}
	var out []*repo.Manifest
	scopes := map[string]*repo.Scope{}
	for _, n := range names {
		sc, err := r.Scope(ctx, n, false)
		if errors.Is(err, errs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		ms, err := sc.Snapshots(ctx)
		if err != nil {
			return nil, nil, err
		}
		for _, m := range ms {
			if m.Tenant == tenant && match(m) {
				out = append(out, m)
				scopes[m.ID.String()] = sc
			}
		}
	}
	slices.SortFunc(out, func(a, b *repo.Manifest) int { return a.Time.Compare(b.Time) })
	return out, scopes, nil
}

// ListVolumePushes lists the tenant's pushed volume snapshots (of one
// volume when set).
func (s *Service) ListVolumePushes(ctx context.Context, tenant, volume string) ([]client.RemoteSnapshot, error) {
	ms, _, err := s.volumeManifests(ctx, tenant, volume)
	if err != nil {
		return nil, err
	}
	out := []client.RemoteSnapshot{}
	for _, m := range ms {
		out = append(out, remoteView(m))
	}
	return out, nil
}

// RestoreVolume restores a pushed volume snapshot into a new volume.
func (s *Service) RestoreVolume(ctx context.Context, tenant string, req client.RestoreVolumeRequest) (client.Operation, error) {
	if strings.HasPrefix(req.Snapshot, snapshotPrefix) {
		return s.startOp(ctx, tenant, "volume-restore", req.Snapshot, req.Wait, func(ctx context.Context, op *operation) (any, error) {
			v, err := s.restoreLocalVolumeSnapshot(ctx, tenant, req.Snapshot, req.Name)
			if err != nil {
				return nil, err
			}
			return client.VolumeRestoreResult{Volume: v}, nil
		})
	}
	ms, scopes, err := s.volumeManifests(ctx, tenant, req.Volume)
	if err != nil {
		return client.Operation{}, err
	}
	var m *repo.Manifest
	for _, c := range ms {
		if (req.Snapshot != "" && strings.HasPrefix(c.ID.String(), req.Snapshot)) || (req.Snapshot == "" && (m == nil || c.Time.After(m.Time))) {
			if m != nil && req.Snapshot != "" {
				return client.Operation{}, fmt.Errorf("snapshot %q is ambiguous: %w", req.Snapshot, errs.ErrInvalid)
			}
			m = c
		}
	}
	if m == nil || (req.Snapshot != "" && len(req.Snapshot) < 4) {
		return client.Operation{}, fmt.Errorf("pushed volume snapshot %q: %w", req.Snapshot+req.Volume, errs.ErrNotFound)
	}
	sc := scopes[m.ID.String()]
	if err := s.checkQuota(ctx, tenant, "restore volume "+req.Name, volumeRestoreUse(m)); err != nil {
		return client.Operation{}, fmt.Errorf("restore volume %s: %w", req.Name, err)
	}
	return s.startOp(ctx, tenant, "volume-restore", m.ID.String(), req.Wait, func(ctx context.Context, op *operation) (any, error) {
		v, rs, err := s.restoreVolumeFrom(ctx, op, tenant, sc, m, req.Name)
		if err != nil {
			return nil, err
		}
		return client.VolumeRestoreResult{Volume: v, Files: rs.Files, BytesWritten: rs.BytesWritten, Seconds: rs.Duration.Seconds()}, nil
	})
}

// restoreVolumeFrom restores pushed volume snapshot m of scope sc into a
// new volume named name, whose origin is the pushed volume; a failed
// restore leaves no volume.
func (s *Service) restoreVolumeFrom(ctx context.Context, op *operation, tenant string, sc *repo.Scope, m *repo.Manifest, name string) (client.Volume, repo.RestoreStats, error) {
	size, _ := strconv.ParseInt(m.Labels["size_bytes"], 10, 64)
	v, err := s.createVolume(ctx, tenant, client.CreateVolumeRequest{Name: name, SizeBytes: size}, strings.TrimPrefix(m.Source, "volume/"))
	if err != nil {
		return v, repo.RestoreStats{}, err
	}
	path := s.pool.Path(volumeDataset(v.ID))
	// The restore brings the root's own owner and mode back.
	if err := os.Chown(path, 0, 0); err != nil {
		s.DeleteVolume(context.WithoutCancel(ctx), tenant, v.ID, true)
		return v, repo.RestoreStats{}, err
	}
	rs, err := sc.Restore(ctx, m.ID, path, repo.RestoreOptions{Progress: op.progress("restore volume " + name)})
	if err != nil {
		s.DeleteVolume(context.WithoutCancel(ctx), tenant, v.ID, true)
		return v, rs, fmt.Errorf("restore volume %s from %s: %w", name, m.ID, err)
	}
	return v, rs, nil
}

// volumePushFor finds the push of volume id to restore with sandbox push
// sandboxPush: the one pushed with it (include_volumes), else the
// volume's latest.
func (s *Service) volumePushFor(ctx context.Context, tenant, id, sandboxPush string) (*repo.Manifest, *repo.Scope, error) {
	ms, scopes, err := s.volumeManifests(ctx, tenant, id)
	if err != nil {
		return nil, nil, err
	}
	var latest *repo.Manifest
	for _, m := range ms {
		if m.Source != "volume/"+id {
			continue
		}
		if m.Labels["sandbox_push"] == sandboxPush {
			return m, scopes[m.ID.String()], nil
		}
		if latest == nil || m.Time.After(latest.Time) {
			latest = m
		}
	}
	if latest == nil {
		return nil, nil, fmt.Errorf("volume %s has no push: %w", id, errs.ErrNotFound)
	}
	return latest, scopes[latest.ID.String()], nil
}

// eraseVolumeBackups destroys a purged volume's data key and its pushed
// data. Without a repository there is nothing to erase.
func (s *Service) eraseVolumeBackups(ctx context.Context, v store.Volume) error {
	if s.opts.Repo == nil {
		return nil
	}
	if _, err := s.opts.Repo.Store.Stat(ctx, "config"); errors.Is(err, errs.ErrNotFound) {
		return nil // no repository yet: nothing was pushed
	}
	r, err := s.repository(ctx)
	if errors.Is(err, repo.ErrNoRepository) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("erase pushed copies of volume %s: %w", v.Name, err)
	}
	if err := r.Erase(ctx, volumeScope(v.ID)); err != nil {
		return fmt.Errorf("erase pushed copies of volume %s: %w", v.Name, err)
	}
	return nil
}

// recordVolumeSnapshot records a read-only clone of a volume (a dataset
// snapshots/snap-...) as a local snapshot (kind "volume"; Sandbox names the
// volume). parent is the sandbox snapshot it was taken with, if any.
func (s *Service) recordVolumeSnapshot(ctx context.Context, tenant, volID, clone, parent, label string) (store.Snapshot, error) {
	v, err := s.getVolume(ctx, tenant, volID)
	if err != nil {
		s.pool.Delete(context.WithoutCancel(ctx), clone)
		return store.Snapshot{}, err
	}
	sn := store.Snapshot{ID: strings.TrimPrefix(clone, pool.KindSnapshot+"/"), TenantID: tenant, SandboxID: v.ID,
		SandboxName: v.Name, ParentID: parent, Label: label, Kind: "volume", CreatedAt: s.now()}
	if err := s.st.CreateSnapshot(ctx, sn); err != nil {
		s.pool.Delete(context.WithoutCancel(ctx), snapshotDataset(sn.ID))
		return sn, err
	}
	return sn, nil
}

// CreateVolumeSnapshot takes a read-only local snapshot of a volume: an
// O(1) clone, crash-consistent (taken at one instant while sandboxes may
// write to it; snapshot a sandbox with include_volumes to freeze its
// writers for the instant).
func (s *Service) CreateVolumeSnapshot(ctx context.Context, tenant, id string, req client.CreateSnapshotRequest) (client.Snapshot, error) {
	v, err := s.getVolume(ctx, tenant, id)
	if err != nil {
		return client.Snapshot{}, err
	}
	if v.State != "available" {
		return client.Snapshot{}, fmt.Errorf("volume %s is %s: %w", v.Name, v.State, errs.ErrConflict)
	}
	release, err := s.admitQuota(ctx, tenant, "snapshot volume "+v.Name, quotaUse{snapshots: 1})
	if err != nil {
		return client.Snapshot{}, fmt.Errorf("snapshot volume %s: %w", v.Name, err)
	}
	defer release()
	clone := snapshotDataset(newSnapshotID())
	if err := s.pool.Clone(ctx, volumeDataset(v.ID), clone, pool.CloneOptions{ReadOnly: true}); err != nil {
		return client.Snapshot{}, err
	}
	sn, err := s.recordVolumeSnapshot(ctx, tenant, v.ID, clone, "", req.Label)
	if err != nil {
		return client.Snapshot{}, err
	}
	s.log.Info("volume snapshot taken", "volume", v.ID, "snapshot", sn.ID)
	return snapshotView(sn), nil
}

// ListVolumeSnapshots lists a volume's local snapshots.
func (s *Service) ListVolumeSnapshots(ctx context.Context, tenant, id string) ([]client.Snapshot, error) {
	volID := id
	if v, err := s.st.GetVolume(ctx, tenant, id); err == nil {
		volID = v.ID
	}
	list, err := s.st.ListSnapshots(ctx, tenant, volID)
	if err != nil {
		return nil, err
	}
	out := []client.Snapshot{}
	for _, sn := range list {
		if sn.Kind == "volume" {
			out = append(out, snapshotView(sn))
		}
	}
	return out, nil
}

// restoreLocalVolumeSnapshot makes a new volume from a local volume snapshot
// (an O(1) writable clone).
func (s *Service) restoreLocalVolumeSnapshot(ctx context.Context, tenant, snapID, name string) (client.Volume, error) {
	sn, err := s.st.GetSnapshot(ctx, tenant, snapID)
	if err != nil {
		return client.Volume{}, fmt.Errorf("snapshot %s: %w", snapID, err)
	}
	if sn.Kind != "volume" {
		return client.Volume{}, fmt.Errorf("snapshot %s is of a sandbox, not a volume (fork it instead): %w", sn.ID, errs.ErrInvalid)
	}
	size := int64(0)
	if src, err := s.st.GetVolume(ctx, tenant, sn.SandboxID); err == nil {
		size = src.SizeBytes
	}
	v, err := s.createVolume(ctx, tenant, client.CreateVolumeRequest{Name: name, SizeBytes: size}, sn.SandboxID)
	if err != nil {
		return client.Volume{}, err
	}
	ds := volumeDataset(v.ID)
	// Replace the new volume's empty root by a clone of the snapshot.
	err = s.pool.Delete(ctx, ds)
	if err == nil {
		err = s.pool.Clone(ctx, snapshotDataset(sn.ID), ds, pool.CloneOptions{})
	}
	if err == nil && s.pool.Caps().Quota {
		err = s.pool.SetQuota(ctx, ds, v.SizeBytes)
	}
	if err != nil {
		s.DeleteVolume(context.WithoutCancel(ctx), tenant, v.ID, true)
		return client.Volume{}, fmt.Errorf("restore volume snapshot %s: %w", sn.ID, err)
	}
	return v, nil
}

// deleteVolumeSnapshots deletes a volume's local snapshots (its purge).
func (s *Service) deleteVolumeSnapshots(ctx context.Context, v store.Volume) error {
	list, err := s.st.ListSnapshots(ctx, v.TenantID, v.ID)
	if err != nil {
		return err
	}
	for _, sn := range list {
		if sn.Kind == "volume" {
			if err := s.DeleteSnapshot(ctx, v.TenantID, sn.ID); err != nil {
				return err
			}
		}
	}
	return nil
}
