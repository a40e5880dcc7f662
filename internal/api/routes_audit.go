package api

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// auditIntro opens the description of every audit route.
const auditIntro = "The audit trail records every state-changing API request (any method but GET, HEAD and OPTIONS, " +
	"failed and refused ones included; requests without a valid API key are not recorded) and every lifecycle " +
	"transition the daemon makes on its own, in an append-only, hash-chained log with ed25519-signed checkpoints. " +
	"It lives outside every sandbox and survives sandbox deletion and purge. Admin keys only; an admin of the " +
	"default tenant reads every tenant's entries, other admins their own tenant's. "

// auditRecordTimeout bounds recording one request in the trail.
const auditRecordTimeout = 10 * time.Second

// AuditListInput is the query of GET /v1/audit and /v1/audit/export
// (exported only because huma ignores unexported embedded fields).
type AuditListInput struct {
	Since string `query:"since" doc:"Only entries at or after this time (RFC 3339)"`
	After string `query:"after" maxLength:"20" pattern:"^[0-9]*$" doc:"Cursor: only entries with a greater seq (a page's next)"`
}

// query parses the input into a client.AuditQuery.
func (in AuditListInput) query(limit int) (client.AuditQuery, error) {
	q := client.AuditQuery{Limit: limit}
	if in.After != "" {
		n, err := strconv.ParseInt(in.After, 10, 64)
		if err != nil || n < 0 {
			return q, fmt.Errorf("after %q is not a seq: %w", in.After, errs.ErrInvalid)
		}
		q.After = n
	}
	if in.Since != "" {
		t, err := time.Parse(time.RFC3339Nano, in.Since)
		if err != nil {
			return q, fmt.Errorf("since %q is not an RFC 3339 time: %w", in.Since, errs.ErrInvalid)
		}
		q.Since = t
	}
	return q, nil
}

// auditAdmin returns the caller if it holds an admin key.
func auditAdmin(ctx context.Context) (Principal, error) {
	p, err := principal(ctx)
	if err != nil {
		return Principal{}, err
	}
	if !p.AdministersTenant() {
		return Principal{}, fmt.Errorf("the audit trail needs a tenant-admin or admin key: %w", errs.ErrForbidden)
	}
	return p, nil
}

// registerAuditRoutes adds the /v1/audit routes when the backend serves
// the audit trail (AuditBackend).
func (s *server) registerAuditRoutes(b Backend) {
	ab, ok := b.(AuditBackend)
	if !ok {
		return
	}
	const tag = "audit"
	forbidden := []int{http.StatusForbidden}

	list := s.op(http.MethodGet, "/v1/audit", "list-audit", "List audit trail entries", tag, 0)
	list.Description = auditIntro + "Entries come by seq, oldest first, at most limit of them (default 100, at most " +
		"1000); page with after=<last seq seen>."
	list.Errors = append(list.Errors, forbidden...)
	huma.Register(s.api, list, func(ctx context.Context, in *struct {
		AuditListInput
		Limit int `query:"limit" minimum:"0" maximum:"1000" doc:"At most this many entries (default 100)"`
	}) (*out[client.Page[client.AuditEntry]], error) {
		const op = "list audit trail"
		p, err := auditAdmin(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		q, err := in.query(cmp.Or(in.Limit, defaultPageSize))
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		es, err := ab.ListAudit(ctx, p, q)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		page := client.Page[client.AuditEntry]{Items: append([]client.AuditEntry{}, es...)}
		if n := len(es); n > 0 && n >= q.Limit && q.Limit > 0 {
			page.More, page.Next = true, strconv.FormatInt(es[n-1].Seq, 10)
		}
		return &out[client.Page[client.AuditEntry]]{Body: page}, nil
	})

	export := s.op(http.MethodGet, "/v1/audit/export", "export-audit", "Export the audit trail as JSONL", tag, http.StatusOK)
	export.Description = auditIntro + "Streams every entry (since the given time, after the given seq) as JSON " +
		"Lines: one entry object per line, by seq, with its prev_hash and hash, so the chain can be re-checked offline."
	export.Errors = append(export.Errors, forbidden...)
	export.Responses = map[string]*huma.Response{
		"200": {
			Description: "One audit entry (JSON) per line",
			Content:     map[string]*huma.MediaType{"application/jsonl": {Schema: &huma.Schema{Type: "string"}}},
		},
	}
	huma.Register(s.api, export, func(ctx context.Context, in *AuditListInput) (*huma.StreamResponse, error) {
		const op = "export audit trail"
		p, err := auditAdmin(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		q, err := in.query(0)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			r, w := humago.Unwrap(hc)
			w.Header().Set("Content-Type", "application/jsonl")
			w.WriteHeader(http.StatusOK)
			if err := ab.ExportAudit(r.Context(), p, q, w); err != nil && r.Context().Err() == nil {
				// The status is sent: the client sees a short stream.
				s.log.Log(r.Context(), logLevelFor(err), "export audit trail", "tenant", p.TenantID, "err", err)
			}
		}}, nil
	})

	verify := s.op(http.MethodGet, "/v1/audit/verify", "verify-audit", "Verify the audit trail", tag, 0)
	verify.Description = auditIntro + "Walks the whole chain (every tenant's entries) and checks every link, every " +
		"entry's hash and every signed checkpoint, and compares the database with the trail's witnesses (the " +
		"signed head also kept in a file beside the database and in the repository). ok is false when any entry " +
		"was edited, deleted, inserted or reordered, the tail was truncated, a signed checkpoint is missing, a " +
		"row is malformed or a witness is missing or signed by another key; problems lists each by seq and kind, " +
		"bad_seq and problem repeat the first; witnesses says how the database compares with each. The answer " +
		"is 200 either way."
	verify.Errors = append(verify.Errors, forbidden...)
	huma.Register(s.api, verify, func(ctx context.Context, _ *struct{}) (*out[client.AuditReport], error) {
		const op = "verify audit trail"
		p, err := auditAdmin(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		rep, err := ab.VerifyAudit(ctx, p)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.AuditReport]{Body: rep}, nil
	})

	cp := s.op(http.MethodPost, "/v1/audit/checkpoints", "checkpoint-audit",
		"Sign a checkpoint of the audit trail's head now", tag, http.StatusCreated)
	cp.Description = auditIntro + "The daemon signs checkpoints on its own (every N entries and periodically); " +
		"this signs one of the current head at once, e.g. before an export. 409 while the trail is empty."
	cp.Errors = append(cp.Errors, http.StatusConflict, http.StatusForbidden)
	huma.Register(s.api, cp, func(ctx context.Context, _ *struct{}) (*out[client.AuditCheckpoint], error) {
		const op = "sign audit checkpoint"
		p, err := auditAdmin(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		c, err := ab.CheckpointAudit(ctx, p)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.AuditCheckpoint]{Body: c}, nil
	})
}

