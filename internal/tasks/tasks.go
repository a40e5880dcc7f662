// Package tasks is the structured agent state that stead keeps outside
// every sandbox, as an API over the seed's sqlite pattern: tasks with a
// state machine, an append-only observation log, and key-value entries.
// Tasks implements api.TaskBackend on top of a store.Store; the sandbox
// service embeds it.
//
// Tasks. A task has an id (unique within its sandbox, chosen by the caller
// or generated), a state, a JSON payload and its creation and update
// times. It is created open and moves open → in_progress → done | failed |
// cancelled; a finished task may be reopened (→ open). Any other move is
// errs.ErrConflict. A move may name the state the task must be in now
// (IfState): of several agents claiming an open task with IfState open,
// exactly one wins. A move may replace the payload (e.g. with a result) in
// the same transaction. Queries: open tasks (open or in_progress), by
// state, created after a time; pages of at most 1000, by creation time.
//
// Observations are an append-only log per sandbox: each has a seq (1, 2,
// 3 ... in commit order), the server's time, a kind, the API key that
// appended it and a JSON payload. There is no update or delete; readers
// page with a seq cursor.
//
// Key-value entries hold a JSON value per key with a version (1 on
// creation, +1 per put) for optimistic concurrency: a put or delete may
// name the version it expects (0: the key must not exist). Keys may be
// listed by prefix.
//
// Durability and tenancy are those of checkpoint documents: every write is
// one store transaction, durable before the API acknowledges it; every
// call resolves the sandbox (id or name) within the caller's tenant first,
// and another tenant's sandbox is errs.ErrNotFound. A soft-deleted
// sandbox's state can be read but not written (errs.ErrConflict); purging
// a sandbox deletes it.
package tasks

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/names"
	"github.com/stead-dev/stead/internal/store"
)

// Limits of the API on top of the store's.
const (
	// MaxPayloadBytes is the largest task payload, observation payload or
	// key-value value.
	MaxPayloadBytes = store.MaxStatePayloadBytes
	// DefaultListLimit is the page size when none is given.
	DefaultListLimit = 100
	// MaxListLimit is the largest page size.
	MaxListLimit = store.MaxStateList
	// maxKeyBytes caps a key-value key and a list prefix or cursor.
	maxKeyBytes = 256
)

var _ api.TaskBackend = (*Tasks)(nil)

// Tasks implements api.TaskBackend on a store.Store. It is safe for
// concurrent use.
type Tasks struct {
	st    store.Store
	admit api.StateAdmitFunc
}

// SetStateAdmit makes every write of a payload or value ask f first (the
// tenant's state quota); call it before serving.
func (t *Tasks) SetStateAdmit(f api.StateAdmitFunc) { t.admit = f }

// New returns a Tasks that keeps its state in st.
func New(st store.Store) *Tasks {
	return &Tasks{st: st}
}

// CreateTask creates an open task of the sandbox.
func (t *Tasks) CreateTask(ctx context.Context, p api.Principal, sandbox string, req client.CreateTaskRequest) (client.Task, error) {
	id := req.ID
	if id == "" {
		id = newID("task-")
	} else if !names.Valid(id) {
		return client.Task{}, fmt.Errorf("create task %q: use 1 to 128 letters, digits, '.', '_' or '-', not starting with '.' or '-': %w", id, errs.ErrInvalid)
	}
	payload, err := parsePayload("payload", req.Payload)
	if err != nil {
		return client.Task{}, fmt.Errorf("create task %s: %w", id, err)
	}
	sbID, err := t.sandbox(ctx, p.TenantID, sandbox, true)
	if err != nil {
		return client.Task{}, fmt.Errorf("create task %s: %w", id, err)
	}
	if err := t.admit.Admit(ctx, p.TenantID, int64(len(payload))); err != nil {
		return client.Task{}, fmt.Errorf("create task %s: %w", id, err)
	}
	tk, err := t.st.CreateTask(ctx, store.Task{TenantID: p.TenantID, SandboxID: sbID, ID: id, Payload: payload})
	if err != nil {
		return client.Task{}, err // the store's error names the operation and task
	}
	return viewTask(tk), nil
}

// GetTask returns a task of the sandbox.
func (t *Tasks) GetTask(ctx context.Context, tenant, sandbox, id string) (client.Task, error) {
	if !names.Valid(id) {
		return client.Task{}, fmt.Errorf("get task %q: %w", id, errs.ErrNotFound)
	}
	sbID, err := t.sandbox(ctx, tenant, sandbox, false)
	if err != nil {
		return client.Task{}, fmt.Errorf("get task %s: %w", id, err)
	}
	tk, err := t.st.GetTask(ctx, tenant, sbID, id)
	if err != nil {
		return client.Task{}, err
	}
	return viewTask(tk), nil
}

