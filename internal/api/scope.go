package api

import (
	"fmt"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/stead-dev/stead/internal/errs"
)

// Sandbox-scoped tokens.
//
// The agent inside a sandbox holds a token that authenticates as a
// Principal with Sandbox set. It reaches that sandbox's own things only:
// every id in its request must belong to that sandbox, and an id of another
// sandbox (of the same tenant) answers exactly as an absent one (the same
// 404 and the same problem document, with no lookup that could tell them
// apart).
//
// What such a token may call is said once per route, where the route is
// registered. s.op gives a route no agent access: a new route is closed to
// agent tokens until it says otherwise. s.agentOp opens it and says how the
// route's ids are confined to the token's sandbox:
//
//   - agentOwnSandbox: the route lives under /v1/sandboxes/{id}/, and {id}
//     must be the token's sandbox id, literally (not its name). Every other
//     id of the request (thread, run, task, key, document, snapshot) is
//     resolved by the backend within the sandbox {id} names: that is the
//     contract of every backend method such a route calls (a thread of
//     another sandbox is errs.ErrNotFound, for every caller).
//   - agentScopedByBackend: the route names no sandbox
//     (/v1/operations/{id}); its handler hands the Principal to the
//     backend, which resolves the ids within p.Sandbox and answers another
//     sandbox's as an absent one (see BackupBackend.GetOperation).
//
// sandboxScope, a huma middleware ahead of every handler, enforces this
// with the route's parsed {id}. sandboxScopeAllows, in authenticate, is a
// coarse path fence in front of it: both must let a request through.

// agentAccess says whether, and how, a sandbox-scoped token may call a
// route (kept in huma.Operation.Metadata under agentAccessKey).
type agentAccess string

const (
	// agentOwnSandbox: a route under /v1/sandboxes/{id}/ whose {id} must
	// be the token's sandbox.
	agentOwnSandbox agentAccess = "own-sandbox"
	// agentScopedByBackend: a route whose handler passes the Principal to
	// a backend that confines every id to p.Sandbox.
	agentScopedByBackend agentAccess = "scoped-by-backend"
)

// agentAccessKey is the Metadata key of a route's agentAccess, and the
// OpenAPI extension that shows it to API users.
const agentAccessKey = "x-sandbox-token"

// agentOp is s.op for a route that a sandbox-scoped token may call, with
// access saying how the route confines its ids to that sandbox. A route of
// kind agentOwnSandbox must live under /v1/sandboxes/{id}/ (checked here:
// a programming error panics at registration, so every test catches it).
func (s *server) agentOp(access agentAccess, method, path, id, summary, tag string, status int) huma.Operation {
	return withAgentAccess(s.op(method, path, id, summary, tag, status), access)
}

// withAgentAccess opens the route o to sandbox-scoped tokens (see agentOp).
func withAgentAccess(o huma.Operation, access agentAccess) huma.Operation {
	switch access {
	case agentOwnSandbox:
		if !strings.HasPrefix(o.Path, "/v1/sandboxes/{id}/") {
			panic(fmt.Sprintf("api: route %s %s: agent access %q needs a path under /v1/sandboxes/{id}/", o.Method, o.Path, access))
		}
	case agentScopedByBackend:
	default:
		panic(fmt.Sprintf("api: route %s %s: unknown agent access %q", o.Method, o.Path, access))
	}
	if o.Metadata == nil {
		o.Metadata = map[string]any{}
	}
	if o.Extensions == nil {
		o.Extensions = map[string]any{}
	}
	o.Metadata[agentAccessKey] = access
	o.Extensions[agentAccessKey] = string(access)
	return o
}

// agentAccessOf returns the route's agentAccess ("" when agent tokens may
// not call it).
func agentAccessOf(o *huma.Operation) agentAccess {
	if o == nil {
		return ""
	}
	a, _ := o.Metadata[agentAccessKey].(agentAccess)
	return a
}

// sandboxScope is the huma middleware that lets a sandbox-scoped principal
// call only the routes opened to it, and an agentOwnSandbox route only for
// its own sandbox. Any other call is 403, whose message names only the
// token's own sandbox (so it is the same for another sandbox's id as for a
// made-up one). Other principals pass through.
func (s *server) sandboxScope(ctx huma.Context, next func(huma.Context)) {
	p, ok := PrincipalFromContext(ctx.Context())
	if !ok || p.Sandbox == "" {
		next(ctx)
		return
	}
	switch agentAccessOf(ctx.Operation()) {
	case agentOwnSandbox:
		if ctx.Param("id") == p.Sandbox {
			next(ctx)
			return
		}
	case agentScopedByBackend:
		next(ctx)
		return
	}
	r, w := humago.Unwrap(ctx)
	s.writeProblem(w, r, "authorize", sandboxTokenRefusal(p.Sandbox))
}

// sandboxTokenRefusal is the 403 for a sandbox-scoped token's request that
// leaves its sandbox.
func sandboxTokenRefusal(sandbox string) error {
	return fmt.Errorf("this token belongs to sandbox %s and reaches only /v1/sandboxes/%s/{%s} and its operations: %w",
		sandbox, sandbox, strings.Join(sandboxScopedAreas, ","), errs.ErrForbidden)
}

// sandboxScopedAreas are what a sandbox-scoped token may reach under
// /v1/sandboxes/{its id}/: agent state, never lifecycle, exec or files;
// its file history and restore-path (the agent's undo for a file); and its
// network and ports, which only their GET routes open (sandboxScope
// refuses the PUT and DELETE routes: an agent must never loosen its own
// egress policy or expose its own ports).
var sandboxScopedAreas = []string{"checkpoints", "threads", "runs", "orient", "tasks", "observations", "kv",
	"history", "restore-path", "network", "ports"}

// sandboxScopeAllows is the coarse path fence for a token scoped to
// sandbox id: /v1/sandboxes/<id>/<area>[/...] for an allowed area, and the
// operation routes. The id must be given literally (not the sandbox's
// name). sandboxScope then decides per route.
func sandboxScopeAllows(id, path string) bool {
	if sandboxTokenOperationPath(path) {
		return true // the backend shows it only its own sandbox's operations
	}
	rest, ok := strings.CutPrefix(path, "/v1/sandboxes/"+id+"/")
	if !ok {
		return false
	}
	area, _, _ := strings.Cut(rest, "/")
	for _, a := range sandboxScopedAreas {
		if area == a {
			return !strings.Contains(rest, "..")
		}
	}
	return false
}

// sandboxTokenOperationPath reports whether path is one of the operation
// routes a sandbox-scoped token may request: GET /v1/operations/{id} and
// .../events. The backend then shows it only the operations of its own
// sandbox; any other is 404, as an absent one.
func sandboxTokenOperationPath(path string) bool {
	rest, ok := strings.CutPrefix(path, "/v1/operations/")
	if !ok || strings.Contains(rest, "..") {
		return false
	}
	id, tail, _ := strings.Cut(rest, "/")
	return id != "" && (tail == "" || tail == "events")
}
