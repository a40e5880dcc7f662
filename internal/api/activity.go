package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
)

// ActivityBackend is implemented by a backend whose idle policy counts a
// sandbox's API traffic as activity (an agent that only sleeps and writes
// checkpoints through its socket is at work). NewHandler then reports:
//
//   - every request of a sandbox-scoped token that its scope lets through,
//     with sandbox = p.Sandbox (the token's own sandbox, by id);
//   - every request but GET, HEAD and OPTIONS of any other caller to a
//     route a sandbox token may also call on its own sandbox (agent state:
//     checkpoints, session log, tasks, observations, kv, restore-path), with
//     sandbox = the request's {id} (an id or a name).
//
// Requests are reported once, before the handler runs, so a long stream
// (an operation's events) counts when it opens and not for as long as it
// stays open.
type ActivityBackend interface {
	// SandboxActivity records that p used sandbox through the API now. It
	// must return quickly, must not fail the request, and ignores a
	// sandbox it cannot resolve or that is not running.
	SandboxActivity(ctx context.Context, p Principal, sandbox string)
}

// countActivity is the huma middleware that reports requests to an
// ActivityBackend (see there). It runs after sandboxScope, so a refused
// request is never reported.
func (s *server) countActivity(ctx huma.Context, next func(huma.Context)) {
	if ab, ok := s.b.(ActivityBackend); ok {
		if p, ok := PrincipalFromContext(ctx.Context()); ok {
			switch {
			case p.Sandbox != "":
				ab.SandboxActivity(ctx.Context(), p, p.Sandbox)
			case agentAccessOf(ctx.Operation()) == agentOwnSandbox && !readOnlyMethod(ctx.Method()):
				ab.SandboxActivity(ctx.Context(), p, ctx.Param("id"))
			}
		}
	}
	next(ctx)
}

// readOnlyMethod reports whether an HTTP method changes nothing.
func readOnlyMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}
