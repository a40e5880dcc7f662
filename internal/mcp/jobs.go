package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stead-dev/stead/client"
)

// Background commands (exec with background: true).
//
// The daemon's background exec starts the command detached, its stdout and
// stderr going to a log file under /var/log/stead in the sandbox, and
// returns its pid and log path; it keeps no exit status. So the server
// wraps the command in /bin/sh, which runs it and then appends one line to
// the same log: a marker with a random nonce and the exit code. The
// handle returned to the model names the sandbox, the pid, the nonce and
// the log; it is all the state there is (no table in the server, so a
// handle outlives a restart of `stead mcp`). exec_poll and exec_wait read
// the log from an offset through the file API, strip the marker and report
// the exit code once it is there. A command that ended without writing the
// marker (killed with its process group, or the sandbox stopped) is "gone":
// its pid no longer runs a process whose command line holds the nonce.

// jobMarkerPrefix starts the line the wrapper appends to the log.
const jobMarkerPrefix = "[stead-mcp-exit:"

// jobWrapper runs "$@", then appends the marker line ($0) and its exit
// code to its stdout, the log.
const jobWrapper = `"$@"; s=$?; printf '\n%s %d\n' "$0" "$s"`

// maxMarkerLine bounds the marker line: prefix, 16 hex digits, "] ", an
// exit code and two newlines.
const maxMarkerLine = 64

// job identifies a background command.
type job struct {
	Sandbox string
	Pid     int
	Nonce   string // 16 hex digits
	LogPath string // /var/log/stead/exec-*.log
}

// Handle returns the job's handle: sandbox/pid/nonce/log file name.
func (j job) Handle() string {
	return fmt.Sprintf("%s/%d/%s/%s", j.Sandbox, j.Pid, j.Nonce, path.Base(j.LogPath))
}

// marker returns the marker line's start (without the exit code).
func (j job) marker() string { return jobMarkerPrefix + j.Nonce + "]" }

var (
	nonceRE   = regexp.MustCompile(`^[0-9a-f]{16}$`)
	logNameRE = regexp.MustCompile(`^exec-[A-Za-z0-9_-]{1,64}\.log$`)
	sbNameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
)

// jobLogDir is where the daemon's background exec writes its logs.
const jobLogDir = "/var/log/stead"

// parseHandle parses a handle made by job.Handle.
func parseHandle(h string) (job, error) {
	bad := func(why string) (job, error) {
		return job{}, fmt.Errorf("handle %q is not one exec returned (%s): pass the handle of exec with background: true", h, why)
	}
	parts := strings.Split(h, "/")
	if len(parts) != 4 {
		return bad("want sandbox/pid/nonce/log")
	}
	if !sbNameRE.MatchString(parts[0]) {
		return bad("bad sandbox")
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 || strconv.Itoa(pid) != parts[1] {
		return bad("bad pid")
	}
	if !nonceRE.MatchString(parts[2]) {
		return bad("bad nonce")
	}
	if !logNameRE.MatchString(parts[3]) {
		return bad("bad log name")
	}
	return job{Sandbox: parts[0], Pid: pid, Nonce: parts[2], LogPath: jobLogDir + "/" + parts[3]}, nil
}

// splitJobLog looks for job's marker line at the end of data (the log's
// bytes from some offset to its end): it returns the output before it and
// the exit code, or data whole and done false. A marker must be the last
// line and carry a decimal exit code; anything else is output.
func splitJobLog(data []byte, nonce string) (out []byte, code int, done bool) {
	m := []byte("\n" + jobMarkerPrefix + nonce + "] ")
	i := bytes.LastIndex(data, m)
	if i < 0 {
		// The wrapper's newline may sit before the offset the read began at.
		m = m[1:]
		if !bytes.HasPrefix(data, m) {
			return data, 0, false
		}
		i = 0
	}
	rest, ok := bytes.CutSuffix(data[i+len(m):], []byte("\n"))
	if !ok || len(rest) == 0 || len(rest) > 3 {
		return data, 0, false
	}
	n, err := strconv.Atoi(string(rest))
	if err != nil || n < 0 || n > 255 || strconv.Itoa(n) != string(rest) {
		return data, 0, false
	}
	return data[:i], n, true
}

// startJob starts req in the background, wrapped so that its exit code
// lands in its log.
func (t *tools) startJob(ctx context.Context, sb string, req client.ExecRequest) (job, error) {
	if req.Stdin != "" {
		return job{}, errors.New("stdin cannot be given to a background command (its stdin is /dev/null)")
	}
	var nb [8]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return job{}, fmt.Errorf("make a job nonce: %w", err)
	}
	j := job{Sandbox: sb, Nonce: hex.EncodeToString(nb[:])}
	req.Command = append([]string{"/bin/sh", "-c", jobWrapper, j.marker()}, req.Command...)
	req.Background = true
	res, err := t.c.Exec(ctx, sb, req)
	if err != nil {
		return job{}, err
	}
	j.Pid, j.LogPath = res.Pid, res.LogPath
	if path.Dir(j.LogPath) != jobLogDir || !logNameRE.MatchString(path.Base(j.LogPath)) {
		return job{}, fmt.Errorf("the daemon put the command's log at %q, not under %s: exec_wait cannot follow it", j.LogPath, jobLogDir)
	}
	return j, nil
}

