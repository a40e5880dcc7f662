package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/e2b/envd"
	"github.com/stead-dev/stead/internal/errs"
)

// procKey names a process started through the data plane.
type procKey struct {
	tenant, sandbox string
	pid             uint32
}

// process is a command or terminal started through process.Start. It
// runs on its own, apart from the stream that started it: that stream,
// and any process.Connect stream, only watch it. Its pid is the data
// plane's own number.
type process struct {
	key    procKey
	cfg    envd.ProcessConfig
	tag    *string
	cancel context.CancelFunc // ends the process (kills it)
	killed atomic.Bool

	// stdin is the write end of the command's standard input when the
	// start asked to keep it open (nil otherwise); pty is the terminal of
	// a process started with one (nil otherwise).
	stdinMu sync.Mutex
	stdin   *io.PipeWriter
	pty     api.PTY

	mu   sync.Mutex
	subs map[*frameWriter]struct{}
	done chan struct{} // closed when the process ended; then end or fail is set
	end  *envd.EndEvent
	fail *envd.Error
}

// emit sends ev to every stream watching p; a stream that cannot take it
// (its client went away) is dropped.
func (p *process) emit(ev envd.ProcessEvent) {
	p.mu.Lock()
	subs := make([]*frameWriter, 0, len(p.subs))
	for fw := range p.subs {
		subs = append(subs, fw)
	}
	p.mu.Unlock()
	for _, fw := range subs {
		if fw.event(ev) != nil {
			p.unsubscribe(fw)
		}
	}
}

// subscribe adds a watching stream; false when p has already ended.
func (p *process) subscribe(fw *frameWriter) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
	}
	p.subs[fw] = struct{}{}
	return true
}

func (p *process) unsubscribe(fw *frameWriter) {
	p.mu.Lock()
	delete(p.subs, fw)
	p.mu.Unlock()
}

// Stdout implements api.ExecStream for the process's output.
func (p *process) Stdout(b []byte) error {
	p.emit(envd.ProcessEvent{Data: &envd.DataEvent{Stdout: append([]byte(nil), b...)}})
	return nil
}

// Stderr implements api.ExecStream for the process's output.
func (p *process) Stderr(b []byte) error {
	p.emit(envd.ProcessEvent{Data: &envd.DataEvent{Stderr: append([]byte(nil), b...)}})
	return nil
}

// finish records how p ended and wakes the streams watching it.
func (p *process) finish(end *envd.EndEvent, fail *envd.Error) {
	p.mu.Lock()
	p.end, p.fail = end, fail
	close(p.done)
	p.mu.Unlock()
}

