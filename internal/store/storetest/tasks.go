package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Structured state: tasks, observations, key-value entries.

const dt = store.DefaultTenant

// stateFixture creates sandbox sb1 of the default tenant.
func stateFixture(t *testing.T, s store.Store) {
	t.Helper()
	createSandbox(t, s, newSandbox("sb1", dt, "web", at(0)))
}

func createTask(t *testing.T, s store.Store, id string, sec int, payload string) store.Task {
	t.Helper()
	got, err := s.CreateTask(t.Context(), store.Task{TenantID: dt, SandboxID: "sb1", ID: id, Payload: []byte(payload), CreatedAt: at(sec)})
	noErr(t, err, "create task "+id)
	return got
}

func transition(s store.Store, id string, to, ifState store.TaskState) (store.Task, error) {
	return s.TransitionTask(context.Background(), store.TaskTransition{TenantID: dt, SandboxID: "sb1", ID: id, To: to, IfState: ifState})
}

func taskIDs(t *testing.T, s store.Store, f store.TaskFilter) []string {
	t.Helper()
	list, err := s.ListTasks(t.Context(), dt, "sb1", f)
	noErr(t, err, fmt.Sprintf("list tasks %+v", f))
	ids := []string{}
	for _, tk := range list {
		ids = append(ids, tk.ID)
	}
	return ids
}

