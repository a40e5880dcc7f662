package mcp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// search_files bounds: a search walks at most maxSearchEntries entries,
// reads at most maxSearchFileBytes of a file and maxSearchReadBytes in all,
// and returns at most maxSearchResults matches (each match's line cut to
// maxSearchLine bytes).
const (
	defaultSearchResults = 100
	maxSearchResults     = 1000
	maxSearchEntries     = 20000
	maxSearchFileBytes   = 1 << 20
	maxSearchReadBytes   = 64 << 20
	maxSearchLine        = 240
)

// registerFiles adds remove_file, move_file and search_files.
func (t *tools) registerFiles(s *sdk.Server) {
	yes, no := true, false
	sdk.AddTool(s, &sdk.Tool{
		Name:  "remove_file",
		Title: "Remove a file of a sandbox",
		Description: "Removes a file, a symlink or an empty directory of a sandbox; a directory with its contents " +
			"only with recursive: true. Snapshot first if you may want it back.",
		InputSchema: t.inputSchema(schemaFor[RemoveFileInput]()),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: false, OpenWorldHint: &no},
	}, t.removeFile)
	sdk.AddTool(s, &sdk.Tool{
		Name:        "move_file",
		Title:       "Move or rename a file of a sandbox",
		Description: "Moves or renames a file or directory within a sandbox; an existing file at to is replaced.",
		InputSchema: t.inputSchema(schemaFor[MoveFileInput]()),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: false, OpenWorldHint: &no},
	}, t.moveFile)
	sdk.AddTool(s, &sdk.Tool{
		Name:  "search_files",
		Title: "Find files by name or content",
		Description: "Walks a directory of a sandbox (running or stopped) and returns the files whose name matches " +
			"the glob name (e.g. *.go; a glob with a / matches the path below path) and, with contains, the lines " +
			"that hold that text (case-sensitive, UTF-8 text files up to 1 MiB). Bounded: at most 20000 entries " +
			"walked and max_results matches; truncated says when it stopped early. Skips .git and node_modules " +
			"unless path is inside them.",
		InputSchema: t.inputSchema(schemaFor[SearchFilesInput]()),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, t.searchFiles)
}

