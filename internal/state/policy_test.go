package state

import (
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// More principals of tenant acme: an admin key, a second API key, the agent
// token of sandbox sb-alice and the agent token of another sandbox.
var (
	acmeAdmin  = api.Principal{TenantID: "acme", KeyID: "key-admin", Admin: true}
	bob        = api.Principal{TenantID: "acme", KeyID: "key-bob"}
	agentToken = api.Principal{TenantID: "acme", KeyID: "sandbox:sb-alice", Sandbox: "sb-alice"}
	otherAgent = api.Principal{TenantID: "acme", KeyID: "sandbox:sb-other", Sandbox: "sb-other"}
)

func putAs(t *testing.T, s *Service, p api.Principal, name, body string) (client.Checkpoint, error) {
	return s.PutCheckpoint(t.Context(), p, "agent-1", api.CheckpointWrite{Name: name, Body: []byte(body)})
}

func setPolicy(t *testing.T, s *Service, p api.Principal, name string, req client.SetCheckpointPolicyRequest) client.CheckpointInfo {
	t.Helper()
	info, err := s.SetCheckpointPolicy(t.Context(), p, "agent-1", "", name, req)
	if err != nil {
		t.Fatalf("set policy of %s: %v", name, err)
	}
	return info
}

func TestDefaultPolicyIsTodaysBehaviour(t *testing.T) {
	ctx := t.Context()
	s, _ := newService(t)
	for _, p := range []api.Principal{alice, acmeAdmin, agentToken} {
		if _, err := putAs(t, s, p, "plan", `{"by":"`+p.KeyID+`"}`); err != nil {
			t.Fatalf("put as %s: %v", p.KeyID, err)
		}
		if _, err := s.ReadCheckpoint(ctx, p, "agent-1", "", "plan", 0); err != nil {
			t.Fatalf("read as %s: %v", p.KeyID, err)
		}
	}
	list, err := s.ListCheckpoints(ctx, "acme", "agent-1")
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	want := client.CheckpointPolicy{Write: client.CheckpointAccess{Who: "any"}, Read: client.CheckpointAccess{Who: "any"}, Mutability: "mutable"}
	if got := list[0].Policy; got.Write.Who != want.Write.Who || got.Read.Who != want.Read.Who || got.Mutability != want.Mutability || list[0].Keep != 10 {
		t.Errorf("default policy %+v keep %d, want %+v keep 10", got, list[0].Keep, want)
	}
}

func TestProvenanceRecordsTheWritersKind(t *testing.T) {
	ctx := t.Context()
	s, _ := newService(t)
	for _, c := range []struct {
		p    api.Principal
		kind string
	}{{alice, "api-key"}, {acmeAdmin, "admin"}, {agentToken, "sandbox-agent"}} {
		cp, err := putAs(t, s, c.p, "plan", `1`)
		if err != nil || cp.PrincipalKind != c.kind || cp.Principal != c.p.KeyID {
			t.Errorf("put as %s: %+v %v, want kind %s", c.p.KeyID, cp, err, c.kind)
		}
	}
	vs, err := s.ReadCheckpointVersions(ctx, alice, "agent-1", "", "plan")
	if err != nil || len(vs) != 3 || vs[0].PrincipalKind != "api-key" || vs[1].PrincipalKind != "admin" || vs[2].PrincipalKind != "sandbox-agent" {
		t.Errorf("versions %+v %v", vs, err)
	}
	rb, err := s.RollbackCheckpoint(ctx, agentToken, "agent-1", "", "plan", client.RollbackCheckpointRequest{Version: 1})
	if err != nil || rb.PrincipalKind != "sandbox-agent" || rb.Note != "rollback from 1" {
		t.Errorf("rollback %+v %v", rb, err)
	}
}

func TestAuthorityDecidesWhoMayWrite(t *testing.T) {
	ctx := t.Context()
	s, _ := newService(t)
	cases := []struct {
		name    string
		write   client.CheckpointAccess
		allowed []api.Principal
		denied  []api.Principal
	}{
		{"by-admin", client.CheckpointAccess{Who: "admin"}, []api.Principal{acmeAdmin}, []api.Principal{alice, agentToken}},
		{"by-agent", client.CheckpointAccess{Who: "agent"}, []api.Principal{agentToken}, []api.Principal{alice, acmeAdmin, otherAgent}},
		{"by-keys", client.CheckpointAccess{Who: "keys", Keys: []string{"key-bob"}}, []api.Principal{bob}, []api.Principal{alice, acmeAdmin, agentToken}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mustPut(t, s, c.name, `{"v":0}`)
			setPolicy(t, s, alice, c.name, client.SetCheckpointPolicyRequest{Write: c.write})
			for _, p := range c.denied {
				_, err := putAs(t, s, p, c.name, `{"v":1}`)
				wantIs(t, err, errs.ErrForbidden, "put as "+p.KeyID)
				_, err = s.RollbackCheckpoint(ctx, p, "agent-1", "", c.name, client.RollbackCheckpointRequest{Version: 1})
				wantIs(t, err, errs.ErrForbidden, "rollback as "+p.KeyID)
				_, err = s.SetCheckpointSchema(ctx, p, "agent-1", "", c.name, []byte(`{"type":"string"}`))
				wantIs(t, err, errs.ErrForbidden, "schema as "+p.KeyID)
				wantIs(t, s.DeleteCheckpoint(ctx, p, "agent-1", "", c.name), errs.ErrForbidden, "delete as "+p.KeyID)
			}
			// Nothing changed.
			got, err := s.GetCheckpoint(ctx, "acme", "agent-1", "", c.name, 0)
			if err != nil || got.Version != 1 {
				t.Fatalf("after refused writes: %+v %v", got, err)
			}
			for _, p := range c.allowed {
				if _, err := putAs(t, s, p, c.name, `{"v":2}`); err != nil {
					t.Errorf("put as %s: %v", p.KeyID, err)
				}
			}
		})
	}
	// The message says who may write.
	_, err := putAs(t, s, alice, "by-agent", `{}`)
	if err == nil || !strings.Contains(err.Error(), "agent token") || !strings.Contains(err.Error(), "key-alice") {
		t.Errorf("forbidden message %v", err)
	}
}

