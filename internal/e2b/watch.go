package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/stead-dev/stead/internal/e2b/envd"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/files"
)

// Limits of the polled watchers (filesystem.CreateWatcher): how many one
// sandbox may have, how many events one keeps until they are fetched, and
// how long one lives without a GetWatcherEvents.
const (
	maxWatchers       = 64
	maxWatcherEvents  = 10000
	watcherIdleExpiry = 10 * time.Minute
)

// eventType names a change as filesystem.EventType does.
func eventType(op files.WatchOp) string {
	switch op {
	case files.WatchCreate:
		return envd.EventCreate
	case files.WatchWrite:
		return envd.EventWrite
	case files.WatchRemove:
		return envd.EventRemove
	case files.WatchRename:
		return envd.EventRename
	}
	return envd.EventChmod
}

// openWatch decodes a WatchDirRequest or CreateWatcherRequest and starts
// the watcher it asks for.
func (h *Handler) openWatch(ctx context.Context, r *http.Request, t target, payload []byte) (*files.Watcher, error) {
	var req envd.WatchDirRequest
	if err := envd.DecodeRequest(payload, &req); err != nil || req.Path == "" {
		return nil, &envd.Error{Code: envd.CodeInvalidArgument, Message: "want a path to watch"}
	}
	if req.IncludeEntry {
		return nil, &envd.Error{Code: envd.CodeUnimplemented, Message: "entries in watch events (includeEntry) are not supported by stead's envd (docs/e2b.md)"}
	}
	u, err := basicUser(r)
	if err == nil {
		_, err = steadUser(u)
	}
	if err != nil {
		return nil, err
	}
	return h.b.WatchDir(ctx, t.tenant, t.id, steadPath(e2bPath(req.Path, u)), req.Recursive)
}

// watchDir serves filesystem.WatchDir: a start event, then one event per
// change under the directory, with keepalives, until the client goes
// away or the stream's timeout (Connect-Timeout-Ms) passes.
func (h *Handler) watchDir(w http.ResponseWriter, r *http.Request, t target) {
	ctx := r.Context()
	_, payload, err := envd.ReadFrame(r.Body, envd.MaxMessageBytes)
	if err != nil {
		streamError(w, &envd.Error{Code: envd.CodeInvalidArgument, Message: "filesystem.WatchDir: " + err.Error()})
		return
	}
	timeout, err := streamTimeout(r)
	if err != nil {
		streamError(w, h.rpcError(ctx, "filesystem.WatchDir", err))
		return
	}
	wt, err := h.openWatch(ctx, r, t, payload)
	if err != nil {
		streamError(w, h.rpcError(ctx, "filesystem.WatchDir", err))
		return
	}
	defer wt.Close()
	w.Header().Set("Content-Type", envd.ContentTypeStream)
	w.WriteHeader(http.StatusOK)
	fw := &frameWriter{w: w}
	if fw.message(envd.WatchDirResponse{Start: &struct{}{}}) != nil {
		return
	}
	stop := keepaliveWith(r.Header.Get("Keepalive-Ping-Interval"), func() error {
		return fw.message(envd.WatchDirResponse{Keepalive: &struct{}{}})
	})
	defer stop()
	var expired <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		expired = tm.C
	}
	for {
		select {
		case ev, ok := <-wt.Events():
			if !ok {
				fw.close(&envd.Error{Code: envd.CodeNotFound, Message: "the watched directory was removed"})
				return
			}
			if fw.message(envd.WatchDirResponse{Filesystem: &envd.FilesystemEvent{Name: ev.Name, Type: eventType(ev.Op)}}) != nil {
				return
			}
		case <-ctx.Done():
			return
		case <-expired:
			fw.close(&envd.Error{Code: envd.CodeDeadlineExceeded, Message: "the watch's timeout passed"})
			return
		}
	}
}

// polledWatcher is a watcher of filesystem.CreateWatcher: its events are
// kept until GetWatcherEvents takes them.
type polledWatcher struct {
	t       target
	w       *files.Watcher
	mu      sync.Mutex
	events  []envd.FilesystemEvent
	dropped int
	gone    bool // the watched directory was removed
	used    time.Time
}

