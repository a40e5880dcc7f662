package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stead-dev/stead/client"
)

// Output limits: what a tool result carries at most, so that one call
// cannot flood the model's context.
const (
	defaultExecOutput = 64 << 10
	maxExecOutput     = 1 << 20
	defaultReadBytes  = 256 << 10
	maxReadBytes      = 4 << 20
)

// register adds every tool to s.
func (t *tools) register(s *sdk.Server) {
	yes, no := true, false

	execIn := t.inputSchema(schemaFor[ExecInput]())
	execIn.Properties["command"] = &jsonschema.Schema{
		Description: "The command: an array is the argv, run directly (e.g. [\"ls\", \"-la\"]); " +
			"a string is a shell command line, run with /bin/sh -c.",
		OneOf: []*jsonschema.Schema{
			{Type: "array", Items: &jsonschema.Schema{Type: "string"}, MinItems: jsonschema.Ptr(1)},
			{Type: "string", MinLength: jsonschema.Ptr(1)},
		},
	}
	sdk.AddTool(s, &sdk.Tool{
		Name:  "exec",
		Title: "Run a command in a sandbox",
		Description: "Runs a command in a running sandbox and returns its exit code, stdout and stderr " +
			"(each cut to max_output_bytes, keeping the start and the end). A non-zero exit code is a " +
			"result, not an error. A stopped or paused sandbox answers an error: call start first. " +
			"Long commands: when the request carries a progressToken, a progress notification with the " +
			"latest output is sent every 10 s while the command runs (a client that resets its request " +
			"timeout on progress then waits as long as the command takes). Clients that do not: pass " +
			"background: true for anything that may run longer than about a minute (npm install, a test " +
			"suite); the command is left running and a handle is returned at once: follow it with " +
			"exec_wait (blocks up to a minute at a time) or exec_poll (returns at once).",
		InputSchema: execIn,
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &yes},
	}, t.exec)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "read_file",
		Title: "Read a file of a sandbox",
		Description: "Reads a file of a sandbox (running or stopped). UTF-8 text comes back as is; other bytes " +
			"base64-encoded (encoding says which). At most max_bytes are returned; truncated says when " +
			"the file is longer.",
		InputSchema: t.inputSchema(schemaFor[ReadFileInput]()),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, t.readFile)

	sdk.AddTool(s, &sdk.Tool{
		Name:        "write_file",
		Title:       "Write a file of a sandbox",
		Description: "Creates or replaces a file of a sandbox with content (UTF-8 text, or base64 with encoding \"base64\").",
		InputSchema: t.inputSchema(schemaFor[WriteFileInput]()),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, t.writeFile)

	sdk.AddTool(s, &sdk.Tool{
		Name:        "list_files",
		Title:       "List a directory of a sandbox",
		Description: "Lists the entries of a directory of a sandbox with their type, size, mode and modification time.",
		InputSchema: t.inputSchema(schemaFor[ListFilesInput]()),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, t.listFiles)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "disk_usage",
		Title: "Show where the disk space went",
		Description: "Walks a path of a sandbox (default /) and returns its largest entries, the directories whose own " +
			"files take the most space and the largest files, with the sandbox's disk quota and its use. " +
			"Use it when writes fail with 'disk quota exceeded' or a limit warning says the disk is filling.",
		InputSchema: t.inputSchema(schemaFor[DiskUsageInput]()),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, t.diskUsage)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "checkpoint_put",
		Title: "Save a checkpoint document",
		Description: "Writes a JSON document as the next version of a named checkpoint document of the sandbox, " +
			"atomically and durably, outside the sandbox (it survives crashes, restarts and rollbacks). " +
			"Set if_version to the version you last read to fail instead of overwriting a newer write. " +
			"Earlier versions are kept.",
		InputSchema: t.inputSchema(schemaFor[CheckpointPutInput]()),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, t.checkpointPut)

	sdk.AddTool(s, &sdk.Tool{
		Name:        "checkpoint_get",
		Title:       "Read a checkpoint document",
		Description: "Reads the latest version (or version N) of a named checkpoint document of the sandbox, with its provenance.",
		InputSchema: t.inputSchema(schemaFor[CheckpointGetInput]()),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, t.checkpointGet)

	sessIn := t.inputSchema(schemaFor[SessionAppendInput]())
	sessIn.Properties["type"].Enum = sessionEventTypes
	sdk.AddTool(s, &sdk.Tool{
		Name:  "session_append",
		Title: "Append to the session log",
		Description: "Appends one event (model_call, tool_intent, tool_result, error, approval_*, checkpoint, " +
			"compaction or note) to a run of the sandbox's session log. Record a tool_intent before a side " +
			"effect and a tool_result (intent = the intent's seq) after it, so a resumed agent knows what may " +
			"have happened. Without run, pass thread to start a new run of it (a thread that does not exist yet " +
			"is created); reuse the returned run.",
		InputSchema: sessIn,
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, t.sessionAppend)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "orient",
		Title: "Where do I stand?",
		Description: "One call for a resuming agent: why and when the sandbox last stopped, its latest checkpoint " +
			"documents, the tails of its workspace notes, the latest session run with every in-doubt tool " +
			"intent and its last events, as prompt-ready text.",
		InputSchema: t.inputSchema(schemaFor[OrientInput]()),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, t.orient)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "snapshot",
		Title: "Snapshot a sandbox's files",
		Description: "Takes a read-only, point-in-time snapshot of the sandbox's files (running or stopped). " +
			"Fork or roll back to it later.",
		InputSchema: t.inputSchema(schemaFor[SnapshotInput]()),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, t.snapshot)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "fork",
		Title: "Fork a sandbox or snapshot",
		Description: "Creates count new sandboxes (default 1) with the files of a snapshot (snap-...) or of a " +
			"sandbox (snapshotted first), started unless no_start. Delete them with delete when done.",
		InputSchema: t.inputSchema(schemaFor[ForkInput]()),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, t.fork)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "rollback",
		Title: "Roll a sandbox back to a snapshot",
		Description: "Returns the sandbox's files to a snapshot in place (a running sandbox is restarted). A safety " +
			"snapshot of the replaced files is taken first: roll back to it to undo.",
		InputSchema: t.inputSchema(schemaFor[RollbackInput]()),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no},
	}, t.rollback)

	t.registerJobs(s)
	t.registerLifecycle(s)
	t.registerFiles(s)
	t.registerNetwork(s)
}

