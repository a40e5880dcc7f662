package sandbox

import (
	"context"
	"errors"
	"fmt"
	"math"
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
// Bases. A btrfs snapshot adds a reference to every tree block its
// source shares, and the commit's cost grows with the number of
// snapshots of one source, not with the number of subvolumes
// (bench/btrfssnap: 2.5 ms of CPU for the first snapshot of a template,
// 7.5 ms for the 1,000th; flat at 3-3.5 ms when they are taken of a few
// sources). So once a template has had firstBase spares, its spares are
// snapshots of its base: an unshared clone of the template
// (pool.CloneOptions.Unshared: its own metadata, the template's data
// reflinked), read-only, made by the loop and replaced after it has
// served rebaseAfter(the copy's time) spares, the count that balances
// the copy against the growth. A template whose base took long to copy
// (a large image) gets its next base only when it has had as many
// spares of its own as a base would serve: until then snapshots of the
// template cost less than a copy. A template whose base failed gets its
// spares from itself for spareRetry. A base is the dataset
// sandboxes/spare-base-<random>; it goes when it is replaced, with its
// template's spares (templateChanging, expiry) and when the loop stops,
// and Reconcile deletes those of an earlier daemon as it deletes spares.
// The snapshots of a deleted base keep their data; under simple quotas
// the base's metadata they still share stays charged to its qgroup,
// inside the pool's group, until the last of them is gone (btrfs.go,
// Quota modes).
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

// sparePrefix starts the id of every spare dataset, bases included.
const sparePrefix = "spare-"

// spareBasePrefix starts the id of every base of spares.
const spareBasePrefix = sparePrefix + "base-"

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
	// snapGrowth is how much each snapshot of a source adds to the cost
	// of the next one (bench/btrfssnap: 5 ms of CPU over 1,000).
	snapGrowth = 5 * time.Microsecond
	// baseMinServe and baseMaxServe bound rebaseAfter; baseMinServe is
	// also how many spares a template has of its own before its first
	// base.
	baseMinServe, baseMaxServe = 16, 4096
)

// rebaseAfter is how many spares a base whose copy took copy serves
// before the loop replaces it: the k that minimizes a spare's share of
// the copy and of the growth, copy/k + snapGrowth*k/2, which is
// sqrt(2*copy/snapGrowth) (89 for a 20 ms copy, 200 for 100 ms), within
// [baseMinServe, baseMaxServe].
func rebaseAfter(copy time.Duration) int {
	k := int(math.Sqrt(2 * float64(copy) / float64(snapGrowth)))
	return min(max(k, baseMinServe), baseMaxServe)
}

// spareSet is the service's spare clones, by template dataset name.
type spareSet struct {
	mu sync.Mutex
	// n is how many spares each used template keeps; 0 while RunSpares
	// is not running (nothing is made, taken or noted).
	n        int
	ready    map[string][]spareEntry  // oldest first
	gen      map[string]uint64        // moves when a change of the template begins and ends
	changing map[string]int           // changes of the template in progress
	used     map[string]time.Time     // the last create from the template
	failed   map[string]time.Time     // the last failed refill
	bases    map[string]spareBase     // the template's current base
	copied   map[string]time.Duration // how long the template's last base took to copy
	own      map[string]int           // spares made of the template itself since it last changed
	noBase   map[string]time.Time     // no base for the template until then: its last one failed
	wake     chan struct{}
	// firstBase is how many spares of its own a template has before its
	// first base (New sets baseMinServe; tests change it).
	firstBase int

	made, taken, missed, discarded, basesMade atomic.Int64
}

// spareBase is a base of spares (see Bases): an unshared clone of its
// template made at generation gen, which has served served spares of
// the limit it may.
type spareBase struct {
	name          string // dataset name: sandboxes/spare-base-...
	gen           uint64
	served, limit int
}