func testTasksCreateGetAndTransition(t *testing.T, s store.Store) {
	ctx := t.Context()
	stateFixture(t, s)
	tk := createTask(t, s, "t1", 1, `{"goal":"build"}`)
	if tk.State != store.TaskOpen || string(tk.Payload) != `{"goal":"build"}` {
		t.Fatalf("created %+v", tk)
	}
	checkTime(t, "created_at", tk.CreatedAt, at(1))
	checkTime(t, "updated_at", tk.UpdatedAt, at(1))
	got, err := s.GetTask(ctx, dt, "sb1", "t1")
	noErr(t, err, "get task")
	if got.ID != "t1" || got.TenantID != dt || got.SandboxID != "sb1" || got.State != store.TaskOpen || !bytes.Equal(got.Payload, tk.Payload) {
		t.Errorf("get %+v", got)
	}
	checkTime(t, "stored created_at", got.CreatedAt, at(1))

	_, err = s.CreateTask(ctx, store.Task{TenantID: dt, SandboxID: "sb1", ID: "t1", Payload: []byte(`1`)})
	wantErr(t, err, errs.ErrConflict, "duplicate task id")
	if got, _ := s.GetTask(ctx, dt, "sb1", "t1"); string(got.Payload) != `{"goal":"build"}` {
		t.Errorf("duplicate create changed the task: %s", got.Payload)
	}
	_, err = s.GetTask(ctx, dt, "sb1", "nope")
	wantErr(t, err, errs.ErrNotFound, "absent task")
	_, err = transition(s, "nope", store.TaskInProgress, "")
	wantErr(t, err, errs.ErrNotFound, "transition of an absent task")

	// Illegal moves are conflicts and change nothing.
	for _, to := range []store.TaskState{store.TaskOpen, store.TaskDone, store.TaskFailed, store.TaskCancelled} {
		_, err = transition(s, "t1", to, "")
		wantErr(t, err, errs.ErrConflict, "open → "+string(to))
	}
	_, err = transition(s, "t1", "bogus", "")
	wantErr(t, err, errs.ErrInvalid, "unknown state")
	_, err = transition(s, "t1", store.TaskInProgress, "bogus")
	wantErr(t, err, errs.ErrInvalid, "unknown if-state")
	// A wrong if-state is a conflict even for a legal move.
	_, err = transition(s, "t1", store.TaskInProgress, store.TaskDone)
	wantErr(t, err, errs.ErrConflict, "stale if-state")
	if got, _ := s.GetTask(ctx, dt, "sb1", "t1"); got.State != store.TaskOpen {
		t.Fatalf("refused transitions changed the state to %s", got.State)
	}

	tk, err = s.TransitionTask(ctx, store.TaskTransition{TenantID: dt, SandboxID: "sb1", ID: "t1",
		To: store.TaskInProgress, IfState: store.TaskOpen, At: at(5)})
	noErr(t, err, "open → in_progress")
	if tk.State != store.TaskInProgress || string(tk.Payload) != `{"goal":"build"}` {
		t.Errorf("after start: %+v", tk)
	}
	checkTime(t, "updated_at after start", tk.UpdatedAt, at(5))
	checkTime(t, "created_at after start", tk.CreatedAt, at(1))
	tk, err = s.TransitionTask(ctx, store.TaskTransition{TenantID: dt, SandboxID: "sb1", ID: "t1",
		To: store.TaskDone, Payload: []byte(`{"goal":"build","result":"ok"}`), At: at(6)})
	noErr(t, err, "in_progress → done with payload")
	got, _ = s.GetTask(ctx, dt, "sb1", "t1")
	if got.State != store.TaskDone || string(got.Payload) != `{"goal":"build","result":"ok"}` {
		t.Errorf("after done: %+v", got)
	}
	checkTime(t, "stored updated_at", got.UpdatedAt, at(6))
	_, err = transition(s, "t1", store.TaskInProgress, "")
	wantErr(t, err, errs.ErrConflict, "done → in_progress")
	for _, end := range []store.TaskState{store.TaskDone, store.TaskFailed, store.TaskCancelled} {
		if end != store.TaskDone {
			_, err = transition(s, "t1", store.TaskInProgress, store.TaskOpen)
			noErr(t, err, "start again")
			_, err = transition(s, "t1", end, store.TaskInProgress)
			noErr(t, err, "→ "+string(end))
		}
		_, err = transition(s, "t1", store.TaskOpen, end)
		noErr(t, err, "reopen from "+string(end))
	}
	if got, _ := s.GetTask(ctx, dt, "sb1", "t1"); got.State != store.TaskOpen {
		t.Errorf("after reopen: %s", got.State)
	}

	// Bad input.
	_, err = s.CreateTask(ctx, store.Task{TenantID: dt, SandboxID: "sb1", ID: ""})
	wantErr(t, err, errs.ErrInvalid, "empty id")
	_, err = s.CreateTask(ctx, store.Task{TenantID: dt, SandboxID: "", ID: "x"})
	wantErr(t, err, errs.ErrInvalid, "empty sandbox")
	_, err = s.CreateTask(ctx, store.Task{TenantID: dt, SandboxID: "sb1", ID: "big", Payload: bytes.Repeat([]byte("1"), store.MaxStatePayloadBytes+1)})
	wantErr(t, err, errs.ErrInvalid, "payload too large")
	_, err = s.CreateTask(ctx, store.Task{TenantID: dt, SandboxID: "sb9", ID: "x"})
	wantErr(t, err, errs.ErrNotFound, "absent sandbox")
	// An empty payload is stored as null; the largest payload fits.
	if tk := createTask(t, s, "empty", 2, ""); string(tk.Payload) != "null" {
		t.Errorf("empty payload stored as %q", tk.Payload)
	}
	createTask(t, s, "max", 3, `"`+strings.Repeat("x", store.MaxStatePayloadBytes-2)+`"`)
}

