package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/e2b/envd"
	"github.com/stead-dev/stead/internal/errs"
)

// E2B's default user and its home, and stead's agent's home: E2B paths
// under /home/user are served from /home/agent (create links the one to
// the other inside the sandbox, so commands see the same tree).
const (
	e2bHome   = "/home/user"
	agentHome = "/home/agent"
)

// target is the sandbox a data-plane call addresses, and its tenant.
type target struct {
	tenant, id string
}

// envdMux routes the data plane.
func (h *Handler) envdMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /files", h.withToken(h.getFile))
	mux.HandleFunc("POST /files", h.withToken(h.postFiles))
	mux.HandleFunc("POST /process.Process/{method}", h.withToken(h.process))
	mux.HandleFunc("POST /filesystem.Filesystem/{method}", h.withToken(h.filesystem))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		refuse(w, http.StatusNotFound, fmt.Sprintf("%s %s: no such route in stead's envd (docs/e2b.md lists what is supported)", r.Method, r.URL.Path))
	})
	return mux
}

// withToken checks the X-Access-Token of the sandbox the request names.
// A token of another sandbox, or of another tenant's, is refused exactly
// as a wrong one.
func (h *Handler) withToken(fn func(http.ResponseWriter, *http.Request, target)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := h.envdSandbox(r)
		tenant, ok := checkToken(h.key, id, r.Header.Get("X-Access-Token"))
		if !ok {
			if strings.Contains(r.URL.Path, ".") { // an RPC
				envd.WriteUnaryError(w, &envd.Error{Code: envd.CodeUnauthenticated, Message: "invalid or missing X-Access-Token for this sandbox"})
				return
			}
			refuse(w, http.StatusUnauthorized, "invalid or missing X-Access-Token for this sandbox")
			return
		}
		fn(w, r, target{tenant: tenant, id: id})
	}
}

// steadUser maps an E2B user name onto stead's exec users.
func steadUser(u string) (string, error) {
	switch u {
	case "", "user", "agent":
		return "agent", nil
	case "root":
		return "root", nil
	}
	if _, err := strconv.Atoi(strings.ReplaceAll(u, ":", "")); err == nil {
		return u, nil
	}
	return "", fmt.Errorf("user %q: stead runs as user (its agent), root, or a numeric uid[:gid]: %w", u, errs.ErrInvalid)
}

// basicUser reads the user of an RPC from its Authorization: Basic
// header ("" when absent).
func basicUser(r *http.Request) (string, error) {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Basic ")
	if !ok {
		return "", nil
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return "", fmt.Errorf("authorization header: not base64: %w", errs.ErrInvalid)
	}
	u, _, _ := strings.Cut(string(b), ":")
	return u, nil
}

// e2bPath resolves a path of the SDK against the user's home (E2B form).
func e2bPath(p, user string) string {
	if !strings.HasPrefix(p, "/") {
		home := e2bHome
		if user == "root" {
			home = "/root"
		}
		p = home + "/" + p
	}
	return path.Clean(p)
}

// steadPath is where an E2B path is in the sandbox as stead's file API
// reaches it.
func steadPath(p string) string {
	if p == e2bHome || strings.HasPrefix(p, e2bHome+"/") {
		return agentHome + p[len(e2bHome):]
	}
	return p
}

// rpcError turns a backend error into a Connect error; an internal one
// is logged and its detail withheld.
func (h *Handler) rpcError(ctx context.Context, op string, err error) *envd.Error {
	var ce *envd.Error
	if errors.As(err, &ce) {
		return ce
	}
	msg := errs.Message(err)
	code := envd.CodeInternal
	switch api.HTTPStatus(err) {
	case http.StatusNotFound:
		code = envd.CodeNotFound
	case http.StatusBadRequest:
		code = envd.CodeInvalidArgument
	case http.StatusConflict:
		code = envd.CodeFailedPrecondition
	case http.StatusUnauthorized:
		code = envd.CodeUnauthenticated
	case http.StatusForbidden:
		code = envd.CodePermissionDenied
	case http.StatusRequestEntityTooLarge, http.StatusInsufficientStorage, http.StatusPaymentRequired:
		code = envd.CodeResourceExhausted
	case http.StatusNotImplemented:
		code = envd.CodeUnimplemented
	case http.StatusGatewayTimeout:
		code = envd.CodeDeadlineExceeded
	case http.StatusServiceUnavailable:
		code = envd.CodeCanceled
	default:
		h.log.ErrorContext(ctx, "e2b envd call failed", "op", op, "err", err)
		msg = "internal error in " + op + "; the daemon log has the details"
	}
	return &envd.Error{Code: code, Message: msg}
}

