package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/store"
)

// Volume mounts are part of a sandbox's identity. A push records them
// (label "volumes": volume id and name, sub-path, path, mode); a restore,
// a fork and a drill attach them again. A recorded volume is found on this
// daemon by its id, else as the origin of a volume restored from it (on a
// new machine: `stead volume restore` of its push), else by its name. A
// mount given with the request replaces the recorded mount at the same
// path, or adds one.
//
// A recorded volume found nowhere refuses the restore or fork (409) before
// anything is made or downloaded, naming the volume and what to do. It is
// never replaced by an empty directory: the agent's service would write
// its state there and lose it at the next start, which is what Incus avoids
// by refusing to start an instance whose storage volume is missing.
//
// A stopped sandbox's mounts can be changed (AttachVolume, DetachVolume);
// a running one's cannot (its mount namespace is made at start).

// volumesLabel is the push label holding the sandbox's volume mounts.
const volumesLabel = "volumes"

// pushedMountsOf returns the mounts a push recorded: the "volumes" label,
// or (a push made before mounts were recorded) the spec's mounts, by id.
func pushedMountsOf(m *repo.Manifest) []client.PushedMount {
	var out []client.PushedMount
	if l := m.Labels[volumesLabel]; l != "" && json.Unmarshal([]byte(l), &out) == nil {
		return out
	}
	var sp spec
	if json.Unmarshal([]byte(m.Labels["spec"]), &sp) == nil {
		for _, vm := range sp.Volumes {
			out = append(out, client.PushedMount{VolumeID: vm.Volume, SubPath: vm.SubPath, Path: vm.Path, ReadOnly: vm.ReadOnly})
		}
	}
	return out
}

