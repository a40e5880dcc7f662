package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
)

// Failover from the last push (docs/cluster.md, section 5). Every node runs
// a Failover coordinator; only the one holding the cluster job lease
// FailoverJobKey (a row of the owner lease table, like a sandbox's) acts,
// and every store write it makes is fenced by that lease, so a coordinator
// that stalled past its lease's expiry and woke up changes nothing.
//
// A pass, in this order (each step idempotent, so a pass that dies half-way
// is finished by the next one, on this node or another):
//  1. every node whose heartbeat is older than the grace (never this node)
//     is lapsed: its leases in force are expired (ExpireNodeOwnerships),
//     and each sandbox whose lease was last that node's is marked lost (a
//     LostMark in its spec: the node, the lease's epoch and the state it
//     was in) unless it is deleted, archived (its root is in the
//     repository; any node hydrates it) or already lost;
//  2. every orphaned hand-over is finished: a sandbox with a HandOffMark
//     (an evacuation released its lease) whose lease no node holds in
//     force, and has not for the grace since the mark and since the lease
//     ended (an evacuation in progress finishes within it: a target
//     adopting holds the lease, a failed adoption is followed by the
//     finish at once). If its source node is alive, the source is asked
//     to take it back (Finish, moved false: it acquires the lease at
//     epoch + 1, clears the mark and resumes its frozen copy); if the
//     source lapsed too, the sandbox is marked lost with the source
//     (when step 1 has not already: a failed adoption's target released
//     the lease last), and step 3 adopts it from the hand-over's delta
//     push, which holds every write (the sandbox was paused before it);
//     so is one whose source answers that it has no copy left
//     (errs.ErrNotFound: a restart kept it as a lost copy). Another
//     failed Finish backs off as a failed adoption does;
//  3. every lost sandbox whose policy is restore, that has a push recorded
//     in the store, whose lease no node holds in force, and whose backoff
//     has passed is given to a target node (Pick, never the lost node),
//     which is asked to adopt it (Adopt): the target takes the lease
//     (epoch + 1), restores the push and writes the record. A failure is
//     logged, recorded as an event and an audit entry, and retried by a
//     later pass after a backoff that doubles per attempt. When no node
//     has room (Pick's *NoRoomError) nothing is tried: the sandbox stays
//     lost, a failover.no_room event says why (once per reason), and the
//     next pass looks again.

// FailoverJobKey is the owner-lease key of the failover coordinator's job.
const FailoverJobKey = "job/failover"

// DefaultJobTTL is how long a coordinator's job lease lasts unless renewed.
const DefaultJobTTL = 30 * time.Second

// StopReasonNodeLost is the stop reason of a sandbox marked lost.
const StopReasonNodeLost = "node_lost"

// Failover policies, as a sandbox's spec keeps them (key "failover"; ""
// reads as FailoverRestore). client.FailoverRestore and client.FailoverNone
// spell the same values.
const (
	FailoverRestore = "restore"
	FailoverNone    = "none"
)

// LostMark is what the coordinator records in a lost sandbox's spec (key
// "lost"): which node it was lost with, under which lease epoch, and the
// state it was in, which an adoption restores (running or paused: started;
// stopped: left stopped).
type LostMark struct {
	Node  string             `json:"node"`
	Epoch int64              `json:"epoch"`
	State store.SandboxState `json:"state"`
	At    time.Time          `json:"at"`
}

// specKeys are the keys of a sandbox's spec (JSON owned by
// internal/sandbox) that failover reads and writes.
type specKeys struct {
	Failover string       `json:"failover"`
	Lost     *LostMark    `json:"lost"`
	HandOff  *HandOffMark `json:"handoff"`
	Backup   struct {
		LastPush   *time.Time `json:"last_push"`
		LastPushID string     `json:"last_push_id"`
	} `json:"backup"`
}

func keysOf(sb store.Sandbox) specKeys {
	var k specKeys
	json.Unmarshal(sb.Spec, &k)
	return k
}

// FailoverPolicyOf returns a sandbox's failover policy (FailoverRestore
// unless its spec says FailoverNone).
func FailoverPolicyOf(sb store.Sandbox) string {
	if keysOf(sb).Failover == FailoverNone {
		return FailoverNone
	}
	return FailoverRestore
}

