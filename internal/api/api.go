package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/metrics"
)

// MaxJSONBodyBytes caps every JSON request body. A larger body is refused
// with 413 before the backend sees it. File and tar bodies are streamed and
// not capped here (the sandbox's disk quota applies).
const MaxJSONBodyBytes = 1 << 20

// Options configure the API handler.
type Options struct {
	// Logger receives one line per request and every internal error
	// (default: slog.Default()).
	Logger *slog.Logger
	// Version is the daemon version shown in the OpenAPI document and in
	// /healthz.
	Version string
	// Metrics, when set, counts requests by method, route template and
	// status.
	Metrics *metrics.Metrics
	// Usage, when set, serves GET /v1/usage.
	Usage UsageBackend
	// Events serves the event log and webhooks (nil: no /v1/events or
	// /v1/webhooks routes).
	Events EventBackend
	// Nodes serves the cluster's node registry (nil: no /v1/nodes
	// routes).
	Nodes NodeBackend
	// AdminKeyPath is where the daemon keeps its bootstrap admin key, as
	// errors about a missing or non-admin key name it (default
	// /var/lib/stead/admin.key).
	AdminKeyPath string
	// Router forwards the calls that need a sandbox's owning node to it,
	// in a cluster (nil: one node, nothing is forwarded; see forward.go).
	Router Router
}

// server holds what the route handlers share.
type server struct {
	b   Backend
	log *slog.Logger
	api huma.API
	ver string
	mux *http.ServeMux
	met *metrics.Metrics
	// adminKey is Options.AdminKeyPath, for messages.
	adminKey string
	// router is Options.Router (nil: nothing is forwarded).
	router Router
}

