package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

var (
	alice = api.Principal{TenantID: "t1", KeyID: "key-alice"}
	bob   = api.Principal{TenantID: "t2", KeyID: "key-bob"}
)

// newService returns a Sessions on a fresh SQLite store where tenant t1
// has sandbox "agent-1" (sb-1) and tenant t2 has "theirs" (sb-2).
func newService(t *testing.T) (*Sessions, store.Store) {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for _, tn := range []string{"t1", "t2"} {
		if err := st.CreateTenant(ctx, store.Tenant{ID: tn}); err != nil {
			t.Fatal(err)
		}
	}
	for _, sb := range []store.Sandbox{
		{ID: "sb-1", TenantID: "t1", Name: "agent-1", State: store.StateRunning},
		{ID: "sb-2", TenantID: "t2", Name: "theirs", State: store.StateRunning},
	} {
		if _, err := st.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	return New(st), st
}

// must returns v, or panics with err (which fails the test with a stack
// pointing at the call).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func wantIs(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: %v, want %v", what, err, target)
	}
}

func seqs(evs []client.Event) []int64 {
	out := []int64{}
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

func TestAppendResumeAndEndThroughTheService(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	th := must(s.CreateThread(ctx, alice, "agent-1", client.CreateThreadRequest{Name: "main"}))
	if th.Sandbox != "sb-1" || th.Name != "main" {
		t.Errorf("thread %+v", th)
	}
	_, err := s.CreateThread(ctx, alice, "agent-1", client.CreateThreadRequest{Name: "main"})
	wantIs(t, err, errs.ErrConflict, "second thread named main")
	_, err = s.CreateThread(ctx, alice, "agent-1", client.CreateThreadRequest{Name: "../x"})
	wantIs(t, err, errs.ErrInvalid, "bad thread name")

	run := must(s.StartRun(ctx, alice, "agent-1", "main")) // by name
	evs := must(s.AppendRunEvents(ctx, alice, "agent-1", run.ID, []client.AppendEvent{
		{Type: client.EventModelCall, ModelSession: "ms-1", Payload: json.RawMessage(`{"model":"m","tokens":12}`)},
		{Type: client.EventToolIntent, IdempotencyKey: "rm-1", Payload: json.RawMessage(`{"tool":"rm","args":["-rf","build"]}`)},
		{Type: client.EventToolIntent, IdempotencyKey: "mail-1", Payload: json.RawMessage(`{"tool":"send_mail"}`)},
	}))
	if !slices.Equal(seqs(evs), []int64{1, 2, 3}) || evs[0].Run != run.ID || string(evs[1].Payload) != `{"tool":"rm","args":["-rf","build"]}` {
		t.Fatalf("appended %+v", evs)
	}
	must(s.AppendRunEvents(ctx, alice, "sb-1", run.ID, []client.AppendEvent{{Type: client.EventToolResult, Intent: 2, Payload: json.RawMessage(`{"ok":true}`)}}))
	// Retrying the first batch stores nothing new.
	again := must(s.AppendRunEvents(ctx, alice, "agent-1", run.ID, []client.AppendEvent{
		{Type: client.EventToolIntent, IdempotencyKey: "mail-1", Payload: json.RawMessage(`{"tool":"send_mail"}`)},
	}))
	if again[0].Seq != 3 {
		t.Errorf("replay got seq %d, want 3", again[0].Seq)
	}

	res := must(s.ResumeRun(ctx, "t1", "agent-1", run.ID))
	if res.SafePoint == nil || res.SafePoint.Seq != 4 {
		t.Errorf("safe point %+v, want the last event (4)", res.SafePoint)
	}
	if !slices.Equal(seqs(res.InDoubt), []int64{3}) || res.InDoubt[0].IdempotencyKey != "mail-1" {
		t.Errorf("in doubt %+v, want the send_mail intent (3)", res.InDoubt)
	}
	if len(res.ModelSessions) != 1 || res.ModelSessions[0].ID != "ms-1" {
		t.Errorf("model sessions %+v", res.ModelSessions)
	}

	page := must(s.ListRunEvents(ctx, "t1", "agent-1", run.ID, 1, 2))
	if !slices.Equal(seqs(page.Events), []int64{2, 3}) || page.Next != 3 || !page.More || page.RunStatus != "running" {
		t.Errorf("page after 1 limit 2: %+v", page)
	}
	page = must(s.ListRunEvents(ctx, "t1", "agent-1", run.ID, page.Next, 0))
	if !slices.Equal(seqs(page.Events), []int64{4}) || page.Next != 4 || page.More {
		t.Errorf("last page: %+v", page)
	}

	ended := must(s.EndRun(ctx, alice, "agent-1", run.ID, client.EndRunRequest{}))
	if ended.Status != "completed" || ended.EndedAt == nil || ended.LastSeq != 4 {
		t.Errorf("ended %+v", ended)
	}
	_, err = s.AppendRunEvents(ctx, alice, "agent-1", run.ID, []client.AppendEvent{{Type: client.EventNote}})
	wantIs(t, err, errs.ErrConflict, "append to an ended run")
	_, err = s.EndRun(ctx, alice, "agent-1", run.ID, client.EndRunRequest{Status: "failed"})
	wantIs(t, err, errs.ErrConflict, "end twice")
	runs := must(s.ListRuns(ctx, "t1", "agent-1", th.ID))
	if len(runs) != 1 || runs[0].Status != "completed" {
		t.Errorf("runs %+v", runs)
	}
}

func TestAppendRejectsBadEventsBeforeTheStore(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	must(s.CreateThread(ctx, alice, "agent-1", client.CreateThreadRequest{Name: "main"}))
	run := must(s.StartRun(ctx, alice, "agent-1", "main"))
	big := make([]byte, store.MaxEventPayloadBytes+1)
	for i := range big {
		big[i] = ' '
	}
	for name, e := range map[string]client.AppendEvent{
		"no type":           {Payload: json.RawMessage(`{}`)},
		"unknown type":      {Type: "thought"},
		"payload not JSON":  {Type: client.EventNote, Payload: json.RawMessage(`{"a":`)},
		"payload too large": {Type: client.EventNote, Payload: big},
		"result no intent":  {Type: client.EventToolResult},
		"intent on a note":  {Type: client.EventNote, Intent: 1},
		"control in key":    {Type: client.EventNote, IdempotencyKey: "a\nb"},
	} {
		_, err := s.AppendRunEvents(ctx, alice, "agent-1", run.ID, []client.AppendEvent{{Type: client.EventNote}, e})
		wantIs(t, err, errs.ErrInvalid, name)
	}
	_, err := s.AppendRunEvents(ctx, alice, "agent-1", run.ID, nil)
	wantIs(t, err, errs.ErrInvalid, "empty batch")
	_, err = s.EndRun(ctx, alice, "agent-1", run.ID, client.EndRunRequest{Status: "running"})
	wantIs(t, err, errs.ErrInvalid, "end as running")
	if p := must(s.ListRunEvents(ctx, "t1", "agent-1", run.ID, 0, 0)); len(p.Events) != 0 {
		t.Errorf("refused batches stored %+v", p.Events)
	}
	_, err = s.CreateThread(ctx, alice, "agent-1", client.CreateThreadRequest{Name: "x", Retention: client.Retention{KeepLast: -1}})
	wantIs(t, err, errs.ErrInvalid, "negative retention")
}

func TestAnotherTenantsSessionLogIsNotFound(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	must(s.CreateThread(ctx, alice, "agent-1", client.CreateThreadRequest{Name: "main"}))
	run := must(s.StartRun(ctx, alice, "agent-1", "main"))
	must(s.AppendRunEvents(ctx, alice, "agent-1", run.ID, []client.AppendEvent{{Type: client.EventNote}}))

	for _, sb := range []string{"agent-1", "sb-1", "theirs"} {
		_, err := s.ListThreads(ctx, "t2", sb)
		if sb == "theirs" {
			if err != nil {
				t.Errorf("bob lists his own threads: %v", err)
			}
			continue
		}
		wantIs(t, err, errs.ErrNotFound, "bob lists alice's threads via "+sb)
	}
	calls := map[string]func() error{
		"create thread": func() error {
			_, err := s.CreateThread(ctx, bob, "agent-1", client.CreateThreadRequest{Name: "x"})
			return err
		},
		"start run": func() error { _, err := s.StartRun(ctx, bob, "theirs", "main"); return err },
		"list runs": func() error { _, err := s.ListRuns(ctx, "t2", "theirs", "main"); return err },
		"append": func() error {
			_, err := s.AppendRunEvents(ctx, bob, "theirs", run.ID, []client.AppendEvent{{Type: client.EventNote}})
			return err
		},
		"list events": func() error { _, err := s.ListRunEvents(ctx, "t2", "theirs", run.ID, 0, 0); return err },
		"follow":      func() error { _, err := s.WatchRun(ctx, "t2", "theirs", run.ID); return err },
		"resume":      func() error { _, err := s.ResumeRun(ctx, "t2", "theirs", run.ID); return err },
		"end":         func() error { _, err := s.EndRun(ctx, bob, "theirs", run.ID, client.EndRunRequest{}); return err },
		"prune":       func() error { _, err := s.PruneThread(ctx, bob, "agent-1", "main"); return err },
		"retention": func() error {
			_, err := s.SetThreadRetention(ctx, bob, "theirs", "main", client.Retention{KeepLast: 1})
			return err
		},
	}
	for name, call := range calls {
		wantIs(t, call(), errs.ErrNotFound, "bob: "+name)
	}
	if p := must(s.ListRunEvents(ctx, "t1", "agent-1", run.ID, 0, 0)); len(p.Events) != 1 || p.RunStatus != "running" {
		t.Errorf("alice's run after bob's attempts: %+v", p)
	}
}

func TestDeletedSandboxLogIsReadOnly(t *testing.T) {
	s, st := newService(t)
	ctx := t.Context()
	must(s.CreateThread(ctx, alice, "agent-1", client.CreateThreadRequest{Name: "main"}))
	run := must(s.StartRun(ctx, alice, "agent-1", "main"))
	must(s.AppendRunEvents(ctx, alice, "agent-1", run.ID, []client.AppendEvent{{Type: client.EventNote}}))
	sb := must(st.GetSandbox(ctx, "t1", "sb-1"))
	sb.State = store.StateDeleted
	must(st.UpdateSandbox(ctx, sb))
	_, err := s.AppendRunEvents(ctx, alice, "agent-1", run.ID, []client.AppendEvent{{Type: client.EventNote}})
	wantIs(t, err, errs.ErrConflict, "append to a deleted sandbox's run")
	if res := must(s.ResumeRun(ctx, "t1", "agent-1", run.ID)); res.SafePoint == nil {
		t.Errorf("deleted sandbox's log unreadable: %+v", res)
	}
}

func TestRetentionAppliesOnAppendAndPrune(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	must(s.CreateThread(ctx, alice, "agent-1", client.CreateThreadRequest{Name: "main", Retention: client.Retention{KeepLast: 2}}))
	run := must(s.StartRun(ctx, alice, "agent-1", "main"))
	for i := range 5 {
		must(s.AppendRunEvents(ctx, alice, "agent-1", run.ID, []client.AppendEvent{{Type: client.EventNote, Payload: json.RawMessage(fmt.Sprint(i))}}))
	}
	if p := must(s.ListRunEvents(ctx, "t1", "agent-1", run.ID, 0, 0)); !slices.Equal(seqs(p.Events), []int64{4, 5}) {
		t.Errorf("kept %v, want [4 5]", seqs(p.Events))
	}
	must(s.SetThreadRetention(ctx, alice, "agent-1", "main", client.Retention{KeepWithinSeconds: 60}))
	s.now = func() time.Time { return time.Now().Add(time.Hour) }
	if res := must(s.PruneThread(ctx, alice, "agent-1", "main")); res.Deleted != 1 {
		t.Errorf("prune deleted %d, want 1 (the newest event stays)", res.Deleted)
	}
}

// testBackend serves the session routes from a real Sessions; the rest of
// api.Backend is nil and never called.
type testBackend struct {
	api.Backend
	*Sessions
}

func (testBackend) Authenticate(_ context.Context, secret string) (api.Principal, error) {
	switch secret {
	case "alice":
		return alice, nil
	case "bob":
		return bob, nil
	}
	return api.Principal{}, errs.ErrUnauthenticated
}

func TestFollowOverHTTPDeliversLiveEventsUntilTheRunEnds(t *testing.T) {
	s, _ := newService(t)
	srv := httptest.NewServer(api.NewHandler(testBackend{Sessions: s}, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	c := must(client.New(srv.URL, "alice"))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	must(c.CreateThread(ctx, "agent-1", client.CreateThreadRequest{Name: "main"}))
	run := must(c.StartRun(ctx, "agent-1", "main"))
	must(c.AppendEvent(ctx, "agent-1", run.ID, client.AppendEvent{Type: client.EventNote, Payload: json.RawMessage(`"before"`)}))

	var mu sync.Mutex
	var got []int64
	first := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.FollowEvents(ctx, "agent-1", run.ID, 0, func(e client.Event) error {
			mu.Lock()
			got = append(got, e.Seq)
			n := len(got)
			mu.Unlock()
			if n == 1 {
				close(first)
			}
			return nil
		})
	}()
	<-first
	const writers, each = 4, 10
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("w%d-%d", w, i)
				if _, err := c.AppendEvents(ctx, "agent-1", run.ID, []client.AppendEvent{{Type: client.EventNote, IdempotencyKey: key}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	must(c.EndRun(ctx, "agent-1", run.ID, "completed"))
	if err := <-done; err != nil {
		t.Fatalf("follow: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1+writers*each {
		t.Fatalf("followed %d events, want %d", len(got), 1+writers*each)
	}
	for i, seq := range got {
		if seq != int64(i+1) {
			t.Fatalf("followed seqs %v, want 1..%d in order", got, len(got))
		}
	}
	// Following an ended run replays it and returns; another tenant's run
	// is a 404.
	n := 0
	if err := c.FollowEvents(ctx, "agent-1", run.ID, 40, func(client.Event) error { n++; return nil }); err != nil || n != 1 {
		t.Errorf("follow of an ended run after 40: %d events, %v", n, err)
	}
	cb := must(client.New(srv.URL, "bob"))
	if err := cb.FollowEvents(ctx, "theirs", run.ID, 0, func(client.Event) error { return nil }); !client.IsNotFound(err) {
		t.Errorf("bob follows alice's run: %v, want 404", err)
	}
	res := must(c.ResumeRun(ctx, "agent-1", run.ID))
	if res.Run.Status != "completed" || res.SafePoint == nil || res.SafePoint.Seq != 41 || len(res.InDoubt) != 0 {
		t.Errorf("resume %+v", res)
	}
}
