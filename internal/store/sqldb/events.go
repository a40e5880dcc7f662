package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const (
	daemonEventCols = "id, time, type, tenant_id, sandbox_id, state, reason, data"
	webhookCols     = "id, tenant_id, url, types, secret, cursor, created_at"
	deliveryCols    = "id, webhook_id, tenant_id, event_id, event_type, attempt, redelivery, time, status_code, error, duration_ns, ok"
)

// AppendDaemonEvent stores e with the next event id (see store.EventStore).
func (s *Store) AppendDaemonEvent(ctx context.Context, e store.DaemonEvent) (store.DaemonEvent, error) {
	row, err := eventRow(e, nil)
	if err != nil {
		return store.DaemonEvent{}, err
	}
	err = s.writeTx(ctx, func(tx *txn) error { return row.insert(ctx, tx) })
	if err != nil {
		return store.DaemonEvent{}, fmt.Errorf("append event %s: %w", e.Type, err)
	}
	return row.e, nil
}

// pendingEvent is a daemon event ready to be inserted, with the meter
// interval that opens with it.
type pendingEvent struct {
	e        store.DaemonEvent // ID set by insert
	at, data string
	open     *pendingInterval
}

// eventRow checks e (and open, when not nil) and encodes its columns.
func eventRow(e store.DaemonEvent, open *store.MeterInterval) (*pendingEvent, error) {
	if e.Type == "" || e.Tenant == "" {
		return nil, fmt.Errorf("append event: empty type or tenant: %w", errs.ErrInvalid)
	}
	var iv *pendingInterval
	if open != nil {
		var err error
		if iv, err = intervalRow(*open); err != nil {
			return nil, fmt.Errorf("append event %s: %w", e.Type, err)
		}
	}
	if e.Time.IsZero() {
		e.Time = now()
	}
	e.Time = normTime(e.Time)
	at, err := FormatTime(e.Time)
	if err != nil {
		return nil, fmt.Errorf("append event %s: %w", e.Type, err)
	}
	data := ""
	if len(e.Data) > 0 {
		b, err := json.Marshal(e.Data)
		if err != nil {
			return nil, fmt.Errorf("append event %s: encode data: %w", e.Type, err)
		}
		data = string(b)
	}
	return &pendingEvent{e: e, at: at, data: data, open: iv}, nil
}

// insert inserts the event in tx with the next event id, and opens its
// interval.
func (p *pendingEvent) insert(ctx context.Context, tx *txn) error {
	var err error
	p.e.ID, err = insertID(ctx, tx, "daemon_events", "time, type, tenant_id, sandbox_id, state, reason, data", "?, ?, ?, ?, ?, ?, ?",
		p.at, p.e.Type, p.e.Tenant, p.e.Sandbox, p.e.State, p.e.Reason, p.data)
	if err != nil || p.open == nil {
		return err
	}
	_, err = p.open.insert(ctx, tx)
	return err
}

// ListDaemonEvents returns the events f selects, by id.
func (s *Store) ListDaemonEvents(ctx context.Context, f store.DaemonEventFilter) ([]store.DaemonEvent, error) {
	where := []string{"id > ?"}
	args := []any{f.AfterID}
	if f.Tenant != "" {
		where = append(where, "tenant_id = ?")
		args = append(args, f.Tenant)
	}
	if f.Sandbox != "" {
		where = append(where, "sandbox_id = ?")
		args = append(args, f.Sandbox)
	}
	if len(f.Types) > 0 {
		var or []string
		for _, p := range f.Types {
			or = append(or, s.d.PrefixFunc+"(type, ?) = 1") // an exact, case-sensitive prefix
			args = append(args, p)
		}
		where = append(where, "("+strings.Join(or, " OR ")+")")
	}
	if !f.Since.IsZero() {
		since, err := FormatTime(f.Since)
		if err != nil {
			return nil, fmt.Errorf("list events: since: %w", err)
		}
		where = append(where, "time >= ?")
		args = append(args, since)
	}
	q := "SELECT " + daemonEventCols + " FROM daemon_events WHERE " + strings.Join(where, " AND ") + " ORDER BY id"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	out, err := scanAll(rows, scanDaemonEvent)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// LastDaemonEventID returns the highest event id ever assigned: the
// daemon_events counter (in sqlite_sequence, or store_sequences where the
// dialect has Sequences), which outlives the rows it numbered.
func (s *Store) LastDaemonEventID(ctx context.Context) (int64, error) {
	seqs := "sqlite_sequence"
	if s.d.Sequences {
		seqs = "store_sequences"
	}
	var id int64
	err := s.r.QueryRowContext(ctx, "SELECT seq FROM "+seqs+" WHERE name = 'daemon_events'").Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("last event id: %w", err)
	}
	return id, nil
}

