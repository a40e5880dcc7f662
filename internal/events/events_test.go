package events_test

import (
	"context"
	"errors"
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

// noAppend is a store whose AppendDaemonEvent always fails: an event it
// keeps was written with its sandbox change, in one transaction.
type noAppend struct{ *sqlite.Store }

func (noAppend) AppendDaemonEvent(context.Context, store.DaemonEvent) (store.DaemonEvent, error) {
	return store.DaemonEvent{}, errors.New("AppendDaemonEvent called: the change and its event were written apart")
}

// TestObserveStoreWritesAChangeAndItsEventTogether: with the Hub's log in
// the observed store, a sandbox change and its event commit in one
// transaction (never through AppendDaemonEvent), the followers are woken
// and the other sinks hear it; a change refused writes no event.
func TestObserveStoreWritesAChangeAndItsEventTogether(t *testing.T) {
	ctx := context.Background()
	raw, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	st0 := &noAppend{raw}
	hub := events.New(st0, events.Options{})
	rec := &recorder{}
	sinks := events.Multi{hub}
	st := events.ObserveStore(st0, &sinks, nil)
	sinks = append(sinks, rec) // added after, as the daemon does
	logged := func() []string {
		t.Helper()
		es, err := raw.ListDaemonEvents(ctx, store.DaemonEventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Type+"/"+e.State)
		}
		return out
	}
	changed := hub.Changed()
	sb, err := st.CreateSandbox(ctx, store.Sandbox{ID: "sb-1", TenantID: store.DefaultTenant, Name: "one", TemplateID: "host", State: store.StateRunning, Spec: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("the followers were not woken")
	}
	if got := strings.Join(logged(), " "); got != "sandbox.created/running" {
		t.Fatalf("log after the create: %s", got)
	}
	sb.State, sb.StopReason = store.StateStopped, "user"
	if sb, err = st.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	// Refused changes: a taken id, a stale version.
	if _, err := st.CreateSandbox(ctx, store.Sandbox{ID: "sb-1", TenantID: store.DefaultTenant, Name: "two", TemplateID: "host", State: store.StateRunning, Spec: []byte("{}")}); err == nil {
		t.Fatal("a create with a taken id succeeded")
	}
	stale := sb
	stale.Version--
	stale.State = store.StateRunning
	if _, err := st.UpdateSandbox(ctx, stale); err == nil {
		t.Fatal("a stale update succeeded")
	}
	if got := strings.Join(logged(), " "); got != "sandbox.created/running sandbox.stopped/stopped" {
		t.Fatalf("log: %s", got)
	}
	if got := strings.Join(rec.got, " "); got != "sandbox.created sandbox.stopped(user)" {
		t.Fatalf("the other sinks heard %s", got)
	}
}