// process serves the process.Process calls.
func (h *Handler) process(w http.ResponseWriter, r *http.Request, t target) {
	method := r.PathValue("method")
	switch method {
	case "Start":
		h.start(w, r, t)
		return
	case "Connect":
		h.connectProcess(w, r, t)
		return
	case "StreamInput":
		streamError(w, &envd.Error{Code: envd.CodeUnimplemented, Message: "process.StreamInput (a client stream) is not supported by stead's envd; use SendInput (docs/e2b.md)"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, envd.MaxMessageBytes))
	if err != nil {
		envd.WriteUnaryError(w, &envd.Error{Code: envd.CodeResourceExhausted, Message: "request message too large"})
		return
	}
	switch method {
	case "List":
		out := envd.ListResponse{Processes: []envd.ProcessInfo{}}
		h.mu.Lock()
		for k, p := range h.procs {
			if k.tenant == t.tenant && k.sandbox == t.id {
				out.Processes = append(out.Processes, envd.ProcessInfo{Config: p.cfg, Pid: k.pid, Tag: p.tag})
			}
		}
		h.mu.Unlock()
		envd.WriteUnary(w, out)
	case "SendSignal":
		var req envd.SendSignalRequest
		if err := envd.DecodeRequest(body, &req); err != nil || req.Process == nil {
			envd.WriteUnaryError(w, &envd.Error{Code: envd.CodeInvalidArgument, Message: "process.SendSignal: want a process selector and a signal"})
			return
		}
		p := h.findProcess(t, req.Process)
		if p == nil {
			envd.WriteUnaryError(w, errNoProcess)
			return
		}
		p.killed.Store(true)
		p.cancel()
		h.record(r, "e2b-envd:"+t.id, t.tenant, "process.SendSignal", t.id, http.StatusOK)
		envd.WriteUnary(w, struct{}{})
	case "SendInput":
		var req envd.SendInputRequest
		if err := envd.DecodeRequest(body, &req); err != nil || req.Process == nil || req.Input == nil {
			envd.WriteUnaryError(w, &envd.Error{Code: envd.CodeInvalidArgument, Message: "process.SendInput: want a process selector and an input"})
			return
		}
		p := h.findProcess(t, req.Process)
		if p == nil {
			envd.WriteUnaryError(w, errNoProcess)
			return
		}
		if e := p.input(req.Input); e != nil {
			envd.WriteUnaryError(w, e)
			return
		}
		envd.WriteUnary(w, struct{}{})
	case "CloseStdin":
		var req envd.CloseStdinRequest
		if err := envd.DecodeRequest(body, &req); err != nil || req.Process == nil {
			envd.WriteUnaryError(w, &envd.Error{Code: envd.CodeInvalidArgument, Message: "process.CloseStdin: want a process selector"})
			return
		}
		p := h.findProcess(t, req.Process)
		if p == nil {
			envd.WriteUnaryError(w, errNoProcess)
			return
		}
		p.stdinMu.Lock()
		if p.stdin != nil {
			p.stdin.Close()
		}
		p.stdinMu.Unlock()
		if p.stdin == nil {
			envd.WriteUnaryError(w, &envd.Error{Code: envd.CodeFailedPrecondition, Message: "the process was not started with stdin open (stdin: true)"})
			return
		}
		envd.WriteUnary(w, struct{}{})
	case "Update":
		var req envd.UpdateRequest
		if err := envd.DecodeRequest(body, &req); err != nil || req.Process == nil {
			envd.WriteUnaryError(w, &envd.Error{Code: envd.CodeInvalidArgument, Message: "process.Update: want a process selector"})
			return
		}
		p := h.findProcess(t, req.Process)
		if p == nil {
			envd.WriteUnaryError(w, errNoProcess)
			return
		}
		if req.PTY != nil && req.PTY.Size != nil {
			if p.pty == nil {
				envd.WriteUnaryError(w, &envd.Error{Code: envd.CodeFailedPrecondition, Message: "the process has no terminal to resize"})
				return
			}
			rows, cols, e := ptySize(req.PTY)
			if e != nil {
				envd.WriteUnaryError(w, e)
				return
			}
			if err := p.pty.Resize(rows, cols); err != nil {
				envd.WriteUnaryError(w, h.rpcError(r.Context(), "process.Update", err))
				return
			}
		}
		envd.WriteUnary(w, struct{}{})
	default:
		envd.WriteUnaryError(w, &envd.Error{Code: envd.CodeUnimplemented, Message: "process." + method + " is not supported by stead's envd (docs/e2b.md)"})
	}
}

// errNoProcess answers a call naming a process that is not running.
var errNoProcess = &envd.Error{Code: envd.CodeNotFound, Message: "no such process running (started through this API)"}

// input writes in to p's standard input or terminal.
func (p *process) input(in *envd.ProcessInput) *envd.Error {
	switch {
	case in.PTY != nil:
		if p.pty == nil {
			return &envd.Error{Code: envd.CodeFailedPrecondition, Message: "the process has no terminal; send stdin"}
		}
		if _, err := p.pty.Write(in.PTY); err != nil {
			return &envd.Error{Code: envd.CodeFailedPrecondition, Message: "the terminal is closed"}
		}
	case in.Stdin != nil:
		p.stdinMu.Lock()
		defer p.stdinMu.Unlock()
		if p.stdin == nil {
			return &envd.Error{Code: envd.CodeFailedPrecondition, Message: "the process was not started with stdin open (stdin: true)"}
		}
		if _, err := p.stdin.Write(in.Stdin); err != nil {
			return &envd.Error{Code: envd.CodeFailedPrecondition, Message: "the process's stdin is closed"}
		}
	default:
		return &envd.Error{Code: envd.CodeInvalidArgument, Message: "process.SendInput: the input has neither stdin nor pty"}
	}
	return nil
}

// ptySize checks a terminal size (1 to 1000 rows and columns).
func ptySize(p *envd.PTY) (rows, cols uint16, e *envd.Error) {
	if p.Size == nil {
		return 24, 80, nil
	}
	if p.Size.Rows < 1 || p.Size.Rows > 1000 || p.Size.Cols < 1 || p.Size.Cols > 1000 {
		return 0, 0, &envd.Error{Code: envd.CodeInvalidArgument, Message: fmt.Sprintf("terminal size %dx%d: want 1 to 1000 rows and columns", p.Size.Rows, p.Size.Cols)}
	}
	return uint16(p.Size.Rows), uint16(p.Size.Cols), nil
}

// findProcess returns the process sel names in t's sandbox, or nil.
func (h *Handler) findProcess(t target, sel *envd.ProcessSelector) *process {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sel.Pid != nil {
		return h.procs[procKey{t.tenant, t.id, uint32(*sel.Pid)}]
	}
	if sel.Tag != nil {
		for k, p := range h.procs {
			if k.tenant == t.tenant && k.sandbox == t.id && p.tag != nil && *p.tag == *sel.Tag {
				return p
			}
		}
	}
	return nil
}

// frameWriter writes the frames of one response stream; the process's
// output and the keepalive ticker share it.
type frameWriter struct {
	mu  sync.Mutex
	w   http.ResponseWriter
	err error
}

func (f *frameWriter) event(ev envd.ProcessEvent) error {
	return f.message(envd.StreamResponse{Event: ev})
}

// message writes msg as one frame and flushes it.
func (f *frameWriter) message(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	// A client that stops reading is dropped after frameWriteTimeout
	// rather than holding up the process's output (and its other
	// watchers) for ever; the deadline is cleared between frames, so a
	// quiet stream stays open.
	rc := http.NewResponseController(f.w)
	rc.SetWriteDeadline(time.Now().Add(frameWriteTimeout))
	if f.err = envd.WriteFrame(f.w, 0, b); f.err == nil {
		f.err = rc.Flush()
	}
	rc.SetWriteDeadline(time.Time{})
	return f.err
}

// frameWriteTimeout bounds the write of one stream frame.
const frameWriteTimeout = 30 * time.Second

// close writes the end of the stream (e, or success when nil); nothing
// is written after it.
func (f *frameWriter) close(e *envd.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return
	}
	endStream(f.w, e)
	f.err = errors.New("stream ended")
}

