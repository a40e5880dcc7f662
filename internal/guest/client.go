package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
)

// Client talks to one sandbox's init from the daemon.
type Client struct {
	// Socket is the host path of the init socket.
	Socket string
}

// NewClient returns a client for the init whose run directory is runDir on
// the host.
func NewClient(runDir string) *Client {
	return &Client{Socket: filepath.Join(runDir, SocketName)}
}

func (c *Client) dial(ctx context.Context) (*conn, error) {
	var nc *net.UnixConn
	err := atShortPath(c.Socket, func(path string) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			nc = conn.(*net.UnixConn)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial sandbox init: %w", err)
	}
	cn := newConn(nc)
	// Cancelling ctx ends the call, whatever it is waiting for.
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	cn.stop = stop
	return cn, nil
}

// Listen creates the listening init socket at path on the host, for the
// runtime to pass to init as ListenFD. The socket file stays when the
// returned file is closed.
func Listen(path string) (*os.File, error) {
	var ln *net.UnixListener
	err := atShortPath(path, func(p string) error {
		os.Remove(p)
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		ln = l
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on init socket: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	f, err := ln.File()
	if err != nil {
		return nil, fmt.Errorf("listen on init socket: %w", err)
	}
	return f, nil
}

// atShortPath calls fn with path, or, when path is too long for a unix
// socket address (107 bytes), with an equivalent short path through a
// descriptor of its directory.
func atShortPath(path string, fn func(string) error) error {
	if len(path) <= 100 {
		return fn(path)
	}
	dir, err := os.OpenFile(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer dir.Close()
	return fn(fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)))
}

// Ping checks that init answers.
func (c *Client) Ping(ctx context.Context) error {
	cn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer cn.close()
	if err := cn.send(Request{Op: OpStatus}); err != nil {
		return err
	}
	var r Reply
	_, err = cn.recv(&r)
	return err
}

// WaitReady polls until init answers or ctx ends.
func (c *Client) WaitReady(ctx context.Context) error {
	// Init is usually up within 5-15 ms; a failed dial costs microseconds,
	// so poll finely at first and back off after 100 ms.
	began := time.Now()
	for {
		if err := c.Ping(ctx); err == nil {
			return nil
		}
		delay := 250 * time.Microsecond
		if time.Since(began) > 100*time.Millisecond {
			delay = 5 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for sandbox init: %w", ctx.Err())
		case <-time.After(delay):
		}
	}
}

// Stop asks init to stop the service (stop hook, then grace) and every other
// process; init exits after answering.
func (c *Client) Stop(ctx context.Context, grace time.Duration) error {
	cn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer cn.close()
	if d, ok := ctx.Deadline(); ok {
		cn.c.SetDeadline(d)
	}
	if err := cn.send(Request{Op: OpStop, Grace: grace}); err != nil {
		return err
	}
	var r Reply
	if _, err := cn.recv(&r); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// ServiceInput writes data to the supervised service's stdin.
func (c *Client) ServiceInput(ctx context.Context, data []byte) error {
	cn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer cn.close()
	if d, ok := ctx.Deadline(); ok {
		cn.c.SetDeadline(d)
	}
	if err := cn.send(Request{Op: OpInput, Data: data}); err != nil {
		return err
	}
	var r Reply
	if _, err := cn.recv(&r); err != nil {
		return err
	}
	if r.Type == "error" {
		return errors.New(r.Error)
	}
	return nil
}

// ExecSpec is a process to run.
type ExecSpec struct {
	Args       []string
	Env        []string
	Cwd        string
	UID, GID   int
	Background bool
	Stdin      io.Reader // nil: /dev/null
	Stdout     io.Writer
	Stderr     io.Writer
}

// ExecResult is how an exec ended.
type ExecResult struct {
	Pid      int
	ExitCode int
	Signal   string
	LogPath  string
}

// Exec runs a process in the sandbox and streams its output to the writers
// until it exits. Cancelling ctx kills the process group.
func (c *Client) Exec(ctx context.Context, spec ExecSpec) (ExecResult, error) {
	cn, err := c.dial(ctx)
	if err != nil {
		return ExecResult{}, err
	}
	defer cn.close()
	req := Request{Op: OpExec, Args: spec.Args, Env: spec.Env, Cwd: spec.Cwd,
		UID: spec.UID, GID: spec.GID, Background: spec.Background}
	if spec.Background {
		if err := cn.send(req); err != nil {
			return ExecResult{}, err
		}
		var r Reply
		if _, err := cn.recv(&r); err != nil {
			return ExecResult{}, err
		}
		if r.Type == "error" && r.ExitCode != 0 && spec.Stderr != nil {
			// The program is missing or cannot run: no pid, the exit
			// code a shell would give, and init's message.
			fmt.Fprintf(spec.Stderr, "stead: %s\n", r.Error)
		}
		if r.Type == "error" && r.ExitCode != 0 {
			return ExecResult{ExitCode: r.ExitCode, LogPath: r.LogPath}, nil
		}
		if r.Type == "error" {
			return ExecResult{}, startError(spec.Args[0], r)
		}
		return ExecResult{Pid: r.Pid, LogPath: r.LogPath}, nil
	}

	var stdinR *os.File
	var stdinW *os.File
	if spec.Stdin != nil {
		stdinR, stdinW, err = os.Pipe()
	} else {
		stdinR, err = os.Open(os.DevNull)
	}
	if err != nil {
		return ExecResult{}, fmt.Errorf("exec stdin: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		return ExecResult{}, fmt.Errorf("exec stdout: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		outR.Close()
		outW.Close()
		return ExecResult{}, fmt.Errorf("exec stderr: %w", err)
	}
	req.Stdio = true
	err = cn.send(req, stdinR, outW, errW)
	stdinR.Close()
	outW.Close()
	errW.Close()
	defer outR.Close()
	defer errR.Close()
	if err != nil {
		if stdinW != nil {
			stdinW.Close()
		}
		return ExecResult{}, err
	}
	if stdinW != nil {
		go func() {
			io.Copy(stdinW, spec.Stdin)
			stdinW.Close()
		}()
	}
	// Writes to the two writers are serialised: callers may pass one
	// writer for both.
	var wg sync.WaitGroup
	var wmu sync.Mutex
	pump := func(r *os.File, w io.Writer) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 && w != nil {
				wmu.Lock()
				w.Write(buf[:n])
				wmu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go pump(outR, spec.Stdout)
	go pump(errR, spec.Stderr)

	// drain waits for the pumps, giving output written just before the
	// end up to grace to arrive; a descendant that keeps the pipes open
	// must not hold the call forever. Every return path drains, so no
	// writer is used after Exec returns.
	drain := func(grace time.Duration) {
		drained := make(chan struct{})
		go func() { wg.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(grace):
			outR.SetReadDeadline(time.Now())
			errR.SetReadDeadline(time.Now())
			<-drained
		}
	}
	var started Reply
	if _, err := cn.recv(&started); err != nil {
		drain(0)
		return ExecResult{}, ctxErr(ctx, err)
	}
	if started.Type == "error" {
		drain(0)
		return ExecResult{}, startError(spec.Args[0], started)
	}
	var exit Reply
	if _, err := cn.recv(&exit); err != nil {
		drain(0)
		return ExecResult{Pid: started.Pid}, ctxErr(ctx, err)
	}
	drain(250 * time.Millisecond)
	return ExecResult{Pid: started.Pid, ExitCode: exit.ExitCode, Signal: exit.Signal}, nil
}

// startError is the error of a process init could not start; a bad
// working directory is the caller's mistake (errs.ErrInvalid). (A missing
// or unrunnable program is no error: it exits 127 or 126.)
func startError(cmd string, r Reply) error {
	// init's error may name the command already ("sh: command not found").
	msg := strings.TrimPrefix(r.Error, cmd+": ")
	if r.BadCwd { // "cwd /nope: no such directory": not the program's fault
		return fmt.Errorf("%s: %w", r.Error, errs.ErrInvalid)
	}
	if r.Invalid {
		return fmt.Errorf("exec %s: %s: %w", cmd, msg, errs.ErrInvalid)
	}
	return fmt.Errorf("exec %s: %s", cmd, msg)
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// PTYSession is an interactive process on a terminal in the sandbox.
type PTYSession struct {
	master *os.File
	cn     *conn
	pid    int
}

// OpenPTY starts spec.Args on a new terminal of the given size.
func (c *Client) OpenPTY(ctx context.Context, spec ExecSpec, rows, cols uint16) (*PTYSession, error) {
	cn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	req := Request{Op: OpExec, Args: spec.Args, Env: spec.Env, Cwd: spec.Cwd,
		UID: spec.UID, GID: spec.GID, TTY: true, Rows: rows, Cols: cols}
	if err := cn.send(req); err != nil {
		cn.close()
		return nil, err
	}
	var r Reply
	files, err := cn.recv(&r)
	if err != nil {
		cn.close()
		return nil, err
	}
	if r.Type == "error" || len(files) != 1 {
		closeAll(files)
		cn.close()
		if r.Type == "error" && len(spec.Args) > 0 {
			return nil, fmt.Errorf("open pty: %w", startError(spec.Args[0], r))
		}
		return nil, fmt.Errorf("open pty: %s", r.Error)
	}
	return &PTYSession{master: files[0], cn: cn, pid: r.Pid}, nil
}

// Read reads terminal output.
func (p *PTYSession) Read(b []byte) (int, error) { return p.master.Read(b) }

// Write writes terminal input.
func (p *PTYSession) Write(b []byte) (int, error) { return p.master.Write(b) }

// Resize changes the terminal size.
func (p *PTYSession) Resize(rows, cols uint16) error {
	return pty.Setsize(p.master, &pty.Winsize{Rows: rows, Cols: cols})
}

// Wait blocks until the process exits and returns its exit code.
func (p *PTYSession) Wait() (int, error) {
	var r Reply
	if _, err := p.cn.recv(&r); err != nil {
		return -1, err
	}
	return r.ExitCode, nil
}

// Close ends the session; a still running process is killed.
func (p *PTYSession) Close() error {
	p.master.Close()
	return p.cn.close()
}
