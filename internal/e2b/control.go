package e2b

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// maxBody caps a control-plane request body.
const maxBody = 1 << 20

// maxTimeout is the longest E2B timeout accepted (30 days).
const maxTimeout = 30 * 24 * 3600

// controlMux routes the control plane. Each path dispatches on the
// method itself, so a wrong method gets a 405 in E2B's error shape.
func (h *Handler) controlMux() http.Handler {
	mux := http.NewServeMux()
	route := func(path string, methods map[string]controlFunc) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			fn, ok := methods[r.Method]
			if !ok {
				allowed := make([]string, 0, len(methods))
				for m := range methods {
					allowed = append(allowed, m)
				}
				slices.Sort(allowed)
				w.Header().Set("Allow", strings.Join(allowed, ", "))
				refuse(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, strings.Join(allowed, ", ")))
				return
			}
			h.serveControl(w, r, r.Method+" "+path, fn)
		})
	}
	route("/sandboxes", map[string]controlFunc{http.MethodPost: h.create, http.MethodGet: h.listV1})
	route("/v2/sandboxes", map[string]controlFunc{http.MethodPost: h.create, http.MethodGet: h.listV2})
	route("/sandboxes/{id}", map[string]controlFunc{http.MethodGet: h.detail, http.MethodDelete: h.kill})
	route("/sandboxes/{id}/pause", map[string]controlFunc{http.MethodPost: h.pause})
	route("/sandboxes/{id}/resume", map[string]controlFunc{http.MethodPost: h.resume})
	route("/sandboxes/{id}/connect", map[string]controlFunc{http.MethodPost: h.connect})
	route("/v2/sandboxes/{id}/connect", map[string]controlFunc{http.MethodPost: h.connect})
	route("/sandboxes/{id}/timeout", map[string]controlFunc{http.MethodPost: h.setTimeout})
	route("/sandboxes/{id}/metrics", map[string]controlFunc{http.MethodGet: h.metrics})
	route("/sandboxes/{id}/snapshots", map[string]controlFunc{http.MethodPost: h.createSnapshot})
	route("/sandboxes/{id}/fork", map[string]controlFunc{http.MethodPost: h.fork})
	route("/sandboxes/{id}/network", map[string]controlFunc{http.MethodPut: h.updateNetwork})
	route("/snapshots", map[string]controlFunc{http.MethodGet: h.listSnapshots})
	route("/templates/{id}", map[string]controlFunc{http.MethodDelete: h.deleteTemplate})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		refuse(w, http.StatusNotFound, fmt.Sprintf("%s %s: no such route in stead's E2B API (docs/e2b.md lists what is supported)", r.Method, r.URL.Path))
	})
	return mux
}

// controlFunc serves one control-plane route for principal p.
type controlFunc func(w http.ResponseWriter, r *http.Request, p api.Principal)

// serveControl authenticates, serves, and records a call that changes
// something in the audit trail.
func (h *Handler) serveControl(w http.ResponseWriter, r *http.Request, route string, fn controlFunc) {
	p, status, msg := h.authenticate(r)
	if status != 0 {
		refuse(w, status, msg)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	sw := &api.StatusWriter{ResponseWriter: w}
	fn(sw, r, p)
	if r.Method != http.MethodGet {
		h.record(r, p.KeyID, p.TenantID, route, r.PathValue("id"), sw.Status())
	}
}

// decodeBody reads an optional JSON body into v; a malformed one is
// errs.ErrInvalid (an empty one leaves v as it is).
func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("request body over %d bytes: %w", maxBody, errs.ErrTooLarge)
		}
		return fmt.Errorf("read the request body: %w", errs.ErrInvalid)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("request body is not valid JSON for this route: %v: %w", err, errs.ErrInvalid)
	}
	return nil
}

// newSandboxBody is E2B's NewSandbox (POST /sandboxes, /v2/sandboxes).
type newSandboxBody struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *autoResume       `json:"autoResume"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             json.RawMessage   `json:"network"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	VolumeMounts        []json.RawMessage `json:"volumeMounts"`
	MCP                 json.RawMessage   `json:"mcp"`
	IAM                 json.RawMessage   `json:"iam"`
}

