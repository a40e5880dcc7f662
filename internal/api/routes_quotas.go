package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// quotaIntro opens the description of every quota route.
const quotaIntro = "A tenant's quotas bound what it holds: running_sandboxes (running or paused), cpus and memory_bytes " +
	"(of those sandboxes together), disk_bytes (disk quotas of live sandboxes plus sizes of live volumes), volumes, " +
	"snapshots (local) and repository_bytes (what its pushes keep in the repository). An operation that would exceed " +
	"one is refused with 429 and changes nothing; the problem document names the quota, the limit, the usage and the " +
	"request (members quota, limit, usage, requested). A zero or absent limit is no limit. A limit below the usage is " +
	"accepted: it refuses further growth only, and stops or deletes nothing. "

// QuotaProblem is the problem document of a quota refusal (HTTP 429): the
// RFC 9457 members and the quota's own (exported only for huma's schema).
type QuotaProblem struct {
	*huma.ErrorModel
	Quota     string  `json:"quota" doc:"The quota that refused the request"`
	Limit     float64 `json:"limit" doc:"The tenant's limit"`
	Usage     float64 `json:"usage" doc:"What the tenant holds now"`
	Requested float64 `json:"requested" doc:"What the request would have added (0 for a push: refused once the usage reaches the limit)"`
}

// quotaProblem is the 429 answer to a quota refusal: the problem document
// with the quota's members.
func quotaProblem(m *huma.ErrorModel, qe *errs.QuotaError) error {
	return &QuotaProblem{ErrorModel: m, Quota: qe.Quota, Limit: qe.Limit, Usage: qe.Usage, Requested: qe.Requested}
}

// registerQuotas adds GET /v1/quota and the admins' /v1/tenants/{tenant}/quotas.
func (s *server) registerQuotas(b QuotaBackend) {
	const tag = "quotas"

	own := s.op(http.MethodGet, "/v1/quota", "get-own-quota", "The caller's tenant's quotas with its usage", tag, 0)
	own.Description = quotaIntro + "Any key of the tenant may read them."
	huma.Register(s.api, own, func(ctx context.Context, _ *struct{}) (*out[client.TenantQuotas], error) {
		const op = "get quota"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		q, err := b.TenantQuotas(ctx, p.TenantID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.TenantQuotas]{Body: q}, nil
	})

	get := s.op(http.MethodGet, "/v1/tenants/{tenant}/quotas", "get-tenant-quotas", "A tenant's quotas with its usage (admin keys only)", tag, 0)
	get.Description = quotaIntro
	huma.Register(s.api, get, func(ctx context.Context, in *TenantRef) (*out[client.TenantQuotas], error) {
		q, err := b.TenantQuotas(ctx, in.Tenant)
		if err != nil {
			return nil, s.fail(ctx, "get tenant quotas", err)
		}
		return &out[client.TenantQuotas]{Body: q}, nil
	})

	set := s.op(http.MethodPut, "/v1/tenants/{tenant}/quotas", "set-tenant-quotas", "Set some of a tenant's quotas (admin keys only)", tag, 0)
	set.Description = quotaIntro + "A partial update: a field the body leaves out (or sets to null) keeps its limit; " +
		"0 clears it (no limit). A negative limit is refused (400 or 422) and changes nothing. The answer is the " +
		"quotas with the usage."
	huma.Register(s.api, set, func(ctx context.Context, in *struct {
		TenantRef
		Body client.SetQuotasRequest
	}) (*out[client.TenantQuotas], error) {
		q, err := b.SetTenantQuotas(ctx, in.Tenant, in.Body)
		if err != nil {
			return nil, s.fail(ctx, "set tenant quotas", err)
		}
		return &out[client.TenantQuotas]{Body: q}, nil
	})
}
