package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Checkpoint documents.

// ckey is the key of document name of agent in sandbox sb of tenant.
func ckey(tenant, sb, agent, name string) store.CheckpointKey {
	return store.CheckpointKey{TenantID: tenant, SandboxID: sb, Agent: agent, Name: name}
}

// put writes body to k with no version check.
func put(t *testing.T, s store.Store, k store.CheckpointKey, body string) store.Checkpoint {
	t.Helper()
	c, err := s.PutCheckpoint(t.Context(), store.CheckpointWrite{CheckpointKey: k, IfVersion: store.AnyVersion, Body: []byte(body), Principal: "key-1"})
	noErr(t, err, "put checkpoint "+k.Name)
	return c
}

func getCheckpoint(t *testing.T, s store.Store, k store.CheckpointKey, version int64) store.Checkpoint {
	t.Helper()
	c, err := s.GetCheckpoint(t.Context(), k, version)
	noErr(t, err, fmt.Sprintf("get checkpoint %s version %d", k.Name, version))
	return c
}

func versionsOf(t *testing.T, s store.Store, k store.CheckpointKey) []int64 {
	t.Helper()
	l, err := s.ListCheckpointVersions(t.Context(), k)
	noErr(t, err, "list versions of "+k.Name)
	vs := []int64{}
	for _, c := range l {
		vs = append(vs, c.Version)
		if c.Body != nil {
			t.Errorf("listed version %d carries a body", c.Version)
		}
	}
	return vs
}

func wantVersions(t *testing.T, what string, got, want []int64) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: versions %v, want %v", what, got, want)
	}
}

func docNames(t *testing.T, s store.Store, tenant, sb string) []string {
	t.Helper()
	l, err := s.ListCheckpoints(t.Context(), tenant, sb)
	noErr(t, err, "list checkpoints of "+sb)
	names := []string{}
	for _, d := range l {
		names = append(names, d.Agent+"/"+d.Name)
	}
	return names
}

func testPutCheckpointVersions(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	k := ckey(store.DefaultTenant, "sb1", "", "plan")
	ts := at(7)
	body1 := []byte(`{"step": 1, "unicode": "ü", "big": 12345678901234567890}`)
	c1, err := s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: 0, Body: body1,
		Principal: "key-a", RunID: "run-1", Note: "first", CreatedAt: ts})
	noErr(t, err, "put version 1")
	if c1.Version != 1 || c1.CheckpointKey != k {
		t.Errorf("first put returned %+v, want version 1 of %+v", c1, k)
	}
	checkTime(t, "returned created_at", c1.CreatedAt, ts)

	before := time.Now().Add(-time.Second)
	c2, err := s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: 1, Body: []byte(`[2]`), Principal: "key-b"})
	noErr(t, err, "put version 2")
	if c2.Version != 2 {
		t.Errorf("second put: version %d, want 2", c2.Version)
	}
	if c2.CreatedAt.Before(before) || c2.CreatedAt.After(time.Now().Add(time.Second)) {
		t.Errorf("zero CreatedAt stored as %v, want now", c2.CreatedAt)
	}

	latest := getCheckpoint(t, s, k, 0)
	if latest.Version != 2 || string(latest.Body) != `[2]` || latest.Principal != "key-b" || latest.RunID != "" {
		t.Errorf("latest = %+v, want version 2 by key-b", latest)
	}
	first := getCheckpoint(t, s, k, 1)
	if first.CheckpointKey != k || first.Version != 1 || !bytes.Equal(first.Body, body1) ||
		first.Principal != "key-a" || first.RunID != "run-1" || first.Note != "first" {
		t.Errorf("version 1 = %+v %s", first, first.Body)
	}
	checkTime(t, "created_at", first.CreatedAt, ts)
	_, err = s.GetCheckpoint(ctx, k, 3)
	wantErr(t, err, errs.ErrNotFound, "get unwritten version 3")
	_, err = s.GetCheckpoint(ctx, ckey(store.DefaultTenant, "sb1", "", "nope"), 0)
	wantErr(t, err, errs.ErrNotFound, "get absent document")

	wantVersions(t, "history", versionsOf(t, s, k), []int64{1, 2})
	d, err := s.GetCheckpointDoc(ctx, k)
	noErr(t, err, "get document")
	if d.Latest != 2 || d.Oldest != 1 || d.Versions != 2 || d.Keep != store.DefaultCheckpointKeep || d.Schema != nil {
		t.Errorf("document = %+v, want latest 2, oldest 1, 2 versions, keep %d, no schema", d, store.DefaultCheckpointKeep)
	}
}

