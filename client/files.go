package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// FileInfoHeader is the response header of ReadFile holding the file's
// FileInfo as JSON.
const FileInfoHeader = "X-Stead-File-Info"

// filesPath returns the path of a sandbox's file route.
func filesPath(id, suffix string) string {
	return sandboxPath(id, "/files"+suffix)
}

// ReadFile opens a file of a sandbox for reading. The caller must close
// the reader; a read error before the end means the transfer was cut.
func (c *Client) ReadFile(ctx context.Context, id, path string) (io.ReadCloser, FileInfo, error) {
	resp, err := c.send(ctx, request{
		method: http.MethodGet,
		path:   filesPath(id, "/content"),
		query:  url.Values{"path": {path}},
		accept: "application/octet-stream",
	})
	if err != nil {
		return nil, FileInfo{}, err
	}
	var info FileInfo
	if h := resp.Header.Get(FileInfoHeader); h != "" {
		if err := json.Unmarshal([]byte(h), &info); err != nil {
			_ = resp.Body.Close()
			return nil, FileInfo{}, fmt.Errorf("decode %s header: %w", FileInfoHeader, err)
		}
	}
	return resp.Body, info, nil
}

// WriteFile creates or replaces a file of a sandbox with the bytes of r,
// streamed. mode is the permission bits (0 means 0644).
func (c *Client) WriteFile(ctx context.Context, id, path string, mode uint32, r io.Reader) (FileInfo, error) {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", "0"+strconv.FormatUint(uint64(mode&0o7777), 8))
	}
	resp, err := c.send(ctx, request{
		method: http.MethodPut,
		path:   filesPath(id, "/content"),
		query:  q,
		body:   r,
		ctype:  "application/octet-stream",
	})
	if err != nil {
		return FileInfo{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	var info FileInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return FileInfo{}, fmt.Errorf("decode write file result: %w", err)
	}
	return info, nil
}

// StatFile describes a file of a sandbox (symlinks are not followed).
func (c *Client) StatFile(ctx context.Context, id, path string) (FileInfo, error) {
	var info FileInfo
	err := c.do(ctx, http.MethodGet, filesPath(id, "/stat"), url.Values{"path": {path}}, nil, &info)
	return info, err
}

// ListFiles lists a directory of a sandbox.
func (c *Client) ListFiles(ctx context.Context, id, path string) ([]FileInfo, error) {
	list, err := listAll[FileInfo](ctx, c, filesPath(id, "/list"), url.Values{"path": {path}})
	return list, err
}

// Mkdir creates a directory; with parents, missing parents too and no
// error if it exists.
func (c *Client) Mkdir(ctx context.Context, id, path string, parents bool) error {
	return c.do(ctx, http.MethodPost, filesPath(id, "/mkdir"), nil, MkdirRequest{Path: path, Parents: parents}, nil)
}

// RemoveFile removes a file or an empty directory; with recursive, a
// directory and everything under it.
func (c *Client) RemoveFile(ctx context.Context, id, path string, recursive bool) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.do(ctx, http.MethodDelete, filesPath(id, ""), q, nil, nil)
}

// RenameFile renames or moves a file or directory within a sandbox.
func (c *Client) RenameFile(ctx context.Context, id, from, to string) error {
	return c.do(ctx, http.MethodPost, filesPath(id, "/rename"), nil, RenameRequest{From: from, To: to}, nil)
}

// DownloadTar returns a tar stream of path (a file or a directory tree).
// Entries are named relative to the parent of path, so the last element
// of path is the top-level entry. The caller must close the reader.
func (c *Client) DownloadTar(ctx context.Context, id, path string) (io.ReadCloser, error) {
	resp, err := c.send(ctx, request{
		method: http.MethodGet,
		path:   filesPath(id, "/tar"),
		query:  url.Values{"path": {path}},
		accept: "application/x-tar",
	})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// UploadTar extracts the tar stream r under the directory path of a
// sandbox (created if missing).
func (c *Client) UploadTar(ctx context.Context, id, path string, r io.Reader) error {
	resp, err := c.send(ctx, request{
		method: http.MethodPut,
		path:   filesPath(id, "/tar"),
		query:  url.Values{"path": {path}},
		body:   r,
		ctype:  "application/x-tar",
	})
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}
