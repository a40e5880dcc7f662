// Package portproxy makes sandbox ports reachable from outside through the
// daemon.
//
// An exposed port is reached over HTTP by Host
// ("<port>-<sandbox>.<domain>", path unchanged) or by path
// ("/v1/sandboxes/{id}/ports/{port}/...", prefix stripped). A public port
// needs no credential; a private one needs an API key authorized for the
// sandbox or the port's token. A request to a stopped, paused or archived
// sandbox with auto_resume wakes it first. Any port, exposed or not, can be
// tunnelled as raw TCP over a websocket (port-forward) with an API key.
//
// The proxy never lets the app in the sandbox see the caller's
// credentials: the API key, the port token (header, query parameter or
// cookie) are removed before a request is forwarded.
//
// Every error the proxy answers itself is an RFC 9457 problem document
// (application/problem+json) with title, status and detail. An unknown
// sandbox, another tenant's sandbox and an unexposed port get the same
// 404, so that they cannot be told apart.
package portproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/stead-dev/stead/internal/errs"
)

// Defaults of Options.
const (
	// DefaultWakeTimeout is the default Options.WakeTimeout.
	DefaultWakeTimeout = 60 * time.Second
	// DefaultDialTimeout is the default Options.DialTimeout.
	DefaultDialTimeout = 10 * time.Second
)

// Timing the proxy does not expose as options.
const (
	// activityInterval is how often a long stream or tunnel notes
	// activity while bytes flow.
	activityInterval = 30 * time.Second
	// wakePoll is how often a woken sandbox's port is tried.
	wakePoll = 20 * time.Millisecond
	// probeTimeout bounds one connection attempt while waiting for a port.
	probeTimeout = time.Second
	// readHeaderTimeout bounds reading a request's headers.
	readHeaderTimeout = 10 * time.Second
	// idleTimeout closes idle keep-alive connections.
	idleTimeout = 2 * time.Minute
	// shutdownGrace is how long Serve waits for requests in flight once
	// its context ends, before it closes their connections.
	shutdownGrace = 5 * time.Second
)

// Options configure a Proxy.
type Options struct {
	// Backend answers for sandboxes; required.
	Backend Backend
	// Domain enables Host routing: "<port>-<sandbox>.<Domain>". Empty
	// means path routing only.
	Domain string
	// Logger receives errors and, at debug level, wakes and tunnels
	// (default slog.Default()).
	Logger *slog.Logger
	// WakeTimeout bounds waking a sandbox and waiting for its port to
	// accept connections (default DefaultWakeTimeout).
	WakeTimeout time.Duration
	// DialTimeout bounds connecting to a sandbox's port (default
	// DefaultDialTimeout).
	DialTimeout time.Duration
	// Front, when set, wraps the handler of the proxy's own listener
	// (Server, Serve): a cluster forwards there the requests for
	// sandboxes other nodes run (see SandboxOf). Handler and PathHandler
	// are not wrapped.
	Front func(http.Handler) http.Handler
}

// Proxy forwards requests and tunnels to sandbox ports. It is safe for
// concurrent use.
type Proxy struct {
	b           Backend
	domain      string
	log         *slog.Logger
	wakeTimeout time.Duration
	dialTimeout time.Duration
	actEvery    time.Duration
	transport   *http.Transport
	dialer      *net.Dialer
	wakes       singleflight.Group
	front       func(http.Handler) http.Handler
}

// New returns a proxy for opts. It panics if opts.Backend is nil.
func New(opts Options) *Proxy {
	if opts.Backend == nil {
		panic("portproxy.New: Options.Backend is nil")
	}
	p := &Proxy{
		b:           opts.Backend,
		domain:      strings.Trim(strings.ToLower(opts.Domain), "."),
		log:         opts.Logger,
		wakeTimeout: opts.WakeTimeout,
		dialTimeout: opts.DialTimeout,
		actEvery:    activityInterval,
		front:       opts.Front,
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.wakeTimeout <= 0 {
		p.wakeTimeout = DefaultWakeTimeout
	}
	if p.dialTimeout <= 0 {
		p.dialTimeout = DefaultDialTimeout
	}
	p.dialer = &net.Dialer{Timeout: p.dialTimeout, KeepAlive: 30 * time.Second}
	var http1 http.Protocols
	http1.SetHTTP1(true)
	p.transport = &http.Transport{
		Proxy:                 nil, // never an environment proxy: sandboxes are routed from the host
		DialContext:           p.dialer.DialContext,
		Protocols:             &http1,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true, // pass the client's Accept-Encoding and the app's encoding through
	}
	return p
}

// Handler serves the proxy's own listener: Host routing (when Options.Domain
// is set), then path routing; anything else is a 404 problem.
//
// By Host, "<port>-<sandbox>.<domain>" (any listener port) goes to that
// port with the path unchanged. By path, "/v1/sandboxes/{id}/ports/{port}/rest"
// goes to that port as "/rest" with X-Forwarded-Prefix set to the stripped
// prefix; the prefix without its trailing slash is redirected to the slash
// form. X-Forwarded-For, -Host and -Proto are set (those the client sent are
// replaced).
func (p *Proxy) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if port, id, ok := parseHost(r.Host, p.domain); ok {
			p.servePort(w, r, route{id: id, port: port})
			return
		}
		p.servePath(w, r)
	})
}

