package store

import (
	"context"
	"time"
)

// DaemonEvent is one entry of the event log: something that happened to a
// sandbox or a tenant (package events defines the types).
type DaemonEvent struct {
	// ID is assigned by AppendDaemonEvent.
	ID      int64
	Time    time.Time
	Type    string
	Tenant  string
	Sandbox string
	State   string
	Reason  string
	Data    map[string]string
}

// DaemonEventFilter selects events for ListDaemonEvents.
type DaemonEventFilter struct {
	// Tenant limits the result to one tenant ("": every tenant, for the
	// daemon's own use only).
	Tenant string
	// AfterID returns only events with ID > AfterID.
	AfterID int64
	// Types keeps events whose Type starts with one of these prefixes
	// (empty: every type).
	Types []string
	// Sandbox keeps the events of this sandbox id ("": all).
	Sandbox string
	// Since keeps events with Time >= Since (zero: no limit).
	Since time.Time
	// Limit caps the number of events (<= 0: no cap).
	Limit int
}

// Webhook is a tenant's subscription: events of its types are POSTed to
// URL, signed with Secret, in event id order.
type Webhook struct {
	ID       string
	TenantID string
	URL      string
	// Types are event type prefixes; empty means every event.
	Types []string
	// Secret is the HMAC key of the signatures. It is kept as given:
	// signing needs it (the API shows it once, at creation).
	Secret string
	// Cursor is the id of the last event handed to the webhook (delivered,
	// given up after retention, or skipped as not matching).
	Cursor    int64
	CreatedAt time.Time
}

// WebhookDelivery is one attempt to deliver one event to one webhook.
type WebhookDelivery struct {
	// ID is assigned by AddWebhookDelivery.
	ID        int64
	WebhookID string
	TenantID  string
	EventID   int64
	EventType string
	// Attempt counts the attempts at this event, from 1.
	Attempt int
	// Redelivery marks an attempt asked for through the API (outside the
	// ordered stream; the cursor does not move).
	Redelivery bool
	Time       time.Time
	// StatusCode is the receiver's HTTP status (0 when none came back).
	StatusCode int
	Error      string
	Duration   time.Duration
	// OK is a 2xx answer.
	OK bool
}

// SandboxEventWriter is implemented by a store that writes a sandbox
// record and the daemon event that tells of it in one transaction: both
// commit together, in one durable write, or neither does. The event gets
// its ID as AppendDaemonEvent would give it. open, when not nil, is a
// meter interval opened in the same transaction as OpenMeterInterval
// opens it (the one already open is kept): a sandbox that starts running
// and its metering commit in one write. events.ObserveStore uses it when
// the event log is kept in the same store.
type SandboxEventWriter interface {
	// CreateSandboxEvent is CreateSandbox that also appends e (and
	// opens open).
	CreateSandboxEvent(ctx context.Context, sb Sandbox, e DaemonEvent, open *MeterInterval) (Sandbox, DaemonEvent, error)
	// UpdateSandboxEvent is UpdateSandbox that also appends e (and
	// opens open).
	UpdateSandboxEvent(ctx context.Context, sb Sandbox, e DaemonEvent, open *MeterInterval) (Sandbox, DaemonEvent, error)
}

// EventStore keeps the event log, the webhooks and their delivery log.
//
// Contract, checked by storetest:
//   - AppendDaemonEvent assigns IDs that only grow and are never reused,
//     even after PruneDaemonEvents deleted the newest events; an event is
//     visible to ListDaemonEvents only after every event with a lower ID
//     that will ever be visible is (a follower reading "after N" never
//     misses a later commit of a lower id). Durable when it returns.
//   - An event with an empty Type or Tenant is errs.ErrInvalid.
//   - ListDaemonEvents is ordered by ID, ascending; Data, State, Reason
//     and Sandbox round-trip; times are UTC.
//   - PruneDaemonEvents deletes events older than before and, per tenant,
//     all but the newest keepPerTenant (0: no count limit); delivery rows
//     older than before go too. It returns the number of events deleted.
//   - CreateWebhook: an empty ID, URL or Secret is errs.ErrInvalid; a
//     taken ID errs.ErrConflict; an unknown tenant errs.ErrNotFound.
//     The webhook starts with the Cursor given.
//   - GetWebhook, DeleteWebhook and SetWebhookCursor answer errs.ErrNotFound
//     for an absent webhook and one of another tenant. DeleteWebhook also
//     deletes its deliveries.
//   - SetWebhookCursor only moves the cursor forward: a cursor below the
//     stored one is ignored (not an error).
//   - ListWebhooks is ordered by CreatedAt, then ID; tenant "" lists every
//     tenant's (daemon use).
//   - AddWebhookDelivery of an absent webhook is errs.ErrNotFound.
//     ListWebhookDeliveries returns the newest first, at most limit (<= 0:
//     100). GetWebhookDelivery is tenant-scoped like GetWebhook.
type EventStore interface {
	AppendDaemonEvent(ctx context.Context, e DaemonEvent) (DaemonEvent, error)
	ListDaemonEvents(ctx context.Context, f DaemonEventFilter) ([]DaemonEvent, error)
	// LastDaemonEventID returns the highest id ever assigned (0 when none
	// was), pruned events included.
	LastDaemonEventID(ctx context.Context) (int64, error)
	PruneDaemonEvents(ctx context.Context, before time.Time, keepPerTenant int) (int64, error)
	// PurgeTenantEvents deletes the tenant's events, webhooks and
	// deliveries in one transaction (a tenant's deletion); none is not an
	// error.
	PurgeTenantEvents(ctx context.Context, tenantID string) error

	CreateWebhook(ctx context.Context, w Webhook) (Webhook, error)
	GetWebhook(ctx context.Context, tenantID, id string) (Webhook, error)
	ListWebhooks(ctx context.Context, tenantID string) ([]Webhook, error)
	DeleteWebhook(ctx context.Context, tenantID, id string) error
	SetWebhookCursor(ctx context.Context, tenantID, id string, cursor int64) error

	AddWebhookDelivery(ctx context.Context, d WebhookDelivery) (WebhookDelivery, error)
	ListWebhookDeliveries(ctx context.Context, tenantID, webhookID string, limit int) ([]WebhookDelivery, error)
	GetWebhookDelivery(ctx context.Context, tenantID string, id int64) (WebhookDelivery, error)
}
