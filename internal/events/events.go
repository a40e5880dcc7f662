// Package events carries what happens to sandboxes to whoever listens: the
// event stream and webhooks, metering, metrics. Lifecycle events come from
// the store itself (ObserveStore), so every transition is seen whoever
// makes it (an API call, the idle policy, reconciliation, a wake); other
// events (snapshot, push, network policy...) are emitted where they happen.
//
// Hub is the daemon's sink: the durable event log (store.EventStore), the
// change notifier behind GET /v1/events, retention, and the webhooks'
// delivery workers.
//
// Crash ordering. An event is appended (fsync'd) right after the change it
// reports commits and before the call that made the change returns: a
// crash between the two loses that one event, never reports a change that
// did not happen. Event ids only grow and are never reused, and one writer
// commits them in id order, so "everything after id N" is a complete
// resume point for a stream and for a webhook. A webhook's cursor is
// written after the receiver's 2xx: a crash between the two sends that
// event again (at least once; receivers deduplicate by Stead-Event-Id),
// and a crash before the 2xx retries it. Nothing is delivered out of id
// order: later events wait for the failing one.
package events

import (
	"context"
	"reflect"
	"strings"
	"time"

	"github.com/stead-dev/stead/internal/store"
)

// Event types of the sandbox lifecycle.
const (
	SandboxCreated  = "sandbox.created"
	SandboxStarted  = "sandbox.started"
	SandboxResumed  = "sandbox.resumed"
	SandboxPaused   = "sandbox.paused"
	SandboxStopped  = "sandbox.stopped"
	SandboxArchived = "sandbox.archived"
	SandboxDeleted  = "sandbox.deleted"
	SandboxRestored = "sandbox.undeleted"
	SandboxError    = "sandbox.error"
	SandboxPurged   = "sandbox.purged"
)

// Event types emitted by the sandbox service besides the lifecycle. An
// operation that fails emits its type's failure twin (backup.push_failed
// ...), with the error in Data["error"].
const (
	SnapshotCreated   = "snapshot.created"
	SnapshotDeleted   = "snapshot.deleted"
	SandboxForked     = "sandbox.forked"
	SandboxRolledBack = "sandbox.rolled_back"
	SandboxHydrated   = "sandbox.hydrated"
	SandboxNetwork    = "sandbox.network_policy"
	BackupPushed      = "backup.pushed"
	BackupPulled      = "backup.pulled"
	BackupRestored    = "backup.restored"
	DrillPassed       = "drill.passed"
	DrillFailed       = "drill.failed"
	// SandboxLostCopy: a node lost a sandbox's lease (another node owns it
	// now) and kept its local copy's root as a dataset, data["dataset"].
	SandboxLostCopy = "sandbox.lost_copy_kept"
	// SandboxLostCopyRecovered: an operator made a new sandbox from a kept
	// copy (data: "copy", "sandbox" the new id, "node").
	SandboxLostCopyRecovered = "sandbox.lost_copy_recovered"
	// SandboxLostCopyDiscarded: an operator deleted a kept copy (data:
	// "copy", "node").
	SandboxLostCopyDiscarded = "sandbox.lost_copy_discarded"
)

// Event types of failover (internal/cluster's coordinator and a node's
// adoption, internal/sandbox adopt.go): a sandbox marked lost with its
// node, restored on another node, or a failed attempt (data: error).
const (
	SandboxLost    = "sandbox.lost"
	SandboxAdopted = "sandbox.adopted"
	FailoverFailed = "failover.failed"
	// FailoverNoRoom: a lost sandbox stays lost because no node has room
	// for it or its template (data: "reason"); the coordinator tries again
	// at its next pass.
	FailoverNoRoom = "failover.no_room"
)

// Event types of the tenant policies (emitted by their owners through the
// service's event call; named here so that every emitter and every
// subscriber spells them alike).
const (
	BudgetWarning    = "budget.warning"
	BudgetExceeded   = "budget.exceeded"
	QuotaExceeded    = "quota.exceeded"
	RetentionWarning = "retention.warning"
	// LimitWarning: a sandbox's disk or memory, a volume or the pool
	// crossed a warning level of its limit (growth.go in the sandbox
	// service).
	LimitWarning = "limit.warning"
)

