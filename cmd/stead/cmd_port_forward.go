package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newPortForwardCmd is `stead port-forward`.
func newPortForwardCmd(g *globals) *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "port-forward SANDBOX PORT [--listen ADDR]",
		Short: "Forward a local TCP port to a port of a sandbox",
		Long: `Listen on a local address and tunnel every connection to PORT of the sandbox,
through the daemon (a websocket on its API). The port need not be exposed:
any port a process in the sandbox listens on (on 0.0.0.0) works, for any TCP
protocol (a database, ssh, a debugger). The API key must be one that may use
the sandbox. A stopped or paused sandbox with auto_resume is woken by the
first connection.

By default the local address is 127.0.0.1:PORT; --listen picks another
(HOST:PORT, :PORT, or just PORT for 127.0.0.1:PORT; port 0 picks a free one).
Ctrl-C stops listening and closes the open connections.`,
		Example: `  stead port-forward agent-1 5432
  psql -h 127.0.0.1 -p 5432 -U postgres      # in another terminal
  stead port-forward agent-1 8080 --listen 127.0.0.1:18080`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			id := a[0]
			port, err := strconv.Atoi(a[1])
			if err != nil || port < 1 || port > 65535 {
				return usageError{fmt.Errorf("PORT %q is not a TCP port (1-65535)", a[1])}
			}
			addr := listen
			switch {
			case addr == "":
				addr = net.JoinHostPort("127.0.0.1", a[1])
			case isDigits(addr):
				addr = net.JoinHostPort("127.0.0.1", addr)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			sb, err := c.GetSandbox(ctx, id)
			if err != nil {
				return fmt.Errorf("port-forward to %s: %w", id, err)
			}
			name := sb.Name
			if name == "" {
				name = id
			}
			var lc net.ListenConfig
			ln, err := lc.Listen(ctx, "tcp", addr)
			if err != nil {
				return usageError{fmt.Errorf("--listen %s: %w", addr, err)}
			}
			fmt.Fprintf(g.stdout, "Forwarding %s -> sandbox %s port %d (Ctrl-C stops)\n", ln.Addr(), name, port)
			return forwardPort(ctx, g, c, ln, id, port)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "local address to listen on (default 127.0.0.1:PORT)")
	return cmd
}

// forwardPort accepts connections on ln and tunnels each to port of the
// sandbox until ctx ends; then it closes ln and every open connection.
func forwardPort(ctx context.Context, g *globals, c *client.Client, ln net.Listener, id string, port int) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		local, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			_ = ln.Close()
			return fmt.Errorf("port-forward: accept on %s: %w", ln.Addr(), err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tunnel(ctx, g, c, local, id, port)
		}()
	}
}

// tunnel carries one local connection to port of the sandbox.
func tunnel(ctx context.Context, g *globals, c *client.Client, local net.Conn, id string, port int) {
	remote, err := c.PortForward(ctx, id, port)
	if err != nil {
		if ctx.Err() == nil {
			var apiErr *client.APIError
			if errors.As(err, &apiErr) {
				err = apiErr
			}
			fmt.Fprintf(g.stderr, "stead: port-forward: connection from %s: %v\n", local.RemoteAddr(), err)
		}
		_ = local.Close()
		return
	}
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = local.Close()
			_ = remote.Close()
		})
	}
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(remote, local)
		closeBoth()
	}()
	_, _ = io.Copy(local, remote)
	closeBoth()
	<-done
}

// isDigits reports whether s is a non-empty string of ASCII digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
