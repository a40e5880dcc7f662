package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/repo/seal"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/treediff"
)

// Off-box backup: pushing sandboxes to the repository (internal/repo),
// restoring and pulling them back, retention, check and prune. A sandbox's
// pushes live in its tenant's scope ("t-<tenant>") under the source
// "sandbox/<id>"; each push reads a fresh local snapshot (kind "push"), and
// only the newest push snapshot of a sandbox is kept locally, as the
// parent-side reference for the next incremental push.

// RepoConfig configures the off-box repository.
type RepoConfig struct {
	// Store is where the repository lives.
	Store blobstore.BlobStore
	// KeyFile holds the 32-byte master key (hex). InitRepo creates it; a
	// daemon on another machine restores with a copy of it.
	KeyFile string
	// CacheDir keeps verified index files, manifests and trees.
	CacheDir string
	// Guard orders the nodes of a cluster that write the repository (one
	// writer per scope by lease: cluster.ScopeGuard); nil on one node.
	Guard repo.ScopeGuard
}

// backupSpec is a sandbox's backup policy and state, kept in its spec.
type backupSpec struct {
	Interval     time.Duration          `json:"interval,omitempty"`
	Retention    client.BackupRetention `json:"retention"`
	ArchiveAfter *time.Duration         `json:"archive_after,omitempty"`
	LastPush     *time.Time             `json:"last_push,omitempty"`
	LastPushID   string                 `json:"last_push_id,omitempty"`
}

// defaultArchiveAfter is how long a sandbox stays stopped before it is
// archived automatically.
const defaultArchiveAfter = 7 * 24 * time.Hour

// backup holds the repository state of a Service.
type backup struct {
	mu   sync.Mutex
	repo *repo.Repository
	// pushing holds the sandboxes with a push in flight.
	pushing sync.Map
	// archiving is set while an automatic archive runs.
	archiving atomic.Bool
}

// errNoRepo is returned when the daemon runs without a repository.
var errNoRepo = fmt.Errorf("no repository: start `stead serve` with --repo DIR or --repo s3://...: %w", errs.ErrUnsupported)

// tenantScope names the repository scope of a tenant's sandboxes.
func tenantScope(tenant string) string {
	if s := "t-" + tenant; pool.ValidID(s) && len(s) <= 64 {
		return s
	}
	h := sha256.Sum256([]byte(tenant))
	return "t-" + hex.EncodeToString(h[:12])
}

// The master key file's lifecycle. InitRepo is the only writer: it makes
// the key file when it is missing and the repository is not initialised,
// never replaces one (fsutil.WriteFileExclusive), and removes the file it
// made when the repository could not be bound to it. A refused init
// writes nothing. A key file missing for an initialised repository is
// reported as such (restore the copy), never papered over with a new key.

// readMasterKey reads the key file; an error satisfying
// errors.Is(err, fs.ErrNotExist) when it is missing.
func (s *Service) readMasterKey() (seal.Key, error) {
	var k seal.Key
	rc := s.opts.Repo
	b, err := os.ReadFile(rc.KeyFile)
	if err != nil {
		return k, fmt.Errorf("read master key: %w", err)
	}
	raw, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(raw) != len(k) {
		return k, fmt.Errorf("master key %s: want 64 hex digits (restore the key file from your copy): %w", rc.KeyFile, errs.ErrInvalid)
	}
	copy(k[:], raw)
	return k, nil
}

// keyMissing explains a missing key file: what to do depends on whether
// the repository is initialised. It wraps repo.ErrNoRepository when the
// repository is not.
func (s *Service) keyMissing(ctx context.Context) error {
	rc := s.opts.Repo
	loc := rc.Store.Location()
	_, err := rc.Store.Stat(ctx, "config")
	switch {
	case err == nil:
		return fmt.Errorf("the repository at %s is initialised but its master key file %s is missing: restore your copy of the key file to %s (or start `stead serve` with --repo-key-file naming the copy); `stead repo init` will not replace it: %w",
			loc, rc.KeyFile, rc.KeyFile, errs.ErrConflict)
	case errors.Is(err, errs.ErrNotFound):
		return fmt.Errorf("%w at %s yet: run `stead repo init` (it creates the master key file %s): %w", repo.ErrNoRepository, loc, rc.KeyFile, errs.ErrConflict)
	default:
		return fmt.Errorf("master key %s is missing; stat the repository at %s: %w", rc.KeyFile, loc, err)
	}
}

// repository opens the configured repository once.
func (s *Service) repository(ctx context.Context) (*repo.Repository, error) {
	if s.opts.Repo == nil {
		return nil, errNoRepo
	}
	s.bk.mu.Lock()
	defer s.bk.mu.Unlock()
	if s.bk.repo != nil {
		return s.bk.repo, nil
	}
	k, err := s.readMasterKey()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, s.keyMissing(ctx)
	}
	if err != nil {
		return nil, err
	}
	r, err := repo.Open(ctx, s.opts.Repo.Store, k, repo.Options{CacheDir: s.opts.Repo.CacheDir, Logger: s.log, Guard: s.opts.Repo.Guard})
	if errors.Is(err, repo.ErrNoRepository) {
		return nil, fmt.Errorf("%w: %w", err, errs.ErrConflict)
	}
	if errors.Is(err, repo.ErrWrongKey) {
		return nil, fmt.Errorf("%w (key file %s: restore the key file this repository was made with): %w", err, s.opts.Repo.KeyFile, errs.ErrForbidden)
	}
	if err != nil {
		return nil, err
	}
	s.bk.repo = r
	return r, nil
}

// CheckRepoKey opens the configured repository, if any, and logs what stops
// it from opening (a missing or wrong key file), so an operator learns it
// at start rather than at the first push.
func (s *Service) CheckRepoKey(ctx context.Context) {
	if s.opts.Repo == nil {
		return
	}
	if _, err := s.repository(ctx); err != nil && !errors.Is(err, repo.ErrNoRepository) && ctx.Err() == nil {
		s.log.Error("the repository cannot be opened", "location", s.opts.Repo.Store.Location(), "err", err)
	}
}

// scope opens the tenant's scope (created on first push).
func (s *Service) scope(ctx context.Context, tenant string, create bool) (*repo.Scope, error) {
	r, err := s.repository(ctx)
	if err != nil {
		return nil, err
	}
	sc, err := r.Scope(ctx, tenantScope(tenant), create)
	if errors.Is(err, errs.ErrNotFound) {
		return nil, fmt.Errorf("nothing pushed yet for this tenant: %w", errs.ErrNotFound)
	}
	return sc, err
}

