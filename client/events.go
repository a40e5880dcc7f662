package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// eventValues encodes q as the query of GET /v1/events.
func eventValues(q EventQuery) url.Values {
	v := url.Values{}
	if q.After > 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	if len(q.Types) > 0 {
		v.Set("type", strings.Join(q.Types, ","))
	}
	if q.Sandbox != "" {
		v.Set("sandbox", q.Sandbox)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// ListDaemonEvents returns one page of the tenant's event log: the events
// q selects with an id above q.After, oldest first. Page on with
// q.After = page.Next while page.More.
func (c *Client) ListDaemonEvents(ctx context.Context, q EventQuery) (DaemonEventPage, error) {
	var page DaemonEventPage
	err := c.do(ctx, http.MethodGet, "/v1/events", eventValues(q), nil, &page)
	return page, err
}

// FollowDaemonEvents opens one event stream (GET /v1/events as
// server-sent events): every event q selects with an id above q.After, then
// each new one as it happens, to fn in id order. It returns when fn
// returns an error (returned as is), ctx ends (ctx.Err() wrapped) or the
// connection breaks. StreamDaemonEvents reconnects on its own.
func (c *Client) FollowDaemonEvents(ctx context.Context, q EventQuery, fn func(DaemonEvent) error) error {
	// The daemon writes a keep-alive every 15 s: a stream silent for
	// eventStreamIdle is dead (a peer gone without a reset) and is closed.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := c.send(sctx, request{method: http.MethodGet, path: "/v1/events", query: eventValues(q), accept: "text/event-stream"})
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	idle := time.AfterFunc(eventStreamIdle, cancel)
	defer idle.Stop()
	body := &idleReader{r: resp.Body, t: idle}
	err = readSSE(body, func(event string, data []byte) (bool, error) {
		switch event {
		case "message":
			var e DaemonEvent
			if err := json.Unmarshal(data, &e); err != nil {
				return false, fmt.Errorf("decode event: %w", err)
			}
			return false, fn(e)
		case "error":
			var p struct {
				Error string `json:"error" doc:"What went wrong, if anything"`
			}
			_ = json.Unmarshal(data, &p)
			return false, fmt.Errorf("event stream: %s", p.Error)
		}
		return false, nil
	})
	if ctx.Err() != nil {
		return fmt.Errorf("follow events: %w", ctx.Err())
	}
	if sctx.Err() != nil {
		return fmt.Errorf("follow events: nothing from the daemon for %s, not even a keep-alive: %w", eventStreamIdle, io.ErrUnexpectedEOF)
	}
	if errors.Is(err, errStreamEnded) {
		return fmt.Errorf("follow events: the daemon closed the stream: %w", io.ErrUnexpectedEOF)
	}
	return err
}

// eventStreamIdle is how long an event stream may stay silent (three of
// the daemon's keep-alives) before the client gives it up.
const eventStreamIdle = 45 * time.Second

// idleReader pushes its timer back on every read that returns data.
type idleReader struct {
	r io.Reader
	t *time.Timer
}

// Read implements io.Reader.
func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	if n > 0 {
		ir.t.Reset(eventStreamIdle)
	}
	return n, err
}

// errStop ends a stream when the consumer of StreamDaemonEvents stops.
var errStop = errors.New("stop")

// StreamDaemonEvents is a reconnecting event stream: it yields every event
// q selects with an id above q.After, then the new ones as they happen, in
// id order, and when the connection breaks (a daemon restart, a network
// blip) it reconnects after the last id it yielded, waiting from 0.5 s up
// to 10 s between attempts, so no event is skipped or repeated. It ends
// when ctx ends or the loop breaks (no error yielded), or with one error
// when the daemon refuses the request (a 4xx: a bad key, a bad filter).
func (c *Client) StreamDaemonEvents(ctx context.Context, q EventQuery) iter.Seq2[DaemonEvent, error] {
	return func(yield func(DaemonEvent, error) bool) {
		wait := 500 * time.Millisecond
		for {
			stopped := false
			err := c.FollowDaemonEvents(ctx, q, func(e DaemonEvent) error {
				q.After = e.ID
				wait = 500 * time.Millisecond
				if !yield(e, nil) {
					stopped = true
					return errStop
				}
				return nil
			})
			if stopped || ctx.Err() != nil {
				return
			}
			if code := StatusCode(err); code >= 400 && code < 500 {
				yield(DaemonEvent{}, err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 10*time.Second)
		}
	}
}

// CreateWebhook subscribes a URL to the tenant's events. The answer holds
// the secret (generated when req.Secret is empty): it is shown this once.
func (c *Client) CreateWebhook(ctx context.Context, req CreateWebhookRequest) (Webhook, error) {
	var w Webhook
	err := c.do(ctx, http.MethodPost, "/v1/webhooks", nil, req, &w)
	return w, err
}

// ListWebhooks lists the tenant's webhooks.
func (c *Client) ListWebhooks(ctx context.Context) ([]Webhook, error) {
	ws, err := listAll[Webhook](ctx, c, "/v1/webhooks", nil)
	return ws, err
}

// GetWebhook describes one webhook.
func (c *Client) GetWebhook(ctx context.Context, id string) (Webhook, error) {
	var w Webhook
	err := c.do(ctx, http.MethodGet, "/v1/webhooks/"+url.PathEscape(id), nil, nil, &w)
	return w, err
}

// DeleteWebhook removes a webhook and its delivery log; nothing more is
// sent to it.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/webhooks/"+url.PathEscape(id), nil, nil, nil)
}

// ListWebhookDeliveries returns a webhook's newest delivery attempts first
// (limit <= 0: 100).
func (c *Client) ListWebhookDeliveries(ctx context.Context, webhook string, limit int) ([]WebhookDelivery, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	page, err := listPage[WebhookDelivery](ctx, c, "/v1/webhooks/"+url.PathEscape(webhook)+"/deliveries", q)
	return page.Items, err
}

// RedeliverWebhook sends the event of a past delivery to its webhook again,
// now, and returns the new attempt (its OK says whether it was accepted).
// The ordered stream of the webhook is not affected.
func (c *Client) RedeliverWebhook(ctx context.Context, delivery int64) (WebhookDelivery, error) {
	var d WebhookDelivery
	err := c.do(ctx, http.MethodPost, "/v1/webhooks/deliveries/"+strconv.FormatInt(delivery, 10)+"/redeliver", nil, nil, &d)
	return d, err
}
