package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/store"
)

// Disk admission. Every sandbox and every volume is promised its disk quota
// (Limits.DiskBytes, Volume.SizeBytes). A promise is refused when
//   - it is larger than the pool's usable size (size less the reserve):
//     it could never be kept (400);
//   - the promises of all live sandboxes and volumes would exceed
//     Options.PoolOvercommit times the usable size (409);
//   - the pool is full now (409): a new sandbox could not write a byte.
//
// Live means: not soft-deleted (an undelete promises again) and, for a
// sandbox, not archived (its root is in the repository; the start that
// hydrates it promises again). The pool enforces what it can on top: a
// btrfs pool bounds all datasets together at the usable size, so a full
// pool is EDQUOT for the agents' writes while the reserve keeps the
// daemon's own writes, stops and starts working.
//
// The check and the record that makes a promise are not one transaction:
// an admitted promise is held in memory (pending) until its record is
// stored, and what was released while the store was being read is added
// to what it read, so two concurrent creates cannot both take the last
// room. (One daemon owns its pool; when nodes share a store, the count
// will have to be of this node's sandboxes.)

// DefaultPoolOvercommit is the default of Options.PoolOvercommit.
const DefaultPoolOvercommit = 2.0

// Fill levels at which CheckPoolFill warns.
var fillWarnLevels = []float64{0.85, 0.95, 1}

type diskAdmission struct {
	mu      sync.Mutex
	pending int64
	// released counts every byte ever released (never decreases). A
	// promise is released once its record is stored, so a scan of the
	// store sees every promise released before the scan began; one
	// released since may be missing from it and is added to it (maybe
	// twice: the bound errs on the safe side). Promises not yet released
	// are in pending.
	released int64
	// The last scan: what it found, and released when it began. Every
	// promise is made through admitDisk, so a scan of any age plus what
	// was released since plus pending is never below the truth (deletes it
	// has not seen only make it stricter): creates in a burst reuse it,
	// and a refusal is only made on a fresh one.
	scanAt       time.Time
	scanSbs      int64
	scanVols     int64
	scanReleased int64
	// level is the highest warn level the fill has crossed (an index
	// into fillWarnLevels, -1 for none); guarded by mu.
	level int
}

// overcommit returns the configured ratio.
func (s *Service) overcommit() float64 {
	if r := s.opts.PoolOvercommit; r > 0 && !math.IsInf(r, 0) {
		return r
	}
	return DefaultPoolOvercommit
}

// committedDisk returns the disk promised to live sandboxes and volumes.
func (s *Service) committedDisk(ctx context.Context) (sandboxes, volumes int64, err error) {
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return 0, 0, fmt.Errorf("list sandboxes: %w", err)
	}
	list = s.owned(list) // the pool is this node's: other nodes' sandboxes promise nothing here
	for _, sb := range list {
		if sb.State == store.StateArchived || sb.State == store.StateDeleted {
			continue
		}
		var sp struct {
			Limits struct {
				DiskBytes int64 `json:"disk_bytes"`
			} `json:"limits"`
		}
		if err := json.Unmarshal(sb.Spec, &sp); err == nil {
			sandboxes = addSat(sandboxes, sp.Limits.DiskBytes)
		}
	}
	vols, err := s.st.ListVolumes(ctx, "", false)
	if err != nil {
		return 0, 0, fmt.Errorf("list volumes: %w", err)
	}
	for _, v := range vols {
		if v.State != "deleted" && s.volumeHere(v) {
			volumes = addSat(volumes, v.SizeBytes)
		}
	}
	return sandboxes, volumes, nil
}

// addSat adds two non-negative sizes, saturating instead of overflowing.
func addSat(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + max(b, 0)
}

// checkDiskSize refuses a disk size that no pool of this size could keep:
// not positive, or larger than the usable size. what names the thing
// ("disk quota of sandbox agent-1", "size of volume data").
func checkDiskSize(c pool.Capacity, what string, bytes int64) error {
	if bytes <= 0 {
		return fmt.Errorf("%s %d bytes: it must be positive: %w", what, bytes, errs.ErrInvalid)
	}
	if u := c.Usable(); bytes > u {
		return fmt.Errorf("%s (%s) is larger than the storage pool: %s usable (%s, less a %s reserve kept for the daemon); ask for less, or give the pool more room (stead serve --pool-size for a new pool image): %w",
			what, pool.FormatBytes(bytes), pool.FormatBytes(u), pool.FormatBytes(c.SizeBytes), pool.FormatBytes(c.ReserveBytes), errs.ErrInvalid)
	}
	return nil
}

