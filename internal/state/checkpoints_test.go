package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// Principals of the tests: alice owns sandbox "agent-1" (id sb-alice) in
// tenant acme; mallory is in the default tenant.
var (
	alice   = api.Principal{TenantID: "acme", KeyID: "key-alice"}
	mallory = api.Principal{TenantID: store.DefaultTenant, KeyID: "key-mallory"}
)

// newService opens a real SQLite store in a temporary directory with one
// sandbox of alice's and returns a Service on it.
func newService(t *testing.T) (*Service, *sqlite.Store) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.CreateTenant(t.Context(), store.Tenant{ID: "acme", Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateSandbox(t.Context(), store.Sandbox{ID: "sb-alice", TenantID: "acme", Name: "agent-1", State: store.StateRunning}); err != nil {
		t.Fatal(err)
	}
	return New(st), st
}

func mustPut(t *testing.T, s *Service, name, body string) client.Checkpoint {
	t.Helper()
	c, err := s.PutCheckpoint(t.Context(), alice, "agent-1", api.CheckpointWrite{Name: name, Body: []byte(body)})
	if err != nil {
		t.Fatalf("put %s: %v", name, err)
	}
	return c
}

func wantIs(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got %v, want %v", what, err, target)
	}
}

func versions(t *testing.T, s *Service, name string) []int64 {
	t.Helper()
	l, err := s.CheckpointVersions(t.Context(), alice.TenantID, "agent-1", "", name)
	if err != nil {
		t.Fatalf("versions of %s: %v", name, err)
	}
	var vs []int64
	for _, c := range l {
		vs = append(vs, c.Version)
	}
	return vs
}

func TestPutRecordsProvenanceAndGetReturnsTheBody(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	body := `{"step": 3, "done": ["a", "b"], "n": 1.50}`
	c, err := s.PutCheckpoint(ctx, alice, "agent-1", api.CheckpointWrite{Agent: "planner", Name: "plan", Body: []byte(body), Run: "run-7"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != 1 || c.Principal != "key-alice" || c.Run != "run-7" || c.Agent != "planner" || c.Name != "plan" || c.Body != nil {
		t.Fatalf("put returned %+v", c)
	}
	// By sandbox id as well as by name.
	for _, sb := range []string{"agent-1", "sb-alice"} {
		got, err := s.GetCheckpoint(ctx, alice.TenantID, sb, "planner", "plan", 0)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Body) != body || got.Version != 1 || got.Principal != "key-alice" || got.Run != "run-7" || got.CreatedAt.IsZero() {
			t.Fatalf("get via %s: %+v %s", sb, got, got.Body)
		}
	}
	// The default agent's document of the same name is another document.
	_, err = s.GetCheckpoint(ctx, alice.TenantID, "agent-1", "", "plan", 0)
	wantIs(t, err, errs.ErrNotFound, "default agent's plan")
	list, err := s.ListCheckpoints(ctx, alice.TenantID, "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Agent != "planner" || list[0].Version != 1 || list[0].Keep != store.DefaultCheckpointKeep {
		t.Fatalf("list %+v", list)
	}
}

func TestPutRejectsBadInputAndChangesNothing(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	mustPut(t, s, "plan", `{"ok":true}`)
	big := `"` + strings.Repeat("x", MaxDocumentBytes) + `"`
	for what, w := range map[string]api.CheckpointWrite{
		"not JSON":          {Name: "plan", Body: []byte(`{"ok":`)},
		"two values":        {Name: "plan", Body: []byte(`{} {}`)},
		"empty body":        {Name: "plan", Body: nil},
		"over 1 MiB":        {Name: "plan", Body: []byte(big)},
		"name with slash":   {Name: "a/b", Body: []byte(`1`)},
		"name ..":           {Name: "..", Body: []byte(`1`)},
		"name like a flag":  {Name: "-rf", Body: []byte(`1`)},
		"empty name":        {Name: "", Body: []byte(`1`)},
		"bad agent":         {Agent: "a b", Name: "plan", Body: []byte(`1`)},
		"negative if-match": {Name: "plan", Body: []byte(`1`), IfVersion: new(int64(-1))},
		"keep too large":    {Name: "plan", Body: []byte(`1`), Keep: store.MaxCheckpointKeep + 1},
		"run with newline":  {Name: "plan", Body: []byte(`1`), Run: "a\nb"},
	} {
		_, err := s.PutCheckpoint(ctx, alice, "agent-1", w)
		if !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", what, err)
		}
	}
	if vs := versions(t, s, "plan"); len(vs) != 1 {
		t.Fatalf("versions %v after refused puts, want [1]", vs)
	}
	_, err := s.PutCheckpoint(ctx, alice, "no-such-sandbox", api.CheckpointWrite{Name: "plan", Body: []byte(`1`)})
	wantIs(t, err, errs.ErrNotFound, "put to absent sandbox")
}