func testListTasksFiltersAndPages(t *testing.T, s store.Store) {
	stateFixture(t, s)
	// Created out of order; b and c share a creation time.
	createTask(t, s, "d", 4, `1`)
	createTask(t, s, "c", 2, `1`)
	createTask(t, s, "b", 2, `1`)
	createTask(t, s, "a", 1, `1`)
	createTask(t, s, "e", 5, `1`)
	_, err := transition(s, "b", store.TaskInProgress, "")
	noErr(t, err, "start b")
	_, err = transition(s, "d", store.TaskInProgress, "")
	noErr(t, err, "start d")
	_, err = transition(s, "d", store.TaskDone, "")
	noErr(t, err, "finish d")

	wantIDs(t, "all", taskIDs(t, s, store.TaskFilter{}), []string{"a", "b", "c", "d", "e"})
	wantIDs(t, "open tasks", taskIDs(t, s, store.TaskFilter{States: store.OpenTaskStates}), []string{"a", "b", "c", "e"})
	wantIDs(t, "in progress", taskIDs(t, s, store.TaskFilter{States: []store.TaskState{store.TaskInProgress}}), []string{"b"})
	wantIDs(t, "done", taskIDs(t, s, store.TaskFilter{States: []store.TaskState{store.TaskDone}}), []string{"d"})
	wantIDs(t, "failed", taskIDs(t, s, store.TaskFilter{States: []store.TaskState{store.TaskFailed}}), []string{})
	wantIDs(t, "created after 2", taskIDs(t, s, store.TaskFilter{CreatedAfter: at(2)}), []string{"d", "e"})
	wantIDs(t, "open, created after 1", taskIDs(t, s, store.TaskFilter{States: store.OpenTaskStates, CreatedAfter: at(1)}), []string{"b", "c", "e"})

	// Paging through equal creation times loses and repeats nothing.
	var pages []string
	after := ""
	for range 10 {
		ids := taskIDs(t, s, store.TaskFilter{After: after, Limit: 2})
		if len(ids) == 0 {
			break
		}
		pages = append(pages, ids...)
		after = ids[len(ids)-1]
	}
	wantIDs(t, "paged", pages, []string{"a", "b", "c", "d", "e"})
	wantIDs(t, "open after b", taskIDs(t, s, store.TaskFilter{States: store.OpenTaskStates, After: "b"}), []string{"c", "e"})

	ctx := t.Context()
	_, err = s.ListTasks(ctx, dt, "sb1", store.TaskFilter{States: []store.TaskState{"bogus"}})
	wantErr(t, err, errs.ErrInvalid, "unknown state filter")
	_, err = s.ListTasks(ctx, dt, "sb1", store.TaskFilter{Limit: store.MaxStateList + 1})
	wantErr(t, err, errs.ErrInvalid, "limit too large")
	_, err = s.ListTasks(ctx, dt, "sb1", store.TaskFilter{Limit: -1})
	wantErr(t, err, errs.ErrInvalid, "negative limit")
	_, err = s.ListTasks(ctx, dt, "sb1", store.TaskFilter{After: "zz"})
	wantErr(t, err, errs.ErrInvalid, "cursor naming no task")
	_, err = s.ListTasks(ctx, dt, "sb9", store.TaskFilter{})
	wantErr(t, err, errs.ErrNotFound, "absent sandbox")
}

func testConcurrentTaskTransitionsHaveOneWinner(t *testing.T, s store.Store) {
	stateFixture(t, s)
	const n = 16
	for round := range 3 {
		id := fmt.Sprintf("t%d", round)
		createTask(t, s, id, round, `{}`)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won, conflicts int
		for range n {
			wg.Go(func() {
				// Every worker claims the open task.
				_, err := transition(s, id, store.TaskInProgress, store.TaskOpen)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case errors.Is(err, errs.ErrConflict):
					conflicts++
				default:
					t.Errorf("claim %s: %v", id, err)
				}
			})
		}
		wg.Wait()
		if won != 1 || conflicts != n-1 {
			t.Errorf("claim %s: %d winners, %d conflicts; want 1 and %d", id, won, conflicts, n-1)
		}
	}
}

