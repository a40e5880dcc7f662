package client

import "time"

// DaemonEvent is one entry of the daemon's event log: something that
// happened to a sandbox of the tenant (created, started, paused, resumed,
// stopped with its reason, archived, deleted, purged, a snapshot, a push, a
// restore, a drill, a network policy change ...). IDs only grow, per
// daemon, and are never reused: resume a stream after the last one seen.
type DaemonEvent struct {
	ID      int64     `json:"id" doc:"Position in the event log; resume after it (Last-Event-ID or after=)"`
	Time    time.Time `json:"time" doc:"When it happened (RFC 3339)"`
	Type    string    `json:"type" doc:"e.g. sandbox.created, sandbox.stopped, snapshot.created, backup.pushed"`
	Tenant  string    `json:"tenant" doc:"Id of the tenant that owns it"`
	Sandbox string    `json:"sandbox,omitempty" doc:"Id of the sandbox"`
	State   string    `json:"state,omitempty" doc:"The sandbox's state after a lifecycle event"`
	Reason  string    `json:"reason,omitempty" doc:"Why (a stop's reason: user, idle, crash ...)"`
	// Data holds the event's details (a snapshot id, bytes pushed ...).
	Data map[string]string `json:"data,omitempty" doc:"Data holds the event's details (a snapshot id, bytes pushed ...)."`
}

// DaemonEventPage is a page of the event log.
type DaemonEventPage struct {
	Events []DaemonEvent `json:"items" doc:"The page's events, by id (an empty array when there are none)"`
	// Next is the cursor of the following page (the last id returned, or
	// the request's after when the page is empty).
	Next int64 `json:"next" doc:"Next is the cursor of the following page (the last id returned, or the request's after when the page is empty)."`
	// More is true when the page was full: more events may follow at once.
	More bool `json:"more" doc:"More is true when the page was full: more events may follow at once."`
}

// EventQuery selects events of the caller's tenant.
type EventQuery struct {
	// After returns events with an id greater than this (0: from the
	// oldest kept).
	After int64
	// Types keeps events whose type starts with one of these prefixes
	// ("sandbox.", "snapshot.created").
	Types []string
	// Sandbox keeps one sandbox's events (its id).
	Sandbox string
	// Since keeps events at or after this time (zero: no limit).
	Since time.Time
	// Limit is the page size of ListDaemonEvents (default 100, at most 1000).
	Limit int
}

// CreateWebhookRequest subscribes a URL to the tenant's events.
type CreateWebhookRequest struct {
	URL string `json:"url" doc:"http:// or https:// URL the events are POSTed to; link-local and metadata addresses are refused, loopback unless the daemon allows it"`
	// Types are event type prefixes; empty means every event.
	Types []string `json:"types,omitempty" doc:"Event type prefixes to deliver (empty: every event)"`
	// Secret signs the deliveries; empty: the daemon generates one (shown
	// once, in the answer).
	Secret string `json:"secret,omitempty" doc:"HMAC-SHA256 key of the signatures (empty: generated and shown once)"`
	// After, when set, delivers the stored events with a greater id too
	// (a backfill); unset, the webhook starts after the newest stored event.
	After *int64 `json:"after,omitempty" doc:"Deliver events with an id above this (default: only events after the webhook is created)"`
}

// Webhook is a subscription of a URL to the tenant's events.
type Webhook struct {
	ID    string   `json:"id" doc:"Unique id"`
	URL   string   `json:"url" doc:"URL"`
	Types []string `json:"types,omitempty" doc:"Event type prefixes sent to the webhook (empty: all)"`
	// Secret is only set in the answer to the create call.
	Secret string `json:"secret,omitempty" doc:"Only in the answer to the create call"`
	// Cursor is the id of the last event handed to the webhook; events
	// after it are delivered in id order.
	Cursor    int64     `json:"cursor" doc:"Cursor is the id of the last event handed to the webhook; events after it are delivered in id order."`
	CreatedAt time.Time `json:"created_at" doc:"When it was created (RFC 3339)"`
	// LastDelivery is the newest attempt, if any.
	LastDelivery *WebhookDelivery `json:"last_delivery,omitempty" doc:"LastDelivery is the newest attempt, if any."`
}

// WebhookDelivery is one attempt to deliver one event to a webhook.
type WebhookDelivery struct {
	ID         int64     `json:"id" doc:"Unique id"`
	Webhook    string    `json:"webhook" doc:"Id of the webhook"`
	EventID    int64     `json:"event_id" doc:"Id of the event delivered"`
	EventType  string    `json:"event_type" doc:"Type of the event delivered"`
	Attempt    int       `json:"attempt" doc:"Attempt at this event, from 1"`
	Redelivery bool      `json:"redelivery,omitempty" doc:"Asked for through the API, outside the ordered stream"`
	Time       time.Time `json:"time" doc:"When it happened (RFC 3339)"`
	StatusCode int       `json:"status_code,omitempty" doc:"The receiver's HTTP status (absent when none came back)"`
	Error      string    `json:"error,omitempty" doc:"What went wrong, if anything"`
	DurationMS float64   `json:"duration_ms" doc:"How long the attempt took, in milliseconds"`
	OK         bool      `json:"ok" doc:"A 2xx answer"`
}
