package store

import (
	"context"
	"time"
)

// Limits of structured state, the same for every store implementation.
const (
	// MaxStatePayloadBytes is the largest task payload, observation
	// payload or key-value value.
	MaxStatePayloadBytes = 256 << 10
	// MaxStateList is the most records one ListTasks, ListObservations or
	// ListKV call returns.
	MaxStateList = 1000
)

// TaskState is the state of a task.
type TaskState string

// Task states. A task is created TaskOpen; see CanTransition for the moves
// between states.
const (
	TaskOpen       TaskState = "open"
	TaskInProgress TaskState = "in_progress"
	TaskDone       TaskState = "done"
	TaskFailed     TaskState = "failed"
	TaskCancelled  TaskState = "cancelled"
)

// TaskStates lists every valid TaskState.
var TaskStates = []TaskState{TaskOpen, TaskInProgress, TaskDone, TaskFailed, TaskCancelled}

// OpenTaskStates are the states of an open (unfinished) task.
var OpenTaskStates = []TaskState{TaskOpen, TaskInProgress}

// Valid reports whether s is one of TaskStates.
func (s TaskState) Valid() bool {
	for _, v := range TaskStates {
		if s == v {
			return true
		}
	}
	return false
}

// IsOpen reports whether s is open or in progress.
func (s TaskState) IsOpen() bool { return s == TaskOpen || s == TaskInProgress }

// CanTransition reports whether a task may move from one state to another:
// open → in_progress → done | failed | cancelled, and done, failed or
// cancelled → open (reopen). Staying in the same state is not a
// transition.
func CanTransition(from, to TaskState) bool {
	switch from {
	case TaskOpen:
		return to == TaskInProgress
	case TaskInProgress:
		return to == TaskDone || to == TaskFailed || to == TaskCancelled
	case TaskDone, TaskFailed, TaskCancelled:
		return to == TaskOpen
	}
	return false
}

