package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/mcp"
)

// newMCPCmd is `stead mcp`: the MCP server over stdio or streamable HTTP.
func newMCPCmd(g *globals) *cobra.Command {
	var (
		httpAddr string
		token    string
		opts     mcp.Options
		verbose  bool
		origins  []string
		keyTTL   time.Duration
		open     bool
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the stead API to an AI agent as an MCP server",
		Long: `Serve the stead API as a Model Context Protocol (MCP) server, so that an MCP
client (Claude Code, an agent harness, an IDE) can drive sandboxes with tools:
exec (with exec_wait and exec_poll for background commands), read_file,
write_file, list_files, search_files, move_file, remove_file, disk_usage,
sandbox_list, create, start, stop, delete, checkpoint_put, checkpoint_get,
checkpoint_list, checkpoint_history, session_append, orient, snapshot,
snapshot_list, fork, rollback, network_show, network_set, port_list,
port_expose and port_unexpose.

The server is a client of the daemon: it reaches it at --endpoint with
--api-key, like every other verb, and every tool call acts with that key.
API errors come back to the model as tool errors with the daemon's message.

By default it speaks MCP over stdin and stdout (the client starts it as a
subprocess); diagnostics go to stderr. With --http it serves the MCP
streamable HTTP transport at http://ADDR/mcp instead (any path works). The
HTTP server acts with this process's API key for whoever can reach it: it
refuses a non-loopback address unless --token (or $STEAD_MCP_TOKEN) is set,
and then requires "Authorization: Bearer TOKEN" on every request.

With --sandbox X, the session is confined to sandbox X: stead mcp mints an
API key scoped to X alone (role tenant-user, expiring after --key-ttl) for
the session, revokes it when the session ends, and refuses calls that name
another sandbox, create and fork. Minting needs an unscoped tenant-admin
or admin key; with any other key stead mcp says so on stderr and confines
the session itself (the key it holds could still reach the tenant's other
sandboxes). --unconfined keeps X as the default only, with the caller's key.
A key scoped to one sandbox cannot fork, and rolls back only to snapshots
of that sandbox.
With --run, session_append appends to that run unless a call names another.

Long commands: exec sends progress notifications (every 10 s, with the
latest output) when the client's request carries a progressToken, and with
background: true returns a handle to follow with exec_wait or exec_poll.

Over HTTP, a request carrying an Origin header (a browser's) is refused
unless the origin is a localhost one or given with --allow-origin.`,
		Example: `  # Claude Code, one sandbox:
  claude mcp add stead -- stead mcp --sandbox agent-1

  # Streamable HTTP on the loopback interface:
  stead mcp --http 127.0.0.1:7879`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			// The SDK logs ordinary ends (a signal) as errors: quiet
			// unless asked.
			logger := slog.New(slog.DiscardHandler)
			if verbose {
				logger = slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
			}
			opts.Version, opts.Logger = version, logger
			if opts.Sandbox != "" && !open {
				scoped, release, err := confineMCP(cmd.Context(), g, c, &opts, keyTTL)
				if err != nil {
					return err
				}
				defer release()
				c = scoped
			}
			srv := mcp.NewServer(c, opts)
			if token == "" {
				token = os.Getenv("STEAD_MCP_TOKEN")
			}
			if httpAddr != "" {
				return serveMCPHTTP(cmd.Context(), g, srv, httpAddr, mcp.HTTPOptions{Token: token, Logger: logger, AllowedOrigins: origins})
			}
			return serveMCPStdio(cmd.Context(), g, srv)
		},
	}
	f := cmd.Flags()
	f.StringVar(&httpAddr, "http", "", "serve streamable HTTP on this address (e.g. 127.0.0.1:7879) instead of stdio")
	f.StringVar(&token, "token", "", "with --http: bearer token every request must carry (default $STEAD_MCP_TOKEN)")
	f.StringVar(&opts.Sandbox, "sandbox", "", "confine the session to this sandbox (id or name), with a key scoped to it")
	f.BoolVar(&open, "unconfined", false, "with --sandbox: make it only the default, and let tools reach the tenant's other sandboxes")
	f.DurationVar(&keyTTL, "key-ttl", 24*time.Hour, "with --sandbox: lifetime of the scoped key minted for the session (it is revoked when the session ends)")
	f.StringArrayVar(&origins, "allow-origin", nil, "with --http: a browser origin (scheme://host[:port]) allowed besides localhost ones (repeatable)")
	f.StringVar(&opts.Run, "run", "", "default session-log run of session_append")
	f.BoolVar(&verbose, "verbose", false, "log MCP diagnostics to stderr")
	return cmd
}

