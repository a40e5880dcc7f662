// Package egress is the transparent Host/SNI egress proxy on the bridge's
// gateway. The firewall redirects TCP to ports 80 and 443 from sandboxes
// whose policy names domains to it, because an address many names share
// (a CDN's, a cloud load balancer's) admitted for one name would
// otherwise admit them all. For each connection it finds the sandbox by
// the source address and the original destination by conntrack, reads
// the name the client asks for (the TLS ClientHello's server name, or the
// Host of every HTTP/1.x request on the connection), decides with
// policy.Policy.Connect and relays admitted connections to the original
// destination unchanged.
//
// TLS is not terminated, so the proxy sees only the ClientHello's SNI: a
// different Host inside the encrypted stream (domain fronting) cannot be
// seen, and is not checked. Neither is anything after a 101 Switching
// Protocols or a successful CONNECT, which is relayed as raw bytes.
package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stead-dev/stead/internal/network/policy"
)

// Defaults of Options.
const (
	DefaultHeaderTimeout = 10 * time.Second
	DefaultDialTimeout   = 10 * time.Second
)

// maxPeek bounds what the proxy reads before it decides: a ClientHello
// (all its records) or one request head.
const maxPeek = 16 << 10

// drainTimeout bounds how long a refused connection's upstream may take
// to finish the responses already asked for before the refusal is sent.
const drainTimeout = 10 * time.Second

// Options configure a Proxy. Listen, Lookup, Resolved and Forbidden are
// required.
type Options struct {
	// Listen is the TCP address the firewall redirects to, e.g.
	// "10.88.0.1:3129".
	Listen string
	// Lookup finds the sandbox that owns a source address (network's
	// Manager.Lookup). Connections from other sources are closed.
	Lookup func(src netip.Addr) (id string, p policy.Policy, ok bool)
	// Resolved reports whether an admitted name resolved to a for the
	// sandbox (network's Manager.Resolved).
	Resolved func(id string, a netip.Addr) bool
	// Forbidden reports whether no sandbox may reach a (network's
	// Manager.Forbidden).
	Forbidden func(a netip.Addr) bool
	// OnRefused is called for every refused connection or request with
	// the name it carried ("" for none). nil: not called.
	OnRefused func(id string, dst netip.AddrPort, name string)
	// OriginalDst returns a redirected connection's original destination
	// (default: OriginalDst, from conntrack).
	OriginalDst func(c *net.TCPConn) (netip.AddrPort, error)
	// Dial connects to the original destination (default: a net.Dialer
	// with a DefaultDialTimeout timeout).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// HeaderTimeout bounds reading a ClientHello or a request head once
	// its first byte has come (the first one: from the accept)
	// (default DefaultHeaderTimeout).
	HeaderTimeout time.Duration
}

// Proxy is the egress proxy. Its methods are safe for concurrent use.
type Proxy struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	ctx    context.Context
	cancel context.CancelFunc
	closed bool
	wg     sync.WaitGroup
}

// New checks opts and returns a Proxy that is not listening yet.
func New(opts Options) (*Proxy, error) {
	switch {
	case opts.Listen == "":
		return nil, errors.New("new egress proxy: no listen address")
	case opts.Lookup == nil || opts.Resolved == nil || opts.Forbidden == nil:
		return nil, errors.New("new egress proxy: Lookup, Resolved and Forbidden are required")
	}
	if opts.OriginalDst == nil {
		opts.OriginalDst = OriginalDst
	}
	if opts.Dial == nil {
		d := &net.Dialer{Timeout: DefaultDialTimeout}
		opts.Dial = d.DialContext
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.HeaderTimeout <= 0 {
		opts.HeaderTimeout = DefaultHeaderTimeout
	}
	return &Proxy{opts: opts, log: opts.Logger.With("op", "egress"), conns: map[net.Conn]struct{}{}}, nil
}

// Start listens and returns once listening; connections are served until
// Close or until ctx ends.
func (p *Proxy) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil || p.closed {
		return errors.New("start egress proxy: already started")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", p.opts.Listen)
	if err != nil {
		return fmt.Errorf("start egress proxy: %w", err)
	}
	p.ln = ln
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	p.wg.Add(1)
	go p.accept(ln)
	go func() {
		select {
		case <-ctx.Done():
			p.Close()
		case <-p.ctx.Done():
		}
	}()
	p.log.InfoContext(ctx, "egress proxy listening", "addr", ln.Addr().String())
	return nil
}

// Addr is the listening address (nil before Start).
func (p *Proxy) Addr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}

