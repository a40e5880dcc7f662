package sandbox

import (
	"sync"
	"testing"
)

// TestIDLocksExcludeAndLeaveNothingBehind: one id's holders exclude each
// other, other ids do not wait, and once nobody holds or waits for an id
// its mutex is gone (a sandbox nobody works on costs no memory).
func TestIDLocksExcludeAndLeaveNothingBehind(t *testing.T) {
	var l idLocks
	counter := map[string]*int{"a": new(int), "b": new(int), "c": new(int), "d": new(int)} // read-only map
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := []string{"a", "b", "c", "d"}[i%4]
			unlock := l.lock(id)
			p := counter[id]
			v := *p // a data race (go test -race) without exclusion
			*p = v + 1
			unlock()
			unlock() // a second call does nothing
		}()
	}
	wg.Wait()
	for _, id := range []string{"a", "b", "c", "d"} {
		if *counter[id] != 100 {
			t.Errorf("%s: %d increments, want 100", id, *counter[id])
		}
	}
	if n := l.held(); n != 0 {
		t.Fatalf("%d mutexes left after every holder unlocked, want 0", n)
	}
	unlockA := l.lock("a")
	done := make(chan struct{})
	go func() {
		u := l.lock("b") // another id: not blocked by a's holder
		u()
		close(done)
	}()
	<-done
	if n := l.held(); n != 1 {
		t.Fatalf("%d mutexes while one id is held, want 1", n)
	}
	unlockA()
}