// filesystem serves the unary filesystem.Filesystem calls.
func (h *Handler) filesystem(w http.ResponseWriter, r *http.Request, t target) {
	method := r.PathValue("method")
	if method == "WatchDir" {
		h.watchDir(w, r, t)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, envd.MaxMessageBytes))
	if err != nil {
		envd.WriteUnaryError(w, &envd.Error{Code: envd.CodeResourceExhausted, Message: "request message too large"})
		return
	}
	u, err := basicUser(r)
	if err == nil {
		_, err = steadUser(u)
	}
	if err != nil {
		envd.WriteUnaryError(w, h.rpcError(r.Context(), method, err))
		return
	}
	bad := func(err error) {
		envd.WriteUnaryError(w, &envd.Error{Code: envd.CodeInvalidArgument, Message: "filesystem." + method + ": " + err.Error()})
	}
	var resp any
	ctx := r.Context()
	switch method {
	case "Stat":
		var req envd.PathRequest
		if err = envd.DecodeRequest(body, &req); err != nil {
			bad(err)
			return
		}
		resp, err = h.entry(ctx, t, e2bPath(req.Path, u))
	case "MakeDir":
		var req envd.PathRequest
		if err = envd.DecodeRequest(body, &req); err != nil {
			bad(err)
			return
		}
		p := e2bPath(req.Path, u)
		if _, serr := h.b.StatFile(ctx, t.tenant, t.id, steadPath(p)); serr == nil {
			err = &envd.Error{Code: envd.CodeAlreadyExists, Message: p + " already exists"}
		} else if err = h.b.Mkdir(ctx, t.tenant, t.id, steadPath(p), true); err == nil {
			resp, err = h.entry(ctx, t, p)
		}
		h.record(r, "e2b-envd:"+t.id, t.tenant, "filesystem.MakeDir", t.id, statusOf(err))
	case "Move":
		var req envd.MoveRequest
		if err = envd.DecodeRequest(body, &req); err != nil {
			bad(err)
			return
		}
		src, dst := e2bPath(req.Source, u), e2bPath(req.Destination, u)
		if err = h.b.RenameFile(ctx, t.tenant, t.id, steadPath(src), steadPath(dst)); err == nil {
			resp, err = h.entry(ctx, t, dst)
		}
		h.record(r, "e2b-envd:"+t.id, t.tenant, "filesystem.Move", t.id, statusOf(err))
	case "ListDir":
		var req envd.ListDirRequest
		if err = envd.DecodeRequest(body, &req); err != nil {
			bad(err)
			return
		}
		depth := int(req.Depth)
		if depth == 0 {
			depth = 1
		}
		entries := []envd.EntryInfo{}
		if err = h.listDir(ctx, t, e2bPath(req.Path, u), depth, &entries); err == nil {
			resp = envd.ListDirResponse{Entries: entries}
		}
	case "Remove":
		var req envd.PathRequest
		if err = envd.DecodeRequest(body, &req); err != nil {
			bad(err)
			return
		}
		if err = h.b.RemoveFile(ctx, t.tenant, t.id, steadPath(e2bPath(req.Path, u)), true); err == nil {
			resp = struct{}{}
		}
		h.record(r, "e2b-envd:"+t.id, t.tenant, "filesystem.Remove", t.id, statusOf(err))
	case "CreateWatcher", "GetWatcherEvents", "RemoveWatcher":
		resp, err = h.watcherCall(ctx, r, t, method, body)
	default:
		err = &envd.Error{Code: envd.CodeUnimplemented, Message: "filesystem." + method + " is not supported by stead's envd yet (docs/e2b.md)"}
	}
	if err != nil {
		envd.WriteUnaryError(w, h.rpcError(ctx, "filesystem."+method, err))
		return
	}
	envd.WriteUnary(w, resp)
}

// statusOf is the HTTP status an outcome is recorded with.
func statusOf(err error) int {
	if err == nil {
		return http.StatusOK
	}
	var ce *envd.Error
	if errors.As(err, &ce) {
		return ce.HTTPStatus()
	}
	return api.HTTPStatus(err)
}

// entry is the answer of a call that names one entry: its EntryResponse,
// or nil and the error.
func (h *Handler) entry(ctx context.Context, t target, p string) (any, error) {
	e, err := h.stat(ctx, t, p)
	if err != nil {
		return nil, err
	}
	return envd.EntryResponse{Entry: e}, nil
}

// stat describes the E2B path p.
func (h *Handler) stat(ctx context.Context, t target, p string) (envd.EntryInfo, error) {
	fi, err := h.b.StatFile(ctx, t.tenant, t.id, steadPath(p))
	if err != nil {
		return envd.EntryInfo{}, err
	}
	return entryOf(fi, p), nil
}