func TestScopeDecidesWhoMayRead(t *testing.T) {
	ctx := t.Context()
	s, _ := newService(t)
	mustPut(t, s, "secret", `{"k":1}`)
	setPolicy(t, s, alice, "secret", client.SetCheckpointPolicyRequest{Read: client.CheckpointAccess{Who: "agent"}})
	for _, p := range []api.Principal{alice, acmeAdmin, bob} {
		_, err := s.ReadCheckpoint(ctx, p, "agent-1", "", "secret", 0)
		wantIs(t, err, errs.ErrForbidden, "read as "+p.KeyID)
		_, err = s.ReadCheckpointVersions(ctx, p, "agent-1", "", "secret")
		wantIs(t, err, errs.ErrForbidden, "versions as "+p.KeyID)
	}
	if got, err := s.ReadCheckpoint(ctx, agentToken, "agent-1", "", "secret", 0); err != nil || string(got.Body) != `{"k":1}` {
		t.Errorf("agent read %+v %v", got, err)
	}
	// Writes stay open to all (write: any), reading is not.
	if _, err := putAs(t, s, bob, "secret", `{"k":2}`); err != nil {
		t.Errorf("put as bob: %v", err)
	}
	// Admin keys only, and a key list.
	setPolicy(t, s, acmeAdmin, "secret", client.SetCheckpointPolicyRequest{Read: client.CheckpointAccess{Who: "keys", Keys: []string{"key-bob"}}})
	if _, err := s.ReadCheckpoint(ctx, bob, "agent-1", "", "secret", 0); err != nil {
		t.Errorf("bob read: %v", err)
	}
	_, err := s.ReadCheckpoint(ctx, agentToken, "agent-1", "", "secret", 0)
	wantIs(t, err, errs.ErrForbidden, "agent read after keys policy")
	// An absent document is still not found.
	_, err = s.ReadCheckpoint(ctx, alice, "agent-1", "", "absent", 0)
	wantIs(t, err, errs.ErrNotFound, "read absent")
}