// Close stops listening, closes every connection and waits for their
// goroutines. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var err error
	if p.ln != nil {
		err = p.ln.Close()
		p.cancel()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("close egress proxy: %w", err)
	}
	return nil
}

// track adds c to the connections Close closes; false when closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			p.log.Warn("accept", "err", err)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		tc, ok := c.(*net.TCPConn)
		if !ok || !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			defer c.Close()
			p.serve(p.ctx, tc)
		}()
	}
}

// conn is one sandbox connection being served.
type conn struct {
	p   *Proxy
	log *slog.Logger
	id  string
	pol policy.Policy
	dst netip.AddrPort
	c   *net.TCPConn
	br  *bufio.Reader
	// holdClient: the upstream's EOF does not half-close c, the proxy
	// writes a final response of its own after it.
	holdClient atomic.Bool
}

// serve decides one connection and relays it if admitted.
func (p *Proxy) serve(ctx context.Context, c *net.TCPConn) {
	src := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	id, pol, ok := p.opts.Lookup(src)
	if !ok {
		p.log.DebugContext(ctx, "connection from unknown source closed", "src", src)
		return
	}
	dst, err := p.opts.OriginalDst(c)
	if err != nil {
		p.log.WarnContext(ctx, "connection without an original destination closed", "sandbox", id, "err", err)
		return
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	cn := &conn{p: p, log: p.log.With("sandbox", id, "dst", dst.String()), id: id, pol: pol, dst: dst, c: c,
		br: bufio.NewReaderSize(c, maxPeek)}
	if p.opts.Forbidden(dst.Addr()) {
		cn.refused(ctx, "", "forbidden address")
		return
	}
	c.SetReadDeadline(time.Now().Add(p.opts.HeaderTimeout))
	first, err := cn.br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == recordHandshake {
		cn.serveTLS(ctx)
		return
	}
	cn.serveHTTP(ctx)
}

// admit decides a name on this connection.
func (cn *conn) admit(name string) bool {
	a := cn.dst.Addr()
	return cn.pol.Connect(a, name, cn.p.opts.Resolved(cn.id, a)) == policy.Admit
}

// refused logs and reports a refusal.
func (cn *conn) refused(ctx context.Context, name, why string) {
	cn.log.InfoContext(ctx, "connection refused", "name", name, "why", why)
	if cn.p.opts.OnRefused != nil {
		cn.p.opts.OnRefused(cn.id, cn.dst, name)
	}
}

// dial connects to the original destination and tracks the connection.
func (cn *conn) dial(ctx context.Context) (net.Conn, error) {
	up, err := cn.p.opts.Dial(ctx, "tcp", cn.dst.String())
	if err != nil {
		cn.log.InfoContext(ctx, "dial original destination", "err", err)
		return nil, fmt.Errorf("dial %s: %w", cn.dst, err)
	}
	if !cn.p.track(up) {
		up.Close()
		return nil, fmt.Errorf("dial %s: %w", cn.dst, net.ErrClosed)
	}
	return up, nil
}

// tlsAlertAccessDenied is a fatal TLS alert record, access_denied (49).
var tlsAlertAccessDenied = []byte{21, 3, 1, 0, 2, 2, 49}

// serveTLS checks the ClientHello's server name once. A Host inside the
// encrypted stream (domain fronting) cannot be seen without terminating
// TLS, which the proxy does not do.
func (cn *conn) serveTLS(ctx context.Context) {
	need := recordHeaderLen
	var name string
	for {
		if need > maxPeek {
			cn.log.InfoContext(ctx, "ClientHello larger than the proxy reads", "bytes", need)
			cn.c.Write(tlsAlertAccessDenied)
			return
		}
		b, err := cn.br.Peek(need)
		if err != nil {
			cn.log.DebugContext(ctx, "read ClientHello", "err", err)
			return
		}
		n, more, err := clientHelloSNI(b)
		if errors.Is(err, errNeedMore) {
			need = more
			continue
		}
		if err != nil {
			cn.log.InfoContext(ctx, "malformed ClientHello", "err", err)
			cn.c.Write(tlsAlertAccessDenied)
			return
		}
		name = n
		break
	}
	if !cn.admit(name) {
		cn.refused(ctx, name, "tls server name")
		cn.c.SetWriteDeadline(time.Now().Add(time.Second))
		cn.c.Write(tlsAlertAccessDenied)
		return
	}
	cn.c.SetReadDeadline(time.Time{})
	up, err := cn.dial(ctx)
	if err != nil {
		return
	}
	defer cn.p.untrack(up)
	defer up.Close()
	cn.log.DebugContext(ctx, "tls connection admitted", "name", name)
	relay(cn.c, cn.br, up, up)
}

// serveHTTP checks the Host of every request on the connection, until
// the connection switches protocols.
func (cn *conn) serveHTTP(ctx context.Context) {
	head, raw, err := cn.readRequest()
	if err != nil {
		cn.badRequest(ctx, err)
		return
	}
	if upgradesTo(head.Upgrade, "h2c") {
		cn.refused(ctx, head.Name, "h2c upgrade")
		cn.writeFinal(forbidden(head.Name, "an upgrade to HTTP/2 (h2c), whose streams the proxy cannot check"))
		return
	}
	if !cn.admit(head.Name) {
		cn.refused(ctx, head.Name, "http host")
		cn.writeFinal(forbidden(head.Name, ""))
		return
	}
	up, err := cn.dial(ctx)
	if err != nil {
		cn.writeFinal(response("502 Bad Gateway", "stead: the sandbox's connection to "+cn.dst.String()+" failed\n"))
		return
	}
	defer cn.p.untrack(up)
	defer up.Close()

	upBr := bufio.NewReaderSize(up, maxPeek)
	switched := make(chan bool, 1)
	upDone := make(chan struct{})
	firstSwitches, connect := head.switches(), head.Method == "CONNECT"
	go func() {
		// Responses are relayed as they come; the requests side checks
		// requests only.
		defer close(upDone)
		if firstSwitches {
			switched <- awaitSwitch(cn.c, upBr, connect)
		}
		if _, err := io.Copy(cn.c, upBr); err != nil {
			cn.c.Close() // unblock the request side
			return
		}
		if !cn.holdClient.Load() {
			cn.c.CloseWrite()
		}
	}()
	defer func() {
		up.Close()
		<-upDone // the response side uses cn.c: it ends first
	}()
	finish := func() {
		closeWrite(up)
		select {
		case <-upDone:
		case <-ctx.Done():
		}
	}

	for first := true; ; first = false {
		if !first {
			// Between requests the connection may idle; the upstream
			// closing ends it.
			cn.c.SetReadDeadline(time.Time{})
			if _, err := cn.peekWhileUp(upDone); err != nil {
				finish()
				return
			}
			cn.c.SetReadDeadline(time.Now().Add(cn.p.opts.HeaderTimeout))
			head, raw, err = cn.readRequest()
			if err != nil {
				cn.endWith(ctx, up, upDone, badRequestResponse(err))
				return
			}
			if head.switches() {
				// Only the first request's response is watched for a
				// switch (see awaitSwitch).
				cn.refused(ctx, head.Name, "upgrade after the first request")
				cn.endWith(ctx, up, upDone, forbidden(head.Name, "an upgrade or CONNECT that is not the connection's first request"))
				return
			}
			if !cn.admit(head.Name) {
				cn.refused(ctx, head.Name, "http host")
				cn.endWith(ctx, up, upDone, forbidden(head.Name, ""))
				return
			}
		}
		cn.c.SetReadDeadline(time.Time{})
		if _, err := up.Write(raw); err != nil {
			cn.c.Close()
			return
		}
		cn.br.Discard(len(raw))
		if err := copyBody(up, cn.br, head); err != nil {
			cn.log.DebugContext(ctx, "request body", "err", err)
			cn.c.Close()
			up.Close()
			<-upDone
			return
		}
		if first && firstSwitches {
			var sw bool
			select {
			case sw = <-switched:
			case <-upDone:
			case <-ctx.Done():
				return
			}
			if sw {
				cn.log.DebugContext(ctx, "connection switched protocols", "name", head.Name)
				if _, err := io.Copy(up, cn.br); err != nil {
					up.Close()
				}
				finish()
				return
			}
		}
	}
}

// upgradesTo reports whether an Upgrade header's value names protocol.
func upgradesTo(upgrade, protocol string) bool {
	for p := range strings.SplitSeq(upgrade, ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(p), "/")
		if strings.EqualFold(name, protocol) {
			return true
		}
	}
	return false
}

