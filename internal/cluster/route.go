package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

var _ api.Router = (*Router)(nil)

// RouterOptions configure a Router.
type RouterOptions struct {
	// Store is the cluster's store: sandboxes, owner leases, nodes.
	Store store.Store
	// Node is this node's name.
	Node string
	// Secret is the cluster secret (LoadSecret reads it).
	Secret []byte
	// Grace is how old a node's heartbeat may be for it to count as alive
	// (0: three DefaultInterval, the registry's default): a sandbox whose
	// owner is not alive is served here, and a create never goes to it.
	Grace time.Duration
	// InstanceTypes are the instance types a create may name
	// (sandbox.InstanceTypes()), and DefaultInstanceType the one it gets
	// when it names none (sandbox.DefaultInstanceType).
	InstanceTypes       []client.InstanceType
	DefaultInstanceType string
	// CPUOvercommit, MemoryOvercommit and DiskOvercommit are placement's
	// ratios (0: the Default* ones; see placement.go).
	CPUOvercommit, MemoryOvercommit, DiskOvercommit float64
	// Clock is this node's clock (nil: time.Now).
	Clock func() time.Time
	// Logger receives routing decisions worth a line (default
	// slog.Default()).
	Logger *slog.Logger
}

// Router is a node's api.Router: it finds a sandbox's owner (Route),
// picks the node for a create (Place), verifies node calls (Verify) and
// forwards requests, signed (Forward). Its NodeClient makes the node's own
// calls to other nodes.
type Router struct {
	o      RouterOptions
	auth   *NodeAuth
	client *NodeClient

	// mu guards pending: the needs of creates placed by this node and not
	// yet answered, by node, counted against the node's room until the
	// create's lease shows in the store.
	mu      sync.Mutex
	pending map[string][]Need

	// idMu guards ids: RouteID's recent answers, by sandbox id.
	idMu sync.Mutex
	ids  map[string]idRoute
}

