package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// ptyDrainGrace is how long the server waits, after the process exited, for
// the last terminal output before it sends the exit message.
const ptyDrainGrace = 2 * time.Second

// ptyInput is the input of GET /v1/sandboxes/{id}/pty.
type ptyInput struct {
	SandboxRef
	Cmd     []string `query:"cmd,explode" doc:"Command and arguments, one cmd parameter each (default: the user's login shell)"`
	User    string   `query:"user" doc:"agent (default) or root"`
	Cwd     string   `query:"cwd" doc:"Working directory"`
	Env     []string `query:"env,explode" doc:"Environment variables as K=V, one env parameter each"`
	Rows    int      `query:"rows" minimum:"0" maximum:"65535" doc:"Initial terminal rows (default 24)"`
	Cols    int      `query:"cols" minimum:"0" maximum:"65535" doc:"Initial terminal columns (default 80)"`
	Upgrade string   `header:"Upgrade" doc:"Must be websocket"`
}

// registerPTY adds GET /v1/sandboxes/{id}/pty (websocket).
func (s *server) registerPTY() {
	o := s.op(http.MethodGet, "/v1/sandboxes/{id}/pty", "pty",
		"Open an interactive terminal (websocket)", "exec", http.StatusSwitchingProtocols)
	o.Description = "A websocket. Binary messages carry terminal bytes both ways. The client may send " +
		"text messages `{\"type\":\"resize\",\"rows\":N,\"cols\":N}`. When the process exits the server " +
		"sends the text message `{\"type\":\"exit\",\"exit_code\":N}` and closes the websocket normally."
	o.Errors = append(o.Errors, http.StatusConflict)
	o.Responses = map[string]*huma.Response{
		"101": {Description: "Switching Protocols: the websocket carrying the terminal"},
	}
	huma.Register(s.api, o, func(ctx context.Context, in *ptyInput) (*huma.StreamResponse, error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "open pty", err)
		}
		if !strings.EqualFold(in.Upgrade, "websocket") {
			return nil, s.fail(ctx, "open pty", fmt.Errorf(
				"open pty: this endpoint needs a websocket upgrade (use `stead shell` or client.PTY): %w", errs.ErrInvalid))
		}
		req := PTYRequest{
			Command: in.Cmd,
			User:    in.User,
			Cwd:     in.Cwd,
			Rows:    uint16(in.Rows),
			Cols:    uint16(in.Cols),
		}
		if req.Rows == 0 {
			req.Rows = 24
		}
		if req.Cols == 0 {
			req.Cols = 80
		}
		if len(in.Env) > 0 {
			req.Env = make(map[string]string, len(in.Env))
			for _, kv := range in.Env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return nil, s.fail(ctx, "open pty", fmt.Errorf("open pty: env %q is not K=V: %w", kv, errs.ErrInvalid))
				}
				req.Env[k] = v
			}
		}
		// Open before upgrading, so that an unknown or stopped sandbox is
		// a plain 404/409 rather than a websocket that closes at once.
		// The request context would end with the upgrade's handler, so the
		// session gets its own, ended when the websocket closes.
		sessCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		term, err := s.b.OpenPTY(sessCtx, p.TenantID, in.ID, req)
		if err != nil {
			cancel()
			return nil, s.fail(ctx, "open pty", err)
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			defer cancel()
			s.servePTY(sessCtx, hc, p.TenantID, in.ID, term)
		}}, nil
	})
}

// servePTY upgrades to a websocket and pumps bytes between it and term
// until the process exits or the client goes away.
func (s *server) servePTY(ctx context.Context, hc huma.Context, tenant, id string, term PTY) {
	r, w := humago.Unwrap(hc)
	log := s.log.With("sandbox", id, "tenant", tenant, "op", "pty")
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		log.DebugContext(ctx, "websocket upgrade failed", "err", err)
		_ = term.Close()
		_, _ = term.Wait()
		return
	}
	ws.SetReadLimit(1 << 20)
	var closeOnce sync.Once
	closeTerm := func() { closeOnce.Do(func() { _ = term.Close() }) }
	defer closeTerm()

	// Terminal output → websocket.
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := term.Read(buf)
			if n > 0 {
				if werr := ws.Write(ctx, websocket.MessageBinary, buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()

	// Websocket → terminal input and control messages.
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		for {
			typ, data, err := ws.Read(ctx)
			if err != nil {
				// The client went away: end the session.
				closeTerm()
				return
			}
			switch typ {
			case websocket.MessageBinary:
				if _, err := term.Write(data); err != nil {
					log.DebugContext(ctx, "write to pty", "err", err)
				}
			case websocket.MessageText:
				var c client.PTYControl
				if err := json.Unmarshal(data, &c); err != nil {
					log.DebugContext(ctx, "bad pty control message", "err", err)
					continue
				}
				if c.Type == "resize" && c.Rows > 0 && c.Cols > 0 {
					if err := term.Resize(c.Rows, c.Cols); err != nil {
						log.DebugContext(ctx, "resize pty", "err", err)
					}
				}
			}
		}
	}()

	code, werr := term.Wait()
	select {
	case <-outDone:
	case <-time.After(ptyDrainGrace):
	}
	msg := client.PTYControl{Type: "exit", ExitCode: code}
	if werr != nil && !errors.Is(werr, io.EOF) {
		msg.Error = werr.Error()
		log.Log(ctx, logLevelFor(werr), "pty wait failed", "err", werr)
	}
	data, _ := json.Marshal(msg)
	if err := ws.Write(ctx, websocket.MessageText, data); err != nil {
		log.DebugContext(ctx, "send pty exit", "err", err)
	}
	_ = ws.Close(websocket.StatusNormalClosure, "process exited")
	closeTerm()
	select {
	case <-inDone:
	case <-time.After(ptyDrainGrace):
	}
}