// peekWhileUp waits for the first byte of the next request, giving up
// when the upstream side ends.
func (cn *conn) peekWhileUp(upDone <-chan struct{}) ([]byte, error) {
	stop, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-upDone:
			cn.c.SetReadDeadline(time.Now())
		case <-stop:
		}
	}()
	b, err := cn.br.Peek(1)
	close(stop)
	<-exited // the caller's next deadline is the one that holds
	return b, err
}

// readRequest reads one request head (bounded by maxPeek) and returns it
// parsed and raw; raw stays in cn.br until discarded.
func (cn *conn) readRequest() (requestHead, []byte, error) {
	raw, err := peekHead(cn.br)
	if err != nil {
		return requestHead{}, nil, err
	}
	head, err := parseRequestHead(raw)
	return head, raw, err
}

// copyBody forwards a request's body by its framing.
func copyBody(w io.Writer, br *bufio.Reader, h requestHead) error {
	switch {
	case h.Chunked:
		return copyChunked(w, br)
	case h.ContentLength > 0:
		_, err := io.CopyN(w, br, h.ContentLength)
		return err
	}
	return nil
}

// awaitSwitch relays the response heads to a request that may switch
// protocols: informational (1xx) ones and then the final one. It
// reports whether the connection switched (101; a 2xx to a CONNECT).
// Anything it cannot parse counts as not switched, so the request side
// keeps checking requests.
func awaitSwitch(w io.Writer, upBr *bufio.Reader, connect bool) bool {
	for {
		raw, err := peekHead(upBr)
		if err != nil {
			return false
		}
		code := statusCode(raw)
		if _, err := w.Write(raw); err != nil {
			return false
		}
		upBr.Discard(len(raw))
		switch {
		case code == 101 && !connect:
			return true
		case connect && code >= 200 && code < 300:
			return true
		case code >= 100 && code < 200:
			continue
		}
		return false
	}
}

