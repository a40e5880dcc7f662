package sandbox

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/files"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/store"
)

// Growth: where the space went (du), warnings before a limit bites, and
// large files in state directories.
//
// The limit check (CheckLimits, run with the policies) reads every live
// sandbox's disk use against its quota, every running sandbox's memory
// working set against its limit, every live volume's use against its size
// and the pool's fill. A use that crosses a warning level (GrowthOptions
// Levels: 80% and 95% by default) emits one events.LimitWarning and one log
// line, and the warning shows in the sandbox's view (stead info, stead
// list) and in orient, until the use falls 5 points below the level (so a
// use that hovers around a level warns once). The levels crossed are kept
// in memory: a restarted daemon warns again about what is still over.

// DefaultLimitWarnLevels are the fractions of a limit at which the
// daemon warns.
var defaultLimitWarnLevels = []float64{0.80, 0.95}

// DefaultLargeStateFileBytes is the size above which a file in a state
// directory is reported as history to off-load.
const DefaultLargeStateFileBytes = 1 << 30

// stateDirs are the directories whose large files are reported: where an
// agent keeps state it accumulates (the seed's /data).
var stateDirs = []string{"/data"}

// limitHysteresis is how far below a level use must fall to re-arm it.
const limitHysteresis = 0.05

// largeFileCacheTTL is how long a sandbox's large-state-file scan is
// reused by GetSandbox.
const largeFileCacheTTL = time.Minute

// GrowthOptions configure the limit warnings and the large-file hints.
type GrowthOptions struct {
	// Levels are the fractions of a limit that warn, ascending (default
	// 0.80 and 0.95).
	Levels []float64
	// LargeStateFileBytes is the size above which a file under a state
	// directory is reported (default DefaultLargeStateFileBytes).
	LargeStateFileBytes int64
}

// limitWatch is the state of the limit check.
type limitWatch struct {
	mu sync.Mutex
	// active holds the warning of each resource over a level, by key
	// (resource/subject); level is its index into the levels.
	active map[string]activeWarning
	// large caches the large-state-file scan by sandbox id.
	large map[string]largeScan
}

type activeWarning struct {
	level   int
	tenant  string
	sandbox string // the sandbox the warning shows on ("" for volumes and the pool)
	w       client.LimitWarning
}

type largeScan struct {
	at    time.Time
	files []client.LargeFile
}

// levels returns the configured warning levels.
func (s *Service) levels() []float64 {
	if l := s.opts.Growth.Levels; len(l) > 0 {
		return l
	}
	return defaultLimitWarnLevels
}

// DiskUsage reports where the space under path went in a sandbox (a path
// on a mounted volume walks the volume), computed on the stopped or
// running tree under the containment rule (files.Root.DiskUsage). It is not
// file activity: asking where the space went does not keep a sandbox up.
func (s *Service) DiskUsage(ctx context.Context, tenant, id, path string, top int) (client.DiskUsage, error) {
	v, sb, err := s.fsFor(ctx, tenant, id, path, false, false)
	if err != nil {
		return client.DiskUsage{}, err
	}
	defer v.close()
	began := time.Now()
	u, err := v.root.DiskUsage(ctx, v.inner, files.UsageOptions{Top: top})
	if err != nil {
		return client.DiskUsage{}, fmt.Errorf("sandbox %s: %w", sb.Name, err)
	}
	out := diskUsageView(u, v.out, time.Since(began))
	if v.outerBase == "" {
		sp, _ := decodeSpec(sb)
		out.QuotaBytes = sp.Limits.DiskBytes
		out.UsedBytes, _ = s.pool.Usage(ctx, datasetName(sb.ID))
	} else if vol := s.mountedVolume(sb, v.outerBase); vol != "" {
		if rec, err := s.st.GetVolume(ctx, sb.TenantID, vol); err == nil {
			out.QuotaBytes = rec.SizeBytes
		}
		out.UsedBytes, _ = s.pool.Usage(ctx, volumeDataset(vol))
	}
	return out, nil
}

