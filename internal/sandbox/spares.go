package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/store"
)

// Spare clones (issue 17). On a pool whose clones are O(1) (btrfs), the
// clone of a template into a new sandbox's root is a subvolume snapshot,
// and a snapshot commits a file system transaction whose cost grows with
// the number of subvolumes in the pool (1.5–2 ms with 10, 10–11 ms with
// 1,000). So the service keeps, for each template a create used in the
// last spareKeep, a few clones made ahead (RunSpares, off every request's
// path), and a plain create from that template takes one by renaming it
// into place (RenameUnsynced: no commit, ~0.1 ms at any pool size). With
// none ready, a create clones as before. Only a create from a template
// takes a spare: a fork, a restore or a lost copy's recovery clones its
// own source, and the warm pool (warm.go) clones in the background
// anyway.
//
// Refills. One loop (RunSpares) makes the spares, one clone at a time
// (never two of one template at once), and deletes them when it stops.
// A create wakes it once its own writes are done: its rename and quota
// join the transaction a refill's snapshot commits and would wait for
// that commit, and the commit's writes slow the fsync of its record in
// the store (measured at 1,000 sandboxes: a create without a start took
// 2.1 ms when the refill began after its quota, 1.0 ms when it began
// after the create, 2.9 ms with no spares). So a create that starts the
// sandbox wakes it as the start begins (tens of milliseconds with little
// in the pool), one that does not when it returns. A failed refill is
// logged and tried again a minute later; a template no create used for
// spareKeep loses its spares.
//
// A spare is the dataset sandboxes/spare-<random>: no record names it, it
// is no sandbox's, and nothing that lists the pool's sandbox datasets
// takes it for a sandbox root, a lost copy (lost-) or a rollback
// temporary (rb-). It is never metered, never counted in a disk promise
// (those are the records' quotas) and has no quota of its own: a create
// sets the sandbox's after the rename, on the same subvolume.
//
// Staleness. A spare is a clone of its template dataset as it was when
// the spare was made; it must never outlive a change of that dataset.
// Every code path that deletes or replaces a template dataset (build,
// import, delete, a tenant's deletion, the start-up cleanup) brackets the
// change with templateChanging: at the start the template's generation
// moves and its ready spares are discarded, while the change runs no
// spare of it is made or handed out, and at the end the generation moves
// again. A refill reads the generation before its clone and keeps the
// clone only if the generation is the same after it, so a clone that may
// have seen the old dataset, a half-built new one or none is discarded.
// The state is in memory only: a daemon never reuses the spares of
// another (Reconcile deletes every spare it finds), as it cannot know
// what happened to the templates while none ran.
//
// Crash ordering. A spare is made by one Clone (atomic: whole or absent).
// A take first writes the sandbox's record, state creating, with the
// spare's name in its spec (durable in the store), then renames the spare
// to sandboxes/<id> without waiting for the rename to be durable, sets
// the quota and goes on as a create does. So:
//   - a daemon killed mid-refill leaves at most a whole spare, which the
//     next daemon's Reconcile deletes;
//   - a daemon killed mid-take leaves a creating record, which Reconcile
//     purges with its root (the renamed spare, if the rename happened),
//     and the spare, if it did not, which Reconcile deletes: never a
//     sandbox with a half-made root;
//   - a crash of the machine may undo a rename the next commit had not
//     made durable yet (the refill that follows a take commits within
//     milliseconds; btrfs's periodic commit within 30 s): the record says
//     the sandbox exists, its root is missing and the spare is back.
//     Reconcile redoes the rename and the quota (redoSpareTake) before it
//     deletes leftover spares: the sandbox gets the root it was created
//     with, as everything written in it since was lost with that commit.

// sparePrefix starts the id of every spare dataset.
const sparePrefix = "spare-"

// DefaultSpares is how many spares of each recently used template the
// daemon keeps by default.
const DefaultSpares = 2

const (
	// spareKeep is how long after its last create a template keeps its
	// spares.
	spareKeep = time.Hour
	// spareRetry is how long a template whose refill failed waits for the
	// next try.
	spareRetry = time.Minute
	// spareTick is how often the refill loop looks at the spares without
	// being woken.
	spareTick = time.Minute
)

// spareSet is the service's spare clones, by template dataset name.
type spareSet struct {
	mu sync.Mutex
	// n is how many spares each used template keeps; 0 while RunSpares
	// is not running (nothing is made, taken or noted).
	n        int
	ready    map[string][]spareEntry // oldest first
	gen      map[string]uint64       // moves when a change of the template begins and ends
	changing map[string]int          // changes of the template in progress
	used     map[string]time.Time    // the last create from the template
	failed   map[string]time.Time    // the last failed refill
	wake     chan struct{}

	made, taken, missed, discarded atomic.Int64
}

