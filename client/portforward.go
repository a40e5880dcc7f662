package client

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/coder/websocket"
)

// PortForward opens a raw TCP connection to port of a sandbox, tunnelled
// through the daemon over a websocket (GET
// /v1/sandboxes/{id}/port-forward/{port}). The port need not be exposed;
// the client's API key must be authorized for the sandbox. A stopped or
// paused sandbox with auto_resume is woken first.
//
// As with net.Dialer.DialContext, ctx bounds only the dial: the returned
// connection lives until Close. A half-close is not carried: closing
// either end closes the tunnel.
func (c *Client) PortForward(ctx context.Context, sandbox string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("forward port %d of %s: not a TCP port (1-65535)", port, sandbox)
	}
	u := c.url(sandboxPath(sandbox, "/port-forward/"+strconv.Itoa(port)), nil)
	hdr := http.Header{}
	if c.apiKey != "" {
		hdr.Set("Authorization", "Bearer "+c.apiKey)
	}
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: hdr})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, fmt.Errorf("forward port %d of %s: %w", port, sandbox, decodeError(resp))
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("forward port %d of %s: %w", port, sandbox, ctx.Err())
		}
		return nil, &UnreachableError{Endpoint: c.endpoint, Err: err}
	}
	// NetConn reads a message as a stream: no limit on one message's size.
	ws.SetReadLimit(-1)
	return websocket.NetConn(context.WithoutCancel(ctx), ws, websocket.MessageBinary), nil
}