func TestIfMatchMismatchIsConflictAndChangesNothing(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	put := func(ifv *int64, body string) error {
		_, err := s.PutCheckpoint(ctx, alice, "agent-1", api.CheckpointWrite{Name: "plan", Body: []byte(body), IfVersion: ifv})
		return err
	}
	if err := put(new(int64(0)), `1`); err != nil {
		t.Fatalf("if-match 0 on a new document: %v", err)
	}
	wantIs(t, put(new(int64(0)), `"lost"`), errs.ErrConflict, "if-match 0 on an existing document")
	wantIs(t, put(new(int64(2)), `"lost"`), errs.ErrConflict, "if-match 2 when latest is 1")
	if err := put(new(int64(1)), `2`); err != nil {
		t.Fatalf("if-match 1: %v", err)
	}
	wantIs(t, put(new(int64(1)), `"lost"`), errs.ErrConflict, "stale if-match 1")
	got, err := s.GetCheckpoint(ctx, alice.TenantID, "agent-1", "", "plan", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 2 || string(got.Body) != `2` {
		t.Fatalf("latest %+v %s, want version 2", got, got.Body)
	}
}

const stepSchema = `{
	"type": "object",
	"required": ["step"],
	"properties": {"step": {"type": "integer", "minimum": 0}, "notes": {"type": "string"}}
}`

func TestWriteFailingTheSchemaIsInvalidAndChangesNothing(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	mustPut(t, s, "plan", `{"step": 1}`)
	info, err := s.SetCheckpointSchema(ctx, alice, "agent-1", "", "plan", []byte(stepSchema))
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != 1 || len(info.Schema) == 0 {
		t.Fatalf("schema info %+v", info)
	}
	for _, bad := range []string{`{"step": "two"}`, `{"notes": "no step"}`, `[1]`, `{"step": -1}`, `{"step": 1.5}`} {
		_, err := s.PutCheckpoint(ctx, alice, "agent-1", api.CheckpointWrite{Name: "plan", Body: []byte(bad), Keep: 1})
		if !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), "schema") {
			t.Fatalf("put %s: got %v, want ErrInvalid naming the schema", bad, err)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("error spans lines: %q", err)
		}
	}
	_, err = s.PutCheckpoint(ctx, alice, "agent-1", api.CheckpointWrite{Name: "plan", Body: []byte(`{"step": "two"}`)})
	t.Logf("error shown to the caller: %v", err)
	if vs := versions(t, s, "plan"); len(vs) != 1 || vs[0] != 1 {
		t.Fatalf("versions %v after refused puts, want [1]", vs)
	}
	list, err := s.ListCheckpoints(ctx, alice.TenantID, "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	if list[0].Keep != store.DefaultCheckpointKeep {
		t.Errorf("a refused put changed keep to %d", list[0].Keep)
	}
	c := mustPut(t, s, "plan", `{"step": 2, "notes": "ok"}`)
	if c.Version != 2 {
		t.Fatalf("valid put: version %d, want 2", c.Version)
	}

	// A schema set before the first write applies to it.
	if _, err := s.SetCheckpointSchema(ctx, alice, "agent-1", "", "fresh", []byte(stepSchema)); err != nil {
		t.Fatal(err)
	}
	_, err = s.PutCheckpoint(ctx, alice, "agent-1", api.CheckpointWrite{Name: "fresh", Body: []byte(`{}`), IfVersion: new(int64(0))})
	wantIs(t, err, errs.ErrInvalid, "first put failing a preset schema")
	if _, err := s.PutCheckpoint(ctx, alice, "agent-1", api.CheckpointWrite{Name: "fresh", Body: []byte(`{"step":0}`), IfVersion: new(int64(0))}); err != nil {
		t.Fatalf("first put passing a preset schema: %v", err)
	}

	// null removes the schema.
	info, err = s.SetCheckpointSchema(ctx, alice, "agent-1", "", "plan", []byte(" null "))
	if err != nil {
		t.Fatal(err)
	}
	if info.Schema != nil {
		t.Fatalf("schema %s after removal", info.Schema)
	}
	mustPut(t, s, "plan", `"anything"`)
}

