package daemon

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/budget"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/e2b"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/portproxy"
	"github.com/stead-dev/stead/internal/sandbox"
	"github.com/stead-dev/stead/internal/store"
)

// clusterNode is what a daemon in cluster mode (Config.ClusterSecretFile)
// has besides a single-node daemon: the cluster secret every node shares
// and this node's sandbox owner leases.
type clusterNode struct {
	self   string
	secret []byte
	grace  time.Duration
	st     store.Store
	log    *slog.Logger
	leases *cluster.Leases
	// router finds owners, places creates and forwards (api.Options.Router);
	// failover and evac act for the cluster (made by start).
	router   *cluster.Router
	failover *cluster.Failover
	evac     *cluster.Evacuator
	// svc is the sandbox service, once made: the leases' OnLost reaches it.
	svc atomic.Pointer[sandbox.Service]
}

// deriveKey derives a 32-byte key for purpose from the cluster secret, so
// the keys every node must share (sandbox tokens, sealed environments,
// webhook signatures) need no file copied between nodes.
func deriveKey(secret []byte, purpose string) ([]byte, error) {
	k, err := hkdf.Key(sha256.New, secret, nil, "stead cluster: "+purpose, 32)
	if err != nil {
		return nil, fmt.Errorf("derive the %s key: %w", purpose, err)
	}
	return k, nil
}

