package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

func TestNetworkRoutesRoundTrip(t *testing.T) {
	var mu sync.Mutex
	var setPolicy client.NetworkPolicy
	var exposed []string
	var unexposed []int
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	off := false
	fb := &fakeBackend{
		GetNetworkFunc: func(_ context.Context, tenant, sandbox string) (client.NetworkInfo, error) {
			return client.NetworkInfo{Enabled: true, Address: "10.88.0.7", Gateway: "10.88.0.1",
				Policy: client.NetworkPolicy{Deny: []string{"10.0.0.0/8"}}, Refused: 3, RxBytes: 100, TxBytes: 200,
				Bandwidth: 1e8, MaxConns: 4096,
				Ports: []client.Port{{Port: 3000, Public: true, URL: "https://3000-" + sandbox + ".example.net", ExposedAt: at}}}, nil
		},
		SetNetworkFunc: func(_ context.Context, tenant, sandbox string, p client.NetworkPolicy) (client.NetworkInfo, error) {
			mu.Lock()
			defer mu.Unlock()
			setPolicy = p
			return client.NetworkInfo{Enabled: true, Address: "10.88.0.7", Policy: p}, nil
		},
		ListPortsFunc: func(_ context.Context, tenant, sandbox string) ([]client.Port, error) {
			return []client.Port{{Port: 22}, {Port: 8080, PathURL: "/v1/sandboxes/" + sandbox + "/ports/8080/"}}, nil
		},
		ExposePortFunc: func(_ context.Context, tenant, sandbox string, port int, req client.ExposePortRequest) (client.ExposedPort, error) {
			mu.Lock()
			defer mu.Unlock()
			exposed = append(exposed, fmt.Sprintf("%s:%d:%v", sandbox, port, req.Public))
			ep := client.ExposedPort{Port: client.Port{Port: port, Public: req.Public, ExposedAt: at}}
			if !req.Public {
				ep.Token = "secret-token"
			}
			return ep, nil
		},
		UnexposePortFunc: func(_ context.Context, tenant, sandbox string, port int) error {
			mu.Lock()
			defer mu.Unlock()
			unexposed = append(unexposed, port)
			return nil
		},
	}
	c, srv := newTestServer(t, fb, aliceKey)
	ctx := testCtx(t)

	n, err := c.GetNetwork(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if !n.Enabled || n.Address != "10.88.0.7" || n.Refused != 3 || n.MaxConns != 4096 || len(n.Ports) != 1 ||
		n.Ports[0].URL != "https://3000-web.example.net" || !n.Ports[0].ExposedAt.Equal(at) || n.Policy.Deny[0] != "10.0.0.0/8" {
		t.Errorf("get network: %+v", n)
	}
	want := client.NetworkPolicy{Internet: &off, Allow: []string{"*.pypi.org", "1.2.3.4"}, Deny: []string{"10.0.0.0/8"}}
	n, err = c.SetNetwork(ctx, "web", want)
	if err != nil {
		t.Fatal(err)
	}
	if n.Policy.InternetOn() || strings.Join(n.Policy.Allow, ",") != "*.pypi.org,1.2.3.4" {
		t.Errorf("set network returned %+v", n.Policy)
	}
	ports, err := c.ListPorts(ctx, "web")
	if err != nil || len(ports) != 2 || ports[1].PathURL != "/v1/sandboxes/web/ports/8080/" {
		t.Errorf("list ports: %+v %v", ports, err)
	}
	ep, err := c.ExposePort(ctx, "web", 8080, client.ExposePortRequest{})
	if err != nil || ep.Port.Port != 8080 || ep.Public || ep.Token != "secret-token" {
		t.Errorf("expose private: %+v %v", ep, err)
	}
	ep, err = c.ExposePort(ctx, "web", 65535, client.ExposePortRequest{Public: true})
	if err != nil || ep.Port.Port != 65535 || !ep.Public || ep.Token != "" {
		t.Errorf("expose public: %+v %v", ep, err)
	}
	if err := c.UnexposePort(ctx, "web", 1); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if setPolicy.InternetOn() || strings.Join(setPolicy.Allow, ",") != "*.pypi.org,1.2.3.4" || strings.Join(setPolicy.Deny, ",") != "10.0.0.0/8" {
		t.Errorf("set network got %+v", setPolicy)
	}
	if strings.Join(exposed, " ") != "web:8080:false web:65535:true" {
		t.Errorf("expose got %v", exposed)
	}
	if fmt.Sprint(unexposed) != "[1]" {
		t.Errorf("unexpose got %v", unexposed)
	}
	mu.Unlock()

	// The wire: no body is a private port; the token and the documented
	// names; unexpose is 204; an empty list is [], not null.
	raw := doRaw(t, srv, http.MethodPut, "/v1/sandboxes/web/ports/3000", "", http.StatusOK)
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil || m["port"] != float64(3000) || m["public"] != false || m["token"] != "secret-token" {
		t.Errorf("expose body %s", raw)
	}
	doRaw(t, srv, http.MethodDelete, "/v1/sandboxes/web/ports/3000", "", http.StatusNoContent)
	fb.ListPortsFunc = nil
	if raw := doRaw(t, srv, http.MethodGet, "/v1/sandboxes/web/ports", "", http.StatusOK); strings.TrimSpace(raw) != emptyPage {
		t.Errorf("empty list %q, want []", raw)
	}
	fb.GetNetworkFunc = nil
	raw = doRaw(t, srv, http.MethodGet, "/v1/sandboxes/web/network", "", http.StatusOK)
	if err := json.Unmarshal([]byte(raw), &m); err != nil || m["ports"] == nil || m["address"] != "10.88.0.2" {
		t.Errorf("network without ports %s: ports must be [], not null", raw)
	}
	raw = doRaw(t, srv, http.MethodPut, "/v1/sandboxes/web/network", `{"internet":false,"deny":["*.evil.example"]}`, http.StatusOK)
	if err := json.Unmarshal([]byte(raw), &m); err != nil || m["policy"].(map[string]any)["internet"] != false {
		t.Errorf("set network body %s", raw)
	}
}

func TestPortOutsideOneTo65535Is400BeforeTheBackend(t *testing.T) {
	fb := &fakeBackend{}
	c, srv := newTestServer(t, fb, aliceKey)
	for _, port := range []string{"0", "65536", "-1", "99999", "http", "80a", "1e3"} {
		for _, method := range []string{http.MethodPut, http.MethodDelete} {
			raw := doRaw(t, srv, method, "/v1/sandboxes/web/ports/"+port, "", http.StatusBadRequest)
			if !strings.Contains(raw, "1 to 65535") {
				t.Errorf("%s port %s: %s does not say what a port is", method, port, raw)
			}
		}
	}
	if _, err := c.ExposePort(testCtx(t), "web", 70000, client.ExposePortRequest{}); client.StatusCode(err) != http.StatusBadRequest {
		t.Errorf("client expose 70000: %v, want 400", err)
	}
	if err := c.UnexposePort(testCtx(t), "web", 0); client.StatusCode(err) != http.StatusBadRequest {
		t.Errorf("client unexpose 0: %v, want 400", err)
	}
	if calls := fb.Calls(); len(calls) != 0 {
		t.Fatalf("backend called with refused ports: %v", calls)
	}
}

// TestSandboxTokenMaySeeButNeverChangeItsNetwork: the agent inside a
// sandbox reads its network and ports, but may not loosen its egress
// policy or expose (or unexpose) its ports: those routes answer 403, as
// every route closed to the token, before any backend call.
func TestSandboxTokenMaySeeButNeverChangeItsNetwork(t *testing.T) {
	fb := &fakeBackend{AuthenticateFunc: func(context.Context, string) (Principal, error) {
		return Principal{TenantID: "t-alice", KeyID: "sandbox:sb-1", Sandbox: "sb-1"}, nil
	}}
	c, srv := newTestServer(t, fb, aliceKey)
	ctx := testCtx(t)
	if _, err := c.GetNetwork(ctx, "sb-1"); err != nil {
		t.Errorf("own network: %v", err)
	}
	if _, err := c.ListPorts(ctx, "sb-1"); err != nil {
		t.Errorf("own ports: %v", err)
	}
	if _, err := c.SetNetwork(ctx, "sb-1", client.NetworkPolicy{}); !client.IsForbidden(err) {
		t.Errorf("set own network: %v, want 403", err)
	}
	if _, err := c.ExposePort(ctx, "sb-1", 8080, client.ExposePortRequest{Public: true}); !client.IsForbidden(err) {
		t.Errorf("expose own port: %v, want 403", err)
	}
	if err := c.UnexposePort(ctx, "sb-1", 8080); !client.IsForbidden(err) {
		t.Errorf("unexpose own port: %v, want 403", err)
	}
	doRaw(t, srv, http.MethodPut, "/v1/sandboxes/sb-1/network", `{"internet":true}`, http.StatusForbidden)
	// Another sandbox's network is refused as a made-up one.
	other := doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb-2/network", "", http.StatusForbidden)
	madeUp := doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb-nope/network", "", http.StatusForbidden)
	if other != madeUp || strings.Contains(other, "sb-2") {
		t.Errorf("another sandbox answers %s, a made-up one %s", other, madeUp)
	}
	doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb-2/ports", "", http.StatusForbidden)
	var methods []string
	for _, call := range fb.Calls() {
		methods = append(methods, call.Method+" "+call.ID)
	}
	if !slices.Equal(methods, []string{"GetNetwork sb-1", "ListPorts sb-1"}) {
		t.Errorf("backend calls %v, want only the two reads of sb-1", methods)
	}
}

func TestNetworkRoutesOfAnUnknownSandboxAre404Problems(t *testing.T) {
	fb := &fakeBackend{Err: fmt.Errorf("sandbox nope: %w", errs.ErrNotFound)}
	c, srv := newTestServer(t, fb, aliceKey)
	var n int
	for _, r := range allRoutes() {
		if !strings.HasSuffix(r.name, "-network") && !strings.HasSuffix(r.name, "-port") && r.name != "list-ports" {
			continue
		}
		n++
		err := r.call(testCtx(t), c)
		if !client.IsNotFound(err) || !strings.Contains(err.Error(), "sandbox nope") {
			t.Errorf("%s: %v, want a 404 naming the sandbox", r.name, err)
		}
	}
	if n != 5 {
		t.Fatalf("%d network routes in allRoutes, want 5", n)
	}
	for _, path := range []string{"/network", "/ports"} {
		req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, srv.URL+"/v1/sandboxes/nope"+path, nil)
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Status int    `json:"status"`
			Detail string `json:"detail"`
		}
		err = json.NewDecoder(resp.Body).Decode(&p)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") ||
			err != nil || p.Status != http.StatusNotFound || !strings.Contains(p.Detail, "sandbox nope") {
			t.Errorf("GET %s: %d %s %+v %v", path, resp.StatusCode, resp.Header.Get("Content-Type"), p, err)
		}
	}
}

