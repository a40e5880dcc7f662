package guest

import (
	"os"
	"testing"
)

// TestReserveThreadsLeavesIdleThreads: after reserveThreads(n) the process
// has at least n more OS threads than before, kept by the runtime for
// later use (init makes them while its sandbox still has pids to spare).
func TestReserveThreadsLeavesIdleThreads(t *testing.T) {
	count := func() int {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := count()
	reserveThreads(before + 8)
	if after := count(); after < before+8 {
		t.Fatalf("%d threads after reserving %d (%d before)", after, before+8, before)
	}
}
