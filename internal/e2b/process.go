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
	"github.com/stead-dev/stead/internal/e2b/envd"
	"github.com/stead-dev/stead/internal/errs"
)

// procKey names a process started through the data plane.
type procKey struct {
	tenant, sandbox string
	pid             uint32
}

// process is a command running through process.Start. Its pid is the
// data plane's own number (the exec's pid inside the sandbox is known
// only when it ends); SendSignal cancels the exec, which kills it.
type process struct {
	cfg    envd.ProcessConfig
	tag    *string
	cancel context.CancelFunc
	killed atomic.Bool
}

// process serves the process.Process calls.
func (h *Handler) process(w http.ResponseWriter, r *http.Request, t target) {
	method := r.PathValue("method")
	switch method {
	case "Start":
		h.start(w, r, t)
		return
	case "Connect", "StreamInput":
		w.Header().Set("Content-Type", envd.ContentTypeStream)
		w.WriteHeader(http.StatusOK)
		endStream(w, &envd.Error{Code: envd.CodeUnimplemented, Message: "process." + method + " is not supported by stead's envd yet (docs/e2b.md)"})
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
			envd.WriteUnaryError(w, &envd.Error{Code: envd.CodeNotFound, Message: "no such process started through this API"})
			return
		}
		p.killed.Store(true)
		p.cancel()
		h.record(r, "e2b-envd:"+t.id, t.tenant, "process.SendSignal", t.id, http.StatusOK)
		envd.WriteUnary(w, struct{}{})
	default:
		envd.WriteUnaryError(w, &envd.Error{Code: envd.CodeUnimplemented, Message: "process." + method + " is not supported by stead's envd yet (docs/e2b.md)"})
	}
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

// frameWriter writes the frames of one response stream; the exec's
// output and the keepalive ticker share it.
type frameWriter struct {
	mu  sync.Mutex
	w   http.ResponseWriter
	err error
}

func (f *frameWriter) event(ev envd.ProcessEvent) error {
	b, err := json.Marshal(envd.StreamResponse{Event: ev})
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if f.err = envd.WriteFrame(f.w, 0, b); f.err == nil {
		if fl, ok := f.w.(http.Flusher); ok {
			fl.Flush()
		}
	}
	return f.err
}

// Stdout implements api.ExecStream.
func (f *frameWriter) Stdout(p []byte) error {
	return f.event(envd.ProcessEvent{Data: &envd.DataEvent{Stdout: append([]byte(nil), p...)}})
}

// Stderr implements api.ExecStream.
func (f *frameWriter) Stderr(p []byte) error {
	return f.event(envd.ProcessEvent{Data: &envd.DataEvent{Stderr: append([]byte(nil), p...)}})
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

// start serves process.Start: the command runs through the sandbox
// service's Exec, its output streamed as it comes.
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
	if req.PTY != nil {
		streamError(w, &envd.Error{Code: envd.CodeUnimplemented, Message: "process.Start with a pty is not supported by stead's envd yet (docs/e2b.md)"})
		return
	}
	if req.Stdin != nil && *req.Stdin {
		streamError(w, &envd.Error{Code: envd.CodeUnimplemented, Message: "process.Start with stdin open is not supported by stead's envd yet (docs/e2b.md)"})
		return
	}
	u, err := basicUser(r)
	var su string
	if err == nil {
		su, err = steadUser(u)
	}
	timeout := ""
	if v := r.Header.Get("Connect-Timeout-Ms"); v != "" && err == nil {
		ms, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || ms <= 0 {
			err = fmt.Errorf("Connect-Timeout-Ms %q: %w", v, errs.ErrInvalid)
		}
		timeout = (time.Duration(ms) * time.Millisecond).String()
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
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := &process{cfg: *req.Process, tag: req.Tag, cancel: cancel}
	h.mu.Lock()
	h.nextPid++
	key := procKey{t.tenant, t.id, h.nextPid}
	h.procs[key] = p
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.procs, key)
		h.mu.Unlock()
	}()

	w.Header().Set("Content-Type", envd.ContentTypeStream)
	w.WriteHeader(http.StatusOK)
	fw := &frameWriter{w: w}
	if err := fw.event(envd.ProcessEvent{Start: &envd.StartEvent{Pid: key.pid}}); err != nil {
		return
	}
	stopKeepalive := h.keepalive(fw, r.Header.Get("Keepalive-Ping-Interval"))
	res, err := h.b.Exec(ectx, t.tenant, t.id, client.ExecRequest{
		Command: append([]string{req.Process.Cmd}, req.Process.Args...), Env: req.Process.Envs,
		Cwd: steadPath(cwd), User: su, Timeout: timeout}, fw)
	stopKeepalive()
	h.record(r, "e2b-envd:"+t.id, t.tenant, "process.Start", t.id, statusOf(err))
	switch {
	case p.killed.Load():
		fw.event(envd.ProcessEvent{End: &envd.EndEvent{ExitCode: -1, Exited: false, Status: "signal: killed"}})
	case err != nil && errors.Is(err, context.Canceled):
		return // the client went away
	case err != nil:
		endStream(w, h.rpcError(ctx, "process.Start", err))
		return
	case res.TimedOut:
		endStream(w, &envd.Error{Code: envd.CodeDeadlineExceeded, Message: "the command ran past its timeout (" + timeout + ") and was killed"})
		return
	default:
		end := &envd.EndEvent{ExitCode: int32(res.ExitCode), Exited: res.Signal == "", Status: "exit status " + strconv.Itoa(res.ExitCode)}
		if res.Signal != "" {
			end.Status = "signal: " + res.Signal
		}
		fw.event(envd.ProcessEvent{End: end})
	}
	endStream(w, nil)
}

// keepalive sends a keepalive event every interval seconds (the SDK's
// Keepalive-Ping-Interval, default 50, at least 1) until stopped.
func (h *Handler) keepalive(fw *frameWriter, interval string) func() {
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
				if fw.event(envd.ProcessEvent{Keepalive: &struct{}{}}) != nil {
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
