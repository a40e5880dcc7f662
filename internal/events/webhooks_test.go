package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// receiver is a webhook endpoint on 127.0.0.1 that verifies every
// signature and can answer 503 or stop listening.
type receiver struct {
	t      *testing.T
	secret string
	addr   string
	fail   atomic.Bool // answer 503

	mu   sync.Mutex
	ids  []int64 // events accepted (2xx), in arrival order
	hits int     // every request
	bad  []string
	srv  *http.Server
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t}
	r.listen("127.0.0.1:0")
	t.Cleanup(r.down)
	return r
}

func (r *receiver) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		r.t.Fatalf("listen on %s: %v", addr, err)
	}
	r.addr = ln.Addr().String()
	srv := &http.Server{Handler: r}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// down stops listening (connections are refused).
func (r *receiver) down() {
	r.mu.Lock()
	srv := r.srv
	r.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hits++
	if err := client.VerifyWebhook(r.secret, req.Header.Get(client.SignatureHeader), body, time.Minute); err != nil {
		r.bad = append(r.bad, err.Error())
		http.Error(w, "bad signature", http.StatusBadRequest)
		return
	}
	if r.fail.Load() {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	}
	var e client.DaemonEvent
	if err := json.Unmarshal(body, &e); err != nil || strconv.FormatInt(e.ID, 10) != req.Header.Get(client.EventIDHeader) ||
		e.Type != req.Header.Get(client.EventTypeHeader) {
		r.bad = append(r.bad, fmt.Sprintf("body %s does not match its headers (%v)", body, err))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.ids = append(r.ids, e.ID)
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) accepted() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.ids...)
}

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type hubFixture struct {
	st     *sqlite.Store
	hub    *events.Hub
	cancel context.CancelFunc
	done   chan struct{}
	opts   events.Options
}

func newHubFixture(t *testing.T) *hubFixture {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	f := &hubFixture{st: st, opts: events.Options{Logger: slog.New(slog.DiscardHandler), AllowLoopback: true,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, DeliveryTimeout: 2 * time.Second,
		SecretKey: []byte("0123456789abcdef0123456789abcdef")}}
	f.start()
	t.Cleanup(func() {
		f.stop()
		st.Close()
	})
	return f
}

// start runs a Hub over the store, as a daemon start does.
func (f *hubFixture) start() {
	f.hub = events.New(f.st, f.opts)
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = cancel, make(chan struct{})
	go func() {
		defer close(f.done)
		f.hub.Run(ctx)
	}()
}

func (f *hubFixture) stop() {
	f.cancel()
	<-f.done
}

func (f *hubFixture) emit(typ string) {
	f.hub.Emit(context.Background(), events.Event{Type: typ, Tenant: store.DefaultTenant, Sandbox: "sb-1"})
}