func testPutCheckpointIfVersion(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	k := ckey(store.DefaultTenant, "sb1", "", "plan")
	try := func(ifVersion int64, body string) error {
		_, err := s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: ifVersion, Body: []byte(body)})
		return err
	}
	wantErr(t, try(1, `"x"`), errs.ErrConflict, "if-version 1 on an absent document")
	_, err := s.GetCheckpointDoc(ctx, k)
	wantErr(t, err, errs.ErrNotFound, "a refused first put must not create the document")

	noErr(t, try(0, `"v1"`), "if-version 0 on an absent document")
	wantErr(t, try(0, `"lost"`), errs.ErrConflict, "if-version 0 on an existing document")
	noErr(t, try(1, `"v2"`), "if-version 1")
	for _, v := range []int64{1, 3, 0} {
		wantErr(t, try(v, `"lost"`), errs.ErrConflict, fmt.Sprintf("stale if-version %d", v))
	}
	noErr(t, try(store.AnyVersion, `"v3"`), "no check")
	wantVersions(t, "history", versionsOf(t, s, k), []int64{1, 2, 3})
	if got := getCheckpoint(t, s, k, 0); string(got.Body) != `"v3"` {
		t.Errorf("latest body %s, want \"v3\"", got.Body)
	}
}

func testPutCheckpointTrims(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	k := ckey(store.DefaultTenant, "sb1", "", "plan")
	for i := 1; i <= 13; i++ {
		put(t, s, k, fmt.Sprintf(`{"i":%d}`, i))
	}
	wantVersions(t, "default keep", versionsOf(t, s, k), []int64{4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	_, err := s.GetCheckpoint(ctx, k, 3)
	wantErr(t, err, errs.ErrNotFound, "get trimmed version")
	if got := getCheckpoint(t, s, k, 4); string(got.Body) != `{"i":4}` {
		t.Errorf("version 4 body %s", got.Body)
	}

	// Lowering keep trims at once, in the same put.
	c, err := s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: 13, Body: []byte(`{"i":14}`), Keep: 3})
	noErr(t, err, "put with keep 3")
	if c.Version != 14 {
		t.Errorf("version %d, want 14", c.Version)
	}
	wantVersions(t, "keep 3", versionsOf(t, s, k), []int64{12, 13, 14})
	// The new keep sticks without being repeated.
	put(t, s, k, `{"i":15}`)
	wantVersions(t, "keep 3 kept", versionsOf(t, s, k), []int64{13, 14, 15})
	d, err := s.GetCheckpointDoc(ctx, k)
	noErr(t, err, "get document")
	if d.Keep != 3 || d.Latest != 15 || d.Oldest != 13 || d.Versions != 3 {
		t.Errorf("document %+v, want keep 3, latest 15, oldest 13, 3 versions", d)
	}
	// Raising it keeps what is there and grows from there.
	_, err = s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: store.AnyVersion, Body: []byte(`{"i":16}`), Keep: 5})
	noErr(t, err, "put with keep 5")
	put(t, s, k, `{"i":17}`)
	put(t, s, k, `{"i":18}`)
	wantVersions(t, "keep 5", versionsOf(t, s, k), []int64{14, 15, 16, 17, 18})

	// keep 1 holds just the latest.
	k1 := ckey(store.DefaultTenant, "sb1", "", "one")
	for range 3 {
		_, err := s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k1, IfVersion: store.AnyVersion, Body: []byte(`1`), Keep: 1})
		noErr(t, err, "put with keep 1")
	}
	wantVersions(t, "keep 1", versionsOf(t, s, k1), []int64{3})
}

func testPutCheckpointInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	good := store.CheckpointWrite{CheckpointKey: ckey(store.DefaultTenant, "sb1", "", "plan"), IfVersion: store.AnyVersion, Body: []byte(`{}`)}
	for what, mutate := range map[string]func(w *store.CheckpointWrite){
		"empty tenant":      func(w *store.CheckpointWrite) { w.TenantID = "" },
		"empty sandbox":     func(w *store.CheckpointWrite) { w.SandboxID = "" },
		"empty name":        func(w *store.CheckpointWrite) { w.Name = "" },
		"empty body":        func(w *store.CheckpointWrite) { w.Body = nil },
		"if-version -2":     func(w *store.CheckpointWrite) { w.IfVersion = -2 },
		"negative keep":     func(w *store.CheckpointWrite) { w.Keep = -1 },
		"keep over maximum": func(w *store.CheckpointWrite) { w.Keep = store.MaxCheckpointKeep + 1 },
	} {
		w := good
		mutate(&w)
		_, err := s.PutCheckpoint(ctx, w)
		wantErr(t, err, errs.ErrInvalid, what)
	}
	_, err := s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: ckey(store.DefaultTenant, "ghost", "", "plan"),
		IfVersion: store.AnyVersion, Body: []byte(`{}`)})
	wantErr(t, err, errs.ErrNotFound, "put to absent sandbox")
	if names := docNames(t, s, store.DefaultTenant, "sb1"); len(names) != 0 {
		t.Errorf("refused puts stored documents %q", names)
	}
	_, err = s.ListCheckpoints(ctx, store.DefaultTenant, "ghost")
	wantErr(t, err, errs.ErrNotFound, "list checkpoints of absent sandbox")
}

func testCheckpointTenantIsolation(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	createSandbox(t, s, newSandbox("sb1", "acme", "web", at(0)))
	mine := ckey("acme", "sb1", "", "plan")
	put(t, s, mine, `{"secret":true}`)

	stolen := ckey(store.DefaultTenant, "sb1", "", "plan")
	_, err := s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: stolen, IfVersion: store.AnyVersion, Body: []byte(`{"x":1}`)})
	wantErr(t, err, errs.ErrNotFound, "put to other tenant's sandbox")
	_, err = s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: stolen, IfVersion: 1, Body: []byte(`{"x":1}`)})
	wantErr(t, err, errs.ErrNotFound, "put with the right version to other tenant's sandbox")
	_, err = s.GetCheckpoint(ctx, stolen, 0)
	wantErr(t, err, errs.ErrNotFound, "get other tenant's checkpoint")
	_, err = s.GetCheckpoint(ctx, stolen, 1)
	wantErr(t, err, errs.ErrNotFound, "get other tenant's checkpoint version")
	_, err = s.GetCheckpointDoc(ctx, stolen)
	wantErr(t, err, errs.ErrNotFound, "get other tenant's document")
	_, err = s.ListCheckpoints(ctx, store.DefaultTenant, "sb1")
	wantErr(t, err, errs.ErrNotFound, "list other tenant's checkpoints")
	_, err = s.ListCheckpointVersions(ctx, stolen)
	wantErr(t, err, errs.ErrNotFound, "list versions of other tenant's checkpoint")
	_, err = s.SetCheckpointSchema(ctx, stolen, []byte(`{"type":"string"}`), nil)
	wantErr(t, err, errs.ErrNotFound, "set schema of other tenant's checkpoint")
	wantErr(t, s.DeleteCheckpoint(ctx, stolen, nil), errs.ErrNotFound, "delete other tenant's checkpoint")

	got := getCheckpoint(t, s, mine, 0)
	if got.Version != 1 || string(got.Body) != `{"secret":true}` {
		t.Errorf("owner's document changed: %+v %s", got, got.Body)
	}
	d, err := s.GetCheckpointDoc(ctx, mine)
	noErr(t, err, "get own document")
	if d.Schema != nil || d.Latest != 1 {
		t.Errorf("owner's document settings changed: %+v", d)
	}
}

