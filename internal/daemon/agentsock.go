package daemon

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/fdwatch"
	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/guest"
)

// agentSockets serves the API on one unix socket per running sandbox,
// <shared>/<id>/api.sock, mounted read-only at /run/stead in the sandbox.
// <shared> (<dir>/../agent) is one small tmpfs for every sandbox, mounted
// once, so the sandbox's mount table shows "/<id>" as the mount's root, not
// a host path. (An older stead mounted a tmpfs per running sandbox at
// <dir>/<id>: one more mount in the host's mount table per sandbox, which
// every new mount namespace copies, so each create got slower with the
// number of running sandboxes. Sandboxes started that way keep their
// mount until they stop.)
// The directory (not the socket) is mounted, so a daemon restart can
// replace the socket and the sandbox sees the new one. The tmpfs root is
// 0700: no host user but root reaches <id>; inside, the mount's root is
// <id> itself (0755), where any user of the sandbox may connect and read
// the token.
//
// Every socket is served by one http.Server through one listener (conns):
// an idle socket is a descriptor in an fdwatch set, not a goroutine
// blocked in Accept, so a thousand running sandboxes add no goroutine
// stacks to the daemon. A readable socket is drained of its pending
// connections on the watcher's goroutine, without blocking.
type agentSockets struct {
	dir    string // the older layout's per-sandbox tmpfs mounts
	shared string // the tmpfs holding a directory per sandbox
	log    *slog.Logger
	conns  *connListener
	// acceptDelay is how long a socket rests after a failed accept (only
	// the watcher's goroutine touches it).
	acceptDelay time.Duration

	mu    sync.Mutex
	srv   *http.Server
	watch *fdwatch.Watcher
	socks map[string]*agentSocket
}

// agentSocket is one sandbox's listening socket and its watch.
type agentSocket struct {
	f    *os.File // owns the descriptor
	stop func()
	live atomic.Int32 // its open connections
}

func newAgentSockets(dir string, log *slog.Logger) *agentSockets {
	return &agentSockets{dir: dir, shared: filepath.Join(filepath.Dir(dir), "agent"), log: log,
		conns: newConnListener(), socks: map[string]*agentSocket{}}
}

// setServer starts serving the agent sockets' connections with srv.
func (a *agentSockets) setServer(srv *http.Server) {
	a.mu.Lock()
	a.srv = srv
	a.mu.Unlock()
	go srv.Serve(a.conns)
}

// Open serves the API for sandbox id; idempotent.
func (a *agentSockets) Open(id string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.socks[id]; ok {
		if legacy := filepath.Join(a.dir, id); isMount(legacy) {
			return legacy, nil
		}
		return filepath.Join(a.shared, id), nil
	}
	if a.srv == nil {
		return "", fmt.Errorf("agent socket for %s: the API server is not ready", id)
	}
	d, err := a.dirFor(id)
	if err != nil {
		return "", fmt.Errorf("agent socket for %s: %w", id, err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		return "", fmt.Errorf("agent socket for %s: %w", id, err)
	}
	sock := filepath.Join(d, "api.sock")
	if a.watch == nil {
		if a.watch, err = fdwatch.New(); err != nil {
			return "", fmt.Errorf("agent socket for %s: %w", id, err)
		}
	}
	f, err := guest.Listen(sock)
	if err != nil {
		return "", fmt.Errorf("agent socket for %s: %w", id, err)
	}
	fd := int(f.Fd())
	if err := unix.SetNonblock(fd, true); err != nil {
		f.Close()
		return "", fmt.Errorf("agent socket for %s: %w", id, err)
	}
	as := &agentSocket{f: f}
	if as.stop, err = a.watch.Watch(fd, func() time.Duration { return a.acceptAll(id, as, fd) }); err != nil {
		f.Close()
		return "", fmt.Errorf("agent socket for %s: %w", id, err)
	}
	// Any uid inside may connect; the token decides what it may do.
	os.Chmod(sock, 0o666)
	a.socks[id] = as
	return d, nil
}

// acceptBatch bounds the connections one socket's callback accepts: a
// socket that never drains (an agent connecting in a loop) leaves the
// watcher's other descriptors their turn, since the watch fires again.
const acceptBatch = 64

// maxAgentConns bounds the open connections of one sandbox's socket:
// each is a descriptor and a goroutine of the daemon, and an agent with
// many processes could otherwise take every descriptor the daemon has.
// Connections over it are closed at once.
const maxAgentConns = 128

// acceptAll accepts the connections pending on sandbox id's listening
// socket (up to acceptBatch) and hands each to the server; it runs on the
// watcher's goroutine and does not block. Out of descriptors or memory the
// socket stays readable, so it asks the watcher to rest the socket (5 ms,
// doubling to 1 s, as net/http's Serve pauses) instead of firing again at
// once.
func (a *agentSockets) acceptAll(id string, as *agentSocket, fd int) time.Duration {
	for range acceptBatch {
		nfd, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
		switch {
		case err == nil:
		case errors.Is(err, unix.EAGAIN):
			return 0
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.ECONNABORTED):
			continue
		default:
			return a.acceptFailed(id, err)
		}
		if as.live.Load() >= maxAgentConns {
			unix.Close(nfd)
			a.log.Debug("agent socket connection refused: too many open", "sandbox", id, "open", maxAgentConns)
			continue
		}
		cf := os.NewFile(uintptr(nfd), "agent-conn")
		c, err := net.FileConn(cf)
		cf.Close()
		if err != nil {
			return a.acceptFailed(id, err)
		}
		a.acceptDelay = 0
		as.live.Add(1)
		a.conns.deliver(&countedConn{Conn: c, live: &as.live})
	}
	return 0
}