func TestSetSchemaRejectsSchemasThatDoNotCompileOrReachOutside(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	for _, bad := range []string{
		`{"type": 12}`,
		`{"type": "object"`,
		`{"$ref": "file:///etc/passwd"}`,
		`{"$ref": "other.json"}`,
		`{"$ref": "https://example.com/schema.json"}`,
		`{"pattern": "("}`,
	} {
		_, err := s.SetCheckpointSchema(ctx, alice, "agent-1", "", "plan", []byte(bad))
		if !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("schema %s: got %v, want ErrInvalid", bad, err)
		}
	}
	list, err := s.ListCheckpoints(ctx, alice.TenantID, "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("refused schemas created documents: %+v", list)
	}
	// Internal references work.
	internal := `{"$defs": {"n": {"type": "integer"}}, "type": "object", "properties": {"step": {"$ref": "#/$defs/n"}}}`
	if _, err := s.SetCheckpointSchema(ctx, alice, "agent-1", "", "plan", []byte(internal)); err != nil {
		t.Fatalf("schema with an internal $ref: %v", err)
	}
	_, err = s.PutCheckpoint(ctx, alice, "agent-1", api.CheckpointWrite{Name: "plan", Body: []byte(`{"step":"x"}`)})
	wantIs(t, err, errs.ErrInvalid, "put failing an internal $ref")
	mustPut(t, s, "plan", `{"step":1}`)
	// Removing the schema of an absent document is not found.
	_, err = s.SetCheckpointSchema(ctx, alice, "agent-1", "", "absent", nil)
	wantIs(t, err, errs.ErrNotFound, "remove schema of absent document")
}

