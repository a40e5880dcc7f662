package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Structured state: tasks, observations and key-value entries. Every write
// is one IMMEDIATE transaction on the writer connection that checks the
// sandbox's tenant, then the record's current state or version, then
// writes; since one connection writes, concurrent writers queue and each
// sees the previous one's commit, so of two transitions or puts with the
// same expectation exactly one wins. The commit is fsynced (WAL,
// synchronous FULL) before the method returns.

const taskCols = "tenant_id, sandbox_id, id, state, payload, created_at, updated_at"

const observationCols = "tenant_id, sandbox_id, seq, created_at, kind, principal, payload"

const kvCols = "tenant_id, sandbox_id, kv_key, value, version, created_at, updated_at"

// listLimit checks a page size and returns it (0: store.MaxStateList).
func listLimit(n int) (int, error) {
	switch {
	case n == 0:
		return store.MaxStateList, nil
	case n < 0 || n > store.MaxStateList:
		return 0, fmt.Errorf("limit %d is not between 1 and %d: %w", n, store.MaxStateList, errs.ErrInvalid)
	}
	return n, nil
}

func checkPayload(what string, b []byte) error {
	if len(b) > store.MaxStatePayloadBytes {
		return fmt.Errorf("%s is %d bytes, over the limit of %d bytes: %w", what, len(b), store.MaxStatePayloadBytes, errs.ErrTooLarge)
	}
	return nil
}

// orNull stores an empty payload as JSON null.
func orNull(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}

// timeOrNow returns t, or now when t is zero, in the stored form and
// normalised.
func timeOrNow(t time.Time) (string, time.Time, error) {
	if t.IsZero() {
		t = now()
	}
	s, err := FormatTime(t)
	return s, normTime(t), err
}

// CreateTask stores a new open task; see store.TaskStore.
func (s *Store) CreateTask(ctx context.Context, t store.Task) (store.Task, error) {
	if err := validateSandboxRef(t.TenantID, t.SandboxID); err != nil {
		return store.Task{}, fmt.Errorf("create task %s: %w", t.ID, err)
	}
	if t.ID == "" {
		return store.Task{}, fmt.Errorf("create task: empty id: %w", errs.ErrInvalid)
	}
	if err := checkPayload("task payload", t.Payload); err != nil {
		return store.Task{}, fmt.Errorf("create task %s: %w", t.ID, err)
	}
	created, createdAt, err := timeOrNow(t.CreatedAt)
	if err != nil {
		return store.Task{}, fmt.Errorf("create task %s: created_at: %w", t.ID, err)
	}
	t.State, t.Payload, t.CreatedAt, t.UpdatedAt = store.TaskOpen, orNull(t.Payload), createdAt, createdAt
	err = s.writeTx(ctx, func(tx *txn) error {
		if err := sandboxOfTenant(ctx, tx, t.TenantID, t.SandboxID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO tasks ("+taskCols+") VALUES (?, ?, ?, ?, ?, ?, ?)",
			t.TenantID, t.SandboxID, t.ID, string(t.State), t.Payload, created, created)
		if s.isUnique(err) {
			return fmt.Errorf("task id %q is taken in the sandbox: %w", t.ID, errs.ErrConflict)
		}
		return err
	})
	if err != nil {
		return store.Task{}, fmt.Errorf("create task %s: %w", t.ID, err)
	}
	return t, nil
}

// GetTask returns a task of the sandbox.
func (s *Store) GetTask(ctx context.Context, tenantID, sandboxID, id string) (store.Task, error) {
	if err := validateSandboxRef(tenantID, sandboxID); err != nil {
		return store.Task{}, fmt.Errorf("get task %s: %w", id, err)
	}
	if id == "" {
		return store.Task{}, fmt.Errorf("get task: empty id: %w", errs.ErrInvalid)
	}
	t, err := getTask(ctx, s.r, tenantID, sandboxID, id)
	if err != nil {
		return store.Task{}, fmt.Errorf("get task %s: %w", id, err)
	}
	return t, nil
}

func getTask(ctx context.Context, q querier, tenantID, sandboxID, id string) (store.Task, error) {
	t, err := scanTask(q.QueryRowContext(ctx, "SELECT "+taskCols+" FROM tasks WHERE tenant_id = ? AND sandbox_id = ? AND id = ?",
		tenantID, sandboxID, id))
	if errors.Is(err, sql.ErrNoRows) {
		if err := sandboxOfTenant(ctx, q, tenantID, sandboxID); err != nil {
			return store.Task{}, err
		}
		return store.Task{}, errs.ErrNotFound
	}
	return t, err
}