func testCheckpointSandboxIsolation(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	createSandbox(t, s, newSandbox("sb2", store.DefaultTenant, "db", at(1)))
	a := ckey(store.DefaultTenant, "sb1", "", "plan")
	put(t, s, a, `"sb1 v1"`)
	put(t, s, a, `"sb1 v2"`)
	other := ckey(store.DefaultTenant, "sb2", "", "plan")
	_, err := s.GetCheckpoint(ctx, other, 0)
	wantErr(t, err, errs.ErrNotFound, "get the same name in another sandbox")
	_, err = s.GetCheckpoint(ctx, other, 1)
	wantErr(t, err, errs.ErrNotFound, "get a version of the same name in another sandbox")
	if names := docNames(t, s, store.DefaultTenant, "sb2"); len(names) != 0 {
		t.Errorf("sb2 lists %q, want nothing", names)
	}
	wantErr(t, s.DeleteCheckpoint(ctx, other, nil), errs.ErrNotFound, "delete the same name in another sandbox")

	// The same name in another sandbox, or for another agent, is its own
	// document with its own version numbers.
	if c := put(t, s, other, `"sb2 v1"`); c.Version != 1 {
		t.Errorf("first put in sb2: version %d, want 1", c.Version)
	}
	agent := ckey(store.DefaultTenant, "sb1", "planner", "plan")
	if c := put(t, s, agent, `"planner v1"`); c.Version != 1 {
		t.Errorf("first put for agent planner: version %d, want 1", c.Version)
	}
	if got := getCheckpoint(t, s, a, 0); got.Version != 2 || string(got.Body) != `"sb1 v2"` {
		t.Errorf("sb1 default agent: %+v %s", got, got.Body)
	}
	if got := getCheckpoint(t, s, agent, 0); string(got.Body) != `"planner v1"` {
		t.Errorf("sb1 planner: %s", got.Body)
	}
	if got := getCheckpoint(t, s, other, 0); string(got.Body) != `"sb2 v1"` {
		t.Errorf("sb2: %s", got.Body)
	}
	wantIDs(t, "sb1 documents", docNames(t, s, store.DefaultTenant, "sb1"), []string{"/plan", "planner/plan"})
	wantIDs(t, "sb2 documents", docNames(t, s, store.DefaultTenant, "sb2"), []string{"/plan"})
}

func testCheckpointSchema(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	k := ckey(store.DefaultTenant, "sb1", "", "plan")
	schema := []byte(`{"type": "object", "required": ["step"]}`)

	// A schema may come before the first version.
	d, err := s.SetCheckpointSchema(ctx, k, schema, nil)
	noErr(t, err, "set schema")
	if !bytes.Equal(d.Schema, schema) || d.Latest != 0 || d.Versions != 0 || d.Keep != store.DefaultCheckpointKeep {
		t.Errorf("document after set schema: %+v", d)
	}
	_, err = s.GetCheckpoint(ctx, k, 0)
	wantErr(t, err, errs.ErrNotFound, "get latest of a document without versions")
	wantVersions(t, "no versions yet", versionsOf(t, s, k), []int64{})
	wantIDs(t, "listed", docNames(t, s, store.DefaultTenant, "sb1"), []string{"/plan"})

	var seen [][]byte
	check := func(sc []byte) error { seen = append(seen, sc); return nil }
	// A document without versions counts as not existing for if-version 0.
	c, err := s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: 0, Body: []byte(`{"step":1}`), Check: check})
	noErr(t, err, "first put after schema")
	if c.Version != 1 {
		t.Errorf("version %d, want 1", c.Version)
	}
	if len(seen) != 1 || !bytes.Equal(seen[0], schema) {
		t.Errorf("check saw %q, want the stored schema once", seen)
	}

	// Setting the schema again replaces it and keeps the versions.
	schema2 := []byte(`{"type":"object"}`)
	d, err = s.SetCheckpointSchema(ctx, k, schema2, nil)
	noErr(t, err, "replace schema")
	if !bytes.Equal(d.Schema, schema2) || d.Latest != 1 || d.Versions != 1 {
		t.Errorf("document after replacing schema: %+v", d)
	}
	// nil removes it; Check then sees nil.
	d, err = s.SetCheckpointSchema(ctx, k, nil, nil)
	noErr(t, err, "remove schema")
	if d.Schema != nil {
		t.Errorf("schema %q after removal", d.Schema)
	}
	seen = nil
	_, err = s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: 1, Body: []byte(`7`), Check: check})
	noErr(t, err, "put without schema")
	if len(seen) != 1 || seen[0] != nil {
		t.Errorf("check saw %q, want one nil schema", seen)
	}
	// A schema set on another document does not leak.
	_, err = s.SetCheckpointSchema(ctx, ckey(store.DefaultTenant, "sb1", "", "other"), schema, nil)
	noErr(t, err, "set schema on other document")
	seen = nil
	w := store.CheckpointWrite{CheckpointKey: k, IfVersion: store.AnyVersion, Body: []byte(`8`), Check: check}
	_, err = s.PutCheckpoint(ctx, w)
	noErr(t, err, "put")
	if len(seen) != 1 || seen[0] != nil {
		t.Errorf("check saw %q, want nil", seen)
	}
	_, err = s.SetCheckpointSchema(ctx, ckey(store.DefaultTenant, "sb1", "", "absent"), nil, nil)
	wantErr(t, err, errs.ErrNotFound, "remove schema of absent document")
	wantIDs(t, "documents", docNames(t, s, store.DefaultTenant, "sb1"), []string{"/other", "/plan"})
	_, err = s.SetCheckpointSchema(ctx, ckey(store.DefaultTenant, "ghost", "", "plan"), schema, nil)
	wantErr(t, err, errs.ErrNotFound, "set schema in absent sandbox")
}

