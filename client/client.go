// Package client is the Go SDK of the stead API. The stead CLI is built on
// it; the request and response types in types.go are shared with the
// server, which generates its OpenAPI document from them.
//
//	c, err := client.New("unix:///run/stead/stead.sock", apiKey)
//	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "agent-1"})
//	res, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Command: []string{"ls"}}, os.Stdout, os.Stderr)
//
// Errors returned by the server are *APIError values; IsNotFound,
// IsConflict and friends test for them through any wrapping.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// maxErrorBody caps how much of an error response is read.
const maxErrorBody = 64 << 10

// Client talks to one stead daemon. It is safe for concurrent use.
type Client struct {
	endpoint string // as given, for messages
	base     *url.URL
	apiKey   string
	tenant   string // X-Stead-Tenant, when set (WithTenant)
	http     *http.Client
}

// New returns a client for endpoint, either "http://host:port" (or https)
// or "unix:///path/to.sock", authenticating with apiKey (which may be
// empty for the unauthenticated Health call).
func New(endpoint, apiKey string) (*Client, error) {
	c := &Client{endpoint: endpoint, apiKey: apiKey}
	switch {
	case strings.HasPrefix(endpoint, "unix://"):
		path := strings.TrimPrefix(endpoint, "unix://")
		if path == "" {
			return nil, fmt.Errorf("parse endpoint %q: unix endpoints are unix:///path/to.sock", endpoint)
		}
		dialer := &net.Dialer{}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", path)
		}
		c.http = &http.Client{Transport: tr}
		c.base = &url.URL{Scheme: "http", Host: "stead"}
	case strings.HasPrefix(endpoint, "http://"), strings.HasPrefix(endpoint, "https://"):
		u, err := url.Parse(endpoint)
		if err != nil {
			return nil, fmt.Errorf("parse endpoint %q: %w", endpoint, err)
		}
		if u.Host == "" {
			return nil, fmt.Errorf("parse endpoint %q: no host", endpoint)
		}
		u.Path = strings.TrimSuffix(u.Path, "/")
		c.base = u
		c.http = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	default:
		return nil, fmt.Errorf("parse endpoint %q: want http://host:port or unix:///path/to.sock", endpoint)
	}
	return c, nil
}

// Endpoint returns the endpoint the client was created with.
func (c *Client) Endpoint() string { return c.endpoint }

// APIError is an error response of the API: an RFC 9457 problem document.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Title is the short summary of the status ("Not Found").
	Title string
	// Detail says what went wrong and, where possible, what to do.
	Detail string
	// Errors lists individual validation failures, as "location: message".
	Errors []string
}

// Error returns the detail (or title) and the status.
func (e *APIError) Error() string {
	msg := e.Detail
	if msg == "" {
		msg = e.Title
	}
	if len(e.Errors) > 0 {
		msg += " (" + strings.Join(e.Errors, "; ") + ")"
	}
	return fmt.Sprintf("%s (HTTP %d)", msg, e.Status)
}

// StatusCode returns the HTTP status of an *APIError in err's chain, or 0.
func StatusCode(err error) int {
	var e *APIError
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// IsNotFound reports whether err is a 404: the thing does not exist or
// belongs to another tenant.
func IsNotFound(err error) bool { return StatusCode(err) == http.StatusNotFound }

// IsConflict reports whether err is a 409: the current state forbids the
// request (for example starting a running sandbox, or a taken name).
func IsConflict(err error) bool { return StatusCode(err) == http.StatusConflict }

// IsUnauthenticated reports whether err is a 401: no or an unknown API key.
func IsUnauthenticated(err error) bool { return StatusCode(err) == http.StatusUnauthorized }

// IsForbidden reports whether err is a 403: the key may not do this.
func IsForbidden(err error) bool { return StatusCode(err) == http.StatusForbidden }

// IsInvalid reports whether err is a 400, 413 or 422: the request was malformed.
func IsInvalid(err error) bool {
	switch StatusCode(err) {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// IsQuota reports whether err is a 507: a limit would be exceeded.
func IsQuota(err error) bool { return StatusCode(err) == http.StatusInsufficientStorage }

// UnreachableError means the daemon could not be reached at all.
type UnreachableError struct {
	Endpoint string
	Err      error
}

// Error says where the daemon was expected and how to point elsewhere.
func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the stead daemon at %s (is `stead serve` running? set --endpoint or STEAD_ENDPOINT): %v",
		e.Endpoint, e.Err)
}

// Unwrap returns the transport error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// request is one API call.
type request struct {
	method string
	path   string // already escaped
	query  url.Values
	body   io.Reader
	ctype  string
	accept string
	header http.Header // extra request headers
}

// url builds the absolute URL of path with query.
func (c *Client) url(path string, query url.Values) string {
	u := *c.base
	u.RawPath = ""
	u.Path = ""
	s := u.String() + c.base.EscapedPath() + path
	if len(query) > 0 {
		s += "?" + query.Encode()
	}
	return s
}

// send performs r and returns the response if its status is 2xx; any
// other status is decoded into an *APIError.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, r.method, c.url(r.path, r.query), r.body)
	if err != nil {
		return nil, fmt.Errorf("build request %s %s: %w", r.method, r.path, err)
	}
	if c.tenant != "" {
		req.Header.Set(TenantHeader, c.tenant)
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if r.ctype != "" {
		req.Header.Set("Content-Type", r.ctype)
	}
	for k, vs := range r.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	accept := r.accept
	if accept == "" {
		accept = "application/json"
	}
	req.Header.Set("Accept", accept+", application/problem+json")
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", r.method, r.path, ctx.Err())
		}
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Op == "dial" {
			return nil, &UnreachableError{Endpoint: c.endpoint, Err: err}
		}
		return nil, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer func() { _ = resp.Body.Close() }()
	return nil, decodeError(resp)
}

// decodeError turns a non-2xx response into an *APIError.
func decodeError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &APIError{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode)}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/problem+json" || mt == "application/json" {
		var p struct {
			Title  string `json:"title" doc:"Short summary of the problem type"`
			Detail string `json:"detail" doc:"Explanation of this occurrence"`
			Errors []struct {
				Message  string `json:"message" doc:"Message"`
				Location string `json:"location" doc:"request: location"`
			} `json:"errors"`
		}
		if json.Unmarshal(body, &p) == nil {
			if p.Title != "" {
				e.Title = p.Title
			}
			e.Detail = p.Detail
			for _, d := range p.Errors {
				if d.Location != "" {
					e.Errors = append(e.Errors, d.Location+": "+d.Message)
				} else {
					e.Errors = append(e.Errors, d.Message)
				}
			}
			return e
		}
	}
	e.Detail = strings.TrimSpace(string(body))
	return e
}

// do sends a JSON request (in may be nil) and decodes a JSON response into
// out (which may be nil).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	r := request{method: method, path: path, query: query}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		r.body = bytes.NewReader(b)
		r.ctype = "application/json"
	}
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s: %w", method, path, err)
	}
	return nil
}

// sandboxPath returns the escaped path of a sandbox, plus suffix.
func sandboxPath(id, suffix string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + suffix
}

// Health checks that the daemon is up (no API key needed).
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, &h)
	return h, err
}

// OpenAPI returns the daemon's OpenAPI 3.1 document.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/openapi.json"})
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read openapi document: %w", err)
	}
	return b, nil
}

// Info describes the daemon.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var info Info
	err := c.do(ctx, http.MethodGet, "/v1/info", nil, nil, &info)
	return info, err
}