// serveMCPStdio serves srv on the CLI's stdin and stdout until the client
// closes stdin or ctx ends (a signal), both a clean exit.
func serveMCPStdio(ctx context.Context, g *globals, srv *sdk.Server) error {
	t := &sdk.IOTransport{Reader: io.NopCloser(g.stdin), Writer: nopWriteCloser{g.stdout}}
	err := srv.Run(ctx, t)
	if err == nil || ctx.Err() != nil || errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("mcp over stdio: %w", err)
}

// nopWriteCloser is a Writer with a no-op Close: the transport must not
// close the CLI's stdout.
type nopWriteCloser struct{ io.Writer }

// Close does nothing.
func (nopWriteCloser) Close() error { return nil }

// confineMCP confines an MCP session to opts.Sandbox: it resolves the
// sandbox, mints a key scoped to it with c's credentials and returns a
// client of that key and a release that revokes it. When c's key may not
// mint keys (403), it warns on stderr and returns c: the session is then
// confined by the server alone (opts.Confine). Either way opts.Confine is
// set and opts.SandboxAliases name the sandbox's id and name.
func confineMCP(ctx context.Context, g *globals, c *client.Client, opts *mcp.Options, ttl time.Duration) (*client.Client, func(), error) {
	if ttl < 0 || (ttl > 0 && ttl < time.Minute) {
		return nil, nil, usageError{fmt.Errorf("--key-ttl %s: want at least 1m, or 0 for a key that only its revocation ends", ttl)}
	}
	sb, err := c.GetSandbox(ctx, opts.Sandbox)
	if err != nil {
		return nil, nil, fmt.Errorf("mcp: sandbox %s: %w", opts.Sandbox, err)
	}
	opts.Confine, opts.SandboxAliases = true, []string{sb.ID, sb.Name}
	req := client.CreateAPIKeyRequest{
		Name:      fmt.Sprintf("stead mcp --sandbox %s (pid %d)", sb.Name, os.Getpid()),
		Role:      client.RoleTenantUser,
		Sandboxes: []string{sb.ID},
	}
	if ttl > 0 {
		req.ExpiresIn = ttl.String()
	}
	key, err := c.CreateKey(ctx, req)
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusForbidden {
		fmt.Fprintf(g.stderr, "stead mcp: this API key may not mint a key scoped to sandbox %s (%s);\n"+
			"  the session is confined to it by stead mcp only: use an unscoped tenant-admin key to have the daemon enforce it\n",
			sb.Name, ae.Detail)
		return c, func() {}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("mcp: mint a key scoped to sandbox %s: %w", sb.Name, err)
	}
	scoped, err := client.New(g.endpoint, key.Secret)
	if err != nil {
		return nil, nil, err
	}
	release := func() {
		// The session's context is over: revoke with a fresh one.
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.RevokeKey(rctx, key.ID); err != nil {
			fmt.Fprintf(g.stderr, "stead mcp: revoke the session key %s: %v (it expires by itself)\n", key.ID, err)
		}
	}
	return scoped, release, nil
}

// serveMCPHTTP serves srv over streamable HTTP on addr until ctx ends.
func serveMCPHTTP(ctx context.Context, g *globals, srv *sdk.Server, addr string, hopts mcp.HTTPOptions) error {
	token, logger := hopts.Token, hopts.Logger
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageError{fmt.Errorf("--http %q: want HOST:PORT, e.g. 127.0.0.1:7879: %v", addr, err)}
	}
	if !isLoopback(host) && token == "" {
		return usageError{fmt.Errorf("--http %q is not a loopback address: set --token (or $STEAD_MCP_TOKEN) so that only your clients act with this API key", addr)}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("mcp over http: %w", err)
	}
	hs := &http.Server{
		Handler:           mcp.HTTPHandler(srv, hopts),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	fmt.Fprintf(g.stderr, "stead mcp: serving MCP streamable HTTP at http://%s/mcp (daemon %s)\n", ln.Addr(), g.endpoint)
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("mcp over http: %w", err)
	case <-ctx.Done():
	}
	// Streams held open by clients would make Shutdown wait forever.
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	return nil
}

// isLoopback reports whether host (of --http) is a loopback name or
// address. An empty host (all interfaces) is not.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