// collect keeps the watcher's events until it is closed.
func (p *polledWatcher) collect() {
	for ev := range p.w.Events() {
		p.mu.Lock()
		if len(p.events) < maxWatcherEvents {
			p.events = append(p.events, envd.FilesystemEvent{Name: ev.Name, Type: eventType(ev.Op)})
		} else {
			p.dropped++
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.gone = true
	p.mu.Unlock()
}

// watcherCall serves CreateWatcher, GetWatcherEvents and RemoveWatcher.
func (h *Handler) watcherCall(ctx context.Context, r *http.Request, t target, method string, body []byte) (any, error) {
	h.expireWatchers()
	if method == "CreateWatcher" {
		h.mu.Lock()
		n := 0
		for _, p := range h.watchers {
			if p.t == t {
				n++
			}
		}
		h.mu.Unlock()
		if n >= maxWatchers {
			return nil, &envd.Error{Code: envd.CodeResourceExhausted, Message: fmt.Sprintf("the sandbox has %d watchers, the most it may have; remove one first", maxWatchers)}
		}
		wt, err := h.openWatch(ctx, r, t, body)
		if err != nil {
			return nil, err
		}
		var b [12]byte
		rand.Read(b[:])
		id := "w-" + hex.EncodeToString(b[:])
		p := &polledWatcher{t: t, w: wt, used: h.opts.Now()}
		h.mu.Lock()
		h.watchers[id] = p
		h.mu.Unlock()
		go p.collect()
		return envd.CreateWatcherResponse{WatcherID: id}, nil
	}
	var req envd.WatcherRequest
	if err := envd.DecodeRequest(body, &req); err != nil || req.WatcherID == "" {
		return nil, &envd.Error{Code: envd.CodeInvalidArgument, Message: "want a watcherId"}
	}
	h.mu.Lock()
	p, ok := h.watchers[req.WatcherID]
	if ok && p.t != t {
		ok = false // another sandbox's watcher is absent
	}
	if ok && method == "RemoveWatcher" {
		delete(h.watchers, req.WatcherID)
	}
	h.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("watcher %s: %w", req.WatcherID, errs.ErrNotFound)
	}
	if method == "RemoveWatcher" {
		p.w.Close()
		return struct{}{}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.used = h.opts.Now()
	if p.dropped > 0 {
		n := p.dropped
		p.dropped = 0
		p.events = nil
		return nil, &envd.Error{Code: envd.CodeResourceExhausted, Message: fmt.Sprintf("%d events were dropped past %d unread; fetch more often", n, maxWatcherEvents)}
	}
	out := envd.GetWatcherEventsResponse{Events: p.events}
	if out.Events == nil {
		out.Events = []envd.FilesystemEvent{}
	}
	p.events = nil
	if len(out.Events) == 0 && p.gone {
		return nil, fmt.Errorf("watcher %s: the watched directory was removed: %w", req.WatcherID, errs.ErrNotFound)
	}
	return out, nil
}

// expireWatchers closes the polled watchers nobody asked for events for
// watcherIdleExpiry.
func (h *Handler) expireWatchers() {
	now := h.opts.Now()
	var old []*polledWatcher
	h.mu.Lock()
	for id, p := range h.watchers {
		p.mu.Lock()
		if now.Sub(p.used) > watcherIdleExpiry {
			old = append(old, p)
			delete(h.watchers, id)
		}
		p.mu.Unlock()
	}
	h.mu.Unlock()
	for _, p := range old {
		p.w.Close()
	}
}

// forgetSandbox drops what the handler keeps for a killed sandbox: its
// polled watchers (closed) and its last resource sample.
func (h *Handler) forgetSandbox(t target) {
	var old []*polledWatcher
	h.mu.Lock()
	delete(h.samples, t)
	for id, p := range h.watchers {
		if p.t == t {
			old = append(old, p)
			delete(h.watchers, id)
		}
	}
	h.mu.Unlock()
	for _, p := range old {
		p.w.Close()
	}
}
