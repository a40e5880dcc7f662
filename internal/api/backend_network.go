package api

import (
	"context"

	"github.com/stead-dev/stead/client"
)

// NetworkBackend serves a sandbox's network: its address and counters, its
// egress policy and the ports exposed through the daemon's port proxy.
// NewHandler registers the /v1/sandboxes/{id}/network and
// /v1/sandboxes/{id}/ports routes only when its Backend also implements
// this interface.
//
// As with Backend, every method gets the caller's tenant and treats another
// tenant's sandbox as absent (errs.ErrNotFound); sandbox may be an id or a
// name. A deleted sandbox is absent too. Read methods may be called for a
// sandbox in any state; a stopped or paused sandbox keeps its address,
// policy and exposed ports.
type NetworkBackend interface {
	// GetNetwork describes the sandbox's network. When the daemon runs
	// without networking it answers Enabled false (not an error).
	// Ports is never nil.
	GetNetwork(ctx context.Context, tenant, sandbox string) (client.NetworkInfo, error)
	// SetNetwork replaces the sandbox's egress policy with p, whole (no
	// merge: the caller reads, changes and writes), and returns the
	// network with the new policy. A running sandbox gets it at once,
	// without a restart; it is kept across stop/start, snapshot and fork.
	// An entry that is not an address, a CIDR or a domain pattern is
	// errs.ErrInvalid, naming the entry; the policy is then unchanged.
	// Idempotent: setting the same policy twice changes nothing.
	SetNetwork(ctx context.Context, tenant, sandbox string, p client.NetworkPolicy) (client.NetworkInfo, error)
	// ListPorts lists the sandbox's exposed ports in port order (an empty,
	// non-nil slice when there are none).
	ListPorts(ctx context.Context, tenant, sandbox string) ([]client.Port, error)
	// ExposePort exposes port (1–65535, checked by the API before the
	// call) through the port proxy. A private port's answer carries its
	// access token, shown this once: exposing an exposed port again
	// replaces its Public flag and rotates the token (the old one stops
	// working). errs.ErrUnsupported when the daemon runs without
	// networking or without a port proxy.
	ExposePort(ctx context.Context, tenant, sandbox string, port int, req client.ExposePortRequest) (client.ExposedPort, error)
	// UnexposePort stops exposing port; its token stops working and open
	// proxied connections are closed. A port that is not exposed is
	// errs.ErrNotFound.
	UnexposePort(ctx context.Context, tenant, sandbox string, port int) error
}
