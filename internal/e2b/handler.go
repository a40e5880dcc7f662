package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/files"
	"github.com/stead-dev/stead/internal/sandbox"
)

// EnvdPort is the port E2B's SDKs address the data plane on.
const EnvdPort = "49983"

// EnvdVersion is the envd version the control plane reports. The SDKs
// gate features on it: 0.4.0 lets a call without a user run as the
// sandbox's default user, 0.5.2 enables closeStdin; it stays below what
// stead does not serve (octet-stream uploads by default 0.5.7, file
// metadata 0.6.2, entries in watch events 0.6.3).
const EnvdVersion = "0.5.2"

// Backend is what the E2B API is served by: stead's sandbox service, the
// same methods the stead API calls (see api.Backend). Every method gets
// the caller's tenant and treats another tenant's sandbox as absent.
type Backend interface {
	Authenticate(ctx context.Context, secret string) (api.Principal, error)
	CreateSandbox(ctx context.Context, tenant string, req client.CreateSandboxRequest) (client.Sandbox, error)
	GetSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error)
	ListSandboxes(ctx context.Context, tenant string, includeDeleted bool) ([]client.Sandbox, error)
	StartSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error)
	StopSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error)
	PauseSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error)
	ResumeSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error)
	DeleteSandbox(ctx context.Context, tenant, id string, purge bool) (client.Sandbox, error)
	// UpdateSandbox changes the idle policy (see api.UpdateBackend).
	UpdateSandbox(ctx context.Context, tenant, id string, req client.UpdateSandboxRequest) (client.Sandbox, error)

	Exec(ctx context.Context, tenant, id string, req client.ExecRequest, out api.ExecStream) (client.ExecResult, error)
	// ExecInput is Exec with the command's standard input read from
	// stdin while it runs (see sandbox.Service.ExecInput).
	ExecInput(ctx context.Context, tenant, id string, req client.ExecRequest, stdin io.Reader, out api.ExecStream) (client.ExecResult, error)
	// OpenPTY starts a process on a terminal (see api.Backend).
	OpenPTY(ctx context.Context, tenant, id string, req api.PTYRequest) (api.PTY, error)

	ReadFile(ctx context.Context, tenant, id, path string) (io.ReadCloser, client.FileInfo, error)
	WriteFile(ctx context.Context, tenant, id, path string, mode uint32, r io.Reader) (client.FileInfo, error)
	StatFile(ctx context.Context, tenant, id, path string) (client.FileInfo, error)
	ListFiles(ctx context.Context, tenant, id, path string) ([]client.FileInfo, error)
	Mkdir(ctx context.Context, tenant, id, path string, parents bool) error
	RemoveFile(ctx context.Context, tenant, id, path string, recursive bool) error
	RenameFile(ctx context.Context, tenant, id, from, to string) error
	UploadTar(ctx context.Context, tenant, id, path string, r io.Reader) error
	// WatchDir watches a directory of the sandbox (see
	// sandbox.Service.WatchDir).
	WatchDir(ctx context.Context, tenant, id, path string, recursive bool) (*files.Watcher, error)
	// SampleResources reads a running sandbox's resource use (see
	// sandbox.Service.SampleResources).
	SampleResources(ctx context.Context, tenant, id string) (sandbox.ResourceSample, error)
	// The snapshots and forks behind E2B's snapshot and fork routes.
	api.SnapshotBackend
	// The egress policy behind E2B's network rules.
	api.NetworkBackend
}