// Command is exec's command: an argv, or a shell command line (given as a
// JSON string) run with /bin/sh -c.
type Command []string

// UnmarshalJSON accepts an array of strings or one string.
func (c *Command) UnmarshalJSON(b []byte) error {
	var line string
	if err := json.Unmarshal(b, &line); err == nil {
		*c = Command{"/bin/sh", "-c", line}
		return nil
	}
	var argv []string
	if err := json.Unmarshal(b, &argv); err != nil {
		return errors.New("command must be an array of strings or a string")
	}
	*c = argv
	return nil
}

// ExecInput is the input of exec.
type ExecInput struct {
	Sandbox        string            `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Command        Command           `json:"command"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"Working directory (default /home/agent for agent, / for root)."`
	User           string            `json:"user,omitempty" jsonschema:"agent (default) or root."`
	Env            map[string]string `json:"env,omitempty" jsonschema:"Extra environment variables."`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"Text written to the command's stdin, which is then closed."`
	Timeout        string            `json:"timeout,omitempty" jsonschema:"Kill the command's process group after this long, as a Go duration (e.g. 30s, 5m)."`
	Background     bool              `json:"background,omitempty" jsonschema:"Leave the command running and return at once with a handle for exec_wait and exec_poll; output goes to log_path."`
	MaxOutputBytes int               `json:"max_output_bytes,omitempty" jsonschema:"Cap on each of stdout and stderr in the result (default 65536, at most 1048576)."`
}

