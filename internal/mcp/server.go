// Package mcp is stead's Model Context Protocol server: it exposes a stead
// daemon to an MCP client (a model harness) as tools — exec, files,
// checkpoints, the session log, orient, snapshots, fork and rollback, and
// a sandbox's network and exposed ports.
//
// The server is an API client: every tool call is one or a few calls of
// the Go SDK (package client) to the daemon, with the caller's API key. An
// error of the API becomes a tool error (a result with IsError set and the
// daemon's message as text), never a protocol error, so the model sees
// what went wrong and can act on it.
//
// It is transport-agnostic; `stead mcp` serves it over stdio, or over
// streamable HTTP with HTTPHandler.
//
//	c, _ := client.New("unix:///run/stead/stead.sock", key)
//	srv := mcp.NewServer(c, mcp.Options{Sandbox: "agent-1"})
//	err := srv.Run(ctx, &sdk.StdioTransport{})
package mcp

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stead-dev/stead/client"
)

// Options configure NewServer.
type Options struct {
	// Sandbox is the default sandbox (id or name) of tools called without
	// one. Empty: every call must name its sandbox.
	Sandbox string
	// Run is the default session-log run of session_append.
	Run string
	// Version is reported to clients as the server's version.
	Version string
	// Logger receives the SDK's diagnostics; nil discards them.
	Logger *slog.Logger
	// Confine limits every tool to Sandbox: a call naming another sandbox
	// is refused before it reaches the daemon, sandbox_list shows only
	// Sandbox, and create and fork (which make sandboxes outside it) are
	// refused. `stead mcp --sandbox` sets it on top of a key scoped to the
	// sandbox, so that the model gets a clear refusal instead of a 403 or
	// 404, and is still confined when no scoped key could be minted.
	Confine bool
	// SandboxAliases are the other names of Sandbox (its id when Sandbox
	// is its name, and the reverse) that Confine accepts.
	SandboxAliases []string
	// ProgressInterval is how often a long exec or exec_wait sends a
	// progress notification to a client that asked for them (a
	// progressToken in the request's _meta). Default 10 s.
	ProgressInterval time.Duration
	// JobPollInterval is how often exec_wait looks at a background
	// command. Default 1 s.
	JobPollInterval time.Duration
}

// toolNames lists every tool NewServer registers, in registration order.
var toolNames = []string{
	"exec", "read_file", "write_file", "list_files", "disk_usage",
	"checkpoint_put", "checkpoint_get", "session_append", "orient",
	"snapshot", "fork", "rollback",
	"exec_poll", "exec_wait",
	"sandbox_list", "create", "start", "stop", "delete",
	"snapshot_list", "checkpoint_list", "checkpoint_history",
	"remove_file", "move_file", "search_files",
	"network_show", "network_set", "port_list", "port_expose", "port_unexpose",
}

// ToolNames returns the names of the tools NewServer registers.
func ToolNames() []string { return append([]string(nil), toolNames...) }

// tools holds what the tool handlers share.
type tools struct {
	c    *client.Client
	opts Options
}

// NewServer returns an MCP server whose tools act on the daemon c talks
// to. Serve it with Run (stdio) or HTTPHandler (streamable HTTP).
func NewServer(c *client.Client, opts Options) *sdk.Server {
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = 10 * time.Second
	}
	if opts.JobPollInterval <= 0 {
		opts.JobPollInterval = time.Second
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "stead", Title: "stead sandboxes", Version: opts.Version},
		&sdk.ServerOptions{Instructions: instructions(opts), Logger: logger})
	t := &tools{c: c, opts: opts}
	t.register(s)
	return s
}

// instructions is the server's advice to the model, sent at initialize.
func instructions(opts Options) string {
	var b strings.Builder
	b.WriteString("stead runs long-lived sandboxes for AI agents. These tools run commands and read and write files " +
		"inside a sandbox, keep checkpoint documents and a session log outside it (they survive crashes and " +
		"restarts), and snapshot, fork or roll back its files. When resuming work, call orient first. ")
	switch {
	case opts.Sandbox != "" && opts.Confine:
		fmt.Fprintf(&b, "Tools act on sandbox %q and on no other. ", opts.Sandbox)
	case opts.Sandbox != "":
		fmt.Fprintf(&b, "Tools act on sandbox %q unless given another. ", opts.Sandbox)
	default:
		b.WriteString("Every tool needs the sandbox (id or name) to act on. ")
	}
	b.WriteString("A stopped or paused sandbox runs nothing: call start first. Commands that may run longer " +
		"than a minute: pass background: true to exec and follow them with exec_wait or exec_poll. ")
	if opts.Run != "" {
		fmt.Fprintf(&b, "session_append appends to run %q unless given another.", opts.Run)
	}
	return strings.TrimSpace(b.String())
}