func TestGovernedPolicyChangesTakeAnAdmin(t *testing.T) {
	ctx := t.Context()
	s, _ := newService(t)
	mustPut(t, s, "plan", `1`)
	// The agent token may govern a default document (as it may write it)...
	setPolicy(t, s, agentToken, "plan", client.SetCheckpointPolicyRequest{Write: client.CheckpointAccess{Who: "agent"}})
	// ...but once governed only an admin may change the policy or keep.
	for _, p := range []api.Principal{alice, agentToken} {
		_, err := s.SetCheckpointPolicy(ctx, p, "agent-1", "", "plan", client.SetCheckpointPolicyRequest{})
		wantIs(t, err, errs.ErrForbidden, "re-govern as "+p.KeyID)
	}
	_, err := s.PutCheckpoint(ctx, agentToken, "agent-1", api.CheckpointWrite{Name: "plan", Body: []byte(`2`), Keep: 3})
	wantIs(t, err, errs.ErrForbidden, "keep change by put of a governed document")
	if _, err := s.PutCheckpoint(ctx, agentToken, "agent-1", api.CheckpointWrite{Name: "plan", Body: []byte(`2`), Keep: 10}); err != nil {
		t.Errorf("put with the current keep: %v", err)
	}
	info := setPolicy(t, s, acmeAdmin, "plan", client.SetCheckpointPolicyRequest{})
	if info.Policy.Write.Who != "any" {
		t.Errorf("admin reset %+v", info.Policy)
	}
	// Invalid policies.
	for _, req := range []client.SetCheckpointPolicyRequest{
		{Write: client.CheckpointAccess{Who: "everyone"}},
		{Read: client.CheckpointAccess{Who: "keys"}},
		{Write: client.CheckpointAccess{Who: "admin", Keys: []string{"key-a"}}},
		{Write: client.CheckpointAccess{Who: "keys", Keys: []string{"a,b"}}},
		{Mutability: "sometimes"},
		{Keep: 1001},
	} {
		_, err := s.SetCheckpointPolicy(ctx, acmeAdmin, "agent-1", "", "plan", req)
		wantIs(t, err, errs.ErrInvalid, "policy "+strings.TrimSpace(strings.ReplaceAll(fmtReq(req), "\n", " ")))
	}
}

func fmtReq(r client.SetCheckpointPolicyRequest) string {
	return r.Write.Who + "/" + r.Read.Who + "/" + r.Mutability
}

