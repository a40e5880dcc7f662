package api

import (
	"context"
	"io"

	"github.com/stead-dev/stead/client"
)

// AuditEvent is one state-changing API request as the audit middleware
// records it.
type AuditEvent struct {
	// Actor is the caller's API key id ("sandbox:<id>" for a
	// sandbox-scoped token without one).
	Actor string
	// Tenant is the caller's tenant.
	Tenant string
	// Action is the method and route pattern, e.g.
	// "POST /v1/sandboxes/{id}/stop" (method and path for a request no
	// route matched).
	Action string
	// Target is the {id} path value, or the id of the resource a 201
	// response created.
	Target string
	// Status is the HTTP status of the response.
	Status int
}

// AuditBackend serves the audit trail. NewHandler records every
// state-changing request (any method but GET, HEAD and OPTIONS) that passed
// authentication through RecordAPIRequest, and registers the /v1/audit
// routes, only when its Backend also implements this interface. The routes
// need an admin key (403 otherwise); the backend decides which tenants'
// entries p may read.
type AuditBackend interface {
	// RecordAPIRequest appends ev to the trail; when it returns nil the
	// entry is durable.
	RecordAPIRequest(ctx context.Context, ev AuditEvent) error
	// ListAudit returns the entries q selects that p may read, by seq.
	ListAudit(ctx context.Context, p Principal, q client.AuditQuery) ([]client.AuditEntry, error)
	// ExportAudit writes the entries q selects that p may read to w as
	// JSONL: one client.AuditEntry per line, by seq.
	ExportAudit(ctx context.Context, p Principal, q client.AuditQuery, w io.Writer) error
	// VerifyAudit checks the whole trail (every tenant's entries) and
	// reports the first seq found altered.
	VerifyAudit(ctx context.Context, p Principal) (client.AuditReport, error)
	// CheckpointAudit signs a checkpoint of the trail's head now.
	CheckpointAudit(ctx context.Context, p Principal) (client.AuditCheckpoint, error)
}
