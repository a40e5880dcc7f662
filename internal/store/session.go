package store

import (
	"context"
	"time"
)

// EventType is the kind of a session-log event.
type EventType string

// The event types of the session log.
const (
	EventModelCall         EventType = "model_call"
	EventToolIntent        EventType = "tool_intent"
	EventToolResult        EventType = "tool_result"
	EventError             EventType = "error"
	EventApprovalRequested EventType = "approval_requested"
	EventApprovalGranted   EventType = "approval_granted"
	EventApprovalDenied    EventType = "approval_denied"
	EventCheckpoint        EventType = "checkpoint"
	EventCompaction        EventType = "compaction"
	EventNote              EventType = "note"
)

// EventTypes lists every valid EventType.
var EventTypes = []EventType{
	EventModelCall, EventToolIntent, EventToolResult, EventError,
	EventApprovalRequested, EventApprovalGranted, EventApprovalDenied,
	EventCheckpoint, EventCompaction, EventNote,
}

// Valid reports whether t is one of EventTypes.
func (t EventType) Valid() bool {
	for _, v := range EventTypes {
		if t == v {
			return true
		}
	}
	return false
}

// RunStatus is the state of a run.
type RunStatus string

// Run states. A run is RunRunning from StartRun until EndRun gives it one
// of the other states; an ended run takes no more events.
const (
	RunRunning     RunStatus = "running"
	RunCompleted   RunStatus = "completed"
	RunFailed      RunStatus = "failed"
	RunCanceled    RunStatus = "canceled"
	RunInterrupted RunStatus = "interrupted"
)

// Ended reports whether s is a valid final state (not RunRunning).
func (s RunStatus) Ended() bool {
	switch s {
	case RunCompleted, RunFailed, RunCanceled, RunInterrupted:
		return true
	}
	return false
}

// Limits of the session log, the same for every store implementation.
const (
	// MaxEventPayloadBytes is the largest event payload.
	MaxEventPayloadBytes = 256 << 10
	// MaxEventBatch is the most events one AppendEvents call takes.
	MaxEventBatch = 1000
	// MaxEventList is the most events one ListEvents call returns.
	MaxEventList = 1000
	// MaxKeepLast caps a thread's Retention.KeepLast.
	MaxKeepLast = 1 << 30
)

// Retention is a thread's event retention: an event of one of the thread's
// runs is deleted (on append, or by PruneThread) only when no set rule
// keeps it, as restic's keep-* rules combine. Zero values are unset; with
// no rule set everything is kept.
type Retention struct {
	// KeepLast keeps the newest KeepLast events of each run.
	KeepLast int `json:"keep_last,omitempty"`
	// KeepWithin keeps events younger than this.
	KeepWithin time.Duration `json:"keep_within,omitempty"`
}

// IsZero reports whether no rule is set.
func (r Retention) IsZero() bool { return r.KeepLast == 0 && r.KeepWithin == 0 }

// Thread is a conversation of an agent in a sandbox: a sequence of runs.
type Thread struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenant_id"`
	SandboxID string    `json:"sandbox_id"`
	Name      string    `json:"name"`
	Retention Retention `json:"retention"`
	CreatedAt time.Time `json:"created_at"`
}

// Run is one execution of a thread: the unit events are appended to.
type Run struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenant_id"`
	SandboxID string    `json:"sandbox_id"`
	ThreadID  string    `json:"thread_id"`
	Status    RunStatus `json:"status"`
	// LastSeq is the seq of the newest event ever appended (0: none). It is
	// not lowered when retention deletes events.
	LastSeq   int64      `json:"last_seq"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
}

// RunKey names a run of a sandbox of a tenant. SandboxID is the sandbox's
// id, never its name.
type RunKey struct {
	TenantID  string
	SandboxID string
	RunID     string
}

// EventWrite is one event to append.
type EventWrite struct {
	Type EventType
	// ModelSession optionally tags the event with the model session (a
	// caller-chosen id, unique within the run) it belongs to.
	ModelSession string
	// IdempotencyKey, when not "", makes the append idempotent: appending
	// an event with a key the run already holds stores nothing and returns
	// the stored event.
	IdempotencyKey string
	// Intent is, for a tool_result, the seq of the tool_intent it answers;
	// it must be 0 for every other type.
	Intent int64
	// Payload is the event's JSON (validated by the caller); empty is
	// stored as JSON null.
	Payload []byte
	// Time is the event's time; zero means now.
	Time time.Time
}

// Event is a stored session-log event.
type Event struct {
	RunID string `json:"run_id"`
	// Seq numbers a run's events 1, 2, 3 ... in append order.
	Seq            int64     `json:"seq"`
	Time           time.Time `json:"time"`
	Type           EventType `json:"type"`
	ModelSession   string    `json:"model_session,omitempty"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	Intent         int64     `json:"intent,omitempty"`
	Payload        []byte    `json:"payload"`
}

