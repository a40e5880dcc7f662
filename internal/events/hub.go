package events

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Defaults of Options.
const (
	DefaultRetention     = 7 * 24 * time.Hour
	DefaultKeepPerTenant = 100_000
	DefaultPruneInterval = 10 * time.Minute
	DefaultMinBackoff    = time.Second
	DefaultMaxBackoff    = 5 * time.Minute
	DefaultDeliveryWait  = 10 * time.Second
	// MaxPage is the largest page ListEvents returns.
	MaxPage = 1000
)

// Options configure a Hub.
type Options struct {
	Logger *slog.Logger
	// Retention is how long events (and delivery attempts) are kept
	// (0: DefaultRetention).
	Retention time.Duration
	// KeepPerTenant caps the events kept per tenant (0:
	// DefaultKeepPerTenant; < 0: no cap).
	KeepPerTenant int
	// PruneInterval is how often retention runs (0: DefaultPruneInterval).
	PruneInterval time.Duration
	// AllowLoopback lets webhooks deliver to loopback addresses and to the
	// host's own addresses (tests; a receiver on the same machine).
	AllowLoopback bool
	// MinBackoff and MaxBackoff bound the wait between two attempts at
	// one event (0: DefaultMinBackoff, DefaultMaxBackoff).
	MinBackoff, MaxBackoff time.Duration
	// DeliveryTimeout bounds one attempt (0: DefaultDeliveryWait).
	DeliveryTimeout time.Duration
	// Now stamps events (nil: time.Now).
	Now func() time.Time
	// SecretKey (32 bytes) seals webhook secrets in the store (nil: they
	// are stored as given; see seal.go).
	SecretKey []byte
}

// Hub is the daemon's event log and what reads it: a Sink that stores
// every event durably (AppendDaemonEvent, fsync'd) before it tells anyone,
// the change notifier that live streams wait on, retention, and the
// webhooks' delivery workers (see Run).
//
// Why no event is lost between a stream's backlog and its live part: the
// log is the only source. A follower takes Changed() before it reads
// "events after my cursor" and waits on it only when the read came back
// short, so an event stored after the read closes the channel it waits on.
// Ids only grow and an event is visible only once every lower id is
// (store.EventStore), so "after cursor" never skips one.
type Hub struct {
	st   store.EventStore
	opts Options
	log  *slog.Logger
	http *http.Client

	mu      sync.Mutex
	changed chan struct{}
	// reload tells the webhook supervisor that webhooks were added or
	// removed.
	reload chan struct{}
}

// New returns a Hub over st. Run starts its background work.
func New(st store.EventStore, opts Options) *Hub {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.KeepPerTenant == 0 {
		opts.KeepPerTenant = DefaultKeepPerTenant
	}
	if opts.PruneInterval <= 0 {
		opts.PruneInterval = DefaultPruneInterval
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.MinBackoff)
	if opts.DeliveryTimeout <= 0 {
		opts.DeliveryTimeout = DefaultDeliveryWait
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Hub{st: st, opts: opts, log: opts.Logger, http: newDeliveryClient(opts.AllowLoopback, opts.DeliveryTimeout),
		changed: make(chan struct{}), reload: make(chan struct{}, 1)}
}

var _ Sink = (*Hub)(nil)

// Emit stores e in the event log (durably: it returns after the commit)
// and wakes every follower. A failed store is logged: the event is lost.
// An internal event (Internal) is dropped: it is for the daemon's own
// listeners, never a tenant's.
func (h *Hub) Emit(ctx context.Context, e Event) {
	if Internal(e.Type) {
		return
	}
	if e.Time.IsZero() {
		e.Time = h.opts.Now()
	}
	_, err := h.st.AppendDaemonEvent(context.WithoutCancel(ctx), h.row(e))
	if err != nil {
		h.log.Error("store an event: it is lost", "type", e.Type, "tenant", e.Tenant, "sandbox", e.Sandbox, "err", err)
		return
	}
	h.notify()
}

// row is e as the store keeps it (its Time set; its ID is the store's).
func (h *Hub) row(e Event) store.DaemonEvent {
	if e.Time.IsZero() {
		e.Time = h.opts.Now()
	}
	return store.DaemonEvent{Time: e.Time, Type: e.Type, Tenant: e.Tenant,
		Sandbox: e.Sandbox, State: e.State, Reason: e.Reason, Data: e.Data}
}

// notify closes the current change channel and makes a new one.
func (h *Hub) notify() {
	h.mu.Lock()
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

// Changed returns a channel that is closed when the next event is stored.
// Take it before reading the log, wait on it after.
func (h *Hub) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed
}

// Run prunes the log by retention and delivers webhooks until ctx ends.
func (h *Hub) Run(ctx context.Context) {
	go h.superviseWebhooks(ctx)
	t := time.NewTicker(h.opts.PruneInterval)
	defer t.Stop()
	for {
		h.prune(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// prune applies retention once.
func (h *Hub) prune(ctx context.Context) {
	keep := max(h.opts.KeepPerTenant, 0)
	n, err := h.st.PruneDaemonEvents(ctx, h.opts.Now().Add(-h.opts.Retention), keep)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("prune the event log", "err", err)
		}
		return
	}
	if n > 0 {
		h.log.Info("pruned the event log", "events", n, "retention", h.opts.Retention, "keep_per_tenant", keep)
	}
}

// eventView is the API form of a stored event.
func eventView(e store.DaemonEvent) client.DaemonEvent {
	return client.DaemonEvent{ID: e.ID, Time: e.Time, Type: e.Type, Tenant: e.Tenant, Sandbox: e.Sandbox, State: e.State, Reason: e.Reason, Data: e.Data}
}

// ListEvents returns a page of the tenant's events that q selects (see
// client.EventQuery): at most q.Limit (default 100, at most MaxPage).
func (h *Hub) ListEvents(ctx context.Context, tenant string, q client.EventQuery) (client.DaemonEventPage, error) {
	if tenant == "" {
		return client.DaemonEventPage{}, fmt.Errorf("list events: no tenant: %w", errs.ErrInvalid)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, MaxPage)
	es, err := h.st.ListDaemonEvents(ctx, store.DaemonEventFilter{Tenant: tenant, AfterID: q.After, Types: q.Types, Sandbox: q.Sandbox, Since: q.Since, Limit: limit})
	if err != nil {
		return client.DaemonEventPage{}, err
	}
	page := client.DaemonEventPage{Events: make([]client.DaemonEvent, 0, len(es)), Next: q.After, More: len(es) == limit}
	for _, e := range es {
		page.Events = append(page.Events, eventView(e))
		page.Next = e.ID
	}
	return page, nil
}

// EventsChanged is Changed, for the API.
func (h *Hub) EventsChanged() <-chan struct{} { return h.Changed() }