// init makes p's maps; p.mu is held.
func (p *spareSet) init() {
	if p.ready == nil {
		p.ready, p.gen, p.changing = map[string][]spareEntry{}, map[string]uint64{}, map[string]int{}
		p.used, p.failed = map[string]time.Time{}, map[string]time.Time{}
	}
}

// spareEntry is one spare, made at generation gen of its template.
type spareEntry struct {
	name string // dataset name: sandboxes/spare-...
	gen  uint64
}

// spareStats is what the spares did (for tests).
type spareStats struct {
	Ready                          int
	Made, Taken, Missed, Discarded int64
}

func (s *Service) spareStats() spareStats {
	p := &s.spares
	p.mu.Lock()
	n := 0
	for _, l := range p.ready {
		n += len(l)
	}
	p.mu.Unlock()
	return spareStats{Ready: n, Made: p.made.Load(), Taken: p.taken.Load(), Missed: p.missed.Load(), Discarded: p.discarded.Load()}
}

func newSpareID() string { return sparePrefix + strings.TrimPrefix(newID(), "sb-") }

// isSpare reports whether id (in the sandboxes kind) names a spare.
func isSpare(id string) bool { return strings.HasPrefix(id, sparePrefix) }

// RunSpares keeps n spare clones of each template that a create used in
// the last hour, until ctx ends; then it deletes the spares it holds. It
// does nothing when n <= 0, when the pool's clones are not O(1) (the dir
// pool: a spare would cost a copy of the template) or while another
// RunSpares runs. Call it after Reconcile, which deletes the spares of an
// earlier daemon.
func (s *Service) RunSpares(ctx context.Context, n int) {
	if n <= 0 || !s.pool.Caps().ConstantTimeClone {
		return
	}
	p := &s.spares
	p.mu.Lock()
	if p.wake != nil {
		p.mu.Unlock()
		s.log.Error("spare clones are kept already; a second RunSpares does nothing")
		return
	}
	p.init()
	p.n = n
	p.wake = make(chan struct{}, 1)
	wake := p.wake
	p.mu.Unlock()
	s.log.Info("spare clones on", "per_template", n)
	tick := time.NewTicker(spareTick)
	defer tick.Stop()
	for {
		s.expireSpares(ctx)
		s.fillSpares(ctx)
		select {
		case <-ctx.Done():
			p.mu.Lock()
			p.n, p.wake = 0, nil
			var all []spareEntry
			for k, l := range p.ready {
				all = append(all, l...)
				delete(p.ready, k)
			}
			clear(p.used)
			p.mu.Unlock()
			s.discardSpares(context.WithoutCancel(ctx), all)
			return
		case <-wake:
		case <-tick.C:
		}
	}
}

// wakeSpares makes the refill loop look at the spares now.
func (s *Service) wakeSpares() {
	p := &s.spares
	p.mu.Lock()
	wake := p.wake
	p.mu.Unlock()
	if wake == nil {
		return
	}
	select {
	case wake <- struct{}{}:
	default:
	}
}

// fillSpares makes spares, one clone at a time, until every used template
// has its n or ctx ends. A failed clone is logged and its template waits
// spareRetry; one whose dataset is gone is forgotten.
func (s *Service) fillSpares(ctx context.Context) {
	p := &s.spares
	for ctx.Err() == nil {
		now := time.Now()
		var src string
		var gen uint64
		p.mu.Lock()
		for k := range p.used {
			if len(p.ready[k]) < p.n && p.changing[k] == 0 && now.Sub(p.failed[k]) >= spareRetry {
				src, gen = k, p.gen[k]
				break
			}
		}
		p.mu.Unlock()
		if src == "" {
			return
		}
		name := pool.KindSandbox + "/" + newSpareID()
		t0 := time.Now()
		err := s.pool.Clone(ctx, src, name, pool.CloneOptions{})
		dur := time.Since(t0)
		p.mu.Lock()
		kept := false
		switch {
		case errors.Is(err, errs.ErrNotFound):
			delete(p.used, src) // the template is gone
		case err != nil:
			p.failed[src] = now
		case p.gen[src] == gen && p.changing[src] == 0 && len(p.ready[src]) < p.n:
			p.ready[src] = append(p.ready[src], spareEntry{name: name, gen: gen})
			kept = true
		}
		p.mu.Unlock()
		switch {
		case err != nil && !errors.Is(err, errs.ErrNotFound) && ctx.Err() == nil:
			s.log.Error("make a spare clone; creates from the template clone it themselves meanwhile", "template", src, "err", err)
		case err == nil && !kept:
			// The template changed (or the loop stopped) during the clone.
			s.discardSpares(context.WithoutCancel(ctx), []spareEntry{{name: name}})
		case kept:
			p.made.Add(1)
			s.log.Debug("spare clone made", "template", src, "spare", name, "dur", dur)
		}
	}
}

