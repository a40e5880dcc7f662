package e2b

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// snapshotPrefix starts the ids of stead's snapshots: a create whose
// templateID is one makes the sandbox from that snapshot.
const snapshotPrefix = "snap-"

// snapshotInfo is E2B's SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotInfoOf(sn client.Snapshot) snapshotInfo {
	names := []string{}
	if sn.Label != "" {
		names = append(names, sn.Label)
	}
	return snapshotInfo{SnapshotID: sn.ID, Names: names}
}

// createSnapshot serves POST /sandboxes/{id}/snapshots {name}: a stead
// snapshot of the sandbox (running, paused or stopped), its name the
// snapshot's label. Sandbox.create(snapshotID) makes a sandbox from it.
func (h *Handler) createSnapshot(w http.ResponseWriter, r *http.Request, p api.Principal) {
	const op = "create snapshot"
	var body struct {
		Name string `json:"name"`
	}
	if err := decodeBody(r, &body); err != nil {
		h.fail(w, r, op, err)
		return
	}
	sb, err := h.get(r, p, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	sn, err := h.b.CreateSnapshot(r.Context(), p.TenantID, sb.ID, client.CreateSnapshotRequest{Label: body.Name,
		Description: "taken through the E2B API"})
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotInfoOf(sn))
}

// listSnapshots serves GET /snapshots?sandboxID=&name=&limit=&nextToken=:
// the tenant's snapshots taken on request (not the automatic ones of
// rollbacks, forks and pushes), oldest first, paged as GET /v2/sandboxes.
func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request, p api.Principal) {
	const op = "list snapshots"
	q := r.URL.Query()
	limit, offset, err := pageOf(q.Get("limit"), q.Get("nextToken"))
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	sandbox := q.Get("sandboxID")
	if sandbox != "" {
		if _, err := h.get(r, p, sandbox); err != nil {
			h.fail(w, r, op, err)
			return
		}
	}
	all, err := h.b.ListSnapshots(r.Context(), p.TenantID, sandbox)
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	var list []client.Snapshot
	for _, sn := range all {
		if sn.Kind == "user" && (q.Get("name") == "" || sn.Label == q.Get("name")) {
			list = append(list, sn)
		}
	}
	page := list[min(offset, len(list)):]
	if len(page) > limit {
		page = page[:limit]
		w.Header().Set("X-Next-Token", pageToken(offset+limit))
	}
	out := make([]snapshotInfo, 0, len(page))
	for _, sn := range page {
		out = append(out, snapshotInfoOf(sn))
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteTemplate serves DELETE /templates/{id} for snapshots (the SDK's
// Sandbox.deleteSnapshot); stead's templates are not deleted through
// the E2B API.
func (h *Handler) deleteTemplate(w http.ResponseWriter, r *http.Request, p api.Principal) {
	const op = "delete snapshot"
	id := r.PathValue("id")
	if !strings.HasPrefix(id, snapshotPrefix) {
		h.fail(w, r, op, fmt.Errorf("template %s: only snapshots (%s...) are deleted through the E2B API; use stead's API for templates: %w", id, snapshotPrefix, errs.ErrNotFound))
		return
	}
	if err := h.b.DeleteSnapshot(r.Context(), p.TenantID, id); err != nil {
		h.fail(w, r, op, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// forkResult is one element of the answer of POST /sandboxes/{id}/fork.
type forkResult struct {
	Sandbox *sandboxResponse `json:"sandbox,omitempty"`
	Error   *apiError        `json:"error,omitempty"`
}

// fork serves POST /sandboxes/{id}/fork {timeout, count}: count new
// running sandboxes with the files of the sandbox (stead's fork), each
// with the E2B timeout as its idle timeout.
func (h *Handler) fork(w http.ResponseWriter, r *http.Request, p api.Principal) {
	const op = "fork sandbox"
	var body struct {
		Timeout *int64 `json:"timeout"`
		Count   *int   `json:"count"`
	}
	if err := decodeBody(r, &body); err != nil {
		h.fail(w, r, op, err)
		return
	}
	count := 1
	if body.Count != nil {
		count = *body.Count
	}
	if count < 1 || count > 50 {
		h.fail(w, r, op, fmt.Errorf("count %d: want 1 to 50: %w", count, errs.ErrInvalid))
		return
	}
	idle, err := timeoutSeconds(valueOr(body.Timeout, 300))
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	sb, err := h.get(r, p, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	forks, err := h.b.Fork(r.Context(), p.TenantID, sb.ID, client.ForkRequest{Count: count})
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	out := make([]forkResult, 0, len(forks))
	for _, f := range forks {
		out = append(out, h.afterFork(r, p, f, idle))
	}
	writeJSON(w, http.StatusOK, out)
}

// afterFork gives a fork its E2B timeout and answers it as E2B does.
func (h *Handler) afterFork(r *http.Request, p api.Principal, f client.Sandbox, idle string) forkResult {
	onIdle := h.opts.OnTimeout
	f, err := h.b.UpdateSandbox(r.Context(), p.TenantID, f.ID, client.UpdateSandboxRequest{IdleTimeout: &idle, OnIdle: &onIdle})
	if err != nil {
		status := api.HTTPStatus(err)
		h.log.WarnContext(r.Context(), "e2b: set a fork's timeout", "sandbox", f.ID, "err", err)
		return forkResult{Error: &apiError{Code: status, Message: errs.Message(err)}}
	}
	resp := h.response(f)
	return forkResult{Sandbox: &resp}
}

// createFromSnapshot serves a create whose templateID is a snapshot: a
// fork of it, running, with the create's timeout.
func (h *Handler) createFromSnapshot(w http.ResponseWriter, r *http.Request, p api.Principal, snapshot, idle, onIdle string, body newSandboxBody) {
	const op = "create sandbox"
	if len(body.Metadata) > 0 || len(body.EnvVars) > 0 {
		h.fail(w, r, op, fmt.Errorf("metadata and envVars are the snapshot's own when creating from snapshot %s; nothing was created: %w", snapshot, errs.ErrInvalid))
		return
	}
	forks, err := h.b.Fork(r.Context(), p.TenantID, snapshot, client.ForkRequest{Count: 1})
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	sb, err := h.b.UpdateSandbox(r.Context(), p.TenantID, forks[0].ID, client.UpdateSandboxRequest{IdleTimeout: &idle, OnIdle: &onIdle})
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.response(sb))
}

func valueOr[T any](p *T, v T) T {
	if p != nil {
		return *p
	}
	return v
}

// pageOf reads a page's limit (1 to maxPage, default maxPage) and the
// offset its nextToken (one pageToken gave) names.
func pageOf(l, token string) (limit, offset int, err error) {
	limit = maxPage
	if l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > maxPage {
			return 0, 0, fmt.Errorf("limit %q: want 1 to %d: %w", l, maxPage, errs.ErrInvalid)
		}
	}
	if token != "" {
		b, err := base64.RawURLEncoding.DecodeString(token)
		n, cerr := strconv.Atoi(strings.TrimPrefix(string(b), "o:"))
		if err != nil || cerr != nil || !strings.HasPrefix(string(b), "o:") || n < 0 {
			return 0, 0, fmt.Errorf("nextToken %q is not a token this server gave: %w", token, errs.ErrInvalid)
		}
		offset = n
	}
	return limit, offset, nil
}

// pageToken is the nextToken of the page starting at offset.
func pageToken(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("o:" + strconv.Itoa(offset)))
}
