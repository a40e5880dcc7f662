package daemon

import (
	"fmt"
	"testing"

	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/repo"
)

// TestDrillPoolFitsTheSandboxQuotaAndData: the fresh btrfs pool of a drill
// can hold the restored sandbox's disk quota (a larger one is refused) and
// its data with room to spare, without being much larger than needed.
func TestDrillPoolFitsTheSandboxQuotaAndData(t *testing.T) {
	for _, tc := range []struct{ disk, data int64 }{
		{0, 0}, {5 << 30, 1 << 20}, {10 << 30, 91 << 20}, {20 << 30, 0}, {40 << 30, 30 << 30}, {1 << 30, 8 << 30},
	} {
		m := &repo.Manifest{Labels: map[string]string{"spec": fmt.Sprintf(`{"limits":{"disk_bytes":%d}}`, tc.disk)}, Stats: repo.Stats{DataBytes: tc.data}}
		size := drillPoolGiB(m) << 30
		usable := size - pool.DefaultReserve(size)
		if usable < tc.disk || usable < tc.data+tc.data/4 {
			t.Errorf("disk %d, data %d: a %d GiB pool has %d usable", tc.disk, tc.data, size>>30, usable)
		}
		if need := max(tc.disk, tc.data+tc.data/4); size > need*2+3<<30 {
			t.Errorf("disk %d, data %d: a %d GiB pool is oversized", tc.disk, tc.data, size>>30)
		}
	}
}