func testObservationsAppendAndList(t *testing.T, s store.Store) {
	ctx := t.Context()
	stateFixture(t, s)
	for i, kind := range []string{"metric", "test", "metric", "note", "metric"} {
		o, err := s.AppendObservation(ctx, store.ObservationWrite{TenantID: dt, SandboxID: "sb1", Kind: kind,
			Principal: "key-1", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)), Time: at(i)})
		noErr(t, err, "append observation")
		if o.Seq != int64(i+1) || o.Kind != kind || o.Principal != "key-1" {
			t.Errorf("appended %+v", o)
		}
		checkTime(t, "observation time", o.Time, at(i))
	}
	list, err := s.ListObservations(ctx, dt, "sb1", store.ObservationFilter{})
	noErr(t, err, "list observations")
	if len(list) != 5 {
		t.Fatalf("listed %d observations", len(list))
	}
	for i, o := range list {
		if o.Seq != int64(i+1) || string(o.Payload) != fmt.Sprintf(`{"i":%d}`, i) || o.TenantID != dt || o.SandboxID != "sb1" {
			t.Errorf("observation %d: %+v", i, o)
		}
		checkTime(t, "listed time", o.Time, at(i))
	}
	seqs := func(f store.ObservationFilter) []int64 {
		t.Helper()
		l, err := s.ListObservations(ctx, dt, "sb1", f)
		noErr(t, err, fmt.Sprintf("list %+v", f))
		out := []int64{}
		for _, o := range l {
			out = append(out, o.Seq)
		}
		return out
	}
	if got := seqs(store.ObservationFilter{After: 2, Limit: 2}); !slices.Equal(got, []int64{3, 4}) {
		t.Errorf("after 2, limit 2: %v", got)
	}
	if got := seqs(store.ObservationFilter{Kind: "metric", After: 1}); !slices.Equal(got, []int64{3, 5}) {
		t.Errorf("metrics after 1: %v", got)
	}
	if got := seqs(store.ObservationFilter{After: 5}); len(got) != 0 {
		t.Errorf("after the last: %v", got)
	}
	o, err := s.AppendObservation(ctx, store.ObservationWrite{TenantID: dt, SandboxID: "sb1", Kind: "empty"})
	noErr(t, err, "append without payload")
	if string(o.Payload) != "null" || o.Seq != 6 {
		t.Errorf("empty payload: %+v", o)
	}
	_, err = s.AppendObservation(ctx, store.ObservationWrite{TenantID: dt, SandboxID: "sb1"})
	wantErr(t, err, errs.ErrInvalid, "empty kind")
	_, err = s.AppendObservation(ctx, store.ObservationWrite{TenantID: dt, SandboxID: "sb1", Kind: "k",
		Payload: bytes.Repeat([]byte("1"), store.MaxStatePayloadBytes+1)})
	wantErr(t, err, errs.ErrInvalid, "payload too large")
	_, err = s.AppendObservation(ctx, store.ObservationWrite{TenantID: dt, SandboxID: "sb9", Kind: "k"})
	wantErr(t, err, errs.ErrNotFound, "absent sandbox")
	_, err = s.ListObservations(ctx, dt, "sb1", store.ObservationFilter{After: -1})
	wantErr(t, err, errs.ErrInvalid, "negative cursor")

	// Another sandbox counts from 1.
	createSandbox(t, s, newSandbox("sb2", dt, "other", at(0)))
	o, err = s.AppendObservation(ctx, store.ObservationWrite{TenantID: dt, SandboxID: "sb2", Kind: "k"})
	noErr(t, err, "append to sb2")
	if o.Seq != 1 {
		t.Errorf("first seq of sb2: %d", o.Seq)
	}
}

func testConcurrentObservationAppendsGetConsecutiveSeqs(t *testing.T, s store.Store) {
	stateFixture(t, s)
	const workers, each = 8, 10
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				_, err := s.AppendObservation(context.Background(), store.ObservationWrite{TenantID: dt, SandboxID: "sb1",
					Kind: "k", Payload: []byte(fmt.Sprintf(`[%d,%d]`, w, i))})
				if err != nil {
					t.Errorf("append: %v", err)
				}
			}
		})
	}
	wg.Wait()
	list, err := s.ListObservations(t.Context(), dt, "sb1", store.ObservationFilter{})
	noErr(t, err, "list")
	if len(list) != workers*each {
		t.Fatalf("%d observations, want %d", len(list), workers*each)
	}
	for i, o := range list {
		if o.Seq != int64(i+1) {
			t.Fatalf("observation %d has seq %d", i, o.Seq)
		}
	}
}