// NewRouter returns the Router of node o.Node.
func NewRouter(o RouterOptions) (*Router, error) {
	if o.Store == nil {
		return nil, fmt.Errorf("cluster router: no store: %w", errs.ErrInvalid)
	}
	if len(o.InstanceTypes) == 0 {
		return nil, fmt.Errorf("cluster router: no instance types (pass sandbox.InstanceTypes()): %w", errs.ErrInvalid)
	}
	if o.DefaultInstanceType == "" {
		o.DefaultInstanceType = o.InstanceTypes[0].Name
	}
	if o.Grace <= 0 {
		o.Grace = 3 * DefaultInterval
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	auth, err := NewNodeAuth(o.Node, o.Secret, o.Clock)
	if err != nil {
		return nil, fmt.Errorf("cluster router: %w", err)
	}
	c, err := NewNodeClient(auth, o.Logger)
	if err != nil {
		return nil, fmt.Errorf("cluster router: %w", err)
	}
	return &Router{o: o, auth: auth, client: c, pending: map[string][]Need{}, ids: map[string]idRoute{}}, nil
}

// Auth is the node's signer and verifier (RequireNode guards node-only
// routes with it).
func (r *Router) Auth() *NodeAuth { return r.auth }

// Client makes the node's own signed calls to other nodes.
func (r *Router) Client() *NodeClient { return r.client }

// Close closes idle connections to other nodes.
func (r *Router) Close() { r.client.Close() }

// Verify checks a request's node-call headers (NodeAuth.Verify).
func (r *Router) Verify(req *http.Request) (string, error) { return r.auth.Verify(req) }

// Forward proxies req to the node to, signed (NodeClient.Forward).
func (r *Router) Forward(w http.ResponseWriter, req *http.Request, to api.Peer) error {
	return r.client.Forward(w, req, to)
}

// Route returns the node that serves tenant's requests for the sandbox
// idOrName: the zero Peer (here) when this node owns it, when the sandbox
// is not found (the route answers its 404), when it never had a lease,
// or when its owner's heartbeat is older than the grace or the owner is not
// registered (a dead owner's sandbox is read here; actions then fail in
// the service, which does not hold its lease). Otherwise the owner, even
// when its lease lapsed: a live node keeps the sandbox's data (a stopped
// sandbox whose lease it released is started there).
func (r *Router) Route(ctx context.Context, tenant, idOrName string) (api.Peer, error) {
	if tenant == "" {
		// The store reads "" as every tenant; an API caller always has one.
		return api.Peer{}, nil
	}
	sb, err := r.o.Store.GetSandbox(ctx, tenant, idOrName)
	if errors.Is(err, errs.ErrNotFound) {
		return api.Peer{}, nil
	}
	if err != nil {
		return api.Peer{}, fmt.Errorf("route sandbox %s: %w", idOrName, err)
	}
	own, err := r.o.Store.GetOwnership(ctx, sb.ID)
	if errors.Is(err, errs.ErrNotFound) {
		return api.Peer{}, nil
	}
	if err != nil {
		return api.Peer{}, fmt.Errorf("route sandbox %s: %w", sb.ID, err)
	}
	return r.peer(ctx, own.Node, "sandbox", sb.ID)
}

// peer is the Peer of node, which serves what (kind id): the zero Peer
// when node is this node or "", when it is not registered, and when its
// heartbeat is older than the grace (it is dead: served here).
func (r *Router) peer(ctx context.Context, node, kind, id string) (api.Peer, error) {
	if node == "" || node == r.o.Node {
		return api.Peer{}, nil
	}
	n, err := r.o.Store.GetNode(ctx, node)
	if errors.Is(err, errs.ErrNotFound) {
		r.o.Logger.WarnContext(ctx, kind+"'s node is not a registered node; serving here", kind, id, "node", node)
		return api.Peer{}, nil
	}
	if err != nil {
		return api.Peer{}, fmt.Errorf("route %s %s: node %s: %w", kind, id, node, err)
	}
	if age := r.o.Clock().Sub(n.HeartbeatAt); age > r.o.Grace {
		r.o.Logger.DebugContext(ctx, kind+"'s node is dead; serving here", kind, id, "node", n.Name, "heartbeat_age", age)
		return api.Peer{}, nil
	}
	return api.Peer{Node: n.Name, Address: n.Address}, nil
}

// RouteVolume returns the node that serves tenant's requests for the
// volume idOrName: the node its record names (the one whose pool holds
// its data), unless that is this node, "" (a single node's volume, or one
// made before nodes were recorded), unregistered or dead, or the volume
// is not found (the route answers its 404): then the zero Peer (here).
func (r *Router) RouteVolume(ctx context.Context, tenant, idOrName string) (api.Peer, error) {
	if tenant == "" {
		return api.Peer{}, nil
	}
	v, err := r.o.Store.GetVolume(ctx, tenant, idOrName)
	if errors.Is(err, errs.ErrNotFound) {
		return api.Peer{}, nil
	}
	if err != nil {
		return api.Peer{}, fmt.Errorf("route volume %s: %w", idOrName, err)
	}
	return r.peer(ctx, v.Node, "volume", v.ID)
}

// RouteSnapshot returns the node whose pool holds tenant's local snapshot
// id: the node of its volume (RouteVolume) for a volume's snapshot, the
// owner of its sandbox (Route) otherwise; the zero Peer (here) when the
// snapshot is not found (the route answers its 404) and as those say.
func (r *Router) RouteSnapshot(ctx context.Context, tenant, id string) (api.Peer, error) {
	if tenant == "" {
		return api.Peer{}, nil
	}
	sn, err := r.o.Store.GetSnapshot(ctx, tenant, id)
	if errors.Is(err, errs.ErrNotFound) {
		return api.Peer{}, nil
	}
	if err != nil {
		return api.Peer{}, fmt.Errorf("route snapshot %s: %w", id, err)
	}
	if sn.Kind == "volume" {
		return r.RouteVolume(ctx, tenant, sn.SandboxID)
	}
	return r.Route(ctx, tenant, sn.SandboxID)
}

// RouteOperation returns the node that runs operation id, the registered
// node whose api.NodeTag the id carries (api.OperationNodeTag): the zero
// Peer (here) for this node's tag, an id without a tag (a single node's),
// a tag of no registered node and a dead node.
func (r *Router) RouteOperation(ctx context.Context, id string) (api.Peer, error) {
	tag, ok := api.OperationNodeTag(id)
	if !ok || tag == api.NodeTag(r.o.Node) {
		return api.Peer{}, nil
	}
	nodes, err := r.o.Store.ListNodes(ctx)
	if err != nil {
		return api.Peer{}, fmt.Errorf("route operation %s: list nodes: %w", id, err)
	}
	for _, n := range nodes {
		if api.NodeTag(n.Name) == tag {
			return r.peer(ctx, n.Name, "operation", id)
		}
	}
	return api.Peer{}, nil
}

// Place picks the node that creates tenant's sandbox req (Pick over the
// registry, the store's leases and the creates this node placed and has
// not yet answered; an imported template only where it is, TemplateNeed;
// only the node of its volumes' data when it mounts volumes that name
// one): the zero Peer for this node. A create naming an unknown instance
// type or template is placed here, where the service refuses it. No node
// with room (and the template) is a *NoRoomError (errs.ErrConflict, 409).
// done must be called once the create is answered.
func (r *Router) Place(ctx context.Context, tenant string, req client.CreateSandboxRequest) (api.Peer, func(), error) {
	need, err := InstanceTypeNeed(r.o.InstanceTypes, r.o.DefaultInstanceType, req.InstanceType, req.DiskBytes)
	if err != nil {
		return api.Peer{}, func() {}, nil
	}
	if need, err = TemplateNeed(ctx, r.o.Store, tenant, req.Template, need); err != nil {
		return api.Peer{}, nil, fmt.Errorf("place sandbox: %w", err)
	}
	nodes, err := r.o.Store.ListNodes(ctx)
	if err != nil {
		return api.Peer{}, nil, fmt.Errorf("place sandbox: list nodes: %w", err)
	}
	load, err := r.Loads(ctx)
	if err != nil {
		return api.Peer{}, nil, fmt.Errorf("place sandbox: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addPending(load)
	candidates, err := r.volumeNodes(ctx, tenant, req.Volumes, nodes)
	if err != nil {
		return api.Peer{}, nil, err
	}
	n, err := Pick(candidates, load, need, r.Policy())
	if err != nil {
		return api.Peer{}, nil, fmt.Errorf("place sandbox for tenant %s: %w", tenant, err)
	}
	r.pending[n.Name] = append(r.pending[n.Name], need)
	var once sync.Once
	done := func() { once.Do(func() { r.unpend(n.Name, need) }) }
	r.o.Logger.DebugContext(ctx, "sandbox placed", "tenant", tenant, "node", n.Name, "need", need.String())
	if n.Name == r.o.Node {
		return api.Peer{}, done, nil
	}
	return api.Peer{Node: n.Name, Address: n.Address}, done, nil
}

// PickMove picks the node a sandbox that must move goes to (failover's
// adoption, evacuate): a node with room for it by the rule of placement
// (cpus, memory and pool free against what each node runs, creates in
// flight included), never exclude, and preferably one that has its
// template (an adoption restores the whole root from the push and never
// reads the template's files, so a node without it still takes the
// sandbox). No node with room is a *NoRoomError. Tenant quotas are not
// checked again: they count a tenant's sandboxes across the cluster, and
// a move adds none.
func (r *Router) PickMove(ctx context.Context, sb store.Sandbox, exclude string) (store.Node, error) {
	need, err := SandboxNeed(sb)
	if err != nil {
		return store.Node{}, err
	}
	if need, err = TemplateNeed(ctx, r.o.Store, sb.TenantID, sb.TemplateID, need); err != nil {
		return store.Node{}, fmt.Errorf("place sandbox %s: %w", sb.ID, err)
	}
	nodes, err := r.o.Store.ListNodes(ctx)
	if err != nil {
		return store.Node{}, fmt.Errorf("place sandbox %s: list nodes: %w", sb.ID, err)
	}
	load, err := r.Loads(ctx)
	if err != nil {
		return store.Node{}, fmt.Errorf("place sandbox %s: %w", sb.ID, err)
	}
	r.mu.Lock()
	r.addPending(load)
	r.mu.Unlock()
	p := r.Policy()
	p.TemplatePreferred = true
	return Pick(nodes, load, need, p, exclude)
}

// addPending adds the creates placed and not yet answered to load (r.mu
// held).
func (r *Router) addPending(load map[string]Load) {
	for node, needs := range r.pending {
		l := load[node]
		for _, n := range needs {
			l.Sandboxes++
			l.CPUs += n.CPUs
			l.MemoryBytes += n.MemoryBytes
		}
		load[node] = l
	}
}

// volumeNodes narrows the candidates of a create that mounts volumes to
// the node whose pool holds their data (a volume's data is on one node:
// the sandbox must run there). Volumes that name no node (a single
// node's, or made before nodes were recorded) or that are not found (the
// create refuses them) leave nodes as they are; volumes on two nodes
// cannot be mounted together (errs.ErrConflict).
func (r *Router) volumeNodes(ctx context.Context, tenant string, mounts []client.VolumeMount, nodes []store.Node) ([]store.Node, error) {
	on := ""
	for _, m := range mounts {
		v, err := r.o.Store.GetVolume(ctx, tenant, m.Volume)
		if errors.Is(err, errs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("place sandbox: volume %s: %w", m.Volume, err)
		}
		switch {
		case v.Node == "" || v.Node == on:
		case on == "":
			on = v.Node
		default:
			return nil, fmt.Errorf("place sandbox: its volumes are on nodes %s and %s, and a sandbox mounts only volumes of the node it runs on: %w",
				on, v.Node, errs.ErrConflict)
		}
	}
	if on == "" {
		return nodes, nil
	}
	for _, n := range nodes {
		if n.Name == on {
			return []store.Node{n}, nil
		}
	}
	return nil, fmt.Errorf("place sandbox: its volumes are on node %s, which is not registered: %w", on, errs.ErrConflict)
}

// unpend removes one pending need of node.
func (r *Router) unpend(node string, need Need) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.pending[node]
	for i, n := range ns {
		if n == need {
			ns = append(ns[:i], ns[i+1:]...)
			break
		}
	}
	if len(ns) == 0 {
		delete(r.pending, node)
	} else {
		r.pending[node] = ns
	}
}

// Policy is the placement policy at this moment.
func (r *Router) Policy() Policy {
	return Policy{Now: r.o.Clock(), Grace: r.o.Grace, CPUOvercommit: r.o.CPUOvercommit,
		MemoryOvercommit: r.o.MemoryOvercommit, DiskOvercommit: r.o.DiskOvercommit}
}

// Loads reads what every node's sandboxes take (see Loads).
func (r *Router) Loads(ctx context.Context) (map[string]Load, error) {
	owners, err := r.o.Store.ListOwnerships(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list owner leases: %w", err)
	}
	sbs, err := r.o.Store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return Loads(owners, sbs), nil
}

// idRouteTTL is how long RouteID keeps an answer: what a proxied request
// to a sandbox port may act on as read earlier (the port proxy's own
// cache of a sandbox's record lasts as long).
const idRouteTTL = time.Second

// maxIDRoutes bounds RouteID's cache; past it, expired answers are dropped.
const maxIDRoutes = 4096

// idRoute is one answer of RouteID.
type idRoute struct {
	to api.Peer
	at time.Time
}

// RouteID is Route for a request that names a sandbox by id and no tenant
// (the port proxy's: a public port needs no API key), with its answer
// kept for up to a second, so a proxied request costs no store read.
func (r *Router) RouteID(ctx context.Context, id string) (api.Peer, error) {
	now := r.o.Clock()
	r.idMu.Lock()
	e, ok := r.ids[id]
	r.idMu.Unlock()
	if ok && now.Sub(e.at) < idRouteTTL && now.Sub(e.at) >= 0 {
		return e.to, nil
	}
	sb, err := r.o.Store.GetSandbox(ctx, "", id) // "": by id, in any tenant
	if errors.Is(err, errs.ErrNotFound) {
		return api.Peer{}, nil
	}
	if err != nil {
		return api.Peer{}, fmt.Errorf("route sandbox %s: %w", id, err)
	}
	to, err := r.Route(ctx, sb.TenantID, sb.ID)
	if err != nil {
		return api.Peer{}, err
	}
	r.idMu.Lock()
	if len(r.ids) >= maxIDRoutes {
		for k, v := range r.ids {
			if now.Sub(v.at) >= idRouteTTL || now.Sub(v.at) < 0 {
				delete(r.ids, k)
			}
		}
	}
	if len(r.ids) < maxIDRoutes {
		r.ids[id] = idRoute{to: to, at: now}
	}
	r.idMu.Unlock()
	return to, nil
}

// ForwardSandboxPaths wraps the handlers the daemon mounts ahead of the
// API for /v1/sandboxes/{id}/... (the port proxy's path routes
// /v1/sandboxes/{id}/ports/{port}/ and /v1/sandboxes/{id}/port-forward/{port},
// which authenticate by themselves): ForwardSandbox with the path's {id}.
func (r *Router) ForwardSandboxPaths(next http.Handler) http.Handler {
	return r.ForwardSandbox(func(req *http.Request) (string, bool) { return sandboxPathID(req.URL.EscapedPath()) })(next)
}

// ForwardSandbox returns a wrapper of handlers that serve requests naming
// a sandbox by id in a way of their own and authenticate by themselves
// (the port proxy's routes by path and by Host, the E2B API's control and
// data planes): idOf says which sandbox a request is for (false: none;
// the request goes to next untouched). A request for a sandbox another
// live node owns (RouteID) is forwarded to it, streaming (websockets
// included), signed; the owner authenticates the client's credentials
// itself and records the call. One this node serves, and every verified
// node call, goes to next: a node call is never forwarded again. A
// request with node-call headers that do not verify is refused with 401;
// an owner that cannot be reached is a 503 (502) problem naming it.
func (r *Router) ForwardSandbox(idOf func(*http.Request) (string, bool)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			id, ok := idOf(req)
			if !ok {
				next.ServeHTTP(w, req)
				return
			}
			if r.servedAsNodeCall(w, req, next) {
				return
			}
			to, err := r.RouteID(req.Context(), id)
			if err != nil {
				r.o.Logger.ErrorContext(req.Context(), "route a sandbox request", "sandbox", id, "err", err)
				WriteProblem(w, http.StatusBadGateway, "cannot look up the sandbox's node now; try again")
				return
			}
			if to.Here() {
				next.ServeHTTP(w, req)
				return
			}
			r.forwardOrProblem(w, req, to)
		})
	}
}