// Options configure the E2B API.
type Options struct {
	// Backend serves every call (required). When it also implements
	// api.AuditBackend, every E2B call that changes something is
	// recorded in the audit trail as "e2b <method> <route>".
	Backend Backend
	// Key derives the sandboxes' envd access tokens (required; keep it
	// across restarts, or the SDKs' tokens stop working).
	Key []byte
	// Templates maps E2B template ids to stead template ids; "base"
	// (and an empty id) map to Templates["base"], "" being the daemon's
	// default template. An id not in the map is taken as a stead
	// template id.
	Templates map[string]string
	// OnTimeout is what an E2B timeout does when the create asks for no
	// auto-pause: "stop" (default; the files are kept) or "pause". It
	// never destroys the sandbox.
	OnTimeout string
	// Domain, when set, is reported to the SDKs as the sandboxes' domain
	// and routes Host 49983-<id>.<Domain> to the data plane.
	Domain string
	// Logger gets refusals and internal errors (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Handler serves both planes of the E2B API.
type Handler struct {
	b       Backend
	audit   api.AuditBackend
	key     []byte
	opts    Options
	log     *slog.Logger
	control http.Handler
	envd    http.Handler

	mu       sync.Mutex
	nextPid  uint32
	procs    map[procKey]*process
	watchers map[string]*polledWatcher
	samples  map[target]sandbox.ResourceSample // the last, for CPU percentages
}

// New returns the E2B API handler.
func New(opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.OnTimeout == "" {
		opts.OnTimeout = "stop"
	}
	// A key of its own, so an envd token is never valid elsewhere.
	m := hmac.New(sha256.New, opts.Key)
	m.Write([]byte("stead e2b envd access tokens"))
	h := &Handler{b: opts.Backend, key: m.Sum(nil), opts: opts, log: opts.Logger, nextPid: 1000, procs: map[procKey]*process{},
		watchers: map[string]*polledWatcher{}, samples: map[target]sandbox.ResourceSample{}}
	if len(opts.Key) == 0 {
		h.key = nil // no token is valid
	}
	h.audit, _ = opts.Backend.(api.AuditBackend)
	h.control = h.controlMux()
	h.envd = h.envdMux()
	return h
}

// Mount returns a handler that serves the E2B planes and passes every
// other request to next.
func (h *Handler) Mount(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case h.envdSandbox(r) != "":
			h.serveLogged(w, r, "envd", h.envd)
		case isControlPath(r.URL.Path):
			h.serveLogged(w, r, "control", h.control)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// serveLogged serves r with plane and logs one line for it, as the stead
// API does for its own requests.
func (h *Handler) serveLogged(w http.ResponseWriter, r *http.Request, plane string, next http.Handler) {
	start := h.opts.Now()
	sw := &api.StatusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	h.log.InfoContext(r.Context(), "e2b request", "plane", plane, "method", r.Method, "path", r.URL.Path,
		"sandbox", h.envdSandbox(r), "status", sw.Status(), "dur", h.opts.Now().Sub(start))
}

// SandboxOf returns the sandbox an E2B request acts on, for a cluster
// that sends it to the sandbox's node: the data plane's sandbox (the
// E2b-Sandbox-Id header, or the Host 49983-<id>.<domain>), or the {id} of
// a control-plane route /sandboxes/{id}[/...] or /v2/sandboxes/{id}/...;
// false for every other request (creates and lists among them, and
// anything not E2B's).
func (h *Handler) SandboxOf(r *http.Request) (string, bool) {
	if id := h.envdSandbox(r); id != "" {
		return id, true
	}
	for _, prefix := range []string{"/sandboxes/", "/v2/sandboxes/"} {
		if rest, ok := strings.CutPrefix(r.URL.Path, prefix); ok {
			id, _, _ := strings.Cut(rest, "/")
			return id, id != ""
		}
	}
	return "", false
}

// IsCreate reports whether r is an E2B create (POST /sandboxes or
// /v2/sandboxes), for a cluster that places it.
func IsCreate(r *http.Request) bool {
	return r.Method == http.MethodPost && (r.URL.Path == "/sandboxes" || r.URL.Path == "/v2/sandboxes")
}

// isControlPath reports whether path belongs to the E2B control plane.
func isControlPath(path string) bool {
	for _, p := range []string{"/sandboxes", "/v2/sandboxes", "/snapshots", "/templates"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// envdSandbox returns the sandbox id a data-plane request names: the
// E2b-Sandbox-Id header, or the Host 49983-<id>.<domain>; "" for a
// request of another plane.
func (h *Handler) envdSandbox(r *http.Request) string {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		return id
	}
	id, _ := EnvdHostSandbox(r.Host, h.opts.Domain)
	return id
}

// EnvdHostSandbox returns the sandbox of a data-plane Host
// "49983-<id>.<domain>[:port]" (domain as Options.Domain), false for any
// other host and when domain is "".
func EnvdHostSandbox(host, domain string) (string, bool) {
	if domain == "" {
		return "", false
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	label, ok := strings.CutSuffix(host, "."+domain)
	if !ok {
		return "", false
	}
	port, id, ok := strings.Cut(label, "-")
	if !ok || port != EnvdPort || id == "" {
		return "", false
	}
	return id, true
}

// apiError is the body of every control-plane and /files error.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// fail answers with err in E2B's error shape; a 5xx is logged and its
// detail withheld.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, op string, err error) {
	status := api.HTTPStatus(err)
	msg := errs.Message(err)
	if status >= 500 && status != http.StatusNotImplemented {
		h.log.ErrorContext(r.Context(), "e2b request failed", "op", op, "err", err)
		msg = "internal error in " + op + "; the daemon log has the details"
	}
	writeJSON(w, status, apiError{Code: status, Message: msg})
}

// refuse answers with status and msg in E2B's error shape.
func refuse(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Code: status, Message: msg})
}

// authenticate resolves the request's API key (X-API-KEY, or a bearer
// token) to a principal that may use the E2B routes: an unscoped key of
// a tenant; a read-only key only reads.
func (h *Handler) authenticate(r *http.Request) (api.Principal, int, string) {
	key := r.Header.Get("X-API-Key")
	if key == "" {
		key, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	if key == "" {
		return api.Principal{}, http.StatusUnauthorized, "missing API key (X-API-KEY: a stead API key, or its e2b_ form)"
	}
	p, err := h.b.Authenticate(r.Context(), decodeKey(key))
	if err != nil {
		status := api.HTTPStatus(err)
		if status == http.StatusInternalServerError {
			h.log.ErrorContext(r.Context(), "e2b authenticate", "err", err)
			return api.Principal{}, status, "internal error while checking the API key"
		}
		if errors.Is(err, errs.ErrUnauthenticated) {
			return api.Principal{}, http.StatusUnauthorized, "invalid API key"
		}
		return api.Principal{}, status, errs.Message(err)
	}
	switch {
	case p.Sandbox != "":
		return api.Principal{}, http.StatusForbidden, "a sandbox token cannot use the E2B API; use an API key of the tenant"
	case p.Scoped():
		return api.Principal{}, http.StatusForbidden, "the E2B API needs a key not limited to some sandboxes"
	case p.EffectiveRole() == client.RoleReadOnly && r.Method != http.MethodGet:
		return api.Principal{}, http.StatusForbidden, r.Method + " needs a tenant-user key or above; this key is read-only"
	}
	return p, 0, ""
}

// record appends one answered call to the audit trail.
func (h *Handler) record(r *http.Request, actor, tenant, action, target string, status int) {
	if h.audit == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
	defer cancel()
	ev := api.AuditEvent{Actor: actor, Tenant: tenant, Action: "e2b " + action, Target: target, Status: status}
	if err := h.audit.RecordAPIRequest(ctx, ev); err != nil {
		h.log.ErrorContext(ctx, "record e2b request in the audit trail", "action", ev.Action, "target", target, "err", err)
	}
}