// init makes p's maps; p.mu is held.
func (p *spareSet) init() {
	if p.ready == nil {
		p.ready, p.gen, p.changing = map[string][]spareEntry{}, map[string]uint64{}, map[string]int{}
		p.used, p.failed = map[string]time.Time{}, map[string]time.Time{}
		p.bases, p.noBase = map[string]spareBase{}, map[string]time.Time{}
		p.copied, p.own = map[string]time.Duration{}, map[string]int{}
	}
}

// spareEntry is one spare, made at generation gen of its template.
type spareEntry struct {
	name string // dataset name: sandboxes/spare-...
	gen  uint64
}

// spareStats is what the spares did (for tests).
type spareStats struct {
	Ready, Bases                              int
	Made, Taken, Missed, Discarded, BasesMade int64
}

func (s *Service) spareStats() spareStats {
	p := &s.spares
	p.mu.Lock()
	n := 0
	for _, l := range p.ready {
		n += len(l)
	}
	b := len(p.bases)
	p.mu.Unlock()
	return spareStats{Ready: n, Bases: b, Made: p.made.Load(), Taken: p.taken.Load(), Missed: p.missed.Load(), Discarded: p.discarded.Load(), BasesMade: p.basesMade.Load()}
}

func newSpareID() string { return sparePrefix + strings.TrimPrefix(newID(), "sb-") }

func newSpareBaseID() string { return spareBasePrefix + strings.TrimPrefix(newID(), "sb-") }

// isSpare reports whether id (in the sandboxes kind) names a spare or a
// base of spares.
func isSpare(id string) bool { return strings.HasPrefix(id, sparePrefix) }

// isSpareBase reports whether id (in the sandboxes kind) names a base of
// spares.
func isSpareBase(id string) bool { return strings.HasPrefix(id, spareBasePrefix) }

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
			for _, m := range []map[string]time.Time{p.used, p.failed, p.noBase} {
				for k := range m {
					all = append(all, p.forget(k)...)
				}
			}
			for k := range p.ready {
				all = append(all, p.forget(k)...)
			}
			for k := range p.bases {
				all = append(all, p.forget(k)...)
			}
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
// has its n or ctx ends. A spare is a snapshot of its template's base,
// which is made or replaced first when it is missing, stale or used up
// (see Bases). A failed clone is logged and its template waits
// spareRetry; one whose dataset is gone is forgotten.
func (s *Service) fillSpares(ctx context.Context) {
	p := &s.spares
	for ctx.Err() == nil {
		now := time.Now()
		var src, from string
		var gen uint64
		var rebase bool
		p.mu.Lock()
		for k := range p.used {
			if len(p.ready[k]) < p.n && p.changing[k] == 0 && now.Sub(p.failed[k]) >= spareRetry {
				src, gen, from = k, p.gen[k], k
				b, based := p.bases[k]
				switch {
				case based && b.gen == gen && b.served < b.limit:
					from = b.name
				case now.Before(p.noBase[k]):
				case based, p.own[k] >= p.baseDue(k):
					rebase = true
				}
				break
			}
		}
		p.mu.Unlock()
		if src == "" {
			return
		}
		if rebase {
			s.makeSpareBase(ctx, src, gen)
			continue
		}
		name := pool.KindSandbox + "/" + newSpareID()
		t0 := time.Now()
		err := s.pool.Clone(ctx, from, name, pool.CloneOptions{})
		dur := time.Since(t0)
		p.mu.Lock()
		kept := false
		b, based := p.bases[src]
		based = based && b.name == from
		switch {
		case errors.Is(err, errs.ErrNotFound) && from != src:
			// The base went (its template is changing): the next round
			// sees the change.
			if based {
				delete(p.bases, src)
			}
		case errors.Is(err, errs.ErrNotFound):
			delete(p.used, src) // the template is gone
		case err != nil:
			p.failed[src] = now
		case p.gen[src] == gen && p.changing[src] == 0 && len(p.ready[src]) < p.n:
			p.ready[src] = append(p.ready[src], spareEntry{name: name, gen: gen})
			if based {
				b.served++
				p.bases[src] = b
			} else if from == src {
				p.own[src]++
			}
			kept = true
		}
		p.mu.Unlock()
		switch {
		case err != nil && !errors.Is(err, errs.ErrNotFound) && ctx.Err() == nil:
			s.log.Error("make a spare clone; creates from the template clone it themselves meanwhile", "template", src, "from", from, "err", err)
		case err == nil && !kept:
			// The template changed (or the loop stopped) during the clone.
			s.discardSpares(context.WithoutCancel(ctx), []spareEntry{{name: name}})
		case kept:
			p.made.Add(1)
			s.log.Debug("spare clone made", "template", src, "from", from, "spare", name, "dur", dur)
		}
	}
}

