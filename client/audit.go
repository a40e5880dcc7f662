package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// auditValues encodes q as a query string.
func auditValues(q AuditQuery, withLimit bool) url.Values {
	v := url.Values{}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	if q.After > 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	if withLimit && q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// ListAudit returns one page of audit trail entries, by seq (needs an
// admin key). Page with q.After set to the last seq seen.
func (c *Client) ListAudit(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	page, err := listPage[AuditEntry](ctx, c, "/v1/audit", auditValues(q, true))
	return page.Items, err
}

// ExportAudit streams the audit trail entries q selects to w as JSON Lines,
// one AuditEntry per line (needs an admin key).
func (c *Client) ExportAudit(ctx context.Context, q AuditQuery, w io.Writer) error {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/v1/audit/export",
		query: auditValues(q, false), accept: "application/jsonl"})
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("export audit trail: %w", err)
	}
	return nil
}

// VerifyAudit has the daemon check the whole audit trail. A trail found
// altered is not an error: the report says so (OK false, BadSeq, Problem).
func (c *Client) VerifyAudit(ctx context.Context) (AuditReport, error) {
	var rep AuditReport
	err := c.do(ctx, http.MethodGet, "/v1/audit/verify", nil, nil, &rep)
	return rep, err
}

// CheckpointAudit has the daemon sign a checkpoint of the audit trail's
// head now.
func (c *Client) CheckpointAudit(ctx context.Context) (AuditCheckpoint, error) {
	var cp AuditCheckpoint
	err := c.do(ctx, http.MethodPost, "/v1/audit/checkpoints", nil, nil, &cp)
	return cp, err
}
