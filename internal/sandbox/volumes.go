package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/files"
	"github.com/stead-dev/stead/internal/pool"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/store"
)

// Persistent volumes: datasets (volumes/<id>) independent of every
// sandbox, bind-mounted into sandboxes at create. Deleting a sandbox never
// touches a volume; a volume cannot be deleted while a sandbox uses it.
//
// Crash ordering: a volume's dataset (with its quota) is made before its
// record, and a purge deletes the dataset before the record; Reconcile
// deletes datasets without a record.

const (
	volumePrefix       = "vol-"
	defaultVolumeBytes = 10 << 30
)

func volumeDataset(id string) string { return pool.KindVolume + "/" + id }

func newVolumeID() string {
	var b [8]byte
	rand.Read(b[:])
	return volumePrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// volumeUsers returns the ids of the tenant's sandboxes (not soft-deleted)
// that mount volume id.
func (s *Service) volumeUsers(ctx context.Context, tenant, id string) ([]string, error) {
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: tenant})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sb := range list {
		sp, err := decodeSpec(sb)
		if err != nil {
			continue
		}
		for _, m := range sp.Volumes {
			if m.Volume == id {
				out = append(out, sb.ID)
				break
			}
		}
	}
	return out, nil
}

func (s *Service) volumeView(ctx context.Context, v store.Volume) client.Volume {
	out := client.Volume{ID: v.ID, Name: v.Name, Tenant: v.TenantID, SizeBytes: v.SizeBytes, State: v.State,
		CreatedAt: v.CreatedAt, DeletedAt: v.DeletedAt, PurgeAt: v.PurgeAt, Origin: v.Origin}
	out.UsedBytes, _ = s.pool.Usage(ctx, volumeDataset(v.ID))
	out.AttachedTo, _ = s.volumeUsers(ctx, v.TenantID, v.ID)
	return out
}

// CreateVolume makes an empty volume with a quota.
func (s *Service) CreateVolume(ctx context.Context, tenant string, req client.CreateVolumeRequest) (client.Volume, error) {
	return s.createVolume(ctx, tenant, req, "")
}

// createVolume is CreateVolume for a volume about to be filled from a
// snapshot of volume origin ("" for none).
func (s *Service) createVolume(ctx context.Context, tenant string, req client.CreateVolumeRequest, origin string) (client.Volume, error) {
	if err := checkName("volume", req.Name); err != nil {
		return client.Volume{}, err
	}
	if req.SizeBytes < 0 || (req.SizeBytes > 0 && req.SizeBytes < 1<<20) {
		return client.Volume{}, fmt.Errorf("volume size %d bytes (at least 1 MiB): %w", req.SizeBytes, errs.ErrInvalid)
	}
	size := req.SizeBytes
	if size == 0 {
		size = defaultVolumeBytes
	}
	if _, err := s.st.GetVolume(ctx, tenant, req.Name); err == nil {
		return client.Volume{}, fmt.Errorf("volume %s exists: %w", req.Name, errs.ErrConflict)
	}
	releaseQuota, err := s.admitQuota(ctx, tenant, "create volume "+req.Name, quotaUse{volumes: 1, disk: size})
	if err != nil {
		return client.Volume{}, fmt.Errorf("create volume %s: %w", req.Name, err)
	}
	defer releaseQuota()
	release, err := s.admitDisk(ctx, "size of volume "+req.Name, size, size)
	if err != nil {
		return client.Volume{}, fmt.Errorf("create volume %s: %w", req.Name, err)
	}
	defer release() // once the record carries the promise, or there is none
	ctx = context.WithoutCancel(ctx)
	v := store.Volume{ID: newVolumeID(), TenantID: tenant, Name: req.Name, SizeBytes: size, State: "available", CreatedAt: s.now(), Origin: origin,
		Node: s.opts.Owner.Node()}
	ds := volumeDataset(v.ID)
	if err := s.pool.Create(ctx, ds); err != nil {
		return client.Volume{}, fmt.Errorf("create volume %s: %w", req.Name, err)
	}
	fail := func(err error) (client.Volume, error) {
		s.pool.Delete(ctx, ds)
		return client.Volume{}, fmt.Errorf("create volume %s: %w", req.Name, err)
	}
	// The agent user owns the volume's root, as it owns /workspace.
	if err := os.Chown(s.pool.Path(ds), agentUID, agentUID); err != nil {
		return fail(err)
	}
	if s.pool.Caps().Quota {
		if err := s.pool.SetQuota(ctx, ds, size); err != nil {
			return fail(err)
		}
	}
	if err := s.st.CreateVolume(ctx, v); err != nil {
		return fail(err)
	}
	s.log.Info("volume created", "volume", v.ID, "name", v.Name, "tenant", tenant, "bytes", size)
	return s.volumeView(ctx, v), nil
}