func TestAppendOnlyAcceptsExtensionsAndRejectsTheRest(t *testing.T) {
	ctx := t.Context()
	s, _ := newService(t)
	setPolicy(t, s, alice, "log", client.SetCheckpointPolicyRequest{Mutability: "append-only"})
	setPolicy(t, s, acmeAdmin, "facts", client.SetCheckpointPolicyRequest{Mutability: "append-only"})

	_, err := putAs(t, s, alice, "log", `"not a list"`)
	wantIs(t, err, errs.ErrConflict, "scalar first version")
	for _, body := range []string{`[]`, `[1]`, `[1, {"a":2}]`, `[1,{"a":2},3]`} {
		if _, err := putAs(t, s, agentToken, "log", body); err != nil {
			t.Fatalf("append %s: %v", body, err)
		}
	}
	for _, bad := range []string{`[1,{"a":2}]`, `[1,{"a":3},3,4]`, `[2,{"a":2},3]`, `{"0":1}`, `[1,{"a":2},3.0]`} {
		_, err := putAs(t, s, alice, "log", bad)
		wantIs(t, err, errs.ErrConflict, "append-only put "+bad)
		if err != nil && !strings.Contains(err.Error(), "append-only") {
			t.Errorf("message %v does not say append-only", err)
		}
	}
	for _, body := range []string{`{"a":1}`, `{"a":1,"b":[1]}`, `{"b":[1],"a":1,"c":null}`} {
		if _, err := putAs(t, s, alice, "facts", body); err != nil {
			t.Fatalf("extend %s: %v", body, err)
		}
	}
	for _, bad := range []string{`{"a":1,"b":[1]}`, `{"a":2,"b":[1],"c":null}`, `{"a":1,"b":[1,2],"c":null}`, `[1]`} {
		_, err := putAs(t, s, alice, "facts", bad)
		wantIs(t, err, errs.ErrConflict, "append-only object put "+bad)
	}
	// A rollback writes an old body, which does not extend the latest.
	_, err = s.RollbackCheckpoint(ctx, alice, "agent-1", "", "log", client.RollbackCheckpointRequest{Version: 2})
	wantIs(t, err, errs.ErrConflict, "rollback of an append-only document")
	if got, _ := s.GetCheckpoint(ctx, "acme", "agent-1", "", "log", 0); got.Version != 4 {
		t.Errorf("log at version %d after refused writes, want 4", got.Version)
	}
	// Deleting a governed-mutability document takes an admin.
	wantIs(t, s.DeleteCheckpoint(ctx, alice, "agent-1", "", "log"), errs.ErrForbidden, "delete append-only as alice")
	if err := s.DeleteCheckpoint(ctx, acmeAdmin, "agent-1", "", "log"); err != nil {
		t.Errorf("admin delete: %v", err)
	}
}

func TestImmutableTakesVersionOneOnly(t *testing.T) {
	ctx := t.Context()
	s, _ := newService(t)
	setPolicy(t, s, alice, "charter", client.SetCheckpointPolicyRequest{Mutability: "immutable"})
	if c, err := putAs(t, s, alice, "charter", `{"goal":"x"}`); err != nil || c.Version != 1 {
		t.Fatalf("first put: %+v %v", c, err)
	}
	for _, p := range []api.Principal{alice, acmeAdmin, agentToken} {
		_, err := putAs(t, s, p, "charter", `{"goal":"y"}`)
		wantIs(t, err, errs.ErrConflict, "second put as "+p.KeyID)
		if err != nil && !strings.Contains(err.Error(), "immutable") {
			t.Errorf("message %v does not say immutable", err)
		}
	}
	_, err := s.RollbackCheckpoint(ctx, acmeAdmin, "agent-1", "", "charter", client.RollbackCheckpointRequest{Version: 1})
	wantIs(t, err, errs.ErrConflict, "rollback of an immutable document")
	if got, err := s.GetCheckpoint(ctx, "acme", "agent-1", "", "charter", 0); err != nil || got.Version != 1 || string(got.Body) != `{"goal":"x"}` {
		t.Errorf("charter %+v %v", got, err)
	}
}

func TestRecoverabilityNoneKeepsOnlyTheLatest(t *testing.T) {
	ctx := t.Context()
	s, _ := newService(t)
	for i := range 4 {
		mustPut(t, s, "scratch", strings.Repeat("1", i+1))
	}
	info := setPolicy(t, s, alice, "scratch", client.SetCheckpointPolicyRequest{Keep: 1})
	if info.Keep != 1 || info.Versions != 1 || info.Oldest != 4 {
		t.Errorf("after keep 1: %+v", info)
	}
	mustPut(t, s, "scratch", `5`)
	if got := versions(t, s, "scratch"); len(got) != 1 || got[0] != 5 {
		t.Errorf("versions %v, want [5]", got)
	}
	_, err := s.GetCheckpoint(ctx, "acme", "agent-1", "", "scratch", 4)
	wantIs(t, err, errs.ErrNotFound, "version 4 with no history")
	// The policy is still the default one: keep alone does not govern.
	if info.Policy.Mutability != store.Mutable || info.Policy.Write.Who != store.AccessAny {
		t.Errorf("policy %+v", info.Policy)
	}
}