// RemoveFileInput is the input of remove_file.
type RemoveFileInput struct {
	Sandbox   string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Path      string `json:"path" jsonschema:"Absolute path in the sandbox."`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"Remove a directory with everything in it."`
}

// RemoveFileOutput is the result of remove_file.
type RemoveFileOutput struct {
	Path    string `json:"path"`
	Removed bool   `json:"removed"`
}

// checkPath refuses a path that is not absolute, or is the root.
func checkPath(name, p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%s %q: want an absolute path in the sandbox, e.g. /workspace/notes.md", name, p)
	}
	if path.Clean(p) == "/" {
		return fmt.Errorf("%s %q: not the root directory", name, p)
	}
	return nil
}

// removeFile removes a file.
func (t *tools) removeFile(ctx context.Context, _ *sdk.CallToolRequest, in RemoveFileInput) (*sdk.CallToolResult, RemoveFileOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, RemoveFileOutput{}, err
	}
	if err := checkPath("path", in.Path); err != nil {
		return nil, RemoveFileOutput{}, err
	}
	if err := t.c.RemoveFile(ctx, sb, in.Path, in.Recursive); err != nil {
		return nil, RemoveFileOutput{}, apiError(fmt.Sprintf("remove %s in sandbox %s", in.Path, sb), err)
	}
	return nil, RemoveFileOutput{Path: in.Path, Removed: true}, nil
}

// MoveFileInput is the input of move_file.
type MoveFileInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	From    string `json:"from" jsonschema:"Absolute path of the file or directory to move."`
	To      string `json:"to" jsonschema:"Its new absolute path."`
}

// moveFile moves a file.
func (t *tools) moveFile(ctx context.Context, _ *sdk.CallToolRequest, in MoveFileInput) (*sdk.CallToolResult, FileEntry, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, FileEntry{}, err
	}
	if err := errors.Join(checkPath("from", in.From), checkPath("to", in.To)); err != nil {
		return nil, FileEntry{}, err
	}
	what := fmt.Sprintf("move %s to %s in sandbox %s", in.From, in.To, sb)
	if err := t.c.RenameFile(ctx, sb, in.From, in.To); err != nil {
		return nil, FileEntry{}, apiError(what, err)
	}
	info, err := t.c.StatFile(ctx, sb, in.To)
	if err != nil {
		return nil, FileEntry{}, apiError(what, err)
	}
	return nil, fileEntry(info), nil
}

// SearchFilesInput is the input of search_files.
type SearchFilesInput struct {
	Sandbox    string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Path       string `json:"path,omitempty" jsonschema:"Absolute directory to search (default /workspace)."`
	Name       string `json:"name,omitempty" jsonschema:"Glob the file name must match (* ? [a-z]), e.g. *.py; with a /, matched against the path below path."`
	Contains   string `json:"contains,omitempty" jsonschema:"Text a line of the file must contain."`
	MaxResults int    `json:"max_results,omitempty" jsonschema:"At most this many matches (default 100, at most 1000)."`
}

// SearchMatch is a match of search_files.
type SearchMatch struct {
	Path string `json:"path"`
	Type string `json:"type,omitempty" jsonschema:"file, dir, symlink or other (name matches)."`
	Size int64  `json:"size,omitempty"`
	Line int    `json:"line,omitempty" jsonschema:"1-based line number (content matches)."`
	Text string `json:"text,omitempty" jsonschema:"The matching line, cut to 240 bytes."`
}

// SearchFilesOutput is the result of search_files.
type SearchFilesOutput struct {
	Matches   []SearchMatch `json:"matches"`
	Walked    int           `json:"walked" jsonschema:"Entries looked at."`
	Truncated bool          `json:"truncated,omitempty" jsonschema:"The search stopped early (a bound was reached): narrow path or name."`
	Skipped   []string      `json:"skipped,omitempty" jsonschema:"Directories or files not searched, and why."`
}

// searchFiles walks a directory through the file API.
func (t *tools) searchFiles(ctx context.Context, _ *sdk.CallToolRequest, in SearchFilesInput) (*sdk.CallToolResult, SearchFilesOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, SearchFilesOutput{}, err
	}
	root := in.Path
	if root == "" {
		root = "/workspace"
	}
	if !strings.HasPrefix(root, "/") {
		return nil, SearchFilesOutput{}, fmt.Errorf("path %q: want an absolute directory in the sandbox, e.g. /workspace", root)
	}
	root = path.Clean(root)
	if in.Name == "" && in.Contains == "" {
		return nil, SearchFilesOutput{}, errors.New("nothing to search for: pass name (a glob such as *.go), contains (text), or both")
	}
	if in.Name != "" {
		if _, err := path.Match(in.Name, "x"); err != nil {
			return nil, SearchFilesOutput{}, fmt.Errorf("name %q is not a valid glob: %v", in.Name, err)
		}
	}
	limit := in.MaxResults
	if limit <= 0 {
		limit = defaultSearchResults
	}
	limit = min(limit, maxSearchResults)
	sr := &search{t: t, sb: sb, root: root, in: in, limit: limit, out: SearchFilesOutput{Matches: []SearchMatch{}}}
	if err := sr.walk(ctx, root); err != nil && !errors.Is(err, errSearchFull) {
		return nil, SearchFilesOutput{}, err
	}
	return nil, sr.out, nil
}

// errSearchFull stops a walk that reached a bound.
var errSearchFull = errors.New("search bound reached")

// search is one search_files walk.
type search struct {
	t     *tools
	sb    string
	root  string
	in    SearchFilesInput
	limit int
	read  int64
	out   SearchFilesOutput
}

// add records a match, or stops the walk when full.
func (s *search) add(m SearchMatch) error {
	if len(s.out.Matches) >= s.limit {
		s.out.Truncated = true
		return errSearchFull
	}
	s.out.Matches = append(s.out.Matches, m)
	return nil
}

// nameMatches applies the name glob to an entry.
func (s *search) nameMatches(p, name string) bool {
	if s.in.Name == "" {
		return true
	}
	if strings.Contains(s.in.Name, "/") {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, s.root), "/")
		ok, _ := path.Match(s.in.Name, rel)
		return ok
	}
	ok, _ := path.Match(s.in.Name, name)
	return ok
}

// walk searches dir depth-first, entries in the order the API lists them.
func (s *search) walk(ctx context.Context, dir string) error {
	list, err := s.t.c.ListFiles(ctx, s.sb, dir)
	if err != nil {
		if dir == s.root {
			return apiError(fmt.Sprintf("search %s in sandbox %s", dir, s.sb), err)
		}
		s.out.Skipped = append(s.out.Skipped, dir+": "+err.Error())
		return nil
	}
	for _, fi := range list {
		if s.out.Walked >= maxSearchEntries {
			s.out.Truncated = true
			return errSearchFull
		}
		s.out.Walked++
		p := path.Join(dir, fi.Name)
		if fi.Type == "dir" {
			if fi.Name == ".git" || fi.Name == "node_modules" {
				s.out.Skipped = append(s.out.Skipped, p+": skipped (search inside it by passing it as path)")
				continue
			}
			if s.in.Contains == "" && s.nameMatches(p, fi.Name) {
				if err := s.add(SearchMatch{Path: p, Type: fi.Type}); err != nil {
					return err
				}
			}
			if err := s.walk(ctx, p); err != nil {
				return err
			}
			continue
		}
		if !s.nameMatches(p, fi.Name) {
			continue
		}
		if s.in.Contains == "" {
			if err := s.add(SearchMatch{Path: p, Type: fi.Type, Size: fi.Size}); err != nil {
				return err
			}
			continue
		}
		if fi.Type != "file" || fi.Size == 0 {
			continue
		}
		if fi.Size > maxSearchFileBytes {
			s.out.Skipped = append(s.out.Skipped, fmt.Sprintf("%s: %d bytes, over the 1 MiB a content search reads", p, fi.Size))
			continue
		}
		if s.read+fi.Size > maxSearchReadBytes {
			s.out.Truncated = true
			return errSearchFull
		}
		if err := s.grep(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// grep adds the lines of file p that contain the text searched for.
func (s *search) grep(ctx context.Context, p string) error {
	rc, _, err := s.t.c.ReadFile(ctx, s.sb, p)
	if err != nil {
		s.out.Skipped = append(s.out.Skipped, p+": "+err.Error())
		return nil
	}
	defer func() { _ = rc.Close() }()
	data, err := io.ReadAll(io.LimitReader(rc, maxSearchFileBytes))
	s.read += int64(len(data))
	if err != nil {
		s.out.Skipped = append(s.out.Skipped, p+": "+err.Error())
		return nil
	}
	for _, m := range grepLines(data, s.in.Contains) {
		m.Path = p
		if err := s.add(m); err != nil {
			return err
		}
	}
	return nil
}

// grepLines returns the lines of data that contain text (none for binary
// data: a file with a NUL byte), each cut to maxSearchLine bytes.
func grepLines(data []byte, text string) []SearchMatch {
	if text == "" || bytes.IndexByte(data, 0) >= 0 || !bytes.Contains(data, []byte(text)) {
		return nil
	}
	var out []SearchMatch
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxSearchFileBytes+1)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(text)) {
			continue
		}
		if len(line) > maxSearchLine {
			line = trimPartialRune(line[:maxSearchLine])
		}
		out = append(out, SearchMatch{Line: n, Text: toValidUTF8(line)})
	}
	return out
}
