package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// Authorization: roles and scoped keys.
//
// Every /v1 request of an API key passes one check, authorize, a huma
// middleware ahead of every handler. It decides from the route (its method
// and path template, so a new route falls under the rules of its place in
// the tree, never under none) and the principal's role and scope:
//
//   - /v1/tenants/..., /v1/nodes/..., /v1/lost-copies and the daemon-wide routes in adminRoutes (the
//     repository's init; a template import, which reads the daemon's host)
//     need role admin;
//   - /v1/keys/... and /v1/audit/... need role tenant-admin or admin and an
//     unscoped key; so do the writes of /v1/budgets/... (budgets are the
//     tenant's money: any unscoped key of the tenant may read them);
//   - a read-only key calls GET routes only, and never opens a terminal
//     (GET /v1/sandboxes/{id}/pty);
//   - a scoped key (limited to named sandboxes or a label selector) calls
//     GET /v1/info, the list and create of sandboxes, and the routes under
//     /v1/sandboxes/{id} but those that name other things of its tenant
//     (fork, volume attach; rollback only to a snapshot of {id} itself,
//     see scopedRollbackSnapshot); for the latter, {id} must be a
//     sandbox the key reaches: any other (absent, out of scope, another
//     tenant's) answers the one 404 of notReached, so none can be told
//     apart. Its sandbox list shows only what it reaches, and its creates
//     are confined (confineCreate).
//
// A refusal is 403 with a problem document that says what the route
// needs; it is decided before the handler runs, so a refused request
// changes nothing. Sandbox-scoped tokens (the agent's, Principal.Sandbox)
// are judged by sandboxScope (scope.go) instead. Another tenant's ids are
// absent to every key: the backend's contract (Backend).

// EffectiveRole returns the principal's role: admin when Admin is set,
// else Role, and tenant-user for a principal made without a role (a
// backend that knows roles always sets one; the store maps keys made
// before roles to tenant-admin).
func (p Principal) EffectiveRole() string {
	switch {
	case p.Admin:
		return client.RoleAdmin
	case p.Role == "":
		return client.RoleTenantUser
	}
	return p.Role
}

// Scoped reports whether the key is limited to some sandboxes.
func (p Principal) Scoped() bool { return len(p.Sandboxes) > 0 || len(p.Labels) > 0 }

// AdministersTenant reports whether p may administer its tenant: an
// unscoped API key of role admin or tenant-admin (never a sandbox token).
func (p Principal) AdministersTenant() bool {
	r := p.EffectiveRole()
	return p.Sandbox == "" && !p.Scoped() && (r == client.RoleAdmin || r == client.RoleTenantAdmin)
}