// expireSpares discards the spares of templates no create used in the
// last spareKeep.
func (s *Service) expireSpares(ctx context.Context) {
	p := &s.spares
	now := time.Now()
	var old []spareEntry
	p.mu.Lock()
	for k, at := range p.used {
		if now.Sub(at) >= spareKeep {
			old = append(old, p.ready[k]...)
			delete(p.ready, k)
			delete(p.used, k)
			delete(p.failed, k)
		}
	}
	p.mu.Unlock()
	s.discardSpares(ctx, old)
}

// discardSpares deletes spares no one may take any more.
func (s *Service) discardSpares(ctx context.Context, l []spareEntry) {
	for _, e := range l {
		s.spares.discarded.Add(1)
		if err := s.pool.Delete(ctx, e.name); err != nil && !errors.Is(err, errs.ErrNotFound) {
			s.log.Warn("delete a spare clone (the next start deletes it)", "spare", e.name, "err", err)
		}
	}
}

// templateChanging marks the template dataset ds as being deleted or
// replaced, until the returned function is called: its spares are
// discarded now, and none is made or handed out until then (see
// Staleness above). Every change of a template dataset runs inside one.
func (s *Service) templateChanging(ctx context.Context, ds string) (done func()) {
	p := &s.spares
	p.mu.Lock()
	p.init()
	p.gen[ds]++
	p.changing[ds]++
	stale := p.ready[ds]
	delete(p.ready, ds)
	delete(p.used, ds)
	delete(p.failed, ds)
	p.mu.Unlock()
	s.discardSpares(context.WithoutCancel(ctx), stale)
	return sync.OnceFunc(func() {
		p.mu.Lock()
		p.gen[ds]++
		if p.changing[ds]--; p.changing[ds] == 0 {
			delete(p.changing, ds)
		}
		p.mu.Unlock()
	})
}

// spareTake is what a create from a template got from the spares: a
// spare to rename into place, or none (name ""), when it clones.
type spareTake struct {
	s      *Service
	src    string // the template dataset
	name   string // the spare's dataset name; "" when none was ready
	gen    uint64
	filled bool // the spare was renamed, or tried
	woke   bool // the refill loop was woken
}

// takeSpare notes a create from the template dataset src and hands it a
// spare if one is ready. The caller passes the take's root to
// materializeWith and calls done after it.
func (s *Service) takeSpare(src string) *spareTake {
	t := &spareTake{s: s, src: src}
	p := &s.spares
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return t
	}
	p.used[src] = time.Now()
	if l := p.ready[src]; len(l) > 0 && p.changing[src] == 0 && l[0].gen == p.gen[src] {
		t.name, t.gen = l[0].name, l[0].gen
		p.ready[src] = l[1:]
		p.taken.Add(1)
	} else {
		p.missed.Add(1)
	}
	return t
}

// root is how the create makes the sandbox's root: the spare renamed
// into place, else a clone of the template. The refill loop is woken
// once the create's own writes are out of its way (see Refills): as the
// sandbox's start begins (a start writes little in the pool, and to the
// store only at its end, tens of milliseconds later), or by done for a
// create that does not start it.
func (t *spareTake) root() rootSource {
	s := t.s
	starting := func() {
		t.woke = true
		s.wakeSpares()
	}
	clone := rootSource{how: "clone", starting: starting, fill: func(ctx context.Context, dst string) error {
		return s.pool.Clone(ctx, t.src, dst, pool.CloneOptions{})
	}}
	if t.name == "" {
		return clone
	}
	return rootSource{how: "spare", spare: t.name, starting: starting, fill: func(ctx context.Context, dst string) error {
		t.filled = true
		err := s.pool.RenameUnsynced(ctx, t.name, dst)
		if err == nil {
			return nil
		}
		// Gone under it (a start-up cleanup of another service on the
		// pool, a hand): the create clones. The record names the spare;
		// Reconcile's redo needs both the spare present and the root
		// missing, which a clone rules out.
		s.log.Warn("take a spare clone; cloning the template instead", "spare", t.name, "template", t.src, "err", err)
		s.discardSpares(ctx, []spareEntry{{name: t.name}})
		return clone.fill(ctx, dst)
	}}
}

