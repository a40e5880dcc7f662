package session

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/names"
	"github.com/stead-dev/stead/internal/store"
)

// Limits of the API on top of the store's.
const (
	// DefaultListLimit is the page size of ListRunEvents when none is given.
	DefaultListLimit = 100
	// maxKeyBytes caps an idempotency key.
	maxKeyBytes = 256
	// maxModelSessionBytes caps a model session id.
	maxModelSessionBytes = 128
	// maxKeepWithin caps a retention's age rule (about 100 years).
	maxKeepWithin = 100 * 365 * 24 * time.Hour
)

var _ api.SessionBackend = (*Sessions)(nil)

// Sessions implements api.SessionBackend on a store.Store. It is safe for
// concurrent use.
type Sessions struct {
	st    store.Store
	admit api.StateAdmitFunc
	// defaults gives the retention of a thread made without one.
	defaults func(ctx context.Context, tenant string) store.Retention
	// now is the clock of retention.
	now func() time.Time

	mu sync.Mutex
	// watch maps a run id to the channel its next change closes; an entry
	// exists only while someone follows the run.
	watch map[string]chan struct{}
}

// New returns a Sessions that keeps its logs in st.
func New(st store.Store) *Sessions {
	return &Sessions{st: st, now: time.Now, watch: map[string]chan struct{}{}}
}

// SetStateAdmit makes every append ask f first for the bytes of its
// payloads (the tenant's state quota); call it before serving.
func (s *Sessions) SetStateAdmit(f api.StateAdmitFunc) { s.admit = f }

// SetDefaultRetention makes f give the retention of a thread created
// without one (the tenant's policy); call it before serving.
func (s *Sessions) SetDefaultRetention(f func(ctx context.Context, tenant string) store.Retention) {
	s.defaults = f
}

// CreateThread creates a thread of the sandbox; without a retention of
// its own it gets the tenant's default (SetDefaultRetention).
func (s *Sessions) CreateThread(ctx context.Context, p api.Principal, sandbox string, req client.CreateThreadRequest) (client.Thread, error) {
	if !names.Valid(req.Name) {
		return client.Thread{}, fmt.Errorf("create thread %q: use 1 to 128 letters, digits, '.', '_' or '-', not starting with '.' or '-': %w", req.Name, errs.ErrInvalid)
	}
	if names.LooksLikeID(req.Name) {
		return client.Thread{}, fmt.Errorf("create thread %q: the name has the form of an id (th-..., run-...): choose another: %w", req.Name, errs.ErrInvalid)
	}
	r, err := retention(req.Retention)
	if err != nil {
		return client.Thread{}, fmt.Errorf("create thread %s: %w", req.Name, err)
	}
	sbID, err := s.sandbox(ctx, p.TenantID, sandbox, true)
	if err != nil {
		return client.Thread{}, fmt.Errorf("create thread %s: %w", req.Name, err)
	}
	if r == (store.Retention{}) && s.defaults != nil {
		r = s.defaults(ctx, p.TenantID)
	}
	t, err := s.st.CreateThread(ctx, store.Thread{ID: newID("th-"), TenantID: p.TenantID, SandboxID: sbID, Name: req.Name, Retention: r})
	if err != nil {
		return client.Thread{}, err
	}
	return viewThread(t), nil
}

// ListThreads lists the sandbox's threads, oldest first.
func (s *Sessions) ListThreads(ctx context.Context, tenant, sandbox string) ([]client.Thread, error) {
	sbID, err := s.sandbox(ctx, tenant, sandbox, false)
	if err != nil {
		return nil, fmt.Errorf("list threads of sandbox %s: %w", sandbox, err)
	}
	ts, err := s.st.ListThreads(ctx, tenant, sbID)
	if err != nil {
		return nil, err
	}
	out := make([]client.Thread, 0, len(ts))
	for _, t := range ts {
		out = append(out, viewThread(t))
	}
	return out, nil
}

// SetThreadRetention replaces a thread's retention; it applies from the
// next append (or PruneThread) on.
func (s *Sessions) SetThreadRetention(ctx context.Context, p api.Principal, sandbox, thread string, req client.Retention) (client.Thread, error) {
	r, err := retention(req)
	if err != nil {
		return client.Thread{}, fmt.Errorf("set retention of thread %s: %w", thread, err)
	}
	sbID, th, err := s.thread(ctx, p.TenantID, sandbox, thread, true)
	if err != nil {
		return client.Thread{}, fmt.Errorf("set retention of thread %s: %w", thread, err)
	}
	t, err := s.st.SetThreadRetention(ctx, p.TenantID, sbID, th.ID, r)
	if err != nil {
		return client.Thread{}, err
	}
	return viewThread(t), nil
}

