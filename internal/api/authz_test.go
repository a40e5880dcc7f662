package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// The tenants of the authorization tests: alice's sandboxes sb-in (named
// web, labelled team=research) and sb-out (named ops-box, team=ops); bob's
// sb-bob. Any other id is absent.
var authzWorld = map[string]client.Sandbox{
	"sb-in":  {ID: "sb-in", Name: "web", Tenant: "t-alice", State: "running", Labels: map[string]string{"team": "research"}},
	"sb-out": {ID: "sb-out", Name: "ops-box", Tenant: "t-alice", State: "running", Labels: map[string]string{"team": "ops"}},
	"sb-bob": {ID: "sb-bob", Name: "bobs", Tenant: "t-bob", State: "running"},
}

// authzKeys are the callers of the route walk.
var authzKeys = map[string]Principal{
	"admin":         {TenantID: "t-alice", KeyID: "k-admin", Admin: true, Role: client.RoleAdmin},
	"tenant-admin":  {TenantID: "t-alice", KeyID: "k-tadmin", Role: client.RoleTenantAdmin},
	"tenant-user":   {TenantID: "t-alice", KeyID: "k-user", Role: client.RoleTenantUser},
	"read-only":     {TenantID: "t-alice", KeyID: "k-ro", Role: client.RoleReadOnly},
	"scoped-name":   {TenantID: "t-alice", KeyID: "k-name", Role: client.RoleTenantUser, Sandboxes: []string{"web"}},
	"scoped-label":  {TenantID: "t-alice", KeyID: "k-label", Role: client.RoleTenantAdmin, Labels: map[string]string{"team": "research"}},
	"foreign":       {TenantID: "t-bob", KeyID: "k-bob", Role: client.RoleTenantAdmin},
	"sandbox-token": {TenantID: "t-alice", Sandbox: "sb-in"},
}

// authzWorldBackend configures fb to authenticate authzKeys (the secret
// is the key's name) and to know the sandboxes of authzWorld by id or
// name, within their tenant only.
func authzWorldBackend(fb *fakeBackend) *fakeBackend {
	fb.AuthenticateFunc = func(_ context.Context, secret string) (Principal, error) {
		if p, ok := authzKeys[secret]; ok {
			return p, nil
		}
		return Principal{}, errs.ErrUnauthenticated
	}
	fb.GetSandboxFunc = func(_ context.Context, tenant, id string) (client.Sandbox, error) {
		for _, sb := range authzWorld {
			if sb.Tenant == tenant && (sb.ID == id || sb.Name == id) {
				return sb, nil
			}
		}
		return client.Sandbox{}, fmt.Errorf("sandbox %s: %w", id, errs.ErrNotFound)
	}
	fb.ListSandboxesFunc = func(_ context.Context, tenant string, _ bool) ([]client.Sandbox, error) {
		var out []client.Sandbox
		for _, id := range []string{"sb-in", "sb-out", "sb-bob"} {
			if authzWorld[id].Tenant == tenant {
				out = append(out, authzWorld[id])
			}
		}
		return out, nil
	}
	return fb
}

// tenantFake serves tenants and key management on top of fakeBackend.
type tenantFake struct{ *fakeBackend }

var _ TenantBackend = tenantFake{}

func (f tenantFake) ListAPIKeys(_ context.Context, p Principal) ([]client.APIKey, error) {
	f.record("ListAPIKeys", p.TenantID, "")
	return nil, f.Err
}

func (f tenantFake) RotateAPIKey(_ context.Context, p Principal, id string, _ client.RotateAPIKeyRequest) (client.APIKey, error) {
	f.record("RotateAPIKey", p.TenantID, id)
	return client.APIKey{ID: "key-new", Tenant: p.TenantID}, f.Err
}

func (f tenantFake) RevokeAPIKey(_ context.Context, p Principal, id string) error {
	f.record("RevokeAPIKey", p.TenantID, id)
	return f.Err
}

func (f tenantFake) CreateTenant(_ context.Context, req client.CreateTenantRequest) (client.Tenant, error) {
	f.record("CreateTenant", "", req.ID)
	return client.Tenant{ID: req.ID}, f.Err
}

