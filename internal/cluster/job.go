package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/stead-dev/stead/internal/errs"
)

// BudgetJobKey is the owner-lease key of the cluster's budget checks: the
// node holding it checks every budget, the others stand by.
const BudgetJobKey = "job/budget"

// RepoMeterJobKey is the owner-lease key of the sampling of each tenant's
// bytes in the shared repository: one node counts them for the meter, or
// every node would bill them once each.
const RepoMeterJobKey = "job/meter-repository"

// Job is a cluster-wide job that one node runs at a time (the budget
// checks): the node holding the job's lease, a row of the owner lease
// table renewed with the node's other leases (Leases.Run), runs it. The
// others stand by and take the lease once it lapsed, so when the running
// node dies another takes over within the lease's TTL (plus one of its
// own ticks).
type Job struct {
	leases *Leases
	key    string
	log    *slog.Logger

	mu      sync.Mutex
	leading bool
}

// NewJob returns the job key as node l.Node() sees it.
func NewJob(l *Leases, key string, log *slog.Logger) *Job {
	if log == nil {
		log = slog.Default()
	}
	return &Job{leases: l, key: key, log: log}
}

// Lead reports whether this node runs the job now, taking the job's lease
// when no other node holds it in force. fenced is ctx carrying the lease's
// store fence, for the job's own store writes (they commit only while this
// node holds the lease). A store that cannot be reached is not leading.
func (j *Job) Lead(ctx context.Context) (fenced context.Context, ok bool) {
	if f, err := j.leases.Fence(ctx, j.key); err == nil {
		return f, j.note(true, nil)
	}
	if _, err := j.leases.Acquire(ctx, j.key); err != nil {
		if !errors.Is(err, errs.ErrConflict) {
			return ctx, j.note(false, err)
		}
		return ctx, j.note(false, nil)
	}
	f, err := j.leases.Fence(ctx, j.key)
	return f, j.note(err == nil, err)
}

// note logs a change of leadership (and a failure to tell) and returns
// leading.
func (j *Job) note(leading bool, err error) bool {
	j.mu.Lock()
	changed := j.leading != leading
	j.leading = leading
	j.mu.Unlock()
	switch {
	case err != nil:
		j.log.Warn("cluster job: cannot take its lease", "job", j.key, "node", j.leases.Node(), "err", err)
	case changed && leading:
		j.log.Info("cluster job: this node runs it", "job", j.key, "node", j.leases.Node())
	case changed:
		j.log.Info("cluster job: another node runs it", "job", j.key, "node", j.leases.Node())
	}
	return leading
}
