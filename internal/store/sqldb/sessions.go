package sqldb

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// The session log. An append is one IMMEDIATE transaction on the writer
// connection: it reads the run (tenant, status, last_seq) and its thread's
// retention, resolves idempotency keys against stored events, checks every
// tool_result's intent, inserts the new events with seqs last_seq+1 ...,
// records new model sessions, bumps last_seq with a compare-and-swap and
// applies the retention to the run. All of that is in the WAL, fsynced,
// when AppendEvents returns, or none of it ever becomes visible; since one
// connection writes, concurrent appends to a run queue and get consecutive
// seqs.

const threadCols = "id, tenant_id, sandbox_id, name, keep_last, keep_within_ns, created_at"

const runCols = "id, tenant_id, sandbox_id, thread_id, status, last_seq, started_at, ended_at"

const eventCols = "run_id, seq, created_at, type, model_session, idem_key, intent_seq, payload"

func validateRunKey(k store.RunKey) error {
	switch {
	case k.TenantID == "":
		return fmt.Errorf("empty tenant: %w", errs.ErrInvalid)
	case k.SandboxID == "":
		return fmt.Errorf("empty sandbox: %w", errs.ErrInvalid)
	case k.RunID == "":
		return fmt.Errorf("empty run id: %w", errs.ErrInvalid)
	}
	return nil
}

func validateSandboxRef(tenantID, sandboxID string) error {
	switch {
	case tenantID == "":
		return fmt.Errorf("empty tenant: %w", errs.ErrInvalid)
	case sandboxID == "":
		return fmt.Errorf("empty sandbox: %w", errs.ErrInvalid)
	}
	return nil
}

func validateRetention(r store.Retention) error {
	if r.KeepLast < 0 || r.KeepLast > store.MaxKeepLast {
		return fmt.Errorf("retention keep_last %d is not between 0 and %d: %w", r.KeepLast, store.MaxKeepLast, errs.ErrInvalid)
	}
	if r.KeepWithin < 0 {
		return fmt.Errorf("retention keep_within %s is negative: %w", r.KeepWithin, errs.ErrInvalid)
	}
	return nil
}

// CreateThread stores a new thread; see store.SessionStore.
func (s *Store) CreateThread(ctx context.Context, t store.Thread) (store.Thread, error) {
	if err := validateSandboxRef(t.TenantID, t.SandboxID); err != nil {
		return store.Thread{}, fmt.Errorf("create thread %s: %w", t.ID, err)
	}
	if t.ID == "" || t.Name == "" {
		return store.Thread{}, fmt.Errorf("create thread %q: empty id or name: %w", t.ID, errs.ErrInvalid)
	}
	if err := validateRetention(t.Retention); err != nil {
		return store.Thread{}, fmt.Errorf("create thread %s: %w", t.ID, err)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = now()
	}
	created, err := FormatTime(t.CreatedAt)
	if err != nil {
		return store.Thread{}, fmt.Errorf("create thread %s: created_at: %w", t.ID, err)
	}
	t.CreatedAt = normTime(t.CreatedAt)
	err = s.writeTx(ctx, func(tx *txn) error {
		if err := sandboxOfTenant(ctx, tx, t.TenantID, t.SandboxID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO session_threads ("+threadCols+") VALUES (?, ?, ?, ?, ?, ?, ?)",
			t.ID, t.TenantID, t.SandboxID, t.Name, t.Retention.KeepLast, int64(t.Retention.KeepWithin), created)
		if s.isUnique(err) {
			return fmt.Errorf("thread id or name %q is taken: %w", t.Name, errs.ErrConflict)
		}
		return err
	})
	if err != nil {
		return store.Thread{}, fmt.Errorf("create thread %s: %w", t.ID, err)
	}
	return t, nil
}

// GetThread finds a thread of the sandbox by id, else by name.
func (s *Store) GetThread(ctx context.Context, tenantID, sandboxID, idOrName string) (store.Thread, error) {
	if err := validateSandboxRef(tenantID, sandboxID); err != nil {
		return store.Thread{}, fmt.Errorf("get thread %s: %w", idOrName, err)
	}
	if idOrName == "" {
		return store.Thread{}, fmt.Errorf("get thread: empty id: %w", errs.ErrInvalid)
	}
	t, err := getThread(ctx, s.r, tenantID, sandboxID, idOrName)
	if err != nil {
		return store.Thread{}, fmt.Errorf("get thread %s: %w", idOrName, err)
	}
	return t, nil
}