// ListTasks returns a page of the sandbox's tasks that q selects.
func (t *Tasks) ListTasks(ctx context.Context, tenant, sandbox string, q client.TaskQuery) (client.TaskPage, error) {
	limit, err := pageLimit(q.Limit)
	if err != nil {
		return client.TaskPage{}, fmt.Errorf("list tasks of %s: %w", sandbox, err)
	}
	states, err := taskStates(q.States, q.Open)
	if err != nil {
		return client.TaskPage{}, fmt.Errorf("list tasks of %s: %w", sandbox, err)
	}
	if q.After != "" && !names.Valid(q.After) {
		return client.TaskPage{}, fmt.Errorf("list tasks of %s: cursor %q names no task: %w", sandbox, q.After, errs.ErrInvalid)
	}
	sbID, err := t.sandbox(ctx, tenant, sandbox, false)
	if err != nil {
		return client.TaskPage{}, fmt.Errorf("list tasks of %s: %w", sandbox, err)
	}
	page := client.TaskPage{Tasks: []client.Task{}}
	if states != nil && len(states) == 0 {
		return page, nil // the filters exclude each other
	}
	list, err := t.st.ListTasks(ctx, tenant, sbID, store.TaskFilter{
		States: states, CreatedAfter: q.CreatedAfter, After: q.After, Limit: fetchLimit(limit),
	})
	if err != nil {
		return client.TaskPage{}, err
	}
	list, page.More = trim(list, limit)
	for _, tk := range list {
		page.Tasks = append(page.Tasks, viewTask(tk))
	}
	if len(list) > 0 {
		page.Next = list[len(list)-1].ID
	}
	return page, nil
}

// SetTaskState moves a task to req.State, optionally checking its current
// state and replacing its payload.
func (t *Tasks) SetTaskState(ctx context.Context, p api.Principal, sandbox, id string, req client.SetTaskStateRequest) (client.Task, error) {
	if !names.Valid(id) {
		return client.Task{}, fmt.Errorf("set state of task %q: %w", id, errs.ErrNotFound)
	}
	to := store.TaskState(req.State)
	if !to.Valid() {
		return client.Task{}, fmt.Errorf("set state of task %s: unknown state %q (want one of %s): %w", id, req.State, stateList(), errs.ErrInvalid)
	}
	ifState := store.TaskState(req.IfState)
	if ifState != "" && !ifState.Valid() {
		return client.Task{}, fmt.Errorf("set state of task %s: unknown if-state %q (want one of %s): %w", id, req.IfState, stateList(), errs.ErrInvalid)
	}
	var payload []byte
	if len(req.Payload) > 0 {
		var err error
		if payload, err = parsePayload("payload", req.Payload); err != nil {
			return client.Task{}, fmt.Errorf("set state of task %s: %w", id, err)
		}
	}
	sbID, err := t.sandbox(ctx, p.TenantID, sandbox, true)
	if err != nil {
		return client.Task{}, fmt.Errorf("set state of task %s: %w", id, err)
	}
	tk, err := t.st.TransitionTask(ctx, store.TaskTransition{
		TenantID: p.TenantID, SandboxID: sbID, ID: id, To: to, IfState: ifState, Payload: payload,
	})
	if err != nil {
		return client.Task{}, err
	}
	return viewTask(tk), nil
}

// AppendObservation appends to the sandbox's observation log, recording
// the caller's API key.
func (t *Tasks) AppendObservation(ctx context.Context, p api.Principal, sandbox string, req client.AppendObservationRequest) (client.Observation, error) {
	if !names.Valid(req.Kind) {
		return client.Observation{}, fmt.Errorf("append observation: kind %q: use 1 to 128 letters, digits, '.', '_' or '-', not starting with '.' or '-': %w",
			req.Kind, errs.ErrInvalid)
	}
	payload, err := parsePayload("payload", req.Payload)
	if err != nil {
		return client.Observation{}, fmt.Errorf("append observation: %w", err)
	}
	sbID, err := t.sandbox(ctx, p.TenantID, sandbox, true)
	if err != nil {
		return client.Observation{}, fmt.Errorf("append observation: %w", err)
	}
	if err := t.admit.Admit(ctx, p.TenantID, int64(len(payload))); err != nil {
		return client.Observation{}, fmt.Errorf("append observation: %w", err)
	}
	o, err := t.st.AppendObservation(ctx, store.ObservationWrite{
		TenantID: p.TenantID, SandboxID: sbID, Kind: req.Kind, Principal: p.KeyID, Payload: payload,
	})
	if err != nil {
		return client.Observation{}, err
	}
	return viewObservation(o), nil
}