// PruneThread applies the thread's retention to all its runs now.
func (s *Sessions) PruneThread(ctx context.Context, p api.Principal, sandbox, thread string) (client.PruneResult, error) {
	sbID, th, err := s.thread(ctx, p.TenantID, sandbox, thread, true)
	if err != nil {
		return client.PruneResult{}, fmt.Errorf("prune thread %s: %w", thread, err)
	}
	n, err := s.st.PruneThread(ctx, p.TenantID, sbID, th.ID, s.now())
	if err != nil {
		return client.PruneResult{}, err
	}
	return client.PruneResult{Deleted: n}, nil
}

// StartRun starts a new run of a thread.
func (s *Sessions) StartRun(ctx context.Context, p api.Principal, sandbox, thread string) (client.Run, error) {
	sbID, th, err := s.thread(ctx, p.TenantID, sandbox, thread, true)
	if err != nil {
		return client.Run{}, fmt.Errorf("start run of thread %s: %w", thread, err)
	}
	r, err := s.st.CreateRun(ctx, store.Run{ID: newID("run-"), TenantID: p.TenantID, SandboxID: sbID, ThreadID: th.ID})
	if err != nil {
		return client.Run{}, err
	}
	return viewRun(r), nil
}

// ListRuns lists a thread's runs, oldest first.
func (s *Sessions) ListRuns(ctx context.Context, tenant, sandbox, thread string) ([]client.Run, error) {
	sbID, th, err := s.thread(ctx, tenant, sandbox, thread, false)
	if err != nil {
		return nil, fmt.Errorf("list runs of thread %s: %w", thread, err)
	}
	rs, err := s.st.ListRuns(ctx, tenant, sbID, th.ID)
	if err != nil {
		return nil, err
	}
	out := make([]client.Run, 0, len(rs))
	for _, r := range rs {
		out = append(out, viewRun(r))
	}
	return out, nil
}

// EndRun ends a running run with req.Status (default completed).
func (s *Sessions) EndRun(ctx context.Context, p api.Principal, sandbox, run string, req client.EndRunRequest) (client.Run, error) {
	status := store.RunStatus(req.Status)
	if status == "" {
		status = store.RunCompleted
	}
	if !status.Ended() {
		return client.Run{}, fmt.Errorf("end run %s: status %q: want completed, failed, canceled or interrupted: %w", run, req.Status, errs.ErrInvalid)
	}
	k, err := s.runKey(ctx, p.TenantID, sandbox, run, true)
	if err != nil {
		return client.Run{}, fmt.Errorf("end run %s: %w", run, err)
	}
	r, err := s.st.EndRun(ctx, k, status, time.Time{})
	if err != nil {
		return client.Run{}, err
	}
	s.notify(k.RunID)
	return viewRun(r), nil
}

// AppendRunEvents appends a batch of events to a run, all or nothing.
func (s *Sessions) AppendRunEvents(ctx context.Context, p api.Principal, sandbox, run string, evs []client.AppendEvent) ([]client.Event, error) {
	if len(evs) == 0 || len(evs) > store.MaxEventBatch {
		return nil, fmt.Errorf("append to run %s: %d events; send 1 to %d: %w", run, len(evs), store.MaxEventBatch, errs.ErrInvalid)
	}
	ws := make([]store.EventWrite, len(evs))
	for i, e := range evs {
		w, err := eventWrite(e)
		if err != nil {
			if len(evs) == 1 {
				return nil, fmt.Errorf("append to run %s: %w", run, err)
			}
			return nil, fmt.Errorf("append to run %s: event %d: %w", run, i, err)
		}
		ws[i] = w
	}
	k, err := s.runKey(ctx, p.TenantID, sandbox, run, true)
	if err != nil {
		return nil, fmt.Errorf("append to run %s: %w", run, err)
	}
	var size int64
	for _, w := range ws {
		size += int64(len(w.Payload))
	}
	if err := s.admit.Admit(ctx, p.TenantID, size); err != nil {
		return nil, fmt.Errorf("append to run %s: %w", run, err)
	}
	stored, err := s.st.AppendEvents(ctx, k, ws)
	if err != nil {
		return nil, err
	}
	s.notify(k.RunID)
	out := make([]client.Event, len(stored))
	for i, e := range stored {
		out[i] = viewEvent(e)
	}
	return out, nil
}

