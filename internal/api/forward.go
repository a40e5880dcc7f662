package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// Forwarding in a cluster.
//
// Any node accepts any API call. Behind authentication (the tenant is
// known), the forward middleware sends a call that needs a sandbox's
// owning node to that node, streaming:
//
//   - every route under /v1/sandboxes/{id} (the sandbox itself, its
//     lifecycle, exec, PTY, files, logs, ports, snapshots, agent state
//     ...): to the node Router.Route names, which is this node when it
//     owns the sandbox, when the sandbox has no owner or is unknown (the
//     route answers its own 404), or when its owner is dead (the record is
//     read here; actions fail in the service, which holds no lease);
//   - POST /v1/sandboxes: to the node Router.Place picks, with the JSON
//     body read here (at most MaxJSONBodyBytes) and replayed to it;
//   - every route under /v1/volumes/{id} (the volume, its push, local
//     snapshots, disk usage, delete and undelete): to the node
//     Router.RouteVolume names, the one whose pool holds the volume's
//     data (POST /v1/volumes creates the volume here, and records this
//     node as its node);
//   - every route under /v1/snapshots/{id} (delete, fork), and POST
//     /v1/volume-snapshots/restore of a local snapshot: to the node
//     Router.RouteSnapshot names, whose pool holds the snapshot;
//   - every route under /v1/operations/{id}: to the node
//     Router.RouteOperation names, the one that runs the operation and
//     keeps its record (a cluster node's operation ids name it, see
//     OperationID).
//
// Everything else (GET /v1/sandboxes, GET /v1/volumes, templates,
// tenants, usage, nodes, audit ...) is cluster-wide and served here.
//
// A request that carries node-call headers is checked first
// (Router.Verify): a bad or stale signature is refused with 401 and never
// served; a verified node call is served here and never forwarded again,
// so a disagreement between two nodes about an owner cannot loop (the
// service refuses what this node does not own).
//
// Audit: a forwarded call is recorded once, by the node that serves it
// (the owner authenticates the client's credentials itself and records
// the request as any other); the entry node records it only when it
// answers it itself because the node could not be reached or no node has
// room.

// Peer names a node a request is forwarded to; the zero Peer means this
// node.
type Peer struct {
	// Node is the node's name.
	Node string
	// Address is the node's internal address, as it registered it.
	Address string
}

// Here reports whether p is this node.
func (p Peer) Here() bool { return p.Node == "" && p.Address == "" }

// Router sends a cluster's requests to the node that must serve them
// (Options.Router; nil: a single node, nothing is forwarded).
// cluster.Router implements it.
type Router interface {
	// Verify checks r's node-call headers: "" and nil when it carries
	// none; the calling node's name when they verify; an error wrapping
	// errs.ErrUnauthenticated when they do not (bad signature, stale
	// time, malformed).
	Verify(r *http.Request) (node string, err error)
	// Route returns the node that serves a request of tenant for the
	// sandbox idOrName: the zero Peer for this node (it owns the sandbox;
	// the sandbox is unknown, has no owner, or its owner is dead).
	Route(ctx context.Context, tenant, idOrName string) (Peer, error)
	// Place picks the node that creates tenant's sandbox req (the zero
	// Peer for this node) and returns done, to be called once the create
	// is answered (until then the pick counts against the node's room).
	// No node with room is an error wrapping errs.ErrConflict that says
	// what is short.
	Place(ctx context.Context, tenant string, req client.CreateSandboxRequest) (to Peer, done func(), err error)
	// RouteVolume returns the node that serves tenant's requests for the
	// volume idOrName: the one whose pool holds its data, as its record
	// names it; the zero Peer for this node, and when the volume is
	// unknown, names no node (a single node's, or made before nodes were
	// recorded) or its node is dead.
	RouteVolume(ctx context.Context, tenant, idOrName string) (Peer, error)
	// RouteSnapshot returns the node whose pool holds tenant's local
	// snapshot id: its volume's node (RouteVolume) for a volume's
	// snapshot, its sandbox's owner (Route) otherwise; the zero Peer for
	// this node and when the snapshot is unknown.
	RouteSnapshot(ctx context.Context, tenant, id string) (Peer, error)
	// RouteOperation returns the node that runs operation id and keeps its
	// record (named by the id, see OperationID): the zero Peer for this
	// node, and when the id names no node or one that is not a live node.
	RouteOperation(ctx context.Context, id string) (Peer, error)
	// Forward proxies r to the node to, streaming, signed as this node's
	// call. It returns an error, having written nothing, when the node
	// gave no answer (its HTTP status is what huma.StatusError's
	// GetStatus says, 502 or 503); the caller answers it. It returns nil
	// once the node answered, and when the client went away.
	Forward(w http.ResponseWriter, r *http.Request, to Peer) error
}

// forwardedByKey is the context key of the node a served request was
// forwarded by.
type forwardedByKey struct{}

// ForwardedBy returns the node that forwarded the request whose context
// this is (a verified node call), if it was forwarded.
func ForwardedBy(ctx context.Context) (string, bool) {
	n, ok := ctx.Value(forwardedByKey{}).(string)
	return n, ok && n != ""
}

