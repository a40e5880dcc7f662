package client

import (
	"encoding/json"
	"time"
)

// Session-log event types (Event.Type).
const (
	EventModelCall         = "model_call"
	EventToolIntent        = "tool_intent"
	EventToolResult        = "tool_result"
	EventError             = "error"
	EventApprovalRequested = "approval_requested"
	EventApprovalGranted   = "approval_granted"
	EventApprovalDenied    = "approval_denied"
	EventCheckpoint        = "checkpoint"
	EventCompaction        = "compaction"
	EventNote              = "note"
)

// Retention is a thread's event retention. An event of one of the thread's
// runs is deleted (on append, or by PruneThread) only when no set rule
// keeps it; a run's newest event, its newest checkpoint event and its
// in-doubt tool intents are always kept. Zero values are unset.
type Retention struct {
	KeepLast          int   `json:"keep_last,omitempty" minimum:"0" doc:"Keep the newest N events of each run"`
	KeepWithinSeconds int64 `json:"keep_within_seconds,omitempty" minimum:"0" doc:"Keep events younger than this many seconds"`
}

// Thread is a conversation of an agent in a sandbox: a sequence of runs.
type Thread struct {
	ID        string    `json:"id" doc:"Thread id (th-...)"`
	Name      string    `json:"name" doc:"Name"`
	Sandbox   string    `json:"sandbox" doc:"Id of the sandbox"`
	Retention Retention `json:"retention" doc:"How long it is kept"`
	CreatedAt time.Time `json:"created_at" doc:"When it was created (RFC 3339)"`
}

// CreateThreadRequest creates a thread.
type CreateThreadRequest struct {
	Name      string    `json:"name" minLength:"1" maxLength:"128" doc:"Unique within the sandbox: letters, digits, '.', '_' and '-', not starting with '.' or '-'"`
	Retention Retention `json:"retention,omitempty" doc:"How long it is kept"`
}

// Run is one execution of a thread; events are appended to runs.
type Run struct {
	ID     string `json:"id" doc:"Run id (run-...)"`
	Thread string `json:"thread" doc:"Id of the thread"`
	Status string `json:"status" enum:"running,completed,failed,canceled,interrupted" doc:"Status"`
	// LastSeq is the seq of the newest event appended (0: none).
	LastSeq   int64      `json:"last_seq" doc:"LastSeq is the seq of the newest event appended (0: none)."`
	StartedAt time.Time  `json:"started_at" doc:"When it started (RFC 3339)"`
	EndedAt   *time.Time `json:"ended_at,omitempty" doc:"When it ended (RFC 3339); absent while it runs"`
}

// EndRunRequest ends a run.
type EndRunRequest struct {
	Status string `json:"status,omitempty" enum:"completed,failed,canceled,interrupted" doc:"Final status (default completed)"`
}

// AppendEvent is one event to append.
type AppendEvent struct {
	Type string `json:"type,omitempty" enum:"model_call,tool_intent,tool_result,error,approval_requested,approval_granted,approval_denied,checkpoint,compaction,note" doc:"Kind of entry"`
	// Payload is the event's JSON value (at most 256 KiB).
	Payload json.RawMessage `json:"payload,omitempty" doc:"Any JSON value, at most 256 KiB"`
	// IdempotencyKey makes the append safe to retry: an event whose key the
	// run already holds is not stored again; the stored one is returned.
	IdempotencyKey string `json:"idempotency_key,omitempty" maxLength:"256" doc:"Retrying with the same key returns the stored event and stores nothing"`
	// Intent is, for a tool_result, the seq of the tool_intent it answers.
	Intent int64 `json:"intent,omitempty" minimum:"0" doc:"For a tool_result: the seq of its tool_intent"`
	// ModelSession tags the event with a model session id of the run.
	ModelSession string `json:"model_session,omitempty" maxLength:"128" doc:"ModelSession tags the event with a model session id of the run."`
}

// AppendEventsRequest is the body of an append: either a batch in Events,
// or the fields of one event at the top level.
type AppendEventsRequest struct {
	// Events is a batch, stored all or nothing.
	Events []AppendEvent `json:"events,omitempty" maxItems:"1000" doc:"A batch of events, stored all or nothing (one transaction)"`
	AppendEvent
}

// Event is a stored session-log event.
type Event struct {
	Run            string          `json:"run" doc:"Id of the run"`
	Seq            int64           `json:"seq" doc:"1, 2, 3 ... per run, in append order"`
	Time           time.Time       `json:"time" doc:"When it happened (RFC 3339)"`
	Type           string          `json:"type" doc:"Kind of entry"`
	ModelSession   string          `json:"model_session,omitempty" doc:"Model session the event belongs to"`
	IdempotencyKey string          `json:"idempotency_key,omitempty" doc:"Key that makes a retried append return the original event"`
	Intent         int64           `json:"intent,omitempty" doc:"For a tool_result: the seq of its tool_intent"`
	Payload        json.RawMessage `json:"payload" doc:"Any JSON value"`
}

// AppendEventsResult lists the stored events of an append, in request
// order (a replayed idempotency key yields the original event).
type AppendEventsResult struct {
	Events []Event `json:"events" doc:"The events"`
}

// EventPage is one page of a run's events.
type EventPage struct {
	Events []Event `json:"items" doc:"The page's events, by seq (an empty array when there are none)"`
	// Next is the cursor of the following page: pass it as after.
	Next int64 `json:"next" doc:"Cursor: pass as after= to read on"`
	// More is true when the page was cut at the limit (with the largest
	// limit, also when the page ends exactly at the last event).
	More bool `json:"more" doc:"More is true when the page was cut at the limit (with the largest limit, also when the page ends exactly at the last event)."`
	// RunStatus is the run's status when the page was read; a run that is
	// not running takes no more events, so a page without More is then its
	// end.
	RunStatus string `json:"run_status" doc:"RunStatus is the run's status when the page was read; a run that is not running takes no more events, so a page without More is then its end."`
}

// ModelSession is a model session of a run.
type ModelSession struct {
	ID        string    `json:"id" doc:"Unique id"`
	FirstSeq  int64     `json:"first_seq" doc:"Seq of its first event"`
	CreatedAt time.Time `json:"created_at" doc:"When it was created (RFC 3339)"`
}

// RunResume is what a harness resuming a run must know.
type RunResume struct {
	Run Run `json:"run" doc:"Id of the run"`
	// SafePoint is the last checkpoint event, else the last event; absent
	// when the run has none.
	SafePoint *Event `json:"safe_point,omitempty" doc:"The last checkpoint event, else the last event"`
	// InDoubt lists the tool intents that no tool_result answers: their
	// side effects may or may not have happened.
	InDoubt       []Event        `json:"in_doubt" doc:"Tool intents without a tool_result, by seq"`
	ModelSessions []ModelSession `json:"model_sessions" doc:"The run's model sessions"`
}

// PruneResult says what a prune deleted.
type PruneResult struct {
	Deleted int64 `json:"deleted" doc:"How many were deleted"`
}