// ExecOutput is the result of exec.
type ExecOutput struct {
	ExitCode        int    `json:"exit_code" jsonschema:"The command's exit code (128+N when killed by signal N)."`
	Signal          string `json:"signal,omitempty" jsonschema:"The signal that killed it, if any."`
	TimedOut        bool   `json:"timed_out,omitempty" jsonschema:"The timeout expired and the command was killed."`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty" jsonschema:"stdout was longer than max_output_bytes; its middle was cut."`
	StderrTruncated bool   `json:"stderr_truncated,omitempty" jsonschema:"stderr was longer than max_output_bytes; its middle was cut."`
	Pid             int    `json:"pid,omitempty"`
	LogPath         string `json:"log_path,omitempty" jsonschema:"Background only: where the command's output goes, in the sandbox."`
	Handle          string `json:"handle,omitempty" jsonschema:"Background only: pass it to exec_wait or exec_poll."`
	Running         bool   `json:"running,omitempty" jsonschema:"Background only: the command is still running."`
}

// exec runs a command.
func (t *tools) exec(ctx context.Context, call *sdk.CallToolRequest, in ExecInput) (*sdk.CallToolResult, ExecOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	if len(in.Command) == 0 || in.Command[0] == "" {
		return nil, ExecOutput{}, errors.New("command is empty")
	}
	if in.Timeout != "" {
		if _, err := time.ParseDuration(in.Timeout); err != nil {
			return nil, ExecOutput{}, fmt.Errorf("timeout %q is not a Go duration such as 30s or 5m", in.Timeout)
		}
	}
	req := client.ExecRequest{
		Command: in.Command, Env: in.Env, Cwd: in.Cwd, User: in.User,
		Timeout: in.Timeout, Stdin: in.Stdin, Background: in.Background,
	}
	what := "exec in sandbox " + sb
	if in.Background {
		job, err := t.startJob(ctx, sb, req)
		if err != nil {
			return nil, ExecOutput{}, execError(what, err)
		}
		return nil, ExecOutput{Pid: job.Pid, LogPath: job.LogPath, Handle: job.Handle(), Running: true}, nil
	}
	limit := in.MaxOutputBytes
	if limit <= 0 {
		limit = defaultExecOutput
	}
	limit = min(limit, maxExecOutput)
	stdout, stderr := newHeadTail(limit), newHeadTail(limit)
	var outW, errW io.Writer = stdout, stderr
	if call != nil && call.Params != nil && call.Session != nil {
		if token := call.Params.GetProgressToken(); token != nil {
			recent := &recentOutput{limit: progressOutputBytes}
			outW, errW = io.MultiWriter(stdout, recent), io.MultiWriter(stderr, recent)
			stop := t.reportProgress(ctx, call.Session, token, "exec "+in.Command.String(), recent.Take)
			defer stop()
		}
	}
	res, err := t.c.ExecStream(ctx, sb, req, outW, errW)
	if err != nil {
		return nil, ExecOutput{}, execError(what, err)
	}
	return nil, ExecOutput{
		ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut, Pid: res.Pid,
		Stdout: stdout.String(), Stderr: stderr.String(),
		StdoutTruncated: stdout.Truncated(), StderrTruncated: stderr.Truncated(),
	}, nil
}

