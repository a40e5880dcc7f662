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

	"github.com/stead-dev/stead/internal/mcp"
)

// newMCPCmd is `stead mcp`: the MCP server over stdio or streamable HTTP.
func newMCPCmd(g *globals) *cobra.Command {
	var (
		httpAddr string
		token    string
		opts     mcp.Options
		verbose  bool
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the stead API to an AI agent as an MCP server",
		Long: `Serve the stead API as a Model Context Protocol (MCP) server, so that an MCP
client (Claude Code, an agent harness, an IDE) can drive sandboxes with tools:
exec, read_file, write_file, list_files, checkpoint_put, checkpoint_get,
session_append, orient, snapshot, fork, rollback, network_show, network_set,
port_list, port_expose and port_unexpose.

The server is a client of the daemon: it reaches it at --endpoint with
--api-key, like every other verb, and every tool call acts with that key.
API errors come back to the model as tool errors with the daemon's message.

By default it speaks MCP over stdin and stdout (the client starts it as a
subprocess); diagnostics go to stderr. With --http it serves the MCP
streamable HTTP transport at http://ADDR/mcp instead (any path works). The
HTTP server acts with this process's API key for whoever can reach it: it
refuses a non-loopback address unless --token (or $STEAD_MCP_TOKEN) is set,
and then requires "Authorization: Bearer TOKEN" on every request.

With --sandbox, tools act on that sandbox unless a call names another; with
--run, session_append appends to that run unless a call names another.`,
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
			srv := mcp.NewServer(c, opts)
			if token == "" {
				token = os.Getenv("STEAD_MCP_TOKEN")
			}
			if httpAddr != "" {
				return serveMCPHTTP(cmd.Context(), g, srv, httpAddr, token, logger)
			}
			return serveMCPStdio(cmd.Context(), g, srv)
		},
	}
	f := cmd.Flags()
	f.StringVar(&httpAddr, "http", "", "serve streamable HTTP on this address (e.g. 127.0.0.1:7879) instead of stdio")
	f.StringVar(&token, "token", "", "with --http: bearer token every request must carry (default $STEAD_MCP_TOKEN)")
	f.StringVar(&opts.Sandbox, "sandbox", "", "default sandbox (id or name) of tool calls that name none")
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

// serveMCPHTTP serves srv over streamable HTTP on addr until ctx ends.
func serveMCPHTTP(ctx context.Context, g *globals, srv *sdk.Server, addr, token string, logger *slog.Logger) error {
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
		Handler:           mcp.HTTPHandler(srv, mcp.HTTPOptions{Token: token, Logger: logger}),
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
