package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// logPollInterval is how often a followed log is re-read for new lines.
const logPollInterval = 500 * time.Millisecond

// registerLogs adds GET /v1/sandboxes/{id}/logs.
func (s *server) registerLogs() {
	o := s.op(http.MethodGet, "/v1/sandboxes/{id}/logs", "agent-log",
		"Read the agent service's log (text); with follow, keep streaming new output", "sandboxes", http.StatusOK)
	o.Description = "The log of the supervised agent service (/var/log/agent.log in the sandbox). " +
		"It is kept across crashes and stop/start, and rotated by size (the service's `log` setting): " +
		"the response holds the rotated files, oldest first and decompressed, then the current one. " +
		"With `since` it starts at the output written since then. With `follow=true` the response " +
		"stays open and new output is sent as it is written, across rotations, until the client disconnects."
	o.Responses = map[string]*huma.Response{
		"200": {
			Description: "The log as text",
			Content:     map[string]*huma.MediaType{"text/plain": {Schema: &huma.Schema{Type: "string"}}},
		},
	}
	huma.Register(s.api, o, func(ctx context.Context, in *struct {
		SandboxRef
		Follow bool   `query:"follow" doc:"Keep the response open and stream new output"`
		Since  string `query:"since" doc:"Only output written since then (to about a second): a Go duration back from now (10m) or an RFC 3339 time"`
	}) (*huma.StreamResponse, error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "read agent log", err)
		}
		if lr, ok := s.b.(agentLogReader); ok {
			rc, err := lr.ReadAgentLog(ctx, p.TenantID, in.ID, client.LogOptions{Follow: in.Follow, Since: in.Since})
			if err != nil {
				return nil, s.fail(ctx, "read agent log", err)
			}
			return &huma.StreamResponse{Body: func(hc huma.Context) {
				r, w := humago.Unwrap(hc)
				if err := copyLog(w, rc); err != nil && r.Context().Err() == nil {
					s.log.Log(r.Context(), logLevelFor(err), "stream agent log", "sandbox", in.ID, "tenant", p.TenantID, "err", err)
				}
			}}, nil
		}
		if in.Since != "" {
			return nil, s.fail(ctx, "read agent log", fmt.Errorf("since: %w", errs.ErrUnsupported))
		}
		rc, err := s.b.AgentLog(ctx, p.TenantID, in.ID)
		if err != nil {
			return nil, s.fail(ctx, "read agent log", err)
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			r, w := humago.Unwrap(hc)
			reopen := func(ctx context.Context) (io.ReadCloser, error) {
				return s.b.AgentLog(ctx, p.TenantID, in.ID)
			}
			if err := streamLog(r.Context(), w, rc, in.Follow, reopen); err != nil && r.Context().Err() == nil {
				s.log.Log(r.Context(), logLevelFor(err), "stream agent log", "sandbox", in.ID, "tenant", p.TenantID, "err", err)
			}
		}}, nil
	})
}

// registerServiceInput adds POST /v1/sandboxes/{id}/service/input.
func (s *server) registerServiceInput() {
	o := s.op(http.MethodPost, "/v1/sandboxes/{id}/service/input", "service-input",
		"Write to the agent service's stdin (what `stead attach` types)", "sandboxes", http.StatusNoContent)
	o.Errors = append(o.Errors, http.StatusConflict)
	huma.Register(s.api, o, func(ctx context.Context, in *struct {
		SandboxRef
		Body client.ServiceInputRequest
	}) (*struct{}, error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "service input", err)
		}
		if err := s.b.ServiceInput(ctx, p.TenantID, in.ID, []byte(in.Body.Data)); err != nil {
			return nil, s.fail(ctx, "service input", err)
		}
		return nil, nil
	})
}

// agentLogReader is implemented by a backend whose agent log rotates
// (sandbox.Service): it reads across the rotated files and follows the log
// across rotations itself, so nothing written between two polls is lost.
type agentLogReader interface {
	// ReadAgentLog reads the log of sandbox id of tenant (errs.ErrNotFound
	// for another tenant's); with opts.Follow the reader blocks for new
	// output until ctx ends.
	ReadAgentLog(ctx context.Context, tenant, id string, opts client.LogOptions) (io.ReadCloser, error)
}

// copyLog streams rc to w, flushing after every read, and closes rc.
func copyLog(w http.ResponseWriter, rc io.ReadCloser) error {
	defer func() { _ = rc.Close() }()
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher := http.NewResponseController(w)
	_ = flusher.Flush()
	buf := make([]byte, 64<<10)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return fmt.Errorf("write log: %w", werr)
			}
			if ferr := flusher.Flush(); ferr != nil {
				return fmt.Errorf("flush log: %w", ferr)
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read log: %w", err)
		}
	}
}

// streamLog copies rc to w, flushing as it goes. With follow it polls for
// new output: it reopens the log and skips what was already sent (a log
// that became shorter was truncated or rotated and is sent from its start).
func streamLog(ctx context.Context, w http.ResponseWriter, rc io.ReadCloser, follow bool,
	reopen func(context.Context) (io.ReadCloser, error)) error {
	defer func() { _ = rc.Close() }()
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher := http.NewResponseController(w)
	_ = flusher.Flush()

	var off int64
	buf := make([]byte, 32<<10)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return fmt.Errorf("write log: %w", werr)
			}
			off += int64(n)
			if ferr := flusher.Flush(); ferr != nil {
				return fmt.Errorf("flush log: %w", ferr)
			}
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, io.EOF) {
			return fmt.Errorf("read log: %w", err)
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(logPollInterval):
		}
		_ = rc.Close()
		next, err := reopen(ctx)
		if err != nil {
			rc = io.NopCloser(eofReader{})
			return fmt.Errorf("reopen log: %w", err)
		}
		rc = next
		if off, err = skipTo(rc, off); err != nil {
			return fmt.Errorf("seek log: %w", err)
		}
	}
}

// skipTo positions r at off, or at 0 when r is now shorter than off. It
// returns the new offset.
func skipTo(r io.Reader, off int64) (int64, error) {
	if sk, ok := r.(io.Seeker); ok {
		size, err := sk.Seek(0, io.SeekEnd)
		if err != nil {
			return 0, err
		}
		if size < off {
			off = 0
		}
		_, err = sk.Seek(off, io.SeekStart)
		return off, err
	}
	n, err := io.CopyN(io.Discard, r, off)
	if errors.Is(err, io.EOF) {
		// Shorter than what was sent: it was truncated; nothing to resend.
		return n, nil
	}
	return n, err
}

// eofReader is an empty reader.
type eofReader struct{}

// Read always returns io.EOF.
func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
