package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// FileInfoHeader carries the JSON FileInfo of a downloaded file.
const FileInfoHeader = "X-Stead-File-Info"

// defaultFileMode is the mode of a file written without ?mode=.
const defaultFileMode = 0o644

// binarySchema describes a raw byte body of the media type mt. It has no
// type: OpenAPI 3.1 describes raw bytes by contentMediaType alone (which
// huma writes for format binary); a `type: string` would make generators
// such as openapi-typescript expect a JavaScript string.
func binarySchema(mt string) *huma.Schema {
	return &huma.Schema{Format: "binary", Description: "Raw bytes (" + mt + "), not JSON"}
}

// refuseJSONBody returns the error of a raw-body route whose request says
// it is JSON: the bytes would be stored as they are, quotes and escapes
// included, which is never what the caller meant.
func refuseJSONBody(ctx huma.Context, mt string) []error {
	ct, _, _ := mime.ParseMediaType(ctx.Header("Content-Type"))
	if ct == "application/json" {
		return []error{huma.Error415UnsupportedMediaType(
			"this route takes the raw bytes as " + mt + ", not JSON: send them with Content-Type: " + mt +
				" (openapi-fetch: bodySerializer: (b) => b)")}
	}
	return nil
}

// PathQuery is the ?path= parameter of the file routes (exported only
// because huma ignores unexported embedded fields).
type PathQuery struct {
	Path string `query:"path" required:"true" minLength:"1" doc:"Absolute path inside the sandbox"`
}

// writeFileInput is PUT /files/content: a raw, streamed body.
type writeFileInput struct {
	SandboxRef
	Path string `query:"path" required:"true" minLength:"1" doc:"Absolute path inside the sandbox"`
	Mode string `query:"mode" pattern:"^0?[0-7]{1,4}$" doc:"Octal permission bits (default 0644)"`
	body io.Reader
}

// Resolve keeps the request body as a stream (huma would buffer it).
func (in *writeFileInput) Resolve(ctx huma.Context) []error {
	in.body = ctx.BodyReader()
	return refuseJSONBody(ctx, "application/octet-stream")
}

// uploadTarInput is PUT /files/tar: a streamed tar body.
type uploadTarInput struct {
	SandboxRef
	Path string `query:"path" required:"true" minLength:"1" doc:"Directory to extract under"`
	body io.Reader
}

// Resolve keeps the request body as a stream.
func (in *uploadTarInput) Resolve(ctx huma.Context) []error {
	in.body = ctx.BodyReader()
	return refuseJSONBody(ctx, "application/x-tar")
}

