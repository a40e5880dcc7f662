package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// PortRef is the {id} and {port} path parameters of the
// /v1/sandboxes/{id}/ports/{port} routes (exported only because huma
// ignores unexported embedded fields).
//
// The port is taken as text and checked by parsePort, so that a port out
// of range is a 400 problem that says what a port is (huma's own
// validation would answer 422).
type PortRef struct {
	SandboxRef
	Port string `path:"port" maxLength:"5" doc:"Port inside the sandbox, 1-65535"`
}

// parsePort returns the port of a {port} path parameter, or errs.ErrInvalid.
func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q: give a port number from 1 to 65535: %w", s, errs.ErrInvalid)
	}
	return n, nil
}

// networkIntro opens the description of every network route.
const networkIntro = "A sandbox has an IPv4 address in the daemon's subnet, stable across stop/start and restarts; " +
	"the gateway address is its default route and DNS resolver. Traffic leaving it follows its egress policy: " +
	"internet on or off, then deny, then allow (a non-empty allow list makes the policy default-deny); the host, " +
	"other sandboxes, link-local, loopback and metadata ranges are always refused. "

// portIntro opens the description of every port route.
const portIntro = "An exposed port is reachable from outside through the daemon's port proxy: by host " +
	"(<port>-<sandbox>.<domain>, when the proxy has a domain) and by path (/v1/sandboxes/{id}/ports/{port}/). " +
	"A private port needs its access token (header X-Stead-Port-Token, or ?stead_token= once in a browser); " +
	"a public one needs nothing. "

// registerNetwork adds the network and port routes. GET network and GET
// ports are open to the sandbox's own token (an agent may see its
// network); changing the policy or the exposed ports is not (an agent must
// never loosen its own egress policy or expose its own ports).
func (s *server) registerNetwork(b NetworkBackend) {
	const tag = "network"

	get := s.agentOp(agentOwnSandbox, http.MethodGet, "/v1/sandboxes/{id}/network", "get-network",
		"Describe a sandbox's network: address, egress policy, counters and exposed ports", tag, 0)
	get.Description = networkIntro + "Answers the address, the gateway, the policy, how many connections and lookups " +
		"the policy refused, bytes received and sent since the sandbox started, the bandwidth and connection limits, " +
		"and the exposed ports. enabled is false when the daemon runs without networking (loopback only). " +
		"The sandbox's own token may call it."
	huma.Register(s.api, get, func(ctx context.Context, in *SandboxRef) (*out[client.NetworkInfo], error) {
		const op = "get network"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		n, err := b.GetNetwork(ctx, p.TenantID, in.ID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if n.Ports == nil {
			n.Ports = []client.Port{}
		}
		return &out[client.NetworkInfo]{Body: n}, nil
	})

	set := s.op(http.MethodPut, "/v1/sandboxes/{id}/network", "set-network",
		"Replace a sandbox's egress policy", tag, 0)
	set.Description = networkIntro + "Replaces the policy whole (read it with get-network, change it, put it back). " +
		"It applies at once to a running sandbox, without a restart, and is kept across stop/start, snapshot and fork. " +
		"An entry that is not an address, a CIDR or a domain pattern (example.com, *.example.com) is refused with 400, " +
		"naming it, and nothing changes. Answers the network with the new policy. The sandbox's own token may not call it."
	set.Errors = append(set.Errors, http.StatusForbidden, http.StatusNotImplemented)
	huma.Register(s.api, set, func(ctx context.Context, in *struct {
		SandboxRef
		Body client.NetworkPolicy
	}) (*out[client.NetworkInfo], error) {
		const op = "set network"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		n, err := b.SetNetwork(ctx, p.TenantID, in.ID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if n.Ports == nil {
			n.Ports = []client.Port{}
		}
		return &out[client.NetworkInfo]{Body: n}, nil
	})

	list := s.agentOp(agentOwnSandbox, http.MethodGet, "/v1/sandboxes/{id}/ports", "list-ports",
		"List a sandbox's exposed ports", tag, 0)
	list.Description = portIntro + "Lists the exposed ports in port order with their URLs; tokens are never listed " +
		"(expose the port again to get a new one). The sandbox's own token may call it."
	huma.Register(s.api, list, func(ctx context.Context, in *struct {
		SandboxRef
		PageQuery
	}) (*out[client.Page[client.Port]], error) {
		const op = "list ports"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		ports, err := b.ListPorts(ctx, p.TenantID, in.ID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if ports == nil {
			ports = []client.Port{}
		}
		return pageOf(ports, in.PageQuery)
	})

	expose := s.op(http.MethodPut, "/v1/sandboxes/{id}/ports/{port}", "expose-port",
		"Expose a port of a sandbox through the port proxy", tag, 0)
	expose.Description = portIntro + "Exposes the port (1-65535; 400 otherwise), public or private (the default). " +
		"A private port's answer carries its access token, shown this once; exposing the port again replaces " +
		"public and rotates the token (the old one stops working). Nothing needs to listen on the port yet. " +
		"501 when the daemon runs without networking or without a port proxy. The sandbox's own token may not call it."
	expose.Errors = append(expose.Errors, http.StatusForbidden, http.StatusNotImplemented)
	huma.Register(s.api, expose, func(ctx context.Context, in *struct {
		PortRef
		Body *client.ExposePortRequest // optional: no body is a private port
	}) (*out[client.ExposedPort], error) {
		const op = "expose port"
		port, err := parsePort(in.Port)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		var req client.ExposePortRequest
		if in.Body != nil {
			req = *in.Body
		}
		ep, err := b.ExposePort(ctx, p.TenantID, in.ID, port, req)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.ExposedPort]{Body: ep}, nil
	})

	unexpose := s.op(http.MethodDelete, "/v1/sandboxes/{id}/ports/{port}", "unexpose-port",
		"Stop exposing a port of a sandbox", tag, http.StatusNoContent)
	unexpose.Description = portIntro + "Stops exposing the port: its URLs stop answering, its token stops working " +
		"and proxied connections are closed. 404 when the port is not exposed. The sandbox's own token may not call it."
	unexpose.Errors = append(unexpose.Errors, http.StatusForbidden)
	huma.Register(s.api, unexpose, func(ctx context.Context, in *PortRef) (*struct{}, error) {
		const op = "unexpose port"
		port, err := parsePort(in.Port)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if err := b.UnexposePort(ctx, p.TenantID, in.ID, port); err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return nil, nil
	})
}
