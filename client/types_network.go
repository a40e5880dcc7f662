package client

import "time"

// NetworkPolicy is a sandbox's egress policy. A destination (an address
// or a name) is decided in this order:
//
//  1. the host's own addresses, other sandboxes, link-local, loopback
//     and metadata ranges are refused, whatever the policy;
//  2. with Internet false, everything is refused;
//  3. an entry of Deny that matches refuses it;
//  4. with Allow empty, it is admitted;
//  5. an entry of Allow that matches admits it; anything else is refused
//     (an allow-list is a default-deny policy).
//
// Entries are IPv4 or IPv6 addresses, CIDRs ("10.0.0.0/8") or domain
// patterns: "example.com" matches that name only, "*.example.com" every
// name below it (not the name itself). A name is admitted at the
// sandbox's resolver; its addresses are then admitted for that sandbox,
// and connections to ports 80 and 443 must also carry an admitted name
// (HTTP Host or TLS SNI), since many names share an address.
type NetworkPolicy struct {
	Internet *bool    `json:"internet,omitempty" doc:"Whether anything may leave the sandbox; default true"`
	Allow    []string `json:"allow,omitempty" doc:"Addresses, CIDRs and domain patterns (*.example.com) admitted; non-empty makes the policy default-deny"`
	Deny     []string `json:"deny,omitempty" doc:"Addresses, CIDRs and domain patterns refused (deny wins over allow)"`
}

// InternetOn reports whether the policy lets traffic leave at all.
func (p NetworkPolicy) InternetOn() bool { return p.Internet == nil || *p.Internet }

// NetworkInfo is a sandbox's network: its address, policy and counters.
type NetworkInfo struct {
	Enabled   bool          `json:"enabled" doc:"False when the daemon runs without networking (loopback only)"`
	Address   string        `json:"address,omitempty" doc:"The sandbox's IPv4 address, stable across stop/start and restarts"`
	Address6  string        `json:"address6,omitempty" doc:"The sandbox's IPv6 address, when the host has IPv6"`
	Gateway   string        `json:"gateway,omitempty" doc:"The gateway address: default route and resolver"`
	Policy    NetworkPolicy `json:"policy" doc:"The egress policy"`
	Refused   uint64        `json:"refused" doc:"Connections and lookups refused by policy since the sandbox started"`
	RxBytes   uint64        `json:"rx_bytes" doc:"Bytes received by the sandbox since it started"`
	TxBytes   uint64        `json:"tx_bytes" doc:"Bytes sent by the sandbox since it started"`
	Bandwidth int64         `json:"bandwidth_bits" doc:"Egress and ingress rate limit in bits/s (0: none)"`
	MaxConns  int           `json:"max_conns" doc:"Connection-tracking limit (0: none)"`
	Ports     []Port        `json:"ports" doc:"Exposed ports, in port order"`
}

// Port is a port of a sandbox exposed through the daemon's port proxy.
type Port struct {
	Port      int       `json:"port" minimum:"1" maximum:"65535" doc:"Port inside the sandbox"`
	Public    bool      `json:"public" doc:"Reachable without a key or token"`
	URL       string    `json:"url,omitempty" doc:"By Host: <port>-<sandbox>.<domain>, when the proxy has a domain"`
	PathURL   string    `json:"path_url,omitempty" doc:"By path: /v1/sandboxes/{id}/ports/{port}/ on the API or proxy address"`
	ExposedAt time.Time `json:"exposed_at" doc:"When it was exposed"`
}

// ExposePortRequest exposes a port.
type ExposePortRequest struct {
	Public bool `json:"public,omitempty" doc:"Reachable without a key or token"`
}

// ExposedPort is the answer to exposing a port: the port and, for a
// private port, its access token (shown once; exposing again rotates it).
type ExposedPort struct {
	Port
	Token string `json:"token,omitempty" doc:"Access token for a private port: header X-Stead-Port-Token, or ?stead_token= once in a browser (then a cookie)"`
}
