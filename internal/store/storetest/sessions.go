package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Session log.

// sessionFixture creates sandbox sb1 of the default tenant with thread th1
// (retention r) and its running run run1, and returns the run's key.
func sessionFixture(t *testing.T, s store.Store, r store.Retention) store.RunKey {
	t.Helper()
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	_, err := s.CreateThread(ctx, store.Thread{ID: "th1", TenantID: store.DefaultTenant, SandboxID: "sb1", Name: "main", Retention: r, CreatedAt: at(1)})
	noErr(t, err, "create thread")
	_, err = s.CreateRun(ctx, store.Run{ID: "run1", TenantID: store.DefaultTenant, SandboxID: "sb1", ThreadID: "th1", StartedAt: at(2)})
	noErr(t, err, "create run")
	return store.RunKey{TenantID: store.DefaultTenant, SandboxID: "sb1", RunID: "run1"}
}

func ev(typ store.EventType, payload string) store.EventWrite {
	return store.EventWrite{Type: typ, Payload: []byte(payload)}
}

func appendEvents(t *testing.T, s store.Store, k store.RunKey, evs ...store.EventWrite) []store.Event {
	t.Helper()
	out, err := s.AppendEvents(t.Context(), k, evs)
	noErr(t, err, "append events")
	if len(out) != len(evs) {
		t.Fatalf("append of %d events returned %d", len(evs), len(out))
	}
	return out
}