func testCheckpointCheckFails(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	k := ckey(store.DefaultTenant, "sb1", "", "plan")
	put(t, s, k, `{"ok":1}`)
	refused := fmt.Errorf("body fails the schema: %w", errs.ErrInvalid)
	called := false
	_, err := s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: 1, Body: []byte(`{"bad":1}`), Keep: 1,
		Check: func([]byte) error { called = true; return refused }})
	if !errors.Is(err, refused) || !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("put failing its check: %v, want the check's error", err)
	}
	if !called {
		t.Errorf("check not called")
	}
	// Nothing changed: no version, no keep change.
	wantVersions(t, "after refused put", versionsOf(t, s, k), []int64{1})
	d, err := s.GetCheckpointDoc(ctx, k)
	noErr(t, err, "get document")
	if d.Keep != store.DefaultCheckpointKeep || d.Latest != 1 {
		t.Errorf("refused put changed the document: %+v", d)
	}
	// A version mismatch is reported before the check runs.
	called = false
	_, err = s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: 5, Body: []byte(`{}`),
		Check: func([]byte) error { called = true; return refused }})
	wantErr(t, err, errs.ErrConflict, "stale put with a failing check")
	if called {
		t.Errorf("check ran although the version check failed")
	}
	// A refused first put leaves no document behind.
	k2 := ckey(store.DefaultTenant, "sb1", "", "new")
	_, err = s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k2, IfVersion: store.AnyVersion, Body: []byte(`{}`),
		Check: func([]byte) error { return refused }})
	wantErr(t, err, errs.ErrInvalid, "refused first put")
	_, err = s.GetCheckpointDoc(ctx, k2)
	wantErr(t, err, errs.ErrNotFound, "document of a refused first put")
}

func testDeleteCheckpoint(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	k := ckey(store.DefaultTenant, "sb1", "", "plan")
	keepMe := ckey(store.DefaultTenant, "sb1", "", "notes")
	put(t, s, k, `1`)
	put(t, s, k, `2`)
	put(t, s, keepMe, `"n"`)
	_, err := s.SetCheckpointSchema(ctx, k, []byte(`{}`), nil)
	noErr(t, err, "set schema")

	noErr(t, s.DeleteCheckpoint(ctx, k, nil), "delete checkpoint")
	_, err = s.GetCheckpoint(ctx, k, 1)
	wantErr(t, err, errs.ErrNotFound, "get version of deleted document")
	_, err = s.GetCheckpointDoc(ctx, k)
	wantErr(t, err, errs.ErrNotFound, "get deleted document")
	_, err = s.ListCheckpointVersions(ctx, k)
	wantErr(t, err, errs.ErrNotFound, "list versions of deleted document")
	wantErr(t, s.DeleteCheckpoint(ctx, k, nil), errs.ErrNotFound, "delete twice")
	wantIDs(t, "remaining documents", docNames(t, s, store.DefaultTenant, "sb1"), []string{"/notes"})

	// A new document of the same name starts over, without the old schema.
	c, err := s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: 0, Body: []byte(`"again"`)})
	noErr(t, err, "put after delete")
	if c.Version != 1 {
		t.Errorf("version after delete %d, want 1", c.Version)
	}
	d, err := s.GetCheckpointDoc(ctx, k)
	noErr(t, err, "get document")
	if d.Schema != nil {
		t.Errorf("schema survived delete: %s", d.Schema)
	}
}