// PruneDaemonEvents is the event log's retention (see store.EventStore).
func (s *Store) PruneDaemonEvents(ctx context.Context, before time.Time, keepPerTenant int) (int64, error) {
	cut, err := FormatTime(before)
	if err != nil {
		return 0, fmt.Errorf("prune events: %w", err)
	}
	var n int64
	err = s.writeTx(ctx, func(tx *txn) error {
		res, err := tx.ExecContext(ctx, "DELETE FROM daemon_events WHERE time < ?", cut)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		if keepPerTenant > 0 {
			res, err := tx.ExecContext(ctx, `DELETE FROM daemon_events WHERE id IN (
				SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY tenant_id ORDER BY id DESC) AS rn FROM daemon_events) ranked WHERE rn > ?)`,
				keepPerTenant)
			if err != nil {
				return err
			}
			m, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += m
		}
		_, err = tx.ExecContext(ctx, "DELETE FROM webhook_deliveries WHERE time < ?", cut)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune events: %w", err)
	}
	return n, nil
}

// PurgeTenantEvents deletes everything of the tenant's event log and
// webhooks.
func (s *Store) PurgeTenantEvents(ctx context.Context, tenantID string) error {
	err := s.writeTx(ctx, func(tx *txn) error {
		for _, q := range []string{
			"DELETE FROM webhook_deliveries WHERE tenant_id = ?",
			"DELETE FROM webhooks WHERE tenant_id = ?",
			"DELETE FROM daemon_events WHERE tenant_id = ?",
		} {
			if _, err := tx.ExecContext(ctx, q, tenantID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("purge events of tenant %s: %w", tenantID, err)
	}
	return nil
}

func scanDaemonEvent(sc scanner) (store.DaemonEvent, error) {
	var e store.DaemonEvent
	var at, data string
	if err := sc.Scan(&e.ID, &at, &e.Type, &e.Tenant, &e.Sandbox, &e.State, &e.Reason, &data); err != nil {
		return store.DaemonEvent{}, err
	}
	t, err := parseTime(at)
	if err != nil {
		return store.DaemonEvent{}, err
	}
	e.Time = t
	if data != "" {
		if err := json.Unmarshal([]byte(data), &e.Data); err != nil {
			return store.DaemonEvent{}, fmt.Errorf("event %d: decode data: %w", e.ID, err)
		}
	}
	return e, nil
}

// CreateWebhook stores a new webhook.
func (s *Store) CreateWebhook(ctx context.Context, w store.Webhook) (store.Webhook, error) {
	if w.ID == "" || w.URL == "" || w.Secret == "" || w.TenantID == "" {
		return store.Webhook{}, fmt.Errorf("create webhook: empty id, tenant, url or secret: %w", errs.ErrInvalid)
	}
	if w.CreatedAt.IsZero() {
		w.CreatedAt = now()
	}
	w.CreatedAt = normTime(w.CreatedAt)
	at, err := FormatTime(w.CreatedAt)
	if err != nil {
		return store.Webhook{}, fmt.Errorf("create webhook %s: %w", w.ID, err)
	}
	types := ""
	if len(w.Types) > 0 {
		b, err := json.Marshal(w.Types)
		if err != nil {
			return store.Webhook{}, fmt.Errorf("create webhook %s: %w", w.ID, err)
		}
		types = string(b)
	}
	_, err = s.w.ExecContext(ctx, "INSERT INTO webhooks ("+webhookCols+") VALUES (?, ?, ?, ?, ?, ?, ?)",
		w.ID, w.TenantID, w.URL, types, w.Secret, w.Cursor, at)
	switch {
	case s.isUnique(err):
		return store.Webhook{}, fmt.Errorf("create webhook %s: id taken: %w", w.ID, errs.ErrConflict)
	case s.isForeignKey(err):
		return store.Webhook{}, fmt.Errorf("create webhook %s: tenant %s: %w", w.ID, w.TenantID, errs.ErrNotFound)
	case err != nil:
		return store.Webhook{}, fmt.Errorf("create webhook %s: %w", w.ID, err)
	}
	return w, nil
}

// GetWebhook returns the tenant's webhook id.
func (s *Store) GetWebhook(ctx context.Context, tenantID, id string) (store.Webhook, error) {
	w, err := scanWebhook(s.r.QueryRowContext(ctx, "SELECT "+webhookCols+" FROM webhooks WHERE id = ? AND tenant_id = ?", id, tenantID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Webhook{}, fmt.Errorf("get webhook %s: %w", id, errs.ErrNotFound)
	}
	if err != nil {
		return store.Webhook{}, fmt.Errorf("get webhook %s: %w", id, err)
	}
	return w, nil
}

// ListWebhooks lists the tenant's webhooks ("" for all).
func (s *Store) ListWebhooks(ctx context.Context, tenantID string) ([]store.Webhook, error) {
	q := "SELECT " + webhookCols + " FROM webhooks"
	var args []any
	if tenantID != "" {
		q += " WHERE tenant_id = ?"
		args = append(args, tenantID)
	}
	return queryAll(ctx, s.r, "list webhooks", scanWebhook, q+" ORDER BY created_at, id", args...)
}

// DeleteWebhook removes the webhook and its deliveries.
func (s *Store) DeleteWebhook(ctx context.Context, tenantID, id string) error {
	err := s.writeTx(ctx, func(tx *txn) error {
		if _, err := tx.ExecContext(ctx, "DELETE FROM webhook_deliveries WHERE webhook_id IN (SELECT id FROM webhooks WHERE id = ? AND tenant_id = ?)", id, tenantID); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, "DELETE FROM webhooks WHERE id = ? AND tenant_id = ?", id, tenantID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return errs.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete webhook %s: %w", id, err)
	}
	return nil
}

// SetWebhookCursor moves the webhook's cursor forward to cursor.
func (s *Store) SetWebhookCursor(ctx context.Context, tenantID, id string, cursor int64) error {
	err := s.writeTx(ctx, func(tx *txn) error {
		var cur int64
		err := tx.QueryRowContext(ctx, "SELECT cursor FROM webhooks WHERE id = ? AND tenant_id = ?", id, tenantID).Scan(&cur)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.ErrNotFound
		}
		if err != nil || cursor <= cur {
			return err
		}
		_, err = tx.ExecContext(ctx, "UPDATE webhooks SET cursor = ? WHERE id = ?", cursor, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("set cursor of webhook %s: %w", id, err)
	}
	return nil
}

func scanWebhook(sc scanner) (store.Webhook, error) {
	var w store.Webhook
	var types, at string
	if err := sc.Scan(&w.ID, &w.TenantID, &w.URL, &types, &w.Secret, &w.Cursor, &at); err != nil {
		return store.Webhook{}, err
	}
	t, err := parseTime(at)
	if err != nil {
		return store.Webhook{}, err
	}
	w.CreatedAt = t
	if types != "" {
		if err := json.Unmarshal([]byte(types), &w.Types); err != nil {
			return store.Webhook{}, fmt.Errorf("webhook %s: decode types: %w", w.ID, err)
		}
	}
	return w, nil
}

// AddWebhookDelivery records one delivery attempt.
func (s *Store) AddWebhookDelivery(ctx context.Context, d store.WebhookDelivery) (store.WebhookDelivery, error) {
	if d.Time.IsZero() {
		d.Time = now()
	}
	d.Time = normTime(d.Time)
	at, err := FormatTime(d.Time)
	if err != nil {
		return store.WebhookDelivery{}, fmt.Errorf("add delivery to webhook %s: %w", d.WebhookID, err)
	}
	err = s.writeTx(ctx, func(tx *txn) error {
		var one int
		err := tx.QueryRowContext(ctx, "SELECT 1 FROM webhooks WHERE id = ? AND tenant_id = ?", d.WebhookID, d.TenantID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.ErrNotFound
		}
		if err != nil {
			return err
		}
		d.ID, err = insertID(ctx, tx, "webhook_deliveries", "webhook_id, tenant_id, event_id, event_type, attempt, redelivery, time, status_code, error, duration_ns, ok",
			"?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?",
			d.WebhookID, d.TenantID, d.EventID, d.EventType, d.Attempt, d.Redelivery, at, d.StatusCode, d.Error, int64(d.Duration), d.OK)
		return err
	})
	if err != nil {
		return store.WebhookDelivery{}, fmt.Errorf("add delivery to webhook %s: %w", d.WebhookID, err)
	}
	return d, nil
}

// ListWebhookDeliveries returns the webhook's newest deliveries first.
func (s *Store) ListWebhookDeliveries(ctx context.Context, tenantID, webhookID string, limit int) ([]store.WebhookDelivery, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.r.QueryContext(ctx, "SELECT "+deliveryCols+" FROM webhook_deliveries WHERE webhook_id = ? AND tenant_id = ? ORDER BY id DESC LIMIT ?",
		webhookID, tenantID, limit)
	if err != nil {
		return nil, fmt.Errorf("list deliveries of webhook %s: %w", webhookID, err)
	}
	defer rows.Close()
	out, err := scanAll(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("list deliveries of webhook %s: %w", webhookID, err)
	}
	return out, nil
}

// GetWebhookDelivery returns the tenant's delivery id.
func (s *Store) GetWebhookDelivery(ctx context.Context, tenantID string, id int64) (store.WebhookDelivery, error) {
	d, err := scanDelivery(s.r.QueryRowContext(ctx, "SELECT "+deliveryCols+" FROM webhook_deliveries WHERE id = ? AND tenant_id = ?", id, tenantID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.WebhookDelivery{}, fmt.Errorf("get delivery %d: %w", id, errs.ErrNotFound)
	}
	if err != nil {
		return store.WebhookDelivery{}, fmt.Errorf("get delivery %d: %w", id, err)
	}
	return d, nil
}

func scanDelivery(sc scanner) (store.WebhookDelivery, error) {
	var d store.WebhookDelivery
	var at string
	var dur int64
	if err := sc.Scan(&d.ID, &d.WebhookID, &d.TenantID, &d.EventID, &d.EventType, &d.Attempt, &d.Redelivery, &at,
		&d.StatusCode, &d.Error, &dur, &d.OK); err != nil {
		return store.WebhookDelivery{}, err
	}
	t, err := parseTime(at)
	if err != nil {
		return store.WebhookDelivery{}, err
	}
	d.Time, d.Duration = t, time.Duration(dur)
	return d, nil
}