func getThread(ctx context.Context, q querier, tenantID, sandboxID, idOrName string) (store.Thread, error) {
	for _, col := range []string{"id", "name"} {
		t, err := scanThread(q.QueryRowContext(ctx, "SELECT "+threadCols+" FROM session_threads"+
			" WHERE tenant_id = ? AND sandbox_id = ? AND "+col+" = ?", tenantID, sandboxID, idOrName))
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		return t, err
	}
	return store.Thread{}, errs.ErrNotFound
}

// ListThreads lists the sandbox's threads by creation time, then id.
func (s *Store) ListThreads(ctx context.Context, tenantID, sandboxID string) ([]store.Thread, error) {
	if err := validateSandboxRef(tenantID, sandboxID); err != nil {
		return nil, fmt.Errorf("list threads of sandbox %s: %w", sandboxID, err)
	}
	var out []store.Thread
	err := s.readTx(ctx, func(tx *txn) error {
		if err := sandboxOfTenant(ctx, tx, tenantID, sandboxID); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, "SELECT "+threadCols+" FROM session_threads"+
			" WHERE tenant_id = ? AND sandbox_id = ? ORDER BY created_at, id", tenantID, sandboxID)
		if err != nil {
			return err
		}
		defer rows.Close()
		out, err = scanAll(rows, scanThread)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list threads of sandbox %s: %w", sandboxID, err)
	}
	return out, nil
}

// SetThreadRetention replaces a thread's retention.
func (s *Store) SetThreadRetention(ctx context.Context, tenantID, sandboxID, threadID string, r store.Retention) (store.Thread, error) {
	if err := validateSandboxRef(tenantID, sandboxID); err != nil {
		return store.Thread{}, fmt.Errorf("set retention of thread %s: %w", threadID, err)
	}
	if threadID == "" {
		return store.Thread{}, fmt.Errorf("set retention of thread: empty id: %w", errs.ErrInvalid)
	}
	if err := validateRetention(r); err != nil {
		return store.Thread{}, fmt.Errorf("set retention of thread %s: %w", threadID, err)
	}
	var out store.Thread
	err := s.writeTx(ctx, func(tx *txn) error {
		res, err := tx.ExecContext(ctx, "UPDATE session_threads SET keep_last = ?, keep_within_ns = ?"+
			" WHERE tenant_id = ? AND sandbox_id = ? AND id = ?", r.KeepLast, int64(r.KeepWithin), tenantID, sandboxID, threadID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return errs.ErrNotFound
		}
		out, err = getThread(ctx, tx, tenantID, sandboxID, threadID)
		return err
	})
	if err != nil {
		return store.Thread{}, fmt.Errorf("set retention of thread %s: %w", threadID, err)
	}
	return out, nil
}