// ReadFileInput is the input of read_file.
type ReadFileInput struct {
	Sandbox  string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Path     string `json:"path" jsonschema:"Absolute path of the file in the sandbox."`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"Return at most this many bytes (default 262144, at most 4194304)."`
}

// ReadFileOutput is the result of read_file.
type ReadFileOutput struct {
	Path      string `json:"path"`
	Size      int64  `json:"size" jsonschema:"Size of the whole file in bytes."`
	Mode      string `json:"mode" jsonschema:"Permission bits, octal."`
	ModTime   string `json:"mod_time" jsonschema:"Modification time, RFC 3339."`
	Encoding  string `json:"encoding" jsonschema:"utf-8: content is the text; base64: content is the bytes, base64-encoded."`
	Content   string `json:"content"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"The file is longer than max_bytes; only its start is returned."`
}

// readFile reads a file.
func (t *tools) readFile(ctx context.Context, _ *sdk.CallToolRequest, in ReadFileInput) (*sdk.CallToolResult, ReadFileOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, ReadFileOutput{}, err
	}
	limit := in.MaxBytes
	if limit <= 0 {
		limit = defaultReadBytes
	}
	limit = min(limit, maxReadBytes)
	what := fmt.Sprintf("read %s in sandbox %s", in.Path, sb)
	rc, info, err := t.c.ReadFile(ctx, sb, in.Path)
	if err != nil {
		return nil, ReadFileOutput{}, apiError(what, err)
	}
	defer func() { _ = rc.Close() }()
	data, err := io.ReadAll(io.LimitReader(rc, int64(limit)+1))
	if err != nil {
		return nil, ReadFileOutput{}, apiError(what, err)
	}
	truncated := len(data) > limit
	if truncated {
		data = data[:limit]
	}
	out := ReadFileOutput{
		Path: in.Path, Size: info.Size, Mode: fmt.Sprintf("%04o", info.Mode&0o7777),
		ModTime: info.ModTime.UTC().Format(time.RFC3339Nano), Truncated: truncated,
	}
	if info.Path != "" {
		out.Path = info.Path
	}
	text := data
	if truncated {
		text = trimPartialRune(text)
	}
	if utf8.Valid(text) {
		out.Encoding, out.Content = "utf-8", string(text)
	} else {
		out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(data)
	}
	return nil, out, nil
}

// WriteFileInput is the input of write_file.
type WriteFileInput struct {
	Sandbox     string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Path        string `json:"path" jsonschema:"Absolute path of the file in the sandbox."`
	Content     string `json:"content" jsonschema:"The new content of the file."`
	Encoding    string `json:"encoding,omitempty" jsonschema:"utf-8 (default): content is text; base64: content is base64-encoded bytes."`
	Mode        string `json:"mode,omitempty" jsonschema:"Permission bits, octal (default 0644), e.g. 0755 for a script."`
	MakeParents bool   `json:"make_parents,omitempty" jsonschema:"Create missing parent directories first."`
}

// FileEntry describes a file of a sandbox.
type FileEntry struct {
	Name    string `json:"name"`
	Path    string `json:"path"`
	Type    string `json:"type" jsonschema:"file, dir, symlink or other."`
	Size    int64  `json:"size"`
	Mode    string `json:"mode" jsonschema:"Permission bits, octal."`
	ModTime string `json:"mod_time" jsonschema:"Modification time, RFC 3339."`
	Target  string `json:"target,omitempty" jsonschema:"Symlink target."`
}

// fileEntry converts a FileInfo.
func fileEntry(fi client.FileInfo) FileEntry {
	return FileEntry{
		Name: fi.Name, Path: fi.Path, Type: fi.Type, Size: fi.Size,
		Mode: fmt.Sprintf("%04o", fi.Mode&0o7777), ModTime: fi.ModTime.UTC().Format(time.RFC3339Nano),
		Target: fi.Target,
	}
}

// writeFile writes a file.
func (t *tools) writeFile(ctx context.Context, _ *sdk.CallToolRequest, in WriteFileInput) (*sdk.CallToolResult, FileEntry, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, FileEntry{}, err
	}
	var data []byte
	switch in.Encoding {
	case "", "utf-8", "utf8", "text":
		data = []byte(in.Content)
	case "base64":
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, FileEntry{}, fmt.Errorf("content is not valid base64: %v", err)
		}
	default:
		return nil, FileEntry{}, fmt.Errorf("encoding %q: want utf-8 or base64", in.Encoding)
	}
	var mode uint64
	if in.Mode != "" {
		if mode, err = strconv.ParseUint(in.Mode, 8, 32); err != nil || mode > 0o7777 {
			return nil, FileEntry{}, fmt.Errorf("mode %q: want octal permission bits such as 0644", in.Mode)
		}
	}
	what := fmt.Sprintf("write %s in sandbox %s", in.Path, sb)
	if in.MakeParents {
		if dir := path.Dir(in.Path); dir != "/" && dir != "." {
			if err := t.c.Mkdir(ctx, sb, dir, true); err != nil {
				return nil, FileEntry{}, apiError(what, err)
			}
		}
	}
	info, err := t.c.WriteFile(ctx, sb, in.Path, uint32(mode), bytes.NewReader(data))
	if err != nil {
		return nil, FileEntry{}, apiError(what, err)
	}
	return nil, fileEntry(info), nil
}

// ListFilesInput is the input of list_files.
type ListFilesInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Path    string `json:"path" jsonschema:"Absolute path of the directory in the sandbox."`
}

// ListFilesOutput is the result of list_files.
type ListFilesOutput struct {
	Path    string      `json:"path"`
	Entries []FileEntry `json:"entries"`
}

// listFiles lists a directory.
func (t *tools) listFiles(ctx context.Context, _ *sdk.CallToolRequest, in ListFilesInput) (*sdk.CallToolResult, ListFilesOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, ListFilesOutput{}, err
	}
	list, err := t.c.ListFiles(ctx, sb, in.Path)
	if err != nil {
		return nil, ListFilesOutput{}, apiError(fmt.Sprintf("list %s in sandbox %s", in.Path, sb), err)
	}
	out := ListFilesOutput{Path: in.Path, Entries: make([]FileEntry, 0, len(list))}
	for _, fi := range list {
		out.Entries = append(out.Entries, fileEntry(fi))
	}
	return nil, out, nil
}

// DiskUsageInput is the input of disk_usage.
type DiskUsageInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Path    string `json:"path,omitempty" jsonschema:"Absolute path to walk (default /)."`
	Top     int    `json:"top,omitempty" jsonschema:"Entries in each list (default 10)."`
}

// diskUsage reports where the space went.
func (t *tools) diskUsage(ctx context.Context, _ *sdk.CallToolRequest, in DiskUsageInput) (*sdk.CallToolResult, client.DiskUsage, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, client.DiskUsage{}, err
	}
	u, err := t.c.DiskUsage(ctx, sb, in.Path, in.Top)
	if err != nil {
		return nil, client.DiskUsage{}, apiError(fmt.Sprintf("disk usage of %s in sandbox %s", in.Path, sb), err)
	}
	return nil, u, nil
}

// CheckpointPutInput is the input of checkpoint_put.
type CheckpointPutInput struct {
	Sandbox   string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Name      string `json:"name" jsonschema:"Document name, e.g. progress."`
	Agent     string `json:"agent,omitempty" jsonschema:"Named agent within the sandbox (default: the sandbox's own)."`
	Body      any    `json:"body,omitempty" jsonschema:"The document's body: any JSON value, usually an object. Required."`
	Document  any    `json:"document,omitempty" jsonschema:"Deprecated: the old name of body."`
	IfVersion *int64 `json:"if_version,omitempty" jsonschema:"Write only if the latest version is this one (0: the document must not exist yet)."`
	Run       string `json:"run,omitempty" jsonschema:"Session-log run id recorded as provenance."`
	Keep      int    `json:"keep,omitempty" jsonschema:"History depth: keep at most this many versions (default 10)."`
}

// CheckpointOutput is a version of a checkpoint document.
type CheckpointOutput struct {
	Name      string `json:"name"`
	Agent     string `json:"agent,omitempty"`
	Version   int64  `json:"version" jsonschema:"1, 2, 3 ... per document."`
	CreatedAt string `json:"created_at" jsonschema:"When this version was written, RFC 3339."`
	Principal string `json:"principal" jsonschema:"Id of the API key that wrote it."`
	Run       string `json:"run,omitempty"`
	Note      string `json:"note,omitempty"`
	Body      any    `json:"body,omitempty" jsonschema:"The document's body (checkpoint_get only)."`
}

// checkpointOutput converts a Checkpoint, decoding its body.
func checkpointOutput(cp client.Checkpoint) (CheckpointOutput, error) {
	out := CheckpointOutput{
		Name: cp.Name, Agent: cp.Agent, Version: cp.Version,
		CreatedAt: cp.CreatedAt.UTC().Format(time.RFC3339Nano),
		Principal: cp.Principal, Run: cp.Run, Note: cp.Note,
	}
	if len(cp.Body) > 0 {
		if err := json.Unmarshal(cp.Body, &out.Body); err != nil {
			return out, fmt.Errorf("decode checkpoint %s v%d: %w", cp.Name, cp.Version, err)
		}
	}
	return out, nil
}

// checkpointPut writes a checkpoint document.
func (t *tools) checkpointPut(ctx context.Context, _ *sdk.CallToolRequest, in CheckpointPutInput) (*sdk.CallToolResult, CheckpointOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, CheckpointOutput{}, err
	}
	doc := in.Body
	if doc == nil {
		doc = in.Document
	}
	if doc == nil {
		return nil, CheckpointOutput{}, errors.New("body is missing: pass the document's body, any JSON value (e.g. {\"step\": 3})")
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return nil, CheckpointOutput{}, fmt.Errorf("encode body: %v", err)
	}
	cp, err := t.c.PutCheckpoint(ctx, sb, in.Name, body, client.PutCheckpointOptions{
		Agent: in.Agent, IfVersion: in.IfVersion, Run: in.Run, Keep: in.Keep,
	})
	if err != nil {
		return nil, CheckpointOutput{}, apiError(fmt.Sprintf("put checkpoint %s of sandbox %s", in.Name, sb), err)
	}
	out, err := checkpointOutput(cp)
	out.Body = nil
	return nil, out, err
}

// CheckpointGetInput is the input of checkpoint_get.
type CheckpointGetInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Name    string `json:"name" jsonschema:"Document name."`
	Agent   string `json:"agent,omitempty" jsonschema:"Named agent within the sandbox (default: the sandbox's own)."`
	Version int64  `json:"version,omitempty" jsonschema:"Version to read (default: the latest)."`
}

// checkpointGet reads a checkpoint document.
func (t *tools) checkpointGet(ctx context.Context, _ *sdk.CallToolRequest, in CheckpointGetInput) (*sdk.CallToolResult, CheckpointOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, CheckpointOutput{}, err
	}
	cp, err := t.c.GetCheckpoint(ctx, sb, in.Agent, in.Name, in.Version)
	if err != nil {
		return nil, CheckpointOutput{}, apiError(fmt.Sprintf("get checkpoint %s of sandbox %s", in.Name, sb), err)
	}
	out, err := checkpointOutput(cp)
	return nil, out, err
}

// SessionAppendInput is the input of session_append.
type SessionAppendInput struct {
	Sandbox        string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Run            string `json:"run,omitempty" jsonschema:"Run id (run-...) to append to."`
	Thread         string `json:"thread,omitempty" jsonschema:"Without run: start a new run of this thread (id or name) and append to it; an absent thread is created under this name."`
	Type           string `json:"type" jsonschema:"Event type: model_call, tool_intent, tool_result, error, approval_requested, approval_granted, approval_denied, checkpoint, compaction or note."`
	Payload        any    `json:"payload,omitempty" jsonschema:"The event's data: any JSON value (at most 256 KiB)."`
	IdempotencyKey string `json:"idempotency_key,omitempty" jsonschema:"Retrying with the same key stores nothing new and returns the stored event."`
	Intent         int64  `json:"intent,omitempty" jsonschema:"For a tool_result: the seq of the tool_intent it answers."`
	ModelSession   string `json:"model_session,omitempty" jsonschema:"Model session id to tag the event with."`
}

// SessionEventOutput is a stored session-log event.
type SessionEventOutput struct {
	Run            string `json:"run" jsonschema:"The run it was appended to: pass it as run next time."`
	Seq            int64  `json:"seq" jsonschema:"1, 2, 3 ... per run."`
	Time           string `json:"time" jsonschema:"RFC 3339."`
	Type           string `json:"type"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Intent         int64  `json:"intent,omitempty"`
	ModelSession   string `json:"model_session,omitempty"`
}

