package events_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) Emit(_ context.Context, e events.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := e.Type
	if e.Reason != "" {
		s += "(" + e.Reason + ")"
	}
	r.got = append(r.got, s)
}

// TestObserveStoreEmitsEveryTransition: whoever changes a sandbox's state
// through the store, the change is one event, named for the transition.
func TestObserveStoreEmitsEveryTransition(t *testing.T) {
	ctx := context.Background()
	raw, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rec := &recorder{}
	st := events.ObserveStore(raw, rec, nil)
	sb, err := st.CreateSandbox(ctx, store.Sandbox{ID: "sb-1", TenantID: store.DefaultTenant, Name: "one", TemplateID: "host", State: store.StateCreating, Spec: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	step := func(state store.SandboxState, reason string) {
		t.Helper()
		sb.State, sb.StopReason = state, reason
		if sb, err = st.UpdateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	step(store.StateStopped, "created")
	step(store.StateRunning, "")
	step(store.StateRunning, "") // no change, no event
	step(store.StatePaused, "user")
	step(store.StateRunning, "")
	step(store.StateStopped, "idle")
	step(store.StateArchived, "archived")
	step(store.StateStopped, "hydrated")
	step(store.StateDeleted, "deleted")
	step(store.StateStopped, "undeleted")
	if err := st.DeleteSandbox(ctx, store.DefaultTenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	want := "sandbox.created sandbox.started sandbox.paused(user) sandbox.resumed sandbox.stopped(idle) sandbox.archived(archived) " +
		"sandbox.stopped(hydrated) sandbox.deleted(deleted) sandbox.undeleted(undeleted) sandbox.purged"
	if got := strings.Join(rec.got, " "); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
}