// PlaceCreates returns a wrapper of a handler that creates sandboxes by
// routes of its own and authenticates by itself (the E2B API's POST
// /sandboxes and /v2/sandboxes): a request isCreate matches, from a
// client, is placed as a create of the default instance type mounting no
// volume (Place; the tenant is not known before the handler
// authenticates, and placement needs none for such a create) and, for
// another node, forwarded there, streaming, signed; the node serves it
// (authenticating the client) and records it. One placed here, every
// verified node call and every other request go to next (a bad node call
// is refused with 401). When placement fails (no node has room) the
// create is served here, where the node's own admission answers it.
func (r *Router) PlaceCreates(isCreate func(*http.Request) bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if !isCreate(req) {
				next.ServeHTTP(w, req)
				return
			}
			if r.servedAsNodeCall(w, req, next) {
				return
			}
			to, done, err := r.Place(req.Context(), "(not yet authenticated)", client.CreateSandboxRequest{})
			if err != nil {
				r.o.Logger.DebugContext(req.Context(), "place a create: none; serving it here", "path", req.URL.Path, "err", err)
				next.ServeHTTP(w, req)
				return
			}
			defer done()
			if to.Here() {
				next.ServeHTTP(w, req)
				return
			}
			r.forwardOrProblem(w, req, to)
		})
	}
}

