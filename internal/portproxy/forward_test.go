package portproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
)

// echoTCP is a TCP echo server on 127.0.0.1 (not HTTP, not exposed).
func echoTCP(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestPortForwardTunnelsBytesBothWays(t *testing.T) {
	f := newFixture(t)
	port := echoTCP(t) // not exposed: the fixture's Target says so
	srv := httptest.NewServer(f.p.ForwardHandler())
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, keyGood)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := c.PortForward(ctx, testSandbox, port)
	if err != nil {
		t.Fatalf("PortForward: %v", err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))

	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v; want hello", got, err)
	}
	// More than one websocket message's worth, both ways at once.
	big := make([]byte, 1<<20)
	_, _ = rand.Read(big)
	errc := make(chan error, 1)
	go func() {
		_, err := conn.Write(big)
		errc <- err
	}()
	back := make([]byte, len(big))
	if _, err := io.ReadFull(conn, back); err != nil {
		t.Fatalf("read the echo of 1 MiB: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, big) {
		t.Fatal("the echo of 1 MiB differs")
	}
	if f.activity.Load() < 1 {
		t.Error("a tunnel noted no activity")
	}
}

func TestPortForwardNeedsAnAuthorizedAPIKey(t *testing.T) {
	f := newFixture(t)
	port := echoTCP(t)
	srv := httptest.NewServer(f.p.ForwardHandler())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for key, want := range map[string]func(error) bool{
		"":       client.IsUnauthenticated,
		"nope":   client.IsUnauthenticated,
		keyOther: client.IsNotFound,
		// A port token is not an API key.
		tokenGood: client.IsUnauthenticated,
	} {
		c, err := client.New(srv.URL, key)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := c.PortForward(ctx, testSandbox, port)
		if err == nil {
			_ = conn.Close()
			t.Errorf("key %q: PortForward succeeded", key)
			continue
		}
		if !want(err) {
			t.Errorf("key %q: error %v (HTTP %d)", key, err, client.StatusCode(err))
		}
	}
	c, _ := client.New(srv.URL, keyGood)
	if _, err := c.PortForward(ctx, "sb-unknown", port); !client.IsNotFound(err) {
		t.Errorf("unknown sandbox: error %v, want a 404", err)
	}
}