// mountedVolume returns the id of the volume mounted at path in sb.
func (s *Service) mountedVolume(sb store.Sandbox, path string) string {
	sp, err := decodeSpec(sb)
	if err != nil {
		return ""
	}
	for _, m := range sp.Volumes {
		if m.Path == path {
			return m.Volume
		}
	}
	return ""
}

// VolumeDiskUsage reports where the space under path went in a volume.
func (s *Service) VolumeDiskUsage(ctx context.Context, tenant, id, path string, top int) (client.DiskUsage, error) {
	vol, err := s.st.GetVolume(ctx, tenant, id)
	if err != nil {
		return client.DiskUsage{}, err
	}
	r, err := s.datasetRoot(volumeDataset(vol.ID), "")
	if err != nil {
		return client.DiskUsage{}, fmt.Errorf("volume %s: %w", vol.Name, err)
	}
	defer r.Close()
	began := time.Now()
	u, err := r.DiskUsage(ctx, path, files.UsageOptions{Top: top})
	if err != nil {
		return client.DiskUsage{}, fmt.Errorf("volume %s: %w", vol.Name, err)
	}
	out := diskUsageView(u, func(p string) string { return p }, time.Since(began))
	out.QuotaBytes = vol.SizeBytes
	out.UsedBytes, _ = s.pool.Usage(ctx, volumeDataset(vol.ID))
	return out, nil
}

// diskUsageView turns a walk's result into the API's, with paths as the
// caller named them (out maps a volume's inner path to its mount path).
func diskUsageView(u files.Usage, out func(string) string, took time.Duration) client.DiskUsage {
	conv := func(es []files.UsageEntry) []client.DiskUsageEntry {
		r := make([]client.DiskUsageEntry, 0, len(es))
		for _, e := range es {
			r = append(r, client.DiskUsageEntry{Path: out(e.Path), Type: string(e.Type), Bytes: e.Bytes, Files: e.Files})
		}
		return r
	}
	return client.DiskUsage{Path: out(u.Path), Bytes: u.Bytes, ApparentBytes: u.ApparentBytes, Files: u.Files, Dirs: u.Dirs,
		Children: conv(u.Children), LargestFiles: conv(u.LargestFiles), LargestDirs: conv(u.LargestDirs),
		Skipped: u.Skipped, ElapsedMS: took.Milliseconds()}
}

// limitSample is one use against one limit, as the check read it.
type limitSample struct {
	key     string
	tenant  string
	sandbox string // the sandbox the warning shows on
	w       client.LimitWarning
}

// CheckLimits reads every use against its limit and warns on a level
// crossed (see the comment at the top of growth.go).
func (s *Service) CheckLimits(ctx context.Context) {
	samples := s.limitSamples(ctx)
	now := s.now()
	levels := s.levels()
	seen := map[string]bool{}
	type warn struct {
		tenant, sandbox string
		w               client.LimitWarning
	}
	var fire []warn
	s.limits.mu.Lock()
	if s.limits.active == nil {
		s.limits.active = map[string]activeWarning{}
	}
	for _, smp := range samples {
		seen[smp.key] = true
		if smp.w.LimitBytes <= 0 {
			continue
		}
		f := float64(smp.w.UsedBytes) / float64(smp.w.LimitBytes)
		idx := -1
		for i, l := range levels {
			if f >= l {
				idx = i
			}
		}
		prev, had := s.limits.active[smp.key]
		switch {
		case idx >= 0 && (!had || idx > prev.level):
			smp.w.Percent = 100 * f
			smp.w.Level = 100 * levels[idx]
			smp.w.Since = now
			smp.w.Message = limitMessage(smp.w)
			s.limits.active[smp.key] = activeWarning{level: idx, tenant: smp.tenant, sandbox: smp.sandbox, w: smp.w}
			fire = append(fire, warn{smp.tenant, smp.sandbox, smp.w})
		case had && f < levels[prev.level]-limitHysteresis:
			if idx < 0 {
				delete(s.limits.active, smp.key)
				continue
			}
			prev.level = idx
			fallthrough
		case had:
			prev.w.UsedBytes, prev.w.LimitBytes, prev.w.Percent = smp.w.UsedBytes, smp.w.LimitBytes, 100*f
			prev.w.Message = limitMessage(prev.w)
			s.limits.active[smp.key] = prev
		}
	}
	for k := range s.limits.active {
		if !seen[k] {
			delete(s.limits.active, k) // its sandbox stopped, went away, or the limit was raised
		}
	}
	for id, c := range s.limits.large {
		if now.Sub(c.at) >= largeFileCacheTTL {
			delete(s.limits.large, id)
		}
	}
	s.limits.mu.Unlock()
	for _, f := range fire {
		s.log.Warn(f.w.Message, "resource", f.w.Resource, "subject", f.w.Subject, "tenant", f.tenant,
			"used", f.w.UsedBytes, "limit", f.w.LimitBytes)
		s.event(ctx, events.LimitWarning, f.tenant, f.sandbox, map[string]string{
			"resource": f.w.Resource, "subject": f.w.Subject, "path": f.w.Path,
			"used_bytes": fmt.Sprint(f.w.UsedBytes), "limit_bytes": fmt.Sprint(f.w.LimitBytes),
			"percent": fmt.Sprintf("%.1f", f.w.Percent), "level": fmt.Sprintf("%.0f", f.w.Level), "message": f.w.Message,
		})
	}
}