// LastPushOf returns the latest push of a sandbox recorded in the store
// (the id of its manifest and when it was made; "" and nil when it was
// never pushed). Only a push whose publishing store write committed is
// recorded, so a failover never restores a push the store refused.
func LastPushOf(sb store.Sandbox) (id string, at *time.Time) {
	k := keysOf(sb)
	return k.Backup.LastPushID, k.Backup.LastPush
}

// LostMarkOf returns the lost mark of a sandbox, if it has one.
func LostMarkOf(sb store.Sandbox) (LostMark, bool) {
	k := keysOf(sb)
	if k.Lost == nil {
		return LostMark{}, false
	}
	return *k.Lost, true
}

// MarkLost returns sb marked lost with m: state lost, stop reason
// StopReasonNodeLost, stopped at m.At, and m in its spec.
func MarkLost(sb store.Sandbox, m LostMark) (store.Sandbox, error) {
	spec, err := setSpecKey(sb.Spec, "lost", m)
	if err != nil {
		return sb, fmt.Errorf("mark sandbox %s lost: %w", sb.ID, err)
	}
	at := m.At
	sb.Spec, sb.State, sb.StopReason, sb.StoppedAt, sb.UpdatedAt = spec, store.StateLost, StopReasonNodeLost, &at, m.At
	return sb, nil
}

// ClearLostMark returns spec without its lost mark.
func ClearLostMark(spec []byte) ([]byte, error) { return setSpecKey(spec, "lost", nil) }

// setSpecKey sets (v != nil) or removes key of a spec's JSON object.
func setSpecKey(spec []byte, key string, v any) ([]byte, error) {
	raw := map[string]json.RawMessage{}
	if len(spec) > 0 {
		if err := json.Unmarshal(spec, &raw); err != nil {
			return nil, fmt.Errorf("decode spec: %w", err)
		}
	}
	if v == nil {
		delete(raw, key)
	} else {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		raw[key] = b
	}
	return json.Marshal(raw)
}

