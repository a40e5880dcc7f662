// Package faulty wraps a BlobStore to inject faults in tests: corrupted or
// truncated reads, errors on the N-th call or for a key prefix, latency, and
// a Put that fails before or after the object is written (what a caller sees
// when the process or the network dies around the write).
//
// It is a decorator, not a test mode inside an implementation: wrap the real
// store (local, or s3 against a test server), add Rules, run the code under
// test, and assert on what it did. Choices that need randomness (which bit to
// flip) come from a generator seeded with Seed, so a failing test replays
// exactly.
//
//	fs := faulty.New(store, 1)
//	fs.Add(faulty.Rule{Op: faulty.OpGet, Prefix: "data/", Fault: faulty.FlipBit})
//	fs.Add(faulty.Rule{Op: faulty.OpPut, Nth: 3, Fault: faulty.FailAfter})
package faulty

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/errs"
)

// ErrInjected is the error a rule returns when it sets no Err of its own.
var ErrInjected = errors.New("injected fault")

// Op names a BlobStore method.
type Op string

// The BlobStore methods a rule can target.
const (
	OpPut      Op = "put"
	OpGet      Op = "get"
	OpGetRange Op = "getrange"
	OpStat     Op = "stat"
	OpList     Op = "list"
	OpDelete   Op = "delete"
)

// Fault is what a matching rule does.
type Fault int

const (
	// Fail returns the rule's error without calling the inner store
	// (for Put: the object is not written).
	Fail Fault = iota + 1
	// FailAfter calls the inner store and then returns the rule's error
	// whatever it answered (for Put: the object is written but the caller
	// believes it failed, as after a crash or a lost response).
	FailAfter
	// FlipBit inverts one bit, chosen by the seeded generator, of the data
	// Get or GetRange returns. Ignored by other operations and empty data.
	FlipBit
	// Truncate drops the last Cut bytes (at least 1, at most all) of the
	// data Get or GetRange returns, with no error. Ignored by other
	// operations.
	Truncate
	// Delay sleeps for the rule's Delay before calling the inner store,
	// returning the context's error if it ends first.
	Delay
)

// String names the fault for messages.
func (f Fault) String() string {
	switch f {
	case Fail:
		return "fail"
	case FailAfter:
		return "fail-after"
	case FlipBit:
		return "flip-bit"
	case Truncate:
		return "truncate"
	case Delay:
		return "delay"
	}
	return fmt.Sprintf("fault(%d)", int(f))
}

// Rule selects calls and says what fault they get.
type Rule struct {
	// Op selects the method; empty matches every method.
	Op Op
	// Prefix selects keys that start with it; empty matches every key. For
	// List it is matched against the listed prefix.
	Prefix string
	// Nth, if positive, fires the rule only on the Nth call it matches
	// (counting from 1); zero fires it on every matching call.
	Nth int
	// Fault is what happens.
	Fault Fault
	// Err is returned by Fail and FailAfter; nil means ErrInjected.
	Err error
	// Delay is the sleep of a Delay fault.
	Delay time.Duration
	// Cut is how many bytes Truncate drops; zero means 1.
	Cut int
}

type rule struct {
	Rule
	matched int
}

// Store is a BlobStore that passes every call to Inner, applying the faults
// of the rules that match it. Rules apply in the order they were added; a
// Fail stops the call there. The zero value with Inner set injects nothing;
// Store is safe for concurrent use.
type Store struct {
	// Inner is the store that holds the objects.
	Inner blobstore.BlobStore
	// Seed seeds the generator that chooses which bit FlipBit flips. Set it
	// before the first call.
	Seed uint64

	mu    sync.Mutex
	rules []*rule
	rng   *rand.Rand
	calls map[Op]int
}

var _ blobstore.BlobStore = (*Store)(nil)

// New wraps inner with no rules and the given seed.
func New(inner blobstore.BlobStore, seed uint64) *Store {
	return &Store{Inner: inner, Seed: seed}
}

// Add appends a rule.
func (s *Store) Add(r Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append(s.rules, &rule{Rule: r})
}

// Clear removes every rule; call counts are kept.
func (s *Store) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = nil
}

// Calls returns how many times op has been called (whatever the outcome).
func (s *Store) Calls(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// plan is what the matching rules ask of one call.
type plan struct {
	delay     time.Duration
	failErr   error // Fail: return before calling Inner
	afterErr  error // FailAfter: return after calling Inner
	flipBits  []uint64
	cut       int
	truncated bool
}

// match counts the call and collects the faults of the rules it matches.
func (s *Store) match(op Op, key string) plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[Op]int{}
	}
	s.calls[op]++
	var p plan
	for _, r := range s.rules {
		if r.Op != "" && r.Op != op || !strings.HasPrefix(key, r.Prefix) {
			continue
		}
		r.matched++
		if r.Nth > 0 && r.matched != r.Nth {
			continue
		}
		err := r.Err
		if err == nil {
			err = ErrInjected
		}
		switch r.Fault {
		case Delay:
			p.delay += r.Delay
		case Fail:
			if p.failErr == nil {
				p.failErr = err
			}
		case FailAfter:
			if p.afterErr == nil {
				p.afterErr = err
			}
		case FlipBit:
			if s.rng == nil {
				s.rng = rand.New(rand.NewPCG(s.Seed, s.Seed^0x5eed))
			}
			p.flipBits = append(p.flipBits, s.rng.Uint64())
		case Truncate:
			p.truncated = true
			p.cut += max(r.Cut, 1)
		}
	}
	return p
}