// ListTasks returns a page of the sandbox's tasks by creation time, then
// id.
func (s *Store) ListTasks(ctx context.Context, tenantID, sandboxID string, f store.TaskFilter) ([]store.Task, error) {
	if err := validateSandboxRef(tenantID, sandboxID); err != nil {
		return nil, fmt.Errorf("list tasks of sandbox %s: %w", sandboxID, err)
	}
	limit, err := listLimit(f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list tasks of sandbox %s: %w", sandboxID, err)
	}
	q := "SELECT " + taskCols + " FROM tasks WHERE tenant_id = ? AND sandbox_id = ?"
	args := []any{tenantID, sandboxID}
	if len(f.States) > 0 {
		marks := make([]string, len(f.States))
		for i, st := range f.States {
			if !st.Valid() {
				return nil, fmt.Errorf("list tasks of sandbox %s: unknown state %q: %w", sandboxID, st, errs.ErrInvalid)
			}
			marks[i] = "?"
			args = append(args, string(st))
		}
		q += " AND state IN (" + strings.Join(marks, ", ") + ")"
	}
	if !f.CreatedAfter.IsZero() {
		after, err := FormatTime(f.CreatedAfter)
		if err != nil {
			return nil, fmt.Errorf("list tasks of sandbox %s: created after: %w", sandboxID, err)
		}
		q += " AND created_at > ?"
		args = append(args, after)
	}
	var out []store.Task
	err = s.readTx(ctx, func(tx *txn) error {
		if err := sandboxOfTenant(ctx, tx, tenantID, sandboxID); err != nil {
			return err
		}
		q, args := q, args
		if f.After != "" {
			var cur string
			err := tx.QueryRowContext(ctx, "SELECT created_at FROM tasks WHERE tenant_id = ? AND sandbox_id = ? AND id = ?",
				tenantID, sandboxID, f.After).Scan(&cur)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("cursor %q names no task of the sandbox: %w", f.After, errs.ErrInvalid)
			}
			if err != nil {
				return err
			}
			q += " AND (created_at > ? OR (created_at = ? AND id > ?))"
			args = append(args, cur, cur, f.After)
		}
		rows, err := tx.QueryContext(ctx, q+" ORDER BY created_at, id LIMIT ?", append(args, limit)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		out, err = scanAll(rows, scanTask)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list tasks of sandbox %s: %w", sandboxID, err)
	}
	return out, nil
}

// TransitionTask moves a task to another state; see store.TaskStore.
func (s *Store) TransitionTask(ctx context.Context, tr store.TaskTransition) (store.Task, error) {
	if err := validateSandboxRef(tr.TenantID, tr.SandboxID); err != nil {
		return store.Task{}, fmt.Errorf("set state of task %s: %w", tr.ID, err)
	}
	switch {
	case tr.ID == "":
		return store.Task{}, fmt.Errorf("set state of task: empty id: %w", errs.ErrInvalid)
	case !tr.To.Valid():
		return store.Task{}, fmt.Errorf("set state of task %s: unknown state %q: %w", tr.ID, tr.To, errs.ErrInvalid)
	case tr.IfState != "" && !tr.IfState.Valid():
		return store.Task{}, fmt.Errorf("set state of task %s: unknown if-state %q: %w", tr.ID, tr.IfState, errs.ErrInvalid)
	}
	if err := checkPayload("task payload", tr.Payload); err != nil {
		return store.Task{}, fmt.Errorf("set state of task %s: %w", tr.ID, err)
	}
	updated, updatedAt, err := timeOrNow(tr.At)
	if err != nil {
		return store.Task{}, fmt.Errorf("set state of task %s: time: %w", tr.ID, err)
	}
	var out store.Task
	err = s.writeTx(ctx, func(tx *txn) error {
		t, err := getTask(ctx, tx, tr.TenantID, tr.SandboxID, tr.ID)
		if err != nil {
			return err
		}
		if tr.IfState != "" && t.State != tr.IfState {
			return fmt.Errorf("the task is %s, not %s: %w", t.State, tr.IfState, errs.ErrConflict)
		}
		if !store.CanTransition(t.State, tr.To) {
			return fmt.Errorf("a task that is %s cannot become %s: %w", t.State, tr.To, errs.ErrConflict)
		}
		if tr.Payload != nil {
			t.Payload = orNull(tr.Payload)
		}
		// Compare-and-swap on the state, so the statement is safe on its own.
		res, err := tx.ExecContext(ctx, "UPDATE tasks SET state = ?, payload = ?, updated_at = ?"+
			" WHERE sandbox_id = ? AND id = ? AND state = ?",
			string(tr.To), t.Payload, updated, tr.SandboxID, tr.ID, string(t.State))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("the task's state moved: %w", errs.ErrConflict)
		}
		t.State, t.UpdatedAt = tr.To, updatedAt
		out = t
		return nil
	})
	if err != nil {
		return store.Task{}, fmt.Errorf("set state of task %s: %w", tr.ID, err)
	}
	return out, nil
}

