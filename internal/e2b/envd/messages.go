package envd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Uint32 is a protobuf uint32 in JSON: a number, or a decimal string as
// protobuf JSON parsers also accept.
type Uint32 uint32

// UnmarshalJSON accepts 7 and "7".
func (u *Uint32) UnmarshalJSON(b []byte) error {
	s := string(bytes.Trim(b, `"`))
	if s == "null" {
		*u = 0
		return nil
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return fmt.Errorf("uint32 %s: %w", b, err)
	}
	*u = Uint32(v)
	return nil
}

// ProcessConfig is process.ProcessConfig: what to run.
type ProcessConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// PTY is process.PTY (a terminal size).
type PTY struct {
	Size *struct {
		Cols Uint32 `json:"cols"`
		Rows Uint32 `json:"rows"`
	} `json:"size,omitempty"`
}

// StartRequest is process.StartRequest.
type StartRequest struct {
	Process *ProcessConfig `json:"process"`
	PTY     *PTY           `json:"pty,omitempty"`
	Tag     *string        `json:"tag,omitempty"`
	Stdin   *bool          `json:"stdin,omitempty"`
}

// ProcessSelector is process.ProcessSelector: a pid or a tag.
type ProcessSelector struct {
	Pid *Uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

// ConnectRequest is process.ConnectRequest.
type ConnectRequest struct {
	Process *ProcessSelector `json:"process"`
}

// Signal is process.Signal, read by name or number.
type Signal int

// Signals of process.Signal.
const (
	SignalUnspecified Signal = 0
	SignalSIGKILL     Signal = 9
	SignalSIGTERM     Signal = 15
)

// UnmarshalJSON accepts "SIGNAL_SIGKILL" and 9.
func (s *Signal) UnmarshalJSON(b []byte) error {
	v := strings.Trim(string(b), `"`)
	switch v {
	case "SIGNAL_UNSPECIFIED", "0", "null":
		*s = SignalUnspecified
	case "SIGNAL_SIGKILL", "9":
		*s = SignalSIGKILL
	case "SIGNAL_SIGTERM", "15":
		*s = SignalSIGTERM
	default:
		return fmt.Errorf("unknown signal %s", b)
	}
	return nil
}

// SendSignalRequest is process.SendSignalRequest.
type SendSignalRequest struct {
	Process *ProcessSelector `json:"process"`
	Signal  Signal           `json:"signal"`
}

// ProcessInfo is process.ProcessInfo.
type ProcessInfo struct {
	Config ProcessConfig `json:"config"`
	Pid    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

// ListResponse is process.ListResponse.
type ListResponse struct {
	Processes []ProcessInfo `json:"processes"`
}

// ProcessEvent is process.ProcessEvent: exactly one field is set.
type ProcessEvent struct {
	Start     *StartEvent `json:"start,omitempty"`
	Data      *DataEvent  `json:"data,omitempty"`
	End       *EndEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

// StartEvent is ProcessEvent.StartEvent.
type StartEvent struct {
	Pid uint32 `json:"pid"`
}

// DataEvent is ProcessEvent.DataEvent: one of the byte fields is set
// (base64 in JSON).
type DataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	PTY    []byte `json:"pty,omitempty"`
}

// EndEvent is ProcessEvent.EndEvent.
type EndEvent struct {
	ExitCode int32   `json:"exitCode"`
	Exited   bool    `json:"exited"`
	Status   string  `json:"status"`
	Error    *string `json:"error,omitempty"`
}

// StreamResponse is process.StartResponse and process.ConnectResponse.
type StreamResponse struct {
	Event ProcessEvent `json:"event"`
}

// PathRequest is filesystem.StatRequest, MakeDirRequest and RemoveRequest.
type PathRequest struct {
	Path string `json:"path"`
}

// ListDirRequest is filesystem.ListDirRequest.
type ListDirRequest struct {
	Path  string `json:"path"`
	Depth Uint32 `json:"depth"`
}

// MoveRequest is filesystem.MoveRequest.
type MoveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// File types of filesystem.FileType.
const (
	FileTypeUnspecified = "FILE_TYPE_UNSPECIFIED"
	FileTypeFile        = "FILE_TYPE_FILE"
	FileTypeDirectory   = "FILE_TYPE_DIRECTORY"
	FileTypeSymlink     = "FILE_TYPE_SYMLINK"
)

// EntryInfo is filesystem.EntryInfo.
type EntryInfo struct {
	Name          string    `json:"name"`
	Type          string    `json:"type"`
	Path          string    `json:"path"`
	Size          Int64     `json:"size"`
	Mode          uint32    `json:"mode"`
	Permissions   string    `json:"permissions"`
	Owner         string    `json:"owner"`
	Group         string    `json:"group"`
	ModifiedTime  time.Time `json:"modifiedTime"`
	SymlinkTarget *string   `json:"symlinkTarget,omitempty"`
}

// Int64 is a protobuf int64: a decimal string in JSON.
type Int64 int64

// MarshalJSON writes a decimal string.
func (i Int64) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatInt(int64(i), 10) + `"`), nil
}

