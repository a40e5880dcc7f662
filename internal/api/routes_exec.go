package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// sseKeepAlive is how often a silent exec stream gets a comment line, so
// proxies and clients see the connection is alive. The first keep-alive
// also commits the 200 status of a stream that has produced nothing yet.
const sseKeepAlive = 15 * time.Second

// maxBufferedOutput is how much of each of stdout and stderr a buffered
// (non-streaming) exec keeps in memory. Output beyond it is dropped and the
// result is marked Truncated; the SSE stream has no such limit.
const maxBufferedOutput = 16 << 20

// errStreamClosed is returned to a backend that writes exec output after
// the request it belonged to has finished.
var errStreamClosed = errors.New("exec output stream is closed: the request has finished")

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
		"chunk as text (a UTF-8 character is never split between chunks; only a chunk that is not valid UTF-8 " +
		"also carries its exact bytes in `data_base64`), then one `event: exit` (exit_code, signal, pid, timed_out) or `event: error`. " +
		"Otherwise the call returns when the process exits with a buffered ExecResult, whose `stdout` and `stderr` " +
		"are text (`stdout_base64`/`stderr_base64` carry the exact bytes only when they are not valid UTF-8). " +
		"A background exec returns at once with the pid. " +
		"A program that does not exist ends with exit_code 127, one that cannot run (not executable) with 126, " +
		"as in a shell, and no pid; its stderr says why (`stead: exec: \"nope\": executable file not found in $PATH`). " +
		"A cwd that does not exist or cannot be entered is a 400 naming the directory."
	o.Errors = append(o.Errors, http.StatusConflict)
	o.Responses = map[string]*huma.Response{
		"200": {
			Description: "Buffered result, or a Server-Sent Events stream",
			Content: map[string]*huma.MediaType{
				"application/json":  {Schema: reg.Schema(reflect.TypeFor[client.ExecResultJSON](), true, "")},
				"text/event-stream": {Schema: reg.Schema(reflect.TypeFor[client.ExecEventJSON](), true, "")},
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
		buf := &bufferStream{limit: maxBufferedOutput}
		res, err := s.b.Exec(ctx, p.TenantID, in.ID, in.Body, buf)
		// Close before reading: a backend that writes after Exec returned
		// must neither race with the result nor grow it.
		stdout, stderr, truncated := buf.close()
		if err != nil {
			return nil, s.fail(ctx, "exec", err)
		}
		if len(res.Stdout) == 0 {
			res.Stdout = stdout
		}
		if len(res.Stderr) == 0 {
			res.Stderr = stderr
		}
		if len(res.Stdout) > maxBufferedOutput {
			res.Stdout, truncated = res.Stdout[:maxBufferedOutput], true
		}
		if len(res.Stderr) > maxBufferedOutput {
			res.Stderr, truncated = res.Stderr[:maxBufferedOutput], true
		}
		res.Truncated = res.Truncated || truncated
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
//
// The stream writer is closed before execSSE returns: a backend that keeps
// calling Stdout or Stderr after Exec returned gets errStreamClosed instead
// of writing to a ResponseWriter whose handler has finished.
func (s *server) execSSE(hc huma.Context, tenant, id string, req client.ExecRequest) {
	r, w := humago.Unwrap(hc)
	ctx := r.Context()
	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
	defer sw.finish(nil)

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

	var split utf8Split
	res, err := s.b.Exec(ctx, tenant, id, req, execStreamFunc(func(kind string, p []byte) error {
		p = split.chunk(kind, p)
		if len(p) == 0 {
			return nil
		}
		return sw.event(kind, client.ExecEvent{Type: kind, Data: p})
	}))
	close(stop)
	keepAlive.Wait()
	for _, kind := range []string{"stdout", "stderr"} {
		if rest := split.rest(kind); len(rest) > 0 {
			_ = sw.event(kind, client.ExecEvent{Type: kind, Data: rest})
		}
	}

	if err != nil {
		// The last word is written with the writer locked and then closed,
		// so a straggling backend write can neither commit the status
		// between the check and the problem nor follow the error event.
		sw.finish(func(started bool) {
			if !started {
				s.writeProblem(w, r, "exec", err)
				return
			}
			p := s.problem(ctx, "exec", err)
			s.log.Log(ctx, logLevelFor(err), "exec stream failed", "sandbox", id, "tenant", tenant, "err", err)
			_ = sw.eventLocked("error", client.ExecEvent{Type: "error", Error: p.Detail})
		})
		return
	}
	sw.finish(func(bool) {
		_ = sw.eventLocked("exit", client.ExecEvent{
			Type:     "exit",
			ExitCode: res.ExitCode,
			Signal:   res.Signal,
			Pid:      res.Pid,
			TimedOut: res.TimedOut,
		})
	})
}

// sseWriter writes Server-Sent Events, flushing each one. Every write to
// the ResponseWriter happens under mu, and none happens once closed is set.
type sseWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	closed  bool
	err     error
}

// finish closes the writer and, with mu still held, runs last (if not nil)
// to write the final words, telling it whether the status line has been
// sent. Every later event or comment returns errStreamClosed without
// touching the ResponseWriter. Only the first call runs last.
func (s *sseWriter) finish(last func(started bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if last != nil {
		last(s.started)
	}
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
	if s.closed {
		return errStreamClosed
	}
	return s.writeEvent(name, data)
}

// eventLocked is event for a caller that holds mu (inside finish). It
// writes even though finish has already set closed.
func (s *sseWriter) eventLocked(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", name, err)
	}
	return s.writeEvent(name, data)
}

// writeEvent writes and flushes one event; the caller holds mu.
func (s *sseWriter) writeEvent(name string, data []byte) error {
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
	if s.closed {
		return errStreamClosed
	}
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

// utf8Split keeps a UTF-8 character that a chunk of output cut at its end
// for the next chunk of the same stream, so that each event's text is
// valid UTF-8 whenever the output is. Bytes that can never become valid
// UTF-8 pass through at once. Its methods are called by one backend at a
// time per stream, under its own lock.
type utf8Split struct {
	mu   sync.Mutex
	held map[string][]byte
}

// chunk returns p with the held bytes of kind before it and an incomplete
// character at its end held back.
func (u *utf8Split) chunk(kind string, p []byte) []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.held == nil {
		u.held = map[string][]byte{}
	}
	if h := u.held[kind]; len(h) > 0 {
		p = append(append([]byte(nil), h...), p...)
		u.held[kind] = nil
	}
	n := incompleteTail(p)
	if n > 0 {
		u.held[kind] = append([]byte(nil), p[len(p)-n:]...)
		p = p[:len(p)-n]
	}
	return p
}

// rest returns and forgets what is held of kind.
func (u *utf8Split) rest(kind string) []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	h := u.held[kind]
	delete(u.held, kind)
	return h
}

// incompleteTail returns the length of a UTF-8 character that p's end
// begins but does not finish (0 when p ends on a character boundary or
// with bytes that no continuation can make valid).
func incompleteTail(p []byte) int {
	for n := 1; n <= utf8.UTFMax-1 && n <= len(p); n++ {
		b := p[len(p)-n]
		if b&0xC0 == 0x80 { // a continuation byte: look further back
			continue
		}
		if !utf8.RuneStart(b) || b < 0xC0 {
			return 0
		}
		need := 2
		switch {
		case b >= 0xF0:
			need = 4
		case b >= 0xE0:
			need = 3
		}
		if n < need && !utf8.FullRune(p[len(p)-n:]) {
			return n
		}
		return 0
	}
	return 0
}

// execStreamFunc adapts a function to ExecStream.
type execStreamFunc func(kind string, p []byte) error

// Stdout forwards a stdout chunk.
func (f execStreamFunc) Stdout(p []byte) error { return f("stdout", p) }

// Stderr forwards a stderr chunk.
func (f execStreamFunc) Stderr(p []byte) error { return f("stderr", p) }

// bufferStream collects exec output for a buffered result, keeping at
// most limit bytes of each of stdout and stderr. Bytes past the limit are
// dropped (the process is not stopped) and the result marked truncated.
// Writes after close are refused.
type bufferStream struct {
	mu             sync.Mutex
	limit          int
	stdout, stderr bytes.Buffer
	truncated      bool
	closed         bool
}

// Stdout appends to the stdout buffer.
func (b *bufferStream) Stdout(p []byte) error { return b.write(&b.stdout, p) }

// Stderr appends to the stderr buffer.
func (b *bufferStream) Stderr(p []byte) error { return b.write(&b.stderr, p) }

// write appends p to buf, up to the limit.
func (b *bufferStream) write(buf *bytes.Buffer, p []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errStreamClosed
	}
	if room := b.limit - buf.Len(); len(p) > room {
		p = p[:max(room, 0)]
		b.truncated = true
	}
	buf.Write(p)
	return nil
}

// close stops further writes and returns what was collected.
func (b *bufferStream) close() (stdout, stderr []byte, truncated bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.stdout.Bytes(), b.stderr.Bytes(), b.truncated
}