// admitDisk promises more bytes of disk for what, whose size (one
// sandbox's quota, one volume's size) is size, or says clearly why it
// cannot. The promise is held until release is called, which the caller
// does once the record that carries it is stored (or has failed).
func (s *Service) admitDisk(ctx context.Context, what string, size, more int64) (release func(), err error) {
	c, err := s.pool.Capacity(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkDiskSize(c, what, size); err != nil {
		return nil, err
	}
	bytes := max(more, 0)
	if c.Full() {
		return nil, fmt.Errorf("%s: the storage pool is full (%s); free room first (delete files in sandboxes, purge deleted sandboxes and volumes, delete snapshots): %w",
			what, fillSummary(c), errs.ErrConflict)
	}
	ratio := s.overcommit()
	bound := int64(math.Min(ratio*float64(c.Usable()), math.MaxInt64/2))
	for fresh := false; ; fresh = true {
		sbs, vols, released0, cached, err := s.scanPromises(ctx, fresh)
		if err != nil {
			return nil, fmt.Errorf("%s: count the disk promised: %w", what, err)
		}
		s.disk.mu.Lock()
		committed := addSat(addSat(addSat(sbs, vols), s.disk.pending), s.disk.released-released0)
		if addSat(committed, bytes) <= bound {
			s.disk.pending += bytes
			s.disk.mu.Unlock()
			return sync.OnceFunc(func() {
				s.disk.mu.Lock()
				s.disk.pending -= bytes
				s.disk.released += bytes
				s.disk.mu.Unlock()
			}), nil
		}
		s.disk.mu.Unlock()
		if cached {
			continue // refuse on a fresh count only
		}
		asked := pool.FormatBytes(bytes)
		if bytes != size {
			asked = "+" + asked
		}
		return nil, fmt.Errorf("%s (%s) would over-commit the storage pool: %s is promised already (%s to sandboxes, %s to volumes), and at most %g x %s usable = %s may be (stead serve --pool-overcommit %g); delete or purge sandboxes and volumes, resize them smaller, or raise --pool-overcommit: %w",
			what, asked, pool.FormatBytes(committed), pool.FormatBytes(sbs), pool.FormatBytes(vols),
			ratio, pool.FormatBytes(c.Usable()), pool.FormatBytes(bound), ratio, errs.ErrConflict)
	}
}

// promiseScanTTL is how long a scan of the store serves admissions.
const promiseScanTTL = 2 * time.Second

// scanPromises returns what live sandboxes and volumes promise and the
// released count when that was read: the last scan if it is recent and
// fresh is false (cached true), else a new one. The store is read
// outside the lock: it costs milliseconds with hundreds of sandboxes.
func (s *Service) scanPromises(ctx context.Context, fresh bool) (sbs, vols, released0 int64, cached bool, err error) {
	s.disk.mu.Lock()
	if !fresh && !s.disk.scanAt.IsZero() && time.Since(s.disk.scanAt) < promiseScanTTL {
		defer s.disk.mu.Unlock()
		return s.disk.scanSbs, s.disk.scanVols, s.disk.scanReleased, true, nil
	}
	released0 = s.disk.released
	s.disk.mu.Unlock()
	start := time.Now()
	if sbs, vols, err = s.committedDisk(ctx); err != nil {
		return 0, 0, 0, false, err
	}
	s.disk.mu.Lock()
	if start.After(s.disk.scanAt) {
		s.disk.scanAt, s.disk.scanSbs, s.disk.scanVols, s.disk.scanReleased = start, sbs, vols, released0
	}
	s.disk.mu.Unlock()
	return sbs, vols, released0, false, nil
}

func fillSummary(c pool.Capacity) string {
	if c.LimitBytes > 0 && c.DatasetsBytes >= 0 {
		return fmt.Sprintf("%s of %s used by sandboxes, volumes, snapshots and templates, %.0f%%", pool.FormatBytes(c.DatasetsBytes), pool.FormatBytes(c.LimitBytes), 100*c.Fill())
	}
	return fmt.Sprintf("%s of %s used on its file system, %.0f%%", pool.FormatBytes(c.UsedBytes), pool.FormatBytes(c.SizeBytes), 100*c.Fill())
}

// poolCapacity describes the pool for Info; nil when it cannot be read.
func (s *Service) poolCapacity(ctx context.Context) *client.PoolCapacity {
	c, err := s.pool.Capacity(ctx)
	if err != nil {
		s.log.Warn("read the pool's capacity", "err", err)
		return nil
	}
	sbs, vols, err := s.committedDisk(ctx)
	if err != nil {
		s.log.Warn("count the disk promised", "err", err)
	}
	ratio := s.overcommit()
	return &client.PoolCapacity{
		SizeBytes: c.SizeBytes, UsedBytes: c.UsedBytes, ReserveBytes: c.ReserveBytes, UsableBytes: c.Usable(),
		DatasetsBytes: c.DatasetsBytes, Enforced: c.LimitBytes > 0,
		CommittedBytes: addSat(sbs, vols), CommitLimitBytes: int64(math.Min(ratio*float64(c.Usable()), math.MaxInt64/2)),
		Overcommit: ratio, Fill: c.Fill(),
	}
}

// CheckPoolFill logs a warning when the pool's fill level crosses 85%,
// 95% and 100%, once per crossing, and a note when it falls back below
// 80%. RunPolicies calls it every interval.
func (s *Service) CheckPoolFill(ctx context.Context) {
	c, err := s.pool.Capacity(ctx)
	if err != nil {
		s.log.Warn("read the pool's capacity", "err", err)
		return
	}
	f := c.Fill()
	level := -1
	for i, l := range fillWarnLevels {
		if f >= l {
			level = i
		}
	}
	s.disk.mu.Lock()
	prev := s.disk.level
	switch {
	case level > prev:
		s.disk.level = level
	case level < 0 && prev >= 0 && f < fillWarnLevels[0]-0.05:
		s.disk.level = -1
	}
	s.disk.mu.Unlock()
	attrs := []any{"fill", fmt.Sprintf("%.1f%%", 100*f), "size", c.SizeBytes, "used", c.UsedBytes,
		"reserve", c.ReserveBytes, "datasets", c.DatasetsBytes, "limit", c.LimitBytes}
	switch {
	case level > prev && level == len(fillWarnLevels)-1:
		s.log.Warn("the storage pool is full: writes in sandboxes and volumes fail with EDQUOT (disk quota exceeded); creates are refused; delete files, purge deleted sandboxes and volumes, or delete snapshots", attrs...)
	case level > prev:
		s.log.Warn(fmt.Sprintf("the storage pool is %.0f%% full", 100*fillWarnLevels[level]), attrs...)
	case level < 0 && prev >= 0 && f < fillWarnLevels[0]-0.05:
		s.log.Info("the storage pool has room again", attrs...)
	}
}