// acceptFailed logs err and returns how long the socket rests.
func (a *agentSockets) acceptFailed(id string, err error) time.Duration {
	if a.acceptDelay == 0 {
		a.acceptDelay = 5 * time.Millisecond
	} else {
		a.acceptDelay = min(2*a.acceptDelay, time.Second)
	}
	a.log.Warn("accept on an agent socket; retrying", "sandbox", id, "err", err, "in", a.acceptDelay)
	return a.acceptDelay
}

// countedConn is an agent connection counted in its socket's live count
// until it is closed.
type countedConn struct {
	net.Conn
	live *atomic.Int32
	once sync.Once
}

// Close closes the connection and uncounts it (once).
func (c *countedConn) Close() error {
	c.once.Do(func() { c.live.Add(-1) })
	return c.Conn.Close()
}

// dirFor returns the directory that holds id's socket: the tmpfs an older
// stead mounted for it, if it still runs with one, else <shared>/<id> on
// the shared tmpfs (mounted here on first use).
func (a *agentSockets) dirFor(id string) (string, error) {
	if legacy := filepath.Join(a.dir, id); isMount(legacy) {
		return legacy, nil
	}
	if err := os.MkdirAll(a.shared, 0o700); err != nil {
		return "", err
	}
	if mounted, err := mountinfo.Mounted(a.shared); err != nil {
		return "", err
	} else if !mounted {
		if err := unix.Mount("stead-agent", a.shared, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700,size=16m,nr_inodes=262144"); err != nil {
			return "", fmt.Errorf("mount: %w", err)
		}
	}
	d := filepath.Join(a.shared, id)
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	return d, nil
}

// isMount reports whether dir is a mount point (false when it is missing).
func isMount(dir string) bool {
	m, err := mountinfo.Mounted(dir)
	return err == nil && m
}

// Close stops serving for id and removes its directory.
func (a *agentSockets) Close(id string) {
	a.mu.Lock()
	as, ok := a.socks[id]
	delete(a.socks, id)
	a.mu.Unlock()
	if ok {
		as.stop()
		as.f.Close()
	}
	if legacy := filepath.Join(a.dir, id); isMount(legacy) {
		unix.Unmount(legacy, unix.MNT_DETACH)
		os.RemoveAll(legacy)
	}
	os.RemoveAll(filepath.Join(a.shared, id))
}

// closeAll stops listening (the directories stay for the next daemon).
func (a *agentSockets) closeAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, as := range a.socks {
		as.stop()
		as.f.Close()
		delete(a.socks, id)
	}
	if a.watch != nil {
		a.watch.Close()
		a.watch = nil
	}
	a.conns.Close()
}

// connListener is a net.Listener of connections accepted elsewhere (on
// every agent socket): one http.Server serves them all.
type connListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnListener() *connListener {
	return &connListener{conns: make(chan net.Conn, 64), done: make(chan struct{})}
}

// deliver queues c for Accept without blocking the caller: when the queue
// is full, a goroutine waits to hand it over (or closes it if the listener
// closes first).
func (l *connListener) deliver(c net.Conn) {
	select {
	case <-l.done:
		c.Close()
		return
	default:
	}
	select {
	case l.conns <- c:
	default:
		go func() {
			select {
			case l.conns <- c:
			case <-l.done:
				c.Close()
			}
		}()
	}
}

// Accept returns the next connection, or net.ErrClosed once closed.
func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close ends Accept; queued connections are closed.
func (l *connListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		for {
			select {
			case c := <-l.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}

// Addr names the listener (it has no address of its own).
func (l *connListener) Addr() net.Addr { return &net.UnixAddr{Name: "agent sockets", Net: "unix"} }

// loadOrCreateKey returns the 32-byte key in path, creating it (0600)
// on first use. A key file that exists but cannot be read, or holds
// something else than 32 bytes, is an error: replacing it would silently
// invalidate every token made with it.
func loadOrCreateKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) != 32 {
			return nil, fmt.Errorf("key file %s holds %d bytes, not 32: restore it from a copy, or remove it to make a new one (agents' tokens change): %w", path, len(b), errs.ErrInvalid)
		}
		return b, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read key: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	if err := fsutil.WriteFileExclusive(path, key, 0o600); err != nil {
		return nil, err
	}
	return key, nil
}
