package sandbox

import (
	"context"
	"sync"
	"time"

	"github.com/stead-dev/stead/internal/api"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/store"
)

// ActivityKind names what showed a running sandbox to be in use. The idle
// policy (IdleCheck) stops or pauses a sandbox only after its idle timeout
// passed without activity of any kind.
type ActivityKind string

const (
	// ActivityAPI is a request of the sandbox's own agent (its token, on
	// /run/stead/api.sock or over TCP): checkpoints, session log, tasks,
	// observations, kv, orient, file history and its operations; and a
	// write by any other caller to the sandbox's agent state (an agent
	// harness outside the sandbox keeps it awake through its checkpoints
	// and session log as one inside does). Reads by other callers (a
	// dashboard polling checkpoints or orient) are not activity.
	ActivityAPI ActivityKind = "api"
	// ActivityExec is an exec starting, ending or writing output.
	ActivityExec ActivityKind = "exec"
	// ActivityTerminal is traffic on an attached terminal (a silent one
	// is not activity).
	ActivityTerminal ActivityKind = "terminal"
	// ActivityFiles is a file read or write through the API.
	ActivityFiles ActivityKind = "files"
	// ActivityCPU is cpu use at or above Options.IdleCPUThreshold between
	// two idle checks.
	ActivityCPU ActivityKind = "cpu"
	// ActivityNetwork is traffic through the sandbox's network interface.
	// Nothing reports it yet: networking will, as an ActivitySource that
	// reads the interface's counters at every idle check.
	ActivityNetwork ActivityKind = "network"
	// ActivityPort is a request to one of the sandbox's exposed ports.
	// Nothing reports it yet: the port proxy will, through NoteActivity on
	// every request it forwards (and wake a stopped sandbox first when it
	// has auto_resume).
	ActivityPort ActivityKind = "port"
)

// ActivitySource reports activity the service cannot see itself, polled at
// every idle check of a running sandbox with an idle timeout (as the cpu
// counter is). It is the hook for network traffic: the network layer's
// source compares the sandbox interface's byte counters with those of its
// last poll.
type ActivitySource interface {
	// Kind is what the source's activity is recorded as.
	Kind() ActivityKind
	// Active reports whether sandbox id was in use since the source's last
	// poll for it. It must return quickly; an error counts as no activity
	// (and is logged).
	Active(ctx context.Context, id string) (bool, error)
}

// NoteActivity records that running sandbox id is in use now, as kind. It
// is the hook for what happens outside the service: the API layer calls it
// (through SandboxActivity) for the agent's own requests, and the port
// proxy will for requests to exposed ports. A sandbox that is not running
// under this daemon is left alone: activity never starts one, and a
// stopped sandbox's idle clock starts afresh when it starts.
func (s *Service) NoteActivity(id string, kind ActivityKind) {
	s.act.touch(id, kind, s.now())
}

// SandboxActivity implements api.ActivityBackend: the API calls it for
// every request of a sandbox's own token (p.Sandbox, the sandbox itself)
// and for writes of other callers to a sandbox's agent state (sandbox is
// then the id or name of the request).
func (s *Service) SandboxActivity(ctx context.Context, p api.Principal, sandbox string) {
	id := p.Sandbox
	if id == "" {
		sb, err := s.get(ctx, p.TenantID, sandbox)
		if err != nil {
			return // the request itself answers for an unknown sandbox
		}
		id = sb.ID
	}
	s.NoteActivity(id, ActivityAPI)
}

// activity tracks, per running sandbox, the last activity (ActivityKind)
// and the cpu counter at the last idle check. A sandbox is tracked from
// its start (or its adoption by a new daemon) to its stop.
type activity struct {
	mu sync.Mutex
	m  map[string]*actState
}

type actState struct {
	last     time.Time    // last activity of any kind
	lastKind ActivityKind // what it was ("" for the start)
	cpu      time.Duration
	lastCPU  time.Time // when cpu was read
}