// listDir appends the entries of dir, and of its subdirectories down to
// depth levels, to out. Symlinks are listed, never followed.
func (h *Handler) listDir(ctx context.Context, t target, dir string, depth int, out *[]envd.EntryInfo) error {
	list, err := h.b.ListFiles(ctx, t.tenant, t.id, steadPath(dir))
	if err != nil {
		return err
	}
	for _, fi := range list {
		p := path.Join(dir, fi.Name)
		*out = append(*out, entryOf(fi, p))
		if fi.Type == "dir" && depth > 1 {
			if err := h.listDir(ctx, t, p, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// entryOf is the EntryInfo of stead's fi at E2B path p.
func entryOf(fi client.FileInfo, p string) envd.EntryInfo {
	mode := fs.FileMode(fi.Mode) & fs.ModePerm
	typ := envd.FileTypeUnspecified
	switch fi.Type {
	case "file":
		typ = envd.FileTypeFile
	case "dir":
		typ, mode = envd.FileTypeDirectory, mode|fs.ModeDir
	case "symlink":
		typ, mode = envd.FileTypeSymlink, mode|fs.ModeSymlink
	}
	e := envd.EntryInfo{Name: path.Base(p), Type: typ, Path: p, Size: envd.Int64(fi.Size), Mode: uint32(mode),
		Permissions: mode.String(), Owner: idName(fi.UID), Group: idName(fi.GID), ModifiedTime: fi.ModTime.UTC()}
	if fi.Type == "symlink" {
		target := fi.Target
		e.SymlinkTarget = &target
	}
	return e
}

// idName names a uid or gid as E2B users know them.
func idName(id int) string {
	switch id {
	case 0:
		return "root"
	case 1000:
		return "user"
	}
	return strconv.Itoa(id)
}

// writeInfo is envd's EntryInfo of POST /files.
type writeInfo struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// fileError answers a /files call with err in E2B's error shape.
func (h *Handler) fileError(w http.ResponseWriter, r *http.Request, op string, err error) {
	h.fail(w, r, op, err)
}

// getFile serves GET /files?path=&username=: the file's bytes.
func (h *Handler) getFile(w http.ResponseWriter, r *http.Request, t target) {
	const op = "read file"
	q := r.URL.Query()
	u := q.Get("username")
	if _, err := steadUser(u); err != nil {
		h.fileError(w, r, op, err)
		return
	}
	if q.Get("path") == "" {
		h.fileError(w, r, op, fmt.Errorf("path is required: %w", errs.ErrInvalid))
		return
	}
	p := e2bPath(q.Get("path"), u)
	rc, fi, err := h.b.ReadFile(r.Context(), t.tenant, t.id, steadPath(p))
	if err != nil {
		h.fileError(w, r, op, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", "attachment; filename="+strconv.Quote(path.Base(p)))
	if fi.Type == "file" {
		w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	}
	w.WriteHeader(http.StatusOK)
	io.Copy(w, rc)
}

// ensureParent makes the directory that will hold E2B path p.
func (h *Handler) ensureParent(ctx context.Context, t target, p string) error {
	dir := steadPath(path.Dir(p))
	if _, err := h.b.StatFile(ctx, t.tenant, t.id, dir); err == nil {
		return nil
	}
	return h.b.Mkdir(ctx, t.tenant, t.id, dir, true)
}

// writeOne writes one uploaded file to E2B path p.
func (h *Handler) writeOne(ctx context.Context, t target, p string, body io.Reader) (writeInfo, error) {
	if err := h.ensureParent(ctx, t, p); err != nil {
		return writeInfo{}, err
	}
	if _, err := h.b.WriteFile(ctx, t.tenant, t.id, steadPath(p), 0o644, body); err != nil {
		return writeInfo{}, err
	}
	return writeInfo{Name: path.Base(p), Type: "file", Path: p}, nil
}

// postFiles serves POST /files: a multipart upload (each part "file"
// goes to its filename, or to ?path=) or an octet-stream body to ?path=.
func (h *Handler) postFiles(w http.ResponseWriter, r *http.Request, t target) {
	const op = "write file"
	q := r.URL.Query()
	u := q.Get("username")
	_, err := steadUser(u)
	var out []writeInfo
	if err == nil {
		out, err = h.upload(r, t, u, q.Get("path"))
	}
	h.record(r, "e2b-envd:"+t.id, t.tenant, "POST /files", t.id, statusOf(err))
	if err != nil {
		h.fileError(w, r, op, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) upload(r *http.Request, t target, user, qpath string) ([]writeInfo, error) {
	ctx := r.Context()
	ct := r.Header.Get("Content-Type")
	if !strings.HasPrefix(ct, "multipart/") {
		if qpath == "" {
			return nil, fmt.Errorf("path is required for an %s upload: %w", ct, errs.ErrInvalid)
		}
		body := io.Reader(r.Body)
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzipReader(body)
			if err != nil {
				return nil, err
			}
			body = zr
		}
		wi, err := h.writeOne(ctx, t, e2bPath(qpath, user), body)
		if err != nil {
			return nil, err
		}
		return []writeInfo{wi}, nil
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, fmt.Errorf("multipart body: %v: %w", err, errs.ErrInvalid)
	}
	var out []writeInfo
	for {
		part, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("multipart body: %v: %w", err, errs.ErrInvalid)
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		dest := rawFilename(part.Header.Get("Content-Disposition"))
		if dest == "" {
			dest = qpath
		}
		if dest == "" {
			part.Close()
			return out, fmt.Errorf("a file part has no filename and no path was given: %w", errs.ErrInvalid)
		}
		wi, err := h.writeOne(ctx, t, e2bPath(dest, user), part)
		part.Close()
		if err != nil {
			return out, err
		}
		out = append(out, wi)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no file part in the upload: %w", errs.ErrInvalid)
	}
	return out, nil
}
