package network_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/network"
	"github.com/stead-dev/stead/internal/network/policy"
)

// BenchmarkAttach measures what networking adds to a sandbox's create:
// b.N sandboxes are attached one after the other, then detached (not
// timed: a detach's deferred kernel work would slow the next attach).
func BenchmarkAttach(b *testing.B) {
	e := newEnvWith(b, nil)
	var ids []string
	var detach time.Duration
	b.Cleanup(func() {
		start := time.Now()
		for _, id := range ids {
			if err := e.m.Detach(e.ctx, id); err != nil {
				b.Error(err)
			}
		}
		detach = time.Since(start)
		b.Logf("detach: %v each", detach/time.Duration(max(len(ids), 1)))
	})
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("bench-%d", i)
		ids = append(ids, id)
		if _, err := e.m.Attach(e.ctx, network.Attachment{ID: id, Policy: policy.Default()}); err != nil {
			b.Fatal(err)
		}
	}
}