// AppendObservation appends to the sandbox's observation log.
func (s *Store) AppendObservation(ctx context.Context, w store.ObservationWrite) (store.Observation, error) {
	if err := validateSandboxRef(w.TenantID, w.SandboxID); err != nil {
		return store.Observation{}, fmt.Errorf("append observation: %w", err)
	}
	if w.Kind == "" {
		return store.Observation{}, fmt.Errorf("append observation: empty kind: %w", errs.ErrInvalid)
	}
	if err := checkPayload("observation payload", w.Payload); err != nil {
		return store.Observation{}, fmt.Errorf("append observation: %w", err)
	}
	created, createdAt, err := timeOrNow(w.Time)
	if err != nil {
		return store.Observation{}, fmt.Errorf("append observation: time: %w", err)
	}
	o := store.Observation{TenantID: w.TenantID, SandboxID: w.SandboxID, Time: createdAt, Kind: w.Kind,
		Principal: w.Principal, Payload: orNull(w.Payload)}
	err = s.writeTx(ctx, func(tx *txn) error {
		if err := sandboxOfTenant(ctx, tx, w.TenantID, w.SandboxID); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(seq), 0) + 1 FROM observations WHERE sandbox_id = ?",
			w.SandboxID).Scan(&o.Seq); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO observations ("+observationCols+") VALUES (?, ?, ?, ?, ?, ?, ?)",
			o.TenantID, o.SandboxID, o.Seq, created, o.Kind, o.Principal, o.Payload)
		if s.isUnique(err) {
			return fmt.Errorf("seq %d taken concurrently: %w", o.Seq, errs.ErrConflict)
		}
		return err
	})
	if err != nil {
		return store.Observation{}, fmt.Errorf("append observation: %w", err)
	}
	return o, nil
}

