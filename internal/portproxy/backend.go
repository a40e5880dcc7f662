package portproxy

import (
	"context"
	"net/netip"
)

// Sandbox states the proxy acts on. Any other state (creating, deleted,
// error, ...) is answered 503 without a wake.
const (
	stateRunning  = "running"
	statePaused   = "paused"
	stateStopped  = "stopped"
	stateArchived = "archived"
)

// Target is what the proxy needs to know about one port of one sandbox.
type Target struct {
	// SandboxID is the sandbox's id (the request may have named it).
	SandboxID string
	// Tenant owns the sandbox; it is only logged.
	Tenant string
	// Addr is the sandbox's address (routed from the host). It is the zero
	// (invalid) netip.Addr while the sandbox has no network, for example
	// while it is stopped.
	Addr netip.Addr
	// Exposed reports whether the port is exposed through the proxy. An
	// unexposed port is answered 404 by the port routes (as an unknown
	// sandbox is); port-forward does not need it.
	Exposed bool
	// Public reports whether the exposed port is reachable without a key
	// or token.
	Public bool
	// AutoResume reports whether a request may start or resume the
	// sandbox when it is stopped, paused or archived.
	AutoResume bool
	// State is the sandbox's lifecycle state: "running", "paused",
	// "stopped", "archived", or another state the proxy does not serve.
	State string
}

// Backend is what the proxy needs from the sandbox service. Its methods
// are called concurrently, on the path of every proxied request, and must
// be safe for that; Target, Authorize and CheckToken should be cheap.
type Backend interface {
	// Target describes port of the sandbox named sandboxID (an id or a
	// name). It returns an error wrapping errs.ErrNotFound when there is
	// no such sandbox (a deleted one included); the proxy answers that
	// with the same 404 as an unexposed port. Any other error is answered
	// 502 and logged. It must not wake the sandbox.
	Target(ctx context.Context, sandboxID string, port int) (Target, error)
	// Authorize returns nil when API key may use the sandbox named
	// sandboxID. Otherwise it returns an error wrapping
	// errs.ErrUnauthenticated when key is unknown or revoked (answered
	// 401), errs.ErrNotFound when the sandbox does not exist or belongs to
	// another tenant, or errs.ErrForbidden when the key may not use it
	// (both answered with the proxy's one 404). Other errors are answered
	// 502 and logged.
	Authorize(ctx context.Context, key, sandboxID string) error
	// CheckToken reports whether token is the current access token of the
	// exposed port of sandbox sandboxID (the id Target returned). It must
	// compare in constant time and return false for an empty token, an
	// unexposed port or a public one. Tokens are sent in a cookie, so they
	// must be cookie-safe (for example base64url).
	CheckToken(sandboxID string, port int, token string) bool
	// Wake starts the stopped or archived sandbox sandboxID, or resumes
	// the paused one, and returns once it is running (its processes may
	// still be starting). It must return nil for a sandbox that is already
	// running, and may be called again while an earlier call is under
	// way. The proxy bounds it by its WakeTimeout through ctx.
	Wake(ctx context.Context, sandboxID string) error
	// NoteActivity records that sandbox sandboxID is in use now (a
	// request was forwarded to it, or bytes flowed on a stream or
	// tunnel). It must return quickly and never block on the sandbox.
	NoteActivity(sandboxID string)
}
