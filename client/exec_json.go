package client

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ExecResultJSON is the JSON form of an ExecResult. Output is text: a
// program's output that is valid UTF-8 is sent as it is, and only output
// that is not (binary data, a cut multi-byte character) also carries its
// exact bytes in base64 in the *_base64 field, while the text field then
// has each invalid byte replaced by U+FFFD.
type ExecResultJSON struct {
	ExitCode     int    `json:"exit_code" doc:"The process's exit code (127: program not found, 126: program cannot run, -1 when killed by a signal)"`
	Signal       string `json:"signal,omitempty" doc:"The signal that killed the process (e.g. SIGKILL), if one did"`
	Stdout       string `json:"stdout" doc:"Standard output as text (UTF-8); bytes that are not valid UTF-8 are replaced by U+FFFD and the exact bytes are in stdout_base64"`
	StdoutBase64 string `json:"stdout_base64,omitempty" encoding:"base64" doc:"The exact bytes of standard output, base64: present only when they are not valid UTF-8"`
	Stderr       string `json:"stderr" doc:"Standard error as text (UTF-8); bytes that are not valid UTF-8 are replaced by U+FFFD and the exact bytes are in stderr_base64"`
	StderrBase64 string `json:"stderr_base64,omitempty" encoding:"base64" doc:"The exact bytes of standard error, base64: present only when they are not valid UTF-8"`
	Pid          int    `json:"pid,omitempty" doc:"The process id inside the sandbox (0 when the program could not start)"`
	TimedOut     bool   `json:"timed_out,omitempty" doc:"The timeout expired and the process group was killed"`
	LogPath      string `json:"log_path,omitempty" doc:"Where a background exec writes its output, in the sandbox"`
	Truncated    bool   `json:"truncated,omitempty" doc:"stdout or stderr passed the 16 MiB buffer limit and was cut"`
}

// ExecEventJSON is the JSON form of an ExecEvent (the data of one
// Server-Sent Event). Output chunks are text, as in ExecResultJSON; the
// server never splits a UTF-8 character across two chunks.
type ExecEventJSON struct {
	Type       string `json:"type" enum:"stdout,stderr,exit,error" doc:"The event's kind, also its SSE event name"`
	Data       string `json:"data,omitempty" doc:"stdout/stderr: the output chunk as text (UTF-8); bytes that are not valid UTF-8 are replaced by U+FFFD and the exact bytes are in data_base64"`
	DataBase64 string `json:"data_base64,omitempty" encoding:"base64" doc:"stdout/stderr: the chunk's exact bytes, base64: present only when they are not valid UTF-8"`
	ExitCode   int    `json:"exit_code,omitempty" doc:"exit: the process's exit code"`
	Signal     string `json:"signal,omitempty" doc:"exit: the signal that killed the process, if one did"`
	Pid        int    `json:"pid,omitempty" doc:"exit: the process id inside the sandbox"`
	Error      string `json:"error,omitempty" doc:"error: what went wrong after the stream had started"`
	TimedOut   bool   `json:"timed_out,omitempty" doc:"exit: the timeout expired and the process group was killed"`
}

// textAndBytes returns b as text and, when b is not valid UTF-8, its exact
// bytes in base64.
func textAndBytes(b []byte) (text, b64 string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), base64.StdEncoding.EncodeToString(b)
}

// bytesOf is the inverse of textAndBytes.
func bytesOf(field, text, b64 string) ([]byte, error) {
	if b64 == "" {
		return []byte(text), nil
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("decode %s_base64: %w", field, err)
	}
	return b, nil
}

// MarshalJSON encodes r as an ExecResultJSON.
func (r ExecResult) MarshalJSON() ([]byte, error) {
	j := ExecResultJSON{ExitCode: r.ExitCode, Signal: r.Signal, Pid: r.Pid, TimedOut: r.TimedOut, LogPath: r.LogPath, Truncated: r.Truncated}
	j.Stdout, j.StdoutBase64 = textAndBytes(r.Stdout)
	j.Stderr, j.StderrBase64 = textAndBytes(r.Stderr)
	return json.Marshal(j)
}

// UnmarshalJSON decodes an ExecResultJSON.
func (r *ExecResult) UnmarshalJSON(data []byte) error {
	var j ExecResultJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	stdout, err := bytesOf("stdout", j.Stdout, j.StdoutBase64)
	if err != nil {
		return err
	}
	stderr, err := bytesOf("stderr", j.Stderr, j.StderrBase64)
	if err != nil {
		return err
	}
	*r = ExecResult{ExitCode: j.ExitCode, Signal: j.Signal, Stdout: stdout, Stderr: stderr, Pid: j.Pid,
		TimedOut: j.TimedOut, LogPath: j.LogPath, Truncated: j.Truncated}
	return nil
}

// MarshalJSON encodes e as an ExecEventJSON.
func (e ExecEvent) MarshalJSON() ([]byte, error) {
	j := ExecEventJSON{Type: e.Type, ExitCode: e.ExitCode, Signal: e.Signal, Pid: e.Pid, Error: e.Error, TimedOut: e.TimedOut}
	j.Data, j.DataBase64 = textAndBytes(e.Data)
	return json.Marshal(j)
}

// UnmarshalJSON decodes an ExecEventJSON.
func (e *ExecEvent) UnmarshalJSON(data []byte) error {
	var j ExecEventJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	d, err := bytesOf("data", j.Data, j.DataBase64)
	if err != nil {
		return err
	}
	if len(d) == 0 {
		d = nil
	}
	*e = ExecEvent{Type: j.Type, Data: d, ExitCode: j.ExitCode, Signal: j.Signal, Pid: j.Pid, Error: j.Error, TimedOut: j.TimedOut}
	return nil
}