func (f tenantFake) ListTenants(context.Context) ([]client.Tenant, error) {
	f.record("ListTenants", "", "")
	return nil, f.Err
}

func (f tenantFake) GetTenant(_ context.Context, id string) (client.Tenant, error) {
	f.record("GetTenant", "", id)
	return client.Tenant{ID: id}, f.Err
}

func (f tenantFake) SuspendTenant(_ context.Context, id string) (client.Tenant, error) {
	f.record("SuspendTenant", "", id)
	return client.Tenant{ID: id, State: "suspended"}, f.Err
}

func (f tenantFake) UnsuspendTenant(_ context.Context, id string) (client.Tenant, error) {
	f.record("UnsuspendTenant", "", id)
	return client.Tenant{ID: id}, f.Err
}

func (f tenantFake) DeleteTenant(_ context.Context, id string) (client.TenantDeletion, error) {
	f.record("DeleteTenant", "", id)
	return client.TenantDeletion{Tenant: id}, f.Err
}

// optionsFake serves the routes NewHandler registers from Options (usage,
// events, webhooks) and the du routes, recording each call.
type optionsFake struct{ *fakeBackend }

func (f optionsFake) ListNodes(context.Context) ([]client.Node, error) {
	f.record("ListNodes", "", "")
	return nil, f.Err
}

func (f optionsFake) GetNode(_ context.Context, name string) (client.Node, error) {
	f.record("GetNode", "", name)
	return client.Node{Name: name}, f.Err
}

func (f optionsFake) SetNodeState(_ context.Context, name, state string) (client.Node, error) {
	f.record("SetNodeState", "", name)
	return client.Node{Name: name, State: state}, f.Err
}

func (f optionsFake) Report(_ context.Context, tenant string, _ client.UsageQuery) (client.UsageReport, error) {
	f.record("Report", tenant, "")
	return client.UsageReport{}, f.Err
}

func (f optionsFake) ListEvents(_ context.Context, tenant string, _ client.EventQuery) (client.DaemonEventPage, error) {
	f.record("ListEvents", tenant, "")
	return client.DaemonEventPage{}, f.Err
}

func (f optionsFake) DiskUsage(_ context.Context, tenant, id, _ string, _ int) (client.DiskUsage, error) {
	f.record("DiskUsage", tenant, id)
	return client.DiskUsage{}, f.Err
}

func (f optionsFake) VolumeDiskUsage(_ context.Context, tenant, id, _ string, _ int) (client.DiskUsage, error) {
	f.record("VolumeDiskUsage", tenant, id)
	return client.DiskUsage{}, f.Err
}

func (f optionsFake) EventsChanged() <-chan struct{} { return make(chan struct{}) }

func (f optionsFake) CreateWebhook(_ context.Context, tenant string, _ client.CreateWebhookRequest) (client.Webhook, error) {
	f.record("CreateWebhook", tenant, "")
	return client.Webhook{}, f.Err
}

func (f optionsFake) ListWebhooks(_ context.Context, tenant string) ([]client.Webhook, error) {
	f.record("ListWebhooks", tenant, "")
	return nil, f.Err
}

func (f optionsFake) GetWebhook(_ context.Context, tenant, id string) (client.Webhook, error) {
	f.record("GetWebhook", tenant, id)
	return client.Webhook{}, f.Err
}

func (f optionsFake) DeleteWebhook(_ context.Context, tenant, id string) error {
	f.record("DeleteWebhook", tenant, id)
	return f.Err
}

func (f optionsFake) ListWebhookDeliveries(_ context.Context, tenant, id string, _ int) ([]client.WebhookDelivery, error) {
	f.record("ListWebhookDeliveries", tenant, id)
	return nil, f.Err
}

func (f optionsFake) RedeliverWebhook(_ context.Context, tenant string, _ int64) (client.WebhookDelivery, error) {
	f.record("RedeliverWebhook", tenant, "")
	return client.WebhookDelivery{}, f.Err
}

// routeServer is one handler and the routes its OpenAPI document lists.
type routeServer struct {
	fb     *fakeBackend
	srv    *httptest.Server
	routes []string // "METHOD /path/{template}"
}