// sessionEventTypes are the event types the session log takes.
var sessionEventTypes = []any{
	client.EventModelCall, client.EventToolIntent, client.EventToolResult, client.EventError,
	client.EventApprovalRequested, client.EventApprovalGranted, client.EventApprovalDenied,
	client.EventCheckpoint, client.EventCompaction, client.EventNote,
}

// sessionAppend appends an event.
func (t *tools) sessionAppend(ctx context.Context, _ *sdk.CallToolRequest, in SessionAppendInput) (*sdk.CallToolResult, SessionEventOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, SessionEventOutput{}, err
	}
	run := in.Run
	if run == "" && in.Thread != "" {
		r, err := t.c.StartRun(ctx, sb, in.Thread)
		if isStatus(err, 404) {
			// The thread does not exist yet: create it, then start its
			// run. A concurrent create of the same name is a conflict,
			// and the thread is there either way.
			if _, cerr := t.c.CreateThread(ctx, sb, client.CreateThreadRequest{Name: in.Thread}); cerr != nil && !isStatus(cerr, 409) {
				return nil, SessionEventOutput{}, apiError(fmt.Sprintf("create thread %s in sandbox %s", in.Thread, sb), cerr)
			}
			r, err = t.c.StartRun(ctx, sb, in.Thread)
		}
		if err != nil {
			return nil, SessionEventOutput{}, apiError(fmt.Sprintf("start a run of thread %s in sandbox %s", in.Thread, sb), err)
		}
		run = r.ID
	}
	if run == "" {
		run = t.opts.Run
	}
	if run == "" {
		return nil, SessionEventOutput{}, errors.New("no run: pass run (a run id), or thread to start a new run, or start `stead mcp` with --run")
	}
	var payload json.RawMessage
	if in.Payload != nil {
		if payload, err = json.Marshal(in.Payload); err != nil {
			return nil, SessionEventOutput{}, fmt.Errorf("encode payload: %v", err)
		}
	}
	ev, err := t.c.AppendEvent(ctx, sb, run, client.AppendEvent{
		Type: in.Type, Payload: payload, IdempotencyKey: in.IdempotencyKey,
		Intent: in.Intent, ModelSession: in.ModelSession,
	})
	if err != nil {
		return nil, SessionEventOutput{}, apiError(fmt.Sprintf("append to run %s in sandbox %s", run, sb), err)
	}
	return nil, SessionEventOutput{
		Run: ev.Run, Seq: ev.Seq, Time: ev.Time.UTC().Format(time.RFC3339Nano), Type: ev.Type,
		IdempotencyKey: ev.IdempotencyKey, Intent: ev.Intent, ModelSession: ev.ModelSession,
	}, nil
}

