package events

import (
	"bytes"
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Webhook delivery, in order and at least once.
//
// Each webhook has one worker. It reads the tenant's events after the
// webhook's stored cursor, in id order, and POSTs each matching one; it
// moves to the next event only after a 2xx, retrying the same event with
// exponential backoff (MinBackoff doubling up to MaxBackoff, each wait
// drawn at random from its upper half) for as long as it takes. After each
// 2xx it stores the cursor (fsync'd). So a receiver that is down, answers
// 5xx or times out for a while gets every event after it recovers, in
// order; a crash between the 2xx and the cursor write sends that one event
// again (at least once: receivers deduplicate by Stead-Event-Id). Events
// older than the retention are deleted even if a webhook has not had them:
// a receiver down longer than the retention misses them. Events that do not
// match the webhook's types move the cursor without a delivery.

// maxWebhooksPerTenant bounds what one tenant makes the daemon do.
const maxWebhooksPerTenant = 20

// superviseWebhooks keeps one worker per stored webhook until ctx ends.
func (h *Hub) superviseWebhooks(ctx context.Context) {
	workers := map[string]context.CancelFunc{}
	defer func() {
		for _, cancel := range workers {
			cancel()
		}
	}()
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		hooks, err := h.st.ListWebhooks(ctx, "")
		if err != nil && ctx.Err() == nil {
			h.log.Warn("list webhooks", "err", err)
		}
		if err == nil {
			live := map[string]bool{}
			for _, w := range hooks {
				live[w.ID] = true
				if workers[w.ID] == nil {
					wctx, cancel := context.WithCancel(ctx)
					workers[w.ID] = cancel
					go h.deliverLoop(wctx, w)
				}
			}
			for id, cancel := range workers {
				if !live[id] {
					cancel()
					delete(workers, id)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-h.reload:
		case <-t.C:
		}
	}
}

// matches reports whether an event type is one of the prefixes (all when
// there are none).
func matches(prefixes []string, typ string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(typ, p) {
			return true
		}
	}
	return false
}

// deliverLoop is the worker of webhook w.
func (h *Hub) deliverLoop(ctx context.Context, w store.Webhook) {
	cursor := w.Cursor
	for ctx.Err() == nil {
		wake := h.Changed()
		es, err := h.st.ListDaemonEvents(ctx, store.DaemonEventFilter{Tenant: w.TenantID, AfterID: cursor, Limit: 100})
		if err != nil {
			if ctx.Err() == nil {
				h.log.Warn("read events for a webhook", "webhook", w.ID, "tenant", w.TenantID, "err", err)
			}
			sleep(ctx, h.opts.MinBackoff)
			continue
		}
		for _, e := range es {
			if matches(w.Types, e.Type) && !h.deliverUntilOK(ctx, w, e) {
				return // ctx ended
			}
			cursor = e.ID
			if matches(w.Types, e.Type) || e.ID == es[len(es)-1].ID {
				h.storeCursor(ctx, w, cursor)
			}
		}
		if len(es) == 100 {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
	}
}

// storeCursor records that the webhook has had every event up to cursor.
func (h *Hub) storeCursor(ctx context.Context, w store.Webhook, cursor int64) {
	if err := h.st.SetWebhookCursor(context.WithoutCancel(ctx), w.TenantID, w.ID, cursor); err != nil && !errors.Is(err, errs.ErrNotFound) {
		h.log.Warn("store a webhook's cursor (the event may be sent again)", "webhook", w.ID, "cursor", cursor, "err", err)
	}
}

// deliverUntilOK sends e to w until a 2xx; false when ctx ended first.
func (h *Hub) deliverUntilOK(ctx context.Context, w store.Webhook, e store.DaemonEvent) bool {
	for attempt := 1; ; attempt++ {
		d := h.deliver(ctx, w, e, attempt, false)
		if d.OK {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		wait := h.backoff(attempt)
		h.log.Info("webhook delivery failed; retrying", "webhook", w.ID, "tenant", w.TenantID, "event", e.ID,
			"attempt", attempt, "status", d.StatusCode, "err", d.Error, "retry_in", wait.Round(time.Millisecond))
		if !sleep(ctx, wait) {
			return false
		}
	}
}

// backoff is the wait after the attempt-th failure: MinBackoff doubled
// per failure up to MaxBackoff, drawn at random from its upper half.
func (h *Hub) backoff(attempt int) time.Duration {
	d := h.opts.MaxBackoff
	if attempt < 40 {
		d = min(h.opts.MinBackoff<<(attempt-1), h.opts.MaxBackoff)
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits d or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// deliver makes one attempt and records it in the delivery log.
func (h *Hub) deliver(ctx context.Context, w store.Webhook, e store.DaemonEvent, attempt int, redelivery bool) store.WebhookDelivery {
	d := store.WebhookDelivery{WebhookID: w.ID, TenantID: w.TenantID, EventID: e.ID, EventType: e.Type, Attempt: attempt,
		Redelivery: redelivery, Time: h.opts.Now()}
	start := time.Now()
	d.StatusCode, d.Error = h.post(ctx, w, e)
	d.Duration = time.Since(start)
	d.OK = d.Error == ""
	if ctx.Err() != nil && !d.OK {
		return d // shutting down: not the receiver's failure
	}
	stored, err := h.st.AddWebhookDelivery(context.WithoutCancel(ctx), d)
	if err != nil {
		if !errors.Is(err, errs.ErrNotFound) {
			h.log.Warn("record a webhook delivery", "webhook", w.ID, "event", e.ID, "err", err)
		}
		return d
	}
	return stored
}

// post sends one event; it returns the status and, unless it was a 2xx,
// what went wrong.
func (h *Hub) post(ctx context.Context, w store.Webhook, e store.DaemonEvent) (int, string) {
	body, err := json.Marshal(eventView(e))
	if err != nil {
		return 0, "encode event: " + err.Error()
	}
	secret, err := h.secretOf(w)
	if err != nil {
		return 0, err.Error()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return 0, "build request: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "stead-webhook/1")
	req.Header.Set(client.SignatureHeader, client.SignWebhook(secret, h.opts.Now(), body))
	req.Header.Set(client.EventIDHeader, strconv.FormatInt(e.ID, 10))
	req.Header.Set(client.EventTypeHeader, e.Type)
	req.Header.Set(client.WebhookIDHeader, w.ID)
	resp, err := h.http.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, "answered " + resp.Status
	}
	return resp.StatusCode, ""
}

// wake tells the supervisor that the set of webhooks changed.
func (h *Hub) wake() {
	select {
	case h.reload <- struct{}{}:
	default:
	}
}

func webhookView(w store.Webhook) client.Webhook {
	return client.Webhook{ID: w.ID, URL: w.URL, Types: w.Types, Cursor: w.Cursor, CreatedAt: w.CreatedAt}
}

func deliveryView(d store.WebhookDelivery) client.WebhookDelivery {
	return client.WebhookDelivery{ID: d.ID, Webhook: d.WebhookID, EventID: d.EventID, EventType: d.EventType, Attempt: d.Attempt,
		Redelivery: d.Redelivery, Time: d.Time, StatusCode: d.StatusCode, Error: d.Error,
		DurationMS: float64(d.Duration.Microseconds()) / 1000, OK: d.OK}
}

// CreateWebhook subscribes req.URL to the tenant's events. The answer
// carries the secret (generated when none is given): shown this once.
func (h *Hub) CreateWebhook(ctx context.Context, tenant string, req client.CreateWebhookRequest) (client.Webhook, error) {
	if err := ValidateURL(req.URL, h.opts.AllowLoopback); err != nil {
		return client.Webhook{}, err
	}
	for _, t := range req.Types {
		if t == "" || len(t) > 200 {
			return client.Webhook{}, fmt.Errorf("webhook types: an empty or overlong prefix: %w", errs.ErrInvalid)
		}
	}
	if len(req.Types) > 50 {
		return client.Webhook{}, fmt.Errorf("webhook types: more than 50 prefixes: %w", errs.ErrInvalid)
	}
	if len(req.Secret) > 0 && len(req.Secret) < 16 {
		return client.Webhook{}, fmt.Errorf("webhook secret: shorter than 16 bytes (leave it out to have one generated): %w", errs.ErrInvalid)
	}
	have, err := h.st.ListWebhooks(ctx, tenant)
	if err != nil {
		return client.Webhook{}, err
	}
	if len(have) >= maxWebhooksPerTenant {
		return client.Webhook{}, fmt.Errorf("webhooks: the tenant has %d, the most it may have: %w", len(have), errs.ErrQuota)
	}
	secret := req.Secret
	if secret == "" {
		secret = "whsec_" + randomHex(24)
	}
	cursor := int64(0)
	if req.After != nil {
		cursor = max(*req.After, 0)
	} else if cursor, err = h.st.LastDaemonEventID(ctx); err != nil {
		return client.Webhook{}, err
	}
	id := "wh-" + randomHex(8)
	sealed, err := h.sealSecret(id, secret)
	if err != nil {
		return client.Webhook{}, err
	}
	w, err := h.st.CreateWebhook(ctx, store.Webhook{ID: id, TenantID: tenant, URL: req.URL, Types: req.Types,
		Secret: sealed, Cursor: cursor, CreatedAt: h.opts.Now()})
	if err != nil {
		return client.Webhook{}, err
	}
	h.wake()
	h.log.Info("webhook added", "webhook", w.ID, "tenant", tenant, "url", w.URL, "types", strings.Join(w.Types, ","))
	out := webhookView(w)
	out.Secret = secret
	return out, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := cryptorand.Read(b); err != nil {
		panic(fmt.Sprintf("read random bytes: %v", err))
	}
	return hex.EncodeToString(b)
}

// ListWebhooks lists the tenant's webhooks with their newest attempt.
func (h *Hub) ListWebhooks(ctx context.Context, tenant string) ([]client.Webhook, error) {
	ws, err := h.st.ListWebhooks(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]client.Webhook, 0, len(ws))
	for _, w := range ws {
		out = append(out, h.withLast(ctx, w))
	}
	return out, nil
}

func (h *Hub) withLast(ctx context.Context, w store.Webhook) client.Webhook {
	v := webhookView(w)
	if ds, err := h.st.ListWebhookDeliveries(ctx, w.TenantID, w.ID, 1); err == nil && len(ds) == 1 {
		d := deliveryView(ds[0])
		v.LastDelivery = &d
	}
	return v
}

// GetWebhook describes the tenant's webhook id.
func (h *Hub) GetWebhook(ctx context.Context, tenant, id string) (client.Webhook, error) {
	w, err := h.st.GetWebhook(ctx, tenant, id)
	if err != nil {
		return client.Webhook{}, err
	}
	return h.withLast(ctx, w), nil
}

// DeleteWebhook removes the webhook, its delivery log and its worker.
func (h *Hub) DeleteWebhook(ctx context.Context, tenant, id string) error {
	if err := h.st.DeleteWebhook(ctx, tenant, id); err != nil {
		return err
	}
	h.wake()
	h.log.Info("webhook removed", "webhook", id, "tenant", tenant)
	return nil
}

// ListWebhookDeliveries returns the webhook's newest attempts first.
func (h *Hub) ListWebhookDeliveries(ctx context.Context, tenant, id string, limit int) ([]client.WebhookDelivery, error) {
	if _, err := h.st.GetWebhook(ctx, tenant, id); err != nil {
		return nil, err
	}
	ds, err := h.st.ListWebhookDeliveries(ctx, tenant, id, min(limit, MaxPage))
	if err != nil {
		return nil, err
	}
	out := make([]client.WebhookDelivery, 0, len(ds))
	for _, d := range ds {
		out = append(out, deliveryView(d))
	}
	return out, nil
}

// RedeliverWebhook sends the event of the tenant's delivery again, now,
// once, and returns the new attempt (recorded with Redelivery set). The
// worker's ordered stream and cursor are untouched. An event that
// retention deleted is errs.ErrNotFound.
func (h *Hub) RedeliverWebhook(ctx context.Context, tenant string, delivery int64) (client.WebhookDelivery, error) {
	d, err := h.st.GetWebhookDelivery(ctx, tenant, delivery)
	if err != nil {
		return client.WebhookDelivery{}, err
	}
	w, err := h.st.GetWebhook(ctx, tenant, d.WebhookID)
	if err != nil {
		return client.WebhookDelivery{}, err
	}
	es, err := h.st.ListDaemonEvents(ctx, store.DaemonEventFilter{Tenant: tenant, AfterID: d.EventID - 1, Limit: 1})
	if err != nil {
		return client.WebhookDelivery{}, err
	}
	if len(es) == 0 || es[0].ID != d.EventID {
		return client.WebhookDelivery{}, fmt.Errorf("redeliver %d: event %d is no longer kept (retention): %w", delivery, d.EventID, errs.ErrNotFound)
	}
	return deliveryView(h.deliver(ctx, w, es[0], 1, true)), nil
}