// EntryResponse is filesystem.StatResponse, MakeDirResponse and
// MoveResponse.
type EntryResponse struct {
	Entry EntryInfo `json:"entry"`
}

// ListDirResponse is filesystem.ListDirResponse.
type ListDirResponse struct {
	Entries []EntryInfo `json:"entries"`
}

// DecodeRequest decodes a request message of a unary call or of a stream
// frame into v: JSON, unknown fields ignored (a newer SDK may send
// fields stead does not know yet), trailing data refused.
func DecodeRequest(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		b = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the message")
	}
	return nil
}

// ProcessInput is process.ProcessInput: one of the byte fields is set.
type ProcessInput struct {
	Stdin []byte `json:"stdin,omitempty"`
	PTY   []byte `json:"pty,omitempty"`
}

// SendInputRequest is process.SendInputRequest.
type SendInputRequest struct {
	Process *ProcessSelector `json:"process"`
	Input   *ProcessInput    `json:"input"`
}

// CloseStdinRequest is process.CloseStdinRequest (and the shape of every
// request that names only a process).
type CloseStdinRequest struct {
	Process *ProcessSelector `json:"process"`
}

// UpdateRequest is process.UpdateRequest: a new terminal size.
type UpdateRequest struct {
	Process *ProcessSelector `json:"process"`
	PTY     *PTY             `json:"pty,omitempty"`
}

// WatchDirRequest is filesystem.WatchDirRequest and
// filesystem.CreateWatcherRequest.
type WatchDirRequest struct {
	Path               string `json:"path"`
	Recursive          bool   `json:"recursive"`
	IncludeEntry       bool   `json:"includeEntry"`
	AllowNetworkMounts bool   `json:"allowNetworkMounts"`
}

// Event types of filesystem.EventType.
const (
	EventCreate = "EVENT_TYPE_CREATE"
	EventWrite  = "EVENT_TYPE_WRITE"
	EventRemove = "EVENT_TYPE_REMOVE"
	EventRename = "EVENT_TYPE_RENAME"
	EventChmod  = "EVENT_TYPE_CHMOD"
)

// FilesystemEvent is filesystem.FilesystemEvent: Name is relative to the
// watched directory.
type FilesystemEvent struct {
	Name  string     `json:"name"`
	Type  string     `json:"type"`
	Entry *EntryInfo `json:"entry,omitempty"`
}

// WatchDirResponse is filesystem.WatchDirResponse: exactly one field is
// set.
type WatchDirResponse struct {
	Start      *struct{}        `json:"start,omitempty"`
	Filesystem *FilesystemEvent `json:"filesystem,omitempty"`
	Keepalive  *struct{}        `json:"keepalive,omitempty"`
}

// WatcherRequest is filesystem.GetWatcherEventsRequest and
// RemoveWatcherRequest.
type WatcherRequest struct {
	WatcherID string `json:"watcherId"`
}

// CreateWatcherResponse is filesystem.CreateWatcherResponse.
type CreateWatcherResponse struct {
	WatcherID string `json:"watcherId"`
}

// GetWatcherEventsResponse is filesystem.GetWatcherEventsResponse.
type GetWatcherEventsResponse struct {
	Events []FilesystemEvent `json:"events"`
}
