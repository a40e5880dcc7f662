package resolver

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiter is a token bucket per source address. Buckets idle for longer
// than idleAfter are dropped, so the map holds only recent sources.
type limiter struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[netip.Addr]*bucket
	swept   time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

const idleAfter = time.Minute

func newLimiter(limit rate.Limit, burst int) *limiter {
	return &limiter{limit: limit, burst: burst, buckets: map[netip.Addr]*bucket{}}
}

// allow takes a token from src's bucket and reports whether there was one.
func (l *limiter) allow(src netip.Addr) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > idleAfter {
		for a, b := range l.buckets {
			if now.Sub(b.seen) > idleAfter {
				delete(l.buckets, a)
			}
		}
		l.swept = now
	}
	b := l.buckets[src]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[src] = b
	}
	b.seen = now
	return b.lim.AllowN(now, 1)
}
