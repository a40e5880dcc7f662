package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Evacuation (docs/cluster.md, section 7): `stead node evacuate NODE` sets
// the node draining (it takes no new sandboxes), then moves each sandbox
// whose lease the node holds, one at a time:
//  1. HandOff, on the source: push while it runs, pause, push the delta
//     (the push the target restores), release the lease. A failure up to
//     here resumes it: it stays on the source, which still owns it.
//  2. Adopt, on the target (Pick, never the source): it takes the lease
//     (epoch + 1), restores the delta push and starts it.
//  3. Finish, on the source: after a successful adoption it drops its
//     frozen copy (runtime, root, volumes); after a failed one it takes the
//     lease back and resumes the copy it kept frozen, so a sandbox is never
//     lost to a failed move, and never runs on two nodes.
//
// HandOff records a HandOffMark before the release; if the node running
// the evacuation dies between the release and the finish, the failover
// coordinator finishes the hand-over once the grace has passed with no
// lease holder (failover.go, step 2).
//
// The pause of a running sandbox is bounded by its delta push plus the
// restore on the target; it is reported per sandbox.

// HandOffResult is what the source node reports of a hand-over.
type HandOffResult struct {
	// Push is the id of the delta push, which the target restores.
	Push string `json:"push"`
	// Was is the sandbox's state before the hand-over.
	Was store.SandboxState `json:"was"`
	// PausedAt is when the source paused it (zero if it was not running).
	PausedAt time.Time `json:"paused_at"`
}

// HandOffMark is what a hand-over records in its sandbox's spec (key
// "handoff") just before the source releases the lease: the source, the
// epoch it released, the delta push the target restores, and what
// FinishHandOff needs to give the sandbox back. An adoption clears it (in
// its record write, under the new lease), and so does the source taking
// the sandbox back; a mark whose lease nobody holds in force long after it
// was written is an orphaned hand-over (the node running the evacuation
// died between the release and the finish), which the failover
// coordinator finishes (failover.go).
type HandOffMark struct {
	Node     string             `json:"node"`
	Epoch    int64              `json:"epoch"`
	Push     string             `json:"push"`
	Was      store.SandboxState `json:"was"`
	PausedAt time.Time          `json:"paused_at,omitzero"`
	At       time.Time          `json:"at"`
}

// Result is the HandOffResult the mark records.
func (m HandOffMark) Result() HandOffResult {
	return HandOffResult{Push: m.Push, Was: m.Was, PausedAt: m.PausedAt}
}

// HandOffMarkOf returns the hand-over mark of a sandbox, if it has one.
func HandOffMarkOf(sb store.Sandbox) (HandOffMark, bool) {
	k := keysOf(sb)
	if k.HandOff == nil {
		return HandOffMark{}, false
	}
	return *k.HandOff, true
}

// SetHandOffMark returns spec with hand-over mark m.
func SetHandOffMark(spec []byte, m HandOffMark) ([]byte, error) {
	return setSpecKey(spec, "handoff", m)
}

// ClearHandOffMark returns spec without its hand-over mark.
func ClearHandOffMark(spec []byte) ([]byte, error) { return setSpecKey(spec, "handoff", nil) }