// FailoverOptions configure a Failover coordinator.
type FailoverOptions struct {
	// Store is the cluster's store (nodes, leases, sandbox records).
	Store store.Store
	// Node is this node's name: the holder of the job lease when it acts.
	Node string
	// Grace is how old a node's heartbeat may be before the node is lapsed
	// (0: three DefaultInterval).
	Grace time.Duration
	// JobTTL is the job lease's duration (0: DefaultJobTTL); a pass
	// renews it before each adoption.
	JobTTL time.Duration
	// Every is how often Run makes a pass (0: DefaultInterval).
	Every time.Duration
	// Backoff is the wait after a sandbox's first failed adoption before
	// the next try (0: Every); it doubles per failure up to MaxBackoff (0:
	// ten minutes).
	Backoff, MaxBackoff time.Duration
	// Clock is this node's clock (nil: time.Now).
	Clock func() time.Time
	// Pick chooses the node to restore sb on, never exclude (the lost
	// node). Required.
	Pick func(ctx context.Context, sb store.Sandbox, exclude string) (store.Node, error)
	// Adopt asks node to adopt sandbox sandboxID (sandbox.Service.Adopt
	// on that node: a signed node-to-node call). It returns when the
	// adoption ended. Required.
	Adopt func(ctx context.Context, node store.Node, sandboxID string) error
	// Finish asks source to finish the hand-over of sandbox sandboxID
	// (sandbox.Service.FinishHandOff there: a signed node call), with
	// moved false: the source takes it back. nil: an orphaned hand-over
	// whose source is alive is left as it is (one whose source lapsed is
	// still adopted elsewhere).
	Finish func(ctx context.Context, source store.Node, sandboxID string, h HandOffResult, moved bool) error
	// Events hears sandbox.lost, failover.failed and failover.no_room
	// (nil: nothing).
	Events events.Sink
	// Audit records the coordinator's actions (nil: nothing).
	Audit audit.Recorder
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Failover is one node's failover coordinator (see the top of this file).
type Failover struct {
	o FailoverOptions

	mu      sync.Mutex
	retries map[string]*retryState
	// noRoom is, per sandbox that had no target at its last try, why
	// (a failover.no_room event is written when it changes).
	noRoom map[string]string
}

// retryState is a sandbox's failed adoptions, for the backoff.
type retryState struct {
	attempts int
	next     time.Time
}

// PassResult says what a pass did.
type PassResult struct {
	// Leader is set when this node held the job lease and acted.
	Leader bool
	// Lapsed are the nodes found lapsed.
	Lapsed []string
	// Marked are the sandboxes this pass marked lost.
	Marked []string
	// Adopted are the sandboxes a target adopted in this pass.
	Adopted []string
	// Failed are the sandboxes whose adoption failed in this pass.
	Failed []string
	// TakenBack are the orphaned hand-overs whose source took the sandbox
	// back in this pass.
	TakenBack []string
	// Waiting are lost sandboxes (and orphaned hand-overs) left for a
	// later pass (backoff).
	Waiting []string
	// NoRoom are lost sandboxes no node has room for now: they stay lost,
	// and the next pass tries again (no backoff).
	NoRoom []string
}

// NewFailover returns node o.Node's coordinator.
func NewFailover(o FailoverOptions) (*Failover, error) {
	if o.Store == nil || o.Node == "" || o.Pick == nil || o.Adopt == nil {
		return nil, fmt.Errorf("failover coordinator: a store, a node name, Pick and Adopt are needed: %w", errs.ErrInvalid)
	}
	if o.Grace <= 0 {
		o.Grace = 3 * DefaultInterval
	}
	if o.JobTTL <= 0 {
		o.JobTTL = DefaultJobTTL
	}
	if o.Every <= 0 {
		o.Every = DefaultInterval
	}
	if o.Every >= o.JobTTL {
		return nil, fmt.Errorf("failover coordinator: a pass every %s does not keep a %s job lease: %w", o.Every, o.JobTTL, errs.ErrInvalid)
	}
	if o.Backoff <= 0 {
		o.Backoff = o.Every
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 10 * time.Minute
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Audit == nil {
		o.Audit = audit.Nop{}
	}
	return &Failover{o: o, retries: map[string]*retryState{}, noRoom: map[string]string{}}, nil
}

// Run makes a pass every Every until ctx ends; a failed pass is logged
// and the next one tries again.
func (f *Failover) Run(ctx context.Context) {
	t := time.NewTicker(f.o.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := f.Pass(ctx); err != nil && ctx.Err() == nil {
				f.o.Logger.Warn("failover pass failed", "node", f.o.Node, "err", err)
			}
		}
	}
}

// Pass makes one pass if this node holds (or takes) the job lease; another
// node's job lease in force is no error: the result's Leader is false. An
// error ends the pass early; what it did stays done, and the next pass
// goes on from there.
func (f *Failover) Pass(ctx context.Context) (PassResult, error) {
	var res PassResult
	st := f.o.Store
	job, err := st.AcquireOwnership(ctx, FailoverJobKey, f.o.Node, f.o.JobTTL, f.o.Clock())
	if errors.Is(err, errs.ErrConflict) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("failover: take the job lease: %w", err)
	}
	res.Leader = true
	// fenced is ctx for a write of the coordinator: it commits only while
	// this node's job lease holds, under this epoch, at this moment.
	fenced := func() context.Context {
		return store.WithFence(ctx, store.Fence{SandboxID: FailoverJobKey, Node: f.o.Node, Epoch: job.Epoch, At: f.o.Clock()})
	}
	if err := f.markLapsed(ctx, fenced, &res); err != nil {
		return res, err
	}
	if err := f.finishHandOffs(ctx, fenced, job, &res); err != nil {
		return res, err
	}
	return res, f.restoreLost(ctx, job, &res)
}

