package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// sseKeepAlive is how often a silent exec stream gets a comment line, so
// proxies and clients see the connection is alive. The first keep-alive
// also commits the 200 status of a stream that has produced nothing yet.
const sseKeepAlive = 15 * time.Second

// execInput is the input of POST /v1/sandboxes/{id}/exec.
type execInput struct {
	SandboxRef
	Accept string `header:"Accept" doc:"text/event-stream for a live stream of ExecEvents; anything else for a buffered ExecResult"`
	Body   client.ExecRequest
}

// registerExec adds POST /v1/sandboxes/{id}/exec.
func (s *server) registerExec() {
	reg := s.api.OpenAPI().Components.Schemas
	o := s.op(http.MethodPost, "/v1/sandboxes/{id}/exec", "exec",
		"Run a command in a running sandbox", "exec", http.StatusOK)
	o.Description = "With `Accept: text/event-stream` the output is streamed as Server-Sent Events " +
		"as it is produced: `event: stdout` / `event: stderr` with an ExecEvent whose `data` is the " +
		"base64 chunk, then one `event: exit` (exit_code, signal, pid, timed_out) or `event: error`. " +
		"Otherwise the call returns when the process exits with a buffered ExecResult. " +
		"A background exec returns at once with the pid."
	o.Errors = append(o.Errors, http.StatusConflict)
	o.Responses = map[string]*huma.Response{
		"200": {
			Description: "Buffered result, or a Server-Sent Events stream",
			Content: map[string]*huma.MediaType{
				"application/json":  {Schema: reg.Schema(reflect.TypeFor[client.ExecResult](), true, "")},
				"text/event-stream": {Schema: reg.Schema(reflect.TypeFor[client.ExecEvent](), true, "")},
			},
		},
	}
	huma.Register(s.api, o, func(ctx context.Context, in *execInput) (*huma.StreamResponse, error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "exec", err)
		}
		if len(in.Body.Command) == 0 || in.Body.Command[0] == "" {
			return nil, s.fail(ctx, "exec", fmt.Errorf("exec: command is empty: give the program and its arguments: %w", errs.ErrInvalid))
		}
		if wantsSSE(in.Accept) {
			return &huma.StreamResponse{Body: func(hc huma.Context) {
				s.execSSE(hc, p.TenantID, in.ID, in.Body)
			}}, nil
		}
		var stdout, stderr bytes.Buffer
		res, err := s.b.Exec(ctx, p.TenantID, in.ID, in.Body, &bufferStream{stdout: &stdout, stderr: &stderr})
		if err != nil {
			return nil, s.fail(ctx, "exec", err)
		}
		if len(res.Stdout) == 0 {
			res.Stdout = stdout.Bytes()
		}
		if len(res.Stderr) == 0 {
			res.Stderr = stderr.Bytes()
		}
		if res.Stdout == nil {
			res.Stdout = []byte{}
		}
		if res.Stderr == nil {
			res.Stderr = []byte{}
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			hc.SetHeader("Content-Type", "application/json")
			hc.SetStatus(http.StatusOK)
			if err := json.NewEncoder(hc.BodyWriter()).Encode(res); err != nil {
				s.log.DebugContext(ctx, "write exec result", "sandbox", in.ID, "err", err)
			}
		}}, nil
	})
}

// wantsSSE reports whether an Accept header asks for an event stream.
func wantsSSE(accept string) bool {
	return strings.Contains(strings.ToLower(accept), "text/event-stream")
}

// execSSE runs an exec whose output goes out as Server-Sent Events. The
// 200 status is committed by the first event (or keep-alive), so an error
// before any output (unknown sandbox, not running) is still a proper
// problem response; an error after that is an `error` event.
func (s *server) execSSE(hc huma.Context, tenant, id string, req client.ExecRequest) {
	r, w := humago.Unwrap(hc)
	ctx := r.Context()
	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}

	stop := make(chan struct{})
	var keepAlive sync.WaitGroup
	keepAlive.Add(1)
	go func() {
		defer keepAlive.Done()
		t := time.NewTicker(sseKeepAlive)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				_ = sw.comment("keep-alive")
			}
		}
	}()

	res, err := s.b.Exec(ctx, tenant, id, req, execStreamFunc(func(kind string, p []byte) error {
		return sw.event(kind, client.ExecEvent{Type: kind, Data: p})
	}))
	close(stop)
	keepAlive.Wait()

	if err != nil {
		if !sw.hasStarted() {
			s.writeProblem(w, r, "exec", err)
			return
		}
		p := s.problem(ctx, "exec", err)
		s.log.Log(ctx, logLevelFor(err), "exec stream failed", "sandbox", id, "tenant", tenant, "err", err)
		_ = sw.event("error", client.ExecEvent{Type: "error", Error: p.Detail})
		return
	}
	_ = sw.event("exit", client.ExecEvent{
		Type:     "exit",
		ExitCode: res.ExitCode,
		Signal:   res.Signal,
		Pid:      res.Pid,
		TimedOut: res.TimedOut,
	})
}

// sseWriter writes Server-Sent Events, flushing each one.
type sseWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	err     error
}

// hasStarted reports whether the status line has been sent.
func (s *sseWriter) hasStarted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// start sends the headers; the caller holds mu.
func (s *sseWriter) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
}

// event writes one event with v as its JSON data and flushes it. It
// returns an error once the client has gone, which stops the backend.
func (s *sseWriter) event(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.start()
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, data); err != nil {
		s.err = fmt.Errorf("write %s event: %w", name, err)
		return s.err
	}
	if err := s.rc.Flush(); err != nil {
		s.err = fmt.Errorf("flush %s event: %w", name, err)
		return s.err
	}
	return nil
}

// comment writes an SSE comment line (ignored by clients) and flushes.
func (s *sseWriter) comment(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.start()
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		s.err = err
		return err
	}
	if err := s.rc.Flush(); err != nil {
		s.err = err
		return err
	}
	return nil
}

// execStreamFunc adapts a function to ExecStream.
type execStreamFunc func(kind string, p []byte) error

// Stdout forwards a stdout chunk.
func (f execStreamFunc) Stdout(p []byte) error { return f("stdout", p) }

// Stderr forwards a stderr chunk.
func (f execStreamFunc) Stderr(p []byte) error { return f("stderr", p) }

// bufferStream collects exec output for a buffered result.
type bufferStream struct {
	mu             sync.Mutex
	stdout, stderr *bytes.Buffer
}

// Stdout appends to the stdout buffer.
func (b *bufferStream) Stdout(p []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stdout.Write(p)
	return nil
}

// Stderr appends to the stderr buffer.
func (b *bufferStream) Stderr(p []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stderr.Write(p)
	return nil
}