// done ends the take: a spare the create did not get to (it failed
// before its root was made) goes back, or is discarded if its template
// changed meanwhile; and the refill loop is woken if the root did not
// (a template noted as used may need spares).
func (t *spareTake) done(ctx context.Context) {
	s := t.s
	if t.name != "" && !t.filled {
		p := &s.spares
		p.mu.Lock()
		back := p.n > 0 && p.gen[t.src] == t.gen && p.changing[t.src] == 0
		if back {
			p.ready[t.src] = append([]spareEntry{{name: t.name, gen: t.gen}}, p.ready[t.src]...)
			p.taken.Add(-1)
		}
		p.mu.Unlock()
		if !back {
			s.discardSpares(context.WithoutCancel(ctx), []spareEntry{{name: t.name}})
		}
	}
	if !t.woke {
		s.wakeSpares()
	}
}

// redoSpareTake redoes, at start-up, the take of a spare that a crash of
// the machine undid (see Crash ordering above): sb's record names the
// spare its root was renamed from, the root is missing and the spare is
// there. The rename is made durable this time, and the quota set again
// (it was lost with the same commit).
func (s *Service) redoSpareTake(ctx context.Context, sb store.Sandbox) error {
	sp, err := decodeSpec(sb)
	if err != nil {
		return err
	}
	if id, ok := strings.CutPrefix(sp.Spare, pool.KindSandbox+"/"); !ok || !isSpare(id) {
		return nil
	}
	if ok, err := s.pool.Exists(ctx, datasetName(sb.ID)); err != nil || ok {
		return err
	}
	if ok, err := s.pool.Exists(ctx, sp.Spare); err != nil || !ok {
		return err
	}
	if err := s.pool.Rename(ctx, sp.Spare, datasetName(sb.ID)); err != nil {
		return fmt.Errorf("redo the take of spare %s: %w", sp.Spare, err)
	}
	if s.pool.Caps().Quota && sp.Limits.DiskBytes > 0 {
		if err := s.pool.SetQuota(ctx, datasetName(sb.ID), sp.Limits.DiskBytes); err != nil {
			return fmt.Errorf("redo the take of spare %s: %w", sp.Spare, err)
		}
	}
	s.log.Warn("a crash of the machine undid the rename of the sandbox's root from a spare clone; redone", "sandbox", sb.ID, "spare", sp.Spare)
	return nil
}

// cleanSpareLeftovers deletes, at start-up, the spares in the pool that
// this service does not hold, except one a record (not a half-made create,
// not a deleted sandbox) names while that sandbox's root is missing: its redo failed or was not
// this node's to make (an unclaimed sandbox), and the spare may be the
// only copy of that root.
func (s *Service) cleanSpareLeftovers(ctx context.Context, all []store.Sandbox) error {
	ids, err := s.pool.List(ctx, pool.KindSandbox)
	if err != nil {
		return err
	}
	held := map[string]bool{}
	p := &s.spares
	p.mu.Lock()
	for _, l := range p.ready {
		for _, e := range l {
			held[e.name] = true
		}
	}
	p.mu.Unlock()
	present := map[string]bool{}
	for _, id := range ids {
		if isSpare(id) {
			present[pool.KindSandbox+"/"+id] = true
		}
	}
	for _, sb := range all {
		if sb.State == store.StateCreating || sb.DeletedAt != nil {
			continue
		}
		sp, err := decodeSpec(sb)
		if err != nil || !present[sp.Spare] {
			continue
		}
		if ok, err := s.pool.Exists(ctx, datasetName(sb.ID)); err != nil || !ok {
			held[sp.Spare] = true
			s.log.Warn("kept a spare clone: it is the root of a sandbox whose own is missing", "sandbox", sb.ID, "spare", sp.Spare)
		}
	}
	n := 0
	for _, id := range ids {
		name := pool.KindSandbox + "/" + id
		if !isSpare(id) || held[name] {
			continue
		}
		if err := s.pool.Delete(ctx, name); err != nil && !errors.Is(err, errs.ErrNotFound) {
			s.log.Error("delete a spare clone of an earlier run", "spare", name, "err", err)
			continue
		}
		n++
	}
	if n > 0 {
		s.log.Info("deleted the spare clones of an earlier run", "spares", n)
	}
	return nil
}