// authzServers starts a handler over each fake (together they register
// every route) and reads each one's route table from its OpenAPI
// document. A route served by several is kept with the first.
func authzServers(t *testing.T) ([]*routeServer, []string) {
	t.Helper()
	var servers []*routeServer
	addWith := func(b Backend, fb *fakeBackend, opts Options) {
		authzWorldBackend(fb)
		opts.Logger, opts.Version = slog.New(slog.DiscardHandler), "test"
		srv := httptest.NewServer(NewHandler(b, opts))
		t.Cleanup(srv.Close)
		c, err := client.New(srv.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		raw, err := c.OpenAPI(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Paths map[string]map[string]json.RawMessage `json:"paths"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		rs := &routeServer{fb: fb, srv: srv}
		for path, ops := range doc.Paths {
			for method := range ops {
				rs.routes = append(rs.routes, strings.ToUpper(method)+" "+path)
			}
		}
		servers = append(servers, rs)
	}
	add := func(b Backend, fb *fakeBackend) { addWith(b, fb, Options{}) }
	// The routes registered from Options (usage, events, webhooks), and
	// du, record their calls in a fake of their own.
	of0 := optionsFake{&fakeBackend{}}
	addWith(of0, of0.fakeBackend, Options{Usage: of0, Events: of0, Nodes: of0})
	tf := tenantFake{&fakeBackend{}}
	add(tf, tf.fakeBackend)
	sf := newSessionFake()
	add(sf, sf.fakeBackend)
	tk := newTaskFake()
	add(tk, tk.fakeBackend)
	bf := newBackupFake()
	add(bf, bf.fakeBackend)
	of := orientFake{&fakeBackend{}}
	add(of, of.fakeBackend)
	af := &auditFake{fakeBackend: &fakeBackend{}}
	add(af, af.fakeBackend)
	sec := newSecretFake()
	add(sec, sec.fakeBackend)
	qf := newQuotaFake()
	add(qf, qf.fakeBackend)
	wf := warmFake{&fakeBackend{}}
	add(wf, wf.fakeBackend)
	ret := newRetentionFake()
	add(ret, ret.fakeBackend)
	sch := newScheduleFake()
	add(sch, sch.fakeBackend)
	bud := newBudgetFake()
	add(bud, bud.fakeBackend)
	upd := &updateFake{fakeBackend: &fakeBackend{}}
	add(upd, upd.fakeBackend)

	seen := map[string]bool{}
	var all []string
	for _, rs := range servers {
		var mine []string
		for _, r := range rs.routes {
			if !seen[r] {
				seen[r] = true
				mine = append(mine, r)
				all = append(all, r)
			}
		}
		rs.routes = mine
	}
	sort.Strings(all)
	return servers, all
}

var pathParam = regexp.MustCompile(`\{[a-z_]+\}`)

// fillPath substitutes the path template's parameters: {id} with id, the
// others with plausible values.
func fillPath(path, id string) string {
	return pathParam.ReplaceAllStringFunc(path, func(p string) string {
		switch p {
		case "{id}":
			return id
		case "{port}":
			return "8080"
		case "{key}":
			return "key-x"
		case "{tenant}":
			return "acme"
		}
		return strings.Trim(p, "{}") + "-1"
	})
}

// answer is what a request got.
type answer struct {
	status int
	detail string
}

// call sends one request with the key named key ("" for none) and an
// empty JSON object as the body of a write (a create names sandbox web).
func call(t *testing.T, base, method, path, key string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var body io.Reader
	switch {
	case method == http.MethodPost && path == "/v1/sandboxes":
		body = strings.NewReader(`{"name":"web"}`) // a name the name-scoped key may create
	case method != http.MethodGet && method != http.MethodHead && method != http.MethodDelete:
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return answer{status: 200, detail: "stream"} // a stream began: the request was let through
		}
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var p struct{ Detail string }
	_ = json.Unmarshal(raw, &p)
	return answer{status: resp.StatusCode, detail: p.Detail}
}

// roleAllows is what each caller may call, said once in the test's own
// words (authz.go says it for the daemon): the route walk checks the two
// agree on every route of the OpenAPI document.
func roleAllows(who, route string, agentRoute bool) bool {
	method, path, _ := strings.Cut(route, " ")
	under := func(prefix string) bool { return path == prefix || strings.HasPrefix(path, prefix+"/") }
	tenantAdminOnly := under("/v1/keys") || under("/v1/audit") || (under("/v1/budgets") && method != http.MethodGet)
	adminOnly := under("/v1/tenants") || under("/v1/nodes") || route == "POST /v1/repo/init" || route == "POST /v1/templates" ||
		route == "GET /v1/warm-pools"
	switch who {
	case "admin":
		return true
	case "tenant-admin", "foreign":
		return !adminOnly
	case "tenant-user":
		return !adminOnly && !tenantAdminOnly
	case "read-only":
		return !adminOnly && !tenantAdminOnly && method == http.MethodGet && path != "/v1/sandboxes/{id}/pty"
	case "scoped-name", "scoped-label":
		switch route {
		case "GET /v1/info", "GET /v1/sandboxes", "POST /v1/sandboxes", "GET /v1/quota":
			return true
		case "POST /v1/sandboxes/{id}/fork", "POST /v1/sandboxes/{id}/volumes",
			"DELETE /v1/sandboxes/{id}/volumes", "POST /v1/sandboxes/{id}/restore-path":
			return false
		}
		return under("/v1/sandboxes/{id}")
	case "sandbox-token":
		return agentRoute
	}
	return false
}

// TestEveryRouteAnswersAsTheRoleAllows walks the whole route table, read
// from the OpenAPI document, for every role, a key scoped by name and one
// by label, another tenant's key, a sandbox token and no key: an allowed
// call reaches the backend (in the caller's own tenant), a refused one is
// 403 with a problem that says what the route needs and changes nothing
// (no backend call but the scope's lookup), and no key is 401.
func TestEveryRouteAnswersAsTheRoleAllows(t *testing.T) {
	servers, all := authzServers(t)
	if len(all) < 100 {
		t.Fatalf("only %d routes in the OpenAPI documents", len(all))
	}
	for _, want := range []string{"GET /v1/usage", "GET /v1/events", "GET /v1/sandboxes/{id}/du", "GET /v1/volumes/{id}/du", "POST /v1/webhooks",
		"PUT /v1/secrets/{name}", "DELETE /v1/secrets/{name}", "PUT /v1/sandboxes/{id}/network", "PUT /v1/sandboxes/{id}/ports/{port}",
		"GET /v1/retention", "GET /v1/tenants/{tenant}/retention", "PUT /v1/tenants/{tenant}/retention",
		"POST /v1/sandboxes/{id}/schedules", "PATCH /v1/sandboxes/{id}/schedules/{sid}", "GET /v1/schedules",
		"POST /v1/budgets", "GET /v1/budgets", "GET /v1/budgets/{id}", "PATCH /v1/budgets/{id}", "DELETE /v1/budgets/{id}",
		"PATCH /v1/sandboxes/{id}",
		"GET /v1/quota", "GET /v1/tenants/{tenant}/quotas", "PUT /v1/tenants/{tenant}/quotas",
		"GET /v1/sandboxes/{id}/snapshots",
		"GET /v1/warm-pools", "PUT /v1/tenants/{tenant}/warm-pools/{template}", "DELETE /v1/tenants/{tenant}/warm-pools/{template}",
		"GET /v1/nodes", "GET /v1/nodes/{name}", "POST /v1/nodes/{name}/cordon", "POST /v1/nodes/{name}/drain", "POST /v1/nodes/{name}/uncordon"} {
		if !slices.Contains(all, want) {
			t.Errorf("the walk misses %s: give the route's backend a fake in authzServers", want)
		}
	}
	agent := map[string]bool{}
	for _, b := range []Backend{&fakeBackend{}, newSessionFake(), newTaskFake(), newBackupFake(), orientFake{&fakeBackend{}}} {
		for r := range agentRoutes(t, b) {
			agent[r] = true
		}
	}
	callers := []string{"", "admin", "tenant-admin", "tenant-user", "read-only", "scoped-name", "scoped-label", "foreign", "sandbox-token"}
	for _, rs := range servers {
		for _, route := range rs.routes {
			method, path, _ := strings.Cut(route, " ")
			if !strings.HasPrefix(path, "/v1/") {
				continue
			}
			for _, who := range callers {
				rs.fb.mu.Lock()
				rs.fb.calls = nil
				rs.fb.mu.Unlock()
				got := call(t, rs.srv.URL, method, fillPath(path, "sb-in"), who)
				calls := rs.fb.Calls()
				switch {
				case who == "":
					if got.status != http.StatusUnauthorized || len(calls) != 0 {
						t.Errorf("%s without a key: %d (%d backend calls), want 401 and none", route, got.status, len(calls))
					}
				case roleAllows(who, route, agent[route]):
					if got.status == http.StatusUnauthorized || got.status == http.StatusForbidden {
						t.Errorf("%s as %s: %d %q, want it allowed", route, who, got.status, got.detail)
					}
					for _, c := range calls {
						if want := authzKeys[who].TenantID; c.Tenant != "" && c.Tenant != want {
							t.Errorf("%s as %s: backend %s called for tenant %s, want %s", route, who, c.Method, c.Tenant, want)
						}
					}
				default:
					if got.status != http.StatusForbidden || got.detail == "" {
						t.Errorf("%s as %s: %d %q, want 403 with a reason", route, who, got.status, got.detail)
					}
					for _, c := range calls {
						if c.Method != "GetSandbox" {
							t.Errorf("%s as %s was refused but called the backend's %s", route, who, c.Method)
						}
					}
				}
			}
		}
	}
}

// TestScopedKeysSeeOtherSandboxesExactlyAsAbsentOnes: on every route under
// /v1/sandboxes/{id} a scoped key may call, a sandbox of its tenant outside
// its scope, another tenant's and a made-up one get the same 404 and the
// same problem (but for the id itself), and the backend does nothing.
func TestScopedKeysSeeOtherSandboxesExactlyAsAbsentOnes(t *testing.T) {
	servers, _ := authzServers(t)
	checked := 0
	for _, rs := range servers {
		for _, route := range rs.routes {
			method, path, _ := strings.Cut(route, " ")
			if !strings.HasPrefix(path, "/v1/sandboxes/{id}") {
				continue
			}
			for _, who := range []string{"scoped-name", "scoped-label"} {
				if !roleAllows(who, route, false) {
					continue
				}
				var first answer
				for i, id := range []string{"sb-none", "sb-out", "ops-box", "sb-bob"} {
					rs.fb.mu.Lock()
					rs.fb.calls = nil
					rs.fb.mu.Unlock()
					got := call(t, rs.srv.URL, method, fillPath(path, id), who)
					got.detail = strings.ReplaceAll(got.detail, id, "<id>")
					if i == 0 {
						first = got
						if got.status != http.StatusNotFound {
							t.Errorf("%s as %s on an absent sandbox: %d, want 404", route, who, got.status)
						}
					} else if got != first {
						t.Errorf("%s as %s: %s answers %+v, an absent id %+v", route, who, id, got, first)
					}
					for _, c := range rs.fb.Calls() {
						if c.Method != "GetSandbox" {
							t.Errorf("%s as %s on %s called the backend's %s", route, who, id, c.Method)
						}
					}
				}
				// Its own sandbox, by id and by name, is let through.
				for _, id := range []string{"sb-in", "web"} {
					if got := call(t, rs.srv.URL, method, fillPath(path, id), who); got.status == http.StatusNotFound && strings.Contains(got.detail, "this key reaches") {
						t.Errorf("%s as %s on its own sandbox %s: %+v", route, who, id, got)
					}
				}
				checked++
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d scoped routes checked", checked)
	}
}

// TestForeignTenantsSandboxAnswersAsAbsent: another tenant's key asking
// for alice's sandbox gets exactly the answer of a made-up id.
func TestForeignTenantsSandboxAnswersAsAbsent(t *testing.T) {
	servers, _ := authzServers(t)
	base := servers[0].srv.URL
	foreign := call(t, base, http.MethodGet, "/v1/sandboxes/sb-in", "foreign")
	absent := call(t, base, http.MethodGet, "/v1/sandboxes/sb-none", "foreign")
	foreign.detail = strings.ReplaceAll(foreign.detail, "sb-in", "<id>")
	absent.detail = strings.ReplaceAll(absent.detail, "sb-none", "<id>")
	if foreign != absent || foreign.status != http.StatusNotFound {
		t.Fatalf("foreign %+v, absent %+v", foreign, absent)
	}
}

// TestScopedKeysListAndCreateOnlyWithinTheirScope: the list shows only
// what the key reaches; a name-scoped key creates only its names; a
// label-scoped key's creates get its labels and cannot override them.
func TestScopedKeysListAndCreateOnlyWithinTheirScope(t *testing.T) {
	fb := authzWorldBackend(&fakeBackend{})
	var created []client.CreateSandboxRequest
	fb.CreateSandboxFunc = func(_ context.Context, tenant string, req client.CreateSandboxRequest) (client.Sandbox, error) {
		created = append(created, req)
		return client.Sandbox{ID: "sb-new", Name: req.Name, Tenant: tenant, Labels: req.Labels}, nil
	}
	ctx := testCtx(t)
	for _, who := range []string{"scoped-name", "scoped-label"} {
		c, _ := newTestServer(t, fb, who)
		list, err := c.ListSandboxes(ctx, false)
		if err != nil || len(list) != 1 || list[0].ID != "sb-in" {
			t.Fatalf("%s lists %+v %v, want sb-in alone", who, list, err)
		}
	}
	name, _ := newTestServer(t, fb, "scoped-name")
	if _, err := name.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "other"}); !client.IsForbidden(err) {
		t.Fatalf("name-scoped create outside its names: %v, want 403", err)
	}
	if _, err := name.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "web"}); err != nil {
		t.Fatalf("name-scoped create of its own name: %v", err)
	}
	label, _ := newTestServer(t, fb, "scoped-label")
	if _, err := label.CreateSandbox(ctx, client.CreateSandboxRequest{Labels: map[string]string{"team": "ops"}}); !client.IsForbidden(err) {
		t.Fatalf("label-scoped create with another team: %v, want 403", err)
	}
	if _, err := label.CreateSandbox(ctx, client.CreateSandboxRequest{Labels: map[string]string{"x": "y"}}); err != nil {
		t.Fatal(err)
	}
	if len(created) != 2 || created[1].Labels["team"] != "research" || created[1].Labels["x"] != "y" {
		t.Fatalf("creates reaching the backend: %+v", created)
	}
	unscoped, _ := newTestServer(t, fb, "tenant-user")
	if list, err := unscoped.ListSandboxes(ctx, false); err != nil || len(list) != 2 {
		t.Fatalf("an unscoped key lists %+v %v", list, err)
	}
}

// TestAdminActsInAnotherTenantOthersMayNot: the X-Stead-Tenant header moves
// an admin key into that tenant; any other key naming another tenant is
// refused before the backend sees anything.
func TestAdminActsInAnotherTenantOthersMayNot(t *testing.T) {
	fb := authzWorldBackend(&fakeBackend{})
	ctx := testCtx(t)
	admin, _ := newTestServer(t, tenantFake{fb}, "admin")
	if sb, err := admin.WithTenant("t-bob").GetSandbox(ctx, "sb-bob"); err != nil || sb.ID != "sb-bob" {
		t.Fatalf("admin in t-bob: %+v %v", sb, err)
	}
	for _, who := range []string{"tenant-admin", "tenant-user", "scoped-label"} {
		fb.mu.Lock()
		fb.calls = nil
		fb.mu.Unlock()
		c, _ := newTestServer(t, tenantFake{fb}, who)
		if _, err := c.WithTenant("t-bob").GetSandbox(ctx, "sb-bob"); !client.IsForbidden(err) {
			t.Fatalf("%s in t-bob: %v, want 403", who, err)
		}
		if calls := fb.Calls(); slices.ContainsFunc(calls, func(c fakeCall) bool { return c.Method != "GetTenant" }) {
			t.Fatalf("%s in t-bob reached the backend: %v", who, calls)
		}
	}
}