// SandboxOf returns the sandbox (id, or name for a path route) a request
// of the proxy's listener is for: by Host "<port>-<sandbox>.<domain>" when
// domain (as Options.Domain) is set, else by path
// ("/v1/sandboxes/{id}/ports/{port}/..." or
// "/v1/sandboxes/{id}/port-forward/{port}"); false for any other request.
func SandboxOf(r *http.Request, domain string) (string, bool) {
	if id, ok := HostSandbox(r, domain); ok {
		return id, true
	}
	if rt, ok := parsePath(r.URL.EscapedPath()); ok {
		return rt.id, true
	}
	if id, _, ok := parseForwardPath(r.URL.EscapedPath()); ok {
		return id, true
	}
	return "", false
}

// HostSandbox returns the sandbox of a host-routed request
// ("<port>-<sandbox>.<domain>", domain as Options.Domain), false for any
// other request and when domain is "".
func HostSandbox(r *http.Request, domain string) (string, bool) {
	_, id, ok := parseHost(r.Host, strings.Trim(strings.ToLower(domain), "."))
	return id, ok
}

// PathHandler serves path routing only, for the daemon's API listener. It
// must see the whole request path (mount it without stripping the prefix,
// for example on "/v1/sandboxes/{id}/ports/{port}/", and ahead of the API's
// authentication: it authenticates by itself). A request for the bare
// prefix is redirected to the slash form only if it reaches this handler.
func (p *Proxy) PathHandler() http.Handler { return http.HandlerFunc(p.servePath) }

// servePath serves a path-routed request, or a 404.
func (p *Proxy) servePath(w http.ResponseWriter, r *http.Request) {
	rt, ok := parsePath(r.URL.EscapedPath())
	if !ok {
		writeProblem(w, http.StatusNotFound, "no sandbox port here: use /v1/sandboxes/{id}/ports/{port}/ or, when the proxy has a domain, http://{port}-{id}.{domain}/")
		return
	}
	if rt.bare {
		code := http.StatusMovedPermanently
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			code = http.StatusPermanentRedirect
		}
		w.Header().Set("Location", safeLocation(rt.prefix+"/", r.URL.RawQuery))
		w.WriteHeader(code)
		return
	}
	p.servePort(w, r, rt)
}

// notFound answers the one 404 of an unknown sandbox, another tenant's
// sandbox and an unexposed port.
func notFound(w http.ResponseWriter, rt route) {
	writeProblem(w, http.StatusNotFound, fmt.Sprintf("sandbox %s has no exposed port %d", rt.id, rt.port))
}

// servePort authenticates a request for a sandbox's port, wakes the
// sandbox if it must and may, and forwards the request.
func (p *Proxy) servePort(w http.ResponseWriter, r *http.Request, rt route) {
	ctx := r.Context()
	log := p.log.With("sandbox", rt.id, "port", rt.port)
	t, err := p.b.Target(ctx, rt.id, rt.port)
	if err != nil {
		if errors.Is(err, errs.ErrNotFound) {
			notFound(w, rt)
			return
		}
		log.ErrorContext(ctx, "port proxy: look up sandbox", "op", "target", "err", err)
		writeProblem(w, http.StatusBadGateway, "cannot look up the sandbox now; try again")
		return
	}
	if !t.Exposed {
		notFound(w, rt)
		return
	}
	log = p.log.With("sandbox", t.SandboxID, "tenant", t.Tenant, "port", rt.port)
	if !t.Public && !p.authorizePort(w, r, t, rt, log) {
		return
	}
	addr, ok := p.ready(w, r, t, rt.port, log)
	if !ok {
		return
	}
	p.b.NoteActivity(t.SandboxID)
	p.reverseProxy(t, addr, rt, log).ServeHTTP(w, r)
}

