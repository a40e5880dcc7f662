package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newPortCmd is `stead port` and its subcommands.
func newPortCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "port",
		Aliases: []string{"ports"},
		Short:   "Expose a sandbox's ports through the daemon's port proxy",
		Long: `An exposed port of a sandbox is reachable from outside through the daemon's
port proxy: by host (https://PORT-SANDBOX.DOMAIN, when the proxy has a domain)
and by path (/v1/sandboxes/SANDBOX/ports/PORT/ on the daemon's address).

A private port (the default) needs its access token: send it as the header
X-Stead-Port-Token, or open a URL once with ?stead_token=TOKEN in a browser
(a cookie keeps it). The token is shown once, when the port is exposed;
exposing the port again rotates it. A public port needs nothing.

Nothing needs to listen on the port when it is exposed. The agent inside the
sandbox may list its ports but never expose one. To reach a port from this
machine without exposing it, use stead port-forward.`,
		Example: `  stead port expose agent-1 8080
  stead port expose agent-1 3000 --public
  stead port ls agent-1
  stead port unexpose agent-1 8080`,
	}
	group(cmd)
	cmd.AddCommand(newPortLsCmd(g), newPortExposeCmd(g), newPortUnexposeCmd(g))
	return cmd
}

func newPortLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls SANDBOX",
		Aliases: []string{"list"},
		Short:   "List a sandbox's exposed ports with their URLs",
		Long: `List a sandbox's exposed ports: the port, its access (public, or token for a
private port), when it was exposed and its URLs. Tokens are never listed;
expose the port again for a new one.

Exits 3 if there is no such sandbox.`,
		Example: `  stead port ls agent-1
  stead port ls agent-1 --json`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ports, err := c.ListPorts(cmd.Context(), a[0])
			if err != nil {
				return fmt.Errorf("list ports of sandbox %s: %w", a[0], err)
			}
			if g.json {
				if ports == nil {
					ports = []client.Port{}
				}
				return printJSON(g.stdout, ports)
			}
			if len(ports) == 0 {
				_, err := fmt.Fprintf(g.stdout, "No exposed ports; expose one with: stead port expose %s PORT\n", a[0])
				return err
			}
			return printPorts(g.stdout, "", ports, c.Endpoint())
		},
	}
}

func newPortExposeCmd(g *globals) *cobra.Command {
	var req client.ExposePortRequest
	cmd := &cobra.Command{
		Use:   "expose SANDBOX PORT [--public]",
		Short: "Expose a port of a sandbox through the port proxy",
		Long: `Expose a port of a sandbox through the daemon's port proxy and print its URLs.

A private port (the default) also prints its access token, shown this once:
exposing the port again prints a new one and the old one stops working.
--public makes the port reachable by anyone who can reach the proxy, without
a token; exposing it again without --public makes it private again.

Exits 3 if there is no such sandbox; exits 2 for a port outside 1-65535.`,
		Example: `  stead port expose agent-1 8080
  stead port expose agent-1 3000 --public
  stead port expose agent-1 8080 --json | jq -r .token`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			port, err := parsePortArg(a[1])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ep, err := c.ExposePort(cmd.Context(), a[0], port, req)
			if err != nil {
				return fmt.Errorf("expose port %d of sandbox %s: %w", port, a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, ep)
			}
			access := "private: it needs its token"
			if ep.Public {
				access = "public: anyone who reaches the proxy can use it"
			}
			fmt.Fprintf(g.stdout, "Port %d of %s exposed (%s).\n", ep.Port.Port, a[0], access)
			for _, u := range portURLs(ep.Port, c.Endpoint()) {
				fmt.Fprintln(g.stdout, "  "+u)
			}
			if ep.Token != "" {
				fmt.Fprintf(g.stdout, "Token: %s\n", ep.Token)
				fmt.Fprintln(g.stdout, "It is shown only this once (expose the port again for a new one). Send it as the")
				fmt.Fprintln(g.stdout, "header X-Stead-Port-Token, or open a URL once with ?stead_token=TOKEN in a browser.")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&req.Public, "public", false, "reachable without a token")
	return cmd
}

func newPortUnexposeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "unexpose SANDBOX PORT",
		Aliases: []string{"rm", "close"},
		Short:   "Stop exposing a port of a sandbox",
		Long: `Stop exposing a port: its URLs stop answering, its token stops working and
proxied connections are closed. The program listening on the port inside the
sandbox is not touched.

Exits 3 if there is no such sandbox or the port is not exposed.`,
		Example: `  stead port unexpose agent-1 8080`,
		Args:    args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			port, err := parsePortArg(a[1])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.UnexposePort(cmd.Context(), a[0], port); err != nil {
				return fmt.Errorf("unexpose port %d of sandbox %s: %w", port, a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, map[string]any{"sandbox": a[0], "port": port, "exposed": false})
			}
			_, err = fmt.Fprintf(g.stdout, "Port %d of %s: no longer exposed\n", port, a[0])
			return err
		},
	}
}

// parsePortArg reads a PORT argument (1-65535).
func parsePortArg(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, usageError{fmt.Errorf("port %q: give a port number from 1 to 65535", s)}
	}
	return n, nil
}
