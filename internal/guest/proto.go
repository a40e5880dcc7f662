// Package guest is stead's init: the process that runs as PID 1 inside every
// sandbox (the stead binary, exec'd from a descriptor of a read-only clone:
// nothing of the host is mounted for it), and the daemon's client for it.
//
// Init reaps orphans, runs the supervised agent service, and serves exec and
// PTY requests from the daemon over a unix socket by fork+exec inside the
// sandbox, so exec'd processes inherit the sandbox's namespaces, cgroup and
// seccomp filter without a setns round trip.
//
// Wire protocol: one request per connection. The daemon sends one JSON line
// (Request), with file descriptors attached as SCM_RIGHTS where the request
// says so; init answers with JSON lines (Reply): first a "started" reply
// (with the PTY master attached for tty requests), then an "exit" reply when
// the process ends. If the connection closes before a foreground process
// exits, init kills its process group.
package guest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Paths inside the sandbox.
const (
	// SocketName is the init socket's name within the host's per-sandbox
	// run directory.
	SocketName = "init.sock"
	// ListenFD is the descriptor on which init finds its listening socket,
	// created on the host by the runtime (the first of Process.ExtraFiles).
	ListenFD = 3
	// ConfigFD is the descriptor on which init reads its Config (JSON, a
	// sealed memory file); init closes it.
	ConfigFD = 4
	// BinaryFD is the descriptor of init's own binary (the runtime execs
	// /proc/self/fd/BinaryFD); init closes it.
	BinaryFD = 5
	// AgentLog is the supervised service's log, kept in the sandbox root.
	AgentLog = "/var/log/agent.log"
	// ExecLogDir holds the output of background execs.
	ExecLogDir = "/var/log/stead"
)

// Config is what the daemon tells init at start (on ConfigFD).
type Config struct {
	// Env is the base environment of every process.
	Env []string `json:"env"`
	// Service is the supervised agent service, if any.
	Service *ServiceSpec `json:"service,omitempty"`
	// Seccomp enables stead's default seccomp filter.
	Seccomp bool `json:"seccomp"`
	// Setup, when set, is the sandbox's setup that init makes itself
	// before it serves (stead's own runtime, setup.go): init starts in
	// the sandbox's new namespaces with the host's mount tree, builds the
	// sandbox's mounts, pivots into its root and drops its capabilities.
	// Without it the runtime (libcontainer) did all that before init ran.
	Setup *Setup `json:"setup,omitempty"`
}

// Setup is what init makes of a sandbox before it serves. The host hands
// it descriptors from SetupFD on: a SOCK_SEQPACKET socket to the runtime,
// then the sandbox's root as a detached mount tree, then one detached
// tree for each mount whose Tree is set, in order.
type Setup struct {
	Hostname string `json:"hostname"`
	// Mounts are made in order under the new root.
	Mounts []SetupMount `json:"mounts"`
	// Devices are device files of the host's /dev bound into the
	// sandbox's /dev under the same names ("null", "tty").
	Devices []string `json:"devices,omitempty"`
	// MaskPaths are hidden (/dev/null over a file, an empty read-only
	// tmpfs over a directory); ReadonlyPaths made read-only. Absent ones
	// are skipped.
	MaskPaths     []string `json:"mask_paths,omitempty"`
	ReadonlyPaths []string `json:"readonly_paths,omitempty"`
	// Caps are the capabilities init and root's processes keep (numbers);
	// every other one leaves the bounding set. no_new_privs is always set.
	Caps []int `json:"caps"`
}

// SetupMount is one mount of a sandbox's setup.
type SetupMount struct {
	// Dest is the absolute path inside the sandbox.
	Dest string `json:"dest"`
	// Tree is true for a detached tree made by the host (a bind mount,
	// already idmapped and read-only as asked); false for a new file
	// system of Type from Source with Flags and Data, as mount(2) takes
	// them.
	Tree   bool    `json:"tree,omitempty"`
	Type   string  `json:"type,omitempty"`
	Source string  `json:"source,omitempty"`
	Flags  uintptr `json:"flags,omitempty"`
	Data   string  `json:"data,omitempty"`
	// File: the mount is of a file (its target is made as a file).
	File bool `json:"file,omitempty"`
}

// SetupFD is the descriptor of the setup socket (Config.Setup); the
// root's tree follows it, then the mount trees.
const SetupFD = 6