// EvacuateOptions configure an Evacuator.
type EvacuateOptions struct {
	// Store is the cluster's store.
	Store store.Store
	// Clock (nil: time.Now).
	Clock func() time.Time
	// Pick chooses the target of sb, never exclude (the source).
	Pick func(ctx context.Context, sb store.Sandbox, exclude string) (store.Node, error)
	// HandOff runs the hand-over on the source node (sandbox.Service.HandOff
	// there).
	HandOff func(ctx context.Context, source store.Node, sandboxID string) (HandOffResult, error)
	// Adopt runs the adoption on the target (sandbox.Service.Adopt there).
	Adopt func(ctx context.Context, target store.Node, sandboxID string) error
	// Finish ends the hand-over on the source (sandbox.Service.FinishHandOff
	// there): moved says whether the target adopted the sandbox.
	Finish func(ctx context.Context, source store.Node, sandboxID string, h HandOffResult, moved bool) error
	// Audit records each move (nil: nothing).
	Audit audit.Recorder
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Evacuator moves the sandboxes off a node.
type Evacuator struct{ o EvacuateOptions }

// NewEvacuator returns an Evacuator.
func NewEvacuator(o EvacuateOptions) (*Evacuator, error) {
	if o.Store == nil || o.Pick == nil || o.HandOff == nil || o.Adopt == nil || o.Finish == nil {
		return nil, fmt.Errorf("evacuator: a store, Pick, HandOff, Adopt and Finish are needed: %w", errs.ErrInvalid)
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
	return &Evacuator{o: o}, nil
}

// Evacuate sets node draining and moves each sandbox it holds in force to
// another node; phase, when set, hears progress ("2/5 sb-x: hand over").
// A sandbox that could not move stays on the node and is listed in the
// result's Failed; the error is set only when the evacuation could not run
// (an unknown node, the store).
func (e *Evacuator) Evacuate(ctx context.Context, node string, phase func(string)) (client.EvacuateResult, error) {
	res := client.EvacuateResult{Node: node, Moved: []client.EvacuatedSandbox{}, Failed: []client.EvacuatedSandbox{}}
	if phase == nil {
		phase = func(string) {}
	}
	st := e.o.Store
	source, err := st.SetNodeState(ctx, node, store.NodeDraining)
	if errors.Is(err, errs.ErrNotFound) {
		return res, fmt.Errorf("evacuate node %s: it is not registered: %w", node, errs.ErrNotFound)
	}
	if err != nil {
		return res, fmt.Errorf("evacuate node %s: drain it: %w", node, err)
	}
	owns, err := st.ListOwnerships(ctx, node)
	if err != nil {
		return res, fmt.Errorf("evacuate node %s: list its leases: %w", node, err)
	}
	var ids []string
	for _, o := range owns {
		if !strings.Contains(o.SandboxID, "/") && o.ValidAt(e.o.Clock()) {
			ids = append(ids, o.SandboxID)
		}
	}
	for i, id := range ids {
		step := func(s string) { phase(fmt.Sprintf("%d/%d %s: %s", i+1, len(ids), id, s)) }
		mv, tenant, err := e.move(ctx, source, id, step)
		if err != nil {
			mv.Error = err.Error()
			res.Failed = append(res.Failed, mv)
			e.o.Logger.Warn("sandbox not evacuated; it stays on its node", "sandbox", id, "node", node, "target", mv.Target, "err", err)
			e.record(ctx, tenant, id, mv.Target, err)
			continue
		}
		if mv.Sandbox != "" {
			res.Moved = append(res.Moved, mv)
			e.o.Logger.Info("sandbox evacuated", "sandbox", id, "from", node, "to", mv.Target, "pause", mv.PauseSeconds)
			e.record(ctx, tenant, id, mv.Target, nil)
		}
	}
	phase("done")
	return res, nil
}

// move moves one sandbox of tenant (a zero result with no error: nothing
// to move).
func (e *Evacuator) move(ctx context.Context, source store.Node, id string, step func(string)) (client.EvacuatedSandbox, string, error) {
	sb, err := e.o.Store.GetSandbox(ctx, "", id)
	if errors.Is(err, errs.ErrNotFound) {
		return client.EvacuatedSandbox{}, "", nil
	}
	if err != nil {
		return client.EvacuatedSandbox{Sandbox: id}, "", err
	}
	mv, err := e.moveOne(ctx, source, sb, step)
	return mv, sb.TenantID, err
}

func (e *Evacuator) moveOne(ctx context.Context, source store.Node, sb store.Sandbox, step func(string)) (client.EvacuatedSandbox, error) {
	id := sb.ID
	mv := client.EvacuatedSandbox{Sandbox: id}
	switch sb.State {
	case store.StateRunning, store.StatePaused, store.StateStopped:
	default:
		return client.EvacuatedSandbox{}, nil // deleted, archived, lost ...: nothing runs here to move
	}
	step("pick a target")
	target, err := e.o.Pick(ctx, sb, source.Name)
	if err != nil {
		return mv, fmt.Errorf("pick a target: %w", err)
	}
	mv.Target = target.Name
	step("push, pause, push the delta, hand over")
	h, err := e.o.HandOff(ctx, source, id)
	if err != nil {
		return mv, fmt.Errorf("hand over on %s (the sandbox stays there): %w", source.Name, err)
	}
	mv.Push = h.Push
	step("restore on " + target.Name)
	aerr := e.o.Adopt(ctx, target, id)
	if !h.PausedAt.IsZero() {
		mv.PauseSeconds = e.o.Clock().Sub(h.PausedAt).Seconds()
	}
	step("finish on " + source.Name)
	ferr := e.o.Finish(ctx, source, id, h, aerr == nil)
	switch {
	case aerr != nil && ferr != nil:
		return mv, fmt.Errorf("adopt on %s: %w; and taking it back on %s failed: %v (the sandbox keeps its push %s and can be adopted)",
			target.Name, aerr, source.Name, ferr, h.Push)
	case aerr != nil:
		return mv, fmt.Errorf("adopt on %s (it was taken back on %s): %w", target.Name, source.Name, aerr)
	case ferr != nil:
		// Moved: only the source's frozen copy is left over.
		e.o.Logger.Error("evacuated sandbox: the source did not drop its copy", "sandbox", id, "node", source.Name, "err", ferr)
	}
	return mv, nil
}

func (e *Evacuator) record(ctx context.Context, tenant, id, target string, err error) {
	outcome := "ok"
	if err != nil {
		outcome = err.Error()
	}
	if rerr := e.o.Audit.Record(context.WithoutCancel(ctx), audit.Entry{Actor: "daemon", Tenant: tenant, Action: "sandbox.evacuate",
		Target: id + " -> " + target, Outcome: outcome}); rerr != nil {
		e.o.Logger.Error("audit record", "action", "sandbox.evacuate", "target", id, "err", rerr)
	}
}