// markLapsed expires the leases of the lapsed nodes and marks their
// sandboxes lost.
func (f *Failover) markLapsed(ctx context.Context, fenced func() context.Context, res *PassResult) error {
	st := f.o.Store
	nodes, err := st.ListNodes(ctx)
	if err != nil {
		return fmt.Errorf("failover: list nodes: %w", err)
	}
	for _, n := range nodes {
		now := f.o.Clock()
		if n.Name == f.o.Node || now.Sub(n.HeartbeatAt) <= f.o.Grace {
			continue
		}
		res.Lapsed = append(res.Lapsed, n.Name)
		owns, err := st.ListOwnerships(ctx, n.Name)
		if err != nil {
			return fmt.Errorf("failover: list the leases of node %s: %w", n.Name, err)
		}
		for _, o := range owns {
			if strings.Contains(o.SandboxID, "/") {
				continue // a job or scope lease, not a sandbox's
			}
			if now.Before(o.ExpiresAt) {
				// Never cut a lease short: a node cut off from the store
				// (a partition, not a crash) still runs the sandbox until
				// its lease lapses on its own clock, and freezes it then
				// (cluster.Leases). Taking over before would run the
				// sandbox twice.
				continue
			}
			marked, err := f.markLost(ctx, fenced, n.Name, o)
			if err != nil {
				return err
			}
			if marked {
				res.Marked = append(res.Marked, o.SandboxID)
			}
		}
	}
	return nil
}

// markLost marks the sandbox of lease o lost with node, unless there is
// nothing to mark.
func (f *Failover) markLost(ctx context.Context, fenced func() context.Context, node string, o store.Ownership) (bool, error) {
	st := f.o.Store
	sb, err := st.GetSandbox(ctx, "", o.SandboxID)
	if errors.Is(err, errs.ErrNotFound) {
		return false, nil // purged; its lease row outlives it
	}
	if err != nil {
		return false, fmt.Errorf("failover: read sandbox %s: %w", o.SandboxID, err)
	}
	switch sb.State {
	case store.StateLost, store.StateDeleted, store.StateArchived:
		return false, nil
	}
	now := f.o.Clock()
	lost, err := MarkLost(sb, LostMark{Node: node, Epoch: o.Epoch, State: sb.State, At: now.UTC()})
	if err != nil {
		return false, err
	}
	if _, err := st.UpdateSandbox(fenced(), lost); err != nil {
		if errors.Is(err, errs.ErrConflict) && !store.IsFenced(err) {
			return false, nil // changed meanwhile: the next pass looks again
		}
		return false, fmt.Errorf("failover: mark sandbox %s lost: %w", sb.ID, err)
	}
	pushID, pushAt := LastPushOf(sb)
	policy := FailoverPolicyOf(sb)
	f.o.Logger.Warn("sandbox lost with its node", "sandbox", sb.ID, "tenant", sb.TenantID, "node", node, "epoch", o.Epoch,
		"was", sb.State, "policy", policy, "last_push", pushID)
	data := map[string]string{"node": node, "epoch": strconv.FormatInt(o.Epoch, 10), "was": string(sb.State), "policy": policy}
	if pushAt != nil {
		data["last_push_at"] = pushAt.UTC().Format(time.RFC3339Nano)
		data["last_push_id"] = pushID
	}
	f.emit(ctx, events.Event{Type: events.SandboxLost, Tenant: sb.TenantID, Sandbox: sb.ID, State: string(store.StateLost),
		Reason: StopReasonNodeLost, Data: data})
	f.record(ctx, sb.TenantID, "sandbox.lost", sb.ID, nil)
	return true, nil
}

