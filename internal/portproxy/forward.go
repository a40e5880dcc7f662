package portproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/stead-dev/stead/internal/errs"
)

// ForwardHandler serves GET /v1/sandboxes/{id}/port-forward/{port}: a
// websocket whose binary messages carry a raw TCP connection to the
// sandbox's port, both ways. The port need not be exposed, but an API key
// authorized for the sandbox is required (a port token is not enough). The
// sandbox is woken as for a proxied request. Everything is checked, and
// the port connected, before the upgrade, so errors are plain problem
// documents; once the upgrade is done, the end of the TCP connection
// closes the websocket normally and the end of the websocket closes the
// TCP connection (a half-close is not carried). The handler must see the
// whole request path.
func (p *Proxy) ForwardHandler() http.Handler { return http.HandlerFunc(p.serveForward) }

func (p *Proxy) serveForward(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, port, ok := parseForwardPath(r.URL.EscapedPath())
	if !ok {
		writeProblem(w, http.StatusNotFound, "no port-forward here: use /v1/sandboxes/{id}/port-forward/{port}")
		return
	}
	rt := route{id: id, port: port}
	log := p.log.With("sandbox", id, "port", port, "op", "port_forward")
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeProblem(w, http.StatusMethodNotAllowed, "port-forward is a websocket: GET with Upgrade: websocket")
		return
	}
	key := apiKey(r)
	if key == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="stead"`)
		writeProblem(w, http.StatusUnauthorized, "port-forward needs an API key authorized for the sandbox "+
			"(Authorization: Bearer <key> or X-API-Key); a port token is not enough")
		return
	}
	if err := p.b.Authorize(ctx, key, id); err != nil {
		switch {
		case errors.Is(err, errs.ErrUnauthenticated):
			w.Header().Set("WWW-Authenticate", `Bearer realm="stead", error="invalid_token"`)
			writeProblem(w, http.StatusUnauthorized, "the API key is unknown or revoked")
		case errors.Is(err, errs.ErrNotFound), errors.Is(err, errs.ErrForbidden):
			writeProblem(w, http.StatusNotFound, fmt.Sprintf("sandbox %s not found", id))
		default:
			log.ErrorContext(ctx, "port-forward: authorize API key", "err", err)
			writeProblem(w, http.StatusBadGateway, "cannot check the API key now; try again")
		}
		return
	}
	if !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket") {
		writeProblem(w, http.StatusBadRequest,
			"port-forward needs a websocket upgrade: use `stead port-forward` or client.PortForward")
		return
	}
	t, err := p.b.Target(ctx, id, port)
	if err != nil {
		if errors.Is(err, errs.ErrNotFound) {
			writeProblem(w, http.StatusNotFound, fmt.Sprintf("sandbox %s not found", id))
			return
		}
		log.ErrorContext(ctx, "port-forward: look up sandbox", "err", err)
		writeProblem(w, http.StatusBadGateway, "cannot look up the sandbox now; try again")
		return
	}
	log = log.With("sandbox", t.SandboxID, "tenant", t.Tenant)
	addr, ok := p.ready(w, r, t, rt.port, log)
	if !ok {
		return
	}
	tcp, err := p.dialer.DialContext(ctx, "tcp", addr.String())
	if err != nil {
		log.DebugContext(ctx, "port-forward: connect", "err", err)
		writeProblem(w, http.StatusBadGateway, fmt.Sprintf(
			"nothing accepts connections on port %d of sandbox %s (is the app listening on 0.0.0.0:%d?)",
			port, t.SandboxID, port))
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		// Accept has answered the request.
		log.DebugContext(ctx, "port-forward: websocket upgrade failed", "err", err)
		_ = tcp.Close()
		return
	}
	// NetConn reads a message as a stream, so no limit is needed on the
	// size of one message.
	ws.SetReadLimit(-1)
	p.b.NoteActivity(t.SandboxID)
	start := time.Now()
	m := newMeter(func() { p.b.NoteActivity(t.SandboxID) }, p.actEvery)
	up, down := pipe(websocket.NetConn(ctx, ws, websocket.MessageBinary), &meteredConn{Conn: tcp, m: m})
	log.DebugContext(ctx, "port-forward: tunnel closed", "dur", time.Since(start), "bytes_in", up, "bytes_out", down)
}

// pipe copies between the client's connection and the sandbox's until
// either ends, then closes both. It returns the bytes sent to the sandbox
// and to the client.
func pipe(client, sandbox net.Conn) (up, down int64) {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = client.Close()
			_ = sandbox.Close()
		})
	}
	var wg sync.WaitGroup
	var n atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, _ := io.Copy(sandbox, client)
		n.Store(c)
		closeBoth()
	}()
	down, _ = io.Copy(client, sandbox)
	closeBoth()
	wg.Wait()
	return n.Load(), down
}

// headerHasToken reports whether a comma-separated header of h contains
// token, case-insensitively.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