func newActivity() *activity { return &activity{m: map[string]*actState{}} }

func (a *activity) get(id string, now time.Time) *actState {
	st, ok := a.m[id]
	if !ok {
		st = &actState{last: now}
		a.m[id] = st
	}
	return st
}

func (a *activity) started(id string, now time.Time) {
	a.mu.Lock()
	a.m[id] = &actState{last: now}
	a.mu.Unlock()
}

// touch records activity of a tracked sandbox; an untracked one (not
// running under this daemon) is ignored.
func (a *activity) touch(id string, kind ActivityKind, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.m[id]
	if ok && !now.Before(st.last) {
		st.last, st.lastKind = now, kind
	}
}

// lastActivity returns when and as what sandbox id was last in use.
func (a *activity) lastActivity(id string) (time.Time, ActivityKind, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.m[id]
	if !ok {
		return time.Time{}, "", false
	}
	return st.last, st.lastKind, true
}

func (a *activity) forget(id string) {
	a.mu.Lock()
	delete(a.m, id)
	a.mu.Unlock()
}

// IdleCheck applies the auto-stop policy once to every running sandbox.
// Activity is any ActivityKind: the agent's own API calls, exec output,
// terminal traffic, file access through the API, cpu use at or above the
// threshold since the last check, and what an ActivitySource reports; an
// exec or an attach that merely stays open is not activity, so a forgotten
// session cannot keep a sandbox awake forever. A sandbox with no activity for its
// idle timeout is stopped or paused; one past its max runtime is stopped;
// one whose init died is marked stopped ("crashed"). It returns the ids it
// stopped or paused.
func (s *Service) IdleCheck(ctx context.Context) []string {
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{States: []store.SandboxState{store.StateRunning}})
	list = s.owned(list)
	if err != nil {
		s.log.Error("idle check: list sandboxes", "err", err)
		return nil
	}
	var acted []string
	for _, sb := range list {
		sp, err := decodeSpec(sb)
		if err != nil {
			continue
		}
		if sp.IdleTimeout <= 0 && sp.MaxRuntime <= 0 {
			if st, err := s.rt.Status(ctx, sb.ID); err == nil && st != steadrt.StatusRunning && st != steadrt.StatusPaused {
				s.markCrashed(ctx, sb)
			}
			continue
		}
		now := s.now()
		if sp.MaxRuntime > 0 && sb.StartedAt != nil && now.Sub(*sb.StartedAt) >= sp.MaxRuntime {
			s.log.Info("sandbox reached its max runtime", "sandbox", sb.ID, "max_runtime", sp.MaxRuntime)
			_, err := s.stop(ctx, sb.TenantID, sb.ID, "max_runtime")
			if isAlready(err) {
				continue // stopped by someone else meanwhile
			}
			s.record(ctx, sb.TenantID, "sandbox.max_runtime_stop", sb.ID, err)
			if err == nil {
				acted = append(acted, sb.ID)
			}
			continue
		}
		if sp.IdleTimeout <= 0 {
			continue
		}
		if st, err := s.rt.Status(ctx, sb.ID); err == nil && st != steadrt.StatusRunning && st != steadrt.StatusPaused {
			s.markCrashed(ctx, sb)
			continue
		}
		stats, err := s.rt.Stats(ctx, sb.ID)
		if err != nil {
			continue
		}
		s.pollActivitySources(ctx, sb.ID, now)
		if s.idle(sb.ID, sp.IdleTimeout, stats, now) {
			last, kind, _ := s.act.lastActivity(sb.ID)
			s.log.Info("sandbox idle", "sandbox", sb.ID, "idle_timeout", sp.IdleTimeout, "on_idle", sp.OnIdle,
				"last_activity", last, "last_activity_kind", kind)
			action := "sandbox.idle_stop"
			if sp.OnIdle == "pause" {
				action = "sandbox.idle_pause"
				_, err = s.pause(ctx, sb.TenantID, sb.ID, "idle")
			} else {
				_, err = s.stop(ctx, sb.TenantID, sb.ID, "idle")
			}
			if isAlready(err) {
				continue // stopped or paused by someone else meanwhile
			}
			s.record(ctx, sb.TenantID, action, sb.ID, err)
			if err == nil {
				acted = append(acted, sb.ID)
			} else {
				s.log.Error("idle action failed", "sandbox", sb.ID, "err", err)
			}
		}
	}
	return acted
}

