package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// newEventsCLIServer serves the CLI backend with a real event Hub over
// SQLite, tenant t1 included.
func newEventsCLIServer(t *testing.T) (*httptest.Server, *events.Hub) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateTenant(t.Context(), store.Tenant{ID: "t1", Name: "t1"}); err != nil {
		t.Fatal(err)
	}
	hub := events.New(st, events.Options{Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(api.NewHandler(&cliBackend{}, api.Options{Logger: slog.New(slog.DiscardHandler), Events: hub}))
	t.Cleanup(srv.Close)
	return srv, hub
}

func TestEventsCommandListsFiltersAndResumes(t *testing.T) {
	srv, hub := newEventsCLIServer(t)
	for _, typ := range []string{"sandbox.created", "snapshot.created", "sandbox.stopped"} {
		hub.Emit(context.Background(), events.Event{Type: typ, Tenant: "t1", Sandbox: "sb-1", Reason: "idle"})
	}
	code, out, errOut := stead(t, srv, "events", "--json")
	if code != exitOK {
		t.Fatalf("events: %d %s", code, errOut)
	}
	var all []client.DaemonEvent
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e client.DaemonEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		all = append(all, e)
	}
	if len(all) != 3 {
		t.Fatalf("events --json: %q", out)
	}
	code, out, _ = stead(t, srv, "events", "--type", "sandbox.", "--after", fmt.Sprint(all[0].ID))
	if code != exitOK || strings.Count(out, "\n") != 1 || !strings.Contains(out, "sandbox.stopped") || !strings.Contains(out, "reason=idle") {
		t.Fatalf("events --type --after: %d %q", code, out)
	}
	if code, _, _ := stead(t, srv, "events", "--since", "yesterday"); code != exitUsage {
		t.Fatalf("a bad --since: exit %d", code)
	}
}

func TestWebhookCommands(t *testing.T) {
	srv, _ := newEventsCLIServer(t)
	code, out, errOut := stead(t, srv, "webhook", "add", "http://10.1.2.3:8080/hook", "--type", "sandbox.")
	if code != exitOK || !strings.Contains(out, "secret (shown once): whsec_") {
		t.Fatalf("webhook add: %d %q %s", code, out, errOut)
	}
	id := strings.Fields(out)[1]
	code, out, _ = stead(t, srv, "webhook", "ls")
	if code != exitOK || !strings.Contains(out, id) || strings.Contains(out, "whsec_") {
		t.Fatalf("webhook ls: %d %q", code, out)
	}
	if code, _, errOut := stead(t, srv, "webhook", "add", "http://169.254.169.254/"); code == exitOK || !strings.Contains(errOut, "link-local") {
		t.Fatalf("webhook add to the metadata address: %d %s", code, errOut)
	}
	if code, _, _ := stead(t, srv, "webhook", "redeliver", "not-a-number"); code != exitUsage {
		t.Fatalf("redeliver with a bad id: exit %d", code)
	}
	if code, _, _ := stead(t, srv, "webhook", "deliveries", "wh-absent"); code != exitNotFound {
		t.Fatalf("deliveries of an absent webhook: exit %d", code)
	}
	if code, _, errOut := stead(t, srv, "webhook", "rm", id); code != exitOK {
		t.Fatalf("webhook rm: %d %s", code, errOut)
	}
	if code, _, _ := stead(t, srv, "webhook", "rm", id); code != exitNotFound {
		t.Fatalf("webhook rm twice: exit %d", code)
	}
}
