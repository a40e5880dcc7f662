package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/agentlog"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/guest"
)

// logConfig resolves a service's log rotation (nil: the defaults) and
// validates it; errors wrap errs.ErrInvalid.
func logConfig(lc *client.LogConfig) (agentlog.Config, error) {
	c := agentlog.Config{MaxSize: agentlog.DefaultMaxSize, Keep: agentlog.DefaultKeep}
	if lc == nil {
		return c, nil
	}
	if lc.MaxSize != "" {
		n, err := agentlog.ParseSize(lc.MaxSize)
		if err != nil {
			return c, fmt.Errorf("service log max_size: %w", err)
		}
		c.MaxSize = n
	}
	if lc.Keep != nil {
		c.Keep = *lc.Keep
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// logView is the rotation a sandbox's log has, defaults filled in.
func logView(lc *client.LogConfig) *client.LogConfig {
	c, err := logConfig(lc)
	if err != nil {
		return lc
	}
	keep := c.Keep
	return &client.LogConfig{MaxSize: agentlog.FormatSize(c.MaxSize), Keep: &keep}
}

// parseSince turns a --since value, a duration back from now ("10m") or
// an RFC 3339 time, into a time; "" is the zero time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("since %q is neither a duration like 10m nor an RFC 3339 time: %w", s, errs.ErrInvalid)
}

// ReadAgentLog reads the supervised service's log across its rotated files
// (oldest first, decompressed), from opts.Since on; with opts.Follow it
// keeps reading new output, across rotations, until ctx ends. It works on
// stopped sandboxes too, since the log lives in the sandbox root. The log
// directory is resolved inside the sandbox root, and every file in it is
// opened without following a symlink (agentlog).
func (s *Service) ReadAgentLog(ctx context.Context, tenant, id string, opts client.LogOptions) (io.ReadCloser, error) {
	since, err := parseSince(opts.Since, s.now())
	if err != nil {
		return nil, err
	}
	v, _, err := s.fsFor(ctx, tenant, id, guest.AgentLog, false, false)
	if err != nil {
		return nil, err
	}
	dfd, name, err := v.root.OpenParent(v.inner)
	v.root.Close()
	if err != nil {
		if errors.Is(err, errs.ErrNotFound) {
			return io.NopCloser(strings.NewReader("")), nil
		}
		return nil, fmt.Errorf("read the agent log of sandbox %s: %w", id, err)
	}
	r, err := agentlog.Open(ctx, dfd, agentlog.ReadOptions{Name: name, Since: since, Follow: opts.Follow})
	if err != nil {
		return nil, fmt.Errorf("read the agent log of sandbox %s: %w", id, err)
	}
	return r, nil
}
