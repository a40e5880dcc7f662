package mcp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stead-dev/stead/client"
)

// networkNote ends the description of the tools that change a network: the
// sandbox's own token may not call them.
const networkNote = " Needs an API key of the tenant: the token of the sandbox itself may read its network and " +
	"ports but never change them (403)."

// registerNetwork adds network_show, network_set, port_list, port_expose
// and port_unexpose.
func (t *tools) registerNetwork(s *sdk.Server) {
	yes, no := true, false

	sdk.AddTool(s, &sdk.Tool{
		Name:  "network_show",
		Title: "Show a sandbox's network",
		Description: "Describes a sandbox's network: its IPv4 address in the daemon's subnet, the gateway (its default " +
			"route and DNS resolver), its egress policy (internet on or off, allow and deny lists), how many " +
			"connections and lookups the policy refused, bytes received and sent, its limits, and its exposed ports " +
			"with their URLs.",
		InputSchema: t.inputSchema(schemaFor[NetworkShowInput]()),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, t.networkShow)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "network_set",
		Title: "Change a sandbox's egress policy",
		Description: "Changes a sandbox's egress policy and returns its network. Each of internet, allow and deny that " +
			"is given replaces that part of the current policy; what is omitted is kept (allow: [] empties the allow " +
			"list). Decision order: the host, other sandboxes and metadata ranges are always refused; with internet " +
			"false everything is refused; a deny entry refuses; with an empty allow list the rest is admitted, " +
			"otherwise only what an allow entry matches. Entries are addresses, CIDRs (10.0.0.0/8), names " +
			"(example.com) or domain patterns (*.example.com). Applies at once, without a restart." + networkNote,
		InputSchema: t.inputSchema(schemaFor[NetworkSetInput]()),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, t.networkSet)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "port_list",
		Title: "List a sandbox's exposed ports",
		Description: "Lists the ports of a sandbox exposed through the daemon's port proxy, with their URLs and " +
			"whether they are public. Tokens are never listed.",
		InputSchema: t.inputSchema(schemaFor[PortListInput]()),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, t.portList)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "port_expose",
		Title: "Expose a port of a sandbox",
		Description: "Exposes a port (1-65535) of a sandbox through the daemon's port proxy and returns its URLs. " +
			"A private port (the default) also returns its access token, shown only this once: send it as the " +
			"header X-Stead-Port-Token, or open a URL once with ?stead_token=TOKEN in a browser. Exposing the " +
			"port again rotates the token (the old one stops working). With public, anyone who reaches the " +
			"proxy can use it." + networkNote,
		InputSchema: t.inputSchema(schemaFor[PortExposeInput]()),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: false, OpenWorldHint: &no},
	}, t.portExpose)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "port_unexpose",
		Title: "Stop exposing a port of a sandbox",
		Description: "Stops exposing a port of a sandbox: its URLs stop answering, its token stops working and " +
			"proxied connections are closed. The program listening on it is not touched. A port that is not " +
			"exposed is an error (HTTP 404)." + networkNote,
		InputSchema: t.inputSchema(schemaFor[PortUnexposeInput]()),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, t.portUnexpose)
}

// NetworkShowInput is the input of network_show.
type NetworkShowInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
}