// NodeHostRoutes serves the host-routed requests other nodes forward here
// (ForwardSandbox on their port proxy's listener sends them to this
// node's API address with the client's Host): a request that carries
// node-call headers and whose Host hostOf maps to a sandbox goes to host
// (the port proxy's Host routing), once verified; a bad node call is
// refused with 401. Everything else, a client's request with such a Host
// included, goes to next.
func (r *Router) NodeHostRoutes(hostOf func(*http.Request) (string, bool), host, next http.Handler) http.Handler {
	verified := r.ForwardSandbox(hostOf)(host)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, ok := hostOf(req); ok && len(req.Header.Values(HeaderNode)) > 0 {
			verified.ServeHTTP(w, req)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// sandboxPathID returns the {id} of an escaped /v1/sandboxes/{id}/... path.
func sandboxPathID(escaped string) (string, bool) {
	rest, ok := strings.CutPrefix(escaped, "/v1/sandboxes/")
	if !ok {
		return "", false
	}
	seg, _, _ := strings.Cut(rest, "/")
	id, err := url.PathUnescape(seg)
	if err != nil || id == "" || strings.ContainsAny(id, "/?#") {
		return "", false
	}
	return id, true
}

// forwardOrProblem forwards req to the node to, streaming, and answers a
// failure to reach it as a problem: the node's status when it answered
// one (Retry-After with a 503), else 502.
func (r *Router) forwardOrProblem(w http.ResponseWriter, req *http.Request, to api.Peer) {
	if err := r.client.Forward(w, req, to); err != nil {
		var fe *ForwardError
		status := http.StatusBadGateway
		if errors.As(err, &fe) {
			status = fe.Status
		}
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "5")
		}
		WriteProblem(w, status, errs.Message(err))
	}
}

// servedAsNodeCall answers req when it carries node-call headers: 401 when
// they do not verify, next (with the calling node in the context, never
// forwarded again) when they do. It reports whether req was answered.
func (r *Router) servedAsNodeCall(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
	node, err := r.auth.Verify(req)
	if err != nil {
		WriteProblem(w, http.StatusUnauthorized, errs.Message(err))
		return true
	}
	if node != "" {
		next.ServeHTTP(w, req.WithContext(WithCallingNode(req.Context(), node)))
		return true
	}
	return false
}