// ListObservations returns a page of the sandbox's observations with seq >
// q.After.
func (t *Tasks) ListObservations(ctx context.Context, tenant, sandbox string, q client.ObservationQuery) (client.ObservationPage, error) {
	limit, err := pageLimit(q.Limit)
	if err != nil {
		return client.ObservationPage{}, fmt.Errorf("list observations of %s: %w", sandbox, err)
	}
	if q.After < 0 {
		return client.ObservationPage{}, fmt.Errorf("list observations of %s: cursor %d: %w", sandbox, q.After, errs.ErrInvalid)
	}
	if q.Kind != "" && !names.Valid(q.Kind) {
		return client.ObservationPage{}, fmt.Errorf("list observations of %s: kind %q: %w", sandbox, q.Kind, errs.ErrInvalid)
	}
	sbID, err := t.sandbox(ctx, tenant, sandbox, false)
	if err != nil {
		return client.ObservationPage{}, fmt.Errorf("list observations of %s: %w", sandbox, err)
	}
	list, err := t.st.ListObservations(ctx, tenant, sbID, store.ObservationFilter{After: q.After, Kind: q.Kind, Limit: fetchLimit(limit)})
	if err != nil {
		return client.ObservationPage{}, err
	}
	page := client.ObservationPage{Observations: []client.Observation{}, Next: q.After}
	list, page.More = trim(list, limit)
	for _, o := range list {
		page.Observations = append(page.Observations, viewObservation(o))
	}
	if len(list) > 0 {
		page.Next = list[len(list)-1].Seq
	}
	return page, nil
}

// PutKV stores a JSON value under key.
func (t *Tasks) PutKV(ctx context.Context, p api.Principal, sandbox, key string, value []byte, ifVersion *int64) (client.KVEntry, error) {
	if err := validateKey(key); err != nil {
		return client.KVEntry{}, fmt.Errorf("put key %s: %w", key, err)
	}
	iv, err := versionCheck(ifVersion)
	if err != nil {
		return client.KVEntry{}, fmt.Errorf("put key %s: %w", key, err)
	}
	if len(value) == 0 {
		return client.KVEntry{}, fmt.Errorf("put key %s: empty value (send JSON, e.g. null): %w", key, errs.ErrInvalid)
	}
	if value, err = parsePayload("value", value); err != nil {
		return client.KVEntry{}, fmt.Errorf("put key %s: %w", key, err)
	}
	sbID, err := t.sandbox(ctx, p.TenantID, sandbox, true)
	if err != nil {
		return client.KVEntry{}, fmt.Errorf("put key %s: %w", key, err)
	}
	if err := t.admit.Admit(ctx, p.TenantID, int64(len(value))); err != nil {
		return client.KVEntry{}, fmt.Errorf("put key %s: %w", key, err)
	}
	e, err := t.st.PutKV(ctx, store.KVWrite{TenantID: p.TenantID, SandboxID: sbID, Key: key, Value: value, IfVersion: iv})
	if err != nil {
		return client.KVEntry{}, err
	}
	return viewKV(e), nil
}

// GetKV returns an entry of the sandbox.
func (t *Tasks) GetKV(ctx context.Context, tenant, sandbox, key string) (client.KVEntry, error) {
	if err := validateKey(key); err != nil {
		return client.KVEntry{}, fmt.Errorf("get key %s: %w", key, err)
	}
	sbID, err := t.sandbox(ctx, tenant, sandbox, false)
	if err != nil {
		return client.KVEntry{}, fmt.Errorf("get key %s: %w", key, err)
	}
	e, err := t.st.GetKV(ctx, tenant, sbID, key)
	if err != nil {
		return client.KVEntry{}, err
	}
	return viewKV(e), nil
}

// ListKV returns a page of the sandbox's entries that q selects.
func (t *Tasks) ListKV(ctx context.Context, tenant, sandbox string, q client.KVQuery) (client.KVPage, error) {
	limit, err := pageLimit(q.Limit)
	if err != nil {
		return client.KVPage{}, fmt.Errorf("list keys of %s: %w", sandbox, err)
	}
	for _, arg := range [][2]string{{"prefix", q.Prefix}, {"cursor", q.After}} {
		if len(arg[1]) > maxKeyBytes || !printable(arg[1]) {
			return client.KVPage{}, fmt.Errorf("list keys of %s: %s %q: at most %d printable bytes: %w", sandbox, arg[0], arg[1], maxKeyBytes, errs.ErrInvalid)
		}
	}
	sbID, err := t.sandbox(ctx, tenant, sandbox, false)
	if err != nil {
		return client.KVPage{}, fmt.Errorf("list keys of %s: %w", sandbox, err)
	}
	list, err := t.st.ListKV(ctx, tenant, sbID, store.KVFilter{Prefix: q.Prefix, After: q.After, Limit: fetchLimit(limit)})
	if err != nil {
		return client.KVPage{}, err
	}
	page := client.KVPage{Entries: []client.KVEntry{}}
	list, page.More = trim(list, limit)
	for _, e := range list {
		page.Entries = append(page.Entries, viewKV(e))
	}
	if len(list) > 0 {
		page.Next = list[len(list)-1].Key
	}
	return page, nil
}