// finishHandOffs finishes the orphaned hand-overs (step 2 at the top of
// this file).
func (f *Failover) finishHandOffs(ctx context.Context, fenced func() context.Context, job store.Ownership, res *PassResult) error {
	st := f.o.Store
	// A hand-over leaves its sandbox paused (it paused a running one) or
	// stopped; a running one was taken back or adopted.
	list, err := st.ListSandboxes(ctx, store.SandboxFilter{States: []store.SandboxState{store.StatePaused, store.StateStopped}})
	if err != nil {
		return fmt.Errorf("failover: list sandboxes: %w", err)
	}
	var nodes map[string]store.Node
	for _, sb := range list {
		m, ok := HandOffMarkOf(sb)
		if !ok {
			continue
		}
		now := f.o.Clock()
		own, err := st.GetOwnership(ctx, sb.ID)
		if err != nil && !errors.Is(err, errs.ErrNotFound) {
			return fmt.Errorf("failover: read the lease of sandbox %s: %w", sb.ID, err)
		}
		if own.ValidAt(now) {
			continue // a target adopts it, or the source took it back
		}
		if now.Sub(m.At) <= f.o.Grace || now.Sub(own.ExpiresAt) <= f.o.Grace {
			continue // the evacuation may still finish it
		}
		if !f.due(sb.ID, now) {
			res.Waiting = append(res.Waiting, sb.ID)
			continue
		}
		if _, err := st.RenewOwnership(ctx, FailoverJobKey, f.o.Node, job.Epoch, f.o.JobTTL, now); err != nil {
			return fmt.Errorf("failover: renew the job lease: %w", err)
		}
		if nodes == nil {
			ns, err := st.ListNodes(ctx)
			if err != nil {
				return fmt.Errorf("failover: list nodes: %w", err)
			}
			nodes = map[string]store.Node{}
			for _, n := range ns {
				nodes[n.Name] = n
			}
		}
		src, known := nodes[m.Node]
		if !known || now.Sub(src.HeartbeatAt) > f.o.Grace {
			// The source is gone too: adopted elsewhere from the delta
			// push (restoreLost, in this pass).
			marked, err := f.markLost(ctx, fenced, m.Node, store.Ownership{SandboxID: sb.ID, Node: m.Node, Epoch: own.Epoch})
			if err != nil {
				return err
			}
			if marked {
				res.Marked = append(res.Marked, sb.ID)
			}
			continue
		}
		if f.o.Finish == nil {
			continue
		}
		err = f.o.Finish(ctx, src, sb.ID, m.Result(), false)
		if errors.Is(err, errs.ErrNotFound) {
			// The source has no copy left (a restart kept it as a lost
			// copy): adopted elsewhere from the delta push, as if the
			// source were gone.
			f.o.Logger.Warn("orphaned hand-over: its source has no copy left; adopted elsewhere", "sandbox", sb.ID, "node", src.Name, "err", err)
			marked, err := f.markLost(ctx, fenced, m.Node, store.Ownership{SandboxID: sb.ID, Node: m.Node, Epoch: own.Epoch})
			if err != nil {
				return err
			}
			if marked {
				res.Marked = append(res.Marked, sb.ID)
			}
			continue
		}
		if err != nil {
			f.failed(ctx, sb, src.Name, fmt.Errorf("give the orphaned hand-over back to its source: %w", err))
			res.Failed = append(res.Failed, sb.ID)
			continue
		}
		f.mu.Lock()
		delete(f.retries, sb.ID)
		f.mu.Unlock()
		f.o.Logger.Warn("orphaned hand-over finished: its source took the sandbox back", "sandbox", sb.ID, "node", src.Name, "push", m.Push,
			"released_at", m.At)
		f.record(ctx, sb.TenantID, "sandbox.hand_off_taken_back", sb.ID+" -> "+src.Name, nil)
		res.TakenBack = append(res.TakenBack, sb.ID)
	}
	return nil
}

// restoreLost asks a target to adopt each restorable lost sandbox.
func (f *Failover) restoreLost(ctx context.Context, job store.Ownership, res *PassResult) error {
	st := f.o.Store
	list, err := st.ListSandboxes(ctx, store.SandboxFilter{States: []store.SandboxState{store.StateLost}})
	if err != nil {
		return fmt.Errorf("failover: list lost sandboxes: %w", err)
	}
	for _, sb := range list {
		if pushID, _ := LastPushOf(sb); pushID == "" || FailoverPolicyOf(sb) != FailoverRestore {
			continue // stays lost: nothing to restore, or not asked to
		}
		now := f.o.Clock()
		if own, err := st.GetOwnership(ctx, sb.ID); err == nil && own.ValidAt(now) {
			continue // a node holds it: an adoption runs, or the owner is back
		} else if err != nil && !errors.Is(err, errs.ErrNotFound) {
			return fmt.Errorf("failover: read the lease of sandbox %s: %w", sb.ID, err)
		}
		if !f.due(sb.ID, now) {
			res.Waiting = append(res.Waiting, sb.ID)
			continue
		}
		// Still the coordinator? Renewing also keeps the lease through a
		// long series of restores.
		if _, err := st.RenewOwnership(ctx, FailoverJobKey, f.o.Node, job.Epoch, f.o.JobTTL, now); err != nil {
			return fmt.Errorf("failover: renew the job lease: %w", err)
		}
		mark, _ := LostMarkOf(sb)
		target, err := f.o.Pick(ctx, sb, mark.Node)
		var nr *NoRoomError
		if errors.As(err, &nr) {
			// Not a failed adoption: nothing was tried. It stays lost, and
			// the next pass looks again (room frees, a node joins).
			f.noTarget(ctx, sb, err)
			res.NoRoom = append(res.NoRoom, sb.ID)
			continue
		}
		if err == nil {
			err = f.o.Adopt(ctx, target, sb.ID)
		}
		if err != nil {
			f.failed(ctx, sb, target.Name, err)
			res.Failed = append(res.Failed, sb.ID)
			continue
		}
		f.mu.Lock()
		delete(f.retries, sb.ID)
		delete(f.noRoom, sb.ID)
		f.mu.Unlock()
		f.o.Logger.Info("lost sandbox adopted", "sandbox", sb.ID, "node", target.Name, "from", mark.Node)
		f.record(ctx, sb.TenantID, "sandbox.failover", sb.ID+" -> "+target.Name, nil)
		res.Adopted = append(res.Adopted, sb.ID)
	}
	return nil
}

