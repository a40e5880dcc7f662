package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
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

// newService returns a Tasks on a fresh SQLite store where tenant t1 has
// sandbox "agent-1" (sb-1) and tenant t2 has "theirs" (sb-2).
func newService(t *testing.T) (*Tasks, store.Store) {
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

func taskIDs(p client.TaskPage) []string {
	ids := []string{}
	for _, t := range p.Tasks {
		ids = append(ids, t.ID)
	}
	return ids
}

func TestTaskLifecycleByNameAndID(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	tk := must(s.CreateTask(ctx, alice, "agent-1", client.CreateTaskRequest{ID: "build", Payload: json.RawMessage(`{"cmd":"make"}`)}))
	if tk.ID != "build" || tk.Sandbox != "sb-1" || tk.State != client.TaskOpen || string(tk.Payload) != `{"cmd":"make"}` {
		t.Fatalf("created %+v", tk)
	}
	gen := must(s.CreateTask(ctx, alice, "sb-1", client.CreateTaskRequest{}))
	if !strings.HasPrefix(gen.ID, "task-") || string(gen.Payload) != "null" {
		t.Errorf("generated %+v", gen)
	}
	_, err := s.CreateTask(ctx, alice, "agent-1", client.CreateTaskRequest{ID: "build"})
	wantIs(t, err, errs.ErrConflict, "taken id")

	tk = must(s.SetTaskState(ctx, alice, "agent-1", "build", client.SetTaskStateRequest{State: client.TaskInProgress, IfState: client.TaskOpen}))
	if tk.State != client.TaskInProgress || string(tk.Payload) != `{"cmd":"make"}` {
		t.Errorf("started %+v", tk)
	}
	_, err = s.SetTaskState(ctx, alice, "agent-1", "build", client.SetTaskStateRequest{State: client.TaskInProgress, IfState: client.TaskOpen})
	wantIs(t, err, errs.ErrConflict, "second claim")
	_, err = s.SetTaskState(ctx, alice, "agent-1", "build", client.SetTaskStateRequest{State: client.TaskOpen})
	wantIs(t, err, errs.ErrConflict, "in_progress → open")
	tk = must(s.SetTaskState(ctx, alice, "sb-1", "build", client.SetTaskStateRequest{State: client.TaskFailed,
		Payload: json.RawMessage(`{"cmd":"make","exit":2}`)}))
	if tk.State != client.TaskFailed || string(tk.Payload) != `{"cmd":"make","exit":2}` || tk.UpdatedAt.Before(tk.CreatedAt) {
		t.Errorf("failed %+v", tk)
	}
	tk = must(s.SetTaskState(ctx, alice, "agent-1", "build", client.SetTaskStateRequest{State: client.TaskOpen, IfState: client.TaskFailed}))
	if tk.State != client.TaskOpen {
		t.Errorf("reopened %+v", tk)
	}
	got := must(s.GetTask(ctx, "t1", "agent-1", "build"))
	if got.State != client.TaskOpen || string(got.Payload) != `{"cmd":"make","exit":2}` {
		t.Errorf("get %+v", got)
	}

	for _, tc := range []struct {
		what string
		req  client.SetTaskStateRequest
	}{
		{"unknown state", client.SetTaskStateRequest{State: "finished"}},
		{"unknown if-state", client.SetTaskStateRequest{State: client.TaskInProgress, IfState: "x"}},
		{"payload not JSON", client.SetTaskStateRequest{State: client.TaskInProgress, Payload: json.RawMessage(`{`)}},
	} {
		_, err := s.SetTaskState(ctx, alice, "agent-1", "build", tc.req)
		wantIs(t, err, errs.ErrInvalid, tc.what)
	}
	for _, tc := range []struct {
		what string
		req  client.CreateTaskRequest
	}{
		{"bad id", client.CreateTaskRequest{ID: "../x"}},
		{"id starting with -", client.CreateTaskRequest{ID: "-rf"}},
		{"payload not JSON", client.CreateTaskRequest{Payload: json.RawMessage(`nope`)}},
		{"payload too large", client.CreateTaskRequest{Payload: json.RawMessage(`"` + strings.Repeat("x", MaxPayloadBytes) + `"`)}},
	} {
		_, err := s.CreateTask(ctx, alice, "agent-1", tc.req)
		wantIs(t, err, errs.ErrInvalid, tc.what)
	}
	_, err = s.GetTask(ctx, "t1", "agent-1", "nope")
	wantIs(t, err, errs.ErrNotFound, "absent task")
	_, err = s.SetTaskState(ctx, alice, "agent-1", "nope", client.SetTaskStateRequest{State: client.TaskInProgress})
	wantIs(t, err, errs.ErrNotFound, "transition of an absent task")
}

func TestListTasksQueries(t *testing.T) {
	s, st := newService(t)
	ctx := t.Context()
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// Tasks with known creation times, through the store.
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		if _, err := st.CreateTask(ctx, store.Task{TenantID: "t1", SandboxID: "sb-1", ID: id, CreatedAt: base.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	set := func(id string, states ...string) {
		for _, s2 := range states {
			must(s.SetTaskState(ctx, alice, "agent-1", id, client.SetTaskStateRequest{State: s2}))
		}
	}
	set("b", client.TaskInProgress)
	set("c", client.TaskInProgress, client.TaskDone)
	set("d", client.TaskInProgress, client.TaskCancelled)

	for _, tc := range []struct {
		what string
		q    client.TaskQuery
		want []string
	}{
		{"all", client.TaskQuery{}, []string{"a", "b", "c", "d", "e"}},
		{"open", client.TaskQuery{Open: true}, []string{"a", "b", "e"}},
		{"done or cancelled", client.TaskQuery{States: []string{client.TaskDone, client.TaskCancelled}}, []string{"c", "d"}},
		{"open ∩ in_progress", client.TaskQuery{Open: true, States: []string{client.TaskInProgress, client.TaskDone}}, []string{"b"}},
		{"open ∩ done", client.TaskQuery{Open: true, States: []string{client.TaskDone}}, []string{}},
		{"created after b", client.TaskQuery{CreatedAfter: base.Add(time.Minute)}, []string{"c", "d", "e"}},
		{"open, created after b", client.TaskQuery{Open: true, CreatedAfter: base.Add(time.Minute)}, []string{"e"}},
		{"after a cursor", client.TaskQuery{After: "c"}, []string{"d", "e"}},
	} {
		page := must(s.ListTasks(ctx, "t1", "agent-1", tc.q))
		if got := taskIDs(page); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, got, tc.want)
		}
		if page.More {
			t.Errorf("%s: more on a complete page", tc.what)
		}
	}
	// Paging.
	var all []string
	q := client.TaskQuery{Limit: 2}
	for {
		page := must(s.ListTasks(ctx, "t1", "agent-1", q))
		all = append(all, taskIDs(page)...)
		if !page.More {
			break
		}
		q.After = page.Next
	}
	if !slices.Equal(all, []string{"a", "b", "c", "d", "e"}) {
		t.Errorf("paged: %v", all)
	}
	for _, q := range []client.TaskQuery{{States: []string{"bogus"}}, {Limit: 1001}, {Limit: -1}, {After: "zzz"}} {
		_, err := s.ListTasks(ctx, "t1", "agent-1", q)
		wantIs(t, err, errs.ErrInvalid, fmt.Sprintf("query %+v", q))
	}
}

func TestConcurrentClaimsHaveOneWinner(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	must(s.CreateTask(ctx, alice, "agent-1", client.CreateTaskRequest{ID: "job"}))
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 10 {
		wg.Go(func() {
			_, err := s.SetTaskState(context.Background(), alice, "agent-1", "job",
				client.SetTaskStateRequest{State: client.TaskInProgress, IfState: client.TaskOpen})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won++
			} else if !errors.Is(err, errs.ErrConflict) {
				t.Errorf("claim: %v", err)
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d winners", won)
	}
}

func TestObservationsAreAppendOnlyAndPaged(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	for i := range 5 {
		kind := "metric"
		if i%2 == 1 {
			kind = "note"
		}
		o := must(s.AppendObservation(ctx, alice, "agent-1", client.AppendObservationRequest{Kind: kind, Payload: json.RawMessage(fmt.Sprint(i))}))
		if o.Seq != int64(i+1) || o.Principal != "key-alice" || o.Time.IsZero() {
			t.Errorf("appended %+v", o)
		}
	}
	page := must(s.ListObservations(ctx, "t1", "agent-1", client.ObservationQuery{After: 1, Limit: 2}))
	if len(page.Observations) != 2 || page.Observations[0].Seq != 2 || page.Next != 3 || !page.More {
		t.Errorf("page after 1: %+v", page)
	}
	page = must(s.ListObservations(ctx, "t1", "agent-1", client.ObservationQuery{After: page.Next}))
	if len(page.Observations) != 2 || page.Next != 5 || page.More {
		t.Errorf("last page: %+v", page)
	}
	page = must(s.ListObservations(ctx, "t1", "agent-1", client.ObservationQuery{After: 5}))
	if len(page.Observations) != 0 || page.Next != 5 {
		t.Errorf("empty page keeps the cursor: %+v", page)
	}
	page = must(s.ListObservations(ctx, "t1", "sb-1", client.ObservationQuery{Kind: "note"}))
	if len(page.Observations) != 2 || page.Observations[1].Seq != 4 || string(page.Observations[1].Payload) != "3" {
		t.Errorf("notes: %+v", page)
	}
	for _, req := range []client.AppendObservationRequest{{Kind: ""}, {Kind: "a b"}, {Kind: "k", Payload: json.RawMessage(`{x}`)}} {
		_, err := s.AppendObservation(ctx, alice, "agent-1", req)
		wantIs(t, err, errs.ErrInvalid, fmt.Sprintf("append %+v", req))
	}
	_, err := s.ListObservations(ctx, "t1", "agent-1", client.ObservationQuery{After: -1})
	wantIs(t, err, errs.ErrInvalid, "negative cursor")
}

func TestKVWithIfVersionAndPrefixes(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	v0, v1 := int64(0), int64(1)
	e := must(s.PutKV(ctx, alice, "agent-1", "cfg/model", []byte(`"opus"`), &v0))
	if e.Version != 1 || e.Key != "cfg/model" {
		t.Errorf("created %+v", e)
	}
	_, err := s.PutKV(ctx, alice, "agent-1", "cfg/model", []byte(`"x"`), &v0)
	wantIs(t, err, errs.ErrConflict, "create existing")
	e = must(s.PutKV(ctx, alice, "agent-1", "cfg/model", []byte(`"sonnet"`), &v1))
	if e.Version != 2 {
		t.Errorf("updated %+v", e)
	}
	must(s.PutKV(ctx, alice, "agent-1", "cfg/temp", []byte(`0.2`), nil))
	must(s.PutKV(ctx, alice, "agent-1", "other", []byte(`true`), nil))
	got := must(s.GetKV(ctx, "t1", "agent-1", "cfg/model"))
	if string(got.Value) != `"sonnet"` || got.Version != 2 {
		t.Errorf("get %+v", got)
	}
	page := must(s.ListKV(ctx, "t1", "agent-1", client.KVQuery{Prefix: "cfg/"}))
	if len(page.Entries) != 2 || page.Entries[0].Key != "cfg/model" || page.Entries[1].Key != "cfg/temp" || page.Next != "cfg/temp" || page.More {
		t.Errorf("prefix cfg/: %+v", page)
	}
	page = must(s.ListKV(ctx, "t1", "agent-1", client.KVQuery{Limit: 1, After: "cfg/model"}))
	if len(page.Entries) != 1 || page.Entries[0].Key != "cfg/temp" || !page.More {
		t.Errorf("page after cfg/model: %+v", page)
	}
	stale := int64(1)
	wantIs(t, s.DeleteKV(ctx, alice, "agent-1", "cfg/model", &stale), errs.ErrConflict, "stale delete")
	v2 := int64(2)
	if err := s.DeleteKV(ctx, alice, "agent-1", "cfg/model", &v2); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetKV(ctx, "t1", "agent-1", "cfg/model")
	wantIs(t, err, errs.ErrNotFound, "deleted key")
	wantIs(t, s.DeleteKV(ctx, alice, "agent-1", "cfg/model", nil), errs.ErrNotFound, "delete absent")

	for _, key := range []string{"", "a..b", "/abs", "-x", "a b", "tab\tkey", strings.Repeat("k", 257)} {
		_, err := s.PutKV(ctx, alice, "agent-1", key, []byte(`1`), nil)
		wantIs(t, err, errs.ErrInvalid, fmt.Sprintf("key %q", key))
	}
	for _, v := range []string{"", "{", `"` + strings.Repeat("x", MaxPayloadBytes) + `"`} {
		_, err := s.PutKV(ctx, alice, "agent-1", "k", []byte(v), nil)
		wantIs(t, err, errs.ErrInvalid, fmt.Sprintf("value of %d bytes", len(v)))
	}
	neg := int64(-1)
	_, err = s.PutKV(ctx, alice, "agent-1", "k", []byte(`1`), &neg)
	wantIs(t, err, errs.ErrInvalid, "negative if-version")
}

func TestAnotherTenantSeesNothingAndDeletedSandboxesAreReadOnly(t *testing.T) {
	s, st := newService(t)
	ctx := t.Context()
	must(s.CreateTask(ctx, alice, "agent-1", client.CreateTaskRequest{ID: "t"}))
	must(s.AppendObservation(ctx, alice, "agent-1", client.AppendObservationRequest{Kind: "k"}))
	must(s.PutKV(ctx, alice, "agent-1", "k", []byte(`1`), nil))

	// Bob names alice's sandbox by id and by name: not found, every call.
	for _, sb := range []string{"sb-1", "agent-1"} {
		_, err := s.GetTask(ctx, "t2", sb, "t")
		wantIs(t, err, errs.ErrNotFound, "get task")
		_, err = s.ListTasks(ctx, "t2", sb, client.TaskQuery{})
		wantIs(t, err, errs.ErrNotFound, "list tasks")
		_, err = s.CreateTask(ctx, bob, sb, client.CreateTaskRequest{})
		wantIs(t, err, errs.ErrNotFound, "create task")
		_, err = s.SetTaskState(ctx, bob, sb, "t", client.SetTaskStateRequest{State: client.TaskInProgress})
		wantIs(t, err, errs.ErrNotFound, "set task state")
		_, err = s.AppendObservation(ctx, bob, sb, client.AppendObservationRequest{Kind: "k"})
		wantIs(t, err, errs.ErrNotFound, "append observation")
		_, err = s.ListObservations(ctx, "t2", sb, client.ObservationQuery{})
		wantIs(t, err, errs.ErrNotFound, "list observations")
		_, err = s.PutKV(ctx, bob, sb, "k", []byte(`2`), nil)
		wantIs(t, err, errs.ErrNotFound, "put kv")
		_, err = s.GetKV(ctx, "t2", sb, "k")
		wantIs(t, err, errs.ErrNotFound, "get kv")
		_, err = s.ListKV(ctx, "t2", sb, client.KVQuery{})
		wantIs(t, err, errs.ErrNotFound, "list kv")
		wantIs(t, s.DeleteKV(ctx, bob, sb, "k", nil), errs.ErrNotFound, "delete kv")
	}
	_, err := s.GetTask(ctx, "", "sb-1", "t")
	wantIs(t, err, errs.ErrNotFound, "no tenant")

	// Soft-delete alice's sandbox: reads work, writes are conflicts.
	sb, err := st.GetSandbox(ctx, "t1", "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	sb.State = store.StateDeleted
	if _, err := st.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	must(s.GetTask(ctx, "t1", "sb-1", "t"))
	must(s.ListObservations(ctx, "t1", "sb-1", client.ObservationQuery{}))
	must(s.GetKV(ctx, "t1", "sb-1", "k"))
	_, err = s.CreateTask(ctx, alice, "sb-1", client.CreateTaskRequest{})
	wantIs(t, err, errs.ErrConflict, "create task in a deleted sandbox")
	_, err = s.SetTaskState(ctx, alice, "sb-1", "t", client.SetTaskStateRequest{State: client.TaskInProgress})
	wantIs(t, err, errs.ErrConflict, "set state in a deleted sandbox")
	_, err = s.AppendObservation(ctx, alice, "sb-1", client.AppendObservationRequest{Kind: "k"})
	wantIs(t, err, errs.ErrConflict, "append to a deleted sandbox")
	_, err = s.PutKV(ctx, alice, "sb-1", "k", []byte(`2`), nil)
	wantIs(t, err, errs.ErrConflict, "put in a deleted sandbox")
	wantIs(t, s.DeleteKV(ctx, alice, "sb-1", "k", nil), errs.ErrConflict, "delete in a deleted sandbox")
}