// DeleteKV removes an entry of the sandbox.
func (t *Tasks) DeleteKV(ctx context.Context, p api.Principal, sandbox, key string, ifVersion *int64) error {
	if err := validateKey(key); err != nil {
		return fmt.Errorf("delete key %s: %w", key, err)
	}
	iv, err := versionCheck(ifVersion)
	if err != nil {
		return fmt.Errorf("delete key %s: %w", key, err)
	}
	sbID, err := t.sandbox(ctx, p.TenantID, sandbox, true)
	if err != nil {
		return fmt.Errorf("delete key %s: %w", key, err)
	}
	return t.st.DeleteKV(ctx, p.TenantID, sbID, key, iv)
}

// sandbox resolves an id or name within the tenant to the sandbox's id. A
// write to a soft-deleted sandbox is errs.ErrConflict.
func (t *Tasks) sandbox(ctx context.Context, tenant, idOrName string, write bool) (string, error) {
	return store.AgentStateSandbox(ctx, t.st, tenant, idOrName, write, "state")
}

// parsePayload checks that b (empty: null) is JSON of at most
// MaxPayloadBytes and returns it.
func parsePayload(what string, b []byte) ([]byte, error) {
	if len(b) == 0 {
		return []byte("null"), nil
	}
	if len(b) > MaxPayloadBytes {
		return nil, fmt.Errorf("%s is %d bytes, over the limit of %d bytes: %w", what, len(b), MaxPayloadBytes, errs.ErrTooLarge)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%s is not JSON: %w", what, errs.ErrInvalid)
	}
	return b, nil
}

// validateKey checks a key-value key.
func validateKey(key string) error {
	if !names.ValidKey(key) || strings.Contains(key, "..") {
		return fmt.Errorf("key %q: use 1 to 256 letters, digits or . _ : @ + = , / -, not starting with one of . : @ + = , / - and without \"..\": %w",
			key, errs.ErrInvalid)
	}
	return nil
}

// versionCheck turns an optional if-version into the store's form.
func versionCheck(v *int64) (int64, error) {
	if v == nil {
		return store.AnyVersion, nil
	}
	if *v < 0 {
		return 0, fmt.Errorf("if-version %d: %w", *v, errs.ErrInvalid)
	}
	return *v, nil
}

// taskStates turns a query's states and open flag into the store's filter:
// nil selects every state, an empty non-nil slice none.
func taskStates(states []string, open bool) ([]store.TaskState, error) {
	var out []store.TaskState
	for _, s := range states {
		st := store.TaskState(s)
		if !st.Valid() {
			return nil, fmt.Errorf("unknown state %q (want one of %s): %w", s, stateList(), errs.ErrInvalid)
		}
		if !slices.Contains(out, st) {
			out = append(out, st)
		}
	}
	if !open {
		return out, nil
	}
	if len(out) == 0 {
		return slices.Clone(store.OpenTaskStates), nil
	}
	return slices.DeleteFunc(out, func(s store.TaskState) bool { return !s.IsOpen() }), nil
}

func stateList() string {
	names := make([]string, len(store.TaskStates))
	for i, s := range store.TaskStates {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// pageLimit checks a page size (0: DefaultListLimit).
func pageLimit(n int) (int, error) {
	switch {
	case n == 0:
		return DefaultListLimit, nil
	case n < 0 || n > MaxListLimit:
		return 0, fmt.Errorf("limit %d is not between 1 and %d: %w", n, MaxListLimit, errs.ErrInvalid)
	}
	return n, nil
}

// fetchLimit is how many records to ask the store for a page of limit:
// one more, to know whether there are more, when the store allows it.
func fetchLimit(limit int) int { return min(limit+1, MaxListLimit) }

// trim cuts a fetched list to limit and reports whether there may be more.
func trim[T any](list []T, limit int) ([]T, bool) {
	if len(list) > limit {
		return list[:limit], true
	}
	return list, len(list) == limit && limit == MaxListLimit
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func newID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

func viewTask(t store.Task) client.Task {
	return client.Task{ID: t.ID, Sandbox: t.SandboxID, State: string(t.State), Payload: json.RawMessage(t.Payload),
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt}
}

func viewObservation(o store.Observation) client.Observation {
	return client.Observation{Seq: o.Seq, Time: o.Time, Kind: o.Kind, Principal: o.Principal, Payload: json.RawMessage(o.Payload)}
}

func viewKV(e store.KVEntry) client.KVEntry {
	return client.KVEntry{Key: e.Key, Value: json.RawMessage(e.Value), Version: e.Version, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}
}