type autoResume struct {
	Enabled bool `json:"enabled"`
}

// present reports whether a raw JSON field carries something.
func present(m json.RawMessage) bool {
	s := string(bytes.TrimSpace(m))
	return s != "" && s != "null" && s != "{}"
}

// sandboxResponse is E2B's Sandbox: what create and connect return.
type sandboxResponse struct {
	SandboxID       string  `json:"sandboxID"`
	TemplateID      string  `json:"templateID"`
	Alias           string  `json:"alias,omitempty"`
	ClientID        string  `json:"clientID"`
	EnvdVersion     string  `json:"envdVersion"`
	EnvdAccessToken string  `json:"envdAccessToken"`
	Domain          *string `json:"domain"`
}

// sandboxDetail is E2B's SandboxDetail and ListedSandbox.
type sandboxDetail struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          *string           `json:"domain"`
	Lifecycle       lifecycle         `json:"lifecycle"`
	VolumeMounts    []struct{}        `json:"volumeMounts"`
}

type lifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

func (h *Handler) domain() *string {
	if h.opts.Domain == "" {
		return nil
	}
	d := h.opts.Domain
	return &d
}

func (h *Handler) response(sb client.Sandbox) sandboxResponse {
	return sandboxResponse{SandboxID: sb.ID, TemplateID: h.templateOf(sb), Alias: sb.Name, ClientID: "stead",
		EnvdVersion: EnvdVersion, EnvdAccessToken: accessToken(h.key, sb.Tenant, sb.ID), Domain: h.domain()}
}

// defaultTemplate is the template a stead create without one uses.
const defaultTemplate = "host"

// templateOf names the sandbox's template as E2B sees it: "base" for the
// one "base" maps to.
func (h *Handler) templateOf(sb client.Sandbox) string {
	base := h.opts.Templates["base"]
	if base == "" {
		base = defaultTemplate
	}
	if sb.Template == base {
		return "base"
	}
	return sb.Template
}

// e2bState is the E2B state of a stead sandbox: running, or paused for
// every state whose files are kept and which connect brings back.
func e2bState(state string) string {
	if state == "running" || state == "creating" {
		return "running"
	}
	return "paused"
}

func (h *Handler) detailOf(sb client.Sandbox, withToken bool) sandboxDetail {
	started := sb.CreatedAt
	if sb.StartedAt != nil {
		started = *sb.StartedAt
	}
	end := h.opts.Now()
	if d, err := time.ParseDuration(sb.IdleTimeout); err == nil && d > 0 && e2bState(sb.State) == "running" {
		end = end.Add(d)
	} else if sb.StoppedAt != nil {
		end = *sb.StoppedAt
	}
	md := sb.Labels
	if md == nil {
		md = map[string]string{}
	}
	d := sandboxDetail{SandboxID: sb.ID, TemplateID: h.templateOf(sb), Alias: sb.Name, ClientID: "stead",
		StartedAt: started.UTC(), EndAt: end.UTC(), CPUCount: int(math.Ceil(sb.Limits.CPUs)),
		MemoryMB: sb.Limits.MemoryBytes >> 20, DiskSizeMB: sb.Limits.DiskBytes >> 20, Metadata: md,
		State: e2bState(sb.State), EnvdVersion: EnvdVersion, Domain: h.domain(),
		Lifecycle: lifecycle{OnTimeout: "pause", AutoResume: sb.AutoResume}, VolumeMounts: []struct{}{}}
	if withToken {
		d.EnvdAccessToken = accessToken(h.key, sb.Tenant, sb.ID)
	}
	return d
}

// get returns the tenant's sandbox id; a deleted one is absent, as E2B
// knows no deleted sandboxes.
func (h *Handler) get(r *http.Request, p api.Principal, id string) (client.Sandbox, error) {
	sb, err := h.b.GetSandbox(r.Context(), p.TenantID, id)
	if err != nil {
		return sb, err
	}
	if sb.State == "deleted" {
		return client.Sandbox{}, fmt.Errorf("sandbox %s: %w", id, errs.ErrNotFound)
	}
	return sb, nil
}