// OrientInput is the input of orient.
type OrientInput struct {
	Sandbox string   `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Files   []string `json:"files,omitempty" jsonschema:"Sandbox paths whose tails to include (default /workspace/decisions.md and /workspace/plan.md)."`
	Events  int      `json:"events,omitempty" jsonschema:"How many recent session events to include (default 20, at most 200)."`
}

// OrientOutput is the result of orient.
type OrientOutput struct {
	// Text is the prompt-ready summary.
	Text string `json:"text" jsonschema:"Prompt-ready summary of where the agent stands."`
	// Orient is the same as data (client.Orient).
	Orient any `json:"orient" jsonschema:"The same as structured data: sandbox, stop_reason, last_stopped_at, checkpoints, files, run (with in_doubt intents), recent_events."`
}

// orient reports where a resuming agent stands. The result's text content
// is the prompt-ready summary; the structured content has the data too.
func (t *tools) orient(ctx context.Context, _ *sdk.CallToolRequest, in OrientInput) (*sdk.CallToolResult, OrientOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, OrientOutput{}, err
	}
	or, err := t.c.Orient(ctx, sb, in.Files, in.Events)
	if err != nil {
		return nil, OrientOutput{}, apiError("orient sandbox "+sb, err)
	}
	res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: or.Text}}}
	return res, OrientOutput{Text: or.Text, Orient: or}, nil
}

// SnapshotInput is the input of snapshot.
type SnapshotInput struct {
	Sandbox     string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Label       string `json:"label,omitempty" jsonschema:"Short label, e.g. before-refactor."`
	Description string `json:"description,omitempty" jsonschema:"Longer description."`
}

// snapshot takes a snapshot.
func (t *tools) snapshot(ctx context.Context, _ *sdk.CallToolRequest, in SnapshotInput) (*sdk.CallToolResult, client.Snapshot, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, client.Snapshot{}, err
	}
	s, err := t.c.CreateSnapshot(ctx, sb, client.CreateSnapshotRequest{Label: in.Label, Description: in.Description})
	if err != nil {
		return nil, client.Snapshot{}, apiError("snapshot sandbox "+sb, err)
	}
	return nil, s, nil
}

// ForkInput is the input of fork.
type ForkInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"Sandbox to fork (id or name) when source is not given."`
	Source  string `json:"source,omitempty" jsonschema:"Snapshot id (snap-...) or sandbox id or name to fork; default: sandbox."`
	Count   int    `json:"count,omitempty" jsonschema:"How many sandboxes to create (default 1, at most 50)."`
	NoStart bool   `json:"no_start,omitempty" jsonschema:"Create them stopped."`
}