// limitMessage says a warning in a sentence.
func limitMessage(w client.LimitWarning) string {
	switch w.Resource {
	case client.LimitDisk:
		return fmt.Sprintf("%s is %.0f%% of its %s disk quota (%s used)", w.Path, w.Percent, pool.FormatBytes(w.LimitBytes), pool.FormatBytes(w.UsedBytes))
	case client.LimitVolume:
		where := "volume " + w.Subject
		if w.Path != "" {
			where = w.Path + " (volume " + w.Subject + ")"
		}
		return fmt.Sprintf("%s is %.0f%% of its %s size (%s used)", where, w.Percent, pool.FormatBytes(w.LimitBytes), pool.FormatBytes(w.UsedBytes))
	case client.LimitMemory:
		return fmt.Sprintf("memory is %.0f%% of its %s limit (%s in use); past it the kernel kills processes", w.Percent, pool.FormatBytes(w.LimitBytes), pool.FormatBytes(w.UsedBytes))
	}
	return fmt.Sprintf("the storage pool is %.0f%% full (%s of %s)", w.Percent, pool.FormatBytes(w.UsedBytes), pool.FormatBytes(w.LimitBytes))
}

// limitSamples reads every use the check watches. Disk and volume usage
// come from one pool pass (pool.Usages: one sync and one qgroup walk on
// btrfs), not a sync per dataset.
func (s *Service) limitSamples(ctx context.Context) []limitSample {
	var out []limitSample
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		s.log.Warn("limit check: list sandboxes", "err", err)
		return nil
	}
	list = s.owned(list)
	type diskLimit struct {
		sb    store.Sandbox
		limit int64
	}
	var disks []diskLimit
	var names []string
	for _, sb := range list {
		switch sb.State {
		case store.StateRunning, store.StatePaused, store.StateStopped:
		default:
			continue
		}
		sp, err := decodeSpec(sb)
		if err != nil {
			continue
		}
		if sp.Limits.DiskBytes > 0 {
			disks = append(disks, diskLimit{sb, sp.Limits.DiskBytes})
			names = append(names, datasetName(sb.ID))
		}
		if sb.State == store.StateRunning && sp.Limits.MemoryBytes > 0 {
			if st, err := s.rt.Stats(ctx, sb.ID); err == nil {
				out = append(out, limitSample{key: "memory/" + sb.ID, tenant: sb.TenantID, sandbox: sb.ID,
					w: client.LimitWarning{Resource: client.LimitMemory, Subject: sb.ID, UsedBytes: st.MemoryWorkingSetBytes, LimitBytes: sp.Limits.MemoryBytes}})
			}
		}
	}
	vols, err := s.st.ListVolumes(ctx, "", false)
	if err != nil {
		vols = nil
	}
	var sized []store.Volume
	for _, v := range vols {
		if v.DeletedAt != nil || v.SizeBytes <= 0 || !s.volumeHere(v) {
			continue
		}
		sized = append(sized, v)
		names = append(names, volumeDataset(v.ID))
	}
	used := pool.Usages(ctx, s.pool, names)
	for _, d := range disks {
		if u, ok := used[datasetName(d.sb.ID)]; ok {
			out = append(out, limitSample{key: "disk/" + d.sb.ID, tenant: d.sb.TenantID, sandbox: d.sb.ID,
				w: client.LimitWarning{Resource: client.LimitDisk, Subject: d.sb.ID, Path: "/", UsedBytes: u, LimitBytes: d.limit}})
		}
	}
	for _, v := range sized {
		if u, ok := used[volumeDataset(v.ID)]; ok {
			out = append(out, limitSample{key: "volume/" + v.ID, tenant: v.TenantID,
				w: client.LimitWarning{Resource: client.LimitVolume, Subject: v.ID, UsedBytes: u, LimitBytes: v.SizeBytes}})
		}
	}
	if c, err := s.pool.Capacity(ctx); err == nil && c.SizeBytes > 0 {
		out = append(out, limitSample{key: "pool/", tenant: store.DefaultTenant,
			w: client.LimitWarning{Resource: client.LimitPool, UsedBytes: c.UsedBytes, LimitBytes: c.SizeBytes}})
	}
	return out
}

