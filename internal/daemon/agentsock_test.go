package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/testutil"
)

// TestAgentSocketsServeEverySandboxWithoutAGoroutineEach: each open socket
// answers with the API server, idle sockets add no goroutines, a closed
// one refuses connections while the others still answer.
func TestAgentSocketsServeEverySandboxWithoutAGoroutineEach(t *testing.T) {
	testutil.RequireRoot(t) // the shared tmpfs is mounted
	dir := filepath.Join(t.TempDir(), "api")
	a := newAgentSockets(dir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello "+r.URL.Path)
	})}
	a.setServer(srv)
	t.Cleanup(func() {
		a.closeAll()
		unix.Unmount(a.shared, unix.MNT_DETACH)
	})
	get := func(id string) (string, error) {
		c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", filepath.Join(a.shared, id, "api.sock"))
		}}, Timeout: 5 * time.Second}
		defer c.CloseIdleConnections()
		resp, err := c.Get("http://agent/" + id)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	if _, err := a.Open("sb-first"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	before := runtime.NumGoroutine()
	const n = 40
	for i := range n {
		if _, err := a.Open(fmt.Sprintf("sb-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if g := runtime.NumGoroutine(); g-before >= n/2 {
		t.Fatalf("goroutines %d → %d for %d idle agent sockets", before, g, n)
	}
	for _, id := range []string{"sb-first", "sb-0", "sb-17", "sb-39"} {
		if got, err := get(id); err != nil || got != "hello /"+id {
			t.Fatalf("GET through %s's socket: %q %v", id, got, err)
		}
	}
	a.Close("sb-17")
	if _, err := get("sb-17"); err == nil {
		t.Fatal("a closed agent socket still answers")
	}
	if got, err := get("sb-18"); err != nil || got != "hello /sb-18" {
		t.Fatalf("GET through sb-18 after sb-17 closed: %q %v", got, err)
	}
	// Many connections at once on one socket: none is lost.
	errc := make(chan error, 100)
	for range 100 {
		go func() {
			_, err := get("sb-3")
			errc <- err
		}()
	}
	for range 100 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAgentSocketsPauseWhenOutOfDescriptors: with the daemon out of
// descriptors, a socket with connections waiting stays readable; the
// watcher pauses between tries instead of spinning, and serves again once
// descriptors are back.
func TestAgentSocketsPauseWhenOutOfDescriptors(t *testing.T) {
	testutil.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "api")
	var logs syncBuffer
	a := newAgentSockets(dir, slog.New(slog.NewTextHandler(&logs, nil)))
	a.setServer(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })})
	t.Cleanup(func() {
		a.closeAll()
		unix.Unmount(a.shared, unix.MNT_DETACH)
	})
	if _, err := a.Open("sb-x"); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(a.shared, "sb-x", "api.sock")
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = uint64(len(fds) + 6)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for range 8 {
		if c, err := net.Dial("unix", sock); err == nil {
			conns = append(conns, c)
		}
	}
	// The first failed accept (on a loaded machine it may take a while),
	// then how many follow in 600 ms.
	failed := func() int { return strings.Count(logs.String(), "accept on an agent socket") }
	for deadline := time.Now().Add(10 * time.Second); failed() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	first := failed()
	time.Sleep(600 * time.Millisecond)
	tries := failed() - first
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		c.Close()
	}
	if first == 0 || tries > 12 {
		t.Fatalf("%d failed accepts logged, then %d in 600 ms out of descriptors; want a few (paused), not none or a spin", first, tries)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}, Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://agent/")
	if err != nil {
		t.Fatalf("the socket does not serve once descriptors are back: %v", err)
	}
	resp.Body.Close()
}

// TestAgentSocketsCapOpenConnectionsPerSandbox: one sandbox holding many
// connections gets at most maxAgentConns of them; the rest are closed at
// once, and another sandbox is still served.
func TestAgentSocketsCapOpenConnectionsPerSandbox(t *testing.T) {
	testutil.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "api")
	a := newAgentSockets(dir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a.setServer(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })})
	t.Cleanup(func() {
		a.closeAll()
		unix.Unmount(a.shared, unix.MNT_DETACH)
	})
	for _, id := range []string{"sb-greedy", "sb-other"} {
		if _, err := a.Open(id); err != nil {
			t.Fatal(err)
		}
	}
	const n = maxAgentConns + 72
	var conns []net.Conn
	for range n {
		c, err := net.Dial("unix", filepath.Join(a.shared, "sb-greedy", "api.sock"))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		defer c.Close()
	}
	open, closed := 0, 0
	time.Sleep(500 * time.Millisecond) // the daemon takes them all
	for _, c := range conns {
		// A deadline already past fails a read before it looks: each
		// connection gets its own short one.
		c.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
		var b [1]byte
		if _, err := c.Read(b[:]); errors.Is(err, os.ErrDeadlineExceeded) {
			open++
		} else {
			closed++
		}
	}
	if open > maxAgentConns || closed < n-maxAgentConns {
		t.Fatalf("%d of %d connections open, %d closed; want at most %d open", open, n, closed, maxAgentConns)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(a.shared, "sb-other", "api.sock"))
	}}, Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://agent/")
	if err != nil {
		t.Fatalf("another sandbox's socket: %v", err)
	}
	resp.Body.Close()
}