// ListObservations returns a page of the sandbox's observations by seq.
func (s *Store) ListObservations(ctx context.Context, tenantID, sandboxID string, f store.ObservationFilter) ([]store.Observation, error) {
	if err := validateSandboxRef(tenantID, sandboxID); err != nil {
		return nil, fmt.Errorf("list observations of sandbox %s: %w", sandboxID, err)
	}
	limit, err := listLimit(f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list observations of sandbox %s: %w", sandboxID, err)
	}
	if f.After < 0 {
		return nil, fmt.Errorf("list observations of sandbox %s: cursor %d: %w", sandboxID, f.After, errs.ErrInvalid)
	}
	q := "SELECT " + observationCols + " FROM observations WHERE tenant_id = ? AND sandbox_id = ? AND seq > ?"
	args := []any{tenantID, sandboxID, f.After}
	if f.Kind != "" {
		q += " AND kind = ?"
		args = append(args, f.Kind)
	}
	var out []store.Observation
	err = s.readTx(ctx, func(tx *txn) error {
		if err := sandboxOfTenant(ctx, tx, tenantID, sandboxID); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, q+" ORDER BY seq LIMIT ?", append(args, limit)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = []store.Observation{}
		for rows.Next() {
			var o store.Observation
			var created string
			if err := rows.Scan(&o.TenantID, &o.SandboxID, &o.Seq, &created, &o.Kind, &o.Principal, &o.Payload); err != nil {
				return err
			}
			if o.Time, err = parseTime(created); err != nil {
				return err
			}
			out = append(out, o)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list observations of sandbox %s: %w", sandboxID, err)
	}
	return out, nil
}

func validateKVKey(tenantID, sandboxID, key string) error {
	if err := validateSandboxRef(tenantID, sandboxID); err != nil {
		return err
	}
	if key == "" {
		return fmt.Errorf("empty key: %w", errs.ErrInvalid)
	}
	return nil
}

// PutKV stores a key-value entry with optimistic concurrency.
func (s *Store) PutKV(ctx context.Context, w store.KVWrite) (store.KVEntry, error) {
	if err := validateKVKey(w.TenantID, w.SandboxID, w.Key); err != nil {
		return store.KVEntry{}, fmt.Errorf("put key %s: %w", w.Key, err)
	}
	if w.IfVersion < store.AnyVersion {
		return store.KVEntry{}, fmt.Errorf("put key %s: if-version %d: %w", w.Key, w.IfVersion, errs.ErrInvalid)
	}
	if err := checkPayload("value", w.Value); err != nil {
		return store.KVEntry{}, fmt.Errorf("put key %s: %w", w.Key, err)
	}
	ts, at, err := timeOrNow(w.At)
	if err != nil {
		return store.KVEntry{}, fmt.Errorf("put key %s: time: %w", w.Key, err)
	}
	out := store.KVEntry{TenantID: w.TenantID, SandboxID: w.SandboxID, Key: w.Key, Value: orNull(w.Value), UpdatedAt: at}
	err = s.writeTx(ctx, func(tx *txn) error {
		if err := sandboxOfTenant(ctx, tx, w.TenantID, w.SandboxID); err != nil {
			return err
		}
		var version int64
		var created string
		err := tx.QueryRowContext(ctx, "SELECT version, created_at FROM kv_entries WHERE sandbox_id = ? AND kv_key = ?",
			w.SandboxID, w.Key).Scan(&version, &created)
		exists := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err := checkKVVersion(w.IfVersion, version); err != nil {
			return err
		}
		out.Version = version + 1
		if !exists {
			out.CreatedAt = at
			_, err := tx.ExecContext(ctx, "INSERT INTO kv_entries ("+kvCols+") VALUES (?, ?, ?, ?, ?, ?, ?)",
				w.TenantID, w.SandboxID, w.Key, out.Value, out.Version, ts, ts)
			if s.isUnique(err) {
				return fmt.Errorf("key created concurrently: %w", errs.ErrConflict)
			}
			return err
		}
		if out.CreatedAt, err = parseTime(created); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, "UPDATE kv_entries SET value = ?, version = ?, updated_at = ?"+
			" WHERE sandbox_id = ? AND kv_key = ? AND version = ?", out.Value, out.Version, ts, w.SandboxID, w.Key, version)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("version moved: %w", errs.ErrConflict)
		}
		return nil
	})
	if err != nil {
		return store.KVEntry{}, fmt.Errorf("put key %s: %w", w.Key, err)
	}
	return out, nil
}

// checkKVVersion checks an if-version against the stored version (0:
// absent).
func checkKVVersion(ifVersion, version int64) error {
	if ifVersion == store.AnyVersion || ifVersion == version {
		return nil
	}
	if version == 0 {
		return fmt.Errorf("if-version %d: the key does not exist: %w", ifVersion, errs.ErrConflict)
	}
	if ifVersion == 0 {
		return fmt.Errorf("if-version 0: the key exists at version %d: %w", version, errs.ErrConflict)
	}
	return fmt.Errorf("if-version %d is stale, the key is at version %d: %w", ifVersion, version, errs.ErrConflict)
}

// GetKV returns an entry of the sandbox.
func (s *Store) GetKV(ctx context.Context, tenantID, sandboxID, key string) (store.KVEntry, error) {
	if err := validateKVKey(tenantID, sandboxID, key); err != nil {
		return store.KVEntry{}, fmt.Errorf("get key %s: %w", key, err)
	}
	e, err := scanKV(s.r.QueryRowContext(ctx, "SELECT "+kvCols+" FROM kv_entries WHERE tenant_id = ? AND sandbox_id = ? AND kv_key = ?",
		tenantID, sandboxID, key))
	if errors.Is(err, sql.ErrNoRows) {
		if err := sandboxOfTenant(ctx, s.r, tenantID, sandboxID); err != nil {
			return store.KVEntry{}, fmt.Errorf("get key %s: %w", key, err)
		}
		return store.KVEntry{}, fmt.Errorf("get key %s: %w", key, errs.ErrNotFound)
	}
	if err != nil {
		return store.KVEntry{}, fmt.Errorf("get key %s: %w", key, err)
	}
	return e, nil
}

// prefixEnd returns the smallest string greater than every string that
// starts with p (in byte order), or ok false when there is none.
func prefixEnd(p string) (end string, ok bool) {
	b := []byte(p)
	for len(b) > 0 && b[len(b)-1] == 0xff {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return "", false
	}
	b[len(b)-1]++
	return string(b), true
}

