package client

import (
	"encoding/json"
	"time"
)

// Task states (Task.State). A task is created open; it moves open →
// in_progress → done | failed | cancelled, and a done, failed or cancelled
// task may be reopened (→ open). Any other move is a 409 (IsConflict).
const (
	TaskOpen       = "open"
	TaskInProgress = "in_progress"
	TaskDone       = "done"
	TaskFailed     = "failed"
	TaskCancelled  = "cancelled"
)

// Task is a unit of an agent's work, kept by the daemon outside the
// sandbox.
type Task struct {
	ID      string          `json:"id" doc:"Unique within the sandbox"`
	Sandbox string          `json:"sandbox" doc:"Id of the sandbox"`
	State   string          `json:"state" enum:"open,in_progress,done,failed,cancelled" doc:"Current state"`
	Payload json.RawMessage `json:"payload" doc:"The task's JSON"`
	// CreatedAt is when the task was created; UpdatedAt when its state or
	// payload last changed.
	CreatedAt time.Time `json:"created_at" doc:"CreatedAt is when the task was created; UpdatedAt when its state or payload last changed."`
	UpdatedAt time.Time `json:"updated_at" doc:"When it last changed (RFC 3339)"`
}

// CreateTaskRequest creates an open task.
type CreateTaskRequest struct {
	// ID is the task's id; empty for a generated one (task-...).
	ID      string          `json:"id,omitempty" maxLength:"128" doc:"Task id (letters, digits, '.', '_' and '-', not starting with '.' or '-'); empty for a generated one"`
	Payload json.RawMessage `json:"payload,omitempty" doc:"Any JSON value, at most 256 KiB (default null)"`
}

// SetTaskStateRequest moves a task to another state.
type SetTaskStateRequest struct {
	State string `json:"state" enum:"open,in_progress,done,failed,cancelled" doc:"The new state"`
	// IfState, when set, is the state the task must be in now, else the
	// request is a 409 (IsConflict) and changes nothing.
	IfState string `json:"if_state,omitempty" enum:"open,in_progress,done,failed,cancelled" doc:"The state the task must be in now (409 otherwise)"`
	// Payload, when set, replaces the task's payload in the same
	// transaction.
	Payload json.RawMessage `json:"payload,omitempty" doc:"Replaces the payload in the same transaction (at most 256 KiB)"`
}

// TaskQuery selects tasks. Zero values select everything.
type TaskQuery struct {
	// States limits the result to these states.
	States []string
	// Open limits the result to open tasks (open or in_progress); it
	// combines with States as an intersection.
	Open bool
	// CreatedAfter limits the result to tasks created strictly after it.
	CreatedAfter time.Time
	// After is a page cursor: the Next of the previous page.
	After string
	// Limit is the page size (0: 100, at most 1000).
	Limit int
}

// TaskPage is a page of tasks, ordered by creation time, then id.
type TaskPage struct {
	Tasks []Task `json:"items" doc:"The page's tasks (an empty array when there are none)"`
	// Next is the cursor of the following page (the last task's id), or
	// empty when the page is empty.
	Next string `json:"next,omitempty" doc:"Pass as after to read the following page"`
	// More reports whether there may be more tasks after this page.
	More bool `json:"more" doc:"Whether a following page may hold more tasks"`
}

// Observation is one entry of a sandbox's append-only observation log.
type Observation struct {
	// Seq numbers the sandbox's observations 1, 2, 3 ... in append order.
	Seq  int64     `json:"seq" doc:"Seq numbers the sandbox's observations 1, 2, 3 ... in append order."`
	Time time.Time `json:"time" doc:"When it happened (RFC 3339)"`
	Kind string    `json:"kind" doc:"Kind"`
	// Principal is the id of the API key that appended it.
	Principal string          `json:"principal" doc:"Principal is the id of the API key that appended it."`
	Payload   json.RawMessage `json:"payload" doc:"Any JSON value"`
}

// AppendObservationRequest appends an observation.
type AppendObservationRequest struct {
	Kind    string          `json:"kind" minLength:"1" maxLength:"128" doc:"Classification (letters, digits, '.', '_' and '-'), e.g. test_result"`
	Payload json.RawMessage `json:"payload,omitempty" doc:"Any JSON value, at most 256 KiB (default null)"`
}

// ObservationQuery selects observations.
type ObservationQuery struct {
	// After is the cursor: observations with seq > After.
	After int64
	// Kind limits the result to one kind.
	Kind string
	// Limit is the page size (0: 100, at most 1000).
	Limit int
}

// ObservationPage is a page of observations, by seq.
type ObservationPage struct {
	Observations []Observation `json:"items" doc:"The page's observations, by seq (an empty array when there are none)"`
	// Next is the cursor of the following page: the last seq, or the
	// request's after when the page is empty.
	Next int64 `json:"next" doc:"Pass as after to read on"`
	More bool  `json:"more" doc:"Whether a following page may hold more observations"`
}

// KVEntry is a key-value entry of a sandbox.
type KVEntry struct {
	Key   string          `json:"key" doc:"Key"`
	Value json.RawMessage `json:"value" doc:"Value"`
	// Version is 1 on creation and grows by one per put; usable as
	// If-Match. Deleting the key forgets it.
	Version   int64     `json:"version" doc:"Version is 1 on creation and grows by one per put; usable as If-Match. Deleting the key forgets it."`
	CreatedAt time.Time `json:"created_at" doc:"When it was created (RFC 3339)"`
	UpdatedAt time.Time `json:"updated_at" doc:"When it last changed (RFC 3339)"`
}

// KVQuery selects key-value entries.
type KVQuery struct {
	// Prefix limits the result to keys that start with it (literally).
	Prefix string
	// After is a page cursor: the Next of the previous page.
	After string
	// Limit is the page size (0: 100, at most 1000).
	Limit int
}

// KVPage is a page of entries, by key (byte order).
type KVPage struct {
	Entries []KVEntry `json:"items" doc:"The page's entries, by key (an empty array when there are none)"`
	// Next is the cursor of the following page (the last key), or empty
	// when the page is empty.
	Next string `json:"next,omitempty" doc:"Pass as after to read the following page"`
	More bool   `json:"more" doc:"Whether a following page may hold more entries"`
}
