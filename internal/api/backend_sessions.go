package api

import (
	"context"

	"github.com/stead-dev/stead/client"
)

// SessionBackend serves the session log: per sandbox, threads → runs →
// events (model calls, tool intents and results, errors, approvals,
// checkpoints, compactions, notes). NewHandler registers the
// /v1/sandboxes/{id}/threads routes only when its Backend also implements
// this interface. As with Backend, every method gets the caller's tenant
// (in p for writes) and treats another tenant's sandbox, and the threads
// and runs of another sandbox, as absent (errs.ErrNotFound, exactly as ids
// that never existed: the agent token relies on it, see scope.go); sandbox
// may be an id or a name, thread an id or a name, run an id.
type SessionBackend interface {
	// CreateThread creates a thread; a taken name is errs.ErrConflict.
	CreateThread(ctx context.Context, p Principal, sandbox string, req client.CreateThreadRequest) (client.Thread, error)
	// ListThreads lists the sandbox's threads, oldest first.
	ListThreads(ctx context.Context, tenant, sandbox string) ([]client.Thread, error)
	// SetThreadRetention replaces a thread's retention.
	SetThreadRetention(ctx context.Context, p Principal, sandbox, thread string, r client.Retention) (client.Thread, error)
	// PruneThread applies the thread's retention now.
	PruneThread(ctx context.Context, p Principal, sandbox, thread string) (client.PruneResult, error)
	// StartRun starts a new run of a thread.
	StartRun(ctx context.Context, p Principal, sandbox, thread string) (client.Run, error)
	// ListRuns lists a thread's runs, oldest first.
	ListRuns(ctx context.Context, tenant, sandbox, thread string) ([]client.Run, error)
	// EndRun ends a running run (errs.ErrConflict if it has ended).
	EndRun(ctx context.Context, p Principal, sandbox, run string, req client.EndRunRequest) (client.Run, error)
	// AppendRunEvents appends a batch to a running run in one durable
	// transaction, all or nothing, and returns the stored events in request
	// order. Invalid events are errs.ErrInvalid; a closed run or an
	// idempotency key reused for a different event is errs.ErrConflict.
	AppendRunEvents(ctx context.Context, p Principal, sandbox, run string, evs []client.AppendEvent) ([]client.Event, error)
	// ListRunEvents returns up to limit (0: a default) events with seq >
	// after.
	ListRunEvents(ctx context.Context, tenant, sandbox, run string, after int64, limit int) (client.EventPage, error)
	// WatchRun checks that the run exists and returns a function whose
	// channel is closed at the next append to, or end of, the run (call it
	// before reading, then wait on the channel). The channel may also close
	// spuriously; a follower must re-read.
	WatchRun(ctx context.Context, tenant, sandbox, run string) (func() <-chan struct{}, error)
	// ResumeRun returns the run's last safe point and in-doubt tool
	// intents.
	ResumeRun(ctx context.Context, tenant, sandbox, run string) (client.RunResume, error)
}
