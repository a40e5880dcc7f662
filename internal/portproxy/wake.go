package portproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/stead-dev/stead/internal/errs"
)

// ready returns the address of t's port, waking the sandbox first when it
// is stopped, paused or archived and has auto_resume. Otherwise it answers
// the request with an error and returns false.
func (p *Proxy) ready(w http.ResponseWriter, r *http.Request, t Target, port int, log *slog.Logger) (netip.AddrPort, bool) {
	switch t.State {
	case stateRunning:
		if !t.Addr.IsValid() {
			writeProblem(w, http.StatusServiceUnavailable, fmt.Sprintf(
				"sandbox %s is running without a network address (the daemon runs without networking, or it is being set up)", t.SandboxID))
			return netip.AddrPort{}, false
		}
		return netip.AddrPortFrom(t.Addr, uint16(port)), true
	case stateStopped, statePaused, stateArchived:
		if !t.AutoResume {
			writeProblem(w, http.StatusServiceUnavailable, notAwakeDetail(t))
			return netip.AddrPort{}, false
		}
	default:
		writeProblem(w, http.StatusServiceUnavailable, fmt.Sprintf("sandbox %s is %s", t.SandboxID, t.State))
		return netip.AddrPort{}, false
	}
	start := time.Now()
	addr, err := p.wake(r.Context(), t, port)
	if err != nil {
		switch {
		case r.Context().Err() != nil:
			log.DebugContext(r.Context(), "port proxy: client went away during wake", "op", "wake", "dur", time.Since(start))
		case errors.Is(err, context.DeadlineExceeded):
			log.WarnContext(r.Context(), "port proxy: wake timed out", "op", "wake", "dur", time.Since(start), "err", err)
			writeProblem(w, http.StatusGatewayTimeout, fmt.Sprintf(
				"sandbox %s was woken but port %d did not accept connections within %s", t.SandboxID, port, p.wakeTimeout))
		case errors.Is(err, errs.ErrNotFound):
			notFound(w, route{id: t.SandboxID, port: port})
		default:
			log.WarnContext(r.Context(), "port proxy: wake failed", "op", "wake", "dur", time.Since(start), "err", err)
			writeProblem(w, http.StatusServiceUnavailable, fmt.Sprintf(
				"sandbox %s is %s and could not be woken: %s", t.SandboxID, t.State, errs.Message(err)))
		}
		return netip.AddrPort{}, false
	}
	log.DebugContext(r.Context(), "port proxy: woke sandbox", "op", "wake", "state", t.State, "dur", time.Since(start))
	return addr, true
}

// notAwakeDetail says that a sandbox is not running and how to change
// that.
func notAwakeDetail(t Target) string {
	how := "start it (stead start " + t.SandboxID + ")"
	if t.State == statePaused {
		how = "resume it (stead resume " + t.SandboxID + ")"
	}
	return fmt.Sprintf("sandbox %s is %s: %s, or set auto_resume on it so that requests wake it", t.SandboxID, t.State, how)
}

// wake wakes t's sandbox (one Wake call for all the requests waiting on
// it) and waits, within the wake timeout, until its port accepts a TCP
// connection.
func (p *Proxy) wake(ctx context.Context, t Target, port int) (netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(ctx, p.wakeTimeout)
	defer cancel()
	ch := p.wakes.DoChan(t.SandboxID, func() (any, error) {
		// Not bound by the request that started the wake: the others
		// waiting on it must not fail when it goes away.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.wakeTimeout)
		defer cancel()
		// A wake that just finished may have been for this request too.
		if cur, err := p.b.Target(wctx, t.SandboxID, port); err == nil && cur.State == stateRunning {
			return nil, nil
		}
		if err := p.b.Wake(wctx, t.SandboxID); err != nil {
			return nil, fmt.Errorf("wake sandbox %s: %w", t.SandboxID, err)
		}
		return nil, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return netip.AddrPort{}, res.Err
		}
	case <-ctx.Done():
		return netip.AddrPort{}, fmt.Errorf("wake sandbox %s: %w", t.SandboxID, ctx.Err())
	}
	tick := time.NewTicker(wakePoll)
	defer tick.Stop()
	for {
		cur, err := p.b.Target(ctx, t.SandboxID, port)
		if err != nil && ctx.Err() == nil {
			return netip.AddrPort{}, fmt.Errorf("look up woken sandbox %s: %w", t.SandboxID, err)
		}
		if err == nil && cur.Addr.IsValid() {
			addr := netip.AddrPortFrom(cur.Addr, uint16(port))
			if p.probe(ctx, addr) {
				return addr, nil
			}
		}
		select {
		case <-ctx.Done():
			return netip.AddrPort{}, fmt.Errorf("wait for port %d of sandbox %s: %w", port, t.SandboxID, ctx.Err())
		case <-tick.C:
		}
	}
}

// probe reports whether addr accepts a TCP connection now.
func (p *Proxy) probe(ctx context.Context, addr netip.AddrPort) bool {
	ctx, cancel := context.WithTimeout(ctx, min(probeTimeout, p.dialTimeout))
	defer cancel()
	c, err := p.dialer.DialContext(ctx, "tcp", addr.String())
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
