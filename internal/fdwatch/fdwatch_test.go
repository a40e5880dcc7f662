package fdwatch

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func pipe(t *testing.T) (r, w int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return p[0], p[1]
}

func newWatcher(t *testing.T) *Watcher {
	t.Helper()
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestWatchCallsOnEachReadinessUntilStopped: fn runs when the fd is
// readable, again when it is readable again, and never after stop returns.
func TestWatchCallsOnEachReadinessUntilStopped(t *testing.T) {
	w := newWatcher(t)
	r, wr := pipe(t)
	var calls atomic.Int32
	stop, err := w.Watch(r, func() time.Duration {
		calls.Add(1)
		var b [64]byte
		for {
			if n, _ := unix.Read(r, b[:]); n <= 0 {
				return 0
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(wr, []byte("a"))
	eventually(t, "the first call", func() bool { return calls.Load() == 1 })
	unix.Write(wr, []byte("b"))
	eventually(t, "the second call", func() bool { return calls.Load() == 2 })
	stop()
	stop() // idempotent
	unix.Write(wr, []byte("c"))
	time.Sleep(50 * time.Millisecond)
	if c := calls.Load(); c != 2 {
		t.Fatalf("%d calls after stop, want 2", c)
	}
	if w.Len() != 0 {
		t.Fatalf("%d watches left", w.Len())
	}
}

// TestOnceEndsTheWatchBeforeCalling: fn runs once, with the watch already
// gone, so it may close the fd.
func TestOnceEndsTheWatchBeforeCalling(t *testing.T) {
	w := newWatcher(t)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[1])
	var calls atomic.Int32
	var left atomic.Int32
	if _, err := w.Once(p[0], func() {
		calls.Add(1)
		left.Store(int32(len(w.watches))) // w.mu is held here
		unix.Close(p[0])
	}); err != nil {
		t.Fatal(err)
	}
	unix.Write(p[1], []byte("x"))
	eventually(t, "the call", func() bool { return calls.Load() == 1 })
	time.Sleep(20 * time.Millisecond)
	if calls.Load() != 1 || left.Load() != 0 {
		t.Fatalf("calls %d, watches during the call %d; want 1 and 0", calls.Load(), left.Load())
	}
}

// TestManyWatchesOneGoroutine: a thousand watches add no goroutine, and
// each fires for its own fd.
func TestManyWatchesOneGoroutine(t *testing.T) {
	w := newWatcher(t)
	before := runtime.NumGoroutine()
	const n = 1000
	fired := make([]atomic.Bool, n)
	writers := make([]int, n)
	for i := range n {
		r, wr := pipe(t)
		writers[i] = wr
		if _, err := w.Once(r, func() { fired[i].Store(true) }); err != nil {
			t.Fatal(err)
		}
	}
	if g := runtime.NumGoroutine(); g > before+2 {
		t.Fatalf("%d goroutines with %d watches, %d before", g, n, before)
	}
	for i := 0; i < n; i += 7 {
		unix.Write(writers[i], []byte("x"))
	}
	eventually(t, "every written fd's call", func() bool {
		for i := 0; i < n; i += 7 {
			if !fired[i].Load() {
				return false
			}
		}
		return true
	})
	for i := range n {
		if i%7 != 0 && fired[i].Load() {
			t.Fatalf("watch %d fired without data", i)
		}
	}
	if got, want := w.Len(), n-(n+6)/7; got != want {
		t.Fatalf("%d watches left, want %d", got, want)
	}
}

// TestCloseEndsEverything: after Close no function runs and no watch can
// be added.
func TestCloseEndsEverything(t *testing.T) {
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	r, wr := pipe(t)
	var calls atomic.Int32
	if _, err := w.Watch(r, func() time.Duration { calls.Add(1); return 0 }); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	unix.Write(wr, []byte("x"))
	time.Sleep(20 * time.Millisecond)
	if calls.Load() != 0 {
		t.Fatal("a function ran after Close")
	}
	if _, err := w.Watch(r, func() time.Duration { return 0 }); err != ErrClosed {
		t.Fatalf("Watch after Close: %v, want ErrClosed", err)
	}
}

// TestWatchRestsWhenAskedAndResumes: a watch whose fd stays readable and
// whose function asks for a rest is not called again until the rest is
// over (no spin), then is; a watch stopped during its rest never is.
func TestWatchRestsWhenAskedAndResumes(t *testing.T) {
	w := newWatcher(t)
	r, wr := pipe(t)
	unix.Write(wr, []byte("x")) // never read: r stays readable
	const rest = 100 * time.Millisecond
	var mu sync.Mutex
	var at []time.Time // when each call ran
	if _, err := w.Watch(r, func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		return rest
	}); err != nil {
		t.Fatal(err)
	}
	calls := func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), at...)
	}
	eventually(t, "three calls, two rests apart", func() bool { return len(calls()) >= 3 })
	// Measured between the calls themselves, not around them: a late
	// look at the count on a loaded machine can see the next call.
	// (Timers never fire early: the gap is the rest at least.)
	cs := calls()
	for i := 1; i < len(cs); i++ {
		if gap := cs[i].Sub(cs[i-1]); gap < rest-time.Millisecond {
			t.Fatalf("call %d came %v after the one before, within a rest of %v: the watch spins", i, gap, rest)
		}
	}

	// A rest far longer than it takes to see the first call and stop.
	const longRest = time.Second
	r2, wr2 := pipe(t)
	unix.Write(wr2, []byte("x"))
	var calls2 atomic.Int32
	var first atomic.Int64 // the first call's time, in Unix nanoseconds
	stop, err := w.Watch(r2, func() time.Duration {
		if calls2.Add(1) == 1 {
			first.Store(time.Now().UnixNano())
		}
		return longRest
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the call", func() bool { return calls2.Load() >= 1 })
	stop()
	restEnds := time.Unix(0, first.Load()).Add(longRest)
	if c := calls2.Load(); c != 1 || time.Now().After(restEnds) {
		t.Fatalf("stopped after %d calls, %v after the first: not during its rest of %v",
			c, time.Since(time.Unix(0, first.Load())), longRest)
	}
	// Past the end of the rest, with room for the call that would follow.
	time.Sleep(time.Until(restEnds) + longRest/2)
	if c := calls2.Load(); c != 1 {
		t.Fatalf("a watch stopped during its rest was called %d times", c)
	}
}