func TestNetworkChangesAreAudited(t *testing.T) {
	af := &auditFake{fakeBackend: &fakeBackend{}}
	_, srv := newTestServer(t, af, aliceKey)
	for _, st := range []struct {
		method, path, body string
		status             int
	}{
		{http.MethodGet, "/v1/sandboxes/sb-1/network", "", 200},
		{http.MethodPut, "/v1/sandboxes/sb-1/network", `{"allow":["*.example.com"]}`, 200},
		{http.MethodPut, "/v1/sandboxes/sb-1/ports/8080", `{"public":true}`, 200},
		{http.MethodDelete, "/v1/sandboxes/sb-1/ports/8080", "", 204},
		{http.MethodPut, "/v1/sandboxes/sb-1/ports/0", "", 400},
	} {
		if got := send(t, srv, aliceKey, st.method, st.path, st.body); got != st.status {
			t.Fatalf("%s %s: %d, want %d", st.method, st.path, got, st.status)
		}
	}
	var got []string
	for _, ev := range af.Events() {
		got = append(got, fmt.Sprintf("%s %s %d", ev.Action, ev.Target, ev.Status))
	}
	want := []string{
		"PUT /v1/sandboxes/{id}/network sb-1 200",
		"PUT /v1/sandboxes/{id}/ports/{port} sb-1 200",
		"DELETE /v1/sandboxes/{id}/ports/{port} sb-1 204",
		"PUT /v1/sandboxes/{id}/ports/{port} sb-1 400",
	}
	if !slices.Equal(got, want) {
		t.Errorf("audited %q, want %q", got, want)
	}
}