// Reaches reports whether p may see sandbox sb (of p's tenant): always
// for an unscoped key; for a scoped one when sb's id or name is one of
// its Sandboxes and sb carries every one of its Labels; for a sandbox
// token only its own sandbox.
func (p Principal) Reaches(sb client.Sandbox) bool {
	if p.Sandbox != "" {
		return sb.ID == p.Sandbox
	}
	if len(p.Sandboxes) > 0 && !slices.Contains(p.Sandboxes, sb.ID) && !slices.Contains(p.Sandboxes, sb.Name) {
		return false
	}
	for k, v := range p.Labels {
		if got, ok := sb.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// adminRoutes are the daemon-wide routes outside /v1/tenants that need
// role admin.
var adminRoutes = map[string]bool{
	"POST /v1/repo/init": true, // binds the daemon's one repository to a key
	"POST /v1/templates": true, // reads a path on the daemon's host or a registry
	"GET /v1/warm-pools": true, // every tenant's pools, on the daemon's resources
}

// roleRank orders roles: a key may make or manage keys of its rank or
// below.
func roleRank(role string) int {
	switch role {
	case client.RoleAdmin:
		return 4
	case client.RoleTenantAdmin:
		return 3
	case client.RoleTenantUser:
		return 2
	case client.RoleReadOnly:
		return 1
	}
	return 0
}

// RoleAtMost reports whether role is known and no more powerful than max.
func RoleAtMost(role, max string) bool {
	return roleRank(role) > 0 && roleRank(role) <= roleRank(max)
}

// underSandbox reports whether the path template is /v1/sandboxes/{id} or
// below it.
func underSandbox(path string) bool {
	return path == "/v1/sandboxes/{id}" || strings.HasPrefix(path, "/v1/sandboxes/{id}/")
}

// scopedRoutes are the routes outside /v1/sandboxes/{id} a scoped key may
// call.
var scopedRoutes = map[string]bool{
	"GET /v1/info":       true,
	"GET /v1/sandboxes":  true, // filtered to what the key reaches
	"POST /v1/sandboxes": true, // confined by confineCreate
	"GET /v1/quota":      true, // the tenant's quotas: every key of the tenant reads them
}

// scopedClosed are the routes under /v1/sandboxes/{id} a scoped key may
// not call: they name another sandbox, snapshot or volume of the tenant
// that the key's scope does not cover.
var scopedClosed = map[string]bool{
	"POST /v1/sandboxes/{id}/fork":         true,
	"POST /v1/sandboxes/{id}/volumes":      true,
	"DELETE /v1/sandboxes/{id}/volumes":    true,
	"POST /v1/sandboxes/{id}/restore-path": true,
}

// routeAllows decides whether API key principal p may call the route
// "method path" (a path template): nil, or an error wrapping
// errs.ErrForbidden that says what the route needs.
func routeAllows(p Principal, method, path string) error {
	role := p.EffectiveRole()
	route := method + " " + path
	refuse := func(needs string) error {
		return fmt.Errorf("%s needs %s; this key's role is %s%s: %w", route, needs, role, scopeNote(p), errs.ErrForbidden)
	}
	switch {
	case path == "/v1/tenants" || strings.HasPrefix(path, "/v1/tenants/"),
		path == "/v1/nodes" || strings.HasPrefix(path, "/v1/nodes/"), // the cluster's machines
		path == "/v1/lost-copies",                                    // the nodes' kept copies of lost sandboxes
		adminRoutes[route]:
		if role != client.RoleAdmin || p.Scoped() {
			return refuse("an admin key")
		}
		return nil
	case path == "/v1/keys" || strings.HasPrefix(path, "/v1/keys/"),
		path == "/v1/audit" || strings.HasPrefix(path, "/v1/audit/"),
		budgetWrite(method, path):
		if !p.AdministersTenant() {
			return refuse("an unscoped tenant-admin or admin key")
		}
	}
	if role == client.RoleReadOnly {
		if (method != http.MethodGet && method != http.MethodHead) || path == "/v1/sandboxes/{id}/pty" {
			return refuse("a tenant-user key or above (read-only keys only read, and open no terminal)")
		}
	}
	if roleRank(role) == 0 {
		return refuse("a known role")
	}
	if p.Scoped() {
		if scopedRoutes[route] || (underSandbox(path) && !scopedClosed[route]) {
			return nil
		}
		return refuse("a key not limited to some sandboxes (a scoped key reaches /v1/sandboxes and its own sandboxes' routes)")
	}
	return nil
}

// budgetWrite reports whether the route changes a budget.
func budgetWrite(method, path string) bool {
	return (path == "/v1/budgets" || strings.HasPrefix(path, "/v1/budgets/")) && method != http.MethodGet && method != http.MethodHead
}

// scopeNote describes a key's scope for a refusal.
func scopeNote(p Principal) string {
	var parts []string
	if len(p.Sandboxes) > 0 {
		parts = append(parts, "sandboxes "+strings.Join(p.Sandboxes, ","))
	}
	if len(p.Labels) > 0 {
		parts = append(parts, "labels "+formatLabels(p.Labels))
	}
	if len(parts) == 0 {
		return ""
	}
	return ", limited to " + strings.Join(parts, " and ")
}

// formatLabels renders labels as k=v,k=v in key order.
func formatLabels(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		keys[i] = k + "=" + l[k]
	}
	return strings.Join(keys, ",")
}

// notReached is the one answer for a sandbox a scoped key does not reach,
// whether it is absent, another tenant's or out of the key's scope.
func notReached(id string) error {
	return fmt.Errorf("sandbox %s: %w (stead list shows the sandboxes this key reaches)", id, errs.ErrNotFound)
}

// authorize is the huma middleware that applies routeAllows to every
// request of an API key and, for a scoped key on a route under
// /v1/sandboxes/{id}, checks that the key reaches that sandbox.
func (s *server) authorize(ctx huma.Context, next func(huma.Context)) {
	p, ok := PrincipalFromContext(ctx.Context())
	if !ok || p.Sandbox != "" || ctx.Operation() == nil {
		next(ctx) // no key (unauthenticated routes), or a sandbox token: see sandboxScope
		return
	}
	op := ctx.Operation()
	err := routeAllows(p, op.Method, op.Path)
	if err == nil && p.Scoped() && underSandbox(op.Path) {
		err = s.checkReach(ctx.Context(), p, ctx.Param("id"))
	}
	if err != nil {
		r, w := humago.Unwrap(ctx)
		s.writeProblem(w, r, "authorize", err)
		return
	}
	next(ctx)
}

// checkReach returns nil when the scoped key p reaches sandbox id, else
// notReached(id) (or the lookup's own failure, which is not a 404).
func (s *server) checkReach(ctx context.Context, p Principal, id string) error {
	sb, err := s.b.GetSandbox(ctx, p.TenantID, id)
	switch {
	case errors.Is(err, errs.ErrNotFound):
		return notReached(id)
	case err != nil:
		return err
	case !p.Reaches(sb):
		return notReached(id)
	}
	return nil
}

// confineCreate applies a scoped key's scope to a create: a key limited to
// named sandboxes creates only those names; a label-scoped key's sandbox
// gets its labels (a different value for one of them is refused).
func confineCreate(p Principal, req *client.CreateSandboxRequest) error {
	if p.Sandbox != "" || !p.Scoped() {
		return nil
	}
	if len(p.Sandboxes) > 0 && !slices.Contains(p.Sandboxes, req.Name) {
		return fmt.Errorf("this key is limited to sandboxes %s: create one of those names (--name): %w",
			strings.Join(p.Sandboxes, ", "), errs.ErrForbidden)
	}
	if len(p.Labels) > 0 {
		if req.Labels == nil {
			req.Labels = map[string]string{}
		} else {
			req.Labels = copyLabels(req.Labels)
		}
		for k, v := range p.Labels {
			if got, ok := req.Labels[k]; ok && got != v {
				return fmt.Errorf("this key is limited to sandboxes labelled %s: label %s=%s is outside it: %w",
					formatLabels(p.Labels), k, got, errs.ErrForbidden)
			}
			req.Labels[k] = v
		}
	}
	return nil
}

// copyLabels returns a copy of m.
func copyLabels(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// filterReached keeps the sandboxes p reaches.
func filterReached(p Principal, list []client.Sandbox) []client.Sandbox {
	if !p.Scoped() && p.Sandbox == "" {
		return list
	}
	out := make([]client.Sandbox, 0, len(list))
	for _, sb := range list {
		if p.Reaches(sb) {
			out = append(out, sb)
		}
	}
	return out
}

// actingTenant applies the X-Stead-Tenant header of r to p: an admin key
// acts in the tenant it names (which must exist, when the backend knows
// tenants); any other key may name only its own tenant.
func (s *server) actingTenant(r *http.Request, p Principal) (Principal, error) {
	t := r.Header.Get(client.TenantHeader)
	if t == "" || t == p.TenantID {
		return p, nil
	}
	if p.Sandbox != "" || p.EffectiveRole() != client.RoleAdmin || p.Scoped() {
		return p, fmt.Errorf("only an admin key may act in another tenant (%s %s): %w", client.TenantHeader, t, errs.ErrForbidden)
	}
	if tb, ok := s.b.(TenantBackend); ok {
		if _, err := tb.GetTenant(r.Context(), t); err != nil {
			return p, fmt.Errorf("%s %s: %w", client.TenantHeader, t, err)
		}
	}
	p.TenantID = t
	return p, nil
}