// NewHandler returns the HTTP handler of the stead API:
//
//   - GET /healthz and GET /openapi.json (and /openapi.yaml, /docs) without
//     authentication;
//   - the /v1/sandboxes/{id}/checkpoints routes only when b also implements
//     CheckpointBackend;
//   - the snapshot, fork and rollback routes (/v1/snapshots,
//     /v1/sandboxes/{id}/snapshots, .../fork, .../rollback) only when b
//     also implements SnapshotBackend;
//   - the persistent volume routes (/v1/volumes) only when b also
//     implements VolumeBackend;
//   - the off-box backup routes (/v1/repo, /v1/operations,
//     /v1/remote-snapshots, /v1/drills, /v1/sandboxes/{id}/push ...) only
//     when b also implements BackupBackend;
//   - the network and port routes (/v1/sandboxes/{id}/network,
//     /v1/sandboxes/{id}/ports ...) only when b also implements
//     NetworkBackend;
//   - GET /v1/sandboxes/{id}/du and GET /v1/volumes/{id}/du only when b
//     also implements DiskUsageBackend;
//   - the schedule routes (/v1/schedules, /v1/sandboxes/{id}/schedules)
//     only when b also implements ScheduleBackend;
//   - the budget routes (/v1/budgets) only when b also implements
//     BudgetBackend;
//   - GET /v1/usage only when opts.Usage is set; requests are counted
//     by route template in opts.Metrics when it is set;
//   - GET /v1/quota and /v1/tenants/{tenant}/quotas only when b also
//     implements QuotaBackend;
//   - the tenant routes (/v1/tenants) and key management (GET /v1/keys,
//     rotate, revoke) only when b also implements TenantBackend;
//   - every /v1 route behind an API key (Authorization: Bearer <key> or
//     X-API-Key: <key>) resolved by Backend.Authenticate, and checked
//     against the key's role and scope (authz.go); the principal's tenant
//     (for an admin key, the one X-Stead-Tenant names) is passed to every
//     Backend call.
//   - with opts.Router (a cluster), every /v1/sandboxes/{id}/... call and
//     every create forwarded, streaming, to the node that must serve it,
//     and node calls whose signature does not verify refused (forward.go).
//
// The handler serves long-lived streams (exec, logs, PTY, tar): the
// http.Server around it must not set a WriteTimeout.
func NewHandler(b Backend, opts Options) http.Handler {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	version := opts.Version
	if version == "" {
		version = "dev"
	}

	cfg := huma.DefaultConfig("stead", version)
	// No $schema links injected into response bodies: clients get plain
	// objects exactly as described by the client package types.
	cfg.CreateHooks = nil
	cfg.SchemasPath = ""
	cfg.OpenAPIPath = "/openapi"
	// /docs is rendered by this package from the document (docs.go), with
	// nothing loaded from elsewhere.
	cfg.DocsPath = ""
	// Relative: the daemon's own address, whichever it was reached at.
	cfg.Servers = []*huma.Server{{URL: "/", Description: "This stead daemon (the address this document was read from)"}}
	// No response carries null where the document promises an array.
	cfg.Transformers = append(cfg.Transformers, emptySlices)
	cfg.Info.Description = "stead keeps AI-agent sandboxes alive for days. " +
		"Authenticate with `Authorization: Bearer <api key>` (or `X-API-Key`). " +
		"Errors are RFC 9457 problem documents (application/problem+json). " +
		"Sandbox ids may be given as names."
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "API key as a bearer token"},
		"apiKey": {Type: "apiKey", In: "header", Name: "X-API-Key", Description: "API key in a header"},
	}

	mux := http.NewServeMux()
	s := &server{b: b, log: logger, ver: version, mux: mux, met: opts.Metrics, adminKey: opts.AdminKeyPath, router: opts.Router}
	if s.adminKey == "" {
		s.adminKey = "/var/lib/stead/admin.key"
	}
	s.api = humago.New(mux, cfg)
	// Before any route is registered: huma binds a route's middlewares at
	// registration.
	s.api.UseMiddleware(s.sandboxScope, s.authorize, s.countActivity)

	s.registerHealth()
	s.registerMisc()
	s.registerSandboxes()
	s.registerExec()
	s.registerPTY()
	s.registerLogs()
	s.registerServiceInput()
	s.registerFiles()
	s.registerTemplates()
	if cb, ok := b.(CheckpointBackend); ok {
		s.registerCheckpoints(cb)
	}
	if sb, ok := b.(SnapshotBackend); ok {
		s.registerSnapshots(sb)
		s.registerSandboxSnapshots(sb)
	}
	if vb, ok := b.(VolumeBackend); ok {
		s.registerVolumes(vb)
	}
	if bb, ok := b.(BackupBackend); ok {
		s.registerBackup(bb)
	}
	if nb, ok := b.(NetworkBackend); ok {
		s.registerNetwork(nb)
	}
	if sb, ok := b.(SecretBackend); ok {
		s.registerSecrets(sb)
	}
	if db, ok := b.(DiskUsageBackend); ok {
		s.registerDiskUsage(db)
	}
	if rb, ok := b.(RetentionBackend); ok {
		s.registerRetention(rb)
	}
	if sb, ok := b.(ScheduleBackend); ok {
		s.registerSchedules(sb)
	}
	if bb, ok := b.(BudgetBackend); ok {
		s.registerBudgets(bb)
	}
	if ub, ok := b.(UpdateBackend); ok {
		s.registerUpdate(ub)
	}
	if qb, ok := b.(QuotaBackend); ok {
		s.registerQuotas(qb)
	}
	if wb, ok := b.(WarmPoolBackend); ok {
		s.registerWarmPools(wb)
	}
	s.registerSessionRoutes(b)
	s.registerAuditRoutes(b)
	s.registerTaskRoutes(b)
	s.registerOrientRoutes(b)
	if opts.Usage != nil {
		s.registerUsage(opts.Usage)
	}
	if opts.Events != nil {
		s.registerEvents(opts.Events)
	}
	if opts.Nodes != nil {
		s.registerNodes(opts.Nodes)
	}

	s.registerDocs()
	nonNullArrays(s.api.OpenAPI())
	describeOperations(s.api.OpenAPI())

	return s.logRequests(s.authenticate(s.forward(s.auditRequests(s.problemsForUnrouted(mux)))))
}

// security is the requirement attached to every /v1 operation.
var security = []map[string][]string{{"bearer": {}}, {"apiKey": {}}}

// op returns the common shape of an authenticated /v1 operation.
func (s *server) op(method, path, id, summary, tag string, status int) huma.Operation {
	return huma.Operation{
		OperationID:   id,
		Method:        method,
		Path:          path,
		Summary:       summary,
		Tags:          []string{tag},
		DefaultStatus: status,
		Security:      security,
		MaxBodyBytes:  MaxJSONBodyBytes,
		Errors:        []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound},
	}
}

// out is a response with a JSON body.
type out[T any] struct {
	Body T
}