// ListVolumes lists the tenant's volumes.
func (s *Service) ListVolumes(ctx context.Context, tenant string, includeDeleted bool) ([]client.Volume, error) {
	list, err := s.st.ListVolumes(ctx, tenant, includeDeleted)
	if err != nil {
		return nil, err
	}
	out := make([]client.Volume, 0, len(list))
	for _, v := range list {
		out = append(out, s.volumeView(ctx, v))
	}
	return out, nil
}

// getVolume reads a volume record; an absent one is an error naming the
// volume once, with what to do.
func (s *Service) getVolume(ctx context.Context, tenant, id string) (store.Volume, error) {
	v, err := s.st.GetVolume(ctx, tenant, id)
	if errors.Is(err, errs.ErrNotFound) {
		return v, fmt.Errorf("volume %s: %w (stead volume ls shows the volumes)", id, errs.ErrNotFound)
	}
	return v, err // the store's error names the volume
}

// GetVolume returns one volume.
func (s *Service) GetVolume(ctx context.Context, tenant, id string) (client.Volume, error) {
	v, err := s.getVolume(ctx, tenant, id)
	if err != nil {
		return client.Volume{}, err
	}
	return s.volumeView(ctx, v), nil
}

// DeleteVolume soft-deletes a volume (or purges it) when no sandbox uses it.
func (s *Service) DeleteVolume(ctx context.Context, tenant, id string, purge bool) (client.Volume, error) {
	v, err := s.getVolume(ctx, tenant, id)
	if err != nil {
		return client.Volume{}, err
	}
	unlock := s.lock(v.ID)
	defer unlock()
	ctx = context.WithoutCancel(ctx)
	users, err := s.volumeUsers(ctx, tenant, v.ID)
	if err != nil {
		return client.Volume{}, err
	}
	if len(users) > 0 {
		return client.Volume{}, fmt.Errorf("volume %s is mounted by sandbox %s (delete or purge the sandboxes first): %w", v.Name, strings.Join(users, ", "), errs.ErrConflict)
	}
	if purge {
		if err := s.purgeVolume(ctx, v); err != nil {
			return client.Volume{}, err
		}
		return client.Volume{ID: v.ID, Name: v.Name, Tenant: v.TenantID, SizeBytes: v.SizeBytes, State: "deleted", CreatedAt: v.CreatedAt}, nil
	}
	if v.State == "deleted" {
		return s.volumeView(ctx, v), nil
	}
	now := s.now()
	purgeAt := now.Add(s.purgeAfter(ctx, v.TenantID)) // the tenant's retention (retention.go)
	v.State, v.DeletedAt, v.PurgeAt = "deleted", &now, &purgeAt
	if err := s.st.UpdateVolume(ctx, v); err != nil {
		return client.Volume{}, err
	}
	s.log.Info("volume deleted", "volume", v.ID, "tenant", tenant, "purge_at", purgeAt)
	return s.volumeView(ctx, v), nil
}

func (s *Service) purgeVolume(ctx context.Context, v store.Volume) error {
	// The data key first: once it is gone no pushed copy can be read, even
	// if deleting the rest fails part way (prune finishes that).
	if err := s.eraseVolumeBackups(ctx, v); err != nil {
		return err
	}
	if err := s.deleteVolumeSnapshots(ctx, v); err != nil {
		return fmt.Errorf("purge volume %s: local snapshots: %w", v.Name, err)
	}
	if err := s.pool.Delete(ctx, volumeDataset(v.ID)); err != nil && !errors.Is(err, errs.ErrNotFound) {
		return fmt.Errorf("purge volume %s: %w", v.Name, err)
	}
	if err := s.st.DeleteVolume(ctx, v.TenantID, v.ID); err != nil && !errors.Is(err, errs.ErrNotFound) {
		return fmt.Errorf("purge volume %s: %w", v.Name, err)
	}
	s.log.Info("volume purged", "volume", v.ID, "tenant", v.TenantID)
	return nil
}