// ServiceSpec is the supervised agent service.
type ServiceSpec struct {
	Command []string `json:"command"`
	Env     []string `json:"env,omitempty"`
	Cwd     string   `json:"cwd,omitempty"`
	UID     int      `json:"uid"`
	GID     int      `json:"gid"`
	// Restart is "always", "on-failure" or "never".
	Restart string `json:"restart"`
	// StopSignal is sent on stop when StopLine is empty.
	StopSignal int `json:"stop_signal,omitempty"`
	// StopLine is written to the service's stdin on stop.
	StopLine string `json:"stop_line,omitempty"`
	// LogMaxSize and LogKeep are the log's rotation (agentlog.Config;
	// both zero: the defaults).
	LogMaxSize int64 `json:"log_max_size,omitempty"`
	LogKeep    int   `json:"log_keep,omitempty"`
}

// Request kinds.
const (
	OpExec   = "exec"
	OpStop   = "stop"
	OpStatus = "status"
	OpInput  = "input"
)

// Request is one call to init.
type Request struct {
	Op string `json:"op"`

	// Exec fields.
	Args       []string `json:"args,omitempty"`
	Env        []string `json:"env,omitempty"`
	Cwd        string   `json:"cwd,omitempty"`
	UID        int      `json:"uid"`
	GID        int      `json:"gid"`
	Background bool     `json:"background,omitempty"`
	TTY        bool     `json:"tty,omitempty"`
	Rows       uint16   `json:"rows,omitempty"`
	Cols       uint16   `json:"cols,omitempty"`
	// Stdio says that three descriptors (stdin, stdout, stderr) are
	// attached to this request.
	Stdio bool `json:"stdio,omitempty"`

	// Input fields: bytes for the service's stdin.
	Data []byte `json:"data,omitempty"`

	// Stop fields: how long the service gets after its stop hook.
	Grace time.Duration `json:"grace,omitempty"`
}

// Reply is one answer from init.
type Reply struct {
	// Type is "started", "exit", "status" or "error".
	Type     string `json:"type"`
	Pid      int    `json:"pid,omitempty"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	Error    string `json:"error,omitempty"`
	// Invalid marks an error caused by the request (no such command,
	// working directory or user), not by init.
	Invalid bool `json:"invalid,omitempty"`
	// BadCwd marks an error about the working directory (Error names it).
	BadCwd bool `json:"bad_cwd,omitempty"`
	// LogPath is where a background exec writes its output.
	LogPath string `json:"log_path,omitempty"`
	// Status fields.
	ServicePid      int `json:"service_pid,omitempty"`
	ServiceRestarts int `json:"service_restarts,omitempty"`
}

// conn wraps a unix connection with line framing and descriptor passing.
type conn struct {
	c    *net.UnixConn
	r    *bufio.Reader
	stop func() bool // unregisters the context watch of a client call
}

// close ends the connection and its context watch.
func (c *conn) close() error {
	if c.stop != nil {
		c.stop()
	}
	return c.c.Close()
}

func newConn(c *net.UnixConn) *conn { return &conn{c: c, r: bufio.NewReader(c)} }

// send writes one JSON line, attaching files as SCM_RIGHTS.
func (c *conn) send(v any, files ...*os.File) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	b = append(b, '\n')
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.c.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return fmt.Errorf("send message: %w", err)
	}
	if n != len(b) {
		return fmt.Errorf("send message: short write %d of %d", n, len(b))
	}
	return nil
}

// recv reads one JSON line and any descriptors that came with it. The
// sender always sends descriptors with the first byte of a message, and
// messages carrying descriptors are the first on a connection, so reading
// with ReadMsgUnix before the buffered reader has data is enough.
func (c *conn) recv(v any) ([]*os.File, error) {
	var files []*os.File
	if c.r.Buffered() == 0 {
		buf := make([]byte, 64<<10)
		oob := make([]byte, unix.CmsgSpace(4*8))
		n, oobn, _, _, err := c.c.ReadMsgUnix(buf, oob)
		if err != nil {
			return nil, fmt.Errorf("receive message: %w", err)
		}
		if files, err = ParseRights(oob[:oobn]); err != nil {
			return nil, err
		}
		c.r = bufio.NewReader(&prefixReader{pre: buf[:n], r: c.c})
	}
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		closeAll(files)
		return nil, fmt.Errorf("receive message: %w", err)
	}
	if err := json.Unmarshal(line, v); err != nil {
		closeAll(files)
		return nil, fmt.Errorf("decode message: %w", err)
	}
	return files, nil
}

// ParseRights returns the descriptors that the control messages oob
// (of a unix socket read) carry, as files.
func ParseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "fd"+strconv.Itoa(fd)))
		}
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// prefixReader yields pre, then reads from r.
type prefixReader struct {
	pre []byte
	r   *net.UnixConn
}

func (p *prefixReader) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return p.r.Read(b)
}