// RepoInfo describes the repository; scopes are listed for an admin only.
func (s *Service) RepoInfo(ctx context.Context, admin bool) (client.RepoInfo, error) {
	if s.opts.Repo == nil {
		return client.RepoInfo{}, nil
	}
	info := client.RepoInfo{Configured: true, Location: s.opts.Repo.Store.Location()}
	if admin {
		info.KeyFile = s.opts.Repo.KeyFile
	}
	r, err := s.repository(ctx)
	if errors.Is(err, repo.ErrNoRepository) {
		return info, nil
	}
	if err != nil {
		return info, err
	}
	cfg := r.Config()
	info.Initialized, info.ID, info.Created = true, cfg.ID, cfg.Created
	if admin {
		if info.Scopes, err = r.Scopes(ctx); err != nil {
			return info, err
		}
	}
	return info, nil
}

// InitRepo initialises the configured repository (admin only), creating
// the master key file if there is none. A refused init (the repository is
// initialised already) changes nothing and says what to do.
func (s *Service) InitRepo(ctx context.Context) (client.RepoInfo, error) {
	if s.opts.Repo == nil {
		return client.RepoInfo{}, errNoRepo
	}
	if err := s.initRepo(ctx); err != nil {
		return client.RepoInfo{}, err
	}
	s.log.Info("repository initialised", "location", s.opts.Repo.Store.Location(), "key_file", s.opts.Repo.KeyFile)
	return s.RepoInfo(ctx, true)
}

func (s *Service) initRepo(ctx context.Context) error {
	rc := s.opts.Repo
	loc := rc.Store.Location()
	s.bk.mu.Lock() // one init at a time, and none while the repository opens
	defer s.bk.mu.Unlock()
	if _, err := rc.Store.Stat(ctx, "config"); err == nil {
		return s.initRefused(ctx)
	} else if !errors.Is(err, errs.ErrNotFound) {
		return fmt.Errorf("stat the repository at %s: %w", loc, err)
	}
	k, err := s.readMasterKey()
	created := false
	if errors.Is(err, fs.ErrNotExist) {
		if k, err = seal.NewKey(); err != nil {
			return err
		}
		if err := fsutil.WriteFileExclusive(rc.KeyFile, []byte(hex.EncodeToString(k[:])+"\n"), 0o600); err != nil {
			return fmt.Errorf("write master key: %w", err)
		}
		created = true
	} else if err != nil {
		return err
	}
	ierr := repo.Init(ctx, rc.Store, k)
	if ierr == nil {
		return nil
	}
	if errors.Is(ierr, errs.ErrConflict) { // initialised by another daemon meanwhile
		ierr = s.initRefused(ctx)
	}
	// Keep the new key only if the repository is bound to it after all (a
	// write the server stored although the call failed).
	if created {
		if _, oerr := repo.Open(ctx, rc.Store, k, repo.Options{Logger: s.log}); oerr != nil {
			if err := os.Remove(rc.KeyFile); err == nil {
				fsutil.SyncDir(filepath.Dir(rc.KeyFile))
			}
		}
	}
	return ierr
}

// initRefused explains why an initialised repository is not initialised
// again, from the state of the key file.
func (s *Service) initRefused(ctx context.Context) error {
	rc := s.opts.Repo
	loc := rc.Store.Location()
	k, err := s.readMasterKey()
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the repository at %s is already initialised and its master key file %s is missing; nothing was changed: restore your copy of the key file to %s (or start `stead serve` with --repo-key-file naming the copy): %w",
			loc, rc.KeyFile, rc.KeyFile, errs.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("the repository at %s is already initialised; nothing was changed: %w", loc, err)
	}
	_, err = repo.Open(ctx, rc.Store, k, repo.Options{Logger: s.log})
	if errors.Is(err, repo.ErrWrongKey) {
		return fmt.Errorf("the repository at %s is already initialised, with another master key than the one in %s; nothing was changed: restore the key file the repository was made with: %w",
			loc, rc.KeyFile, errs.ErrConflict)
	}
	return fmt.Errorf("the repository at %s is already initialised (master key file %s); nothing was changed: %w", loc, rc.KeyFile, errs.ErrConflict)
}

// GetOperation returns one of p's operations (see api.BackupBackend).
func (s *Service) GetOperation(ctx context.Context, p api.Principal, id string) (client.Operation, error) {
	o, err := s.op(p, id)
	if err != nil {
		return client.Operation{}, err
	}
	return o.snapshot(), nil
}

