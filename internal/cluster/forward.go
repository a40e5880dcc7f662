package cluster

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// DialTimeout bounds how long a node waits to connect to another node.
const DialTimeout = 5 * time.Second

// NodeClient makes this node's signed calls to other nodes: it forwards
// clients' requests to the node that must serve them (Forward, a
// streaming reverse proxy) and makes the node's own calls (Do). Node
// addresses are "host:port" (plain HTTP), "http://host:port",
// "https://host:port" or "unix:/path/to/socket", as nodes register them.
type NodeClient struct {
	auth  *NodeAuth
	tr    *http.Transport
	proxy *httputil.ReverseProxy
	log   *slog.Logger
	// unix maps the made-up host name of a unix socket address to the
	// socket's path (see target).
	unix sync.Map
}

// NewNodeClient returns the node client that signs with auth. logger
// receives proxy failures after the answer began (default slog.Default()).
func NewNodeClient(auth *NodeAuth, logger *slog.Logger) (*NodeClient, error) {
	if auth == nil {
		return nil, fmt.Errorf("node client: no node auth: %w", errs.ErrInvalid)
	}
	if logger == nil {
		logger = slog.Default()
	}
	c := &NodeClient{auth: auth, log: logger}
	c.tr = &http.Transport{
		DialContext:           c.dial,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// The client's own Accept-Encoding passes through; the body is
		// relayed as the node sent it.
		DisableCompression: true,
	}
	c.proxy = &httputil.ReverseProxy{
		Rewrite:       c.rewrite,
		Transport:     c.tr,
		FlushInterval: -1, // every write at once: exec and log streams, SSE
		ErrorHandler:  c.proxyError,
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return c, nil
}

// Close closes the idle connections to other nodes.
func (c *NodeClient) Close() { c.tr.CloseIdleConnections() }

// dial connects to a node: a unix socket for the host names target made
// up for one, TCP otherwise.
func (c *NodeClient) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if p, ok := c.unix.Load(host); ok {
			return d.DialContext(ctx, "unix", p.(string))
		}
	}
	return d.DialContext(ctx, network, addr)
}

// target is the base URL of the node at addr.
func (c *NodeClient) target(addr string) (*url.URL, error) {
	switch {
	case strings.HasPrefix(addr, "unix:"):
		path := strings.TrimPrefix(addr, "unix:")
		if path == "" {
			return nil, fmt.Errorf("node address %q names no socket: %w", addr, errs.ErrInvalid)
		}
		sum := sha256.Sum256([]byte(path))
		host := "unix-" + hex.EncodeToString(sum[:8]) + ".stead.invalid"
		c.unix.Store(host, path)
		return &url.URL{Scheme: "http", Host: host}, nil
	case strings.HasPrefix(addr, "http://"), strings.HasPrefix(addr, "https://"):
		u, err := url.Parse(addr)
		if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("node address %q: want http(s)://host:port: %w", addr, errs.ErrInvalid)
		}
		u.Path = ""
		return u, nil
	default:
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("node address %q: want host:port: %w", addr, errs.ErrInvalid)
		}
		return &url.URL{Scheme: "http", Host: addr}, nil
	}
}

// fwdKey is the context key of a forwarded request's *fwdCall.
type fwdKey struct{}

// fwdCall is one Forward in flight: where to, and the proxy's error.
type fwdCall struct {
	to     api.Peer
	target *url.URL
	err    error
}

// ForwardError is a forward that got no answer from the node: it could
// not be reached (503: retry later; if the node is gone, failover moves
// its sandboxes once its heartbeat lapses) or it broke the connection
// before it answered (502). Nothing was written to the client.
type ForwardError struct {
	// Peer is the node the request was for.
	Peer api.Peer
	// Status is 502 or 503.
	Status int
	// Err is the cause.
	Err error
}

// Error names the node and says what to do.
func (e *ForwardError) Error() string {
	if e.Status == http.StatusServiceUnavailable {
		return fmt.Sprintf("node %s (%s), which must serve this request, cannot be reached: %v; retry later (if the node is down, its sandboxes move to other nodes once its heartbeat is older than the cluster's grace)",
			e.Peer.Node, e.Peer.Address, e.Err)
	}
	return fmt.Sprintf("node %s (%s), which must serve this request, failed before it answered: %v", e.Peer.Node, e.Peer.Address, e.Err)
}

// Unwrap returns the cause.
func (e *ForwardError) Unwrap() error { return e.Err }

// GetStatus is the HTTP status of the answer (the API reads it).
func (e *ForwardError) GetStatus() int { return e.Status }