// InternalPrefix starts the type of an event for the daemon's own
// listeners (metrics, metering): the Hub neither stores nor streams nor
// delivers it, so a tenant never sees it.
const InternalPrefix = "internal."

// Internal reports whether an event type is for the daemon's own
// listeners only (InternalPrefix).
func Internal(typ string) bool { return strings.HasPrefix(typ, InternalPrefix) }

// Event types of sandbox schedules (a run of a schedule: data schedule,
// action, result; error for a failure, reason for a skip).
const (
	ScheduleFired  = "schedule.fired"
	ScheduleFailed = "schedule.failed"
)

// Event is one thing that happened.
type Event struct {
	// ID is assigned by the sink that stores events (0 until then).
	ID      int64     `json:"id"`
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Tenant  string    `json:"tenant"`
	Sandbox string    `json:"sandbox,omitempty"`
	// State is the sandbox's state after the event (lifecycle events).
	State string `json:"state,omitempty"`
	// Reason says why (a stop's reason: user, idle, crash, ...).
	Reason string            `json:"reason,omitempty"`
	Data   map[string]string `json:"data,omitempty"`
}

// Sink receives events. Emit must not block for long (a sink that
// delivers slowly queues) and must be safe for concurrent use.
type Sink interface {
	Emit(ctx context.Context, e Event)
}

// Multi sends every event to each of its sinks in turn.
type Multi []Sink

// Emit implements Sink.
func (m Multi) Emit(ctx context.Context, e Event) {
	for _, s := range m {
		s.Emit(ctx, e)
	}
}

// SinkFunc is a function as a Sink.
type SinkFunc func(ctx context.Context, e Event)

// Emit implements Sink.
func (f SinkFunc) Emit(ctx context.Context, e Event) { f(ctx, e) }

// ObserveStore returns st emitting the sandbox lifecycle to sink: a
// created record, every change of state (with the stop reason), and a
// purge. now stamps the events (nil: time.Now).
func ObserveStore(st store.Store, sink Sink, now func() time.Time) store.Store {
	if now == nil {
		now = time.Now
	}
	return &observed{Store: st, sink: sink, now: now}
}

type observed struct {
	store.Store
	sink Sink
	now  func() time.Time
}

func (o *observed) CreateSandbox(ctx context.Context, s store.Sandbox) (store.Sandbox, error) {
	e := Event{Type: SandboxCreated, Tenant: s.TenantID, Sandbox: s.ID, State: string(s.State)}
	if w, h, rest := o.together(e); w != nil {
		e.Time = o.now().UTC()
		open, opener := rest.interval(e, s)
		out, _, err := w.CreateSandboxEvent(ctx, s, h.row(e), open)
		if err == nil {
			h.notify()
			rest.emitOpened(ctx, e, opener)
		}
		return out, err
	}
	out, err := o.Store.CreateSandbox(ctx, s)
	if err == nil {
		e.Time, e.Tenant, e.State = o.now().UTC(), out.TenantID, string(out.State)
		o.sink.Emit(ctx, e)
	}
	return out, err
}

func (o *observed) UpdateSandbox(ctx context.Context, s store.Sandbox) (store.Sandbox, error) {
	prev, perr := o.Store.GetSandbox(ctx, s.TenantID, s.ID)
	if perr == nil {
		if e, ok := transitionEvent(prev, s); ok {
			if w, h, rest := o.together(e); w != nil {
				e.Time = o.now().UTC()
				open, opener := rest.interval(e, s)
				out, _, err := w.UpdateSandboxEvent(ctx, s, h.row(e), open)
				if err == nil {
					h.notify()
					rest.emitOpened(ctx, e, opener)
				}
				return out, err
			}
		}
	}
	out, err := o.Store.UpdateSandbox(ctx, s)
	if err != nil || perr != nil {
		return out, err
	}
	if e, ok := transitionEvent(prev, out); ok {
		e.Time = o.now().UTC()
		o.sink.Emit(ctx, e)
	}
	return out, err
}