// ListRunEvents returns up to limit (0: DefaultListLimit) events with seq
// greater than after.
func (s *Sessions) ListRunEvents(ctx context.Context, tenant, sandbox, run string, after int64, limit int) (client.EventPage, error) {
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 0 || limit > store.MaxEventList || after < 0 {
		return client.EventPage{}, fmt.Errorf("list events of run %s: limit %d (1 to %d), after %d: %w", run, limit, store.MaxEventList, after, errs.ErrInvalid)
	}
	k, err := s.runKey(ctx, tenant, sandbox, run, false)
	if err != nil {
		return client.EventPage{}, fmt.Errorf("list events of run %s: %w", run, err)
	}
	// The run's status is read before its events: if it had ended, the
	// events read next are all there will ever be.
	r, err := s.st.GetRun(ctx, k)
	if err != nil {
		return client.EventPage{}, err
	}
	// One more than asked tells whether there is more.
	evs, err := s.st.ListEvents(ctx, k, after, min(limit+1, store.MaxEventList))
	if err != nil {
		return client.EventPage{}, err
	}
	page := client.EventPage{Events: make([]client.Event, 0, min(len(evs), limit)), Next: after, RunStatus: string(r.Status)}
	if len(evs) > limit || (limit == store.MaxEventList && len(evs) == limit) {
		page.More = true
	}
	for i, e := range evs {
		if i == limit {
			break
		}
		page.Events = append(page.Events, viewEvent(e))
		page.Next = e.Seq
	}
	return page, nil
}

// WatchRun checks the run and returns its change notifier.
func (s *Sessions) WatchRun(ctx context.Context, tenant, sandbox, run string) (func() <-chan struct{}, error) {
	k, err := s.runKey(ctx, tenant, sandbox, run, false)
	if err != nil {
		return nil, fmt.Errorf("follow run %s: %w", run, err)
	}
	if _, err := s.st.GetRun(ctx, k); err != nil {
		return nil, err
	}
	return func() <-chan struct{} { return s.changed(k.RunID) }, nil
}

// ResumeRun returns the run's safe point, in-doubt tool intents and model
// sessions.
func (s *Sessions) ResumeRun(ctx context.Context, tenant, sandbox, run string) (client.RunResume, error) {
	k, err := s.runKey(ctx, tenant, sandbox, run, false)
	if err != nil {
		return client.RunResume{}, fmt.Errorf("resume run %s: %w", run, err)
	}
	r, err := s.st.ResumeRun(ctx, k)
	if err != nil {
		return client.RunResume{}, err
	}
	out := client.RunResume{Run: viewRun(r.Run), InDoubt: make([]client.Event, 0, len(r.InDoubt)),
		ModelSessions: make([]client.ModelSession, 0, len(r.ModelSessions))}
	if r.SafePoint != nil {
		e := viewEvent(*r.SafePoint)
		out.SafePoint = &e
	}
	for _, e := range r.InDoubt {
		out.InDoubt = append(out.InDoubt, viewEvent(e))
	}
	for _, m := range r.ModelSessions {
		out.ModelSessions = append(out.ModelSessions, client.ModelSession{ID: m.ID, FirstSeq: m.FirstSeq, CreatedAt: m.CreatedAt})
	}
	return out, nil
}

// changed returns the channel the run's next change closes.
func (s *Sessions) changed(runID string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.watch[runID]
	if !ok {
		ch = make(chan struct{})
		s.watch[runID] = ch
	}
	return ch
}

// notify wakes the run's followers.
func (s *Sessions) notify(runID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.watch[runID]; ok {
		close(ch)
		delete(s.watch, runID)
	}
}

// sandbox resolves an id or name within the tenant to the sandbox's id. A
// write to a soft-deleted sandbox is errs.ErrConflict.
func (s *Sessions) sandbox(ctx context.Context, tenant, idOrName string, write bool) (string, error) {
	return store.AgentStateSandbox(ctx, s.st, tenant, idOrName, write, "session log")
}

// thread resolves a sandbox and a thread (id or name) of it.
func (s *Sessions) thread(ctx context.Context, tenant, sandbox, thread string, write bool) (string, store.Thread, error) {
	if thread == "" {
		return "", store.Thread{}, fmt.Errorf("empty thread: %w", errs.ErrInvalid)
	}
	sbID, err := s.sandbox(ctx, tenant, sandbox, write)
	if err != nil {
		return "", store.Thread{}, err
	}
	t, err := s.st.GetThread(ctx, tenant, sbID, thread)
	if err != nil {
		return "", store.Thread{}, err
	}
	return sbID, t, nil
}