func kvKeys(t *testing.T, s store.Store, f store.KVFilter) []string {
	t.Helper()
	list, err := s.ListKV(t.Context(), dt, "sb1", f)
	noErr(t, err, fmt.Sprintf("list kv %+v", f))
	keys := []string{}
	for _, e := range list {
		keys = append(keys, e.Key)
	}
	return keys
}

func putKV(t *testing.T, s store.Store, key, value string, ifVersion int64) store.KVEntry {
	t.Helper()
	e, err := s.PutKV(t.Context(), store.KVWrite{TenantID: dt, SandboxID: "sb1", Key: key, Value: []byte(value), IfVersion: ifVersion})
	noErr(t, err, "put "+key)
	return e
}

func testKVPutGetListDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	stateFixture(t, s)
	e, err := s.PutKV(ctx, store.KVWrite{TenantID: dt, SandboxID: "sb1", Key: "model", Value: []byte(`"opus"`), IfVersion: 0, At: at(1)})
	noErr(t, err, "create key")
	if e.Version != 1 || string(e.Value) != `"opus"` {
		t.Errorf("created %+v", e)
	}
	checkTime(t, "created_at", e.CreatedAt, at(1))
	_, err = s.PutKV(ctx, store.KVWrite{TenantID: dt, SandboxID: "sb1", Key: "model", Value: []byte(`"x"`), IfVersion: 0})
	wantErr(t, err, errs.ErrConflict, "if-version 0 on an existing key")
	_, err = s.PutKV(ctx, store.KVWrite{TenantID: dt, SandboxID: "sb1", Key: "model", Value: []byte(`"x"`), IfVersion: 2})
	wantErr(t, err, errs.ErrConflict, "stale if-version")
	_, err = s.PutKV(ctx, store.KVWrite{TenantID: dt, SandboxID: "sb1", Key: "new", Value: []byte(`"x"`), IfVersion: 1})
	wantErr(t, err, errs.ErrConflict, "if-version 1 on an absent key")
	e, err = s.PutKV(ctx, store.KVWrite{TenantID: dt, SandboxID: "sb1", Key: "model", Value: []byte(`"sonnet"`), IfVersion: 1, At: at(2)})
	noErr(t, err, "update key")
	if e.Version != 2 {
		t.Errorf("updated version %d", e.Version)
	}
	checkTime(t, "created_at kept", e.CreatedAt, at(1))
	checkTime(t, "updated_at", e.UpdatedAt, at(2))
	if e := putKV(t, s, "model", `"haiku"`, store.AnyVersion); e.Version != 3 {
		t.Errorf("unchecked put: version %d", e.Version)
	}
	got, err := s.GetKV(ctx, dt, "sb1", "model")
	noErr(t, err, "get")
	if string(got.Value) != `"haiku"` || got.Version != 3 || got.Key != "model" || got.TenantID != dt || got.SandboxID != "sb1" {
		t.Errorf("get %+v", got)
	}
	checkTime(t, "stored created_at", got.CreatedAt, at(1))
	_, err = s.GetKV(ctx, dt, "sb1", "absent")
	wantErr(t, err, errs.ErrNotFound, "get absent key")

	// Prefixes are literal (no wildcards) and case-sensitive.
	for _, k := range []string{"cfg/a", "cfg/b", "cfg/b/c", "cfg0", "cfg_x", "cfg%", "CFG/a", "cf", "cfh"} {
		putKV(t, s, k, `1`, store.AnyVersion)
	}
	wantIDs(t, "prefix cfg/", kvKeys(t, s, store.KVFilter{Prefix: "cfg/"}), []string{"cfg/a", "cfg/b", "cfg/b/c"})
	wantIDs(t, "prefix cfg", kvKeys(t, s, store.KVFilter{Prefix: "cfg"}), []string{"cfg%", "cfg/a", "cfg/b", "cfg/b/c", "cfg0", "cfg_x"})
	wantIDs(t, "prefix cfg_", kvKeys(t, s, store.KVFilter{Prefix: "cfg_"}), []string{"cfg_x"})
	wantIDs(t, "prefix cfg%", kvKeys(t, s, store.KVFilter{Prefix: "cfg%"}), []string{"cfg%"})
	wantIDs(t, "all", kvKeys(t, s, store.KVFilter{}), []string{"CFG/a", "cf", "cfg%", "cfg/a", "cfg/b", "cfg/b/c", "cfg0", "cfg_x", "cfh", "model"})
	wantIDs(t, "page", kvKeys(t, s, store.KVFilter{Prefix: "cfg", After: "cfg/a", Limit: 2}), []string{"cfg/b", "cfg/b/c"})

	// Delete, with and without if-version.
	err = s.DeleteKV(ctx, dt, "sb1", "model", 2)
	wantErr(t, err, errs.ErrConflict, "delete with a stale version")
	noErr(t, s.DeleteKV(ctx, dt, "sb1", "model", 3), "delete at version 3")
	_, err = s.GetKV(ctx, dt, "sb1", "model")
	wantErr(t, err, errs.ErrNotFound, "get deleted key")
	wantErr(t, s.DeleteKV(ctx, dt, "sb1", "model", store.AnyVersion), errs.ErrNotFound, "delete an absent key")
	wantErr(t, s.DeleteKV(ctx, dt, "sb1", "model", 3), errs.ErrConflict, "delete an absent key at a version")
	noErr(t, s.DeleteKV(ctx, dt, "sb1", "cf", store.AnyVersion), "unchecked delete")
	// A deleted key starts over at version 1.
	if e := putKV(t, s, "model", `null`, 0); e.Version != 1 {
		t.Errorf("re-created key: version %d", e.Version)
	}

	_, err = s.PutKV(ctx, store.KVWrite{TenantID: dt, SandboxID: "sb1", Key: "", Value: []byte(`1`), IfVersion: store.AnyVersion})
	wantErr(t, err, errs.ErrInvalid, "empty key")
	_, err = s.PutKV(ctx, store.KVWrite{TenantID: dt, SandboxID: "sb1", Key: "k", Value: []byte(`1`), IfVersion: -2})
	wantErr(t, err, errs.ErrInvalid, "bad if-version")
	_, err = s.PutKV(ctx, store.KVWrite{TenantID: dt, SandboxID: "sb1", Key: "k",
		Value: bytes.Repeat([]byte("1"), store.MaxStatePayloadBytes+1), IfVersion: store.AnyVersion})
	wantErr(t, err, errs.ErrInvalid, "value too large")
	_, err = s.PutKV(ctx, store.KVWrite{TenantID: dt, SandboxID: "sb9", Key: "k", Value: []byte(`1`), IfVersion: store.AnyVersion})
	wantErr(t, err, errs.ErrNotFound, "absent sandbox")
}