// auditKey is the key every node signs the shared audit trail's
// checkpoints with.
func (c *clusterNode) auditKey() (ed25519.PrivateKey, error) {
	seed, err := deriveKey(c.secret, "audit checkpoints")
	if err != nil {
		return nil, err
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// newClusterNode checks that cfg can run as a cluster node and makes its
// lease set; nil when cfg is a single-node daemon.
func newClusterNode(cfg Config, st store.Store, node string, log *slog.Logger) (*clusterNode, error) {
	if cfg.ClusterSecretFile == "" {
		return nil, nil
	}
	if !strings.HasPrefix(cfg.Store, "postgres://") && !strings.HasPrefix(cfg.Store, "postgresql://") {
		return nil, fmt.Errorf("a cluster needs the nodes' shared PostgreSQL store (--store postgres://...), not %q: %w", redactStore(cfg.Store), errs.ErrInvalid)
	}
	secret, err := cluster.LoadSecret(cfg.ClusterSecretFile)
	if err != nil {
		return nil, err
	}
	grace := cfg.NodeGrace
	if grace <= 0 {
		hb := cfg.NodeHeartbeat
		if hb <= 0 {
			hb = cluster.DefaultInterval
		}
		grace = 3 * hb
	}
	c := &clusterNode{self: node, secret: secret, grace: grace, st: st, log: log}
	c.leases, err = cluster.NewLeases(cluster.LeaseOptions{Store: st, Node: node, TTL: cfg.LeaseTTL, Logger: log,
		// Keys with a slash are job and scope leases, not sandboxes'.
		OnLost: func(id string, err error) {
			if svc := c.svc.Load(); svc != nil && !strings.Contains(id, "/") {
				go svc.LeaseLost(context.Background(), id, err)
			}
		},
		// Synchronous: the freeze must be done before the lease lapses.
		OnLapse: func(id string) {
			if svc := c.svc.Load(); svc != nil && !strings.Contains(id, "/") {
				svc.LeaseLapsed(context.Background(), id)
			}
		},
		OnRegain: func(id string, _ store.Ownership) {
			if svc := c.svc.Load(); svc != nil && !strings.Contains(id, "/") {
				go svc.LeaseRegained(context.Background(), id)
			}
		}})
	if err != nil {
		return nil, err
	}
	c.router, err = cluster.NewRouter(cluster.RouterOptions{Store: st, Node: node, Secret: secret, Grace: grace,
		InstanceTypes: sandbox.InstanceTypes(), DefaultInstanceType: sandbox.DefaultInstanceType, Logger: log})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// start makes the cluster's coordinators once the service exists: the
// failover coordinator (run by Run) and the evacuator (called by the
// evacuate route); and it sends the service's tenant stops and purges of
// other nodes' sandboxes to their owners.
func (c *clusterNode) start(svc *sandbox.Service, sink events.Sink, rec audit.Recorder) error {
	c.svc.Store(svc)
	// A tenant's suspension or deletion stops or purges each sandbox on
	// the node that holds it.
	svc.SetTenantRelay(c.router.RelayTenant(svc))
	var err error
	// A pass every heartbeat (a third of the grace): failover starts
	// within one heartbeat of a lease lapsing.
	c.failover, err = cluster.NewFailover(cluster.FailoverOptions{Store: c.st, Node: c.self, Grace: c.grace, Every: c.grace / 3,
		Pick: c.pick, Adopt: c.adopt, Finish: c.finish, Events: sink, Audit: rec, Logger: c.log})
	if err != nil {
		return err
	}
	c.evac, err = cluster.NewEvacuator(cluster.EvacuateOptions{Store: c.st, Pick: c.pick,
		HandOff: c.handOff, Adopt: c.adopt, Finish: c.finish, Audit: rec, Logger: c.log})
	return err
}

// run runs the node's cluster loops until ctx ends.
func (c *clusterNode) run(ctx context.Context) {
	c.failover.Run(ctx)
}

// nodes is the API's node backend: the registry, the kept copies of lost
// sandboxes, and in a cluster the evacuate route.
func (c *clusterNode) nodes(reg *cluster.Registry, svc *sandbox.Service) api.NodeBackend {
	lost := lostCopies{self: reg.Name(), svc: svc, c: c}
	if c == nil {
		return struct {
			*cluster.Registry
			lostCopies
		}{reg, lost}
	}
	return struct {
		*cluster.Registry
		sandbox.NodeEvacuation
		lostCopies
	}{reg, sandbox.NodeEvacuation{Service: svc, Evacuate: c.evac.Evacuate}, lost}
}

// forwardSandbox sends the port proxy's requests for a sandbox another
// node owns to that node (cluster.Router.ForwardSandbox; nil on a single
// node).
func (c *clusterNode) forwardSandbox() func(idOf func(*http.Request) (string, bool)) func(http.Handler) http.Handler {
	if c == nil {
		return nil
	}
	return c.router.ForwardSandbox
}

// hostRoutes serves, on the API listener, the host-routed port proxy
// requests other nodes forward here (cluster.Router.NodeHostRoutes): a
// verified node call whose Host is "<port>-<id>.<proxy domain>" goes to
// the port proxy's Host routing, except the E2B data plane's
// "49983-<id>.<e2b domain>", which stays the E2B API's as on the API
// listener of a single node. A client's request with such a Host goes to
// next (the API), as on a single node. next itself on a single node or
// without a proxy domain.
func (c *clusterNode) hostRoutes(cfg Config, proxy *portproxy.Proxy, next http.Handler) http.Handler {
	if c == nil || proxy == nil || cfg.Network.ProxyDomain == "" {
		return next
	}
	hostOf := func(r *http.Request) (string, bool) {
		if !cfg.E2B.Disabled {
			if _, ok := e2b.EnvdHostSandbox(r.Host, cfg.E2B.Domain); ok {
				return "", false
			}
		}
		return portproxy.HostSandbox(r, cfg.Network.ProxyDomain)
	}
	return c.router.NodeHostRoutes(hostOf, proxy.Handler(), next)
}

// apiRouter is the API's Router (nil on a single node).
func (c *clusterNode) apiRouter() api.Router {
	if c == nil {
		return nil
	}
	return c.router
}

// pick places a sandbox that must move (failover, evacuate): Router.PickMove.
func (c *clusterNode) pick(ctx context.Context, sb store.Sandbox, exclude string) (store.Node, error) {
	return c.router.PickMove(ctx, sb, exclude)
}

// The node-to-node routes: what the failover coordinator and the
// evacuator ask of another node. Only calls signed with the cluster secret
// are served (NodeAuth.RequireNode).
const (
	nodeRoutePrefix = "/internal/v1/sandboxes/"
)

// call makes the node call verb on sandbox id at node n and decodes its
// JSON answer into out (nil: none).
func (c *clusterNode) call(ctx context.Context, n store.Node, id, verb string, in, out any) error {
	err := c.nodeDo(ctx, n, http.MethodPost, nodeRoutePrefix+url.PathEscape(id)+"/"+verb, in, out)
	if err != nil {
		return fmt.Errorf("node %s: %s sandbox %s: %w", n.Name, verb, id, err)
	}
	return nil
}

// nodeDo makes a signed node call method path at node n with in as its
// JSON body (nil: none) and decodes its JSON answer into out (nil: none).
// A problem answer is an error of the class its status says (404
// errs.ErrNotFound, 409 errs.ErrConflict, 400 errs.ErrInvalid), with its
// detail.
func (c *clusterNode) nodeDo(ctx context.Context, n store.Node, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	res, err := c.router.Client().Do(ctx, n.Address, method, path, body)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode/100 != 2 {
		var p struct{ Detail string }
		_ = json.Unmarshal(raw, &p)
		if p.Detail == "" {
			p.Detail = strings.TrimSpace(string(raw))
		}
		if class := statusClass(res.StatusCode); class != nil {
			return fmt.Errorf("%s (HTTP %d)%w", p.Detail, res.StatusCode, class)
		}
		return fmt.Errorf("%s (HTTP %d)", p.Detail, res.StatusCode)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("decode the answer of node %s: %w", n.Name, err)
		}
	}
	return nil
}

// classError tags an error with a class for errors.Is and prints nothing
// (errs.Message already leaves class names out; this leaves the text
// alone too).
type classError struct{ class error }

func (e classError) Error() string        { return "" }
func (e classError) Is(target error) bool { return target == e.class }

// statusClass is the errs class of a node call's problem status, as an
// error that reads as nothing (nil for a status without one).
func statusClass(status int) error {
	switch status {
	case http.StatusNotFound:
		return classError{errs.ErrNotFound}
	case http.StatusConflict:
		return classError{errs.ErrConflict}
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return classError{errs.ErrInvalid}
	case http.StatusTooManyRequests, http.StatusInsufficientStorage:
		return classError{errs.ErrQuota}
	}
	return nil
}

func (c *clusterNode) adopt(ctx context.Context, n store.Node, id string) error {
	if n.Name == c.self {
		_, err := c.svc.Load().Adopt(ctx, id)
		return err
	}
	return c.call(ctx, n, id, "adopt", nil, nil)
}

func (c *clusterNode) handOff(ctx context.Context, n store.Node, id string) (cluster.HandOffResult, error) {
	if n.Name == c.self {
		return c.svc.Load().HandOff(ctx, id)
	}
	var h cluster.HandOffResult
	err := c.call(ctx, n, id, "hand-off", nil, &h)
	return h, err
}

// finishRequest is the body of the finish-hand-off node call.
type finishRequest struct {
	HandOff cluster.HandOffResult `json:"hand_off"`
	Moved   bool                  `json:"moved"`
}

func (c *clusterNode) finish(ctx context.Context, n store.Node, id string, h cluster.HandOffResult, moved bool) error {
	if n.Name == c.self {
		return c.svc.Load().FinishHandOff(ctx, id, h, moved)
	}
	return c.call(ctx, n, id, "finish-hand-off", finishRequest{h, moved}, nil)
}

// nodeRoutes serves the node-to-node routes under /internal/v1/ (only to
// signed node calls) and passes everything else to next.
func (c *clusterNode) nodeRoutes(next http.Handler) http.Handler {
	if c == nil {
		return next
	}
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, r *http.Request, v any, err error) {
		if err != nil {
			c.log.Error("node call", "method", r.Method, "path", r.URL.Path, "from", nodeOf(r), "err", err)
			cluster.WriteProblem(w, api.HTTPStatus(err), errs.Message(err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("POST "+nodeRoutePrefix+"{id}/adopt", func(w http.ResponseWriter, r *http.Request) {
		sb, err := c.svc.Load().Adopt(r.Context(), r.PathValue("id"))
		answer(w, r, sb, err)
	})
	mux.HandleFunc("POST "+nodeRoutePrefix+"{id}/hand-off", func(w http.ResponseWriter, r *http.Request) {
		h, err := c.svc.Load().HandOff(r.Context(), r.PathValue("id"))
		answer(w, r, h, err)
	})
	mux.HandleFunc("POST "+nodeRoutePrefix+"{id}/finish-hand-off", func(w http.ResponseWriter, r *http.Request) {
		var f finishRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&f); err != nil {
			answer(w, r, nil, fmt.Errorf("finish hand-off: body: %v: %w", err, errs.ErrInvalid))
			return
		}
		answer(w, r, struct{}{}, c.svc.Load().FinishHandOff(r.Context(), r.PathValue("id"), f.HandOff, f.Moved))
	})
	cluster.HandleBudget(mux, c.svc.Load())
	cluster.HandleTenant(mux, c.svc.Load())
	mux.HandleFunc("GET "+nodeLostPrefix, func(w http.ResponseWriter, r *http.Request) {
		list, err := c.svc.Load().LostCopies(r.Context())
		answer(w, r, list, err)
	})
	mux.HandleFunc("POST "+nodeLostPrefix+"/{copy}/recover", func(w http.ResponseWriter, r *http.Request) {
		var req client.RecoverLostCopyRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
			answer(w, r, nil, fmt.Errorf("recover lost copy: body: %v: %w", err, errs.ErrInvalid))
			return
		}
		sb, err := c.svc.Load().RecoverLostCopy(r.Context(), r.PathValue("copy"), req.Name)
		answer(w, r, sb, err)
	})
	mux.HandleFunc("DELETE "+nodeLostPrefix+"/{copy}", func(w http.ResponseWriter, r *http.Request) {
		answer(w, r, struct{}{}, c.svc.Load().DiscardLostCopy(r.Context(), r.PathValue("copy")))
	})
	guarded := c.router.Auth().RequireNode(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/internal/") {
			guarded.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// nodeOf names the calling node of a node call, for logs.
func nodeOf(r *http.Request) string {
	n, _ := cluster.CallingNode(r.Context())
	return n
}

// budgetSandboxes is what the budget enforcer acts through: the service on
// a single node; in a cluster the service for this node's sandboxes and a
// node call to the owner for the others' (the checks run on one node).
func (c *clusterNode) budgetSandboxes(svc *sandbox.Service) budget.Sandboxes {
	if c == nil {
		return svc
	}
	return c.router.RelayBudget(svc)
}

// budgetLeader says whether this node runs the budget checks now (nil on a
// single node: always): the holder of the cluster's budget job lease.
func (c *clusterNode) budgetLeader() func(context.Context) (context.Context, bool) {
	if c == nil {
		return nil
	}
	return cluster.NewJob(c.leases, cluster.BudgetJobKey, c.log).Lead
}

// repoMeterLeader says whether this node counts the tenants' bytes in the
// shared repository for the meter now (nil on a single node: always).
func (c *clusterNode) repoMeterLeader() func(context.Context) (context.Context, bool) {
	if c == nil {
		return nil
	}
	return cluster.NewJob(c.leases, cluster.RepoMeterJobKey, c.log).Lead
}

// owner is the sandbox service's Owner: the leases in a cluster, nil (the
// sole owner) on a single node.
func (c *clusterNode) owner() sandbox.Owner {
	if c == nil {
		return nil
	}
	return c.leases
}