// PruneThread applies the thread's retention to every run of it.
func (s *Store) PruneThread(ctx context.Context, tenantID, sandboxID, threadID string, at time.Time) (int64, error) {
	if err := validateSandboxRef(tenantID, sandboxID); err != nil {
		return 0, fmt.Errorf("prune thread %s: %w", threadID, err)
	}
	if threadID == "" {
		return 0, fmt.Errorf("prune thread: empty id: %w", errs.ErrInvalid)
	}
	var n int64
	err := s.writeTx(ctx, func(tx *txn) error {
		t, err := getThread(ctx, tx, tenantID, sandboxID, threadID)
		if err != nil {
			return err
		}
		if t.ID != threadID {
			return errs.ErrNotFound // found by name: PruneThread takes ids
		}
		n, err = prune(ctx, tx, "e.run_id IN (SELECT id FROM session_runs WHERE thread_id = ?)", t.ID, t.Retention, at)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune thread %s: %w", threadID, err)
	}
	return n, nil
}

// prune deletes the events of the runs that scope (a condition on e.run_id
// with one argument, arg) selects that no rule of r keeps. A run's newest
// event, its newest checkpoint and its in-doubt tool intents are kept
// whatever the rules say.
func prune(ctx context.Context, tx *txn, scope, arg string, r store.Retention, at time.Time) (int64, error) {
	if r.IsZero() {
		return 0, nil
	}
	q := "DELETE FROM session_events WHERE (run_id, seq) IN (SELECT e.run_id, e.seq FROM session_events e WHERE " + scope +
		" AND e.seq < (SELECT r.last_seq FROM session_runs r WHERE r.id = e.run_id)" +
		" AND NOT (e.type = 'tool_intent' AND NOT EXISTS (SELECT 1 FROM session_events x" +
		" WHERE x.run_id = e.run_id AND x.intent_seq = e.seq AND x.type = 'tool_result'))" +
		" AND NOT (e.type = 'checkpoint' AND e.seq = (SELECT MAX(c.seq) FROM session_events c" +
		" WHERE c.run_id = e.run_id AND c.type = 'checkpoint'))"
	args := []any{arg}
	if r.KeepLast > 0 {
		q += " AND e.seq <= (SELECT r.last_seq FROM session_runs r WHERE r.id = e.run_id) - ?"
		args = append(args, r.KeepLast)
	}
	if r.KeepWithin > 0 {
		cutoff, err := FormatTime(at.Add(-r.KeepWithin))
		if err != nil {
			return 0, err
		}
		q += " AND e.created_at < ?"
		args = append(args, cutoff)
	}
	res, err := tx.ExecContext(ctx, q+")", args...)
	if err != nil {
		return 0, fmt.Errorf("apply retention: %w", err)
	}
	return res.RowsAffected()
}

// CreateRun stores a new running run of a thread.
func (s *Store) CreateRun(ctx context.Context, r store.Run) (store.Run, error) {
	if err := validateSandboxRef(r.TenantID, r.SandboxID); err != nil {
		return store.Run{}, fmt.Errorf("create run %s: %w", r.ID, err)
	}
	if r.ID == "" || r.ThreadID == "" {
		return store.Run{}, fmt.Errorf("create run %q: empty id or thread: %w", r.ID, errs.ErrInvalid)
	}
	if r.StartedAt.IsZero() {
		r.StartedAt = now()
	}
	started, err := FormatTime(r.StartedAt)
	if err != nil {
		return store.Run{}, fmt.Errorf("create run %s: started_at: %w", r.ID, err)
	}
	r.StartedAt, r.Status, r.LastSeq, r.EndedAt = normTime(r.StartedAt), store.RunRunning, 0, nil
	err = s.writeTx(ctx, func(tx *txn) error {
		var one int
		err := tx.QueryRowContext(ctx, "SELECT 1 FROM session_threads WHERE tenant_id = ? AND sandbox_id = ? AND id = ?",
			r.TenantID, r.SandboxID, r.ThreadID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("thread %s: %w", r.ThreadID, errs.ErrNotFound)
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO session_runs ("+runCols+") VALUES (?, ?, ?, ?, ?, 0, ?, NULL)",
			r.ID, r.TenantID, r.SandboxID, r.ThreadID, string(store.RunRunning), started)
		if s.isUnique(err) {
			return fmt.Errorf("run id is taken: %w", errs.ErrConflict)
		}
		return err
	})
	if err != nil {
		return store.Run{}, fmt.Errorf("create run %s: %w", r.ID, err)
	}
	return r, nil
}

// GetRun returns a run.
func (s *Store) GetRun(ctx context.Context, k store.RunKey) (store.Run, error) {
	if err := validateRunKey(k); err != nil {
		return store.Run{}, fmt.Errorf("get run %s: %w", k.RunID, err)
	}
	r, err := getRun(ctx, s.r, k)
	if err != nil {
		return store.Run{}, fmt.Errorf("get run %s: %w", k.RunID, err)
	}
	return r, nil
}

func getRun(ctx context.Context, q querier, k store.RunKey) (store.Run, error) {
	r, err := scanRun(q.QueryRowContext(ctx, "SELECT "+runCols+" FROM session_runs WHERE id = ? AND tenant_id = ? AND sandbox_id = ?",
		k.RunID, k.TenantID, k.SandboxID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Run{}, errs.ErrNotFound
	}
	return r, err
}

// ListRuns lists a thread's runs by start time, then id.
func (s *Store) ListRuns(ctx context.Context, tenantID, sandboxID, threadID string) ([]store.Run, error) {
	if err := validateSandboxRef(tenantID, sandboxID); err != nil {
		return nil, fmt.Errorf("list runs of thread %s: %w", threadID, err)
	}
	if threadID == "" {
		return nil, fmt.Errorf("list runs: empty thread: %w", errs.ErrInvalid)
	}
	var out []store.Run
	err := s.readTx(ctx, func(tx *txn) error {
		var one int
		err := tx.QueryRowContext(ctx, "SELECT 1 FROM session_threads WHERE tenant_id = ? AND sandbox_id = ? AND id = ?",
			tenantID, sandboxID, threadID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.ErrNotFound
		}
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, "SELECT "+runCols+" FROM session_runs WHERE thread_id = ? ORDER BY started_at, id", threadID)
		if err != nil {
			return err
		}
		defer rows.Close()
		out, err = scanAll(rows, scanRun)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list runs of thread %s: %w", threadID, err)
	}
	return out, nil
}

// EndRun gives a running run its final status.
func (s *Store) EndRun(ctx context.Context, k store.RunKey, status store.RunStatus, at time.Time) (store.Run, error) {
	if err := validateRunKey(k); err != nil {
		return store.Run{}, fmt.Errorf("end run %s: %w", k.RunID, err)
	}
	if !status.Ended() {
		return store.Run{}, fmt.Errorf("end run %s: status %q is not a final status: %w", k.RunID, status, errs.ErrInvalid)
	}
	if at.IsZero() {
		at = now()
	}
	ended, err := FormatTime(at)
	if err != nil {
		return store.Run{}, fmt.Errorf("end run %s: %w", k.RunID, err)
	}
	var out store.Run
	err = s.writeTx(ctx, func(tx *txn) error {
		r, err := getRun(ctx, tx, k)
		if err != nil {
			return err
		}
		if r.Status != store.RunRunning {
			return fmt.Errorf("the run already ended (%s): %w", r.Status, errs.ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, "UPDATE session_runs SET status = ?, ended_at = ? WHERE id = ? AND status = ?",
			string(status), ended, k.RunID, string(store.RunRunning)); err != nil {
			return err
		}
		t := normTime(at)
		r.Status, r.EndedAt = status, &t
		out = r
		return nil
	})
	if err != nil {
		return store.Run{}, fmt.Errorf("end run %s: %w", k.RunID, err)
	}
	return out, nil
}

// validateEventWrite checks what can be checked without the run.
func validateEventWrite(e store.EventWrite) error {
	switch {
	case !e.Type.Valid():
		return fmt.Errorf("unknown event type %q: %w", e.Type, errs.ErrInvalid)
	case len(e.Payload) > store.MaxEventPayloadBytes:
		return fmt.Errorf("payload is %d bytes, over the limit of %d bytes: %w", len(e.Payload), store.MaxEventPayloadBytes, errs.ErrTooLarge)
	case e.Type == store.EventToolResult && e.Intent <= 0:
		return fmt.Errorf("a tool_result needs the seq of its tool_intent: %w", errs.ErrInvalid)
	case e.Type != store.EventToolResult && e.Intent != 0:
		return fmt.Errorf("only a tool_result may name an intent: %w", errs.ErrInvalid)
	}
	return nil
}

// sameEvent reports whether a replayed write matches the stored event.
func sameEvent(w store.EventWrite, e store.Event) bool {
	return w.Type == e.Type && w.Intent == e.Intent && w.ModelSession == e.ModelSession && bytes.Equal(w.Payload, e.Payload)
}

// AppendEvents appends a batch of events to a run in one transaction.
func (s *Store) AppendEvents(ctx context.Context, k store.RunKey, evs []store.EventWrite) ([]store.Event, error) {
	if err := validateRunKey(k); err != nil {
		return nil, fmt.Errorf("append to run %s: %w", k.RunID, err)
	}
	if len(evs) == 0 || len(evs) > store.MaxEventBatch {
		return nil, fmt.Errorf("append to run %s: %d events; a batch holds 1 to %d: %w", k.RunID, len(evs), store.MaxEventBatch, errs.ErrInvalid)
	}
	ws := make([]store.EventWrite, len(evs))
	stamps := make([]string, len(evs))
	ts := now()
	for i, e := range evs {
		if err := validateEventWrite(e); err != nil {
			return nil, fmt.Errorf("append to run %s: event %d: %w", k.RunID, i, err)
		}
		if len(e.Payload) == 0 {
			e.Payload = []byte("null")
		}
		if e.Time.IsZero() {
			e.Time = ts
		}
		var err error
		if stamps[i], err = FormatTime(e.Time); err != nil {
			return nil, fmt.Errorf("append to run %s: event %d: %w", k.RunID, i, err)
		}
		e.Time = normTime(e.Time)
		ws[i] = e
	}
	out := make([]store.Event, len(ws))
	err := s.writeTx(ctx, func(tx *txn) error {
		var status string
		var last, keepLast, keepWithin int64
		err := tx.QueryRowContext(ctx, "SELECT r.status, r.last_seq, t.keep_last, t.keep_within_ns FROM session_runs r"+
			" JOIN session_threads t ON t.id = r.thread_id WHERE r.id = ? AND r.tenant_id = ? AND r.sandbox_id = ?",
			k.RunID, k.TenantID, k.SandboxID).Scan(&status, &last, &keepLast, &keepWithin)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.ErrNotFound
		}
		if err != nil {
			return err
		}
		seq := last
		var ins func(args ...any) error // the prepared insert, made on first use
		byKey := map[string]int{}       // idempotency key → index in out
		intents := map[int64]bool{}     // seqs of tool intents stored by this batch
		sessions := map[string]bool{}   // model sessions seen in this batch
		for i, w := range ws {
			if w.IdempotencyKey != "" {
				if j, ok := byKey[w.IdempotencyKey]; ok {
					if !sameEvent(w, out[j]) {
						return fmt.Errorf("event %d: idempotency key %q was used in this batch for a different event: %w", i, w.IdempotencyKey, errs.ErrConflict)
					}
					out[i] = out[j]
					continue
				}
				prev, err := scanEvent(tx.QueryRowContext(ctx, "SELECT "+eventCols+" FROM session_events WHERE run_id = ? AND idem_key = ?",
					k.RunID, w.IdempotencyKey))
				switch {
				case err == nil:
					if !sameEvent(w, prev) {
						return fmt.Errorf("event %d: idempotency key %q is event %d, which differs: %w", i, w.IdempotencyKey, prev.Seq, errs.ErrConflict)
					}
					out[i] = prev
					byKey[w.IdempotencyKey] = i
					continue
				case !errors.Is(err, sql.ErrNoRows):
					return err
				}
			}
			if status != string(store.RunRunning) {
				return fmt.Errorf("the run has ended (%s); start a new run: %w", status, errs.ErrConflict)
			}
			if w.Type == store.EventToolResult && !intents[w.Intent] {
				var typ string
				err := tx.QueryRowContext(ctx, "SELECT type FROM session_events WHERE run_id = ? AND seq = ?", k.RunID, w.Intent).Scan(&typ)
				if errors.Is(err, sql.ErrNoRows) || (err == nil && typ != string(store.EventToolIntent)) {
					return fmt.Errorf("event %d: intent %d is not a tool_intent of this run: %w", i, w.Intent, errs.ErrInvalid)
				}
				if err != nil {
					return err
				}
			}
			seq++
			var key any
			if w.IdempotencyKey != "" {
				key = w.IdempotencyKey
				byKey[w.IdempotencyKey] = i
			}
			if ins == nil {
				var done func()
				if ins, done, err = tx.repeated(ctx, "INSERT INTO session_events ("+eventCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?)"); err != nil {
					return err
				}
				defer done()
			}
			if err := ins(k.RunID, seq, stamps[i], string(w.Type), w.ModelSession, key, w.Intent, w.Payload); err != nil {
				return err
			}
			if w.Type == store.EventToolIntent {
				intents[seq] = true
			}
			if w.ModelSession != "" && !sessions[w.ModelSession] {
				sessions[w.ModelSession] = true
				if _, err := tx.ExecContext(ctx, "INSERT INTO session_model_sessions (run_id, id, first_seq, created_at)"+
					" VALUES (?, ?, ?, ?) ON CONFLICT (run_id, id) DO NOTHING", k.RunID, w.ModelSession, seq, stamps[i]); err != nil {
					return err
				}
			}
			out[i] = store.Event{RunID: k.RunID, Seq: seq, Time: w.Time, Type: w.Type, ModelSession: w.ModelSession,
				IdempotencyKey: w.IdempotencyKey, Intent: w.Intent, Payload: w.Payload}
		}
		if seq == last {
			return nil // only replays
		}
		res, err := tx.ExecContext(ctx, "UPDATE session_runs SET last_seq = ? WHERE id = ? AND last_seq = ?", seq, k.RunID, last)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("last seq moved: %w", errs.ErrConflict)
		}
		_, err = prune(ctx, tx, "e.run_id = ?", k.RunID, store.Retention{KeepLast: int(keepLast), KeepWithin: time.Duration(keepWithin)}, ts)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("append to run %s: %w", k.RunID, err)
	}
	return out, nil
}

// ListEvents returns up to limit events of the run with seq > after.
func (s *Store) ListEvents(ctx context.Context, k store.RunKey, after int64, limit int) ([]store.Event, error) {
	if err := validateRunKey(k); err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", k.RunID, err)
	}
	if limit < 1 || limit > store.MaxEventList || after < 0 {
		return nil, fmt.Errorf("list events of run %s: limit %d (1 to %d), after %d: %w", k.RunID, limit, store.MaxEventList, after, errs.ErrInvalid)
	}
	var out []store.Event
	err := s.readTx(ctx, func(tx *txn) error {
		if _, err := getRun(ctx, tx, k); err != nil {
			return err
		}
		var err error
		out, err = queryEvents(ctx, tx, "SELECT "+eventCols+" FROM session_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
			k.RunID, after, limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", k.RunID, err)
	}
	return out, nil
}

// ResumeRun returns the run's safe point, in-doubt intents and model
// sessions from one read snapshot.
func (s *Store) ResumeRun(ctx context.Context, k store.RunKey) (store.RunResume, error) {
	if err := validateRunKey(k); err != nil {
		return store.RunResume{}, fmt.Errorf("resume run %s: %w", k.RunID, err)
	}
	var out store.RunResume
	err := s.readTx(ctx, func(tx *txn) error {
		r, err := getRun(ctx, tx, k)
		if err != nil {
			return err
		}
		out.Run = r
		for _, q := range []string{
			"SELECT " + eventCols + " FROM session_events WHERE run_id = ? AND type = 'checkpoint' ORDER BY seq DESC LIMIT 1",
			"SELECT " + eventCols + " FROM session_events WHERE run_id = ? ORDER BY seq DESC LIMIT 1",
		} {
			e, err := scanEvent(tx.QueryRowContext(ctx, q, k.RunID))
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			out.SafePoint = &e
			break
		}
		if out.InDoubt, err = queryEvents(ctx, tx, "SELECT "+eventCols+" FROM session_events e"+
			" WHERE e.run_id = ? AND e.type = 'tool_intent' AND NOT EXISTS (SELECT 1 FROM session_events x"+
			" WHERE x.run_id = e.run_id AND x.intent_seq = e.seq AND x.type = 'tool_result') ORDER BY e.seq", k.RunID); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, "SELECT run_id, id, first_seq, created_at FROM session_model_sessions"+
			" WHERE run_id = ? ORDER BY first_seq, id", k.RunID)
		if err != nil {
			return err
		}
		defer rows.Close()
		out.ModelSessions = []store.ModelSession{}
		for rows.Next() {
			var m store.ModelSession
			var created string
			if err := rows.Scan(&m.RunID, &m.ID, &m.FirstSeq, &created); err != nil {
				return err
			}
			if m.CreatedAt, err = parseTime(created); err != nil {
				return err
			}
			out.ModelSessions = append(out.ModelSessions, m)
		}
		return rows.Err()
	})
	if err != nil {
		return store.RunResume{}, fmt.Errorf("resume run %s: %w", k.RunID, err)
	}
	return out, nil
}

func queryEvents(ctx context.Context, q querier, query string, args ...any) ([]store.Event, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Event{}
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func scanEvent(sc scanner) (store.Event, error) {
	var e store.Event
	var created, typ string
	var key sql.NullString
	if err := sc.Scan(&e.RunID, &e.Seq, &created, &typ, &e.ModelSession, &key, &e.Intent, &e.Payload); err != nil {
		return store.Event{}, err
	}
	e.Type, e.IdempotencyKey = store.EventType(typ), key.String
	var err error
	if e.Time, err = parseTime(created); err != nil {
		return store.Event{}, err
	}
	return e, nil
}

func scanThread(sc scanner) (store.Thread, error) {
	var t store.Thread
	var created string
	var within int64
	if err := sc.Scan(&t.ID, &t.TenantID, &t.SandboxID, &t.Name, &t.Retention.KeepLast, &within, &created); err != nil {
		return store.Thread{}, err
	}
	t.Retention.KeepWithin = time.Duration(within)
	var err error
	if t.CreatedAt, err = parseTime(created); err != nil {
		return store.Thread{}, err
	}
	return t, nil
}

func scanRun(sc scanner) (store.Run, error) {
	var r store.Run
	var status, started string
	var ended sql.NullString
	if err := sc.Scan(&r.ID, &r.TenantID, &r.SandboxID, &r.ThreadID, &status, &r.LastSeq, &started, &ended); err != nil {
		return store.Run{}, err
	}
	r.Status = store.RunStatus(status)
	var err error
	if r.StartedAt, err = parseTime(started); err != nil {
		return store.Run{}, err
	}
	if r.EndedAt, err = parseTimePtr(ended); err != nil {
		return store.Run{}, err
	}
	return r, nil
}
