package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// EventBackend serves the tenant's event log (GET /v1/events, JSON pages
// or a live server-sent event stream) and its webhooks (/v1/webhooks).
// NewHandler registers these routes only when Options.Events is set.
//
// Every method gets the caller's tenant and treats another tenant's
// webhooks and deliveries as absent (errs.ErrNotFound).
type EventBackend interface {
	// ListEvents returns a page of the tenant's events that q selects, in
	// id order (Next: the last id returned, or q.After).
	ListEvents(ctx context.Context, tenant string, q client.EventQuery) (client.DaemonEventPage, error)
	// EventsChanged returns a channel closed when the next event is
	// stored. A follower takes it before ListEvents and waits on it only
	// after a short page, so no event falls between the two.
	EventsChanged() <-chan struct{}
	// CreateWebhook subscribes a URL (errs.ErrInvalid for a URL the daemon
	// refuses to post to; errs.ErrQuota past the tenant's limit). The
	// answer holds the secret, shown this once.
	CreateWebhook(ctx context.Context, tenant string, req client.CreateWebhookRequest) (client.Webhook, error)
	ListWebhooks(ctx context.Context, tenant string) ([]client.Webhook, error)
	GetWebhook(ctx context.Context, tenant, id string) (client.Webhook, error)
	// DeleteWebhook removes the webhook and its delivery log.
	DeleteWebhook(ctx context.Context, tenant, id string) error
	// ListWebhookDeliveries returns the webhook's newest attempts first.
	ListWebhookDeliveries(ctx context.Context, tenant, id string, limit int) ([]client.WebhookDelivery, error)
	// RedeliverWebhook sends a past delivery's event again, now, once.
	RedeliverWebhook(ctx context.Context, tenant string, delivery int64) (client.WebhookDelivery, error)
}

// eventKeepAlive is how often an idle event stream gets a comment line.
const eventKeepAlive = 15 * time.Second

// EventListInput is the query of GET /v1/events (exported only because
// huma ignores unexported embedded fields).
type EventListInput struct {
	After       int64  `query:"after" minimum:"0" doc:"Only events with a greater id (0: from the oldest kept)"`
	LastEventID string `header:"Last-Event-ID" doc:"SSE reconnection: resume after this id (overrides after)"`
	Type        string `query:"type" doc:"Comma-separated type prefixes, e.g. sandbox.,snapshot.created (empty: every type)"`
	Sandbox     string `query:"sandbox" doc:"Only this sandbox's events (id or name)"`
	Since       string `query:"since" doc:"Only events at or after this time (RFC 3339)"`
	Limit       int    `query:"limit" minimum:"0" maximum:"1000" doc:"Page size (default 100); ignored when streaming"`
	Follow      bool   `query:"follow" doc:"Stream as server-sent events (also with Accept: text/event-stream)"`
	Accept      string `header:"Accept" doc:"text/event-stream for a live stream of events; anything else for a page of them"`
}

// query turns the input into a client.EventQuery for the tenant.
func (s *server) eventQuery(ctx context.Context, tenant string, in *EventListInput) (client.EventQuery, error) {
	q := client.EventQuery{After: in.After, Sandbox: in.Sandbox, Limit: in.Limit}
	if h := strings.TrimSpace(in.LastEventID); h != "" {
		v, err := strconv.ParseInt(h, 10, 64)
		if err != nil || v < 0 {
			return q, fmt.Errorf("Last-Event-ID %q: want an event id: %w", h, errs.ErrInvalid)
		}
		q.After = v
	}
	for _, t := range strings.Split(in.Type, ",") {
		if t = strings.TrimSpace(t); t != "" {
			q.Types = append(q.Types, t)
		}
	}
	if in.Since != "" {
		t, err := time.Parse(time.RFC3339Nano, in.Since)
		if err != nil {
			return q, fmt.Errorf("since %q is not an RFC 3339 time: %w", in.Since, errs.ErrInvalid)
		}
		q.Since = t
	}
	if q.Sandbox != "" {
		// A name resolves to its id; a purged sandbox's id is kept as given.
		if sb, err := s.b.GetSandbox(ctx, tenant, q.Sandbox); err == nil {
			q.Sandbox = sb.ID
		}
	}
	return q, nil
}

