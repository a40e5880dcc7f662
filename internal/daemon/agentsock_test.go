package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
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
