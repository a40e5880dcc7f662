package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"

	"github.com/coder/websocket"
)

// PTYOptions configure an interactive terminal.
type PTYOptions struct {
	// Command and its arguments; empty means the user's login shell.
	Command []string
	// User is "agent" (default) or "root".
	User string
	// Cwd is the working directory.
	Cwd string
	// Env adds environment variables.
	Env map[string]string
	// Rows and Cols are the initial size (default 24x80).
	Rows, Cols uint16
}

// PTYConn is an open terminal in a sandbox. Read returns terminal output
// and io.EOF once the process has exited (ExitCode is then valid); Write
// sends keystrokes. Read must not be called concurrently with itself;
// the other methods may be called from any goroutine.
type PTYConn struct {
	ws  *websocket.Conn
	ctx context.Context

	mu       sync.Mutex
	buf      []byte
	exited   bool // Read returns io.EOF
	gotExit  bool // the server sent the exit message
	exitCode int
}

// PTY opens an interactive terminal over a websocket. ctx governs the
// whole session: cancelling it closes the terminal.
func (c *Client) PTY(ctx context.Context, id string, opts PTYOptions) (*PTYConn, error) {
	q := url.Values{}
	for _, a := range opts.Command {
		q.Add("cmd", a)
	}
	if opts.User != "" {
		q.Set("user", opts.User)
	}
	if opts.Cwd != "" {
		q.Set("cwd", opts.Cwd)
	}
	keys := make([]string, 0, len(opts.Env))
	for k := range opts.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Add("env", k+"="+opts.Env[k])
	}
	if opts.Rows > 0 {
		q.Set("rows", strconv.Itoa(int(opts.Rows)))
	}
	if opts.Cols > 0 {
		q.Set("cols", strconv.Itoa(int(opts.Cols)))
	}
	u := c.url(sandboxPath(id, "/pty"), q)
	hdr := http.Header{}
	if c.apiKey != "" {
		hdr.Set("Authorization", "Bearer "+c.apiKey)
	}
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: hdr})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			// coder/websocket keeps up to 1 KiB of the error body.
			apiErr := decodeError(resp)
			return nil, fmt.Errorf("open terminal in %s: %w", id, apiErr)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("open terminal in %s: %w", id, ctx.Err())
		}
		return nil, &UnreachableError{Endpoint: c.endpoint, Err: err}
	}
	ws.SetReadLimit(1 << 20)
	return &PTYConn{ws: ws, ctx: ctx}, nil
}

// Read reads terminal output. It returns io.EOF when the process has
// exited and all its output was read.
func (p *PTYConn) Read(b []byte) (int, error) {
	for {
		p.mu.Lock()
		if len(p.buf) > 0 {
			n := copy(b, p.buf)
			p.buf = p.buf[n:]
			p.mu.Unlock()
			return n, nil
		}
		exited := p.exited
		p.mu.Unlock()
		if exited {
			return 0, io.EOF
		}
		typ, data, err := p.ws.Read(p.ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				p.mu.Lock()
				p.exited = true
				p.mu.Unlock()
				return 0, io.EOF
			}
			return 0, fmt.Errorf("read terminal: %w", err)
		}
		switch typ {
		case websocket.MessageBinary:
			p.mu.Lock()
			p.buf = append(p.buf, data...)
			p.mu.Unlock()
		case websocket.MessageText:
			var m PTYControl
			if json.Unmarshal(data, &m) == nil && m.Type == "exit" {
				p.mu.Lock()
				p.exited, p.gotExit, p.exitCode = true, true, m.ExitCode
				p.mu.Unlock()
			}
		}
	}
}

// Write sends input to the terminal.
func (p *PTYConn) Write(b []byte) (int, error) {
	if err := p.ws.Write(p.ctx, websocket.MessageBinary, b); err != nil {
		return 0, fmt.Errorf("write terminal: %w", err)
	}
	return len(b), nil
}

// Resize changes the terminal size.
func (p *PTYConn) Resize(rows, cols uint16) error {
	b, err := json.Marshal(PTYControl{Type: "resize", Rows: rows, Cols: cols})
	if err != nil {
		return fmt.Errorf("encode resize: %w", err)
	}
	if err := p.ws.Write(p.ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("resize terminal: %w", err)
	}
	return nil
}

// ExitCode returns the process's exit code once Read has returned io.EOF;
// ok is false while it is still running or if the connection was lost.
func (p *PTYConn) ExitCode() (code int, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitCode, p.gotExit
}

// Close ends the session; a process still running is hung up on.
func (p *PTYConn) Close() error {
	// An error here means the websocket is already closed (normally after
	// the exit message), which is what the caller wants.
	_ = p.ws.Close(websocket.StatusNormalClosure, "client closed")
	return nil
}