func TestRollbackWritesTheOldBodyAsANewVersion(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	mustPut(t, s, "plan", `{"step": 1}`)
	mustPut(t, s, "plan", `{"step": 2}`)
	bob := api.Principal{TenantID: "acme", KeyID: "key-bob"}
	c, err := s.RollbackCheckpoint(ctx, bob, "agent-1", "", "plan", client.RollbackCheckpointRequest{Version: 1, Run: "run-9"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != 3 || c.Note != "rollback from 1" || c.Principal != "key-bob" || c.Run != "run-9" {
		t.Fatalf("rollback returned %+v", c)
	}
	got, err := s.GetCheckpoint(ctx, alice.TenantID, "agent-1", "", "plan", 0)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Body) != `{"step": 1}` || got.Note != "rollback from 1" {
		t.Fatalf("latest after rollback %+v %s", got, got.Body)
	}
	// History is kept, not rewritten.
	if vs := versions(t, s, "plan"); fmt.Sprint(vs) != "[1 2 3]" {
		t.Fatalf("versions %v", vs)
	}
	// If-version works as on a put.
	_, err = s.RollbackCheckpoint(ctx, alice, "agent-1", "", "plan", client.RollbackCheckpointRequest{Version: 2, IfVersion: new(int64(2))})
	wantIs(t, err, errs.ErrConflict, "rollback with stale if-version")
	// Unknown or trimmed versions are not found; version 0 is invalid.
	_, err = s.RollbackCheckpoint(ctx, alice, "agent-1", "", "plan", client.RollbackCheckpointRequest{Version: 9})
	wantIs(t, err, errs.ErrNotFound, "rollback to unwritten version")
	_, err = s.RollbackCheckpoint(ctx, alice, "agent-1", "", "plan", client.RollbackCheckpointRequest{Version: 0})
	wantIs(t, err, errs.ErrInvalid, "rollback to version 0")
	_, err = s.PutCheckpoint(ctx, alice, "agent-1", api.CheckpointWrite{Name: "plan", Body: []byte(`{"step": 4}`), Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.RollbackCheckpoint(ctx, alice, "agent-1", "", "plan", client.RollbackCheckpointRequest{Version: 1})
	wantIs(t, err, errs.ErrNotFound, "rollback to trimmed version")

	// A rollback must pass the current schema.
	mustPut(t, s, "typed", `{"notes": "before the schema"}`)
	mustPut(t, s, "typed", `{"step": 1}`)
	if _, err := s.SetCheckpointSchema(ctx, alice, "agent-1", "", "typed", []byte(stepSchema)); err != nil {
		t.Fatal(err)
	}
	_, err = s.RollbackCheckpoint(ctx, alice, "agent-1", "", "typed", client.RollbackCheckpointRequest{Version: 1})
	wantIs(t, err, errs.ErrInvalid, "rollback to a version failing the schema")
	if vs := versions(t, s, "typed"); fmt.Sprint(vs) != "[1 2]" {
		t.Fatalf("versions %v after refused rollback", vs)
	}
}

func TestAnotherTenantsSandboxIsNotFound(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	mustPut(t, s, "plan", `{"secret": 1}`)
	tenant := mallory.TenantID
	for _, sb := range []string{"agent-1", "sb-alice"} {
		_, err := s.PutCheckpoint(ctx, mallory, sb, api.CheckpointWrite{Name: "plan", Body: []byte(`1`)})
		wantIs(t, err, errs.ErrNotFound, "put")
		_, err = s.GetCheckpoint(ctx, tenant, sb, "", "plan", 0)
		wantIs(t, err, errs.ErrNotFound, "get")
		_, err = s.ListCheckpoints(ctx, tenant, sb)
		wantIs(t, err, errs.ErrNotFound, "list")
		_, err = s.CheckpointVersions(ctx, tenant, sb, "", "plan")
		wantIs(t, err, errs.ErrNotFound, "versions")
		_, err = s.RollbackCheckpoint(ctx, mallory, sb, "", "plan", client.RollbackCheckpointRequest{Version: 1})
		wantIs(t, err, errs.ErrNotFound, "rollback")
		_, err = s.SetCheckpointSchema(ctx, mallory, sb, "", "plan", []byte(`{"type":"string"}`))
		wantIs(t, err, errs.ErrNotFound, "set schema")
		wantIs(t, s.DeleteCheckpoint(ctx, mallory, sb, "", "plan"), errs.ErrNotFound, "delete")
	}
	// An empty tenant never means "any tenant" here.
	_, err := s.GetCheckpoint(ctx, "", "sb-alice", "", "plan", 0)
	wantIs(t, err, errs.ErrNotFound, "get with empty tenant")

	got, err := s.GetCheckpoint(ctx, alice.TenantID, "agent-1", "", "plan", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 1 || string(got.Body) != `{"secret": 1}` {
		t.Fatalf("owner's document changed: %+v %s", got, got.Body)
	}
}

func TestDeletedSandboxCheckpointsAreReadOnly(t *testing.T) {
	s, st := newService(t)
	ctx := t.Context()
	mustPut(t, s, "plan", `1`)
	sb, err := st.GetSandbox(ctx, "acme", "sb-alice")
	if err != nil {
		t.Fatal(err)
	}
	sb.State = store.StateDeleted
	if _, err := st.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	_, err = s.PutCheckpoint(ctx, alice, "agent-1", api.CheckpointWrite{Name: "plan", Body: []byte(`2`)})
	wantIs(t, err, errs.ErrConflict, "put to a deleted sandbox")
	wantIs(t, s.DeleteCheckpoint(ctx, alice, "agent-1", "", "plan"), errs.ErrConflict, "delete in a deleted sandbox")
	if _, err := s.GetCheckpoint(ctx, alice.TenantID, "agent-1", "", "plan", 0); err != nil {
		t.Fatalf("read from a deleted sandbox: %v", err)
	}
}

func TestHistoryKeepsTheNewestKeepVersions(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	for i := 1; i <= 12; i++ {
		mustPut(t, s, "plan", fmt.Sprint(i))
	}
	if vs := versions(t, s, "plan"); fmt.Sprint(vs) != "[3 4 5 6 7 8 9 10 11 12]" {
		t.Fatalf("default history %v", vs)
	}
	if _, err := s.PutCheckpoint(ctx, alice, "agent-1", api.CheckpointWrite{Name: "plan", Body: []byte(`13`), Keep: 2}); err != nil {
		t.Fatal(err)
	}
	if vs := versions(t, s, "plan"); fmt.Sprint(vs) != "[12 13]" {
		t.Fatalf("history with keep 2: %v", vs)
	}
	_, err := s.GetCheckpoint(ctx, alice.TenantID, "agent-1", "", "plan", 11)
	wantIs(t, err, errs.ErrNotFound, "trimmed version")
}

func TestDeleteRemovesEveryVersion(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	mustPut(t, s, "plan", `1`)
	mustPut(t, s, "plan", `2`)
	if err := s.DeleteCheckpoint(ctx, alice, "agent-1", "", "plan"); err != nil {
		t.Fatal(err)
	}
	_, err := s.GetCheckpoint(ctx, alice.TenantID, "agent-1", "", "plan", 1)
	wantIs(t, err, errs.ErrNotFound, "get after delete")
	wantIs(t, s.DeleteCheckpoint(ctx, alice, "agent-1", "", "plan"), errs.ErrNotFound, "delete twice")
	if c := mustPut(t, s, "plan", `3`); c.Version != 1 {
		t.Fatalf("version after delete %d, want 1", c.Version)
	}
}

func TestConcurrentIfMatchPutsLoseNoUpdate(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	mustPut(t, s, "counter", `{"n":0}`)
	const workers, each = 6, 10
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for done := 0; done < each; {
				cur, err := s.GetCheckpoint(ctx, alice.TenantID, "agent-1", "", "counter", 0)
				if err != nil {
					errc <- err
					return
				}
				var v struct{ N int }
				if err := json.Unmarshal(cur.Body, &v); err != nil {
					errc <- err
					return
				}
				v.N++
				b, _ := json.Marshal(v)
				_, err = s.PutCheckpoint(ctx, alice, "agent-1", api.CheckpointWrite{Name: "counter", Body: b, IfVersion: new(cur.Version)})
				switch {
				case err == nil:
					done++
				case errors.Is(err, errs.ErrConflict):
				default:
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	got, err := s.GetCheckpoint(ctx, alice.TenantID, "agent-1", "", "counter", 0)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Body) != fmt.Sprintf(`{"N":%d}`, workers*each) || got.Version != workers*each+1 {
		t.Fatalf("counter %s at version %d, want %d at %d", got.Body, got.Version, workers*each, workers*each+1)
	}
}

func TestAcknowledgedPutSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stead.db")
	ctx := t.Context()
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateSandbox(ctx, store.Sandbox{ID: "sb-1", TenantID: store.DefaultTenant, Name: "a", State: store.StateRunning}); err != nil {
		t.Fatal(err)
	}
	p := api.Principal{TenantID: store.DefaultTenant, KeyID: "k"}
	if _, err := New(st).PutCheckpoint(ctx, p, "a", api.CheckpointWrite{Name: "plan", Body: []byte(`{"v":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := New(st).GetCheckpoint(ctx, p.TenantID, "sb-1", "", "plan", 1)
	if err != nil || string(got.Body) != `{"v":1}` {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
}
