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

// BenchmarkIdleCheckReads measures what the idle check reads of every
// running sandbox's network, with 100 and then 200 attached (a test
// subnet is a /24): one iteration is a sweep over all of them, through
// Status (the refusal counters: a listing of a set that holds every
// sandbox, so a sweep is O(sandboxes²)) and through Traffic (the link's
// counters alone: O(sandboxes)).
func BenchmarkIdleCheckReads(b *testing.B) {
	e := newEnvWith(b, nil)
	var ids []string
	b.Cleanup(func() {
		for _, id := range ids {
			e.m.Detach(e.ctx, id)
		}
	})
	for _, n := range []int{100, 200} {
		for i := len(ids); i < n; i++ {
			id := fmt.Sprintf("idle-%d", i)
			if _, err := e.m.Attach(e.ctx, network.Attachment{ID: id, Policy: policy.Default()}); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, id)
		}
		b.Run(fmt.Sprintf("Status/%d", n), func(b *testing.B) {
			for b.Loop() {
				for _, id := range ids {
					if _, err := e.m.Status(e.ctx, id); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("Traffic/%d", n), func(b *testing.B) {
			for b.Loop() {
				for _, id := range ids {
					if _, _, err := e.m.Traffic(e.ctx, id); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