// TestNetworkRoutesAreDescribedInOpenAPI: every network operation has a
// summary and a description, and every property of its bodies and
// parameters says what it is.
func TestNetworkRoutesAreDescribedInOpenAPI(t *testing.T) {
	c, _ := newTestServer(t, &fakeBackend{}, "")
	raw, err := c.OpenAPI(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	type schema struct {
		Description string             `json:"description"`
		Properties  map[string]*schema `json:"properties"`
		Ref         string             `json:"$ref"`
		Items       *schema            `json:"items"`
	}
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
			Summary     string `json:"summary"`
			Description string `json:"description"`
			Parameters  []struct {
				Name        string `json:"name"`
				Description string `json:"description"`
			} `json:"parameters"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]*schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	ops := 0
	for _, path := range []string{"/v1/sandboxes/{id}/network", "/v1/sandboxes/{id}/ports", "/v1/sandboxes/{id}/ports/{port}"} {
		for method, op := range doc.Paths[path] {
			ops++
			if op.OperationID == "" || op.Summary == "" || op.Description == "" {
				t.Errorf("%s %s: id %q, summary %q, description %q", method, path, op.OperationID, op.Summary, op.Description)
			}
			for _, p := range op.Parameters {
				if p.Description == "" {
					t.Errorf("%s %s: parameter %s has no description", method, path, p.Name)
				}
			}
		}
	}
	if ops != 5 {
		t.Errorf("%d network operations in the OpenAPI document, want 5", ops)
	}
	for _, name := range []string{"NetworkInfo", "NetworkPolicy", "Port", "ExposedPort", "ExposePortRequest"} {
		s := doc.Components.Schemas[name]
		if s == nil {
			t.Errorf("schema %s missing", name)
			continue
		}
		for prop, ps := range s.Properties {
			if ps.Description == "" && ps.Ref == "" && (ps.Items == nil || ps.Items.Ref == "") {
				t.Errorf("%s.%s has no description", name, prop)
			}
			if ps.Description == "" && (ps.Ref != "" || (ps.Items != nil && ps.Items.Ref != "")) {
				t.Errorf("%s.%s (a reference) has no description", name, prop)
			}
		}
	}
}