// ListKV returns a page of the sandbox's entries by key.
func (s *Store) ListKV(ctx context.Context, tenantID, sandboxID string, f store.KVFilter) ([]store.KVEntry, error) {
	if err := validateSandboxRef(tenantID, sandboxID); err != nil {
		return nil, fmt.Errorf("list keys of sandbox %s: %w", sandboxID, err)
	}
	limit, err := listLimit(f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list keys of sandbox %s: %w", sandboxID, err)
	}
	// A range, not LIKE: LIKE has wildcards to escape and is
	// case-insensitive in SQLite.
	q := "SELECT " + kvCols + " FROM kv_entries WHERE tenant_id = ? AND sandbox_id = ? AND kv_key >= ?"
	args := []any{tenantID, sandboxID, f.Prefix}
	if end, ok := prefixEnd(f.Prefix); ok {
		q += " AND kv_key < ?"
		args = append(args, end)
	}
	if f.After != "" {
		q += " AND kv_key > ?"
		args = append(args, f.After)
	}
	var out []store.KVEntry
	err = s.readTx(ctx, func(tx *txn) error {
		if err := sandboxOfTenant(ctx, tx, tenantID, sandboxID); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, q+" ORDER BY kv_key LIMIT ?", append(args, limit)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		out, err = scanAll(rows, scanKV)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list keys of sandbox %s: %w", sandboxID, err)
	}
	return out, nil
}

// DeleteKV removes an entry, checking ifVersion first.
func (s *Store) DeleteKV(ctx context.Context, tenantID, sandboxID, key string, ifVersion int64) error {
	if err := validateKVKey(tenantID, sandboxID, key); err != nil {
		return fmt.Errorf("delete key %s: %w", key, err)
	}
	if ifVersion < store.AnyVersion {
		return fmt.Errorf("delete key %s: if-version %d: %w", key, ifVersion, errs.ErrInvalid)
	}
	err := s.writeTx(ctx, func(tx *txn) error {
		if err := sandboxOfTenant(ctx, tx, tenantID, sandboxID); err != nil {
			return err
		}
		var version int64
		err := tx.QueryRowContext(ctx, "SELECT version FROM kv_entries WHERE sandbox_id = ? AND kv_key = ?",
			sandboxID, key).Scan(&version)
		if errors.Is(err, sql.ErrNoRows) {
			if ifVersion > 0 {
				return checkKVVersion(ifVersion, 0)
			}
			return errs.ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := checkKVVersion(ifVersion, version); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "DELETE FROM kv_entries WHERE sandbox_id = ? AND kv_key = ? AND version = ?", sandboxID, key, version)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete key %s: %w", key, err)
	}
	return nil
}

func scanTask(sc scanner) (store.Task, error) {
	var t store.Task
	var state, created, updated string
	if err := sc.Scan(&t.TenantID, &t.SandboxID, &t.ID, &state, &t.Payload, &created, &updated); err != nil {
		return store.Task{}, err
	}
	t.State = store.TaskState(state)
	var err error
	if t.CreatedAt, err = parseTime(created); err != nil {
		return store.Task{}, err
	}
	if t.UpdatedAt, err = parseTime(updated); err != nil {
		return store.Task{}, err
	}
	return t, nil
}

func scanKV(sc scanner) (store.KVEntry, error) {
	var e store.KVEntry
	var created, updated string
	if err := sc.Scan(&e.TenantID, &e.SandboxID, &e.Key, &e.Value, &e.Version, &created, &updated); err != nil {
		return store.KVEntry{}, err
	}
	var err error
	if e.CreatedAt, err = parseTime(created); err != nil {
		return store.KVEntry{}, err
	}
	if e.UpdatedAt, err = parseTime(updated); err != nil {
		return store.KVEntry{}, err
	}
	return e, nil
}

// PruneObservations deletes the tenant's observations made before before,
// each sandbox's newest excepted; see store.TaskStore.
func (s *Store) PruneObservations(ctx context.Context, tenantID string, before time.Time) (int64, error) {
	cut, err := FormatTime(before)
	if err != nil {
		return 0, fmt.Errorf("prune observations: %w", err)
	}
	var n int64
	err = s.writeTx(ctx, func(tx *txn) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM observations WHERE tenant_id = ? AND created_at < ?
			AND seq < (SELECT MAX(o.seq) FROM observations o WHERE o.sandbox_id = observations.sandbox_id)`, tenantID, cut)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune observations of tenant %s: %w", tenantID, err)
	}
	return n, nil
}