// idle updates the sandbox's activity from its cpu counter and reports
// whether it has been idle for timeout.
func (s *Service) idle(id string, timeout time.Duration, stats steadrt.Stats, now time.Time) bool {
	a := s.act
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.get(id, now)
	if !st.lastCPU.IsZero() {
		wall := now.Sub(st.lastCPU)
		used := stats.CPUUsage - st.cpu
		if wall > 0 && float64(used)/float64(wall) >= s.opts.IdleCPUThreshold {
			st.last, st.lastKind = now, ActivityCPU
		}
	}
	st.cpu, st.lastCPU = stats.CPUUsage, now
	return now.Sub(st.last) >= timeout
}

// pollActivitySources asks every Options.ActivitySources whether sandbox
// id was in use since its last poll.
func (s *Service) pollActivitySources(ctx context.Context, id string, now time.Time) {
	for _, src := range s.opts.ActivitySources {
		active, err := src.Active(ctx, id)
		if err != nil {
			s.log.Warn("idle check: activity source", "sandbox", id, "kind", src.Kind(), "err", err)
			continue
		}
		if active {
			s.act.touch(id, src.Kind(), now)
		}
	}
}

// RunPolicies runs the idle check every interval, purges expired
// soft-deleted sandboxes and warns as the pool fills, until ctx ends.
func (s *Service) RunPolicies(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.IdleCheck(ctx)
			s.PurgeExpired(ctx)
			s.PruneObservations(ctx)
			s.RunBackupPolicies(ctx)
			s.CheckPoolFill(ctx)
			s.CheckLimits(ctx)
			s.CheckGateway(ctx)
		}
	}
}

// CheckGateway repairs the network of every running sandbox when the
// gateway link lost what their routes need (its addresses, its state):
// without it every sandbox is cut off, its resolver and egress proxy
// with it, until the daemon's next start.
func (s *Service) CheckGateway(ctx context.Context) {
	n := s.net()
	if n == nil || n.GatewayIntact() {
		return
	}
	s.log.Warn("the sandboxes' gateway link lost its addresses or went down; repairing every running sandbox's network", "gateway", n.Gateway())
	if err := n.RepairGateway(ctx); err != nil {
		s.log.Error("repair the sandboxes' network", "err", err)
		return
	}
	s.log.Info("repaired the sandboxes' network")
}

// markCrashed records that a running sandbox's init died under a live
// daemon, and clears what is left of it in the runtime.
func (s *Service) markCrashed(ctx context.Context, sb store.Sandbox) {
	unlock := s.lock(sb.ID)
	defer unlock()
	cur, err := s.st.GetSandbox(ctx, sb.TenantID, sb.ID)
	if err != nil || (cur.State != store.StateRunning && cur.State != store.StatePaused) {
		return
	}
	if st, err := s.rt.Status(ctx, sb.ID); err != nil || st == steadrt.StatusRunning || st == steadrt.StatusPaused {
		return
	}
	s.rt.Kill(ctx, sb.ID)
	s.closeAgentSocket(sb.ID)
	now := s.now()
	cur.State, cur.StoppedAt, cur.StopReason = store.StateStopped, &now, "crashed"
	s.act.forget(sb.ID)
	if _, err := s.st.UpdateSandbox(ctx, cur); err != nil {
		s.log.Error("mark crashed sandbox", "sandbox", sb.ID, "err", err)
		return
	}
	s.log.Warn("sandbox init died; marked stopped", "sandbox", sb.ID)
	s.record(ctx, sb.TenantID, "sandbox.crash", sb.ID, nil)
}
