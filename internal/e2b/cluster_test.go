package e2b

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/sandbox"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// nodeBackend is one cluster node's E2B backend: what it serves names the
// node (the store is shared, so every node knows every sandbox; only the
// owner may act on one, which is what forwarding must ensure).
type nodeBackend struct {
	Backend // nil: the methods the test does not call
	node    string
	creates *atomic.Int64
}

func (b nodeBackend) CreateSandbox(_ context.Context, tenant string, _ client.CreateSandboxRequest) (client.Sandbox, error) {
	b.creates.Add(1)
	return client.Sandbox{ID: "sb-new", Tenant: tenant, State: "running"}, nil
}

func (b nodeBackend) StatFile(_ context.Context, _, _, path string) (client.FileInfo, error) {
	return client.FileInfo{Path: path, Type: "directory"}, nil
}

const clusterKey = "key-alice"

func (b nodeBackend) Authenticate(_ context.Context, secret string) (api.Principal, error) {
	if secret != clusterKey {
		return api.Principal{}, errs.ErrUnauthenticated
	}
	return api.Principal{TenantID: store.DefaultTenant, KeyID: "k-alice"}, nil
}

func (b nodeBackend) GetSandbox(_ context.Context, tenant, id string) (client.Sandbox, error) {
	return client.Sandbox{ID: id, Tenant: tenant, State: "running", Labels: map[string]string{"served-by": b.node}}, nil
}

func (b nodeBackend) ReadFile(_ context.Context, _, _, path string) (io.ReadCloser, client.FileInfo, error) {
	body := "read " + path + " on " + b.node
	return io.NopCloser(strings.NewReader(body)), client.FileInfo{Path: path, Type: "file", Size: int64(len(body))}, nil
}

// TestClusterSendsE2BCallsToTheSandboxsOwner runs two nodes' E2B handlers
// on one real store, each behind its cluster Router as the daemon mounts
// them: through the node that does not own the sandbox, the control plane
// (GET /sandboxes/{id}) and the data plane (a file read, by the
// E2b-Sandbox-Id header and by Host 49983-<id>.<domain>) are served by the
// owner; what names no sandbox is served where it lands, but creates are
// placed (through a cordoned node: on the other);
// a forged node call is refused.
func TestClusterSendsE2BCallsToTheSandboxsOwner(t *testing.T) {
	const domain = "e2b.test"
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	secret := []byte(strings.Repeat("s", cluster.MinSecretBytes))
	key := []byte("0123456789abcdef0123456789abcdef") // shared: derived from the cluster secret in a daemon
	creates := map[string]*atomic.Int64{}
	start := func(name string) *httptest.Server {
		creates[name] = new(atomic.Int64)
		r, err := cluster.NewRouter(cluster.RouterOptions{Store: st, Node: name, Secret: secret, Grace: 30 * time.Second,
			InstanceTypes: sandbox.InstanceTypes(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		h := New(Options{Backend: nodeBackend{node: name, creates: creates[name]}, Key: key, Domain: domain, Logger: slog.New(slog.DiscardHandler)})
		srv := httptest.NewServer(r.PlaceCreates(IsCreate)(r.ForwardSandbox(h.SandboxOf)(h.Mount(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "stead API of "+name, http.StatusTeapot)
		})))))
		t.Cleanup(srv.Close)
		now := time.Now()
		if _, err := st.HeartbeatNode(t.Context(), store.Node{Name: name, Address: srv.Listener.Addr().String(), CPUs: 8,
			MemoryBytes: 32 << 30, PoolFreeBytes: 500 << 30, StartedAt: now, HeartbeatAt: now}); err != nil {
			t.Fatal(err)
		}
		return srv
	}
	a := start("node-a")
	start("node-b")
	if _, err := st.CreateSandbox(t.Context(), store.Sandbox{ID: "sb-1", TenantID: store.DefaultTenant, Name: "one", TemplateID: "host",
		State: store.StateRunning, Spec: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireOwnership(t.Context(), "sb-1", "node-b", time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	call := func(method, path string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, a.URL+path, strings.NewReader("{}"))
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	status, body := call(http.MethodGet, "/sandboxes/sb-1", map[string]string{"X-API-Key": EncodeKey(clusterKey)})
	var d sandboxDetail
	if status != http.StatusOK || json.Unmarshal([]byte(body), &d) != nil || d.Metadata["served-by"] != "node-b" || d.EnvdAccessToken == "" {
		t.Fatalf("GET /sandboxes/sb-1 via node-a: %d %s; want node-b's answer", status, body)
	}
	for _, hdr := range []map[string]string{
		{"E2b-Sandbox-Id": "sb-1", "X-Access-Token": d.EnvdAccessToken},
		{"Host": EnvdPort + "-sb-1." + domain, "X-Access-Token": d.EnvdAccessToken},
	} {
		if status, body := call(http.MethodGet, "/files?path=/home/user/x", hdr); status != http.StatusOK || body != "read /home/agent/x on node-b" {
			t.Fatalf("envd GET /files via node-a with %v: %d %q; want node-b's answer", hdr, status, body)
		}
	}
	// What names no sandbox is served here; the stead API is not E2B's.
	if status, body := call(http.MethodGet, "/v1/sandboxes/sb-1", nil); status != http.StatusTeapot || !strings.Contains(body, "node-a") {
		t.Fatalf("a stead API call via node-a: %d %q", status, body)
	}
	// A create through node-a, cordoned, is placed on node-b.
	if _, err := st.SetNodeState(t.Context(), "node-a", store.NodeCordoned); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/sandboxes", "/v2/sandboxes"} {
		if status, body := call(http.MethodPost, path, map[string]string{"X-API-Key": EncodeKey(clusterKey), "Content-Type": "application/json"}); status != http.StatusCreated {
			t.Fatalf("POST %s via node-a: %d %s", path, status, body)
		}
	}
	if a, b := creates["node-a"].Load(), creates["node-b"].Load(); a != 0 || b != 2 {
		t.Fatalf("creates through node-a (cordoned): %d on node-a, %d on node-b; want all on node-b", a, b)
	}
	// A forged node call is refused, not served nor forwarded.
	forged, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, a.URL+"/sandboxes/sb-1", nil)
	forged.Header.Set("X-API-Key", EncodeKey(clusterKey))
	bad, _ := cluster.NewNodeAuth("node-b", []byte(strings.Repeat("x", cluster.MinSecretBytes)), nil)
	bad.Sign(forged)
	res, err := http.DefaultClient.Do(forged)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged node call: %d, want 401", res.StatusCode)
	}
}