// registerFiles adds the /v1/sandboxes/{id}/files routes.
func (s *server) registerFiles() {
	const tag = "files"
	const base = "/v1/sandboxes/{id}/files"

	// GET content: raw bytes.
	read := s.op(http.MethodGet, base+"/content", "read-file", "Download a file's bytes", tag, http.StatusOK)
	read.Description = "The body is the raw file. The " + FileInfoHeader + " header holds its FileInfo as JSON."
	read.Responses = map[string]*huma.Response{
		"200": {
			Description: "The file's bytes",
			Headers: map[string]*huma.Param{
				FileInfoHeader: {Description: "FileInfo as JSON", Schema: &huma.Schema{Type: "string"}},
			},
			Content: map[string]*huma.MediaType{"application/octet-stream": {Schema: binarySchema("application/octet-stream")}},
		},
	}
	huma.Register(s.api, read, func(ctx context.Context, in *struct {
		SandboxRef
		PathQuery
	}) (*huma.StreamResponse, error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "read file", err)
		}
		rc, info, err := s.b.ReadFile(ctx, p.TenantID, in.ID, in.Path)
		if err != nil {
			return nil, s.fail(ctx, "read file", err)
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			defer func() { _ = rc.Close() }()
			_, w := humago.Unwrap(hc)
			h := w.Header()
			h.Set("Content-Type", "application/octet-stream")
			if js, err := json.Marshal(info); err == nil {
				h.Set(FileInfoHeader, string(js))
			}
			var err error
			if info.Type == "file" && info.Size >= 0 {
				h.Set("Content-Length", strconv.FormatInt(info.Size, 10))
				w.WriteHeader(http.StatusOK)
				_, err = io.CopyN(w, rc, info.Size)
			} else {
				w.WriteHeader(http.StatusOK)
				_, err = io.Copy(w, rc)
			}
			if err != nil {
				s.log.DebugContext(ctx, "read file aborted", "sandbox", in.ID, "path", in.Path, "err", err)
				// The status is out: abort the connection so the client sees a
				// truncated body rather than a short file.
				panic(http.ErrAbortHandler)
			}
		}}, nil
	})

	// PUT content: streamed body.
	write := s.op(http.MethodPut, base+"/content", "write-file",
		"Upload a file's bytes (created or replaced atomically by the backend)", tag, http.StatusOK)
	write.Errors = append(write.Errors, http.StatusInsufficientStorage)
	write.RequestBody = &huma.RequestBody{
		Required: true,
		Content:  map[string]*huma.MediaType{"application/octet-stream": {Schema: binarySchema("application/octet-stream")}},
	}
	huma.Register(s.api, write, func(ctx context.Context, in *writeFileInput) (*out[client.FileInfo], error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "write file", err)
		}
		mode := uint32(defaultFileMode)
		if in.Mode != "" {
			m, err := strconv.ParseUint(in.Mode, 8, 32)
			if err != nil || m > 0o7777 {
				return nil, s.fail(ctx, "write file", fmt.Errorf("write file: mode %q is not octal permission bits like 0644: %w", in.Mode, errs.ErrInvalid))
			}
			mode = uint32(m)
		}
		info, err := s.b.WriteFile(ctx, p.TenantID, in.ID, in.Path, mode, in.body)
		if err != nil {
			return nil, s.fail(ctx, "write file", err)
		}
		return &out[client.FileInfo]{Body: info}, nil
	})

	huma.Register(s.api, s.op(http.MethodGet, base+"/stat", "stat-file", "Describe a file (symlinks not followed)", tag, 0),
		func(ctx context.Context, in *struct {
			SandboxRef
			PathQuery
		}) (*out[client.FileInfo], error) {
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, "stat file", err)
			}
			info, err := s.b.StatFile(ctx, p.TenantID, in.ID, in.Path)
			if err != nil {
				return nil, s.fail(ctx, "stat file", err)
			}
			return &out[client.FileInfo]{Body: info}, nil
		})

	huma.Register(s.api, s.op(http.MethodGet, base+"/list", "list-files", "List a directory", tag, 0),
		func(ctx context.Context, in *struct {
			SandboxRef
			PathQuery
			PageQuery
		}) (*out[client.Page[client.FileInfo]], error) {
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, "list files", err)
			}
			list, err := s.b.ListFiles(ctx, p.TenantID, in.ID, in.Path)
			if err != nil {
				return nil, s.fail(ctx, "list files", err)
			}
			if list == nil {
				list = []client.FileInfo{}
			}
			return pageOf(list, in.PageQuery)
		})

	mkdir := s.op(http.MethodPost, base+"/mkdir", "mkdir", "Create a directory", tag, http.StatusNoContent)
	mkdir.Errors = append(mkdir.Errors, http.StatusConflict)
	huma.Register(s.api, mkdir, func(ctx context.Context, in *struct {
		SandboxRef
		Body client.MkdirRequest
	}) (*struct{}, error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "mkdir", err)
		}
		if err := s.b.Mkdir(ctx, p.TenantID, in.ID, in.Body.Path, in.Body.Parents); err != nil {
			return nil, s.fail(ctx, "mkdir", err)
		}
		return nil, nil
	})

	rm := s.op(http.MethodDelete, base, "remove-file", "Remove a file, or a directory (recursive for a non-empty one)", tag, http.StatusNoContent)
	rm.Errors = append(rm.Errors, http.StatusConflict)
	huma.Register(s.api, rm, func(ctx context.Context, in *struct {
		SandboxRef
		PathQuery
		Recursive bool `query:"recursive" doc:"Remove a directory and everything under it"`
	}) (*struct{}, error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "remove file", err)
		}
		if err := s.b.RemoveFile(ctx, p.TenantID, in.ID, in.Path, in.Recursive); err != nil {
			return nil, s.fail(ctx, "remove file", err)
		}
		return nil, nil
	})

	mv := s.op(http.MethodPost, base+"/rename", "rename-file", "Rename or move a file or directory", tag, http.StatusNoContent)
	mv.Errors = append(mv.Errors, http.StatusConflict)
	huma.Register(s.api, mv, func(ctx context.Context, in *struct {
		SandboxRef
		Body client.RenameRequest
	}) (*struct{}, error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "rename file", err)
		}
		if err := s.b.RenameFile(ctx, p.TenantID, in.ID, in.Body.From, in.Body.To); err != nil {
			return nil, s.fail(ctx, "rename file", err)
		}
		return nil, nil
	})

	// GET tar: streamed archive.
	dl := s.op(http.MethodGet, base+"/tar", "download-tar", "Download a file or directory tree as a tar stream", tag, http.StatusOK)
	dl.Description = "Entries are named relative to the parent of path, so the last element of path is the top-level entry " +
		"(GET ?path=/workspace/src gives src/, src/main.go, ...)."
	dl.Responses = map[string]*huma.Response{
		"200": {
			Description: "A tar stream",
			Content:     map[string]*huma.MediaType{"application/x-tar": {Schema: binarySchema("application/x-tar")}},
		},
	}
	huma.Register(s.api, dl, func(ctx context.Context, in *struct {
		SandboxRef
		PathQuery
	}) (*huma.StreamResponse, error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "download tar", err)
		}
		// Stat first so that a missing path is a 404, not an empty tar.
		if _, err := s.b.StatFile(ctx, p.TenantID, in.ID, in.Path); err != nil {
			return nil, s.fail(ctx, "download tar", err)
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			r, w := humago.Unwrap(hc)
			lw := &lazyWriter{w: w, contentType: "application/x-tar"}
			err := s.b.DownloadTar(ctx, p.TenantID, in.ID, in.Path, lw)
			if err == nil {
				lw.commit()
				return
			}
			if !lw.committed() {
				s.writeProblem(w, r, "download tar", err)
				return
			}
			s.log.Log(ctx, logLevelFor(err), "download tar aborted", "sandbox", in.ID, "path", in.Path, "err", err)
			panic(http.ErrAbortHandler)
		}}, nil
	})

	// PUT tar: streamed archive.
	ul := s.op(http.MethodPut, base+"/tar", "upload-tar", "Extract a tar stream under a directory", tag, http.StatusNoContent)
	ul.Description = "Entries are extracted under path (created if missing). Entries escaping path are refused."
	ul.Errors = append(ul.Errors, http.StatusInsufficientStorage)
	ul.RequestBody = &huma.RequestBody{
		Required: true,
		Content:  map[string]*huma.MediaType{"application/x-tar": {Schema: binarySchema("application/x-tar")}},
	}
	huma.Register(s.api, ul, func(ctx context.Context, in *uploadTarInput) (*struct{}, error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "upload tar", err)
		}
		if err := s.b.UploadTar(ctx, p.TenantID, in.ID, in.Path, in.body); err != nil {
			return nil, s.fail(ctx, "upload tar", err)
		}
		return nil, nil
	})
}

// lazyWriter commits a 200 response on its first write, so that an error
// before any output can still be sent as a problem document.
type lazyWriter struct {
	mu          sync.Mutex
	w           http.ResponseWriter
	contentType string
	started     bool
}

// Write commits the response and writes p.
func (l *lazyWriter) Write(p []byte) (int, error) {
	l.commit()
	return l.w.Write(p)
}

// commit sends the headers if they are not out yet.
func (l *lazyWriter) commit() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return
	}
	l.started = true
	l.w.Header().Set("Content-Type", l.contentType)
	l.w.WriteHeader(http.StatusOK)
}

// committed reports whether the status has been sent.
func (l *lazyWriter) committed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started
}
