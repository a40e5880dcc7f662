package api

import (
	"context"

	"github.com/stead-dev/stead/client"
)

// TaskBackend serves structured agent state per sandbox: tasks with a
// state machine, an append-only observation log and key-value entries.
// NewHandler registers the /v1/sandboxes/{id}/tasks, .../observations and
// .../kv routes only when its Backend also implements this interface. As
// with Backend, every method gets the caller's tenant (in p for writes) and
// treats another tenant's sandbox as absent (errs.ErrNotFound); sandbox may
// be an id or a name. Task ids, keys, observation seqs and cursors are
// resolved within the sandbox: another sandbox's are absent, answered
// exactly as ids that never existed (the agent token relies on it, see
// scope.go). A write to a soft-deleted sandbox is
// errs.ErrConflict; a payload or value that is not JSON, or is over 256
// KiB, is errs.ErrInvalid. Every write is one durable transaction.
type TaskBackend interface {
	// CreateTask creates an open task; a taken id is errs.ErrConflict.
	CreateTask(ctx context.Context, p Principal, sandbox string, req client.CreateTaskRequest) (client.Task, error)
	// GetTask returns a task.
	GetTask(ctx context.Context, tenant, sandbox, id string) (client.Task, error)
	// ListTasks returns a page of the tasks q selects, by creation time,
	// then id.
	ListTasks(ctx context.Context, tenant, sandbox string, q client.TaskQuery) (client.TaskPage, error)
	// SetTaskState moves a task to req.State: an illegal move, or an
	// IfState the task is not in, is errs.ErrConflict and changes nothing.
	SetTaskState(ctx context.Context, p Principal, sandbox, id string, req client.SetTaskStateRequest) (client.Task, error)

	// AppendObservation appends to the sandbox's observation log.
	AppendObservation(ctx context.Context, p Principal, sandbox string, req client.AppendObservationRequest) (client.Observation, error)
	// ListObservations returns a page of observations with seq > q.After.
	ListObservations(ctx context.Context, tenant, sandbox string, q client.ObservationQuery) (client.ObservationPage, error)

	// PutKV stores value (JSON) under key. ifVersion, when not nil, is the
	// version the entry must have (0: it must not exist), else
	// errs.ErrConflict and nothing changes.
	PutKV(ctx context.Context, p Principal, sandbox, key string, value []byte, ifVersion *int64) (client.KVEntry, error)
	// GetKV returns an entry.
	GetKV(ctx context.Context, tenant, sandbox, key string) (client.KVEntry, error)
	// ListKV returns a page of the entries q selects, by key.
	ListKV(ctx context.Context, tenant, sandbox string, q client.KVQuery) (client.KVPage, error)
	// DeleteKV removes an entry; ifVersion works as for PutKV.
	DeleteKV(ctx context.Context, p Principal, sandbox, key string, ifVersion *int64) error
}
