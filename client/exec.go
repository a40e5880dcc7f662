package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// Exec runs a command in a running sandbox and returns when it exits, with
// its output buffered in the result. Use ExecStream for long or chatty
// commands. A background exec returns at once with the pid.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	var res ExecResult
	err := c.do(ctx, http.MethodPost, sandboxPath(id, "/exec"), nil, req, &res)
	return res, err
}

// ExecError is an error the server reported in the middle of an exec
// stream, after output had started.
type ExecError struct {
	Message string
}

// Error returns the server's message.
func (e *ExecError) Error() string { return "exec failed: " + e.Message }

// ExecStream runs a command in a running sandbox, writing its output to
// stdout and stderr as it is produced (either may be nil to discard). The
// result carries the exit code, signal, pid and timeout flag; its Stdout
// and Stderr are empty. Cancelling ctx abandons the stream, which the server
// takes as a request to end the command.
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest, stdout, stderr io.Writer) (ExecResult, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return ExecResult{}, fmt.Errorf("encode exec request: %w", err)
	}
	resp, err := c.send(ctx, request{
		method: http.MethodPost,
		path:   sandboxPath(id, "/exec"),
		body:   bytes.NewReader(b),
		ctype:  "application/json",
		accept: "text/event-stream",
	})
	if err != nil {
		return ExecResult{}, err
	}
	defer func() { _ = resp.Body.Close() }()

	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		// A server that answered with a buffered result.
		var res ExecResult
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			return ExecResult{}, fmt.Errorf("decode exec result: %w", err)
		}
		if err := writeTo(stdout, res.Stdout); err != nil {
			return res, err
		}
		if err := writeTo(stderr, res.Stderr); err != nil {
			return res, err
		}
		res.Stdout, res.Stderr = nil, nil
		return res, nil
	}

	var res ExecResult
	err = readSSE(resp.Body, func(name string, data []byte) (bool, error) {
		var ev ExecEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return false, fmt.Errorf("decode exec %s event: %w", name, err)
		}
		switch name {
		case "stdout":
			return false, writeTo(stdout, ev.Data)
		case "stderr":
			return false, writeTo(stderr, ev.Data)
		case "exit":
			res = ExecResult{ExitCode: ev.ExitCode, Signal: ev.Signal, Pid: ev.Pid, TimedOut: ev.TimedOut}
			return true, nil
		case "error":
			return false, &ExecError{Message: ev.Error}
		}
		return false, nil // unknown events are ignored
	})
	if err != nil {
		if ctx.Err() != nil {
			return res, fmt.Errorf("exec in %s: %w", id, ctx.Err())
		}
		return res, err
	}
	return res, nil
}

// writeTo writes p to w unless w is nil.
func writeTo(w io.Writer, p []byte) error {
	if w == nil || len(p) == 0 {
		return nil
	}
	if _, err := w.Write(p); err != nil {
		return fmt.Errorf("write exec output: %w", err)
	}
	return nil
}

// errStreamEnded means an event stream ended without its final event.
var errStreamEnded = errors.New("the stream ended before the command exited (connection lost or daemon restarted)")

// readSSE parses a Server-Sent Events stream, calling fn for each event
// until fn reports done, fn fails, or the stream ends (errStreamEnded).
func readSSE(r io.Reader, fn func(name string, data []byte) (done bool, err error)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var name string
	var data []byte
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errStreamEnded
			}
			return fmt.Errorf("read event stream: %w", err)
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if name == "" && data == nil {
				continue
			}
			if name == "" {
				name = "message"
			}
			done, err := fn(name, data)
			if err != nil || done {
				return err
			}
			name, data = "", nil
		case strings.HasPrefix(line, ":"):
			// comment (keep-alive)
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				name = value
			case "data":
				if data != nil {
					data = append(data, '\n')
				}
				data = append(data, value...)
			}
		}
	}
}

// ServiceInput writes data to the stdin of the sandbox's agent service.
func (c *Client) ServiceInput(ctx context.Context, id string, data string) error {
	return c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/service/input", nil, ServiceInputRequest{Data: data}, nil)
}

// Logs opens the agent service's log. With follow the stream stays open
// and delivers new output until ctx is cancelled or the body is closed.
// The caller must close the returned reader.
func (c *Client) Logs(ctx context.Context, id string, follow bool) (io.ReadCloser, error) {
	return c.ReadLogs(ctx, id, LogOptions{Follow: follow})
}

// ReadLogs streams the agent service's log, oldest rotated file first,
// from opts.Since on; with opts.Follow it keeps streaming new output across
// rotations until ctx ends or the body is closed.
func (c *Client) ReadLogs(ctx context.Context, id string, opts LogOptions) (io.ReadCloser, error) {
	q := url.Values{}
	if opts.Follow {
		q.Set("follow", "true")
	}
	if opts.Since != "" {
		q.Set("since", opts.Since)
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/logs"), query: q, accept: "text/plain"})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
