package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// retentionIntro opens the description of every retention route.
const retentionIntro = "A tenant's retention policy says when the daemon acts on its own on old sandboxes and volumes. " +
	"Durations are written like 14d, 36h, 1d12h or 90m (a day is 24 hours); an unset field takes the daemon's default. " +
	"archive_stopped_after (default 7d; 0: never) archives a sandbox stopped that long (its files move to the repository, " +
	"nothing is deleted; needs a repository); it is the default of each sandbox's own backup-policy archive_after, and a " +
	"sandbox that set its own keeps it. delete_archived_after (default never) soft-deletes a sandbox archived that long; " +
	"its pushes stay in the repository. purge_deleted_after (default the daemon's --delete-retention, 30d; never 0) purges a " +
	"sandbox or volume soft-deleted that long, counted from its deletion, so a change applies to what is already deleted. " +
	"Purging a sandbox frees its local data and its record; the pushes of an archived one stay in the tenant's repository " +
	"(stead restore still reads them) until they are forgotten or the tenant is deleted; purging a volume erases its pushes. " +
	"warn_before (default the daemon's --retention-warn-before, 3d): before any automatic soft-delete or purge the daemon " +
	"emits one retention.warning event (data: action, subject, due time) and logs it, and acts only once the deletion is due " +
	"and its warning is at least warn_before old: a warning given late (the daemon was down) postpones the deletion. " +
	"An undelete or a start in between cancels it. Every automatic deletion is written to the audit trail before it happens. "

// registerRetention adds GET /v1/retention (the caller's own tenant) and
// GET/PUT /v1/tenants/{tenant}/retention (admin keys only, see authz.go).
func (s *server) registerRetention(b RetentionBackend) {
	const tag = "retention"

	own := s.op(http.MethodGet, "/v1/retention", "get-retention", "Show the retention policy of the caller's tenant", tag, 0)
	own.Description = retentionIntro + "Shows the values the tenant set and the effective ones, defaults filled in."
	huma.Register(s.api, own, func(ctx context.Context, _ *struct{}) (*out[client.TenantRetention], error) {
		const op = "get retention"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		r, err := b.GetRetention(ctx, p.TenantID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.TenantRetention]{Body: r}, nil
	})

	get := s.op(http.MethodGet, "/v1/tenants/{tenant}/retention", "get-tenant-retention", "Show a tenant's retention policy (admin keys only)", tag, 0)
	get.Description = retentionIntro
	huma.Register(s.api, get, func(ctx context.Context, in *TenantRef) (*out[client.TenantRetention], error) {
		r, err := b.GetRetention(ctx, in.Tenant)
		if err != nil {
			return nil, s.fail(ctx, "get tenant retention", err)
		}
		return &out[client.TenantRetention]{Body: r}, nil
	})

	set := s.op(http.MethodPut, "/v1/tenants/{tenant}/retention", "set-tenant-retention", "Set a tenant's retention policy (admin keys only)", tag, 0)
	set.Description = retentionIntro + "Replaces the policy as a whole: a field left out is unset. A bad value is a 400 " +
		"that names the field and changes nothing."
	huma.Register(s.api, set, func(ctx context.Context, in *struct {
		TenantRef
		Body client.RetentionPolicy
	}) (*out[client.TenantRetention], error) {
		r, err := b.SetRetention(ctx, in.Tenant, in.Body)
		if err != nil {
			return nil, s.fail(ctx, "set tenant retention", err)
		}
		return &out[client.TenantRetention]{Body: r}, nil
	})
}