func testPurgeSandboxDeletesCheckpoints(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	k := ckey(store.DefaultTenant, "sb1", "a", "plan")
	put(t, s, k, `1`)
	_, err := s.SetCheckpointSchema(ctx, ckey(store.DefaultTenant, "sb1", "", "schema-only"), []byte(`{}`), nil)
	noErr(t, err, "set schema")
	noErr(t, s.DeleteSandbox(ctx, store.DefaultTenant, "sb1"), "purge sandbox")
	_, err = s.GetCheckpoint(ctx, k, 0)
	wantErr(t, err, errs.ErrNotFound, "checkpoint of purged sandbox")
	// A new sandbox that happens to get the same id starts empty.
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(1)))
	if names := docNames(t, s, store.DefaultTenant, "sb1"); len(names) != 0 {
		t.Errorf("recreated sandbox lists %q", names)
	}
	if c := put(t, s, k, `2`); c.Version != 1 {
		t.Errorf("version %d, want 1", c.Version)
	}
}

func testListCheckpointsOrdered(t *testing.T, s store.Store) {
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	for _, an := range [][2]string{{"zed", "a"}, {"", "b"}, {"alpha", "z"}, {"", "a"}, {"alpha", "m"}} {
		put(t, s, ckey(store.DefaultTenant, "sb1", an[0], an[1]), `{}`)
	}
	wantIDs(t, "documents", docNames(t, s, store.DefaultTenant, "sb1"),
		[]string{"/a", "/b", "alpha/m", "alpha/z", "zed/a"})
	l, err := s.ListCheckpoints(t.Context(), store.DefaultTenant, "sb1")
	noErr(t, err, "list")
	for _, d := range l {
		if d.TenantID != store.DefaultTenant || d.SandboxID != "sb1" || d.Latest != 1 || d.Versions != 1 || d.Oldest != 1 {
			t.Errorf("listed document %+v", d)
		}
	}
}

// testConcurrentCheckpointPuts runs read-modify-write loops against one
// document: every put names the version it read, so each version must have
// exactly one winner and no increment may be lost.
func testConcurrentCheckpointPuts(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	k := ckey(store.DefaultTenant, "sb1", "", "counter")
	put(t, s, k, `0`)

	const workers, each = 8, 12
	var mu sync.Mutex
	winners := map[int64][]int{} // version → workers whose put created it
	conflicts := 0
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for done := 0; done < each; {
				cur, err := s.GetCheckpoint(ctx, k, 0)
				if err != nil {
					errc <- err
					return
				}
				var n int
				if _, err := fmt.Sscan(string(cur.Body), &n); err != nil {
					errc <- err
					return
				}
				c, err := s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: cur.Version,
					Body: fmt.Appendf(nil, "%d", n+1), Principal: fmt.Sprint(w), Keep: store.MaxCheckpointKeep})
				switch {
				case err == nil:
					done++
					mu.Lock()
					winners[c.Version] = append(winners[c.Version], w)
					mu.Unlock()
				case errors.Is(err, errs.ErrConflict):
					mu.Lock()
					conflicts++
					mu.Unlock()
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
		t.Error(err)
	}
	total := int64(workers * each)
	for v := int64(2); v <= total+1; v++ {
		if len(winners[v]) != 1 {
			t.Errorf("version %d has winners %v, want exactly one", v, winners[v])
		}
	}
	latest := getCheckpoint(t, s, k, 0)
	if latest.Version != total+1 || string(latest.Body) != fmt.Sprint(total) {
		t.Errorf("latest version %d body %s, want %d and %d: an update was lost", latest.Version, latest.Body, total+1, total)
	}
	if vs := versionsOf(t, s, k); len(vs) != int(total)+1 {
		t.Errorf("%d versions kept, want %d", len(vs), total+1)
	}
	t.Logf("%d puts, %d conflicts", total, conflicts)
}