// JobInput is the input of exec_poll.
type JobInput struct {
	Sandbox        string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name (default: the one in the handle)."`
	Handle         string `json:"handle" jsonschema:"The handle exec returned for a background command."`
	Offset         int64  `json:"offset,omitempty" jsonschema:"Return the output from this byte offset of the log on (pass next_offset of the previous call to see only what is new; default 0)."`
	MaxOutputBytes int    `json:"max_output_bytes,omitempty" jsonschema:"Cap on the output in the result (default 65536, at most 1048576); its middle is cut."`
}

// JobWaitInput is the input of exec_wait.
type JobWaitInput struct {
	JobInput
	Wait string `json:"wait,omitempty" jsonschema:"How long to wait at most, as a Go duration (default 50s, at most 10m). Keep it under your client's request timeout unless it resets the timeout on progress."`
}

// JobOutput is the result of exec_poll and exec_wait.
type JobOutput struct {
	Handle          string `json:"handle"`
	Running         bool   `json:"running" jsonschema:"The command is still running."`
	ExitCode        *int   `json:"exit_code,omitempty" jsonschema:"Its exit code, once it has ended (128+N when killed by signal N)."`
	Gone            bool   `json:"gone,omitempty" jsonschema:"It ended without an exit status: killed with its process group, or the sandbox stopped."`
	Output          string `json:"output" jsonschema:"stdout and stderr, interleaved, from offset on."`
	OutputTruncated bool   `json:"output_truncated,omitempty" jsonschema:"The output was longer than max_output_bytes; its middle was cut."`
	NextOffset      int64  `json:"next_offset" jsonschema:"Pass as offset next time to get only newer output."`
	LogPath         string `json:"log_path" jsonschema:"The log in the sandbox (read_file reads it whole)."`
	Waited          string `json:"waited,omitempty" jsonschema:"exec_wait: how long it waited."`
}