// runKey resolves a sandbox to the store's key of one of its runs.
func (s *Sessions) runKey(ctx context.Context, tenant, sandbox, run string, write bool) (store.RunKey, error) {
	if run == "" {
		return store.RunKey{}, fmt.Errorf("empty run id: %w", errs.ErrInvalid)
	}
	sbID, err := s.sandbox(ctx, tenant, sandbox, write)
	if err != nil {
		return store.RunKey{}, err
	}
	return store.RunKey{TenantID: tenant, SandboxID: sbID, RunID: run}, nil
}

// retention checks an API retention and converts it.
func retention(r client.Retention) (store.Retention, error) {
	if r.KeepLast < 0 || r.KeepLast > store.MaxKeepLast {
		return store.Retention{}, fmt.Errorf("retention keep_last %d is not between 0 and %d: %w", r.KeepLast, store.MaxKeepLast, errs.ErrInvalid)
	}
	if r.KeepWithinSeconds < 0 || r.KeepWithinSeconds > int64(maxKeepWithin/time.Second) {
		return store.Retention{}, fmt.Errorf("retention keep_within_seconds %d is not between 0 and %d: %w",
			r.KeepWithinSeconds, int64(maxKeepWithin/time.Second), errs.ErrInvalid)
	}
	return store.Retention{KeepLast: r.KeepLast, KeepWithin: time.Duration(r.KeepWithinSeconds) * time.Second}, nil
}

// eventWrite checks an API event and converts it.
func eventWrite(e client.AppendEvent) (store.EventWrite, error) {
	typ := store.EventType(e.Type)
	switch {
	case e.Type == "":
		return store.EventWrite{}, fmt.Errorf("event without a type: %w", errs.ErrInvalid)
	case !typ.Valid():
		return store.EventWrite{}, fmt.Errorf("unknown event type %q: %w", e.Type, errs.ErrInvalid)
	case len(e.Payload) > store.MaxEventPayloadBytes:
		return store.EventWrite{}, fmt.Errorf("%s payload is %d bytes, over the limit of %d bytes: %w", e.Type, len(e.Payload), store.MaxEventPayloadBytes, errs.ErrTooLarge)
	case len(e.Payload) > 0 && !json.Valid(e.Payload):
		return store.EventWrite{}, fmt.Errorf("%s payload is not JSON: %w", e.Type, errs.ErrInvalid)
	case typ == store.EventToolResult && e.Intent <= 0:
		return store.EventWrite{}, fmt.Errorf("a tool_result needs intent: the seq of the tool_intent it answers: %w", errs.ErrInvalid)
	case typ != store.EventToolResult && e.Intent != 0:
		return store.EventWrite{}, fmt.Errorf("a %s may not name an intent (only a tool_result does): %w", e.Type, errs.ErrInvalid)
	}
	if err := printable("idempotency key", e.IdempotencyKey, maxKeyBytes); err != nil {
		return store.EventWrite{}, err
	}
	if err := printable("model session", e.ModelSession, maxModelSessionBytes); err != nil {
		return store.EventWrite{}, err
	}
	return store.EventWrite{Type: typ, ModelSession: e.ModelSession, IdempotencyKey: e.IdempotencyKey, Intent: e.Intent, Payload: e.Payload}, nil
}

func printable(what, v string, maxBytes int) error {
	if len(v) > maxBytes {
		return fmt.Errorf("%s is %d bytes, at most %d: %w", what, len(v), maxBytes, errs.ErrInvalid)
	}
	if strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("%s %q: control characters are not allowed: %w", what, v, errs.ErrInvalid)
	}
	return nil
}

func newID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

func viewThread(t store.Thread) client.Thread {
	return client.Thread{ID: t.ID, Name: t.Name, Sandbox: t.SandboxID, CreatedAt: t.CreatedAt,
		Retention: client.Retention{KeepLast: t.Retention.KeepLast, KeepWithinSeconds: int64(t.Retention.KeepWithin / time.Second)}}
}

func viewRun(r store.Run) client.Run {
	return client.Run{ID: r.ID, Thread: r.ThreadID, Status: string(r.Status), LastSeq: r.LastSeq, StartedAt: r.StartedAt, EndedAt: r.EndedAt}
}

func viewEvent(e store.Event) client.Event {
	return client.Event{Run: e.RunID, Seq: e.Seq, Time: e.Time, Type: string(e.Type), ModelSession: e.ModelSession,
		IdempotencyKey: e.IdempotencyKey, Intent: e.Intent, Payload: json.RawMessage(e.Payload)}
}