func testConcurrentKVPutsHaveOneWinnerPerVersion(t *testing.T, s store.Store) {
	stateFixture(t, s)
	const n = 12
	for v := range int64(4) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won int
		for w := range n {
			wg.Go(func() {
				_, err := s.PutKV(context.Background(), store.KVWrite{TenantID: dt, SandboxID: "sb1", Key: "counter",
					Value: []byte(fmt.Sprint(w)), IfVersion: v})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case !errors.Is(err, errs.ErrConflict):
					t.Errorf("put at version %d: %v", v, err)
				}
			})
		}
		wg.Wait()
		if won != 1 {
			t.Fatalf("if-version %d: %d winners, want 1", v, won)
		}
	}
	got, err := s.GetKV(t.Context(), dt, "sb1", "counter")
	noErr(t, err, "get counter")
	if got.Version != 4 {
		t.Errorf("version %d, want 4", got.Version)
	}
}

func testStructuredStateOfAnotherTenantIsAbsent(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "t2")
	stateFixture(t, s)
	createSandbox(t, s, newSandbox("sb2", "t2", "web", at(0)))
	createTask(t, s, "t1", 1, `1`)
	_, err := s.AppendObservation(ctx, store.ObservationWrite{TenantID: dt, SandboxID: "sb1", Kind: "k"})
	noErr(t, err, "append")
	putKV(t, s, "k", `1`, store.AnyVersion)

	// Tenant t2 names sb1: absent, for every method.
	_, err = s.GetTask(ctx, "t2", "sb1", "t1")
	wantErr(t, err, errs.ErrNotFound, "get task")
	_, err = s.ListTasks(ctx, "t2", "sb1", store.TaskFilter{})
	wantErr(t, err, errs.ErrNotFound, "list tasks")
	_, err = s.CreateTask(ctx, store.Task{TenantID: "t2", SandboxID: "sb1", ID: "x"})
	wantErr(t, err, errs.ErrNotFound, "create task")
	_, err = s.TransitionTask(ctx, store.TaskTransition{TenantID: "t2", SandboxID: "sb1", ID: "t1", To: store.TaskInProgress})
	wantErr(t, err, errs.ErrNotFound, "transition task")
	_, err = s.AppendObservation(ctx, store.ObservationWrite{TenantID: "t2", SandboxID: "sb1", Kind: "k"})
	wantErr(t, err, errs.ErrNotFound, "append observation")
	_, err = s.ListObservations(ctx, "t2", "sb1", store.ObservationFilter{})
	wantErr(t, err, errs.ErrNotFound, "list observations")
	_, err = s.PutKV(ctx, store.KVWrite{TenantID: "t2", SandboxID: "sb1", Key: "k", Value: []byte(`2`), IfVersion: store.AnyVersion})
	wantErr(t, err, errs.ErrNotFound, "put kv")
	_, err = s.GetKV(ctx, "t2", "sb1", "k")
	wantErr(t, err, errs.ErrNotFound, "get kv")
	_, err = s.ListKV(ctx, "t2", "sb1", store.KVFilter{})
	wantErr(t, err, errs.ErrNotFound, "list kv")
	wantErr(t, s.DeleteKV(ctx, "t2", "sb1", "k", store.AnyVersion), errs.ErrNotFound, "delete kv")

	// Nothing changed, and t2's own sandbox holds nothing of sb1's.
	if got, _ := s.GetTask(ctx, dt, "sb1", "t1"); got.State != store.TaskOpen {
		t.Errorf("task changed: %+v", got)
	}
	if got, _ := s.GetKV(ctx, dt, "sb1", "k"); string(got.Value) != `1` || got.Version != 1 {
		t.Errorf("entry changed: %+v", got)
	}
	if l, err := s.ListObservations(ctx, dt, "sb1", store.ObservationFilter{}); err != nil || len(l) != 1 {
		t.Errorf("observations: %d %v", len(l), err)
	}
	_, err = s.GetTask(ctx, "t2", "sb2", "t1")
	wantErr(t, err, errs.ErrNotFound, "task via another sandbox")
	_, err = s.GetKV(ctx, "t2", "sb2", "k")
	wantErr(t, err, errs.ErrNotFound, "entry via another sandbox")
	if l, err := s.ListTasks(ctx, "t2", "sb2", store.TaskFilter{}); err != nil || len(l) != 0 {
		t.Errorf("tasks of sb2: %v %v", l, err)
	}
	if l, err := s.ListObservations(ctx, "t2", "sb2", store.ObservationFilter{}); err != nil || len(l) != 0 {
		t.Errorf("observations of sb2: %v %v", l, err)
	}
	if l, err := s.ListKV(ctx, "t2", "sb2", store.KVFilter{}); err != nil || len(l) != 0 {
		t.Errorf("entries of sb2: %v %v", l, err)
	}
	// The same task id may exist in another sandbox.
	_, err = s.CreateTask(ctx, store.Task{TenantID: "t2", SandboxID: "sb2", ID: "t1"})
	noErr(t, err, "same task id in another sandbox")
}