// authorizePort checks the credentials of a request for a private port.
// It answers the request itself (a redirect that sets the token cookie, or
// an error) and returns false, or returns true to forward it.
func (p *Proxy) authorizePort(w http.ResponseWriter, r *http.Request, t Target, rt route, log *slog.Logger) bool {
	ctx := r.Context()
	if rest, tok, found := cutQueryParam(r.URL.RawQuery, TokenQuery); found {
		if !p.b.CheckToken(t.SandboxID, rt.port, tok) {
			unauthorized(w, rt, "the token in ?"+TokenQuery+"= is wrong or was rotated by exposing the port again")
			return false
		}
		path := "/"
		if !rt.hostRouted() {
			path = rt.prefix + "/"
		}
		http.SetCookie(w, &http.Cookie{
			Name:     TokenCookie,
			Value:    tok,
			Path:     path,
			HttpOnly: true,
			Secure:   r.TLS != nil,
			SameSite: http.SameSiteLaxMode,
		})
		code := http.StatusFound
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			code = http.StatusTemporaryRedirect
		}
		w.Header().Set("Location", safeLocation(r.URL.EscapedPath(), rest))
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		return false
	}
	var keyErr error
	if key := apiKey(r); key != "" {
		if keyErr = p.b.Authorize(ctx, key, t.SandboxID); keyErr == nil {
			return true
		}
	}
	if tok := r.Header.Get(TokenHeader); tok != "" && p.b.CheckToken(t.SandboxID, rt.port, tok) {
		return true
	}
	for _, tok := range tokenCookies(r) {
		if p.b.CheckToken(t.SandboxID, rt.port, tok) {
			return true
		}
	}
	switch {
	case keyErr == nil:
		unauthorized(w, rt, "")
	case errors.Is(keyErr, errs.ErrUnauthenticated):
		unauthorized(w, rt, "the API key is unknown or revoked")
	case errors.Is(keyErr, errs.ErrNotFound), errors.Is(keyErr, errs.ErrForbidden):
		notFound(w, rt)
	default:
		log.ErrorContext(ctx, "port proxy: authorize API key", "op", "authorize", "err", keyErr)
		writeProblem(w, http.StatusBadGateway, "cannot check the API key now; try again")
	}
	return false
}

// unauthorized answers 401 for a private port, saying which credentials
// would do.
func unauthorized(w http.ResponseWriter, rt route, why string) {
	detail := fmt.Sprintf("port %d of sandbox %s is private: send an API key authorized for the sandbox "+
		"(Authorization: Bearer <key> or X-API-Key), or the port's token (%s header, or ?%s= once in a browser)",
		rt.port, rt.id, TokenHeader, TokenQuery)
	if why != "" {
		detail = why + "; " + detail
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="stead"`)
	writeProblem(w, http.StatusUnauthorized, detail)
}

// reverseProxy returns the reverse proxy of one request to addr.
func (p *Proxy) reverseProxy(t Target, addr netip.AddrPort, rt route, log *slog.Logger) *httputil.ReverseProxy {
	target := &url.URL{Scheme: "http", Host: addr.String()}
	m := newMeter(func() { p.b.NoteActivity(t.SandboxID) }, p.actEvery)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			if !rt.hostRouted() {
				// rest was checked to unescape by parsePath.
				path, _ := url.PathUnescape(rt.rest)
				pr.Out.URL.Path, pr.Out.URL.RawPath = path, rt.rest
				pr.Out.Header.Set("X-Forwarded-Prefix", rt.prefix)
			}
			pr.SetXForwarded()
			stripCredentials(pr.Out)
		},
		Transport: &meteredTransport{base: p.transport, m: m},
		// Streams (unknown length, event streams) are flushed at every
		// write by ReverseProxy whatever this says; a body of known length
		// is flushed at least this often, so a slow one still trickles
		// through, without a write system call per chunk (flushing every
		// write halved the requests/s of small responses).
		FlushInterval: 20 * time.Millisecond,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				log.DebugContext(r.Context(), "port proxy: client went away", "err", err)
				return
			}
			log.WarnContext(r.Context(), "port proxy: forward request", "op", "forward", "err", err)
			writeProblem(w, http.StatusBadGateway, fmt.Sprintf(
				"sandbox %s is not answering on port %d: is the app listening on 0.0.0.0:%d (not only 127.0.0.1)?",
				t.SandboxID, rt.port, rt.port))
		},
	}
}

// Server returns an http.Server around Handler (wrapped by Options.Front)
// that speaks HTTP/1.1,
// HTTP/2 over TLS (ALPN h2) and cleartext HTTP/2 with prior knowledge
// (h2c). It has no WriteTimeout, since streams and websockets last.
func (p *Proxy) Server() *http.Server {
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	protos.SetUnencryptedHTTP2(true)
	h := p.Handler()
	if p.front != nil {
		h = p.front(h)
	}
	return &http.Server{
		Handler:           h,
		Protocols:         &protos,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
}

// Serve serves Server on ln until ctx ends, with TLS from certFile and
// keyFile when certFile is not empty. When ctx ends it stops accepting,
// gives requests in flight a few seconds, closes what is left (tunnels
// and streams included) and returns nil; otherwise it returns the error
// that stopped the server. It closes ln.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener, certFile, keyFile string) error {
	srv := p.Server()
	// Requests outlive ctx by the shutdown grace; then their contexts
	// end, which closes upgraded connections and tunnels (Shutdown does
	// not track hijacked connections).
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv.BaseContext = func(net.Listener) context.Context { return base }
	errc := make(chan error, 1)
	go func() {
		if certFile != "" {
			errc <- srv.ServeTLS(ln, certFile, keyFile)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("serve port proxy on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	cancelBase()
	<-errc
	return nil
}