func seqsOf(evs []store.Event) []int64 {
	out := []int64{}
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

func listAllEvents(t *testing.T, s store.Store, k store.RunKey) []store.Event {
	t.Helper()
	var all []store.Event
	after := int64(0)
	for {
		page, err := s.ListEvents(t.Context(), k, after, 7)
		noErr(t, err, "list events")
		all = append(all, page...)
		if len(page) < 7 {
			return all
		}
		after = page[len(page)-1].Seq
	}
}

func wantSeqs(t *testing.T, what string, got []store.Event, want ...int64) {
	t.Helper()
	if g := seqsOf(got); !slices.Equal(g, want) {
		t.Errorf("%s: seqs %v, want %v", what, g, want)
	}
}

func testSessionThreadsAndRuns(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := sessionFixture(t, s, store.Retention{KeepLast: 5, KeepWithin: time.Hour})
	th, err := s.GetThread(ctx, store.DefaultTenant, "sb1", "main")
	noErr(t, err, "get thread by name")
	if th.ID != "th1" || th.Name != "main" || th.Retention != (store.Retention{KeepLast: 5, KeepWithin: time.Hour}) {
		t.Errorf("thread %+v", th)
	}
	checkTime(t, "thread created_at", th.CreatedAt, at(1))
	_, err = s.CreateThread(ctx, store.Thread{ID: "th2", TenantID: store.DefaultTenant, SandboxID: "sb1", Name: "main"})
	wantErr(t, err, errs.ErrConflict, "create thread with a taken name")
	_, err = s.CreateThread(ctx, store.Thread{ID: "th1", TenantID: store.DefaultTenant, SandboxID: "sb1", Name: "other"})
	wantErr(t, err, errs.ErrConflict, "create thread with a taken id")
	_, err = s.CreateThread(ctx, store.Thread{ID: "th0", TenantID: store.DefaultTenant, SandboxID: "sb1", Name: "aux", CreatedAt: at(0)})
	noErr(t, err, "create second thread")
	_, err = s.CreateThread(ctx, store.Thread{ID: "thx", TenantID: store.DefaultTenant, SandboxID: "nope", Name: "x"})
	wantErr(t, err, errs.ErrNotFound, "create thread in an absent sandbox")
	ths, err := s.ListThreads(ctx, store.DefaultTenant, "sb1")
	noErr(t, err, "list threads")
	var names []string
	for _, th := range ths {
		names = append(names, th.ID)
	}
	wantIDs(t, "threads", names, []string{"th0", "th1"})

	th, err = s.SetThreadRetention(ctx, store.DefaultTenant, "sb1", "th1", store.Retention{KeepLast: 2})
	noErr(t, err, "set retention")
	if th.Retention != (store.Retention{KeepLast: 2}) {
		t.Errorf("retention after set: %+v", th.Retention)
	}

	_, err = s.CreateRun(ctx, store.Run{ID: "run1", TenantID: store.DefaultTenant, SandboxID: "sb1", ThreadID: "th0"})
	wantErr(t, err, errs.ErrConflict, "create run with a taken id")
	_, err = s.CreateRun(ctx, store.Run{ID: "run9", TenantID: store.DefaultTenant, SandboxID: "sb1", ThreadID: "nope"})
	wantErr(t, err, errs.ErrNotFound, "create run of an absent thread")
	_, err = s.CreateRun(ctx, store.Run{ID: "run0", TenantID: store.DefaultTenant, SandboxID: "sb1", ThreadID: "th1", StartedAt: at(1)})
	noErr(t, err, "create second run")
	runs, err := s.ListRuns(ctx, store.DefaultTenant, "sb1", "th1")
	noErr(t, err, "list runs")
	if len(runs) != 2 || runs[0].ID != "run0" || runs[1].ID != "run1" || runs[1].Status != store.RunRunning {
		t.Errorf("runs %+v", runs)
	}
	r, err := s.EndRun(ctx, k, store.RunCompleted, at(9))
	noErr(t, err, "end run")
	if r.Status != store.RunCompleted || r.EndedAt == nil {
		t.Errorf("ended run %+v", r)
	}
	got, err := s.GetRun(ctx, k)
	noErr(t, err, "get run")
	if got.Status != store.RunCompleted || got.EndedAt == nil {
		t.Errorf("stored ended run %+v", got)
	} else {
		checkTime(t, "ended_at", *got.EndedAt, at(9))
	}
	_, err = s.EndRun(ctx, k, store.RunFailed, time.Time{})
	wantErr(t, err, errs.ErrConflict, "end an ended run")
	_, err = s.AppendEvents(ctx, k, []store.EventWrite{ev(store.EventNote, `{}`)})
	wantErr(t, err, errs.ErrConflict, "append to an ended run")
	_, err = s.EndRun(ctx, store.RunKey{TenantID: store.DefaultTenant, SandboxID: "sb1", RunID: "run0"}, store.RunRunning, time.Time{})
	wantErr(t, err, errs.ErrInvalid, "end with status running")
}

func testAppendEventsNumbersAndIsIdempotent(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := sessionFixture(t, s, store.Retention{})
	first := appendEvents(t, s, k, ev(store.EventModelCall, `{"model":"m"}`), ev(store.EventNote, ""))
	wantSeqs(t, "first batch", first, 1, 2)
	if string(first[1].Payload) != "null" || first[0].RunID != "run1" || first[0].Type != store.EventModelCall {
		t.Errorf("stored %+v", first)
	}
	w := store.EventWrite{Type: store.EventToolIntent, IdempotencyKey: "intent-a", Payload: []byte(`{"tool":"rm"}`), ModelSession: "ms1"}
	one := appendEvents(t, s, k, w)
	wantSeqs(t, "keyed append", one, 3)
	// A replay returns the original and stores nothing, alone or in a batch.
	again := appendEvents(t, s, k, w)
	wantSeqs(t, "replay", again, 3)
	if !again[0].Time.Equal(one[0].Time) || again[0].IdempotencyKey != "intent-a" || again[0].ModelSession != "ms1" {
		t.Errorf("replay returned %+v, want %+v", again[0], one[0])
	}
	mixed := appendEvents(t, s, k, ev(store.EventNote, `1`), w, ev(store.EventNote, `2`))
	wantSeqs(t, "batch with a replay", mixed, 4, 3, 5)
	// The same key twice in one batch is stored once.
	k2 := store.EventWrite{Type: store.EventNote, IdempotencyKey: "n", Payload: []byte(`{}`)}
	dup := appendEvents(t, s, k, k2, k2)
	wantSeqs(t, "key twice in a batch", dup, 6, 6)
	// Same key, different event: conflict, nothing stored.
	_, err := s.AppendEvents(ctx, k, []store.EventWrite{ev(store.EventNote, `3`),
		{Type: store.EventToolIntent, IdempotencyKey: "intent-a", Payload: []byte(`{"tool":"ls"}`)}})
	wantErr(t, err, errs.ErrConflict, "reuse of a key for another event")
	all := listAllEvents(t, s, k)
	wantSeqs(t, "stored", all, 1, 2, 3, 4, 5, 6)
	r, err := s.GetRun(ctx, k)
	noErr(t, err, "get run")
	if r.LastSeq != 6 {
		t.Errorf("last seq %d, want 6", r.LastSeq)
	}
	// Range reads.
	page, err := s.ListEvents(ctx, k, 2, 2)
	noErr(t, err, "list after 2")
	wantSeqs(t, "after 2 limit 2", page, 3, 4)
	if !bytes.Equal(page[0].Payload, []byte(`{"tool":"rm"}`)) {
		t.Errorf("payload %s", page[0].Payload)
	}
	page, err = s.ListEvents(ctx, k, 6, 10)
	noErr(t, err, "list after the end")
	wantSeqs(t, "after 6", page)
	for _, bad := range []struct {
		after int64
		limit int
	}{{0, 0}, {0, store.MaxEventList + 1}, {-1, 5}} {
		_, err = s.ListEvents(ctx, k, bad.after, bad.limit)
		wantErr(t, err, errs.ErrInvalid, fmt.Sprintf("list after %d limit %d", bad.after, bad.limit))
	}
}

func testAppendEventsBatchIsAllOrNothing(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := sessionFixture(t, s, store.Retention{})
	appendEvents(t, s, k, ev(store.EventToolIntent, `{}`))
	big := strings.Repeat("x", store.MaxEventPayloadBytes-1)
	bad := map[string][]store.EventWrite{
		"unknown type":           {ev(store.EventNote, `1`), ev("bogus", `2`)},
		"payload too large":      {ev(store.EventNote, `1`), ev(store.EventNote, `"`+big+`"`)},
		"result without intent":  {ev(store.EventNote, `1`), ev(store.EventToolResult, `2`)},
		"intent on a note":       {ev(store.EventNote, `1`), {Type: store.EventNote, Intent: 1}},
		"result of a non-intent": {ev(store.EventNote, `1`), {Type: store.EventToolResult, Intent: 2}},
		"result of a future seq": {ev(store.EventNote, `1`), {Type: store.EventToolResult, Intent: 9}},
		"empty batch":            {},
		"batch too large":        make([]store.EventWrite, store.MaxEventBatch+1),
	}
	for name, evs := range bad {
		_, err := s.AppendEvents(ctx, k, evs)
		wantErr(t, err, errs.ErrInvalid, name)
	}
	wantSeqs(t, "after refused batches", listAllEvents(t, s, k), 1)
	// An intent and its result in one batch are fine; seqs continue.
	got := appendEvents(t, s, k, ev(store.EventToolIntent, `{}`), store.EventWrite{Type: store.EventToolResult, Intent: 2},
		store.EventWrite{Type: store.EventToolResult, Intent: 1})
	wantSeqs(t, "intent and results", got, 2, 3, 4)
	ok := appendEvents(t, s, k, ev(store.EventNote, `"`+big[:len(big)-1]+`"`))
	wantSeqs(t, "largest payload", ok, 5)
}

func testConcurrentAppendsGetConsecutiveSeqs(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := sessionFixture(t, s, store.Retention{})
	const workers, each = 16, 12
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			var last int64
			for i := range each {
				batch := []store.EventWrite{{Type: store.EventNote, Payload: fmt.Appendf(nil, `{"w":%d,"i":%d}`, w, i),
					IdempotencyKey: fmt.Sprintf("w%d-i%d", w, i)}}
				if i%3 == 0 {
					batch = append(batch, store.EventWrite{Type: store.EventNote, Payload: fmt.Appendf(nil, `{"w":%d,"i":%d,"b":1}`, w, i)})
				}
				got, err := s.AppendEvents(ctx, k, batch)
				if err != nil {
					errc <- err
					return
				}
				for _, e := range got {
					if e.Seq <= last {
						errc <- fmt.Errorf("worker %d: seq %d after %d", w, e.Seq, last)
						return
					}
					last = e.Seq
				}
				if len(got) == 2 && got[1].Seq != got[0].Seq+1 {
					errc <- fmt.Errorf("worker %d: batch seqs %d, %d are not consecutive", w, got[0].Seq, got[1].Seq)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	n := int64(workers * (each + (each+2)/3))
	all := listAllEvents(t, s, k)
	if int64(len(all)) != n {
		t.Fatalf("stored %d events, want %d", len(all), n)
	}
	for i, e := range all {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: seqs are not 1..%d", i, e.Seq, n)
		}
	}
}

func testSessionsOfAnotherTenantAreAbsent(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := sessionFixture(t, s, store.Retention{})
	appendEvents(t, s, k, ev(store.EventNote, `{}`))
	createTenant(t, s, "t2")
	createSandbox(t, s, newSandbox("sb2", "t2", "web", at(0)))
	other := store.RunKey{TenantID: "t2", SandboxID: "sb1", RunID: "run1"}
	otherSandbox := store.RunKey{TenantID: "t2", SandboxID: "sb2", RunID: "run1"}
	for _, k := range []store.RunKey{other, otherSandbox} {
		_, err := s.GetRun(ctx, k)
		wantErr(t, err, errs.ErrNotFound, "get run of another tenant")
		_, err = s.ListEvents(ctx, k, 0, 10)
		wantErr(t, err, errs.ErrNotFound, "list events of another tenant")
		_, err = s.AppendEvents(ctx, k, []store.EventWrite{ev(store.EventNote, `{}`)})
		wantErr(t, err, errs.ErrNotFound, "append as another tenant")
		_, err = s.ResumeRun(ctx, k)
		wantErr(t, err, errs.ErrNotFound, "resume as another tenant")
		_, err = s.EndRun(ctx, k, store.RunFailed, time.Time{})
		wantErr(t, err, errs.ErrNotFound, "end as another tenant")
		_, err = s.GetThread(ctx, k.TenantID, k.SandboxID, "th1")
		wantErr(t, err, errs.ErrNotFound, "get thread of another tenant")
		_, err = s.ListRuns(ctx, k.TenantID, k.SandboxID, "th1")
		wantErr(t, err, errs.ErrNotFound, "list runs of another tenant")
		_, err = s.SetThreadRetention(ctx, k.TenantID, k.SandboxID, "th1", store.Retention{KeepLast: 1})
		wantErr(t, err, errs.ErrNotFound, "set retention as another tenant")
		_, err = s.PruneThread(ctx, k.TenantID, k.SandboxID, "th1", time.Now())
		wantErr(t, err, errs.ErrNotFound, "prune as another tenant")
		_, err = s.CreateRun(ctx, store.Run{ID: "run2", TenantID: k.TenantID, SandboxID: k.SandboxID, ThreadID: "th1"})
		wantErr(t, err, errs.ErrNotFound, "start a run in another tenant's thread")
	}
	_, err := s.ListThreads(ctx, "t2", "sb1")
	wantErr(t, err, errs.ErrNotFound, "list threads of another tenant's sandbox")
	_, err = s.CreateThread(ctx, store.Thread{ID: "th9", TenantID: "t2", SandboxID: "sb1", Name: "x"})
	wantErr(t, err, errs.ErrNotFound, "create thread in another tenant's sandbox")
	ths, err := s.ListThreads(ctx, "t2", "sb2")
	noErr(t, err, "list own threads")
	if len(ths) != 0 {
		t.Errorf("tenant t2 sees threads %+v", ths)
	}
	// The owner's log is untouched.
	wantSeqs(t, "owner's events", listAllEvents(t, s, k), 1)
}

func testResumeReportsSafePointAndInDoubtIntents(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := sessionFixture(t, s, store.Retention{})
	res, err := s.ResumeRun(ctx, k)
	noErr(t, err, "resume an empty run")
	if res.SafePoint != nil || len(res.InDoubt) != 0 || res.Run.ID != "run1" {
		t.Errorf("empty run resume %+v", res)
	}
	appendEvents(t, s, k,
		store.EventWrite{Type: store.EventModelCall, ModelSession: "ms-a", Payload: []byte(`{}`)}, // 1
		ev(store.EventToolIntent, `{"n":1}`),                                                      // 2
		ev(store.EventToolIntent, `{"n":2}`),                                                      // 3
		store.EventWrite{Type: store.EventToolResult, Intent: 3, ModelSession: "ms-b"},            // 4
		ev(store.EventNote, `{}`),                                                                 // 5
	)
	res, err = s.ResumeRun(ctx, k)
	noErr(t, err, "resume without checkpoint")
	if res.SafePoint == nil || res.SafePoint.Seq != 5 {
		t.Errorf("safe point %+v, want the last event (5)", res.SafePoint)
	}
	wantSeqs(t, "in doubt", res.InDoubt, 2)
	if len(res.ModelSessions) != 2 || res.ModelSessions[0].ID != "ms-a" || res.ModelSessions[0].FirstSeq != 1 || res.ModelSessions[1].ID != "ms-b" {
		t.Errorf("model sessions %+v", res.ModelSessions)
	}
	appendEvents(t, s, k, ev(store.EventCheckpoint, `{"at":6}`), ev(store.EventToolIntent, `{"n":3}`), ev(store.EventNote, `{}`))
	res, err = s.ResumeRun(ctx, k)
	noErr(t, err, "resume with checkpoint")
	if res.SafePoint == nil || res.SafePoint.Seq != 6 || res.SafePoint.Type != store.EventCheckpoint || string(res.SafePoint.Payload) != `{"at":6}` {
		t.Errorf("safe point %+v, want the checkpoint (6)", res.SafePoint)
	}
	wantSeqs(t, "in doubt", res.InDoubt, 2, 7)
	appendEvents(t, s, k, store.EventWrite{Type: store.EventToolResult, Intent: 2}, store.EventWrite{Type: store.EventToolResult, Intent: 7})
	res, err = s.ResumeRun(ctx, k)
	noErr(t, err, "resume after results")
	wantSeqs(t, "in doubt after results", res.InDoubt)
}

func testRetentionKeepsLastNAndProtectedEvents(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := sessionFixture(t, s, store.Retention{KeepLast: 3})
	appendEvents(t, s, k,
		ev(store.EventToolIntent, `{}`),                          // 1: in doubt, kept
		ev(store.EventCheckpoint, `{}`),                          // 2: the newest checkpoint, kept
		ev(store.EventToolIntent, `{}`),                          // 3: answered below, may go
		ev(store.EventNote, `{}`),                                // 4
		store.EventWrite{Type: store.EventToolResult, Intent: 3}, // 5
		ev(store.EventNote, `{}`),                                // 6
		ev(store.EventNote, `{}`),                                // 7
	)
	wantSeqs(t, "after append with keep_last 3", listAllEvents(t, s, k), 1, 2, 5, 6, 7)
	res, err := s.ResumeRun(ctx, k)
	noErr(t, err, "resume")
	if res.SafePoint == nil || res.SafePoint.Seq != 2 {
		t.Errorf("safe point %+v, want the checkpoint 2", res.SafePoint)
	}
	wantSeqs(t, "in doubt", res.InDoubt, 1)
	// keep_within via PruneThread: everything but the protected events and
	// the last one is older than an hour at now+2h.
	_, err = s.SetThreadRetention(ctx, store.DefaultTenant, "sb1", "th1", store.Retention{KeepWithin: time.Hour})
	noErr(t, err, "set retention")
	n, err := s.PruneThread(ctx, store.DefaultTenant, "sb1", "th1", time.Now().Add(2*time.Hour))
	noErr(t, err, "prune")
	if n != 2 {
		t.Errorf("pruned %d events, want 2", n)
	}
	wantSeqs(t, "after keep_within prune", listAllEvents(t, s, k), 1, 2, 7)
	n, err = s.PruneThread(ctx, store.DefaultTenant, "sb1", "th1", time.Now())
	noErr(t, err, "prune at now")
	if n != 0 {
		t.Errorf("pruned %d young events", n)
	}
	// Seqs are never reused after pruning.
	wantSeqs(t, "append after prune", appendEvents(t, s, k, ev(store.EventNote, `{}`)), 8)
	_, err = s.SetThreadRetention(ctx, store.DefaultTenant, "sb1", "th1", store.Retention{KeepLast: -1})
	wantErr(t, err, errs.ErrInvalid, "negative keep_last")
}

func testPurgingASandboxDeletesItsSessions(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := sessionFixture(t, s, store.Retention{})
	appendEvents(t, s, k, ev(store.EventNote, `{}`))
	noErr(t, s.DeleteSandbox(ctx, store.DefaultTenant, "sb1"), "purge sandbox")
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(3)))
	_, err := s.GetRun(ctx, k)
	wantErr(t, err, errs.ErrNotFound, "run of a purged sandbox")
	ths, err := s.ListThreads(ctx, store.DefaultTenant, "sb1")
	noErr(t, err, "list threads")
	if len(ths) != 0 {
		t.Errorf("threads survived the purge: %+v", ths)
	}
	if _, err := s.CreateRun(ctx, store.Run{ID: "run1", TenantID: store.DefaultTenant, SandboxID: "sb1", ThreadID: "th1"}); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("create run in a purged thread: %v", err)
	}
}