// timeoutSeconds checks an E2B timeout.
func timeoutSeconds(t int64) (string, error) {
	if t <= 0 || t > maxTimeout {
		return "", fmt.Errorf("timeout %d: want seconds from 1 to %d: %w", t, maxTimeout, errs.ErrInvalid)
	}
	return strconv.FormatInt(t, 10) + "s", nil
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request, p api.Principal) {
	const op = "create sandbox"
	var body newSandboxBody
	if err := decodeBody(r, &body); err != nil {
		h.fail(w, r, op, err)
		return
	}
	unsupported := ""
	switch {
	case len(body.VolumeMounts) > 0:
		unsupported = "volumeMounts"
	case present(body.MCP):
		unsupported = "mcp"
	case present(body.IAM):
		unsupported = "iam"
	case body.AutoResume != nil && body.AutoResume.Enabled:
		unsupported = "autoResume"
	}
	if unsupported != "" {
		h.fail(w, r, op, fmt.Errorf("%s is not supported by stead's E2B API yet (docs/e2b.md); nothing was created: %w", unsupported, errs.ErrInvalid))
		return
	}
	var net networkBody
	if present(body.Network) {
		if err := json.Unmarshal(body.Network, &net); err != nil {
			h.fail(w, r, op, fmt.Errorf("network: %v: %w", err, errs.ErrInvalid))
			return
		}
	}
	net.AllowInternetAccess = body.AllowInternetAccess
	var policy *client.NetworkPolicy
	if present(body.Network) || body.AllowInternetAccess != nil {
		pol, err := steadPolicy(net)
		if err != nil {
			h.fail(w, r, op, err)
			return
		}
		policy = &pol
	}
	timeout := int64(300)
	if body.Timeout != nil {
		timeout = *body.Timeout
	}
	idle, err := timeoutSeconds(timeout)
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	onIdle := h.opts.OnTimeout
	if body.AutoPause != nil && *body.AutoPause {
		onIdle = "pause"
		if body.AutoPauseMemory != nil && !*body.AutoPauseMemory {
			onIdle = "stop"
		}
	}
	if strings.HasPrefix(body.TemplateID, snapshotPrefix) {
		if policy != nil {
			h.fail(w, r, op, fmt.Errorf("network rules when creating from a snapshot are not supported (the snapshot's own apply; update them after); nothing was created: %w", errs.ErrInvalid))
			return
		}
		h.createFromSnapshot(w, r, p, body.TemplateID, idle, onIdle, body)
		return
	}
	tmpl := body.TemplateID
	if tmpl == "" {
		tmpl = "base"
	}
	if t, ok := h.opts.Templates[tmpl]; ok {
		tmpl = t
	} else if tmpl == "base" {
		tmpl = ""
	}
	sb, err := h.b.CreateSandbox(r.Context(), p.TenantID, client.CreateSandboxRequest{Template: tmpl, Env: body.EnvVars,
		Labels: body.Metadata, IdleTimeout: idle, OnIdle: onIdle, Network: policy})
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	h.linkHome(r, p.TenantID, sb.ID)
	writeJSON(w, http.StatusCreated, h.response(sb))
}

// linkHome makes /home/user (E2B's home) a link to /home/agent (stead's
// agent's home) when the sandbox has no /home/user, so paths written for
// E2B land in the agent's home. It writes the link through the file API
// (a one-entry tar extracted by the safe helpers), not with an exec in
// the sandbox. Best effort: a failure is logged.
func (h *Handler) linkHome(r *http.Request, tenant, id string) {
	_, err := h.b.StatFile(r.Context(), tenant, id, e2bHome)
	if err == nil {
		return // the template has one
	}
	if errors.Is(err, errs.ErrNotFound) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: path.Base(e2bHome), Typeflag: tar.TypeSymlink, Linkname: path.Base(agentHome),
			Mode: 0o777, ModTime: h.opts.Now()})
		tw.Close()
		err = h.b.UploadTar(r.Context(), tenant, id, path.Dir(e2bHome), &buf)
	}
	if err != nil {
		h.log.WarnContext(r.Context(), "e2b: link /home/user to /home/agent", "sandbox", id, "err", err)
	}
}