// Forward proxies r to the node to, streaming both ways (request and
// response bodies, flushed as they come; a websocket or other upgrade is
// relayed byte for byte), with r's own headers (the client's credentials
// among them: the node authenticates the client itself) and Host, signed
// as this node's call. When the node gives no answer at all, Forward
// writes nothing and returns a *ForwardError for the caller to answer;
// once the node answered, its answer is the response, and a failure in
// the middle of it aborts the client's connection (http.ErrAbortHandler).
// A client that went away gets nothing (nil).
func (c *NodeClient) Forward(w http.ResponseWriter, r *http.Request, to api.Peer) error {
	u, err := c.target(to.Address)
	if err != nil {
		return &ForwardError{Peer: to, Status: http.StatusBadGateway, Err: err}
	}
	call := &fwdCall{to: to, target: u}
	// The node may answer before the request's body is all sent (and
	// always reads past its end to check its length): without full duplex
	// the server would close the body once the answer's headers are
	// written, breaking the connection to the node in mid-answer. (HTTP/2
	// is full duplex anyway, and says it does not support the call.)
	_ = http.NewResponseController(w).EnableFullDuplex()
	tw := &trackWriter{ResponseWriter: w}
	c.proxy.ServeHTTP(tw, r.WithContext(context.WithValue(r.Context(), fwdKey{}, call)))
	if call.err == nil {
		return nil
	}
	if r.Context().Err() != nil {
		// The client went away: there is no one to answer, and what the
		// node did with the request is the node's to record.
		c.log.DebugContext(r.Context(), "forwarded request canceled by the client", "node", to.Node, "method", r.Method, "path", r.URL.Path, "err", call.err)
		return nil
	}
	if tw.wrote {
		c.log.WarnContext(r.Context(), "forwarded request broke off", "node", to.Node, "address", to.Address,
			"method", r.Method, "path", r.URL.Path, "err", call.err)
		return nil
	}
	status := http.StatusBadGateway
	var op *net.OpError
	if errors.As(call.err, &op) && op.Op == "dial" {
		status = http.StatusServiceUnavailable
	}
	return &ForwardError{Peer: to, Status: status, Err: call.err}
}

// rewrite makes the outgoing request: the node's URL, the client's Host,
// X-Forwarded-*, and this node's signature.
func (c *NodeClient) rewrite(pr *httputil.ProxyRequest) {
	call := pr.In.Context().Value(fwdKey{}).(*fwdCall)
	pr.SetURL(call.target)
	pr.Out.Host = pr.In.Host
	pr.SetXForwarded()
	c.auth.Sign(pr.Out)
}

// proxyError records the proxy's failure for Forward, which answers it.
func (c *NodeClient) proxyError(_ http.ResponseWriter, r *http.Request, err error) {
	if call, ok := r.Context().Value(fwdKey{}).(*fwdCall); ok {
		call.err = err
	}
}

// Do makes this node's own signed call method path (with its query) to
// the node at addr, with body (nil: none; else sent as application/json).
// It carries no client credentials: the receiving node serves it only on
// a route that takes node calls (NodeAuth.RequireNode). Any answer is
// returned, whatever its status (the caller closes its body); an error is
// returned only when no answer came.
func (c *NodeClient) Do(ctx context.Context, addr, method, path string, body io.Reader) (*http.Response, error) {
	u, err := c.target(addr)
	if err != nil {
		return nil, fmt.Errorf("call node %s: %w", addr, err)
	}
	ref, err := url.Parse(path)
	if err != nil || !strings.HasPrefix(path, "/") || ref.Host != "" || ref.Scheme != "" {
		return nil, fmt.Errorf("call node %s: path %q: want /path?query: %w", addr, path, errs.ErrInvalid)
	}
	u.Path, u.RawPath, u.RawQuery = ref.Path, ref.RawPath, ref.RawQuery
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("call node %s: %w", addr, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.auth.Sign(req)
	res, err := c.tr.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("call node %s: %s %s: %w", addr, method, ref.Path, err)
	}
	return res, nil
}

// trackWriter notes whether anything of the answer was written (the
// status, a byte, a flush or a hijack), passing flushes and hijacks on.
type trackWriter struct {
	http.ResponseWriter
	wrote bool
}

// WriteHeader notes a final status (an informational one is not).
func (w *trackWriter) WriteHeader(code int) {
	if code >= 200 {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write notes the write.
func (w *trackWriter) Write(p []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(p)
}

// Flush notes and passes on a flush.
func (w *trackWriter) Flush() {
	w.wrote = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack notes and passes on a hijack (an upgrade).
func (w *trackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.wrote = true
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap returns the underlying writer for http.ResponseController.
func (w *trackWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// problemDoc is an RFC 9457 problem document.
type problemDoc struct {
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// WriteProblem answers with an RFC 9457 problem document (application/problem+json).
func WriteProblem(w http.ResponseWriter, status int, detail string) {
	body, _ := json.Marshal(problemDoc{Title: http.StatusText(status), Status: status, Detail: detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