func TestWebhookToLoopbackReceiverIsSignedAndVerifies(t *testing.T) {
	f := newHubFixture(t)
	ctx := t.Context()
	rcv := newReceiver(t)
	f.emit("sandbox.before") // before the webhook: not delivered
	w, err := f.hub.CreateWebhook(ctx, store.DefaultTenant, client.CreateWebhookRequest{URL: "http://" + rcv.addr + "/hook", Types: []string{"sandbox.", "snapshot.created"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(w.Secret, "whsec_") || len(w.Secret) < 40 {
		t.Fatalf("generated secret %q", w.Secret)
	}
	rcv.secret = w.Secret
	f.emit("sandbox.created")
	f.emit("network.other") // not matching
	f.emit("snapshot.created")
	f.emit("snapshot.deleted") // not matching
	waitFor(t, "two deliveries", func() bool { return len(rcv.accepted()) == 2 })
	if len(rcv.bad) > 0 {
		t.Fatalf("receiver refused: %v", rcv.bad)
	}
	got, err := f.hub.GetWebhook(ctx, store.DefaultTenant, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Secret != "" {
		t.Fatal("GetWebhook shows the secret")
	}
	row, err := f.st.GetWebhook(ctx, store.DefaultTenant, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(row.Secret, w.Secret) || !strings.HasPrefix(row.Secret, "sealed:v1:") {
		t.Fatalf("the store holds the secret as %q", row.Secret)
	}
	waitFor(t, "the cursor past the last event", func() bool {
		got, _ = f.hub.GetWebhook(ctx, store.DefaultTenant, w.ID)
		return got.Cursor == rcv.accepted()[1]+1
	})
	ds, err := f.hub.ListWebhookDeliveries(ctx, store.DefaultTenant, w.ID, 0)
	if err != nil || len(ds) != 2 || !ds[0].OK || ds[0].StatusCode != 204 || ds[0].EventType != "snapshot.created" {
		t.Fatalf("deliveries = %+v, %v", ds, err)
	}
	// A receiver with the wrong secret refuses; redelivery is recorded.
	rcv.mu.Lock()
	rcv.secret = "not-the-secret"
	rcv.mu.Unlock()
	d, err := f.hub.RedeliverWebhook(ctx, store.DefaultTenant, ds[0].ID)
	if err != nil || d.OK || d.StatusCode != 400 || !d.Redelivery {
		t.Fatalf("redelivery with a wrong secret = %+v, %v", d, err)
	}
	rcv.mu.Lock()
	rcv.secret = w.Secret
	rcv.mu.Unlock()
	d, err = f.hub.RedeliverWebhook(ctx, store.DefaultTenant, ds[0].ID)
	if err != nil || !d.OK || d.EventID != ds[0].EventID {
		t.Fatalf("redelivery = %+v, %v", d, err)
	}
	if _, err := f.hub.RedeliverWebhook(ctx, "other", ds[0].ID); err == nil {
		t.Fatal("another tenant redelivered a delivery")
	}
}

// TestWebhookReceiverDownGetsEveryEventInOrderAfterRecovery: a receiver
// that answers 503, then is not listening at all, then comes back (and
// the daemon restarts meanwhile) gets every event, in order, each once.
func TestWebhookReceiverDownGetsEveryEventInOrderAfterRecovery(t *testing.T) {
	f := newHubFixture(t)
	ctx := t.Context()
	rcv := newReceiver(t)
	w, err := f.hub.CreateWebhook(ctx, store.DefaultTenant, client.CreateWebhookRequest{URL: "http://" + rcv.addr + "/hook", Secret: "a-secret-of-16-bytes-or-more"})
	if err != nil {
		t.Fatal(err)
	}
	rcv.secret = w.Secret
	f.emit("sandbox.e0")
	waitFor(t, "the first delivery", func() bool { return len(rcv.accepted()) == 1 })

	rcv.fail.Store(true) // 503
	for i := 1; i <= 5; i++ {
		f.emit(fmt.Sprintf("sandbox.e%d", i))
	}
	waitFor(t, "retries against the 503", func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		return rcv.hits >= 6
	})
	rcv.down() // not listening
	for i := 6; i <= 10; i++ {
		f.emit(fmt.Sprintf("sandbox.e%d", i))
	}
	waitFor(t, "a refused connect in the delivery log", func() bool {
		ds, err := f.hub.ListWebhookDeliveries(ctx, store.DefaultTenant, w.ID, 1000)
		return err == nil && slices.ContainsFunc(ds, refusedConnect)
	})
	f.stop() // the daemon restarts while the receiver is down
	f.start()
	for i := 11; i <= 15; i++ {
		f.emit(fmt.Sprintf("sandbox.e%d", i))
	}
	rcv.fail.Store(false)
	rcv.listen(rcv.addr) // back, on the same address
	for i := 16; i <= 20; i++ {
		f.emit(fmt.Sprintf("sandbox.e%d", i))
	}
	waitFor(t, "all 21 events", func() bool { return len(rcv.accepted()) >= 21 })
	time.Sleep(100 * time.Millisecond)
	got := rcv.accepted()
	all, err := f.st.ListDaemonEvents(ctx, store.DaemonEventFilter{Tenant: store.DefaultTenant})
	if err != nil {
		t.Fatal(err)
	}
	var want []int64
	for _, e := range all {
		want = append(want, e.ID)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("receiver got %v, want every event once in order: %v", got, want)
	}
	if len(rcv.bad) > 0 {
		t.Fatalf("receiver refused: %v", rcv.bad)
	}
	ds, err := f.hub.ListWebhookDeliveries(ctx, store.DefaultTenant, w.ID, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var refused, unavailable, retried int
	for _, d := range ds {
		switch {
		case d.StatusCode == 503:
			unavailable++
		case refusedConnect(d):
			refused++
		}
		if d.Attempt > 1 {
			retried++
		}
	}
	if unavailable == 0 || refused == 0 || retried == 0 {
		t.Fatalf("delivery log has %d 503s, %d refused connects, %d retries; want some of each", unavailable, refused, retried)
	}
}

// refusedConnect reports whether d is an attempt that reached no receiver.
func refusedConnect(d client.WebhookDelivery) bool { return !d.OK && d.StatusCode == 0 }

func TestWebhookGuardRefusesLinkLocalMetadataAndLoopback(t *testing.T) {
	for _, tc := range []struct {
		url           string
		allowLoopback bool
		ok            bool
	}{
		{"https://hooks.example.com/x", false, true},
		{"http://10.1.2.3:8080/x", false, true},
		{"http://127.0.0.1:8080/x", true, true},
		{"http://localhost:8080/x", true, true},
		{"http://127.0.0.1:8080/x", false, false},
		{"http://[::1]/x", false, false},
		{"http://localhost/x", false, false},
		{"http://169.254.169.254/latest/meta-data/", true, false},
		{"http://[fe80::1%25eth0]/x", true, false},
		{"http://[fd00:ec2::254]/", true, false},
		{"http://100.100.100.200/", true, false},
		{"http://0.0.0.0:80/", true, false},
		{"http://224.0.0.1/", true, false},
		{"http://[::ffff:169.254.169.254]/", true, false},
		{"file:///etc/passwd", true, false},
		{"http://u:p@example.com/", true, false},
		{"http:///nohost", true, false},
	} {
		err := events.ValidateURL(tc.url, tc.allowLoopback)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateURL(%s, loopback %v) = %v, want ok %v", tc.url, tc.allowLoopback, err, tc.ok)
		}
	}
}

// TestHubKeepsInternalEventsFromTenants: an internal event (the metrics'
// operation.finished) is neither stored nor streamed; a tenant's event
// beside it is.
func TestHubKeepsInternalEventsFromTenants(t *testing.T) {
	f := newHubFixture(t)
	f.emit(events.InternalPrefix + "operation.finished")
	f.emit(events.SnapshotCreated)
	list, err := f.st.ListDaemonEvents(t.Context(), store.DaemonEventFilter{Tenant: store.DefaultTenant})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Type != events.SnapshotCreated {
		t.Fatalf("stored events %+v, want only %s", list, events.SnapshotCreated)
	}
}