func (h *Handler) detail(w http.ResponseWriter, r *http.Request, p api.Principal) {
	sb, err := h.get(r, p, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, "get sandbox", err)
		return
	}
	writeJSON(w, http.StatusOK, h.detailOf(sb, true))
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request, p api.Principal) {
	const op = "kill sandbox"
	sb, err := h.get(r, p, r.PathValue("id"))
	if err == nil {
		_, err = h.b.DeleteSandbox(r.Context(), p.TenantID, sb.ID, false)
		h.forgetSandbox(target{p.TenantID, sb.ID})
	}
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pauseBody is the body of POST /sandboxes/{id}/pause.
type pauseBody struct {
	Memory *bool `json:"memory"`
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request, p api.Principal) {
	const op = "pause sandbox"
	var body pauseBody
	if err := decodeBody(r, &body); err != nil {
		h.fail(w, r, op, err)
		return
	}
	sb, err := h.get(r, p, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	if sb.State != "running" {
		refuse(w, http.StatusConflict, fmt.Sprintf("sandbox %s is %s, not running; nothing was changed", sb.ID, e2bState(sb.State)))
		return
	}
	if body.Memory != nil && !*body.Memory {
		_, err = h.b.StopSandbox(r.Context(), p.TenantID, sb.ID)
	} else {
		_, err = h.b.PauseSandbox(r.Context(), p.TenantID, sb.ID)
	}
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connectBody is the body of connect and of the legacy resume.
type connectBody struct {
	Timeout   *int64 `json:"timeout"`
	AutoPause *bool  `json:"autoPause"`
	Memory    *bool  `json:"memory"`
}

// wake brings a sandbox back to running: resume a paused one, start a
// stopped or archived one. It reports whether it did anything.
func (h *Handler) wake(r *http.Request, p api.Principal, sb client.Sandbox) (client.Sandbox, bool, error) {
	switch sb.State {
	case "running", "creating":
		return sb, false, nil
	case "paused":
		sb, err := h.b.ResumeSandbox(r.Context(), p.TenantID, sb.ID)
		return sb, true, err
	}
	sb, err := h.b.StartSandbox(r.Context(), p.TenantID, sb.ID)
	return sb, true, err
}

// connectOrResume serves connect (resumeOnly false) and the legacy
// resume (true: a running sandbox is a 409).
func (h *Handler) connectOrResume(w http.ResponseWriter, r *http.Request, p api.Principal, resumeOnly bool) {
	const op = "connect to sandbox"
	var body connectBody
	if err := decodeBody(r, &body); err != nil {
		h.fail(w, r, op, err)
		return
	}
	var upd client.UpdateSandboxRequest
	if body.Timeout != nil {
		idle, err := timeoutSeconds(*body.Timeout)
		if err != nil {
			h.fail(w, r, op, err)
			return
		}
		upd.IdleTimeout = &idle
	}
	if body.AutoPause != nil && *body.AutoPause {
		pause := "pause"
		upd.OnIdle = &pause
	}
	sb, err := h.get(r, p, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	if resumeOnly && e2bState(sb.State) == "running" {
		refuse(w, http.StatusConflict, fmt.Sprintf("sandbox %s is already running; nothing was changed", sb.ID))
		return
	}
	if upd.IdleTimeout != nil || upd.OnIdle != nil {
		if sb, err = h.b.UpdateSandbox(r.Context(), p.TenantID, sb.ID, upd); err != nil {
			h.fail(w, r, op, err)
			return
		}
	}
	sb, woke, err := h.wake(r, p, sb)
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	status := http.StatusOK
	if woke {
		status = http.StatusCreated
	}
	writeJSON(w, status, h.response(sb))
}

func (h *Handler) connect(w http.ResponseWriter, r *http.Request, p api.Principal) {
	h.connectOrResume(w, r, p, false)
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request, p api.Principal) {
	h.connectOrResume(w, r, p, true)
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request, p api.Principal) {
	const op = "set sandbox timeout"
	var body struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeBody(r, &body); err != nil {
		h.fail(w, r, op, err)
		return
	}
	if body.Timeout == nil {
		h.fail(w, r, op, fmt.Errorf("timeout is required (seconds): %w", errs.ErrInvalid))
		return
	}
	idle, err := timeoutSeconds(*body.Timeout)
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	sb, err := h.get(r, p, r.PathValue("id"))
	if err == nil {
		_, err = h.b.UpdateSandbox(r.Context(), p.TenantID, sb.ID, client.UpdateSandboxRequest{IdleTimeout: &idle})
	}
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listQuery is what the list routes filter by.
type listQuery struct {
	metadata map[string]string
	states   map[string]bool
}

// parseListQuery reads metadata (a URL-encoded query string of
// key=value pairs, each key and value itself URL-encoded, as the SDKs
// send it) and state (running, paused; comma-separated or repeated).
func parseListQuery(q url.Values) (listQuery, error) {
	lq := listQuery{metadata: map[string]string{}, states: map[string]bool{}}
	if m := q.Get("metadata"); m != "" {
		pairs, err := url.ParseQuery(m)
		if err != nil {
			return lq, fmt.Errorf("metadata %q: want key=value pairs joined by &: %w", m, errs.ErrInvalid)
		}
		for k, vs := range pairs {
			key, err1 := url.QueryUnescape(k)
			val, err2 := url.QueryUnescape(vs[len(vs)-1])
			if err1 != nil || err2 != nil {
				return lq, fmt.Errorf("metadata %q: bad escape: %w", m, errs.ErrInvalid)
			}
			lq.metadata[key] = val
		}
	}
	for _, v := range q["state"] {
		for s := range strings.SplitSeq(v, ",") {
			if s != "running" && s != "paused" {
				return lq, fmt.Errorf("state %q: want running or paused: %w", s, errs.ErrInvalid)
			}
			lq.states[s] = true
		}
	}
	return lq, nil
}

// list returns the tenant's sandboxes that q selects, oldest first.
func (h *Handler) list(r *http.Request, p api.Principal, q listQuery) ([]client.Sandbox, error) {
	all, err := h.b.ListSandboxes(r.Context(), p.TenantID, false)
	if err != nil {
		return nil, err
	}
	var out []client.Sandbox
	for _, sb := range all {
		if sb.State == "deleted" {
			continue
		}
		if len(q.states) > 0 && !q.states[e2bState(sb.State)] {
			continue
		}
		ok := true
		for k, v := range q.metadata {
			ok = ok && sb.Labels[k] == v
		}
		if ok {
			out = append(out, sb)
		}
	}
	slices.SortStableFunc(out, func(a, b client.Sandbox) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// listV1 is GET /sandboxes: the running sandboxes, no paging.
func (h *Handler) listV1(w http.ResponseWriter, r *http.Request, p api.Principal) {
	q, err := parseListQuery(r.URL.Query())
	if err == nil && len(q.states) == 0 {
		q.states["running"] = true
	}
	var list []client.Sandbox
	if err == nil {
		list, err = h.list(r, p, q)
	}
	if err != nil {
		h.fail(w, r, "list sandboxes", err)
		return
	}
	out := make([]sandboxDetail, 0, len(list))
	for _, sb := range list {
		out = append(out, h.detailOf(sb, false))
	}
	writeJSON(w, http.StatusOK, out)
}

// maxPage is the largest page of GET /v2/sandboxes (and its default).
const maxPage = 100

// listV2 is GET /v2/sandboxes: filtered by metadata and state, paged by
// limit and nextToken (the next page's token comes in X-Next-Token).
func (h *Handler) listV2(w http.ResponseWriter, r *http.Request, p api.Principal) {
	const op = "list sandboxes"
	qv := r.URL.Query()
	q, err := parseListQuery(qv)
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	limit, offset, err := pageOf(qv.Get("limit"), qv.Get("nextToken"))
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	list, err := h.list(r, p, q)
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	page := list[min(offset, len(list)):]
	if len(page) > limit {
		page = page[:limit]
		w.Header().Set("X-Next-Token", pageToken(offset+limit))
	}
	out := make([]sandboxDetail, 0, len(page))
	for _, sb := range page {
		out = append(out, h.detailOf(sb, false))
	}
	writeJSON(w, http.StatusOK, out)
}
