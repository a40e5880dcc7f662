package daemon

import (
	"fmt"
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeRangeCloexec is close_range(2)'s CLOSE_RANGE_CLOEXEC (Linux 5.11).
const closeRangeCloexec = 1 << 2

// keepInheritedFromChildren marks every descriptor from 3 up close-on-exec:
// those the daemon inherited (a flock(1) wrapper's lock, a shell's
// redirections) must not reach the processes it starts. lxcfs outlives the
// daemon, so it would hold them for good (a benchmark's lock, never
// released). The daemon's own descriptors are close-on-exec already (Go
// opens them so); this changes nothing else about them.
func keepInheritedFromChildren() error {
	if err := unix.CloseRange(3, math.MaxUint32, closeRangeCloexec); err == nil {
		return nil
	}
	// An older kernel: one at a time.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		unix.CloseOnExec(fd) // the directory's own descriptor is gone by now: harmless
	}
	return nil
}