func testConcurrentCheckpointCreates(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	k := ckey(store.DefaultTenant, "sb1", "", "plan")
	const workers = 16
	results := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			_, results[w] = s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: 0, Body: fmt.Appendf(nil, "%d", w)})
		})
	}
	wg.Wait()
	winner := -1
	for w, err := range results {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Errorf("workers %d and %d both created the document", winner, w)
			}
			winner = w
		case !errors.Is(err, errs.ErrConflict):
			t.Errorf("worker %d: %v, want nil or ErrConflict", w, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no create succeeded")
	}
	wantVersions(t, "history", versionsOf(t, s, k), []int64{1})
	if got := getCheckpoint(t, s, k, 1); string(got.Body) != fmt.Sprint(winner) {
		t.Errorf("stored body %s, want the winner's %d", got.Body, winner)
	}
}

func testCheckpointPolicy(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	k := ckey(store.DefaultTenant, "sb1", "", "plan")
	put(t, s, k, `[1]`)
	d, err := s.GetCheckpointDoc(ctx, k)
	noErr(t, err, "get document")
	def := store.CheckpointPolicy{Write: store.CheckpointAccess{Who: store.AccessAny}, Read: store.CheckpointAccess{Who: store.AccessAny}, Mutability: store.Mutable}
	if !policyEqual(d.Policy, def) {
		t.Errorf("default policy %+v, want %+v", d.Policy, def)
	}

	want := store.CheckpointPolicy{
		Write:      store.CheckpointAccess{Who: store.AccessKeys, Keys: []string{"key-a", "key-b"}},
		Read:       store.CheckpointAccess{Who: store.AccessAgent, Keys: []string{"dropped"}},
		Mutability: store.AppendOnly,
	}
	d, err = s.SetCheckpointPolicy(ctx, k, want, 0, nil)
	noErr(t, err, "set policy")
	want.Read.Keys = nil
	if !policyEqual(d.Policy, want) || d.Keep != store.DefaultCheckpointKeep || d.Latest != 1 {
		t.Errorf("after set policy: %+v keep %d latest %d, want %+v keep %d latest 1", d.Policy, d.Keep, d.Latest, want, store.DefaultCheckpointKeep)
	}
	if d, err = s.GetCheckpointDoc(ctx, k); err != nil || !policyEqual(d.Policy, want) {
		t.Errorf("stored policy %+v (%v), want %+v", d.Policy, err, want)
	}
	l, err := s.ListCheckpoints(ctx, store.DefaultTenant, "sb1")
	noErr(t, err, "list")
	if len(l) != 1 || !policyEqual(l[0].Policy, want) {
		t.Errorf("listed policy %+v, want %+v", l, want)
	}

	// A policy creates a document without versions, like a schema.
	fresh := ckey(store.DefaultTenant, "sb1", "", "fresh")
	d, err = s.SetCheckpointPolicy(ctx, fresh, store.CheckpointPolicy{Mutability: store.Immutable}, 3, nil)
	noErr(t, err, "set policy of a new document")
	if d.Latest != 0 || d.Keep != 3 || d.Policy.Mutability != store.Immutable || d.Policy.Write.Who != store.AccessAny {
		t.Errorf("new document %+v", d)
	}

	// The writer's kind is provenance.
	c, err := s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: store.AnyVersion, Body: []byte(`[1,2]`),
		Principal: "sandbox:sb1", PrincipalKind: store.PrincipalAgent})
	noErr(t, err, "put with kind")
	if c.PrincipalKind != store.PrincipalAgent {
		t.Errorf("returned kind %q", c.PrincipalKind)
	}
	if got := getCheckpoint(t, s, k, 0); got.PrincipalKind != store.PrincipalAgent || got.Principal != "sandbox:sb1" {
		t.Errorf("stored provenance %q/%q", got.Principal, got.PrincipalKind)
	}
	vs, err := s.ListCheckpointVersions(ctx, k)
	noErr(t, err, "list versions")
	if len(vs) != 2 || vs[1].PrincipalKind != store.PrincipalAgent || vs[0].PrincipalKind != "" {
		t.Errorf("listed kinds %+v", vs)
	}

	// Bad input and another tenant change nothing.
	_, err = s.SetCheckpointPolicy(ctx, k, store.CheckpointPolicy{Write: store.CheckpointAccess{Who: store.AccessKeys, Keys: []string{"a,b"}}}, 0, nil)
	wantErr(t, err, errs.ErrInvalid, "key id with a comma")
	_, err = s.SetCheckpointPolicy(ctx, k, store.CheckpointPolicy{}, store.MaxCheckpointKeep+1, nil)
	wantErr(t, err, errs.ErrInvalid, "keep too large")
	_, err = s.SetCheckpointPolicy(ctx, ckey("acme", "sb1", "", "plan"), store.CheckpointPolicy{}, 0, nil)
	wantErr(t, err, errs.ErrNotFound, "set policy in another tenant")
	if d, _ = s.GetCheckpointDoc(ctx, k); !policyEqual(d.Policy, want) {
		t.Errorf("policy changed by failed calls: %+v", d.Policy)
	}
}