// UndeleteVolume brings back a soft-deleted volume.
func (s *Service) UndeleteVolume(ctx context.Context, tenant, id string) (client.Volume, error) {
	v, err := s.getVolume(ctx, tenant, id)
	if err != nil {
		return client.Volume{}, err
	}
	if v.State != "deleted" {
		return client.Volume{}, fmt.Errorf("volume %s is not deleted: %w", v.Name, errs.ErrConflict)
	}
	// A deleted volume promises nothing; an undeleted one does again.
	releaseQuota, err := s.admitQuota(ctx, tenant, "undelete volume "+v.Name, quotaUse{volumes: 1, disk: v.SizeBytes})
	if err != nil {
		return client.Volume{}, fmt.Errorf("undelete volume %s: %w", v.Name, err)
	}
	defer releaseQuota()
	release, err := s.admitDisk(ctx, "size of volume "+v.Name, v.SizeBytes, v.SizeBytes)
	if err != nil {
		return client.Volume{}, fmt.Errorf("undelete volume %s: %w", v.Name, err)
	}
	defer release()
	v.State, v.DeletedAt, v.PurgeAt = "available", nil, nil
	if err := s.st.UpdateVolume(ctx, v); err != nil {
		return client.Volume{}, err
	}
	return s.volumeView(ctx, v), nil
}

// volumeHere reports whether v's data is in this node's pool as its record
// says: it names this node, or none (a single node's volume, or one made
// before nodes were recorded). The node-local loops that act on volumes'
// datasets (disk admission, growth warnings, retention) see only these.
func (s *Service) volumeHere(v store.Volume) bool {
	return v.Node == "" || v.Node == s.opts.Owner.Node()
}

// cleanVolumeLeftovers deletes volume datasets without a record and sets
// the quota of the others again.
func (s *Service) cleanVolumeLeftovers(ctx context.Context) error {
	list, err := s.st.ListVolumes(ctx, "", true)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, v := range list {
		known[v.ID] = true
	}
	ids, err := s.pool.List(ctx, pool.KindVolume)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if !known[id] {
			s.log.Warn("deleting unrecorded volume dataset", "volume", id)
			s.pool.Delete(ctx, volumeDataset(id))
		}
	}
	s.reapplyVolumeQuotas(ctx, list, ids)
	return nil
}

// reapplyVolumeQuotas sets the quota of every volume this pool holds
// again, as Reconcile does for sandbox roots (reapplyDiskQuota): a btrfs
// qgroup limit becomes durable only at the next transaction commit, so a
// crash of the machine soon after a volume was made or restored could
// leave it unlimited.
func (s *Service) reapplyVolumeQuotas(ctx context.Context, list []store.Volume, held []string) {
	if !s.pool.Caps().Quota {
		return
	}
	here := map[string]bool{}
	for _, id := range held {
		here[id] = true
	}
	for _, v := range list {
		// A deleted volume's dataset is kept until its purge, and an
		// undelete brings it back as it is: it keeps its limit too.
		if !here[v.ID] || !s.volumeHere(v) || v.SizeBytes <= 0 {
			continue
		}
		if err := s.pool.SetQuota(ctx, volumeDataset(v.ID), v.SizeBytes); err != nil {
			s.log.Error("reconcile: set the volume's quota again", "volume", v.ID, "err", err)
		}
	}
}

// forbiddenMounts are sandbox paths a volume may not cover.
var forbiddenMounts = []string{"/proc", "/sys", "/dev", "/.stead", "/run/stead"}

// resolveVolumeMounts checks a create request's volumes and returns them
// with volume ids in place of names.
func (s *Service) resolveVolumeMounts(ctx context.Context, tenant string, in []client.VolumeMount) ([]client.VolumeMount, error) {
	return s.resolveMountsWith(ctx, tenant, in, nil)
}