// baseDue is how many spares of its own the template ds has before it
// gets a base: firstBase, or, once a base of it was copied, as many as a
// base copied in that time would serve (see Bases); p.mu is held.
func (p *spareSet) baseDue(ds string) int {
	if c, ok := p.copied[ds]; ok {
		return rebaseAfter(c)
	}
	return p.firstBase
}

// makeSpareBase makes a new base for the template src at generation gen
// and puts it in place of the old one, which it deletes. A template whose
// base fails gets its spares from itself (noBase) for spareRetry.
func (s *Service) makeSpareBase(ctx context.Context, src string, gen uint64) {
	p := &s.spares
	name := pool.KindSandbox + "/" + newSpareBaseID()
	t0 := time.Now()
	err := s.pool.Clone(ctx, src, name, pool.CloneOptions{Unshared: true, ReadOnly: true})
	dur := time.Since(t0)
	var drop []spareEntry
	made := false
	p.mu.Lock()
	if old, ok := p.bases[src]; ok {
		delete(p.bases, src)
		drop = append(drop, spareEntry{name: old.name})
	}
	switch {
	case errors.Is(err, errs.ErrNotFound):
		delete(p.used, src) // the template is gone
	case err != nil:
		p.noBase[src] = time.Now().Add(spareRetry)
	case p.gen[src] != gen || p.changing[src] != 0 || p.n == 0:
		drop = append(drop, spareEntry{name: name}) // the template changed during the copy
	default:
		delete(p.noBase, src)
		p.bases[src] = spareBase{name: name, gen: gen, limit: rebaseAfter(dur)}
		p.copied[src] = dur
		p.own[src] = 0
		made = true
	}
	p.mu.Unlock()
	switch {
	case err != nil && !errors.Is(err, errs.ErrNotFound) && ctx.Err() == nil:
		s.log.Warn("make a base for spare clones; they are cloned from the template meanwhile", "template", src, "err", err)
	case made:
		p.basesMade.Add(1)
		s.log.Debug("base of spare clones made", "template", src, "base", name, "dur", dur, "serves", rebaseAfter(dur))
	}
	s.discardSpares(context.WithoutCancel(ctx), drop)
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
			old = append(old, p.forget(k)...)
		}
	}
	p.mu.Unlock()
	s.discardSpares(ctx, old)
}

// forget drops everything p holds for the template ds but its generation
// and changes in progress, and returns its spares and base for
// discardSpares; p.mu is held.
func (p *spareSet) forget(ds string) []spareEntry {
	out := p.ready[ds]
	if b, ok := p.bases[ds]; ok {
		out = append(out, spareEntry{name: b.name})
	}
	for _, m := range []map[string]time.Time{p.used, p.failed, p.noBase} {
		delete(m, ds)
	}
	delete(p.ready, ds)
	delete(p.bases, ds)
	delete(p.copied, ds)
	delete(p.own, ds)
	return out
}

// discardSpares deletes spares no one may take any more.
func (s *Service) discardSpares(ctx context.Context, l []spareEntry) {
	for _, e := range l {
		if !isSpareBase(strings.TrimPrefix(e.name, pool.KindSandbox+"/")) {
			s.spares.discarded.Add(1)
		}
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
	stale := p.forget(ds)
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
	for _, b := range p.bases {
		held[b.name] = true
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