// statusCode is the status of a response head (0 if malformed).
func statusCode(head []byte) int {
	line, _, _ := strings.Cut(string(head), "\r\n")
	proto, rest, ok := strings.Cut(line, " ")
	if !ok || (proto != "HTTP/1.1" && proto != "HTTP/1.0") || len(rest) < 3 {
		return 0
	}
	code := 0
	for _, c := range rest[:3] {
		if c < '0' || c > '9' {
			return 0
		}
		code = code*10 + int(c-'0')
	}
	if len(rest) > 3 && rest[3] != ' ' {
		return 0
	}
	return code
}

// endWith ends a connection on which requests were already forwarded:
// it half-closes the upstream, lets the upstream finish the responses
// already asked for (at most drainTimeout), then sends resp and closes.
func (cn *conn) endWith(ctx context.Context, up net.Conn, upDone <-chan struct{}, resp []byte) {
	cn.holdClient.Store(true) // resp goes after the upstream's last byte
	closeWrite(up)
	select {
	case <-upDone:
	case <-time.After(drainTimeout):
		up.Close()
		<-upDone
		return // the client may be mid-response: no room for ours
	case <-ctx.Done():
		return
	}
	cn.writeFinal(resp)
}

// badRequest answers a malformed first request.
func (cn *conn) badRequest(ctx context.Context, err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return
	}
	cn.log.InfoContext(ctx, "malformed request refused", "err", err)
	cn.writeFinal(badRequestResponse(err))
}

func badRequestResponse(err error) []byte {
	return response("400 Bad Request", "stead: the egress proxy refused a request it could not check: "+err.Error()+"\n")
}

// forbidden is the 403 answer to a refused request.
func forbidden(name, reason string) []byte {
	what := "a request without a host name"
	if name != "" {
		what = "a request to " + name
	}
	if reason != "" {
		what += " (" + reason + ")"
	}
	return response("403 Forbidden", "stead: the sandbox's network policy refused "+what+"\n")
}

// response is a complete HTTP/1.1 response that closes the connection.
func response(status, body string) []byte {
	return []byte("HTTP/1.1 " + status + "\r\nContent-Type: text/plain; charset=utf-8\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n", len(body)) + "Connection: close\r\n\r\n" + body)
}

// writeFinal writes resp, half-closes, and reads (and drops) what the
// client still sends for a moment, so that the client reads resp rather
// than a reset.
func (cn *conn) writeFinal(resp []byte) {
	cn.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := cn.c.Write(resp); err != nil {
		return
	}
	cn.c.CloseWrite()
	cn.c.SetReadDeadline(time.Now().Add(time.Second))
	io.CopyN(io.Discard, cn.br, 256<<10)
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// relay copies both ways until both directions end, half-closing each
// direction at its EOF; an error in either closes both.
func relay(c *net.TCPConn, fromClient io.Reader, up net.Conn, fromUp io.Reader) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if _, err := io.Copy(up, fromClient); err != nil {
			c.Close()
			up.Close()
			return
		}
		closeWrite(up)
	}()
	go func() {
		defer wg.Done()
		if _, err := io.Copy(c, fromUp); err != nil {
			c.Close()
			up.Close()
			return
		}
		c.CloseWrite()
	}()
	wg.Wait()
}
