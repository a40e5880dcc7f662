package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

func appendEvent(t *testing.T, s store.Store, e store.DaemonEvent) store.DaemonEvent {
	t.Helper()
	out, err := s.AppendDaemonEvent(context.Background(), e)
	if err != nil {
		t.Fatalf("AppendDaemonEvent(%s): %v", e.Type, err)
	}
	return out
}

func eventIDs(es []store.DaemonEvent) []int64 {
	var ids []int64
	for _, e := range es {
		ids = append(ids, e.ID)
	}
	return ids
}

func testDaemonEventsAppendListAndFilter(t *testing.T, s store.Store) {
	ctx := context.Background()
	createTenant(t, s, "t2")
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	a := appendEvent(t, s, store.DaemonEvent{Time: t0, Type: "sandbox.created", Tenant: store.DefaultTenant, Sandbox: "sb-1", State: "creating"})
	b := appendEvent(t, s, store.DaemonEvent{Time: t0.Add(time.Second), Type: "sandbox.stopped", Tenant: store.DefaultTenant, Sandbox: "sb-1",
		State: "stopped", Reason: "idle", Data: map[string]string{"k": "v", "ü": "\x00x"}})
	c := appendEvent(t, s, store.DaemonEvent{Time: t0.Add(2 * time.Second), Type: "snapshot.created", Tenant: "t2", Sandbox: "sb-2"})
	d := appendEvent(t, s, store.DaemonEvent{Time: t0.Add(3 * time.Second), Type: "Sandbox.created", Tenant: store.DefaultTenant, Sandbox: "sb-3"})
	if !(a.ID > 0 && b.ID > a.ID && c.ID > b.ID && d.ID > c.ID) {
		t.Fatalf("ids %d %d %d %d do not grow", a.ID, b.ID, c.ID, d.ID)
	}
	all, err := s.ListDaemonEvents(ctx, store.DaemonEventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(eventIDs(all)) != fmt.Sprint([]int64{a.ID, b.ID, c.ID, d.ID}) {
		t.Fatalf("all = %v", eventIDs(all))
	}
	got := all[1]
	if got.Reason != "idle" || got.State != "stopped" || got.Data["k"] != "v" || got.Data["ü"] != "\x00x" || !got.Time.Equal(t0.Add(time.Second)) ||
		got.Time.Location() != time.UTC || got.Sandbox != "sb-1" {
		t.Fatalf("round trip = %+v", got)
	}
	for _, tc := range []struct {
		f    store.DaemonEventFilter
		want []int64
	}{
		{store.DaemonEventFilter{Tenant: store.DefaultTenant}, []int64{a.ID, b.ID, d.ID}},
		{store.DaemonEventFilter{Tenant: store.DefaultTenant, AfterID: a.ID}, []int64{b.ID, d.ID}},
		{store.DaemonEventFilter{Tenant: store.DefaultTenant, Types: []string{"sandbox."}}, []int64{a.ID, b.ID}}, // prefixes are case-sensitive
		{store.DaemonEventFilter{Types: []string{"snapshot.", "sandbox.stop"}}, []int64{b.ID, c.ID}},
		{store.DaemonEventFilter{Tenant: store.DefaultTenant, Sandbox: "sb-1"}, []int64{a.ID, b.ID}},
		{store.DaemonEventFilter{Since: t0.Add(2 * time.Second)}, []int64{c.ID, d.ID}},
		{store.DaemonEventFilter{Limit: 2}, []int64{a.ID, b.ID}},
		{store.DaemonEventFilter{Tenant: "t2", Sandbox: "sb-1"}, nil},
		{store.DaemonEventFilter{Tenant: "nobody"}, nil},
	} {
		got, err := s.ListDaemonEvents(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(eventIDs(got)) != fmt.Sprint(tc.want) {
			t.Errorf("ListDaemonEvents(%+v) = %v, want %v", tc.f, eventIDs(got), tc.want)
		}
	}
	for _, bad := range []store.DaemonEvent{{Tenant: store.DefaultTenant}, {Type: "x"}} {
		if _, err := s.AppendDaemonEvent(ctx, bad); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("AppendDaemonEvent(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}

func testDaemonEventIDsNeverReusedAfterPrune(t *testing.T, s store.Store) {
	ctx := context.Background()
	old := time.Now().Add(-48 * time.Hour)
	if id, err := s.LastDaemonEventID(ctx); err != nil || id != 0 {
		t.Fatalf("LastDaemonEventID of an empty log = %d, %v", id, err)
	}
	var last store.DaemonEvent
	for i := 0; i < 5; i++ {
		last = appendEvent(t, s, store.DaemonEvent{Time: old, Type: "x.old", Tenant: store.DefaultTenant})
	}
	n, err := s.PruneDaemonEvents(ctx, time.Now().Add(-time.Hour), 0)
	if err != nil || n != 5 {
		t.Fatalf("PruneDaemonEvents = %d, %v; want 5", n, err)
	}
	if id, err := s.LastDaemonEventID(ctx); err != nil || id != last.ID {
		t.Fatalf("LastDaemonEventID after pruning everything = %d, %v; want %d", id, err, last.ID)
	}
	next := appendEvent(t, s, store.DaemonEvent{Type: "x.new", Tenant: store.DefaultTenant})
	if next.ID <= last.ID {
		t.Fatalf("id after a prune of the newest = %d, not above %d", next.ID, last.ID)
	}
	// Per-tenant count limit: keep the newest 2 of each tenant.
	createTenant(t, s, "t2")
	for i := 0; i < 4; i++ {
		appendEvent(t, s, store.DaemonEvent{Type: "a", Tenant: store.DefaultTenant})
		appendEvent(t, s, store.DaemonEvent{Type: "b", Tenant: "t2"})
	}
	if _, err := s.PruneDaemonEvents(ctx, time.Now().Add(-time.Hour), 2); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{store.DefaultTenant, "t2"} {
		es, err := s.ListDaemonEvents(ctx, store.DaemonEventFilter{Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != 2 || es[0].ID >= es[1].ID {
			t.Fatalf("tenant %s keeps %v, want its newest 2", tenant, eventIDs(es))
		}
	}
}

func testConcurrentDaemonEventAppendsListInIDOrder(t *testing.T, s store.Store) {
	ctx := context.Background()
	var wg sync.WaitGroup
	const n = 50
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.AppendDaemonEvent(ctx, store.DaemonEvent{Type: "c", Tenant: store.DefaultTenant}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	es, err := s.ListDaemonEvents(ctx, store.DaemonEventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != n {
		t.Fatalf("%d events, want %d", len(es), n)
	}
	for i := 1; i < len(es); i++ {
		if es[i].ID <= es[i-1].ID {
			t.Fatalf("ids not increasing: %v", eventIDs(es))
		}
	}
}

func testWebhooksCRUDCursorAndTenantIsolation(t *testing.T, s store.Store) {
	ctx := context.Background()
	createTenant(t, s, "t2")
	w, err := s.CreateWebhook(ctx, store.Webhook{ID: "wh-1", TenantID: store.DefaultTenant, URL: "http://127.0.0.1:9/x", Types: []string{"sandbox.", "snapshot."}, Secret: "s3cret", Cursor: 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateWebhook(ctx, store.Webhook{ID: "wh-1", TenantID: "t2", URL: "http://x", Secret: "s"}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("duplicate id: %v", err)
	}
	if _, err := s.CreateWebhook(ctx, store.Webhook{ID: "wh-9", TenantID: "nobody", URL: "http://x", Secret: "s"}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("unknown tenant: %v", err)
	}
	for _, bad := range []store.Webhook{{TenantID: "t2", URL: "u", Secret: "s"}, {ID: "a", TenantID: "t2", Secret: "s"}, {ID: "a", TenantID: "t2", URL: "u"}} {
		if _, err := s.CreateWebhook(ctx, bad); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("CreateWebhook(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := s.CreateWebhook(ctx, store.Webhook{ID: "wh-2", TenantID: "t2", URL: "http://y", Secret: "t"}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetWebhook(ctx, store.DefaultTenant, "wh-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.URL != w.URL || got.Secret != "s3cret" || fmt.Sprint(got.Types) != "[sandbox. snapshot.]" || got.Cursor != 7 || !got.CreatedAt.Equal(w.CreatedAt) {
		t.Fatalf("GetWebhook = %+v, want %+v", got, w)
	}
	if _, err := s.GetWebhook(ctx, "t2", "wh-1"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's webhook: %v", err)
	}
	if err := s.SetWebhookCursor(ctx, "t2", "wh-1", 9); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("cursor of another tenant's webhook: %v", err)
	}
	for _, c := range []int64{10, 3} {
		if err := s.SetWebhookCursor(ctx, store.DefaultTenant, "wh-1", c); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := s.GetWebhook(ctx, store.DefaultTenant, "wh-1"); got.Cursor != 10 {
		t.Fatalf("cursor = %d, want 10 (it never moves back)", got.Cursor)
	}
	list, err := s.ListWebhooks(ctx, "")
	if err != nil || len(list) != 2 {
		t.Fatalf("ListWebhooks(all) = %d, %v", len(list), err)
	}
	list, err = s.ListWebhooks(ctx, "t2")
	if err != nil || len(list) != 1 || list[0].ID != "wh-2" {
		t.Fatalf("ListWebhooks(t2) = %+v, %v", list, err)
	}

	d1, err := s.AddWebhookDelivery(ctx, store.WebhookDelivery{WebhookID: "wh-1", TenantID: store.DefaultTenant, EventID: 11, EventType: "sandbox.created",
		Attempt: 1, StatusCode: 503, Error: "503 Service Unavailable", Duration: 1500 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	d2, err := s.AddWebhookDelivery(ctx, store.WebhookDelivery{WebhookID: "wh-1", TenantID: store.DefaultTenant, EventID: 11, EventType: "sandbox.created",
		Attempt: 2, StatusCode: 200, OK: true, Redelivery: true})
	if err != nil || d2.ID <= d1.ID {
		t.Fatalf("second delivery = %+v, %v", d2, err)
	}
	if _, err := s.AddWebhookDelivery(ctx, store.WebhookDelivery{WebhookID: "wh-1", TenantID: "t2", EventID: 1}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("delivery under another tenant: %v", err)
	}
	ds, err := s.ListWebhookDeliveries(ctx, store.DefaultTenant, "wh-1", 0)
	if err != nil || len(ds) != 2 || ds[0].ID != d2.ID || !ds[0].OK || !ds[0].Redelivery || ds[1].Duration != 1500*time.Microsecond || ds[1].StatusCode != 503 {
		t.Fatalf("ListWebhookDeliveries = %+v, %v", ds, err)
	}
	if ds, _ := s.ListWebhookDeliveries(ctx, "t2", "wh-1", 0); len(ds) != 0 {
		t.Fatalf("another tenant lists %d deliveries", len(ds))
	}
	if g, err := s.GetWebhookDelivery(ctx, store.DefaultTenant, d1.ID); err != nil || g.Error != d1.Error || g.Attempt != 1 {
		t.Fatalf("GetWebhookDelivery = %+v, %v", g, err)
	}
	if _, err := s.GetWebhookDelivery(ctx, "t2", d1.ID); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's delivery: %v", err)
	}
	if err := s.DeleteWebhook(ctx, "t2", "wh-1"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("delete another tenant's webhook: %v", err)
	}
	if err := s.DeleteWebhook(ctx, store.DefaultTenant, "wh-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWebhook(ctx, store.DefaultTenant, "wh-1"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s.GetWebhookDelivery(ctx, store.DefaultTenant, d1.ID); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("a deleted webhook's delivery: %v", err)
	}
}

func testPurgeTenantEventsLeavesOtherTenants(t *testing.T, s store.Store) {
	ctx := context.Background()
	createTenant(t, s, "t2")
	appendEvent(t, s, store.DaemonEvent{Type: "a", Tenant: store.DefaultTenant})
	appendEvent(t, s, store.DaemonEvent{Type: "b", Tenant: "t2"})
	for _, tn := range []string{store.DefaultTenant, "t2"} {
		if _, err := s.CreateWebhook(ctx, store.Webhook{ID: "wh-" + tn, TenantID: tn, URL: "http://x", Secret: "s"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddWebhookDelivery(ctx, store.WebhookDelivery{WebhookID: "wh-" + tn, TenantID: tn, EventID: 1, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PurgeTenantEvents(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	if err := s.PurgeTenantEvents(ctx, "t2"); err != nil {
		t.Fatalf("purging again: %v", err)
	}
	if es, _ := s.ListDaemonEvents(ctx, store.DaemonEventFilter{Tenant: "t2"}); len(es) != 0 {
		t.Fatalf("t2 keeps %d events", len(es))
	}
	if _, err := s.GetWebhook(ctx, "t2", "wh-t2"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("t2's webhook: %v", err)
	}
	if es, _ := s.ListDaemonEvents(ctx, store.DaemonEventFilter{Tenant: store.DefaultTenant}); len(es) != 1 {
		t.Fatalf("the other tenant keeps %d events, want 1", len(es))
	}
	if ds, _ := s.ListWebhookDeliveries(ctx, store.DefaultTenant, "wh-default", 0); len(ds) != 1 {
		t.Fatalf("the other tenant keeps %d deliveries, want 1", len(ds))
	}
}

// testSandboxChangeAndItsEventCommitTogether: a store that is a
// store.SandboxEventWriter writes a sandbox record and its event in one
// transaction: both, with the event's id after every earlier one, or, when
// the record is refused, neither; a meter interval given opens with them
// (the one open is kept), or not at all.
func testSandboxChangeAndItsEventCommitTogether(t *testing.T, s store.Store) {
	w, ok := s.(store.SandboxEventWriter)
	if !ok {
		t.Skip("the store does not write a sandbox change and its event together")
	}
	ctx := context.Background()
	before := appendEvent(t, s, store.DaemonEvent{Type: "x.before", Tenant: store.DefaultTenant})
	sb, e, err := w.CreateSandboxEvent(ctx, newSandbox("sb-ev", store.DefaultTenant, "ev", time.Now()), store.DaemonEvent{Type: "sandbox.created", Tenant: store.DefaultTenant, Sandbox: "sb-ev"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.ID <= before.ID || sb.Version != 1 {
		t.Fatalf("created %+v with event %+v (after event %d)", sb, e, before.ID)
	}
	sb.State = store.StateRunning
	// A refused interval (no start) refuses the change and its event.
	if _, _, err := w.UpdateSandboxEvent(ctx, sb, store.DaemonEvent{Type: "sandbox.started", Tenant: store.DefaultTenant, Sandbox: "sb-ev", State: "running"},
		&store.MeterInterval{TenantID: store.DefaultTenant, SandboxID: "sb-ev"}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("update with an interval without a start: %v", err)
	}
	start := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	iv := &store.MeterInterval{TenantID: store.DefaultTenant, SandboxID: "sb-ev", InstanceType: "small", CPUs: 1, MemoryBytes: 1 << 30, Start: start}
	sb, e2, err := w.UpdateSandboxEvent(ctx, sb, store.DaemonEvent{Type: "sandbox.started", Tenant: store.DefaultTenant, Sandbox: "sb-ev", State: "running"}, iv)
	if err != nil || sb.State != store.StateRunning || e2.ID <= e.ID {
		t.Fatalf("update: %+v %+v %v", sb, e2, err)
	}
	openIntervals := func() []store.MeterInterval {
		t.Helper()
		ivs, err := s.ListMeterIntervals(ctx, store.MeterFilter{SandboxID: "sb-ev", OpenOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		return ivs
	}
	if ivs := openIntervals(); len(ivs) != 1 || !ivs[0].Start.Equal(start) || ivs[0].InstanceType != "small" || ivs[0].CPUs != 1 {
		t.Fatalf("open intervals after the start: %+v", ivs)
	}
	// Refused: a taken id, a stale version, an event without a type.
	if _, _, err := w.CreateSandboxEvent(ctx, newSandbox("sb-ev", store.DefaultTenant, "other", time.Now()), store.DaemonEvent{Type: "sandbox.created", Tenant: store.DefaultTenant}, nil); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("create with a taken id: %v", err)
	}
	stale := sb
	stale.Version--
	later := *iv
	later.Start = start.Add(time.Second)
	if _, _, err := w.UpdateSandboxEvent(ctx, stale, store.DaemonEvent{Type: "sandbox.stopped", Tenant: store.DefaultTenant}, &later); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("stale update: %v", err)
	}
	sb.State = store.StateStopped
	if _, _, err := w.UpdateSandboxEvent(ctx, sb, store.DaemonEvent{Tenant: store.DefaultTenant}, nil); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("update with an event without a type: %v", err)
	}
	if ivs := openIntervals(); len(ivs) != 1 || !ivs[0].Start.Equal(start) {
		t.Fatalf("open intervals after refused changes: %+v", ivs)
	}
	// An interval open already is kept.
	sb.State = store.StatePaused
	if sb, _, err = w.UpdateSandboxEvent(ctx, sb, store.DaemonEvent{Type: "sandbox.paused", Tenant: store.DefaultTenant, Sandbox: "sb-ev", State: "paused"}, nil); err != nil {
		t.Fatal(err)
	}
	sb.State = store.StateRunning
	if sb, _, err = w.UpdateSandboxEvent(ctx, sb, store.DaemonEvent{Type: "sandbox.resumed", Tenant: store.DefaultTenant, Sandbox: "sb-ev", State: "running"}, &later); err != nil {
		t.Fatal(err)
	}
	if ivs := openIntervals(); len(ivs) != 1 || !ivs[0].Start.Equal(start) {
		t.Fatalf("open intervals after a second open: %+v", ivs)
	}
	if got, err := s.GetSandbox(ctx, store.DefaultTenant, "sb-ev"); err != nil || got.State != store.StateRunning {
		t.Fatalf("after refused changes: %+v %v", got, err)
	}
	es, err := s.ListDaemonEvents(ctx, store.DaemonEventFilter{AfterID: before.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 4 || es[0].ID != e.ID || es[0].Type != "sandbox.created" || es[1].ID != e2.ID || es[1].State != "running" {
		t.Fatalf("events after the changes: %+v", es)
	}
}