// registerJobs adds exec_poll and exec_wait.
func (t *tools) registerJobs(s *sdk.Server) {
	no := false
	sdk.AddTool(s, &sdk.Tool{
		Name:  "exec_poll",
		Title: "Look at a background command",
		Description: "Returns at once whether a background command (exec with background: true) still runs, its " +
			"exit code once it has ended, and its output from offset on.",
		InputSchema: t.inputSchema(schemaFor[JobInput]()),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, t.execPoll)
	sdk.AddTool(s, &sdk.Tool{
		Name:  "exec_wait",
		Title: "Wait for a background command",
		Description: "Waits until a background command (exec with background: true) ends or wait passes, then returns " +
			"like exec_poll. While it waits, a progress notification with the latest output is sent every 10 s " +
			"when the request carries a progressToken. Call it again while running is true.",
		InputSchema: t.inputSchema(schemaFor[JobWaitInput]()),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, t.execWait)
}

// jobOf parses in's handle and checks it against the sandbox given.
func (t *tools) jobOf(in JobInput) (job, error) {
	j, err := parseHandle(in.Handle)
	if err != nil {
		return job{}, err
	}
	if in.Offset < 0 {
		return job{}, fmt.Errorf("offset %d is negative", in.Offset)
	}
	if in.Sandbox != "" && in.Sandbox != j.Sandbox {
		return job{}, fmt.Errorf("handle %q belongs to sandbox %s, not %s", in.Handle, j.Sandbox, in.Sandbox)
	}
	if _, err := t.sandbox(j.Sandbox); err != nil {
		return job{}, err
	}
	return j, nil
}

// look reads j's log from offset: the output, the exit code once the
// marker is there, and the log's size read.
func (t *tools) look(ctx context.Context, j job, offset int64, limit int) (JobOutput, error) {
	rc, _, err := t.c.ReadFile(ctx, j.Sandbox, j.LogPath)
	if err != nil {
		return JobOutput{}, apiError(fmt.Sprintf("read %s in sandbox %s", j.LogPath, j.Sandbox), err)
	}
	defer func() { _ = rc.Close() }()
	if _, err := io.CopyN(io.Discard, rc, offset); err != nil && !errors.Is(err, io.EOF) {
		return JobOutput{}, apiError("read "+j.LogPath, err)
	}
	ht := newHeadTail(limit)
	last := &recentOutput{limit: maxMarkerLine + 1}
	n, err := io.Copy(io.MultiWriter(ht, last), rc)
	if err != nil {
		return JobOutput{}, apiError("read "+j.LogPath, err)
	}
	out := JobOutput{Handle: j.Handle(), LogPath: j.LogPath, NextOffset: offset + n, Running: true}
	tail := last.Bytes()
	if rest, code, done := splitJobLog(tail, j.Nonce); done {
		cut := len(tail) - len(rest)
		ht.CutEnd(cut)
		out.NextOffset -= int64(cut)
		out.Running, out.ExitCode = false, &code
	}
	out.Output, out.OutputTruncated = ht.String(), ht.Truncated()
	return out, nil
}

// alive reports whether j's pid still runs a process whose command line
// holds its nonce (the wrapper shell); a stopped sandbox runs nothing.
func (t *tools) alive(ctx context.Context, j job) (bool, error) {
	res, err := t.c.Exec(ctx, j.Sandbox, client.ExecRequest{Command: []string{"/bin/sh", "-c",
		`if command -v grep >/dev/null 2>&1; then grep -qF -- "$1" /proc/"$2"/cmdline 2>/dev/null; else test -e /proc/"$2"; fi`,
		"sh", j.Nonce, strconv.Itoa(j.Pid)}})
	if isStatus(err, 409) {
		return false, nil
	}
	if err != nil {
		return false, apiError("look for pid "+strconv.Itoa(j.Pid)+" in sandbox "+j.Sandbox, err)
	}
	return res.ExitCode == 0, nil
}

// poll is look, then alive when no exit code was found.
func (t *tools) poll(ctx context.Context, j job, offset int64, limit int) (JobOutput, error) {
	out, err := t.look(ctx, j, offset, limit)
	if err != nil || !out.Running {
		return out, err
	}
	ok, err := t.alive(ctx, j)
	if err != nil {
		return out, err
	}
	if !ok {
		// It may have written its marker between the two looks.
		if out, err = t.look(ctx, j, offset, limit); err == nil && out.Running {
			out.Running, out.Gone = false, true
		}
	}
	return out, err
}

// outputLimit is max_output_bytes with its default and cap.
func outputLimit(n int) int {
	if n <= 0 {
		return defaultExecOutput
	}
	return min(n, maxExecOutput)
}

// execPoll reports on a background command.
func (t *tools) execPoll(ctx context.Context, _ *sdk.CallToolRequest, in JobInput) (*sdk.CallToolResult, JobOutput, error) {
	j, err := t.jobOf(in)
	if err != nil {
		return nil, JobOutput{}, err
	}
	out, err := t.poll(ctx, j, in.Offset, outputLimit(in.MaxOutputBytes))
	return nil, out, err
}

// maxJobWait bounds exec_wait's wait.
const maxJobWait = 10 * time.Minute

// execWait waits for a background command.
func (t *tools) execWait(ctx context.Context, call *sdk.CallToolRequest, in JobWaitInput) (*sdk.CallToolResult, JobOutput, error) {
	j, err := t.jobOf(in.JobInput)
	if err != nil {
		return nil, JobOutput{}, err
	}
	wait := 50 * time.Second
	if in.Wait != "" {
		if wait, err = time.ParseDuration(in.Wait); err != nil || wait < 0 {
			return nil, JobOutput{}, fmt.Errorf("wait %q is not a Go duration such as 30s or 5m", in.Wait)
		}
		wait = min(wait, maxJobWait)
	}
	limit := outputLimit(in.MaxOutputBytes)
	start := time.Now()
	// Progress: the output since the previous notification.
	seen := in.Offset
	var progress *recentOutput
	if call != nil && call.Params != nil && call.Session != nil {
		if token := call.Params.GetProgressToken(); token != nil {
			progress = &recentOutput{limit: progressOutputBytes}
			stop := t.reportProgress(ctx, call.Session, token, "wait for pid "+strconv.Itoa(j.Pid), progress.Take)
			defer stop()
		}
	}
	var lastSize int64 = -1
	for i := 0; ; i++ {
		st, err := t.c.StatFile(ctx, j.Sandbox, j.LogPath)
		if err != nil {
			return nil, JobOutput{}, apiError(fmt.Sprintf("stat %s in sandbox %s", j.LogPath, j.Sandbox), err)
		}
		if st.Size != lastSize {
			lastSize = st.Size
			out, err := t.look(ctx, j, seen, progressOutputBytes)
			if err != nil {
				return nil, JobOutput{}, err
			}
			if progress != nil && out.NextOffset > seen {
				_, _ = progress.Write([]byte(out.Output))
			}
			seen = out.NextOffset
			if !out.Running {
				break
			}
		}
		// Every tenth round (and at the end) ask whether it still runs.
		if i%10 == 9 {
			if ok, err := t.alive(ctx, j); err != nil {
				return nil, JobOutput{}, err
			} else if !ok {
				break
			}
		}
		if time.Since(start) >= wait {
			break
		}
		select {
		case <-ctx.Done():
			return nil, JobOutput{}, ctx.Err()
		case <-time.After(min(t.opts.JobPollInterval, wait-time.Since(start))):
		}
	}
	out, err := t.poll(ctx, j, in.Offset, limit)
	out.Waited = time.Since(start).Truncate(time.Millisecond).String()
	return nil, out, err
}