// before runs the faults that come before the inner call.
func (p plan) before(ctx context.Context, op Op, key string) error {
	if p.delay > 0 {
		t := time.NewTimer(p.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("%s %s: %w", op, key, ctx.Err())
		}
	}
	if p.failErr != nil {
		return fmt.Errorf("%s %s: %w", op, key, p.failErr)
	}
	return nil
}

// after runs the faults that come after the inner call.
func (p plan) after(op Op, key string, err error) error {
	if p.afterErr != nil {
		return fmt.Errorf("%s %s: %w", op, key, p.afterErr)
	}
	return err
}

// corrupt applies FlipBit and Truncate to data the caller is about to get.
func (p plan) corrupt(data []byte) []byte {
	if len(data) > 0 {
		for _, r := range p.flipBits {
			bit := r % uint64(len(data)*8)
			data[bit/8] ^= 1 << (bit % 8)
		}
	}
	if p.truncated {
		data = data[:len(data)-min(p.cut, len(data))]
	}
	return data
}

// Location returns the inner store's location.
func (s *Store) Location() string { return s.Inner.Location() }

// Put passes the call on unless a rule fails it before or after.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	p := s.match(OpPut, key)
	if err := p.before(ctx, OpPut, key); err != nil {
		return err
	}
	return p.after(OpPut, key, s.Inner.Put(ctx, key, data))
}

// Spool passes the call on to Inner's Spool (an error wrapping
// errs.ErrUnsupported if Inner has none). The rules see the spool's Commit
// as a Put of the committed key (OpPut): Fail aborts the spool without
// storing anything, FailAfter commits it and then fails.
func (s *Store) Spool(ctx context.Context, dir string) (blobstore.Spool, error) {
	in, ok := s.Inner.(blobstore.Spooler)
	if !ok {
		return nil, fmt.Errorf("spool %s: %s: %w", dir, s.Inner.Location(), errs.ErrUnsupported)
	}
	sp, err := in.Spool(ctx, dir)
	if err != nil {
		return nil, err
	}
	return &spool{Spool: sp, s: s}, nil
}

var _ blobstore.Spooler = (*Store)(nil)

// spool applies the Put rules to an inner spool's Commit.
type spool struct {
	blobstore.Spool
	s *Store
}

func (sp *spool) Commit(ctx context.Context, key string) error {
	p := sp.s.match(OpPut, key)
	if err := p.before(ctx, OpPut, key); err != nil {
		sp.Abort()
		return err
	}
	return p.after(OpPut, key, sp.Spool.Commit(ctx, key))
}

// Get passes the call on and may corrupt what it returns.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	p := s.match(OpGet, key)
	if err := p.before(ctx, OpGet, key); err != nil {
		return nil, err
	}
	data, err := s.Inner.Get(ctx, key)
	if err == nil {
		data = p.corrupt(data)
	}
	if err := p.after(OpGet, key, err); err != nil {
		return nil, err
	}
	return data, nil
}

// GetRange passes the call on and may corrupt what it returns.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error) {
	p := s.match(OpGetRange, key)
	if err := p.before(ctx, OpGetRange, key); err != nil {
		return nil, err
	}
	data, err := s.Inner.GetRange(ctx, key, offset, length)
	if err == nil {
		data = p.corrupt(data)
	}
	if err := p.after(OpGetRange, key, err); err != nil {
		return nil, err
	}
	return data, nil
}

// Stat passes the call on unless a rule fails it.
func (s *Store) Stat(ctx context.Context, key string) (blobstore.Info, error) {
	p := s.match(OpStat, key)
	if err := p.before(ctx, OpStat, key); err != nil {
		return blobstore.Info{}, err
	}
	info, err := s.Inner.Stat(ctx, key)
	if err := p.after(OpStat, key, err); err != nil {
		return blobstore.Info{}, err
	}
	return info, nil
}

// List passes the call on unless a rule fails it; rules match the prefix.
func (s *Store) List(ctx context.Context, prefix string) ([]blobstore.Info, error) {
	p := s.match(OpList, prefix)
	if err := p.before(ctx, OpList, prefix); err != nil {
		return nil, err
	}
	list, err := s.Inner.List(ctx, prefix)
	if err := p.after(OpList, prefix, err); err != nil {
		return nil, err
	}
	return list, nil
}

// Delete passes the call on unless a rule fails it before or after.
func (s *Store) Delete(ctx context.Context, key string) error {
	p := s.match(OpDelete, key)
	if err := p.before(ctx, OpDelete, key); err != nil {
		return err
	}
	return p.after(OpDelete, key, s.Inner.Delete(ctx, key))
}