func testCheckpointPolicyKeep(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	k := ckey(store.DefaultTenant, "sb1", "", "plan")
	for i := range 5 {
		put(t, s, k, fmt.Sprint(i))
	}
	d, err := s.SetCheckpointPolicy(ctx, k, store.CheckpointPolicy{}, 1, nil)
	noErr(t, err, "set keep 1")
	if d.Keep != 1 || d.Versions != 1 || d.Oldest != 5 {
		t.Errorf("after keep 1: keep %d versions %d oldest %d", d.Keep, d.Versions, d.Oldest)
	}
	wantVersions(t, "after keep 1", versionsOf(t, s, k), []int64{5})
	put(t, s, k, `6`)
	wantVersions(t, "put after keep 1", versionsOf(t, s, k), []int64{6})
}

func testCheckpointGuards(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	k := ckey(store.DefaultTenant, "sb1", "", "plan")
	stop := errors.New("guard says no")

	// Put: the guard sees the absent document's defaults, then the stored
	// one with its latest body on demand.
	var seen store.CheckpointDoc
	_, err := s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: store.AnyVersion, Body: []byte(`[1]`),
		Guard: func(d store.CheckpointDoc, latest func() ([]byte, error)) error {
			seen = d
			b, err := latest()
			if err != nil || b != nil {
				t.Errorf("latest of an absent document: %q, %v", b, err)
			}
			return nil
		}})
	noErr(t, err, "first put")
	if seen.Latest != 0 || seen.Keep != store.DefaultCheckpointKeep || seen.Policy.Mutability != store.Mutable || seen.CheckpointKey != k {
		t.Errorf("guard saw %+v for an absent document", seen)
	}
	_, err = s.SetCheckpointPolicy(ctx, k, store.CheckpointPolicy{Mutability: store.AppendOnly}, 0, nil)
	noErr(t, err, "set policy")
	_, err = s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: store.AnyVersion, Body: []byte(`[2]`),
		Guard: func(d store.CheckpointDoc, latest func() ([]byte, error)) error {
			b, err := latest()
			if err != nil || string(b) != `[1]` || d.Policy.Mutability != store.AppendOnly || d.Latest != 1 {
				t.Errorf("guard saw %+v, latest %q, %v", d, b, err)
			}
			return stop
		}})
	wantErr(t, err, stop, "guarded put")
	wantVersions(t, "after refused put", versionsOf(t, s, k), []int64{1})

	no := func(store.CheckpointDoc) error { return stop }
	_, err = s.SetCheckpointSchema(ctx, k, []byte(`{}`), no)
	wantErr(t, err, stop, "guarded schema")
	_, err = s.SetCheckpointPolicy(ctx, k, store.CheckpointPolicy{}, 1, no)
	wantErr(t, err, stop, "guarded policy")
	wantErr(t, s.DeleteCheckpoint(ctx, k, no), stop, "guarded delete")
	d, err := s.GetCheckpointDoc(ctx, k)
	noErr(t, err, "document after refused calls")
	if d.Schema != nil || d.Policy.Mutability != store.AppendOnly || d.Keep != store.DefaultCheckpointKeep || d.Latest != 1 {
		t.Errorf("refused calls changed the document: %+v", d)
	}
	wantErr(t, s.DeleteCheckpoint(ctx, ckey(store.DefaultTenant, "sb1", "", "absent"), no), errs.ErrNotFound, "guarded delete of an absent document")
}

func policyEqual(a, b store.CheckpointPolicy) bool {
	return a.Write.Who == b.Write.Who && slices.Equal(a.Write.Keys, b.Write.Keys) &&
		a.Read.Who == b.Read.Who && slices.Equal(a.Read.Keys, b.Read.Keys) && a.Mutability == b.Mutability
}