// NetworkSetInput is the input of network_set.
type NetworkSetInput struct {
	Sandbox  string   `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Internet *bool    `json:"internet,omitempty" jsonschema:"Whether anything may leave the sandbox. Omitted: unchanged."`
	Allow    []string `json:"allow,omitempty" jsonschema:"The new allow list, whole: addresses, CIDRs, names or *.domain patterns. Non-empty makes the policy default-deny. Omitted: unchanged; [] empties it."`
	Deny     []string `json:"deny,omitempty" jsonschema:"The new deny list, whole (deny wins over allow). Omitted: unchanged; [] empties it."`
}

// PolicyOutput is an egress policy.
type PolicyOutput struct {
	Internet bool     `json:"internet" jsonschema:"Whether anything may leave the sandbox."`
	Allow    []string `json:"allow" jsonschema:"Admitted destinations; non-empty: nothing else is admitted."`
	Deny     []string `json:"deny" jsonschema:"Refused destinations (deny wins over allow)."`
}

// PortOutput is an exposed port.
type PortOutput struct {
	Port      int      `json:"port"`
	Public    bool     `json:"public" jsonschema:"Reachable without a token."`
	URLs      []string `json:"urls" jsonschema:"Its URLs: by host (<port>-<sandbox>.<domain>) when the proxy has a domain, and by path."`
	ExposedAt string   `json:"exposed_at,omitempty" jsonschema:"When it was exposed, RFC 3339."`
}

// NetworkOutput is the result of network_show and network_set.
type NetworkOutput struct {
	Enabled       bool         `json:"enabled" jsonschema:"False when the daemon runs without networking (loopback only)."`
	Address       string       `json:"address,omitempty" jsonschema:"The sandbox's IPv4 address, stable across stop/start."`
	Address6      string       `json:"address6,omitempty" jsonschema:"Its IPv6 address, when the host has IPv6."`
	Gateway       string       `json:"gateway,omitempty" jsonschema:"The gateway address: default route and DNS resolver."`
	Policy        PolicyOutput `json:"policy"`
	Refused       uint64       `json:"refused" jsonschema:"Connections and lookups refused by the policy since the sandbox started."`
	RxBytes       uint64       `json:"rx_bytes" jsonschema:"Bytes received since the sandbox started."`
	TxBytes       uint64       `json:"tx_bytes" jsonschema:"Bytes sent since the sandbox started."`
	BandwidthBits int64        `json:"bandwidth_bits" jsonschema:"Rate limit in bits/s (0: none)."`
	MaxConns      int          `json:"max_conns" jsonschema:"Connection-tracking limit (0: none)."`
	Ports         []PortOutput `json:"ports" jsonschema:"Exposed ports."`
}

// PortListInput is the input of port_list.
type PortListInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
}

// PortListOutput is the result of port_list.
type PortListOutput struct {
	Ports []PortOutput `json:"ports" jsonschema:"Exposed ports, in port order."`
}

// PortExposeInput is the input of port_expose.
type PortExposeInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Port    int    `json:"port" jsonschema:"Port inside the sandbox, 1-65535."`
	Public  bool   `json:"public,omitempty" jsonschema:"Reachable without a token (default: private)."`
}

// PortExposeOutput is the result of port_expose.
type PortExposeOutput struct {
	PortOutput
	Token string `json:"token,omitempty" jsonschema:"A private port's access token, shown only this once: header X-Stead-Port-Token, or ?stead_token= once in a browser."`
}

// PortUnexposeInput is the input of port_unexpose.
type PortUnexposeInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Port    int    `json:"port" jsonschema:"Port inside the sandbox, 1-65535."`
}

// PortUnexposeOutput is the result of port_unexpose.
type PortUnexposeOutput struct {
	Sandbox string `json:"sandbox"`
	Port    int    `json:"port"`
	Exposed bool   `json:"exposed" jsonschema:"Always false: the port is no longer exposed."`
}

// networkShow describes a sandbox's network.
func (t *tools) networkShow(ctx context.Context, _ *sdk.CallToolRequest, in NetworkShowInput) (*sdk.CallToolResult, NetworkOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, NetworkOutput{}, err
	}
	n, err := t.c.GetNetwork(ctx, sb)
	if err != nil {
		return nil, NetworkOutput{}, apiError("show network of sandbox "+sb, err)
	}
	return nil, t.networkOutput(n), nil
}

// networkSet reads the sandbox's policy, replaces the parts given, and
// writes it back.
func (t *tools) networkSet(ctx context.Context, _ *sdk.CallToolRequest, in NetworkSetInput) (*sdk.CallToolResult, NetworkOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, NetworkOutput{}, err
	}
	if in.Internet == nil && in.Allow == nil && in.Deny == nil {
		return nil, NetworkOutput{}, fmt.Errorf("nothing to change: pass internet, allow or deny")
	}
	cur, err := t.c.GetNetwork(ctx, sb)
	if err != nil {
		return nil, NetworkOutput{}, apiError("read network of sandbox "+sb, err)
	}
	p := cur.Policy
	if in.Internet != nil {
		p.Internet = in.Internet
	}
	if in.Allow != nil {
		p.Allow = slices.Clone(in.Allow)
	}
	if in.Deny != nil {
		p.Deny = slices.Clone(in.Deny)
	}
	n, err := t.c.SetNetwork(ctx, sb, p)
	if err != nil {
		return nil, NetworkOutput{}, apiError("set network of sandbox "+sb, err)
	}
	return nil, t.networkOutput(n), nil
}

// portList lists a sandbox's exposed ports.
func (t *tools) portList(ctx context.Context, _ *sdk.CallToolRequest, in PortListInput) (*sdk.CallToolResult, PortListOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, PortListOutput{}, err
	}
	ports, err := t.c.ListPorts(ctx, sb)
	if err != nil {
		return nil, PortListOutput{}, apiError("list ports of sandbox "+sb, err)
	}
	return nil, PortListOutput{Ports: t.portOutputs(ports)}, nil
}

// portExpose exposes a port.
func (t *tools) portExpose(ctx context.Context, _ *sdk.CallToolRequest, in PortExposeInput) (*sdk.CallToolResult, PortExposeOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, PortExposeOutput{}, err
	}
	if err := checkPort(in.Port); err != nil {
		return nil, PortExposeOutput{}, err
	}
	ep, err := t.c.ExposePort(ctx, sb, in.Port, client.ExposePortRequest{Public: in.Public})
	if err != nil {
		return nil, PortExposeOutput{}, apiError(fmt.Sprintf("expose port %d of sandbox %s", in.Port, sb), err)
	}
	return nil, PortExposeOutput{PortOutput: t.portOutput(ep.Port), Token: ep.Token}, nil
}

// portUnexpose stops exposing a port.
func (t *tools) portUnexpose(ctx context.Context, _ *sdk.CallToolRequest, in PortUnexposeInput) (*sdk.CallToolResult, PortUnexposeOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, PortUnexposeOutput{}, err
	}
	if err := checkPort(in.Port); err != nil {
		return nil, PortUnexposeOutput{}, err
	}
	if err := t.c.UnexposePort(ctx, sb, in.Port); err != nil {
		return nil, PortUnexposeOutput{}, apiError(fmt.Sprintf("unexpose port %d of sandbox %s", in.Port, sb), err)
	}
	return nil, PortUnexposeOutput{Sandbox: sb, Port: in.Port}, nil
}

// checkPort refuses a port outside 1-65535 before asking the daemon.
func checkPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %d: give a port number from 1 to 65535", port)
	}
	return nil
}

// networkOutput converts a NetworkInfo.
func (t *tools) networkOutput(n client.NetworkInfo) NetworkOutput {
	return NetworkOutput{
		Enabled: n.Enabled, Address: n.Address, Address6: n.Address6, Gateway: n.Gateway,
		Policy: PolicyOutput{
			Internet: n.Policy.InternetOn(),
			Allow:    append([]string{}, n.Policy.Allow...),
			Deny:     append([]string{}, n.Policy.Deny...),
		},
		Refused: n.Refused, RxBytes: n.RxBytes, TxBytes: n.TxBytes,
		BandwidthBits: n.Bandwidth, MaxConns: n.MaxConns,
		Ports: t.portOutputs(n.Ports),
	}
}

// portOutputs converts ports (never nil).
func (t *tools) portOutputs(ports []client.Port) []PortOutput {
	out := make([]PortOutput, 0, len(ports))
	for _, p := range ports {
		out = append(out, t.portOutput(p))
	}
	return out
}

// portOutput converts a Port. A path URL the daemon gives relative is made
// absolute on an http(s) endpoint.
func (t *tools) portOutput(p client.Port) PortOutput {
	out := PortOutput{Port: p.Port, Public: p.Public, URLs: []string{}}
	if !p.ExposedAt.IsZero() {
		out.ExposedAt = p.ExposedAt.UTC().Format(time.RFC3339Nano)
	}
	if p.URL != "" {
		out.URLs = append(out.URLs, p.URL)
	}
	if u := p.PathURL; u != "" {
		ep := t.c.Endpoint()
		if strings.HasPrefix(u, "/") && (strings.HasPrefix(ep, "http://") || strings.HasPrefix(ep, "https://")) {
			u = strings.TrimSuffix(ep, "/") + u
		}
		out.URLs = append(out.URLs, u)
	}
	return out
}