// limitWarnings returns the warnings that show on sb: its own and those
// of the volumes it mounts (with their mount paths), most severe first.
func (s *Service) limitWarnings(sb store.Sandbox) []client.LimitWarning {
	sp, _ := decodeSpec(sb)
	s.limits.mu.Lock()
	defer s.limits.mu.Unlock()
	if len(s.limits.active) == 0 {
		return nil
	}
	var out []client.LimitWarning
	for _, k := range []string{"disk/" + sb.ID, "memory/" + sb.ID} {
		if a, ok := s.limits.active[k]; ok {
			out = append(out, a.w)
		}
	}
	for _, m := range sp.Volumes {
		if a, ok := s.limits.active["volume/"+m.Volume]; ok {
			w := a.w
			w.Path = m.Path
			w.Message = limitMessage(w)
			out = append(out, w)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Percent > out[j].Percent })
	return out
}

// orientWarnings returns sb's warnings for orient, a disk or volume
// warning with the largest directories under its path.
func (s *Service) orientWarnings(ctx context.Context, tenant string, sb store.Sandbox) []client.OrientWarning {
	var out []client.OrientWarning
	for _, w := range s.limitWarnings(sb) {
		ow := client.OrientWarning{LimitWarning: w}
		if w.Resource == client.LimitDisk || w.Resource == client.LimitVolume {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if u, err := s.DiskUsage(wctx, tenant, sb.ID, w.Path, 3); err == nil {
				ow.LargestDirs = u.LargestDirs
			}
			cancel()
		}
		out = append(out, ow)
	}
	return out
}

// largeStateFiles returns the files under the state directories of sb
// larger than the hint size, from a scan at most largeFileCacheTTL old.
func (s *Service) largeStateFiles(ctx context.Context, tenant string, sb store.Sandbox) []client.LargeFile {
	now := s.now()
	s.limits.mu.Lock()
	if c, ok := s.limits.large[sb.ID]; ok && now.Sub(c.at) < largeFileCacheTTL {
		s.limits.mu.Unlock()
		return c.files
	}
	s.limits.mu.Unlock()
	min := s.opts.Growth.LargeStateFileBytes
	if min <= 0 {
		min = DefaultLargeStateFileBytes
	}
	var found []client.LargeFile
	for _, dir := range stateDirs {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		u, err := s.DiskUsage(wctx, tenant, sb.ID, dir, 10)
		cancel()
		if err != nil {
			continue
		}
		for _, f := range u.LargestFiles {
			if f.Bytes >= min {
				found = append(found, client.LargeFile{Path: f.Path, Bytes: f.Bytes})
			}
		}
	}
	s.limits.mu.Lock()
	if s.limits.large == nil {
		s.limits.large = map[string]largeScan{}
	}
	s.limits.large[sb.ID] = largeScan{at: now, files: found}
	s.limits.mu.Unlock()
	return found
}

var _ api.DiskUsageBackend = (*Service)(nil)