// ForkOutput is the result of fork.
type ForkOutput struct {
	Sandboxes []client.Sandbox `json:"sandboxes" jsonschema:"The new sandboxes."`
}

// fork forks a snapshot or sandbox.
func (t *tools) fork(ctx context.Context, _ *sdk.CallToolRequest, in ForkInput) (*sdk.CallToolResult, ForkOutput, error) {
	if t.opts.Confine {
		return nil, ForkOutput{}, t.confinedError("fork (it makes new sandboxes)")
	}
	src := in.Source
	if src == "" {
		var err error
		if src, err = t.sandbox(in.Sandbox); err != nil {
			return nil, ForkOutput{}, err
		}
	}
	list, err := t.c.Fork(ctx, src, client.ForkRequest{Count: in.Count, NoStart: in.NoStart})
	if err != nil {
		return nil, ForkOutput{}, apiError("fork "+src, err)
	}
	if list == nil {
		list = []client.Sandbox{}
	}
	return nil, ForkOutput{Sandboxes: list}, nil
}

// RollbackInput is the input of rollback.
type RollbackInput struct {
	Sandbox  string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Snapshot string `json:"snapshot" jsonschema:"Snapshot id (snap-...) to return the files to."`
}

// rollback rolls a sandbox back.
func (t *tools) rollback(ctx context.Context, _ *sdk.CallToolRequest, in RollbackInput) (*sdk.CallToolResult, client.RollbackResult, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, client.RollbackResult{}, err
	}
	res, err := t.c.Rollback(ctx, sb, in.Snapshot)
	if err != nil {
		return nil, client.RollbackResult{}, apiError(fmt.Sprintf("roll sandbox %s back to %s", sb, in.Snapshot), err)
	}
	return nil, res, nil
}