// WatchOperation sends the current state of one of p's operations, then
// each change (at most every 200 ms), and closes the channel after the
// final state or when ctx ends.
func (s *Service) WatchOperation(ctx context.Context, p api.Principal, id string) (<-chan client.Operation, error) {
	o, err := s.op(p, id)
	if err != nil {
		return nil, err
	}
	ch := make(chan client.Operation, 1)
	go func() {
		defer close(ch)
		for {
			o.mu.Lock()
			v, changed := o.v, o.changed
			o.mu.Unlock()
			select {
			case ch <- v:
			case <-ctx.Done():
				return
			}
			if v.EndedAt != nil {
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
			select { // coalesce bursts of progress
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

func remoteView(m *repo.Manifest) client.RemoteSnapshot {
	v := client.RemoteSnapshot{ID: m.ID.String(), Scope: m.Scope, Source: m.Source, Time: m.Time,
		Files: m.Stats.Files, Bytes: m.Stats.Bytes, DataBytes: m.Stats.DataBytes, AddedBytes: m.Stats.AddedBytes, Labels: m.Labels,
		WriterNode: m.Writer.Node, WriterEpoch: m.Writer.Epoch}
	if spec, ok := m.Labels["spec"]; ok {
		v.Labels = maps.Clone(m.Labels)
		v.Labels["spec"] = maskedSpecJSON(spec)
	}
	if !m.Parent.IsZero() {
		v.Parent = m.Parent.String()
	}
	if id, ok := strings.CutPrefix(m.Source, "sandbox/"); ok {
		v.Sandbox, v.SandboxName = id, m.Labels["sandbox_name"]
		v.Mounts = pushedMountsOf(m)
	}
	if id, ok := strings.CutPrefix(m.Source, "volume/"); ok {
		v.Volume = id
	}
	return v
}

// PushSandbox pushes a sandbox (a new snapshot of it, or req.Snapshot).
func (s *Service) PushSandbox(ctx context.Context, tenant, id string, req client.PushRequest) (client.Operation, error) {
	if _, err := s.repository(ctx); err != nil {
		return client.Operation{}, err
	}
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return client.Operation{}, err
	}
	if err := s.mustHold(sb.ID, "push"); err != nil {
		return client.Operation{}, err
	}
	if err := s.checkRepoQuota(ctx, tenant, "push sandbox "+sb.Name); err != nil {
		return client.Operation{}, fmt.Errorf("push sandbox %s: %w", sb.Name, err)
	}
	return s.startOp(ctx, tenant, "push", sb.ID, req.Wait, func(ctx context.Context, op *operation) (any, error) {
		if req.IncludeVolumes && req.Snapshot != "" {
			return nil, fmt.Errorf("include_volumes takes a new snapshot: leave snapshot empty: %w", errs.ErrInvalid)
		}
		res, _, err := s.push(ctx, op, tenant, sb.ID, req.Snapshot, "push", req.IncludeVolumes)
		return res, err
	})
}

// push snapshots a sandbox (unless snapID names a snapshot of it) and
// pushes the snapshot, incrementally to the sandbox's latest push.
func (s *Service) push(ctx context.Context, op *operation, tenant, sbID, snapID, kind string, withVolumes bool) (client.PushResult, *repo.Manifest, error) {
	if _, busy := s.bk.pushing.LoadOrStore(sbID, true); busy {
		return client.PushResult{}, nil, fmt.Errorf("sandbox %s is already being pushed: %w", sbID, errs.ErrConflict)
	}
	defer s.bk.pushing.Delete(sbID)
	sc, err := s.scope(ctx, tenant, true)
	if err != nil {
		return client.PushResult{}, nil, err
	}
	var sn store.Snapshot
	var sb store.Sandbox
	var volClones map[string]string // volume id → clone dataset
	defer func() {
		for _, c := range volClones {
			s.pool.Delete(context.WithoutCancel(ctx), c)
		}
	}()
	taken := false
	if snapID == "" {
		op.phase("snapshot")
		_, err := s.transition(ctx, tenant, sbID, kind,
			[]store.SandboxState{store.StateRunning, store.StatePaused, store.StateStopped}, nil,
			func(ctx context.Context, cur store.Sandbox) (store.Sandbox, error) {
				sb = cur
				var err error
				var also func(context.Context) error
				if withVolumes {
					also = func(ctx context.Context) error {
						var err error
						volClones, err = s.cloneVolumes(ctx, cur, newVolumeClone)
						return err
					}
				}
				sn, err = s.snapshotLockedWith(ctx, cur, kind, kind, "", also)
				return cur, err
			})
		if err != nil {
			return client.PushResult{}, nil, err
		}
		taken = true
	} else {
		if sn, err = s.st.GetSnapshot(ctx, tenant, snapID); err != nil {
			return client.PushResult{}, nil, fmt.Errorf("snapshot %s: %w", snapID, err)
		}
		if sn.SandboxID != sbID {
			return client.PushResult{}, nil, fmt.Errorf("snapshot %s is not of sandbox %s: %w", snapID, sbID, errs.ErrInvalid)
		}
		if sb, err = s.get(ctx, tenant, sbID); err != nil {
			return client.PushResult{}, nil, err
		}
	}
	source := "sandbox/" + sbID
	var parent seal.ID
	var diff treediff.Diff
	if last, err := s.lastPush(ctx, sc, sb); err == nil {
		parent = last.ID
		diff = s.pushDiff(ctx, tenant, sbID, last, sn.ID)
	} else if !errors.Is(err, errs.ErrNotFound) {
		return client.PushResult{}, nil, err
	}
	if diff != nil {
		defer diff.Close()
	}
	// The spec goes with its environment opened: the repository seals the
	// manifest with the tenant's key, and a restore on another machine
	// (which has not this daemon's secrets key) seals it again.
	pushSpec, err := s.openSpec(sn.SandboxID, sn.Spec)
	if err != nil {
		return client.PushResult{}, nil, err
	}
	labels := map[string]string{"sandbox_name": sb.Name, "template": sb.TemplateID, "local_snapshot": sn.ID,
		"spec": string(pushSpec)}
	// The mounts, with their volumes' names: a restore attaches them again.
	if snSpec, err := decodeSpec(store.Sandbox{ID: sn.SandboxID, Spec: sn.Spec}); err == nil {
		if l := s.recordMounts(ctx, tenant, snSpec.Volumes); l != "" {
			labels[volumesLabel] = l
		}
	}
	m, st, err := sc.Push(ctx, s.pool.Path(snapshotDataset(sn.ID)), repo.PushOptions{Parent: parent, Source: source,
		Tenant: tenant, Labels: labels, Progress: op.progress("push"), Diff: diff, Writer: s.writer(sbID)})
	if err != nil {
		if taken {
			s.pool.Delete(ctx, snapshotDataset(sn.ID))
			s.st.DeleteSnapshot(ctx, tenant, sn.ID)
		}
		return client.PushResult{}, nil, err
	}
	// Remember the push; keep only the newest push snapshot locally.
	now := s.now()
	if err := s.updateBackup(ctx, tenant, sbID, func(b *backupSpec) { b.LastPush, b.LastPushID = &now, m.ID.String() }); err != nil {
		if store.IsFenced(err) {
			// Another node owns the sandbox now: its pushes stand, this
			// one stays unpublished (the restore paths never take it).
			return client.PushResult{}, nil, fmt.Errorf("push of sandbox %s is not published (manifest %s): this node lost its lease: %w",
				sbID, m.ID.String()[:12], err)
		}
		s.log.Warn("record the push in the sandbox", "sandbox", sbID, "snapshot", m.ID.String(), "err", err)
	}
	if taken {
		if list, err := s.st.ListSnapshots(ctx, tenant, sbID); err == nil {
			for _, old := range list {
				if old.Kind == kind && old.ID != sn.ID {
					s.DeleteSnapshot(ctx, tenant, old.ID)
				}
			}
		}
	}
	res := client.PushResult{RemoteSnapshot: remoteView(m), FilesRead: st.FilesRead, FilesReused: st.FilesReused,
		BytesRead: st.BytesRead, BytesUploaded: st.BytesUploaded, Seconds: st.Duration.Seconds(), BlobsReplaced: st.BlobsReplaced,
		Incremental: st.Incremental}
	r, _ := s.repository(ctx)
	for volID, clone := range volClones {
		v, err := s.st.GetVolume(ctx, tenant, volID)
		if err != nil {
			return res, m, fmt.Errorf("push volume %s: %w", volID, err)
		}
		vm, vst, err := s.pushVolumeClone(ctx, op, r, tenant, v, clone, map[string]string{"sandbox": sbID, "sandbox_push": m.ID.String()})
		if err != nil {
			return res, m, err
		}
		res.Volumes = append(res.Volumes, remoteView(vm))
		res.BytesUploaded += vst.BytesUploaded
	}
	return res, m, nil
}

// lastPush is sandbox sb's latest push: the one the store recorded (a
// push is published by the fenced write of that record, so a node that
// lost the sandbox's lease cannot make its own push the latest), else,
// when none is recorded or it is gone from the repository, the latest by
// the repository alone (repo.Scope.Latest: highest writer epoch, then
// newest time).
func (s *Service) lastPush(ctx context.Context, sc *repo.Scope, sb store.Sandbox) (*repo.Manifest, error) {
	source := "sandbox/" + sb.ID
	if id, err := seal.ParseID(backupOf(sb).LastPushID); err == nil {
		m, err := sc.Manifest(ctx, id)
		if err == nil && m.Source == source {
			return m, nil
		}
		if err != nil && !errors.Is(err, errs.ErrNotFound) {
			return nil, err
		}
	}
	return sc.Latest(ctx, source)
}

// writer is who pushes sandbox id now (repo.Writer): this node and the
// epoch of the sandbox's lease it holds (a volume, which has no lease of
// its own, is pushed with epoch 0: its pushes are ordered by time).
func (s *Service) writer(id string) repo.Writer {
	node := s.opts.Owner.Node()
	if node == "" {
		node = s.opts.NodeName
	}
	w := repo.Writer{Node: node}
	if id != "" {
		w.Epoch, _ = s.opts.Owner.Held(id)
	}
	return w
}

// pushDiff compares the local snapshot the parent push read (kept as the
// base of the next push: see push) with the snapshot snapID about to be
// pushed, when the pool can (treediff.Differ): the push then reads only
// what changed. nil (the push walks the whole tree) when the base is gone,
// is not of this sandbox, or is of another lineage (a rollback since).
func (s *Service) pushDiff(ctx context.Context, tenant, sbID string, parent *repo.Manifest, snapID string) treediff.Diff {
	differ, ok := s.pool.(treediff.Differ)
	baseID := parent.Labels["local_snapshot"]
	if !ok || baseID == "" || baseID == snapID {
		return nil
	}
	base, err := s.st.GetSnapshot(ctx, tenant, baseID)
	if err != nil || base.SandboxID != sbID {
		return nil
	}
	d, err := differ.Diff(ctx, s.pool.Path(snapshotDataset(base.ID)), s.pool.Path(snapshotDataset(snapID)))
	if err != nil {
		s.log.Info("push walks the whole tree", "sandbox", sbID, "snapshot", snapID, "base", baseID, "err", err)
		return nil
	}
	return d
}

// cloneVolumes makes read-only clones of the volumes a sandbox mounts,
// named by name (newVolumeClone for temporary ones).
func (s *Service) cloneVolumes(ctx context.Context, sb store.Sandbox, name func() string) (map[string]string, error) {
	sp, err := decodeSpec(sb)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, vm := range sp.Volumes {
		if _, ok := out[vm.Volume]; ok {
			continue
		}
		c := name()
		if err := s.pool.Clone(ctx, volumeDataset(vm.Volume), c, pool.CloneOptions{ReadOnly: true}); err != nil {
			for _, done := range out {
				s.pool.Delete(context.WithoutCancel(ctx), done)
			}
			return nil, fmt.Errorf("clone volume %s: %w", vm.Volume, err)
		}
		out[vm.Volume] = c
	}
	return out, nil
}

// updateBackup changes a sandbox's backup state under its lock.
func (s *Service) updateBackup(ctx context.Context, tenant, id string, fn func(*backupSpec)) error {
	unlock := s.lock(id)
	defer unlock()
	sb, err := s.st.GetSandbox(ctx, tenant, id)
	if err != nil {
		return err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(sb.Spec, &raw); err != nil {
		return err
	}
	var b backupSpec
	if r, ok := raw["backup"]; ok {
		json.Unmarshal(r, &b)
	}
	fn(&b)
	raw["backup"], _ = json.Marshal(b)
	sb.Spec, _ = json.Marshal(raw)
	sb.UpdatedAt = s.now()
	_, err = s.st.UpdateSandbox(ctx, sb)
	return err
}

// backupOf reads a sandbox's backup state from its spec.
func backupOf(sb store.Sandbox) backupSpec {
	var v struct {
		Backup backupSpec `json:"backup"`
	}
	json.Unmarshal(sb.Spec, &v)
	return v.Backup
}

// ListRemoteSnapshots lists the tenant's pushed snapshots (of one sandbox
// when sandbox is set: id or name; a sandbox that no longer exists here
// can be given by id).
func (s *Service) ListRemoteSnapshots(ctx context.Context, tenant, sandbox string) ([]client.RemoteSnapshot, error) {
	sc, err := s.scope(ctx, tenant, false)
	if errors.Is(err, errs.ErrNotFound) {
		return []client.RemoteSnapshot{}, nil
	}
	if err != nil {
		return nil, err
	}
	source := ""
	if sandbox != "" {
		source = "sandbox/" + sandbox
		if sb, err := s.get(ctx, tenant, sandbox); err == nil {
			source = "sandbox/" + sb.ID
		}
	}
	all, err := sc.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	out := []client.RemoteSnapshot{}
	for _, m := range all {
		if source == "" || m.Source == source {
			out = append(out, remoteView(m))
		}
	}
	return out, nil
}

// resolveRemote finds the manifest a restore or pull names.
func (s *Service) resolveRemote(ctx context.Context, sc *repo.Scope, tenant, snapshot, sandbox string) (*repo.Manifest, error) {
	switch {
	case snapshot != "":
		return sc.ResolveManifest(ctx, snapshot)
	case sandbox != "":
		if sb, err := s.get(ctx, tenant, sandbox); err == nil {
			return s.lastPush(ctx, sc, sb)
		}
		return sc.Latest(ctx, "sandbox/"+sandbox)
	}
	return nil, fmt.Errorf("give a remote snapshot id or a sandbox: %w", errs.ErrInvalid)
}

// RestoreRemote restores a pushed snapshot into a new sandbox, with the
// volume mounts the push recorded (see volume_attach.go). A recorded
// volume that is not here, unless req.RestoreVolumes brings it back from
// its push, refuses the restore before anything is downloaded.
func (s *Service) RestoreRemote(ctx context.Context, tenant string, req client.RestoreRequest) (client.Operation, error) {
	sc, err := s.scope(ctx, tenant, false)
	if err != nil {
		return client.Operation{}, err
	}
	m, err := s.resolveRemote(ctx, sc, tenant, req.Snapshot, req.Sandbox)
	if err != nil {
		return client.Operation{}, err
	}
	verb := "restore " + m.ID.String()[:12]
	plan, err := s.planMounts(ctx, tenant, pushedMountsOf(m), req.Volumes)
	if err != nil {
		return client.Operation{}, fmt.Errorf("%s: %w", verb, err)
	}
	if len(plan.missing) > 0 && !req.RestoreVolumes {
		return client.Operation{}, missingVolumesError(verb, plan.missing, true)
	}
	pushes, err := s.volumePushes(ctx, tenant, m, plan.missing, func(pm client.PushedMount) string { return pm.VolumeName })
	if err != nil {
		return client.Operation{}, fmt.Errorf("%s: %w", verb, err)
	}
	if err := s.checkGivenMounts(ctx, tenant, plan); err != nil {
		return client.Operation{}, fmt.Errorf("%s: %w", verb, err)
	}
	if err := s.checkQuota(ctx, tenant, verb, restoreUse(m, pushes, req.NoStart)); err != nil {
		return client.Operation{}, fmt.Errorf("%s: %w", verb, err)
	}
	return s.startOp(ctx, tenant, "restore", m.ID.String(), req.Wait, func(ctx context.Context, op *operation) (any, error) {
		sb, vols, rs, err := s.restoreSandbox(ctx, op, sc, tenant, m, req.Name, req.NoStart, plan, pushes)
		if err != nil {
			return nil, err
		}
		return client.RestoreResult{Sandbox: &sb, Volumes: vols, Files: rs.Files, BytesWritten: rs.BytesWritten,
			BytesDownloaded: rs.BytesDownloaded, Seconds: rs.Duration.Seconds()}, nil
	})
}

// volumePush is a pushed volume snapshot to restore into a new volume.
type volumePush struct {
	m    *repo.Manifest
	sc   *repo.Scope
	name string
}

// volumePushes finds, for each volume of missing, the push to restore with
// sandbox push m and the name of the new volume (nameFor, or one made from
// the volume's id when it gives none). A volume without a push refuses.
func (s *Service) volumePushes(ctx context.Context, tenant string, m *repo.Manifest, missing []client.PushedMount, nameFor func(client.PushedMount) string) (map[string]volumePush, error) {
	out := map[string]volumePush{}
	for _, pm := range missing {
		if _, done := out[pm.VolumeID]; done {
			continue
		}
		vm, vsc, err := s.volumePushFor(ctx, tenant, pm.VolumeID, m.ID.String())
		if errors.Is(err, errs.ErrNotFound) {
			return nil, fmt.Errorf("volume %s (%s) mounted at %s has no push to restore from (push it with stead volume push, or give --volume OTHER:%s): %w",
				orDefault(pm.VolumeName, pm.VolumeID), pm.VolumeID, pm.Path, pm.Path, errs.ErrConflict)
		}
		if err != nil {
			return nil, err
		}
		name := nameFor(pm)
		if name == "" {
			name = "restored-" + strings.TrimPrefix(pm.VolumeID, volumePrefix)
		}
		out[pm.VolumeID] = volumePush{m: vm, sc: vsc, name: name}
	}
	return out, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// checkGivenMounts validates the mounts of plan that name a volume of
// this daemon (paths, sub-paths, the volumes' states), so that a bad one
// is refused before an operation starts.
func (s *Service) checkGivenMounts(ctx context.Context, tenant string, plan mountPlan) error {
	var here []client.VolumeMount
	for i, vm := range plan.mounts {
		if plan.restore[i] == "" {
			here = append(here, vm)
		} else {
			here = append(here, client.VolumeMount{Volume: "", Path: vm.Path, SubPath: vm.SubPath})
		}
	}
	// Volumes still to be restored are checked for their paths only.
	_, err := s.resolveMountsWith(ctx, tenant, here, func(vm client.VolumeMount) bool { return vm.Volume == "" })
	return err
}

// restoreSandbox makes a new sandbox whose root is manifest m, restoring
// first the volumes of pushes and mounting the volumes plan says. A
// failure leaves neither the sandbox nor the volumes it restored.
func (s *Service) restoreSandbox(ctx context.Context, op *operation, sc *repo.Scope, tenant string, m *repo.Manifest, name string, noStart bool, plan mountPlan, pushes map[string]volumePush) (client.Sandbox, []client.Volume, repo.RestoreStats, error) {
	var rs repo.RestoreStats
	tmplID := m.Labels["template"]
	if tmplID == "" {
		tmplID = "host"
	}
	tmpl, err := s.template(ctx, tenant, tmplID)
	if err != nil {
		return client.Sandbox{}, nil, rs, fmt.Errorf("template %s of the snapshot is not on this daemon (import it first): %w", tmplID, err)
	}
	specJSON := []byte(m.Labels["spec"])
	var sp spec
	if err := json.Unmarshal(specJSON, &sp); err != nil {
		return client.Sandbox{}, nil, rs, fmt.Errorf("snapshot %s: sandbox spec: %w", m.ID, errs.ErrInvalid)
	}
	sp.Origin = ""
	// Pushed specs carry their environment opened (materialize seals it).
	if err := s.openEnv(strings.TrimPrefix(m.Source, "sandbox/"), &sp); err != nil {
		return client.Sandbox{}, nil, rs, fmt.Errorf("snapshot %s: %w", m.ID, err)
	}
	if !noStart {
		// The push holds secret names, not values: a start needs them set
		// here. Said before any data moves (with no_start, at the start).
		if err := s.checkSecretsSet(ctx, tenant, sp.SecretRefs); err != nil {
			return client.Sandbox{}, nil, rs, fmt.Errorf("restore snapshot %s: %w", m.ID, err)
		}
	}
	if name != "" {
		if err := checkName("sandbox", name); err != nil {
			return client.Sandbox{}, nil, rs, err
		}
	}
	var restored []client.Volume
	fail := func(err error) (client.Sandbox, []client.Volume, repo.RestoreStats, error) {
		for _, v := range restored {
			s.DeleteVolume(context.WithoutCancel(ctx), tenant, v.ID, true)
		}
		return client.Sandbox{}, nil, rs, err
	}
	byRecorded := map[string]string{}
	for id, vp := range pushes {
		v, _, err := s.restoreVolumeFrom(ctx, op, tenant, vp.sc, vp.m, vp.name)
		if err != nil {
			return fail(err)
		}
		restored = append(restored, v)
		byRecorded[id] = v.ID
	}
	mounts := append([]client.VolumeMount(nil), plan.mounts...)
	for i, rec := range plan.restore {
		if rec != "" {
			mounts[i].Volume = byRecorded[rec]
		}
	}
	if sp.Volumes, err = s.resolveVolumeMounts(ctx, tenant, mounts); err != nil {
		return fail(err)
	}
	specJSON, _ = json.Marshal(sp)
	id := newID()
	if name == "" {
		name = id
	}
	fill := func(ctx context.Context, dst string) error {
		if err := s.pool.Create(ctx, dst); err != nil {
			return err
		}
		var err error
		rs, err = sc.Restore(ctx, m.ID, s.pool.Path(dst), repo.RestoreOptions{Progress: op.progress("restore")})
		return err
	}
	sb, err := s.materializeWith(ctx, tenant, id, name, tmpl, specJSON, rootSource{how: "restore", fill: fill}, noStart)
	if err != nil {
		return fail(err)
	}
	return sb, restored, rs, nil
}

// PullRemote copies a pushed snapshot into a new local snapshot.
func (s *Service) PullRemote(ctx context.Context, tenant string, req client.PullRequest) (client.Operation, error) {
	sc, err := s.scope(ctx, tenant, false)
	if err != nil {
		return client.Operation{}, err
	}
	m, err := sc.ResolveManifest(ctx, req.Snapshot)
	if err != nil {
		return client.Operation{}, err
	}
	sbID := strings.TrimPrefix(m.Source, "sandbox/")
	sb, err := s.get(ctx, tenant, sbID)
	if err != nil {
		return client.Operation{}, fmt.Errorf("pull: the snapshot's sandbox %s is not on this daemon (use restore to make a new sandbox from it): %w", sbID, err)
	}
	verb := "pull " + m.ID.String()[:12]
	if err := s.checkQuota(ctx, tenant, verb, quotaUse{snapshots: 1}); err != nil {
		return client.Operation{}, fmt.Errorf("%s: %w", verb, err)
	}
	return s.startOp(ctx, tenant, "pull", m.ID.String(), req.Wait, func(ctx context.Context, op *operation) (any, error) {
		release, err := s.admitQuota(ctx, tenant, verb, quotaUse{snapshots: 1})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", verb, err)
		}
		defer release()
		sn := store.Snapshot{ID: newSnapshotID(), TenantID: tenant, SandboxID: sb.ID, SandboxName: sb.Name,
			Label: "pulled " + m.ID.String()[:12], Kind: "pull", TemplateID: sb.TemplateID, Spec: sb.Spec}
		if label := m.Labels["spec"]; label != "" {
			// Pushed specs carry their environment opened: sealed again here.
			var err error
			if sn.Spec, err = s.resealSpec(sb.ID, sb.ID, []byte(label)); err != nil {
				return nil, fmt.Errorf("spec of %s: %w", m.ID, err)
			}
		}
		ds := snapshotDataset(sn.ID)
		if err := s.pool.Create(ctx, ds); err != nil {
			return nil, err
		}
		rs, err := sc.Restore(ctx, m.ID, s.pool.Path(ds), repo.RestoreOptions{Progress: op.progress("pull")})
		if err == nil {
			err = s.pool.SetReadOnly(ctx, ds, true)
		}
		if err == nil {
			sn.CreatedAt = s.now()
			err = s.st.CreateSnapshot(ctx, sn)
		}
		if err != nil {
			s.pool.Delete(ctx, ds)
			return nil, err
		}
		v := snapshotView(sn)
		return client.RestoreResult{Snapshot: &v, Files: rs.Files, BytesWritten: rs.BytesWritten,
			BytesDownloaded: rs.BytesDownloaded, Seconds: rs.Duration.Seconds()}, nil
	})
}

// repoScopes returns the scopes a check or repair covers that exist: the
// tenant's sandboxes' and volumes' (every scope when admin).
func (s *Service) repoScopes(ctx context.Context, r *repo.Repository, tenant string, admin bool) ([]*repo.Scope, error) {
	names := []string{tenantScope(tenant)}
	if admin {
		var err error
		if names, err = r.Scopes(ctx); err != nil {
			return nil, err
		}
	} else {
		// The tenant's volumes: each its own scope.
		vols, err := s.st.ListVolumes(ctx, tenant, true)
		if err != nil {
			return nil, err
		}
		for _, v := range vols {
			names = append(names, volumeScope(v.ID))
		}
	}
	var out []*repo.Scope
	for _, name := range names {
		sc, err := r.Scope(ctx, name, false)
		if errors.Is(err, errs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

// CheckRepo checks the tenant's scopes (its sandboxes' and its volumes';
// every scope when admin). Packs it
// finds damaged are marked in the repository; the result names them and
// the snapshots (and so sandboxes) they damage.
func (s *Service) CheckRepo(ctx context.Context, tenant string, admin bool, req client.CheckRequest) (client.Operation, error) {
	r, err := s.repository(ctx)
	if err != nil {
		return client.Operation{}, err
	}
	return s.startOp(ctx, tenant, "check", "", req.Wait, func(ctx context.Context, op *operation) (any, error) {
		scopes, err := s.repoScopes(ctx, r, tenant, admin)
		if err != nil {
			return nil, err
		}
		results, err := repo.CheckScopes(ctx, scopes, repo.CheckOptions{ReadData: req.ReadData,
			ReadDataSubset: req.ReadDataSubset, Progress: op.progress("check")})
		if err != nil {
			return nil, err
		}
		out := client.CheckResult{OK: true, Scopes: []client.ScopeCheck{}}
		nerr, npacks, nsnaps := 0, 0, 0
		for _, res := range results {
			out.OK = out.OK && res.OK()
			sc := client.ScopeCheck{Scope: res.Scope, Snapshots: res.Snapshots, Packs: res.Packs,
				Blobs: res.Blobs, PacksRead: res.PacksRead, Errors: res.Errors, Warnings: res.Warnings}
			for _, d := range res.DamagedPacks {
				sc.DamagedPacks = append(sc.DamagedPacks, client.DamagedPack{ID: d.Pack.String(), Found: d.Found,
					Reason: d.Reason, Missing: d.Missing, BlobsLost: len(d.Blobs)})
			}
			for _, d := range res.DamagedSnapshots {
				sc.DamagedSnapshots = append(sc.DamagedSnapshots, damagedView(d))
			}
			nerr += len(res.Errors)
			npacks += len(res.DamagedPacks)
			nsnaps += len(res.DamagedSnapshots)
			out.Scopes = append(out.Scopes, sc)
		}
		if !out.OK {
			msg := fmt.Sprintf("check found %d error(s)", nerr)
			if npacks > 0 || nsnaps > 0 {
				msg += fmt.Sprintf(": %d damaged pack(s), %d damaged snapshot(s); run `stead repo repair`", npacks, nsnaps)
			}
			return out, errors.New(msg)
		}
		return out, nil
	})
}

// damagedView is the API form of a damaged snapshot.
func damagedView(d repo.SnapshotDamage) client.DamagedSnapshot {
	v := client.DamagedSnapshot{ID: d.ID.String(), Time: d.Time, Source: d.Source, Problem: d.Problem}
	if id, ok := strings.CutPrefix(d.Source, "sandbox/"); ok {
		v.Sandbox, v.SandboxName = id, d.Labels["sandbox_name"]
	}
	if id, ok := strings.CutPrefix(d.Source, "volume/"); ok {
		v.Volume = id
	}
	for _, p := range d.Packs {
		v.Packs = append(v.Packs, p.String())
	}
	return v
}

// RepairRepo repairs the tenant's scopes (every scope when admin): the
// intact blobs of damaged packs are copied to new packs, the blobs damaged
// snapshots still lack are read again from the local snapshots this daemon
// has of their sandbox, and the damaged packs are deleted. The result lists
// the snapshots repaired and those still damaged.
func (s *Service) RepairRepo(ctx context.Context, tenant string, admin bool, req client.RepairRequest) (client.Operation, error) {
	r, err := s.repository(ctx)
	if err != nil {
		return client.Operation{}, err
	}
	return s.startOp(ctx, tenant, "repair", "", req.Wait, func(ctx context.Context, op *operation) (any, error) {
		scopes, err := s.repoScopes(ctx, r, tenant, admin)
		if err != nil {
			return nil, err
		}
		out := client.RepairResult{OK: true, Scopes: []client.ScopeRepair{}}
		for _, sc := range scopes {
			res, err := sc.Repair(ctx, repo.RepairOptions{Sources: s.localCopies(ctx),
				Progress: func(p repo.Progress) { op.progress(p.Op)(p) }})
			if err != nil {
				return out, fmt.Errorf("repair %s: %w", sc.Name(), err)
			}
			v := client.ScopeRepair{Scope: res.Scope, PacksRemoved: idStrings(res.PacksRemoved), PacksIntact: idStrings(res.PacksIntact),
				BlobsSalvaged: res.BlobsSalvaged, BlobsUploaded: res.BlobsUploaded, BytesUploaded: res.BytesUploaded,
				Repaired: []client.DamagedSnapshot{}, Damaged: []client.DamagedSnapshot{}}
			for _, d := range res.Repaired {
				dv := damagedView(d.SnapshotDamage)
				dv.RepairedFrom = d.From
				v.Repaired = append(v.Repaired, dv)
			}
			for _, d := range res.Damaged {
				v.Damaged = append(v.Damaged, damagedView(d))
			}
			out.OK = out.OK && len(v.Damaged) == 0
			out.Scopes = append(out.Scopes, v)
			s.log.Info("repository repaired", "scope", res.Scope, "packs_removed", len(res.PacksRemoved),
				"repaired", len(res.Repaired), "damaged", len(res.Damaged))
		}
		if !out.OK {
			n := 0
			for _, sc := range out.Scopes {
				n += len(sc.Damaged)
			}
			return out, fmt.Errorf("%d snapshot(s) are still damaged: no local copy had what they lack "+
				"(forget them, or repair on a daemon that has a copy)", n)
		}
		return out, nil
	})
}

func idStrings(ids []seal.ID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

// localCopies returns, for a pushed snapshot of a sandbox or a volume, the
// local snapshots this daemon still has of it: first the one the push read
// (an exact copy; a volume's push reads a clone it then drops), then the
// others (which may hold some of its data).
func (s *Service) localCopies(ctx context.Context) func(m *repo.Manifest) []repo.RepairSource {
	return func(m *repo.Manifest) []repo.RepairSource {
		id, ok := strings.CutPrefix(m.Source, "sandbox/")
		volume := false
		if !ok {
			if id, ok = strings.CutPrefix(m.Source, "volume/"); !ok {
				return nil
			}
			volume = true
		}
		if m.Tenant == "" {
			return nil
		}
		list, err := s.st.ListSnapshots(ctx, m.Tenant, id)
		if err != nil {
			return nil
		}
		var exact, others []repo.RepairSource
		for _, sn := range list {
			if (sn.Kind == "volume") != volume {
				continue
			}
			src := repo.RepairSource{Dir: s.pool.Path(snapshotDataset(sn.ID)), Name: "local snapshot " + sn.ID}
			if sn.ID == m.Labels["local_snapshot"] {
				src.Exact = true
				exact = append(exact, src)
			} else {
				others = append(others, src)
			}
		}
		return append(exact, others...)
	}
}

// retentionPolicy converts the API form.
func retentionPolicy(r client.BackupRetention) (repo.Policy, error) {
	p := repo.Policy{KeepLast: r.KeepLast, Hourly: r.Hourly, Daily: r.Daily, Weekly: r.Weekly, Monthly: r.Monthly}
	var err error
	if p.Within, err = parseDuration("within", r.Within, 0); err != nil {
		return p, err
	}
	return p, p.Validate()
}

// PruneRepo applies retention to the tenant's pushed snapshots and drops
// unreferenced data.
func (s *Service) PruneRepo(ctx context.Context, tenant string, req client.PruneRequest) (client.Operation, error) {
	sc, err := s.scope(ctx, tenant, false)
	if errors.Is(err, errs.ErrNotFound) && req.Sandbox == "" {
		sc = nil // no sandbox pushes: volumes only
	} else if err != nil {
		return client.Operation{}, err
	}
	type job struct {
		source string
		p      repo.Policy
	}
	var jobs []job
	if req.Sandbox != "" {
		id := req.Sandbox
		var b backupSpec
		if sb, err := s.get(ctx, tenant, req.Sandbox); err == nil {
			id, b = sb.ID, backupOf(sb)
		}
		r := b.Retention
		if req.Retention != nil {
			r = *req.Retention
		}
		p, err := retentionPolicy(r)
		if err != nil {
			return client.Operation{}, err
		}
		jobs = append(jobs, job{"sandbox/" + id, p})
	} else {
		list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: tenant})
		if err != nil {
			return client.Operation{}, err
		}
		for _, sb := range list {
			r := backupOf(sb).Retention
			if req.Retention != nil {
				r = *req.Retention
			}
			p, err := retentionPolicy(r)
			if err != nil {
				return client.Operation{}, err
			}
			jobs = append(jobs, job{"sandbox/" + sb.ID, p})
		}
	}
	return s.startOp(ctx, tenant, "prune", "", req.Wait, func(ctx context.Context, op *operation) (any, error) {
		out := client.RepoPruneResult{Forgotten: []string{}, DryRun: req.DryRun}
		op.phase("forget")
		if sc == nil {
			return out, s.pruneVolumes(ctx, tenant, req, &out)
		}
		all, err := sc.Snapshots(ctx)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			if j.p.Empty() {
				continue
			}
			var ms []*repo.Manifest
			for _, m := range all {
				if m.Source == j.source {
					ms = append(ms, m)
				}
			}
			if err := s.forgetByPolicy(ctx, sc, ms, j.p, req.DryRun, &out); err != nil {
				return nil, err
			}
		}
		op.phase("prune")
		st, err := sc.Prune(ctx, repo.PruneOptions{DryRun: req.DryRun})
		if err != nil {
			return nil, err
		}
		out.PacksDeleted, out.PacksRepacked, out.BytesFreed = st.PacksDeleted, st.PacksRepacked, st.BytesFreed
		if req.Sandbox == "" {
			// The tenant's volumes: each its own scope, same retention.
			if err := s.pruneVolumes(ctx, tenant, req, &out); err != nil {
				return out, err
			}
		}
		return out, nil
	})
}

// forgetByPolicy forgets (unless dryRun) the manifests of ms that p drops
// and adds their ids to out.Forgotten.
func (s *Service) forgetByPolicy(ctx context.Context, sc *repo.Scope, ms []*repo.Manifest, p repo.Policy, dryRun bool, out *client.RepoPruneResult) error {
	_, drop := p.Apply(ms, s.now())
	ids := make([]seal.ID, len(drop))
	for i, m := range drop {
		ids[i] = m.ID
		out.Forgotten = append(out.Forgotten, m.ID.String())
	}
	if dryRun {
		return nil
	}
	return sc.Forget(ctx, ids...)
}

// pruneVolumes applies req.Retention (when given) to each of the tenant's
// volumes' pushes and prunes their scopes, adding to out.
func (s *Service) pruneVolumes(ctx context.Context, tenant string, req client.PruneRequest, out *client.RepoPruneResult) error {
	var p repo.Policy
	if req.Retention != nil {
		var err error
		if p, err = retentionPolicy(*req.Retention); err != nil {
			return err
		}
	}
	vols, err := s.st.ListVolumes(ctx, tenant, true)
	if err != nil {
		return err
	}
	r, err := s.repository(ctx)
	if err != nil {
		return err
	}
	for _, v := range vols {
		sc, err := r.Scope(ctx, volumeScope(v.ID), false)
		if errors.Is(err, errs.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if !p.Empty() {
			ms, err := sc.Snapshots(ctx)
			if err != nil {
				return err
			}
			if err := s.forgetByPolicy(ctx, sc, ms, p, req.DryRun, out); err != nil {
				return err
			}
		}
		st, err := sc.Prune(ctx, repo.PruneOptions{DryRun: req.DryRun})
		if err != nil {
			return fmt.Errorf("prune volume %s: %w", v.Name, err)
		}
		out.PacksDeleted += st.PacksDeleted
		out.PacksRepacked += st.PacksRepacked
		out.BytesFreed += st.BytesFreed
	}
	return nil
}

// GetBackupPolicy returns a sandbox's push schedule and retention.
func (s *Service) GetBackupPolicy(ctx context.Context, tenant, id string) (client.BackupPolicy, error) {
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return client.BackupPolicy{}, err
	}
	def, err := s.archiveAfterDefault(ctx, sb.TenantID) // the tenant's retention (retention.go)
	if err != nil {
		return client.BackupPolicy{}, err
	}
	return policyView(backupOf(sb), def), nil
}

// policyView shows b; defArchiveAfter is the archive_after of a sandbox
// that sets none (its tenant's archive_stopped_after).
func policyView(b backupSpec, defArchiveAfter time.Duration) client.BackupPolicy {
	p := client.BackupPolicy{Retention: b.Retention, LastPush: b.LastPush, LastPushID: b.LastPushID}
	if b.Interval > 0 {
		p.Interval = b.Interval.String()
		next := time.Now().UTC()
		if b.LastPush != nil {
			next = b.LastPush.Add(b.Interval)
		}
		p.NextPush = &next
	}
	after := defArchiveAfter
	if b.ArchiveAfter != nil {
		after = *b.ArchiveAfter
	}
	p.ArchiveAfter = after.String()
	if after == 0 {
		p.ArchiveAfter = "0"
	}
	return p
}

// SetBackupPolicy sets a sandbox's push schedule and retention.
func (s *Service) SetBackupPolicy(ctx context.Context, tenant, id string, p client.BackupPolicy) (client.BackupPolicy, error) {
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return client.BackupPolicy{}, err
	}
	interval, err := parseDuration("interval", p.Interval, 0)
	if err != nil {
		return client.BackupPolicy{}, err
	}
	if interval > 0 && interval < time.Minute {
		return client.BackupPolicy{}, fmt.Errorf("interval %s: at least 1m: %w", interval, errs.ErrInvalid)
	}
	if _, err := retentionPolicy(p.Retention); err != nil {
		return client.BackupPolicy{}, err
	}
	var after *time.Duration
	if p.ArchiveAfter != "" {
		d, err := parseDuration("archive_after", p.ArchiveAfter, 0)
		if err != nil {
			return client.BackupPolicy{}, err
		}
		after = &d
	}
	if err := s.updateBackup(ctx, tenant, sb.ID, func(b *backupSpec) {
		b.Interval, b.Retention, b.ArchiveAfter = interval, p.Retention, after
	}); err != nil {
		return client.BackupPolicy{}, err
	}
	return s.GetBackupPolicy(ctx, tenant, sb.ID)
}

// RunBackupPolicies pushes the sandboxes whose push interval has passed
// (then forgets what their retention drops) and archives sandboxes stopped
// for longer than their archive_after. Called by RunPolicies.
func (s *Service) RunBackupPolicies(ctx context.Context) {
	if s.opts.Repo == nil {
		return
	}
	if _, err := s.repository(ctx); err != nil {
		return
	}
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{States: []store.SandboxState{store.StateRunning, store.StatePaused, store.StateStopped}})
	if err != nil {
		return
	}
	list = s.owned(list) // each node pushes the sandboxes it runs
	now := s.now()
	for _, sb := range list {
		b := backupOf(sb)
		if b.Interval > 0 && (b.LastPush == nil || !now.Before(b.LastPush.Add(b.Interval))) {
			if _, busy := s.bk.pushing.Load(sb.ID); busy {
				continue
			}
			s.startOp(ctx, sb.TenantID, "push", sb.ID, false, func(ctx context.Context, op *operation) (any, error) {
				if err := s.checkRepoQuota(ctx, sb.TenantID, "scheduled push of sandbox "+sb.Name); err != nil {
					s.record(ctx, sb.TenantID, "sandbox.scheduled_push", sb.ID, err)
					return nil, err
				}
				res, _, err := s.push(ctx, op, sb.TenantID, sb.ID, "", "push", false)
				if err == nil {
					s.applyRetention(ctx, sb.TenantID, sb.ID, b.Retention)
				}
				s.record(ctx, sb.TenantID, "sandbox.scheduled_push", sb.ID, err)
				return res, err
			})
			continue
		}
		after, err := s.archiveAfterDefault(ctx, sb.TenantID) // the tenant's retention (retention.go)
		if err != nil {
			continue
		}
		if b.ArchiveAfter != nil {
			after = *b.ArchiveAfter
		}
		if sb.State == store.StateStopped && after > 0 && sb.StoppedAt != nil && now.Sub(*sb.StoppedAt) >= after {
			if _, busy := s.bk.pushing.Load(sb.ID); busy {
				continue
			}
			// One automatic archive at a time: a repository configured on
			// a daemon with many long-stopped sandboxes archives them in
			// turn, not all at once.
			if !s.bk.archiving.CompareAndSwap(false, true) {
				continue
			}
			s.startOp(ctx, sb.TenantID, "archive", sb.ID, false, func(ctx context.Context, op *operation) (any, error) {
				defer s.bk.archiving.Store(false)
				if err := s.checkRepoQuota(ctx, sb.TenantID, "automatic archive of sandbox "+sb.Name); err != nil {
					s.record(ctx, sb.TenantID, "sandbox.auto_archive", sb.ID, err)
					return nil, err
				}
				res, err := s.archive(ctx, op, sb.TenantID, sb.ID)
				s.record(ctx, sb.TenantID, "sandbox.auto_archive", sb.ID, err)
				return res, err
			})
		}
	}
}

// applyRetention forgets a sandbox's pushes its retention drops.
func (s *Service) applyRetention(ctx context.Context, tenant, sbID string, r client.BackupRetention) {
	p, err := retentionPolicy(r)
	if err != nil || p.Empty() {
		return
	}
	sc, err := s.scope(ctx, tenant, false)
	if err != nil {
		return
	}
	if drop, err := sc.ApplyPolicy(ctx, "sandbox/"+sbID, p); err != nil {
		s.log.Warn("retention", "sandbox", sbID, "err", err)
	} else if len(drop) > 0 {
		s.log.Info("retention forgot pushed snapshots", "sandbox", sbID, "count", len(drop))
	}
}
