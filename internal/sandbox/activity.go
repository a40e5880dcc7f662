package sandbox

import (
	"context"
	"sync"
	"time"

	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/store"
)

// activity tracks, per running sandbox, the last API, exec or terminal
// activity and the cpu counter at the last idle check.
type activity struct {
	mu sync.Mutex
	m  map[string]*actState
}

type actState struct {
	last    time.Time     // last activity of any kind
	cpu     time.Duration // cpu counter at lastCPU
	lastCPU time.Time
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

func (a *activity) touch(id string, now time.Time) {
	a.mu.Lock()
	st := a.get(id, now)
	if now.After(st.last) {
		st.last = now
	}
	a.mu.Unlock()
}

func (a *activity) forget(id string) {
	a.mu.Lock()
	delete(a.m, id)
	a.mu.Unlock()
}

// IdleCheck applies the auto-stop policy once to every running sandbox.
// Activity is an API call on the sandbox, exec output, terminal traffic, or
// cpu use at or above the threshold since the last check; an exec or an
// attach that merely stays open is not activity, so a forgotten session
// cannot keep a sandbox awake forever. A sandbox with no activity for its
// idle timeout is stopped or paused; one past its max runtime is stopped;
// one whose init died is marked stopped ("crashed"). It returns the ids it
// stopped or paused.
func (s *Service) IdleCheck(ctx context.Context) []string {
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{States: []store.SandboxState{store.StateRunning}})
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
		if s.idle(sb.ID, sp.IdleTimeout, stats, now) {
			s.log.Info("sandbox idle", "sandbox", sb.ID, "idle_timeout", sp.IdleTimeout, "on_idle", sp.OnIdle)
			if sp.OnIdle == "pause" {
				_, err = s.pause(ctx, sb.TenantID, sb.ID, "idle")
				s.record(ctx, sb.TenantID, "sandbox.idle_pause", sb.ID, err)
			} else {
				_, err = s.stop(ctx, sb.TenantID, sb.ID, "idle")
				s.record(ctx, sb.TenantID, "sandbox.idle_stop", sb.ID, err)
			}
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
			st.last = now
		}
	}
	st.cpu, st.lastCPU = stats.CPUUsage, now
	return now.Sub(st.last) >= timeout
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
			s.RunBackupPolicies(ctx)
			s.CheckPoolFill(ctx)
		}
	}
}

// PurgeExpired destroys soft-deleted sandboxes and volumes whose retention
// has ended.
func (s *Service) PurgeExpired(ctx context.Context) {
	defer s.purgeExpiredVolumes(ctx)
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{States: []store.SandboxState{store.StateDeleted}})
	if err != nil {
		return
	}
	now := s.now()
	expired := func(sb store.Sandbox) bool {
		return sb.State == store.StateDeleted && sb.PurgeAt != nil && !now.Before(*sb.PurgeAt)
	}
	for _, sb := range list {
		if !expired(sb) {
			continue
		}
		unlock := s.lock(sb.ID)
		// Re-read under the lock: an undelete may have won the race.
		if cur, err := s.st.GetSandbox(ctx, sb.TenantID, sb.ID); err == nil && expired(cur) {
			err := s.purgeLocked(ctx, cur)
			if err != nil {
				s.log.Error("purge expired sandbox", "sandbox", sb.ID, "err", err)
			}
			s.record(ctx, sb.TenantID, "sandbox.purge_expired", sb.ID, err)
		}
		unlock()
	}
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
