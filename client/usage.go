package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Usage returns metered usage and its cost (GET /v1/usage): running
// seconds by instance type, memory GiB-seconds, storage GB-hours, per day
// or per sandbox (q.By), with what always-on would have cost beside it.
// q.Tenant asks for another tenant (admin keys only).
func (c *Client) Usage(ctx context.Context, q UsageQuery) (UsageReport, error) {
	v := url.Values{}
	if q.By != "" {
		v.Set("by", q.By)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339))
	}
	if q.Sandbox != "" {
		v.Set("sandbox", q.Sandbox)
	}
	if q.Tenant != "" {
		v.Set("tenant", q.Tenant)
	}
	var r UsageReport
	err := c.do(ctx, http.MethodGet, "/v1/usage", v, nil, &r)
	return r, err
}
