// Package network connects sandboxes to the host's network (node-local):
// a bridge, a network namespace per sandbox joined to it by a veth pair,
// an address leased in the store, an nftables table that NATs sandbox
// traffic and enforces each sandbox's egress policy (package policy), tc
// rate limits and a connection-tracking limit per sandbox.
//
// Everything the package makes on the host (the bridge, links, the netns
// bind mounts under Config.RunDir, the nftables table "stead") is derived
// from what its callers say is attached: Sync re-applies it idempotently
// at start-up and removes whatever belongs to no attached sandbox, so a
// crash or a kill -9 of the daemon leaks nothing for longer than the next
// start.
package network

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/stead-dev/stead/internal/network/policy"
	"github.com/stead-dev/stead/internal/store"
)

// Config configures a Manager.
type Config struct {
	// Bridge is the host bridge's name (default "stead0").
	Bridge string
	// Subnet is the sandboxes' IPv4 subnet (default 10.88.0.0/16). The
	// bridge takes its first address; leases start at the second.
	Subnet netip.Prefix
	// Subnet6 is an IPv6 subnet (a /64 ULA); the zero prefix: no IPv6.
	Subnet6 netip.Prefix
	// RunDir holds the netns bind mounts and each sandbox's resolv.conf
	// (default /run/stead/net).
	RunDir string
	// ResolverPort is the resolver's port on the bridge address (default
	// 53); it is written into each sandbox's resolv.conf (port 53 only:
	// resolv.conf has no port) and admitted by the firewall.
	ResolverPort int
	// EgressPort is the Host/SNI egress proxy's port on the bridge
	// address: connections to ports 80 and 443 of a sandbox whose policy
	// names domains are redirected to it (default 3129).
	EgressPort int
	// Leases keeps the address leases.
	Leases Leases
	Logger *slog.Logger
}

// Leases keeps each sandbox's address (the store implements it).
type Leases interface {
	// LeaseAddress returns the sandbox's address in subnet, leasing the
	// lowest free one (after the gateway) on the first call; the same
	// address on every later call. errs.ErrQuota when the subnet is full.
	LeaseAddress(ctx context.Context, sandboxID string, subnet netip.Prefix) (netip.Addr, error)
	// ReleaseLease frees every address of the sandbox (idempotent).
	ReleaseLease(ctx context.Context, sandboxID string) error
	// ListLeases lists every lease.
	ListLeases(ctx context.Context) ([]store.Lease, error)
}

// Limits bound one sandbox's use of the host's network.
type Limits struct {
	// BandwidthBits is the rate limit in bits/s of each direction (0: none).
	BandwidthBits int64
	// MaxConns is the most tracked connections the sandbox may have at once (0: none).
	MaxConns int
}

// Attachment is what a sandbox's network is made from.
type Attachment struct {
	ID string
	// NetNS is the path of the sandbox's network namespace, made by the
	// runtime (/proc/<pid>/ns/net, from runtime.Spec.Network); Attach
	// holds it by a bind mount under RunDir. "" reattaches the namespace
	// held from an earlier Attach (a daemon restart adopting a running
	// sandbox): ErrNotAttached if there is none.
	NetNS  string
	Policy policy.Policy
	Limits Limits
}

// Attached is a sandbox's network as made by Attach.
type Attached struct {
	// NetNS is the path of the network namespace for the runtime to join.
	NetNS string
	// ResolvConf is a host file to bind read-only at /etc/resolv.conf.
	ResolvConf string
	// Addr is the sandbox's IPv4 address; Addr6 its IPv6 one, if any.
	Addr, Addr6 netip.Addr
	// Gateway is the bridge's address (default route and resolver).
	Gateway netip.Addr
}

// Status are a sandbox's counters.
type Status struct {
	Addr, Addr6 netip.Addr
	// Refused counts connections the firewall dropped and names the
	// resolver or the egress proxy refused, since the sandbox was attached.
	Refused          uint64
	RxBytes, TxBytes uint64
}

// ErrNotAttached is returned for a sandbox that has no network now.
var ErrNotAttached = errors.New("sandbox has no network attached")

// Manager owns the host side of sandbox networking.
//
// Contract:
//   - Attach is idempotent: for an attached sandbox it checks and repairs
//     what exists (a daemon restart adopts running sandboxes this way) and
//     returns the same Attached.
//   - Detach removes the sandbox's namespace, links and rules, keeps its
//     lease, and is idempotent. Release is Detach plus the lease.
//   - SetPolicy applies to a running sandbox at once, atomically (one
//     nftables transaction); established connections the new policy
//     refuses are not cut (as a firewall change does not cut them).
//   - Sync(running, exists) makes the host match: the ruleset is rebuilt
//     for running in one transaction; links and namespaces of other
//     sandboxes are removed; leases of sandboxes not in exists released.
//   - Methods are safe for concurrent use.
type Manager struct {
	cfg Config
	log *slog.Logger
}

// New sets up the bridge, the sysctls sandbox traffic needs
// (net.ipv4.ip_forward, logged when it changes) and the nftables table
// with no sandbox in it; it attaches nothing.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	panic("network: not implemented")
}

// Gateway is the bridge's IPv4 address.
func (m *Manager) Gateway() netip.Addr { panic("network: not implemented") }

// Attach makes (or repairs) a sandbox's network.
func (m *Manager) Attach(ctx context.Context, a Attachment) (Attached, error) {
	panic("network: not implemented")
}

// Detach removes a sandbox's network and keeps its lease.
func (m *Manager) Detach(ctx context.Context, id string) error { panic("network: not implemented") }

// Release removes a sandbox's network and frees its lease.
func (m *Manager) Release(ctx context.Context, id string) error { panic("network: not implemented") }

// SetPolicy replaces an attached sandbox's policy.
func (m *Manager) SetPolicy(ctx context.Context, id string, p policy.Policy) error {
	panic("network: not implemented")
}

// Sync makes the host's network state match the running sandboxes.
func (m *Manager) Sync(ctx context.Context, running []Attachment, exists map[string]bool) error {
	panic("network: not implemented")
}

// Status returns an attached sandbox's counters (ErrNotAttached if none).
func (m *Manager) Status(ctx context.Context, id string) (Status, error) {
	panic("network: not implemented")
}

// Lookup finds the attached sandbox that owns source address src (for the
// resolver and the egress proxy).
func (m *Manager) Lookup(src netip.Addr) (id string, p policy.Policy, ok bool) {
	panic("network: not implemented")
}

// AddResolved admits addrs for sandbox id for ttl: an admitted name
// resolved to them (the resolver calls it before it answers).
func (m *Manager) AddResolved(id string, addrs []netip.Addr, ttl time.Duration) {
	panic("network: not implemented")
}

// Resolved reports whether an admitted name resolved to a for sandbox id
// and the admission has not expired.
func (m *Manager) Resolved(id string, a netip.Addr) bool { panic("network: not implemented") }

// Forbidden reports whether a is an address no sandbox may reach whatever
// its policy: the host's own addresses, the bridge's subnets, and
// policy.AlwaysDenied.
func (m *Manager) Forbidden(a netip.Addr) bool { panic("network: not implemented") }

// NoteRefused counts a refusal made outside the firewall (the resolver's,
// the egress proxy's) for sandbox id.
func (m *Manager) NoteRefused(id string) { panic("network: not implemented") }

// Addr is an attached sandbox's IPv4 address.
func (m *Manager) Addr(id string) (netip.Addr, bool) { panic("network: not implemented") }
