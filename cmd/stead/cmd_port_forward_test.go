package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/portproxy"
)

// forwardBackend is a portproxy.Backend for a running sandbox on
// 127.0.0.1 that key "k" may use.
type forwardBackend struct{}

func (forwardBackend) Target(context.Context, string, int) (portproxy.Target, error) {
	return portproxy.Target{SandboxID: "sb-1", Addr: netip.AddrFrom4([4]byte{127, 0, 0, 1}), State: "running"}, nil
}

func (forwardBackend) Authorize(_ context.Context, key, _ string) error {
	if key != "k" {
		return errs.ErrUnauthenticated
	}
	return nil
}

func (forwardBackend) CheckToken(string, int, string) bool { return false }
func (forwardBackend) Wake(context.Context, string) error  { return nil }
func (forwardBackend) NoteActivity(string)                 {}

func TestPortForwardRefusesBadArguments(t *testing.T) {
	srv, _ := newCLIServer(t)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"port-forward", "agent"}, exitUsage},
		{[]string{"port-forward", "agent", "0"}, exitUsage},
		{[]string{"port-forward", "agent", "http"}, exitUsage},
		{[]string{"port-forward", "missing", "5432"}, exitNotFound},
	} {
		if code, _, stderr := stead(t, srv, tc.args...); code != tc.code {
			t.Errorf("%v: exit %d, want %d; stderr: %s", tc.args, code, tc.code, stderr)
		}
	}
}

func TestPortForwardTunnelsEachLocalConnectionUntilCancelled(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = echo.Close() }()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	p := portproxy.New(portproxy.Options{Backend: forwardBackend{}, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(p.ForwardHandler())
	defer srv.Close()
	c, err := client.New(srv.URL, "k")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	g := &globals{stdout: io.Discard, stderr: &stderr}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- forwardPort(ctx, g, c, ln, "agent", echo.Addr().(*net.TCPAddr).Port) }()

	var conns []net.Conn
	for _, msg := range []string{"one", "two"} {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(conn, got); err != nil || string(got) != msg {
			t.Fatalf("read %q, %v through the tunnel; want %q", got, err, msg)
		}
		conns = append(conns, conn)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("forwardPort returned %v after Ctrl-C, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("forwardPort did not return after its context ended")
	}
	for _, conn := range conns {
		if n, err := conn.Read(make([]byte, 1)); err == nil {
			t.Errorf("an open connection still reads (%d bytes) after Ctrl-C", n)
		}
	}
	if stderr.Len() > 0 {
		t.Errorf("stderr: %s", stderr.String())
	}
}

func TestPortForwardCommandPrintsWhereItListens(t *testing.T) {
	b := &cliBackend{}
	p := portproxy.New(portproxy.Options{Backend: forwardBackend{}, Logger: slog.New(slog.DiscardHandler)})
	mux := http.NewServeMux()
	mux.Handle("GET /v1/sandboxes/{id}/port-forward/{port}", p.ForwardHandler())
	mux.Handle("/", api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	out, w := io.Pipe()
	g := &globals{stdin: strings.NewReader(""), stdout: w, stderr: io.Discard}
	root := newRootCmd(g)
	root.SetArgs([]string{"--endpoint", srv.URL, "--api-key", "k", "port-forward", "agent", "5432", "--listen", "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^Forwarding 127\.0\.0\.1:\d+ -> sandbox agent port 5432 \(Ctrl-C stops\)\n$`).MatchString(line) {
		t.Errorf("printed %q", line)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("port-forward ended with %v on Ctrl-C, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("port-forward did not stop on Ctrl-C")
	}
}