// ModelSession is a model session of a run: recorded the first time an
// event is tagged with its id.
type ModelSession struct {
	RunID     string    `json:"run_id"`
	ID        string    `json:"id"`
	FirstSeq  int64     `json:"first_seq"`
	CreatedAt time.Time `json:"created_at"`
}

// RunResume is what a harness resuming a run must know.
type RunResume struct {
	Run Run `json:"run"`
	// SafePoint is the run's last checkpoint event, else its last event;
	// nil when the run holds no event.
	SafePoint *Event `json:"safe_point,omitempty"`
	// InDoubt lists, by seq, every tool_intent no tool_result references:
	// its side effect may or may not have happened.
	InDoubt []Event `json:"in_doubt"`
	// ModelSessions lists the run's model sessions by FirstSeq.
	ModelSessions []ModelSession `json:"model_sessions"`
}

// SessionStore holds session logs: per sandbox, threads → runs → events
// (optionally tagged with a model session).
//
// Contract, checked by storetest:
//   - Every method takes the tenant and the sandbox id and returns
//     errs.ErrNotFound when the sandbox is absent or another tenant's, and
//     when the thread or run is absent or belongs to another sandbox; what
//     belongs to another tenant is never visible. Empty identifiers are
//     errs.ErrInvalid.
//   - CreateThread returns errs.ErrConflict when the id, or the name within
//     the sandbox, is taken; CreateRun when the id is taken. Both store
//     nothing then. Thread and run ids are global, chosen by the caller.
//   - AppendEvents is one transaction: either every event of the batch is
//     stored, numbered with the run's next seqs in order, and durable when
//     it returns, or none is (any invalid event fails the whole batch).
//     Seqs of a run start at 1 and grow by one per stored event, also under
//     concurrent appends; they are never reused.
//   - An event whose IdempotencyKey the run already holds (earlier, or
//     earlier in the same batch) is not stored again: its place in the
//     result is the original event. If its type, intent, model session or
//     payload differ from the original's, the batch is errs.ErrConflict.
//   - A tool_result must name in Intent the seq of a tool_intent of the
//     same run (stored, or earlier in the batch); anything else, an unknown
//     type, an empty batch or one over MaxEventBatch events is
//     errs.ErrInvalid; a payload over MaxEventPayloadBytes is
//     errs.ErrTooLarge.
//   - Appending a new event to, or ending, a run that is not RunRunning
//     is errs.ErrConflict; a batch made only of idempotent replays still
//     returns the stored events.
//   - When the run's thread has a Retention, the append's transaction also
//     deletes that run's events no rule keeps, as PruneThread does.
//   - Retention never deletes an in-doubt tool_intent nor a run's newest
//     checkpoint event, so ResumeRun stays truthful.
//   - Lists are ordered: threads and runs by creation time, then id; events
//     by seq.
type SessionStore interface {
	// CreateThread stores t and returns it as stored (zero CreatedAt: now).
	CreateThread(ctx context.Context, t Thread) (Thread, error)
	// GetThread finds a thread of the sandbox by id, or by name.
	GetThread(ctx context.Context, tenantID, sandboxID, idOrName string) (Thread, error)
	// ListThreads lists the sandbox's threads.
	ListThreads(ctx context.Context, tenantID, sandboxID string) ([]Thread, error)
	// SetThreadRetention replaces a thread's retention (not applied until
	// the next append or PruneThread) and returns the thread.
	SetThreadRetention(ctx context.Context, tenantID, sandboxID, threadID string, r Retention) (Thread, error)
	// PruneThread applies the thread's retention to all its runs at now
	// and returns how many events it deleted.
	PruneThread(ctx context.Context, tenantID, sandboxID, threadID string, now time.Time) (int64, error)

	// CreateRun stores r (Status RunRunning, LastSeq 0, zero StartedAt:
	// now) as a run of the sandbox's thread r.ThreadID and returns it.
	CreateRun(ctx context.Context, r Run) (Run, error)
	// GetRun returns a run.
	GetRun(ctx context.Context, k RunKey) (Run, error)
	// ListRuns lists the runs of a thread of the sandbox.
	ListRuns(ctx context.Context, tenantID, sandboxID, threadID string) ([]Run, error)
	// EndRun sets a running run's final status (status.Ended() must hold)
	// and EndedAt (zero: now), and returns the run.
	EndRun(ctx context.Context, k RunKey, status RunStatus, at time.Time) (Run, error)

	// AppendEvents appends evs to a run and returns, for each, the stored
	// event (see the contract for idempotency and atomicity).
	AppendEvents(ctx context.Context, k RunKey, evs []EventWrite) ([]Event, error)
	// ListEvents returns up to limit (1..MaxEventList) of the run's events
	// with seq > after, by seq.
	ListEvents(ctx context.Context, k RunKey, after int64, limit int) ([]Event, error)
	// ResumeRun returns the run with its safe point, in-doubt tool intents
	// and model sessions, all read from one snapshot.
	ResumeRun(ctx context.Context, k RunKey) (RunResume, error)
}