// recordMounts returns the "volumes" label of a push of a sandbox with
// these mounts ("" without mounts).
func (s *Service) recordMounts(ctx context.Context, tenant string, mounts []client.VolumeMount) string {
	if len(mounts) == 0 {
		return ""
	}
	out := make([]client.PushedMount, 0, len(mounts))
	for _, vm := range mounts {
		pm := client.PushedMount{VolumeID: vm.Volume, SubPath: vm.SubPath, Path: vm.Path, ReadOnly: vm.ReadOnly}
		if v, err := s.st.GetVolume(ctx, tenant, vm.Volume); err == nil {
			pm.VolumeName = v.Name
		}
		out = append(out, pm)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// findRecordedVolume finds the tenant's volume standing for a recorded
// one: by id, else the newest volume restored from it (one of the same
// name first), else by name. ok is false when there is none.
func (s *Service) findRecordedVolume(ctx context.Context, tenant, id, name string) (store.Volume, bool, error) {
	if id != "" {
		v, err := s.st.GetVolume(ctx, tenant, id)
		if err == nil && v.ID == id {
			return v, true, nil
		}
		if err != nil && !errors.Is(err, errs.ErrNotFound) {
			return v, false, err
		}
		list, err := s.st.ListVolumes(ctx, tenant, false)
		if err != nil {
			return store.Volume{}, false, err
		}
		// a beats b: the recorded name first, then the newer.
		beats := func(a, b *store.Volume) bool {
			if (a.Name == name) != (b.Name == name) {
				return a.Name == name
			}
			return a.CreatedAt.After(b.CreatedAt)
		}
		var best *store.Volume
		for i := range list {
			if v := &list[i]; v.Origin == id && (best == nil || beats(v, best)) {
				best = v
			}
		}
		if best != nil {
			return *best, true, nil
		}
	}
	if name != "" {
		v, err := s.st.GetVolume(ctx, tenant, name)
		if err == nil {
			return v, true, nil
		}
		if !errors.Is(err, errs.ErrNotFound) {
			return v, false, err
		}
	}
	return store.Volume{}, false, nil
}

// mountPlan is how a new sandbox gets its volumes: mounts[i] names a
// volume of this daemon, or (restore[i] set) a recorded volume still to be
// restored from its push.
type mountPlan struct {
	mounts  []client.VolumeMount
	restore []string // recorded volume id, per mount ("" when found here)
	// missing are the recorded mounts whose volume is not on this daemon.
	missing []client.PushedMount
}

// planMounts matches the recorded mounts to this daemon's volumes and
// applies the request's mounts (by path: a replacement or an addition).
func (s *Service) planMounts(ctx context.Context, tenant string, recorded []client.PushedMount, given []client.VolumeMount) (mountPlan, error) {
	var p mountPlan
	byPath := map[string]bool{}
	for _, g := range given {
		byPath[path.Clean(g.Path)] = true
	}
	for _, r := range recorded {
		if byPath[path.Clean(r.Path)] {
			continue // replaced by the request
		}
		v, ok, err := s.findRecordedVolume(ctx, tenant, r.VolumeID, r.VolumeName)
		if err != nil {
			return p, err
		}
		vm := client.VolumeMount{SubPath: r.SubPath, Path: r.Path, ReadOnly: r.ReadOnly}
		id := ""
		if ok {
			vm.Volume = v.ID
		} else {
			id = r.VolumeID
			p.missing = append(p.missing, r)
		}
		p.mounts = append(p.mounts, vm)
		p.restore = append(p.restore, id)
	}
	for _, g := range given {
		p.mounts = append(p.mounts, g)
		p.restore = append(p.restore, "")
	}
	return p, nil
}

// missingVolumesError says which recorded volumes are not on this daemon
// and what to do; verb names the refused action, canRestore whether
// restore_volumes applies.
func missingVolumesError(verb string, missing []client.PushedMount, canRestore bool) error {
	var names []string
	for _, m := range missing {
		names = append(names, fmt.Sprintf("%s (%s, mounted at %s)", orDefault(m.VolumeName, m.VolumeID), m.VolumeID, m.Path))
	}
	what := "volume " + names[0] + " is"
	if len(names) > 1 {
		what = "volumes " + strings.Join(names, ", ") + " are"
	}
	first := missing[0]
	name := orDefault(first.VolumeName, "NAME")
	how := fmt.Sprintf("restore it first (stead volume restore --latest %s --name %s)", orDefault(first.VolumeName, first.VolumeID), name)
	if canRestore {
		how += ", restore with --restore-volumes to bring every missing volume back from its push"
	}
	how += fmt.Sprintf(", or mount another volume there with --volume OTHER:%s", first.Path)
	return fmt.Errorf("%s: %s not on this daemon, and the sandbox's service must not write into an empty mount point instead: %s; nothing was made: %w",
		verb, what, how, errs.ErrConflict)
}

// AttachVolume adds a volume mount to a stopped sandbox; it is mounted
// from the next start.
func (s *Service) AttachVolume(ctx context.Context, tenant, id string, m client.VolumeMount) (client.Sandbox, error) {
	return s.transition(ctx, tenant, id, "attach a volume to", mountStates(), nil,
		func(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
			if err := stoppedForMounts(sb); err != nil {
				return sb, err
			}
			sp, err := decodeSpec(sb)
			if err != nil {
				return sb, err
			}
			p := path.Clean(m.Path)
			for _, cur := range sp.Volumes {
				if cur.Path == p {
					return sb, fmt.Errorf("volume %s is already mounted at %s (detach it first: stead volume detach %s %s): %w",
						cur.Volume, p, sb.Name, p, errs.ErrConflict)
				}
			}
			add, err := s.resolveVolumeMounts(ctx, tenant, []client.VolumeMount{m})
			if err != nil {
				return sb, err
			}
			sp.Volumes = append(sp.Volumes, add...)
			if err := setSpec(&sb, sp); err != nil {
				return sb, err
			}
			sb.UpdatedAt = s.now()
			return s.st.UpdateSandbox(ctx, sb)
		})
}

// DetachVolume removes the volume mount at mountPath from a stopped
// sandbox; the volume keeps its data.
func (s *Service) DetachVolume(ctx context.Context, tenant, id, mountPath string) (client.Sandbox, error) {
	return s.transition(ctx, tenant, id, "detach a volume from", mountStates(), nil,
		func(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
			if err := stoppedForMounts(sb); err != nil {
				return sb, err
			}
			sp, err := decodeSpec(sb)
			if err != nil {
				return sb, err
			}
			p := path.Clean(mountPath)
			i := slices.IndexFunc(sp.Volumes, func(vm client.VolumeMount) bool { return vm.Path == p })
			if i < 0 || !strings.HasPrefix(mountPath, "/") {
				return sb, fmt.Errorf("sandbox %s has no volume mounted at %s: %w", sb.Name, mountPath, errs.ErrNotFound)
			}
			sp.Volumes = slices.Delete(sp.Volumes, i, i+1)
			if err := setSpec(&sb, sp); err != nil {
				return sb, err
			}
			sb.UpdatedAt = s.now()
			return s.st.UpdateSandbox(ctx, sb)
		})
}

// mountStates are the states in which a change of mounts is considered:
// stoppedForMounts then refuses all but stopped with what to do.
func mountStates() []store.SandboxState {
	return []store.SandboxState{store.StateStopped, store.StateRunning, store.StatePaused, store.StateError}
}

// stoppedForMounts refuses a change of mounts unless sb is stopped: a
// sandbox's mounts are made when it starts.
func stoppedForMounts(sb store.Sandbox) error {
	if sb.State == store.StateStopped {
		return nil
	}
	return fmt.Errorf("it is %s: stop it first (stead stop %s), then start it again to mount the change (mounts are made at start): %w",
		sb.State, sb.Name, errs.ErrConflict)
}

// setSpec stores sp as sb's spec, keeping the backup state that
// updateBackup keeps beside it.
func setSpec(sb *store.Sandbox, sp spec) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(sb.Spec, &raw); err != nil {
		return fmt.Errorf("decode spec of sandbox %s: %w", sb.ID, err)
	}
	b, err := json.Marshal(sp)
	if err != nil {
		return err
	}
	var fresh map[string]json.RawMessage
	if err := json.Unmarshal(b, &fresh); err != nil {
		return err
	}
	if bk, ok := raw["backup"]; ok {
		fresh["backup"] = bk
	}
	sb.Spec, err = json.Marshal(fresh)
	return err
}