// registerHealth adds GET /healthz.
func (s *server) registerHealth() {
	huma.Register(s.api, huma.Operation{
		OperationID: "healthz",
		Method:      http.MethodGet,
		Path:        "/healthz",
		Summary:     "Liveness check (no authentication)",
		Tags:        []string{"daemon"},
	}, func(ctx context.Context, _ *struct{}) (*out[client.Health], error) {
		return &out[client.Health]{Body: client.Health{Status: "ok", Version: s.ver}}, nil
	})
}

// principalKey is the context key of the authenticated Principal.
type principalKey struct{}

// PrincipalFromContext returns the principal that authenticated the request
// whose context this is.
func PrincipalFromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// principal returns the request's principal or a 401 if there is none
// (which the auth middleware makes impossible on /v1 routes).
func principal(ctx context.Context) (Principal, error) {
	p, ok := PrincipalFromContext(ctx)
	if !ok || p.TenantID == "" {
		return Principal{}, fmt.Errorf("no authenticated principal: %w", errs.ErrUnauthenticated)
	}
	return p, nil
}

// KeyFromRequest extracts the API key from the Authorization (Bearer) or
// X-API-Key header, as every authenticated route reads it.
func KeyFromRequest(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(token)
		}
		return ""
	}
	return strings.TrimSpace(r.Header.Get("X-API-Key"))
}

// authenticate requires an API key on every /v1 route and stores the
// resolved Principal in the request context.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1" && !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		key := KeyFromRequest(r)
		if key == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stead"`)
			s.writeProblem(w, r, "authenticate", fmt.Errorf(
				"missing API key: send \"Authorization: Bearer <key>\" or \"X-API-Key: <key>\" (the admin key is in %s): %w",
				s.adminKey, errs.ErrUnauthenticated))
			return
		}
		p, err := s.b.Authenticate(r.Context(), key)
		if err == nil && p.TenantID == "" {
			err = fmt.Errorf("authenticate: backend returned a principal without a tenant")
		}
		if errors.Is(err, errs.ErrForbidden) { // a valid key that may not be used now (suspended tenant)
			s.writeProblem(w, r, "authenticate", err)
			return
		}
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stead", error="invalid_token"`)
			s.writeProblem(w, r, "authenticate", fmt.Errorf("authenticate: invalid API key: %w", err))
			return
		}
		if p, err = s.actingTenant(r, p); err != nil {
			s.writeProblem(w, r, "authenticate", err)
			return
		}
		if info, ok := r.Context().Value(reqInfoKey{}).(*reqInfo); ok {
			info.tenant = p.TenantID
		}
		if p.Sandbox != "" && !sandboxScopeAllows(p.Sandbox, r.URL.Path) {
			s.writeProblem(w, r, "authenticate", sandboxTokenRefusal(p.Sandbox))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// reqInfoKey is the context key of the per-request *reqInfo.
type reqInfoKey struct{}

// reqInfo collects what the request log line reports.
type reqInfo struct {
	tenant string
}

// logRequests logs one line per request with stable keys.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &reqInfo{}
		sw := &StatusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, info)))
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		if s.met != nil {
			s.met.ObserveRequest(r.Method, s.routeTemplate(r), status, time.Since(start))
		}
		level := slog.LevelInfo
		if r.URL.Path == "/healthz" {
			level = slog.LevelDebug
		}
		s.log.Log(r.Context(), level, "http request",
			"method", r.Method, "path", r.URL.Path, "status", status,
			"tenant", info.tenant, "dur", time.Since(start))
	})
}

// StatusWriter records the status code while passing flushes and
// hijacks (websocket upgrades) through; the E2B handler logs with it too.
type StatusWriter struct {
	http.ResponseWriter
	status int
}

// Status is the status written so far (0: none yet).
func (w *StatusWriter) Status() int { return w.status }

// WriteHeader records the status.
func (w *StatusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200.
func (w *StatusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Flush flushes the underlying writer.
func (w *StatusWriter) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands the connection over (websocket upgrade).
func (w *StatusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.status = http.StatusSwitchingProtocols
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap returns the underlying writer for http.ResponseController.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeProblem writes err as an RFC 9457 problem document, for the few
// places that answer outside a huma handler.
func (s *server) writeProblem(w http.ResponseWriter, r *http.Request, op string, err error) {
	p := s.problem(r.Context(), op, err)
	body, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