// auditRequests records every state-changing request (any method but GET,
// HEAD and OPTIONS) in the audit trail once it has been answered, failed
// and refused ones included, when the backend implements AuditBackend.
//
// It runs inside authenticate, so only requests with a valid API key reach
// it: a 401 (missing or unknown key) is deliberately not recorded, since it
// changes nothing and recording it would let anyone without a key fill the
// trail. A 403 of an authenticated caller is recorded.
//
// The entry is appended once the handler has answered and before that
// answer is complete at the caller (the server holds it in its buffer; a
// streamed answer ends after the append), so a caller that has a whole
// answer has its entry in the trail, kill -9 or not (an e2e test kills the
// daemon after each answer). Sending the answer first was measured (0.5-1.2
// ms off a create and an exec) and refused for that reason. A failure to
// append cannot change the answer any more and is logged at error level.
func (s *server) auditRequests(next http.Handler) http.Handler {
	ab, ok := s.b.(AuditBackend)
	if !ok {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		aw := &auditWriter{ResponseWriter: w}
		panicked := true
		defer func() {
			status := aw.status
			switch {
			case panicked:
				status = http.StatusInternalServerError
			case status == 0:
				status = http.StatusOK
			}
			s.recordRequest(ab, r, aw, status)
		}()
		next.ServeHTTP(aw, r)
		panicked = false
	})
}

// maxAuditPath caps the path recorded for a request no route matched.
const maxAuditPath = 256

// recordRequest appends one answered request to the trail.
func (s *server) recordRequest(ab AuditBackend, r *http.Request, aw *auditWriter, status int) {
	ev := AuditEvent{Status: status}
	if p, ok := PrincipalFromContext(r.Context()); ok {
		ev.Actor, ev.Tenant = p.KeyID, p.TenantID
		if ev.Actor == "" && p.Sandbox != "" {
			ev.Actor = "sandbox:" + p.Sandbox
		}
	}
	// The mux set r.Pattern ("POST /v1/sandboxes/{id}/stop") on this very
	// request; it is empty when no route matched.
	ev.Action = r.Pattern
	if ev.Action == "" {
		path := r.URL.Path
		if len(path) > maxAuditPath {
			path = path[:maxAuditPath] + "..."
		}
		ev.Action = r.Method + " " + path
	} else if ev.Target = r.PathValue("id"); ev.Target == "" {
		ev.Target = r.PathValue("name") // a secret's
	}
	if ev.Target == "" && status == http.StatusCreated {
		ev.Target = aw.createdID()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditRecordTimeout)
	defer cancel()
	t0 := time.Now()
	if err := ab.RecordAPIRequest(ctx, ev); err != nil {
		s.log.ErrorContext(ctx, "record request in the audit trail", "action", ev.Action, "target", ev.Target,
			"status", ev.Status, "tenant", ev.Tenant, "err", err)
		return
	}
	s.log.DebugContext(ctx, "request audited", "action", ev.Action, "target", ev.Target, "dur", time.Since(t0))
}

// maxCreatedBody is how much of a 201 response auditWriter keeps to find
// the created resource's id.
const maxCreatedBody = 64 << 10

// auditWriter records the status and, for a 201, the start of the body,
// while passing flushes and hijacks (websocket upgrades) through.
type auditWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

// WriteHeader records the status.
func (w *auditWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200 and keeps the start of a 201 body.
func (w *auditWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.status == http.StatusCreated && w.body.Len() < maxCreatedBody {
		w.body.Write(p[:min(len(p), maxCreatedBody-w.body.Len())])
	}
	return w.ResponseWriter.Write(p)
}

// Flush flushes the underlying writer.
func (w *auditWriter) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands the connection over (websocket upgrade).
func (w *auditWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.status = http.StatusSwitchingProtocols
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap returns the underlying writer for http.ResponseController.
func (w *auditWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// createdID returns the "id" of a JSON object response, or "".
func (w *auditWriter) createdID() string {
	if !strings.Contains(w.Header().Get("Content-Type"), "json") {
		return ""
	}
	var v struct {
		ID string `json:"id" doc:"Unique id"`
	}
	if json.Unmarshal(w.body.Bytes(), &v) != nil {
		return ""
	}
	return v.ID
}