// headTail is an io.Writer that keeps the first and the last limit/2 bytes
// of what is written to it.
type headTail struct {
	limit int
	head  []byte
	tail  []byte // ring of the last bytes once head is full
	total int64
}

// newHeadTail returns a headTail keeping about limit bytes.
func newHeadTail(limit int) *headTail { return &headTail{limit: limit} }

// Write keeps what fits in the head, then the tail.
func (h *headTail) Write(p []byte) (int, error) {
	n := len(p)
	h.total += int64(n)
	headCap := h.limit - h.limit/2
	if room := headCap - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 {
		tailCap := h.limit / 2
		h.tail = append(h.tail, p...)
		if len(h.tail) > tailCap {
			h.tail = append(h.tail[:0], h.tail[len(h.tail)-tailCap:]...)
		}
	}
	return n, nil
}

// Truncated reports whether bytes were dropped.
func (h *headTail) Truncated() bool { return h.total > int64(len(h.head)+len(h.tail)) }

// String returns what was kept, with a marker where bytes were dropped,
// as valid UTF-8.
func (h *headTail) String() string {
	if !h.Truncated() {
		return toValidUTF8(append(append([]byte(nil), h.head...), h.tail...))
	}
	dropped := h.total - int64(len(h.head)+len(h.tail))
	return toValidUTF8(h.head) + fmt.Sprintf("\n... [%d bytes cut] ...\n", dropped) + toValidUTF8(h.tail)
}

// toValidUTF8 replaces invalid UTF-8 (binary output, a rune cut in two)
// with U+FFFD.
func toValidUTF8(b []byte) string {
	return string(bytes.ToValidUTF8(b, []byte("\uFFFD")))
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of b (a
// rune cut by a byte limit).
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// CutEnd drops the last n bytes written (a trailer that is not output).
func (h *headTail) CutEnd(n int) {
	if n <= 0 {
		return
	}
	n = int(min(int64(n), h.total))
	h.total -= int64(n)
	if k := min(n, len(h.tail)); k > 0 {
		h.tail = h.tail[:len(h.tail)-k]
		n -= k
	}
	if n > 0 {
		h.head = h.head[:max(0, len(h.head)-n)]
	}
}
