package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// newEventServer serves the fake backend with a real event Hub over a real
// SQLite store.
func newEventServer(t *testing.T) (*events.Hub, *client.Client, *httptest.Server) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	hub := events.New(st, events.Options{Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(NewHandler(&fakeBackend{}, Options{Logger: slog.New(slog.DiscardHandler), Events: hub}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, aliceKey)
	if err != nil {
		t.Fatal(err)
	}
	return hub, c, srv
}

func emit(hub *events.Hub, tenant, typ, sandbox string) {
	hub.Emit(context.Background(), events.Event{Type: typ, Tenant: tenant, Sandbox: sandbox})
}

func ids(es []client.DaemonEvent) []int64 {
	var out []int64
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func TestEventsListIsTenantScopedAndFilters(t *testing.T) {
	hub, c, _ := newEventServer(t)
	ctx := testCtx(t)
	emit(hub, "t-alice", "sandbox.created", "sb-1")
	emit(hub, "t-bob", "sandbox.created", "sb-9")
	emit(hub, "t-alice", "snapshot.created", "sb-1")
	emit(hub, "t-alice", "sandbox.stopped", "sb-2")
	page, err := c.ListDaemonEvents(ctx, client.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 3 || page.More || page.Next != page.Events[2].ID {
		t.Fatalf("page = %+v", page)
	}
	for _, e := range page.Events {
		if e.Tenant != "t-alice" {
			t.Fatalf("another tenant's event: %+v", e)
		}
	}
	page, err = c.ListDaemonEvents(ctx, client.EventQuery{Types: []string{"sandbox."}, Sandbox: "sb-1"})
	if err != nil || len(page.Events) != 1 || page.Events[0].Type != "sandbox.created" {
		t.Fatalf("filtered = %+v, %v", page, err)
	}
	page, err = c.ListDaemonEvents(ctx, client.EventQuery{Types: []string{"snapshot.", "sandbox.stopped"}, Limit: 1})
	if err != nil || len(page.Events) != 1 || !page.More {
		t.Fatalf("limit 1 = %+v, %v", page, err)
	}
	if _, err := c.ListDaemonEvents(ctx, client.EventQuery{Since: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
}

// TestEventStreamResumesAfterIDThenGoesLive: a stream from ?after=N gets
// exactly the events after N, then the ones stored while it is open.
func TestEventStreamResumesAfterIDThenGoesLive(t *testing.T) {
	hub, c, srv := newEventServer(t)
	ctx := testCtx(t)
	for i := 0; i < 5; i++ {
		emit(hub, "t-alice", fmt.Sprintf("sandbox.e%d", i), "sb-1")
		emit(hub, "t-bob", "sandbox.other", "sb-9")
	}
	all, err := c.ListDaemonEvents(ctx, client.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	seen := all.Events[1].ID // the consumer saw two, then went away
	got := make(chan client.DaemonEvent, 100)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for e, err := range c.StreamDaemonEvents(sctx, client.EventQuery{After: seen}) {
			if err != nil {
				t.Error(err)
				return
			}
			got <- e
		}
	}()
	want := ids(all.Events[2:])
	var have []int64
	for len(have) < len(want) {
		select {
		case e := <-got:
			have = append(have, e.ID)
		case <-ctx.Done():
			t.Fatalf("backlog: got %v, want %v", have, want)
		}
	}
	if fmt.Sprint(have) != fmt.Sprint(want) {
		t.Fatalf("backlog after %d = %v, want %v", seen, have, want)
	}
	emit(hub, "t-bob", "sandbox.other", "sb-9")
	emit(hub, "t-alice", "sandbox.live1", "sb-1")
	emit(hub, "t-alice", "sandbox.live2", "sb-1")
	for _, typ := range []string{"sandbox.live1", "sandbox.live2"} {
		select {
		case e := <-got:
			if e.Type != typ || e.Tenant != "t-alice" {
				t.Fatalf("live event = %+v, want %s", e, typ)
			}
		case <-ctx.Done():
			t.Fatalf("no live event %s", typ)
		}
	}
	select {
	case e := <-got:
		t.Fatalf("unexpected event %+v", e)
	case <-time.After(100 * time.Millisecond):
	}

	// Last-Event-ID, as a browser's EventSource sends it on reconnection.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", fmt.Sprint(all.Events[3].ID))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	var idLines []string
	for sc.Scan() && len(idLines) < 3 {
		if l := sc.Text(); strings.HasPrefix(l, "id: ") {
			idLines = append(idLines, strings.TrimPrefix(l, "id: "))
		}
	}
	now, err := c.ListDaemonEvents(ctx, client.EventQuery{After: all.Events[3].ID})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(idLines) != fmt.Sprint(ids(now.Events)) {
		t.Fatalf("ids after Last-Event-ID %d = %v", all.Events[3].ID, idLines)
	}
}

// TestEventStreamLosesNothingWhileEventsArriveDuringBacklog: followers that
// start while events are being stored get every one, in order, once.
func TestEventStreamLosesNothingWhileEventsArriveDuringBacklog(t *testing.T) {
	hub, c, _ := newEventServer(t)
	ctx := testCtx(t)
	const n = 300
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			emit(hub, "t-alice", "sandbox.tick", "")
		}
	}()
	results := make([][]int64, 4)
	var fw sync.WaitGroup
	for f := range results {
		fw.Add(1)
		go func() {
			defer fw.Done()
			time.Sleep(time.Duration(f) * 20 * time.Millisecond)
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			for e, err := range c.StreamDaemonEvents(sctx, client.EventQuery{}) {
				if err != nil {
					t.Error(err)
					return
				}
				results[f] = append(results[f], e.ID)
				if len(results[f]) == n {
					return
				}
			}
		}()
	}
	wg.Wait()
	fw.Wait()
	for f, r := range results {
		if len(r) != n {
			t.Fatalf("follower %d got %d events, want %d", f, len(r), n)
		}
		for i := 1; i < len(r); i++ {
			if r[i] != r[i-1]+1 {
				t.Fatalf("follower %d: id %d after %d", f, r[i], r[i-1])
			}
		}
	}
}

func TestWebhookRoutesRefuseMetadataAndHideTheSecret(t *testing.T) {
	_, c, _ := newEventServer(t)
	ctx := testCtx(t)
	for _, u := range []string{"http://169.254.169.254/latest/meta-data", "http://127.0.0.1:9/x", "ftp://example.com/", "http://user:pw@example.com/", "http://[fe80::1]/"} {
		if _, err := c.CreateWebhook(ctx, client.CreateWebhookRequest{URL: u}); !client.IsInvalid(err) {
			t.Errorf("CreateWebhook(%s) = %v, want 4xx invalid", u, err)
		}
	}
	_, err := c.CreateWebhook(ctx, client.CreateWebhookRequest{URL: "http://hooks.example.com/x"})
	if !client.IsNotFound(err) {
		// t-alice is not a tenant of the store: the webhook has no owner.
		t.Fatalf("CreateWebhook for an unknown tenant = %v, want 404", err)
	}
}

func TestWebhookDeliveriesRouteReadsTheWebhookID(t *testing.T) {
	_, c, _ := newEventServer(t)
	_, err := c.ListWebhookDeliveries(testCtx(t), "wh-nope", 0)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || !strings.Contains(ae.Error(), "wh-nope") {
		t.Fatalf("deliveries of an absent webhook = %v, want a 404 naming it", err)
	}
}

// TestEventStreamSendsKeepAlivesWhileIdle: an idle stream gets comment
// lines, so proxies and clients can tell a quiet stream from a dead one.
func TestEventStreamSendsKeepAlivesWhileIdle(t *testing.T) {
	hub, _, _ := newEventServer(t)
	s := &server{log: slog.New(slog.DiscardHandler)}
	// Read until three keep-alives came, not for a fixed window: a loaded
	// machine may run the ticker late.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	rec := &keepAliveCounter{ResponseRecorder: httptest.NewRecorder(), want: 3, enough: cancel}
	if err := s.streamEvents(ctx, rec, hub, "t-alice", client.EventQuery{}, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(rec.Body.String(), ": keep-alive\n\n"); n < 3 || rec.Body.Len() != n*len(": keep-alive\n\n") {
		t.Fatalf("%d keep-alives in 5 s at 20 ms, want 3 and nothing else: %q", n, rec.Body.String())
	}
}

// keepAliveCounter records a stream and calls enough once it holds want
// keep-alives.
type keepAliveCounter struct {
	*httptest.ResponseRecorder
	want   int
	enough func()
}

func (k *keepAliveCounter) Write(b []byte) (int, error) {
	n, err := k.ResponseRecorder.Write(b)
	if strings.Count(k.Body.String(), ": keep-alive\n\n") >= k.want {
		k.enough()
	}
	return n, err
}