// resolveMountsWith is resolveVolumeMounts that checks only the path and
// sub-path of the mounts pathOnly reports (volumes not made yet).
func (s *Service) resolveMountsWith(ctx context.Context, tenant string, in []client.VolumeMount, pathOnly func(client.VolumeMount) bool) ([]client.VolumeMount, error) {
	seen := map[string]bool{}
	out := make([]client.VolumeMount, 0, len(in))
	for _, m := range in {
		p := path.Clean(m.Path)
		if !strings.HasPrefix(m.Path, "/") || p == "/" || strings.ContainsRune(m.Path, 0) {
			return nil, fmt.Errorf("volume mount path %q (an absolute path other than /): %w", m.Path, errs.ErrInvalid)
		}
		for _, f := range forbiddenMounts {
			if p == f || strings.HasPrefix(p, f+"/") {
				return nil, fmt.Errorf("volume mount path %q is reserved: %w", m.Path, errs.ErrInvalid)
			}
		}
		if seen[p] {
			return nil, fmt.Errorf("two volumes mounted at %s: %w", p, errs.ErrInvalid)
		}
		seen[p] = true
		sub, err := cleanSubPath(m.SubPath)
		if err != nil {
			return nil, err
		}
		if pathOnly != nil && pathOnly(m) {
			out = append(out, client.VolumeMount{Volume: m.Volume, SubPath: sub, Path: p, ReadOnly: m.ReadOnly})
			continue
		}
		v, err := s.getVolume(ctx, tenant, m.Volume)
		if err != nil {
			return nil, err
		}
		if v.State != "available" {
			return nil, fmt.Errorf("volume %s is deleted (undelete it first): %w", v.Name, errs.ErrConflict)
		}
		out = append(out, client.VolumeMount{Volume: v.ID, SubPath: sub, Path: p, ReadOnly: m.ReadOnly})
	}
	return out, nil
}

// cleanSubPath validates a sub-directory of a volume: relative, no "..",
// no empty or "." components.
func cleanSubPath(sub string) (string, error) {
	if sub == "" {
		return "", nil
	}
	if strings.HasPrefix(sub, "/") || strings.ContainsRune(sub, 0) {
		return "", fmt.Errorf("volume sub-path %q must be relative: %w", sub, errs.ErrInvalid)
	}
	for _, c := range strings.Split(strings.TrimSuffix(sub, "/"), "/") {
		if c == "" || c == "." || c == ".." {
			return "", fmt.Errorf("volume sub-path %q may not contain empty, . or .. components: %w", sub, errs.ErrInvalid)
		}
	}
	return strings.TrimSuffix(sub, "/"), nil
}

// stagedMounts prepares the bind mounts of a sandbox's volumes. A mount of
// a volume's root binds the dataset directly. A sub-path lives inside a
// volume that sandboxes write, where an agent may plant symlinks: it is
// created and opened without following any symlink (openat2
// RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS) and bind-mounted from that
// descriptor onto a private staging directory, which the runtime then
// binds into the sandbox; release unmounts the staging once the sandbox
// has started.
func (s *Service) stagedMounts(ctx context.Context, sandboxID string, vols []client.VolumeMount) (mounts []steadrt.Mount, release func(), err error) {
	var staged []string
	release = func() {
		for _, d := range staged {
			unix.Unmount(d, unix.MNT_DETACH)
			os.Remove(d)
		}
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	for i, m := range vols {
		root := s.pool.Path(volumeDataset(m.Volume))
		if ok, _ := s.pool.Exists(ctx, volumeDataset(m.Volume)); !ok {
			return nil, release, fmt.Errorf("volume %s is gone (purged?): %w", m.Volume, errs.ErrConflict)
		}
		if m.SubPath == "" {
			mounts = append(mounts, steadrt.Mount{Source: root, Destination: m.Path, ReadOnly: m.ReadOnly})
			continue
		}
		r, err := files.OpenRoot(root)
		if err != nil {
			return nil, release, err
		}
		err = r.Mkdir("/"+m.SubPath, true, agentUID, agentUID)
		r.Close()
		if err != nil && !errors.Is(err, errs.ErrConflict) {
			return nil, release, fmt.Errorf("volume %s sub-path %s: %w", m.Volume, m.SubPath, err)
		}
		rootfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, release, fmt.Errorf("volume %s: %w", m.Volume, err)
		}
		fd, err := unix.Openat2(rootfd, m.SubPath, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
		unix.Close(rootfd)
		if err != nil {
			return nil, release, fmt.Errorf("volume %s sub-path %s (symlinks are not followed): %w", m.Volume, m.SubPath, errs.ErrInvalid)
		}
		stage := filepath.Join(s.opts.StageDir, sandboxID+"-"+strconv.Itoa(i))
		os.MkdirAll(stage, 0o700)
		err = unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), stage, "", unix.MS_BIND, "")
		unix.Close(fd)
		if err != nil {
			os.Remove(stage)
			return nil, release, fmt.Errorf("stage volume %s sub-path %s: %w", m.Volume, m.SubPath, err)
		}
		staged = append(staged, stage)
		mounts = append(mounts, steadrt.Mount{Source: stage, Destination: m.Path, ReadOnly: m.ReadOnly})
	}
	return mounts, release, nil
}