func testPurgingASandboxDeletesItsStructuredState(t *testing.T, s store.Store) {
	ctx := t.Context()
	stateFixture(t, s)
	createTask(t, s, "t1", 1, `1`)
	_, err := s.AppendObservation(ctx, store.ObservationWrite{TenantID: dt, SandboxID: "sb1", Kind: "k"})
	noErr(t, err, "append")
	putKV(t, s, "k", `1`, store.AnyVersion)
	noErr(t, s.DeleteSandbox(ctx, dt, "sb1"), "purge sandbox")
	// A new sandbox with the same id starts empty.
	stateFixture(t, s)
	if ids := taskIDs(t, s, store.TaskFilter{}); len(ids) != 0 {
		t.Errorf("tasks survived the purge: %v", ids)
	}
	if keys := kvKeys(t, s, store.KVFilter{}); len(keys) != 0 {
		t.Errorf("entries survived the purge: %v", keys)
	}
	o, err := s.AppendObservation(ctx, store.ObservationWrite{TenantID: dt, SandboxID: "sb1", Kind: "k"})
	noErr(t, err, "append after purge")
	if o.Seq != 1 {
		t.Errorf("observations survived the purge: next seq %d", o.Seq)
	}
}

// testPruneObservationsKeepsTheNewestAndTheYoung: PruneObservations
// deletes the tenant's observations made before the cut, keeps each
// sandbox's newest however old (its seq is never reused), and leaves
// other tenants alone.
func testPruneObservationsKeepsTheNewestAndTheYoung(t *testing.T, s store.Store) {
	ctx := t.Context()
	stateFixture(t, s)
	createSandbox(t, s, newSandbox("sb2", dt, "api", at(0)))
	createTenant(t, s, "other")
	createSandbox(t, s, newSandbox("sb3", "other", "web", at(0)))
	obs := func(tenant, sb string, sec int) {
		_, err := s.AppendObservation(ctx, store.ObservationWrite{TenantID: tenant, SandboxID: sb, Kind: "k", Payload: []byte(`1`), Time: at(sec)})
		noErr(t, err, "append observation")
	}
	for _, sec := range []int{1, 2, 3, 10, 11} {
		obs(dt, "sb1", sec)
	}
	obs(dt, "sb2", 1) // old, but sb2's newest
	obs("other", "sb3", 1)
	obs("other", "sb3", 2)
	n, err := s.PruneObservations(ctx, dt, at(10))
	noErr(t, err, "prune")
	if n != 3 {
		t.Fatalf("pruned %d, want 3 (sb1's at 1, 2, 3)", n)
	}
	seqs := func(tenant, sb string) []int64 {
		list, err := s.ListObservations(ctx, tenant, sb, store.ObservationFilter{})
		noErr(t, err, "list")
		var out []int64
		for _, o := range list {
			out = append(out, o.Seq)
		}
		return out
	}
	if got := seqs(dt, "sb1"); len(got) != 2 || got[0] != 4 || got[1] != 5 {
		t.Fatalf("sb1 after the prune: %v, want [4 5]", got)
	}
	if got := seqs(dt, "sb2"); len(got) != 1 {
		t.Fatalf("sb2's only observation was pruned: %v", got)
	}
	if got := seqs("other", "sb3"); len(got) != 2 {
		t.Fatalf("another tenant's observations were pruned: %v", got)
	}
	_, err = s.PruneObservations(ctx, dt, at(100))
	noErr(t, err, "prune everything")
	if got := seqs(dt, "sb1"); len(got) != 1 || got[0] != 5 {
		t.Fatalf("sb1 after pruning all: %v, want its newest [5]", got)
	}
	obs(dt, "sb1", 101)
	if got := seqs(dt, "sb1"); got[len(got)-1] != 6 {
		t.Fatalf("a seq was reused after a prune: %v", got)
	}
}