// WebhookRef is the path of a webhook route (exported only because huma
// ignores unexported embedded fields).
type WebhookRef struct {
	ID string `path:"id" doc:"Webhook id"`
}

// registerEvents adds GET /v1/events and the /v1/webhooks routes.
func (s *server) registerEvents(eb EventBackend) {
	const tag = "events"
	le := s.op(http.MethodGet, "/v1/events", "list-daemon-events", "Read the tenant's event log; stream it live (SSE)", tag, http.StatusOK)
	le.Description = "The event log holds what happened to the tenant's sandboxes: lifecycle (sandbox.created, .started, .paused, " +
		".resumed, .stopped with its reason, .archived, .deleted, .undeleted, .purged, .error), snapshot.created/.deleted, " +
		"sandbox.forked, sandbox.rolled_back, sandbox.hydrated, backup.pushed/.pulled/.restored, drill.finished, " +
		"sandbox.network_policy. Ids only grow and are never reused. " +
		"Without follow: a page of at most limit events with id > after. With follow=true or Accept: text/event-stream: every " +
		"event with id > after (or > Last-Event-ID), then each new one as it is stored, never skipping one between the two; " +
		"each message has id: the event id and data: the event as JSON; comment lines every 15 s keep the connection alive. " +
		"Events are kept for the daemon's retention (7 days by default)."
	le.Responses = map[string]*huma.Response{
		"200": {
			Description: "A page of events (JSON), or an event stream",
			Content: map[string]*huma.MediaType{
				"application/json":  {Schema: s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[client.DaemonEventPage](), true, "")},
				"text/event-stream": {Schema: s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[client.DaemonEvent](), true, "")},
			},
		},
	}
	huma.Register(s.api, le, func(ctx context.Context, in *EventListInput) (*huma.StreamResponse, error) {
		const op = "list events"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		q, err := s.eventQuery(ctx, p.TenantID, in)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if !in.Follow && !wantsSSE(in.Accept) {
			page, err := eb.ListEvents(ctx, p.TenantID, q)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return &huma.StreamResponse{Body: func(hc huma.Context) {
				_, w := humago.Unwrap(hc)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				_ = json.NewEncoder(w).Encode(page)
			}}, nil
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			r, w := humago.Unwrap(hc)
			if err := s.streamEvents(r.Context(), w, eb, p.TenantID, q, eventKeepAlive); err != nil && r.Context().Err() == nil {
				s.log.Log(r.Context(), logLevelFor(err), "stream events", "tenant", p.TenantID, "err", err)
			}
		}}, nil
	})

	cw := s.op(http.MethodPost, "/v1/webhooks", "create-webhook", "Subscribe a URL to the tenant's events (webhook)", tag, http.StatusCreated)
	cw.Description = "Each matching event is POSTed as JSON (a DaemonEvent) with the headers Stead-Event-Id, Stead-Event-Type, " +
		"Stead-Webhook-Id and Stead-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\" keyed with the secret>. " +
		"A 2xx is success. Events are delivered in id order, at least once: a failed attempt is retried with exponential " +
		"backoff (capped, with jitter) until it succeeds, and later events wait for it, so a receiver that was down gets " +
		"every event after it recovers, in order (deduplicate by Stead-Event-Id). Every attempt is in the delivery log. " +
		"Link-local and cloud metadata addresses are refused, and loopback and the host's own addresses unless the daemon " +
		"runs with --webhook-allow-loopback; redirects are not followed. The secret is shown only in this answer."
	cw.Errors = append(cw.Errors, http.StatusInsufficientStorage)
	huma.Register(s.api, cw, func(ctx context.Context, in *struct {
		Body client.CreateWebhookRequest
	}) (*out[client.Webhook], error) {
		const op = "create webhook"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		w, err := eb.CreateWebhook(ctx, p.TenantID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Webhook]{Body: w}, nil
	})

	huma.Register(s.api, s.op(http.MethodGet, "/v1/webhooks", "list-webhooks", "List the tenant's webhooks", tag, 0),
		func(ctx context.Context, in *struct{ PageQuery }) (*out[client.Page[client.Webhook]], error) {
			const op = "list webhooks"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			ws, err := eb.ListWebhooks(ctx, p.TenantID)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return pageOf(ws, in.PageQuery)
		})

	huma.Register(s.api, s.op(http.MethodGet, "/v1/webhooks/{id}", "get-webhook", "Describe a webhook", tag, 0),
		func(ctx context.Context, in *WebhookRef) (*out[client.Webhook], error) {
			const op = "get webhook"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			w, err := eb.GetWebhook(ctx, p.TenantID, in.ID)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return &out[client.Webhook]{Body: w}, nil
		})

	huma.Register(s.api, s.op(http.MethodDelete, "/v1/webhooks/{id}", "delete-webhook", "Remove a webhook and its delivery log", tag, http.StatusNoContent),
		func(ctx context.Context, in *WebhookRef) (*struct{}, error) {
			const op = "delete webhook"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			if err := eb.DeleteWebhook(ctx, p.TenantID, in.ID); err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return nil, nil
		})

	huma.Register(s.api, s.op(http.MethodGet, "/v1/webhooks/{id}/deliveries", "list-webhook-deliveries",
		"A webhook's delivery log, newest attempt first (the newest 1000 attempts)", tag, 0),
		func(ctx context.Context, in *struct {
			WebhookRef
			PageQuery
		}) (*out[client.Page[client.WebhookDelivery]], error) {
			const op = "list webhook deliveries"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			// The newest maxDeliveriesListed attempts, paged.
			ds, err := eb.ListWebhookDeliveries(ctx, p.TenantID, in.ID, maxDeliveriesListed)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return pageOf(ds, in.PageQuery)
		})

	rd := s.op(http.MethodPost, "/v1/webhooks/deliveries/{delivery}/redeliver", "redeliver-webhook",
		"Send a past delivery's event to its webhook again, now", tag, 0)
	rd.Description = "One attempt, recorded in the delivery log with redelivery set; the answer says whether the receiver " +
		"accepted it. The webhook's ordered stream is not affected. An event that retention deleted answers 404."
	huma.Register(s.api, rd, func(ctx context.Context, in *struct {
		Delivery int64 `path:"delivery" doc:"Delivery id (stead webhook deliveries WEBHOOK)"`
	}) (*out[client.WebhookDelivery], error) {
		const op = "redeliver webhook"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		d, err := eb.RedeliverWebhook(ctx, p.TenantID, in.Delivery)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.WebhookDelivery]{Body: d}, nil
	})
}

// streamEvents writes the events q selects as server-sent events: the
// stored ones after q.After, then each new one, until ctx ends; a comment
// line every keepAlive while nothing happens.
func (s *server) streamEvents(ctx context.Context, w http.ResponseWriter, eb EventBackend, tenant string, q client.EventQuery, keepAlive time.Duration) error {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	ticker := time.NewTicker(keepAlive)
	defer ticker.Stop()
	q.Limit = 500
	for {
		wake := eb.EventsChanged() // before reading: nothing stored after the read is missed
		page, err := eb.ListEvents(ctx, tenant, q)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return writeSSE(w, rc, "error", "", map[string]string{"error": err.Error()})
		}
		for _, e := range page.Events {
			if err := writeSSE(w, rc, "", strconv.FormatInt(e.ID, 10), e); err != nil {
				return err
			}
		}
		q.After = page.Next
		if page.More {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-ticker.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return fmt.Errorf("write keep-alive: %w", err)
			}
			if err := rc.Flush(); err != nil {
				return fmt.Errorf("flush: %w", err)
			}
		}
	}
}

// maxDeliveriesListed is how many of a webhook's newest delivery attempts
// its delivery log lists.
const maxDeliveriesListed = 1000