// An IntervalOpener is a sink that opens a meter interval for some
// lifecycle events (the meter). When a change and its event commit in one
// transaction (store.SandboxEventWriter), ObserveStore opens the interval
// in it too, so that a start and its metering are one durable write, and
// then hands the event to EmitOpened instead of Emit.
type IntervalOpener interface {
	Sink
	// OpensInterval is the interval e opens, sb being the record as changed
	// (false: none).
	OpensInterval(e Event, sb store.Sandbox) (store.MeterInterval, bool)
	// EmitOpened is Emit for an event whose interval was opened with it.
	EmitOpened(ctx context.Context, e Event)
}

// interval is the interval the first IntervalOpener of m opens for e and
// that sink's index (-1: none).
func (m Multi) interval(e Event, sb store.Sandbox) (*store.MeterInterval, int) {
	for i, s := range m {
		if o, ok := s.(IntervalOpener); ok {
			if iv, ok := o.OpensInterval(e, sb); ok {
				return &iv, i
			}
			return nil, -1
		}
	}
	return nil, -1
}

// emitOpened sends e to every sink, through EmitOpened to the one at
// opener (whose interval was opened with e).
func (m Multi) emitOpened(ctx context.Context, e Event, opener int) {
	for i, s := range m {
		if i == opener {
			s.(IntervalOpener).EmitOpened(ctx, e)
			continue
		}
		s.Emit(ctx, e)
	}
}

// transitionEvent is the event of a sandbox record going from prev to
// next, if the change is one that has an event (a change of state).
func transitionEvent(prev, next store.Sandbox) (Event, bool) {
	if prev.State == next.State {
		return Event{}, false
	}
	e := Event{Tenant: next.TenantID, Sandbox: next.ID, State: string(next.State), Reason: next.StopReason}
	switch next.State {
	case store.StateRunning:
		e.Type, e.Reason = SandboxStarted, ""
		if prev.State == store.StatePaused {
			e.Type = SandboxResumed
		}
	case store.StatePaused:
		e.Type = SandboxPaused
	case store.StateStopped:
		e.Type = SandboxStopped
		if prev.State == store.StateDeleted {
			e.Type = SandboxRestored
		}
		if prev.State == store.StateCreating {
			return Event{}, false // made stopped: "created" said it
		}
	case store.StateArchived:
		e.Type = SandboxArchived
	case store.StateDeleted:
		e.Type = SandboxDeleted
	case store.StateError:
		e.Type = SandboxError
	default:
		return Event{}, false
	}
	return e, true
}

// together returns, when the sinks begin with a Hub that keeps its log in
// the observed store and that store writes a sandbox record and an event
// in one transaction (store.SandboxEventWriter), the store, the Hub and
// the sinks after it: the change and its event then commit together (one
// durable write instead of two), and the Hub only wakes its followers.
// Otherwise (or for an internal event, which the Hub does not keep) the
// store is nil.
func (o *observed) together(e Event) (store.SandboxEventWriter, *Hub, Multi) {
	if Internal(e.Type) {
		return nil, nil, nil
	}
	w, ok := o.Store.(store.SandboxEventWriter)
	if !ok {
		return nil, nil, nil
	}
	var m Multi
	switch s := o.sink.(type) {
	case *Multi:
		m = *s
	case Multi:
		m = s
	case *Hub:
		m = Multi{s}
	default:
		return nil, nil, nil
	}
	if len(m) == 0 {
		return nil, nil, nil
	}
	h, ok := m[0].(*Hub)
	if !ok || !sameStore(h.st, o.Store) {
		return nil, nil, nil
	}
	return w, h, m[1:]
}

// sameStore reports whether a and b are the same store value.
func sameStore(a store.EventStore, b store.Store) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	if ta == nil || ta != tb || !ta.Comparable() {
		return false
	}
	return any(a) == any(b)
}

func (o *observed) DeleteSandbox(ctx context.Context, tenantID, id string) error {
	err := o.Store.DeleteSandbox(ctx, tenantID, id)
	if err == nil {
		o.sink.Emit(ctx, Event{Time: o.now().UTC(), Type: SandboxPurged, Tenant: tenantID, Sandbox: id})
	}
	return err
}
