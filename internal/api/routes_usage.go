package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// UsageBackend reports metered usage. NewHandler registers GET /v1/usage
// only when Options.Usage is set.
type UsageBackend interface {
	// Report returns tenant's usage for q (q.Tenant is ignored: the API
	// has resolved it into tenant). An unknown sandbox, or another
	// tenant's, is errs.ErrNotFound; a bad By or an empty period
	// errs.ErrInvalid.
	Report(ctx context.Context, tenant string, q client.UsageQuery) (client.UsageReport, error)
}

// parseUsageTime reads a date (YYYY-MM-DD, UTC midnight) or an RFC 3339
// time; "" is the zero time.
func parseUsageTime(field, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q: want YYYY-MM-DD or an RFC 3339 time: %w", field, v, errs.ErrInvalid)
	}
	return t.UTC(), nil
}

// registerUsage adds GET /v1/usage.
func (s *server) registerUsage(b UsageBackend) {
	o := s.op(http.MethodGet, "/v1/usage", "get-usage", "Metered usage and its cost", "usage", 0)
	o.Description = "What the tenant's sandboxes used and cost: running seconds by instance type (never while paused " +
		"or stopped), memory GiB-seconds, storage GB-hours (pool, local snapshots, repository), priced with the " +
		"daemon's prices; per day or per sandbox with ?by=. always_on compares it with what the tenant would have " +
		"paid had every sandbox run its whole life (auto-stop's saving, in %). An admin key may ask for another " +
		"tenant with ?tenant=; any other key gets 403 for a tenant not its own."
	o.Errors = append(o.Errors, http.StatusForbidden)
	huma.Register(s.api, o, func(ctx context.Context, in *struct {
		By      string `query:"by" enum:"day,sandbox," doc:"Group rows by day or by sandbox (default: the total only)"`
		Since   string `query:"since" doc:"Start: YYYY-MM-DD or RFC 3339 (default: the first of this month, UTC)"`
		Until   string `query:"until" doc:"End: YYYY-MM-DD or RFC 3339 (default: now)"`
		Sandbox string `query:"sandbox" doc:"One sandbox (id or name)"`
		Tenant  string `query:"tenant" doc:"Admins only: the tenant to report on"`
	}) (*out[client.UsageReport], error) {
		const op = "usage"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		tenant := p.TenantID
		if in.Tenant != "" && in.Tenant != p.TenantID {
			if !p.Admin {
				return nil, s.fail(ctx, op, fmt.Errorf("the usage of tenant %s: only an admin key may ask for another tenant: %w", in.Tenant, errs.ErrForbidden))
			}
			tenant = in.Tenant
		}
		q := client.UsageQuery{By: strings.TrimSpace(in.By), Sandbox: in.Sandbox, Tenant: tenant}
		if q.Since, err = parseUsageTime("since", in.Since); err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if q.Until, err = parseUsageTime("until", in.Until); err != nil {
			return nil, s.fail(ctx, op, err)
		}
		r, err := b.Report(ctx, tenant, q)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.UsageReport]{Body: r}, nil
	})
}
