package sandbox

import (
	"context"
	"fmt"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// UpdateSandbox changes the idle policy of an existing sandbox (any state
// but deleted): its idle timeout and what happens at it. An absent field
// keeps its value; a bad one is errs.ErrInvalid and changes nothing. The
// change counts as activity, so the new timeout runs from now (what an
// E2B client's setTimeout means). Another tenant's sandbox is
// errs.ErrNotFound.
func (s *Service) UpdateSandbox(ctx context.Context, tenant, id string, req client.UpdateSandboxRequest) (client.Sandbox, error) {
	if req.OnIdle != nil && *req.OnIdle != "stop" && *req.OnIdle != "pause" {
		return client.Sandbox{}, fmt.Errorf("on_idle %q (want stop or pause): %w", *req.OnIdle, errs.ErrInvalid)
	}
	var idle *string
	if req.IdleTimeout != nil {
		if *req.IdleTimeout == "" {
			return client.Sandbox{}, fmt.Errorf("idle_timeout is empty (want a duration like 15m, or 0): %w", errs.ErrInvalid)
		}
		if _, err := parseDuration("idle_timeout", *req.IdleTimeout, 0); err != nil {
			return client.Sandbox{}, err
		}
		idle = req.IdleTimeout
	}
	return s.transition(ctx, tenant, id, "update",
		[]store.SandboxState{store.StateCreating, store.StateRunning, store.StatePaused, store.StateStopped, store.StateError, store.StateArchived}, nil,
		func(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
			sp, err := decodeSpec(sb)
			if err != nil {
				return sb, err
			}
			if idle != nil {
				sp.IdleTimeout, _ = parseDuration("idle_timeout", *idle, 0)
			}
			if req.OnIdle != nil {
				sp.OnIdle = *req.OnIdle
			}
			if err := setSpec(&sb, sp); err != nil {
				return sb, err
			}
			sb, err = s.st.UpdateSandbox(ctx, sb)
			if err == nil {
				s.act.touch(sb.ID, ActivityAPI, s.now())
			}
			return sb, err
		})
}