// forward is the middleware described above (a no-op without a Router).
func (s *server) forward(next http.Handler) http.Handler {
	if s.router == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		node, err := s.router.Verify(r)
		if err != nil {
			s.writeProblem(w, r, "verify node call", err)
			return
		}
		if node != "" {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardedByKey{}, node)))
			return
		}
		p, ok := PrincipalFromContext(r.Context())
		if !ok || p.TenantID == "" { // not a /v1 route
			next.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes" {
			s.placeCreate(w, r, p, next)
			return
		}
		var to Peer
		if ref, ok := sandboxRef(r); ok {
			to, err = s.router.Route(r.Context(), p.TenantID, ref)
		} else if ref, ok := pathRef(r, "/v1/volumes/"); ok {
			to, err = s.router.RouteVolume(r.Context(), p.TenantID, ref)
		} else if ref, ok := pathRef(r, "/v1/operations/"); ok {
			to, err = s.router.RouteOperation(r.Context(), ref)
		} else if ref, ok := pathRef(r, "/v1/snapshots/"); ok {
			to, err = s.router.RouteSnapshot(r.Context(), p.TenantID, ref)
		} else if r.Method == http.MethodPost && r.URL.Path == "/v1/volume-snapshots/restore" {
			var req client.RestoreVolumeRequest
			if readJSON(r, &req) && strings.HasPrefix(req.Snapshot, "snap-") { // a local snapshot's id
				to, err = s.router.RouteSnapshot(r.Context(), p.TenantID, req.Snapshot)
			}
		}
		if err != nil {
			s.answerHere(w, r, "route request", err)
			return
		}
		if to.Here() {
			next.ServeHTTP(w, r)
			return
		}
		if err := s.router.Forward(w, r, to); err != nil {
			s.answerHere(w, r, "forward request", err)
		}
	})
}

// placeCreate places POST /v1/sandboxes: it reads the request's body (its
// JSON is at most MaxJSONBodyBytes; a larger or malformed one is left to
// the route to refuse, here), asks the Router where it goes, and serves or
// forwards it with the body restored.
func (s *server) placeCreate(w http.ResponseWriter, r *http.Request, p Principal, next http.Handler) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxJSONBodyBytes+1))
	if err != nil {
		s.answerHere(w, r, "create sandbox", err)
		return
	}
	var req client.CreateSandboxRequest
	if len(body) > MaxJSONBodyBytes || json.Unmarshal(body, &req) != nil {
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		next.ServeHTTP(w, r)
		return
	}
	restore := func() {
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	to, done, err := s.router.Place(r.Context(), p.TenantID, req)
	if err != nil {
		s.answerHere(w, r, "place sandbox", err)
		return
	}
	if done != nil {
		defer done()
	}
	restore()
	if to.Here() {
		next.ServeHTTP(w, r)
		return
	}
	if err := s.router.Forward(w, r, to); err != nil {
		s.answerHere(w, r, "forward create", err)
	}
}

// readJSON reads r's JSON body (at most MaxJSONBodyBytes) into v and puts
// the body back for whoever serves r; false (v untouched or partial) when
// it is larger, unreadable or not JSON (the route refuses it).
func readJSON(r *http.Request, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxJSONBodyBytes+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	return err == nil && len(body) <= MaxJSONBodyBytes && json.Unmarshal(body, v) == nil
}

// answerHere answers err on this node as a problem document, recorded in
// the audit trail as the route would have been (the request was served by
// no other node).
func (s *server) answerHere(w http.ResponseWriter, r *http.Request, op string, err error) {
	var se huma.StatusError
	if errors.As(err, &se) {
		// A forward's own status (502, 503) and message, which name the node.
		if se.GetStatus() == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "5")
		}
		err = &huma.ErrorModel{Title: http.StatusText(se.GetStatus()), Status: se.GetStatus(), Detail: errs.Message(err)}
	}
	if _, pattern := s.mux.Handler(r); pattern != "" {
		// What the mux would have set, for the audit entry's action and target.
		r.Pattern = pattern
		if ref, ok := sandboxRef(r); ok {
			r.SetPathValue("id", ref)
		}
	}
	s.auditRequests(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeProblem(w, r, op, err)
	})).ServeHTTP(w, r)
}

// sandboxRef returns the sandbox id or name of a /v1/sandboxes/{id}[/...]
// path (its escaped first segment, unescaped).
func sandboxRef(r *http.Request) (string, bool) { return pathRef(r, "/v1/sandboxes/") }

// pathRef returns the {id} of a prefix{id}[/...] path (its escaped first
// segment after prefix, unescaped).
func pathRef(r *http.Request, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), prefix)
	if !ok {
		return "", false
	}
	seg, _, _ := strings.Cut(rest, "/")
	ref, err := url.PathUnescape(seg)
	if err != nil || ref == "" || ref == "." || ref == ".." {
		return "", false
	}
	return ref, true
}

// Operation ids in a cluster.
//
// A single node's operation ids are "op-<random>". A cluster node's are
// "op-<tag>-<random>", tag being NodeTag of the node that runs the
// operation and keeps its record in memory: any node finds that node among
// the registered ones by its tag and forwards the request there. Random
// parts are lower-case base32, without dashes.

// nodeTagLen is the length of a node tag.
const nodeTagLen = 8

// NodeTag is the short tag of node in its operation ids: the first
// nodeTagLen characters of the lower-case base32 SHA-256 of its name.
func NodeTag(node string) string {
	sum := sha256.Sum256([]byte(node))
	return strings.ToLower(base32.StdEncoding.EncodeToString(sum[:]))[:nodeTagLen]
}

// OperationID is the id of an operation of node with random part rnd
// ("op-<tag>-<rnd>").
func OperationID(node, rnd string) string { return "op-" + NodeTag(node) + "-" + rnd }

// OperationNodeTag returns the node tag of a cluster node's operation id,
// false for a single node's id and anything else.
func OperationNodeTag(id string) (string, bool) {
	rest, ok := strings.CutPrefix(id, "op-")
	if !ok {
		return "", false
	}
	tag, rnd, ok := strings.Cut(rest, "-")
	if !ok || len(tag) != nodeTagLen || rnd == "" {
		return "", false
	}
	return tag, true
}