// Task is a unit of an agent's work in a sandbox. SandboxID is the
// sandbox's id, never its name.
type Task struct {
	TenantID  string `json:"tenant_id"`
	SandboxID string `json:"sandbox_id"`
	// ID is unique within the sandbox, chosen by the caller.
	ID    string    `json:"id"`
	State TaskState `json:"state"`
	// Payload is the task's JSON (validated by the caller).
	Payload   []byte    `json:"payload"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// TaskFilter selects tasks for ListTasks. Zero values select everything.
type TaskFilter struct {
	// States limits the result to tasks in one of these states.
	States []TaskState
	// CreatedAfter, when set, limits the result to tasks created strictly
	// after it.
	CreatedAfter time.Time
	// After is a page cursor: the id of the last task of the previous page
	// (a task of the sandbox); only tasks ordered after it are returned.
	After string
	// Limit is the page size, 1..MaxStateList (0: MaxStateList).
	Limit int
}

// TaskTransition moves a task to another state.
type TaskTransition struct {
	TenantID  string
	SandboxID string
	ID        string
	// To is the new state; CanTransition(current, To) must hold.
	To TaskState
	// IfState, when not "", is the state the task must be in now.
	IfState TaskState
	// Payload, when not nil, replaces the task's payload in the same
	// transaction.
	Payload []byte
	// At is the update time; zero means now.
	At time.Time
}

// Observation is one entry of a sandbox's append-only observation log.
type Observation struct {
	TenantID  string `json:"tenant_id"`
	SandboxID string `json:"sandbox_id"`
	// Seq numbers a sandbox's observations 1, 2, 3 ... in append order.
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	// Kind is the caller's classification ("test_result", "metric", ...).
	Kind string `json:"kind"`
	// Principal is the id of the API key that appended it.
	Principal string `json:"principal"`
	Payload   []byte `json:"payload"`
}

// ObservationWrite is one observation to append.
type ObservationWrite struct {
	TenantID  string
	SandboxID string
	Kind      string
	Principal string
	// Payload is the JSON (validated by the caller); empty is stored as
	// JSON null.
	Payload []byte
	// Time is the observation's time; zero means now.
	Time time.Time
}

// ObservationFilter selects observations for ListObservations.
type ObservationFilter struct {
	// After is the cursor: only observations with seq > After.
	After int64
	// Kind, when not "", limits the result to that kind.
	Kind string
	// Limit is the page size, 1..MaxStateList (0: MaxStateList).
	Limit int
}

// KVEntry is a key-value entry of a sandbox.
type KVEntry struct {
	TenantID  string `json:"tenant_id"`
	SandboxID string `json:"sandbox_id"`
	Key       string `json:"key"`
	// Value is JSON (validated by the caller).
	Value []byte `json:"value"`
	// Version is 1 on creation and grows by one per put; deleting the
	// entry forgets it.
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// KVWrite is one put of a key-value entry.
type KVWrite struct {
	TenantID  string
	SandboxID string
	Key       string
	Value     []byte
	// IfVersion is the optimistic concurrency check, as for checkpoints:
	// AnyVersion checks nothing, 0 requires that the key is absent, N > 0
	// that its version is N.
	IfVersion int64
	// At is the write time; zero means now.
	At time.Time
}

// KVFilter selects entries for ListKV.
type KVFilter struct {
	// Prefix limits the result to keys that start with it.
	Prefix string
	// After is a page cursor: only keys greater than it.
	After string
	// Limit is the page size, 1..MaxStateList (0: MaxStateList).
	Limit int
}

// TaskStore holds structured agent state per sandbox: tasks with a state
// machine, an append-only observation log, and key-value entries.
//
// Contract, checked by storetest:
//   - Every method takes the tenant and the sandbox id and returns
//     errs.ErrNotFound when the sandbox is absent or another tenant's;
//     what belongs to another tenant or sandbox is never visible. Empty
//     identifiers are errs.ErrInvalid.
//   - Every write is one transaction, durable when it returns; its checks
//     (tenant, existence, state, version) run inside it, so of concurrent
//     writes with the same IfState or IfVersion exactly one wins and the
//     others get errs.ErrConflict.
//   - CreateTask stores the task as TaskOpen; a task id taken in the
//     sandbox is errs.ErrConflict and stores nothing.
//   - TransitionTask returns errs.ErrNotFound for an absent task, and
//     errs.ErrConflict, changing nothing, when IfState is set and differs
//     from the current state or when CanTransition(current, To) is false.
//     An invalid To or IfState is errs.ErrInvalid.
//   - AppendObservation numbers a sandbox's observations 1, 2, 3 ... in
//     commit order, also under concurrent appends; there is no update.
//     PruneObservations deletes the tenant's observations older than
//     before, but never a sandbox's newest (so seqs are never reused), and
//     returns how many went.
//   - PutKV checks IfVersion (errs.ErrConflict on a mismatch, nothing
//     stored) and stores the value with version+1 (1 for a new key).
//     DeleteKV checks ifVersion the same way; deleting an absent key is
//     errs.ErrNotFound (or errs.ErrConflict when ifVersion > 0).
//   - A payload or value over MaxStatePayloadBytes is errs.ErrTooLarge; a
//     Limit outside 0..MaxStateList or an unknown state in a filter is
//     errs.ErrInvalid.
//   - Lists are ordered: tasks by CreatedAt, then ID; observations by Seq;
//     entries by Key (byte order).
//   - Purging a sandbox (DeleteSandbox) deletes its tasks, observations
//     and entries.
type TaskStore interface {
	// CreateTask stores t (State TaskOpen; zero CreatedAt: now, UpdatedAt
	// = CreatedAt) and returns it as stored.
	CreateTask(ctx context.Context, t Task) (Task, error)
	// GetTask returns a task of the sandbox.
	GetTask(ctx context.Context, tenantID, sandboxID, id string) (Task, error)
	// ListTasks returns a page of the sandbox's tasks that f selects. An
	// f.After that names no task of the sandbox is errs.ErrInvalid.
	ListTasks(ctx context.Context, tenantID, sandboxID string, f TaskFilter) ([]Task, error)
	// TransitionTask moves a task to tr.To and returns it as stored.
	TransitionTask(ctx context.Context, tr TaskTransition) (Task, error)

	// AppendObservation appends w to the sandbox's observation log and
	// returns it as stored, with its seq.
	AppendObservation(ctx context.Context, w ObservationWrite) (Observation, error)
	// ListObservations returns a page of the sandbox's observations that f
	// selects, by seq.
	ListObservations(ctx context.Context, tenantID, sandboxID string, f ObservationFilter) ([]Observation, error)
	// PruneObservations deletes the tenant's observations made before
	// before, each sandbox's newest excepted.
	PruneObservations(ctx context.Context, tenantID string, before time.Time) (int64, error)

	// PutKV stores w and returns the stored entry.
	PutKV(ctx context.Context, w KVWrite) (KVEntry, error)
	// GetKV returns an entry of the sandbox.
	GetKV(ctx context.Context, tenantID, sandboxID, key string) (KVEntry, error)
	// ListKV returns a page of the sandbox's entries that f selects.
	ListKV(ctx context.Context, tenantID, sandboxID string, f KVFilter) ([]KVEntry, error)
	// DeleteKV removes an entry; ifVersion works as KVWrite.IfVersion
	// (AnyVersion: no check).
	DeleteKV(ctx context.Context, tenantID, sandboxID, key string, ifVersion int64) error
}