// endStream writes the last frame of a stream: e, or success when nil.
func endStream(w http.ResponseWriter, e *envd.Error) {
	b, _ := json.Marshal(envd.EndStream{Error: e})
	envd.WriteFrame(w, envd.FlagEndStream, b)
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
}

// streamError answers a stream call that fails before it starts.
func streamError(w http.ResponseWriter, e *envd.Error) {
	w.Header().Set("Content-Type", envd.ContentTypeStream)
	w.WriteHeader(http.StatusOK)
	endStream(w, e)
}

// streamTimeout reads the Connect-Timeout-Ms header: 0 when absent.
func streamTimeout(r *http.Request) (time.Duration, error) {
	v := r.Header.Get("Connect-Timeout-Ms")
	if v == "" {
		return 0, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 || ms > int64(maxTimeout)*1000 {
		return 0, fmt.Errorf("Connect-Timeout-Ms %q: want 1 to %d: %w", v, int64(maxTimeout)*1000, errs.ErrInvalid)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// start serves process.Start. The command (or terminal) runs through the
// sandbox service's exec on its own: the request's stream watches it,
// and the command goes on when that stream ends (it is ended by
// SendSignal or by its timeout, the request's Connect-Timeout-Ms).
func (h *Handler) start(w http.ResponseWriter, r *http.Request, t target) {
	ctx := r.Context()
	_, payload, err := envd.ReadFrame(r.Body, envd.MaxMessageBytes)
	if err != nil {
		streamError(w, &envd.Error{Code: envd.CodeInvalidArgument, Message: "process.Start: " + err.Error()})
		return
	}
	var req envd.StartRequest
	if err := envd.DecodeRequest(payload, &req); err != nil || req.Process == nil || req.Process.Cmd == "" {
		streamError(w, &envd.Error{Code: envd.CodeInvalidArgument, Message: "process.Start: want a process with a cmd"})
		return
	}
	var rows, cols uint16
	if req.PTY != nil {
		var e *envd.Error
		if rows, cols, e = ptySize(req.PTY); e != nil {
			streamError(w, e)
			return
		}
	}
	u, err := basicUser(r)
	var su string
	if err == nil {
		su, err = steadUser(u)
	}
	var timeout time.Duration
	if err == nil {
		timeout, err = streamTimeout(r)
	}
	if err != nil {
		streamError(w, h.rpcError(ctx, "process.Start", err))
		return
	}
	sb, err := h.b.GetSandbox(ctx, t.tenant, t.id)
	if err != nil {
		streamError(w, h.rpcError(ctx, "process.Start", err))
		return
	}
	if sb.State != "running" {
		streamError(w, &envd.Error{Code: envd.CodeUnavailable, Message: fmt.Sprintf("sandbox %s is %s, not running (Sandbox.connect brings it back)", sb.ID, e2bState(sb.State))})
		return
	}
	cwd := e2bHome
	if su == "root" {
		cwd = "/root"
	}
	if req.Process.Cwd != nil && *req.Process.Cwd != "" {
		cwd = e2bPath(*req.Process.Cwd, u)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if timeout > 0 {
		pctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), timeout)
	}
	p := &process{cfg: *req.Process, tag: req.Tag, cancel: cancel, subs: map[*frameWriter]struct{}{}, done: make(chan struct{})}
	command := append([]string{req.Process.Cmd}, req.Process.Args...)
	var stdinR *io.PipeReader
	if req.PTY != nil {
		p.pty, err = h.b.OpenPTY(pctx, t.tenant, t.id, api.PTYRequest{Command: command, User: su, Env: req.Process.Envs,
			Cwd: steadPath(cwd), Rows: rows, Cols: cols})
		if err != nil {
			cancel()
			streamError(w, h.rpcError(ctx, "process.Start", err))
			return
		}
	} else if req.Stdin != nil && *req.Stdin {
		stdinR, p.stdin = io.Pipe()
	}
	h.mu.Lock()
	h.nextPid++
	p.key = procKey{t.tenant, t.id, h.nextPid}
	h.procs[p.key] = p
	h.mu.Unlock()

	w.Header().Set("Content-Type", envd.ContentTypeStream)
	w.WriteHeader(http.StatusOK)
	fw := &frameWriter{w: w}
	fw.event(envd.ProcessEvent{Start: &envd.StartEvent{Pid: p.key.pid}})
	p.subscribe(fw)
	if p.pty != nil {
		go h.runPTY(pctx, p)
	} else {
		go h.runExec(pctx, p, client.ExecRequest{Command: command, Env: req.Process.Envs, Cwd: steadPath(cwd), User: su}, stdinR, timeout)
	}
	// Recorded while the command runs, not before it starts.
	h.record(r, "e2b-envd:"+t.id, t.tenant, "process.Start", t.id, http.StatusOK)
	h.watch(ctx, r, p, fw, 0)
}

// connectProcess serves process.Connect: a stream that watches a running
// process from now on (start, output, end), as Start's stream does.
func (h *Handler) connectProcess(w http.ResponseWriter, r *http.Request, t target) {
	_, payload, err := envd.ReadFrame(r.Body, envd.MaxMessageBytes)
	if err != nil {
		streamError(w, &envd.Error{Code: envd.CodeInvalidArgument, Message: "process.Connect: " + err.Error()})
		return
	}
	var req envd.ConnectRequest
	if err := envd.DecodeRequest(payload, &req); err != nil || req.Process == nil {
		streamError(w, &envd.Error{Code: envd.CodeInvalidArgument, Message: "process.Connect: want a process selector"})
		return
	}
	timeout, err := streamTimeout(r)
	if err != nil {
		streamError(w, h.rpcError(r.Context(), "process.Connect", err))
		return
	}
	p := h.findProcess(t, req.Process)
	if p == nil {
		streamError(w, errNoProcess)
		return
	}
	w.Header().Set("Content-Type", envd.ContentTypeStream)
	w.WriteHeader(http.StatusOK)
	fw := &frameWriter{w: w}
	fw.event(envd.ProcessEvent{Start: &envd.StartEvent{Pid: p.key.pid}})
	p.subscribe(fw)
	h.watch(r.Context(), r, p, fw, timeout)
}

// watch keeps fw open until p ends (then its end is the stream's last
// event), the client goes away, or timeout (> 0) passes; keepalives go
// out meanwhile.
func (h *Handler) watch(ctx context.Context, r *http.Request, p *process, fw *frameWriter, timeout time.Duration) {
	stopKeepalive := h.keepalive(fw, r.Header.Get("Keepalive-Ping-Interval"))
	defer stopKeepalive()
	var expired <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		expired = tm.C
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.unsubscribe(fw)
		return
	case <-expired:
		p.unsubscribe(fw)
		fw.close(&envd.Error{Code: envd.CodeDeadlineExceeded, Message: "the stream's timeout passed; the process goes on"})
		return
	}
	p.unsubscribe(fw)
	if p.end != nil {
		fw.event(envd.ProcessEvent{End: p.end})
	}
	fw.close(p.fail)
}

// forget removes p from the running processes.
func (h *Handler) forget(p *process) {
	h.mu.Lock()
	delete(h.procs, p.key)
	h.mu.Unlock()
}

// runExec runs p's command through the sandbox service's exec, with its
// standard input from stdin when that is not nil.
func (h *Handler) runExec(ctx context.Context, p *process, req client.ExecRequest, stdin *io.PipeReader, timeout time.Duration) {
	defer p.cancel()
	defer h.forget(p)
	var res client.ExecResult
	var err error
	if stdin != nil {
		res, err = h.b.ExecInput(ctx, p.key.tenant, p.key.sandbox, req, stdin, p)
		stdin.CloseWithError(io.ErrClosedPipe)
		p.stdinMu.Lock()
		p.stdin.CloseWithError(io.ErrClosedPipe)
		p.stdinMu.Unlock()
	} else {
		res, err = h.b.Exec(ctx, p.key.tenant, p.key.sandbox, req, p)
	}
	switch {
	case p.killed.Load():
		p.finish(&envd.EndEvent{ExitCode: -1, Exited: false, Status: "signal: killed"}, nil)
	case timeout > 0 && ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		p.finish(nil, &envd.Error{Code: envd.CodeDeadlineExceeded, Message: "the command ran past its timeout (" + timeout.String() + ") and was killed"})
	case err != nil:
		p.finish(nil, h.rpcError(ctx, "process.Start", err))
	default:
		end := &envd.EndEvent{ExitCode: int32(res.ExitCode), Exited: res.Signal == "", Status: "exit status " + strconv.Itoa(res.ExitCode)}
		if res.Signal != "" {
			end.Status = "signal: " + res.Signal
		}
		p.finish(end, nil)
	}
}

// runPTY pumps p's terminal output to its streams until the process
// ends; ending ctx (SendSignal, the timeout) closes the terminal, which
// kills the process.
func (h *Handler) runPTY(ctx context.Context, p *process) {
	defer p.cancel()
	defer h.forget(p)
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		buf := make([]byte, 32<<10)
		for {
			n, err := p.pty.Read(buf)
			if n > 0 {
				p.emit(envd.ProcessEvent{Data: &envd.DataEvent{PTY: append([]byte(nil), buf[:n]...)}})
			}
			if err != nil {
				return
			}
		}
	}()
	stop := context.AfterFunc(ctx, func() { p.pty.Close() })
	code, err := p.pty.Wait()
	stop()
	// Output written just before the end may still be in the terminal: a
	// moment to read it, unless a descendant keeps the terminal open.
	select {
	case <-pumped:
	case <-time.After(200 * time.Millisecond):
	}
	p.pty.Close()
	<-pumped
	switch {
	case p.killed.Load():
		p.finish(&envd.EndEvent{ExitCode: -1, Exited: false, Status: "signal: killed"}, nil)
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		p.finish(nil, &envd.Error{Code: envd.CodeDeadlineExceeded, Message: "the terminal ran past its timeout and was closed"})
	case err != nil:
		p.finish(&envd.EndEvent{ExitCode: -1, Exited: false, Status: "terminal closed", Error: ptr(errs.Message(err))}, nil)
	default:
		p.finish(&envd.EndEvent{ExitCode: int32(code), Exited: true, Status: "exit status " + strconv.Itoa(code)}, nil)
	}
}

func ptr[T any](v T) *T { return &v }

// keepalive sends a keepalive event every interval seconds (the SDK's
// Keepalive-Ping-Interval, default 50, at least 1) until stopped.
func (h *Handler) keepalive(fw *frameWriter, interval string) func() {
	return keepaliveWith(interval, func() error { return fw.event(envd.ProcessEvent{Keepalive: &struct{}{}}) })
}

// keepaliveWith calls send every interval seconds (as keepalive reads
// it) until stopped or send fails.
func keepaliveWith(interval string, send func() error) func() {
	sec, err := strconv.Atoi(interval)
	if err != nil || sec <= 0 {
		sec = 50
	}
	tick := time.NewTicker(time.Duration(sec) * time.Second)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if send() != nil {
					return
				}
			}
		}
	}()
	return func() {
		tick.Stop()
		close(done)
		wg.Wait()
	}
}