// sandbox returns the sandbox a call acts on: its own, else the default.
func (t *tools) sandbox(given string) (string, error) {
	if given != "" {
		if t.opts.Confine && !t.isOwn(given) {
			return "", t.confinedError("sandbox " + given)
		}
		return given, nil
	}
	if t.opts.Sandbox != "" {
		return t.opts.Sandbox, nil
	}
	return "", errors.New("no sandbox: pass \"sandbox\" (an id or name), or start `stead mcp` with --sandbox")
}

// isOwn reports whether name (an id or name) is the session's sandbox.
func (t *tools) isOwn(name string) bool {
	return name == t.opts.Sandbox || slices.Contains(t.opts.SandboxAliases, name)
}

// confinedError refuses what of a session confined to its sandbox.
func (t *tools) confinedError(what string) error {
	return fmt.Errorf("this MCP session is confined to sandbox %q: %s is out of its reach", t.opts.Sandbox, what)
}

// inputSchema infers the input schema of In and notes the default sandbox
// (and run) in the descriptions of those properties.
func (t *tools) inputSchema(s *jsonschema.Schema) *jsonschema.Schema {
	if p := s.Properties["sandbox"]; p != nil {
		if t.opts.Sandbox != "" && t.opts.Confine {
			p.Description += fmt.Sprintf(" Default and only choice: %q.", t.opts.Sandbox)
		} else if t.opts.Sandbox != "" {
			p.Description += fmt.Sprintf(" Default: %q.", t.opts.Sandbox)
		} else {
			p.Description += " Required: this server has no default sandbox."
		}
	}
	if p := s.Properties["run"]; p != nil && t.opts.Run != "" {
		p.Description += fmt.Sprintf(" Default: %q.", t.opts.Run)
	}
	return s
}

// schemaFor infers the JSON Schema of T; it panics on a type the inference
// does not support (a programming error caught by every test).
func schemaFor[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: schema: %v", err))
	}
	return s
}

// apiError turns an error of the API into the message of a tool error:
// what was being done, then the daemon's message and status.
func apiError(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// HTTPOptions configure HTTPHandler.
type HTTPOptions struct {
	// Token, when set, must be presented as "Authorization: Bearer TOKEN"
	// on every request; others get a 401.
	Token string
	// Logger receives the transport's diagnostics; nil discards them.
	Logger *slog.Logger
	// AllowedOrigins are the browser origins (scheme://host[:port]) whose
	// requests are served besides those of localhost pages.
	AllowedOrigins []string
}

// HTTPHandler serves srv over the MCP streamable HTTP transport, at any
// path. As the MCP spec asks against DNS rebinding, a request that carries
// an Origin header (a browser's) is refused with 403 unless that origin is
// a loopback one (http://localhost:3000, http://127.0.0.1) or one of
// AllowedOrigins; requests to a loopback address with a non-loopback Host
// header are refused too. Requests without an Origin (every non-browser
// client) pass.
func HTTPHandler(srv *sdk.Server, opts HTTPOptions) http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv },
		&sdk.StreamableHTTPOptions{Logger: opts.Logger})
	want := []byte("Bearer " + opts.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !OriginAllowed(o, opts.AllowedOrigins) {
			http.Error(w, fmt.Sprintf("origin %q may not use this MCP server (allow it with stead mcp --allow-origin)", o), http.StatusForbidden)
			return
		}
		if opts.Token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stead-mcp"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// OriginAllowed reports whether a browser Origin header value may use the
// server: a loopback origin (localhost, 127.0.0.0/8, ::1, any port), or
// one of allowed (compared without case and without a trailing slash).
// "null" (a sandboxed page, a file) and anything unparsable are refused.
func OriginAllowed(origin string, allowed []string) bool {
	norm := func(s string) string { return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), "/") }
	for _, a := range allowed {
		if a != "" && norm(a) == norm(origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