// noTarget records that no node has room for lost sandbox sb: logged and
// written as a failover.no_room event when the reason is new for it (a
// pass every heartbeat would otherwise repeat it).
func (f *Failover) noTarget(ctx context.Context, sb store.Sandbox, err error) {
	why := err.Error()
	f.mu.Lock()
	same := f.noRoom[sb.ID] == why
	f.noRoom[sb.ID] = why
	f.mu.Unlock()
	if same {
		return
	}
	f.o.Logger.Warn("lost sandbox stays lost: no node has room for it; tried again at the next pass", "sandbox", sb.ID, "tenant", sb.TenantID, "err", err)
	f.emit(ctx, events.Event{Type: events.FailoverNoRoom, Tenant: sb.TenantID, Sandbox: sb.ID, State: string(sb.State),
		Data: map[string]string{"reason": why}})
}

// due reports whether a sandbox's backoff has passed.
func (f *Failover) due(id string, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.retries[id]
	return !ok || !now.Before(r.next)
}

// failed records a failed adoption and sets the sandbox's backoff.
func (f *Failover) failed(ctx context.Context, sb store.Sandbox, target string, err error) {
	f.mu.Lock()
	r := f.retries[sb.ID]
	if r == nil {
		r = &retryState{}
		f.retries[sb.ID] = r
	}
	r.attempts++
	wait := f.o.Backoff
	for i := 1; i < r.attempts && wait < f.o.MaxBackoff; i++ {
		wait *= 2
	}
	wait = min(wait, f.o.MaxBackoff)
	r.next = f.o.Clock().Add(wait)
	attempts := r.attempts
	f.mu.Unlock()
	f.o.Logger.Error("failover of a lost sandbox failed; retried later", "sandbox", sb.ID, "tenant", sb.TenantID,
		"node", target, "attempt", attempts, "retry_in", wait, "err", err)
	f.emit(ctx, events.Event{Type: events.FailoverFailed, Tenant: sb.TenantID, Sandbox: sb.ID, State: string(sb.State),
		Data: map[string]string{"node": target, "attempt": strconv.Itoa(attempts), "retry_in": wait.String(), "error": err.Error()}})
	f.record(ctx, sb.TenantID, "sandbox.failover", sb.ID, err)
}

func (f *Failover) emit(ctx context.Context, e events.Event) {
	if f.o.Events == nil {
		return
	}
	e.Time = f.o.Clock().UTC()
	f.o.Events.Emit(context.WithoutCancel(ctx), e)
}

// record appends an action of the coordinator to the audit trail; a
// failure to record is logged (the action has happened).
func (f *Failover) record(ctx context.Context, tenant, action, target string, err error) {
	outcome := "ok"
	if err != nil {
		outcome = err.Error()
	}
	if rerr := f.o.Audit.Record(context.WithoutCancel(ctx), audit.Entry{Actor: "node/" + f.o.Node, Tenant: tenant, Action: action,
		Target: target, Outcome: outcome}); rerr != nil {
		f.o.Logger.Error("audit record", "action", action, "target", target, "err", rerr)
	}
}
