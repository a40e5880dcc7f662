package guest

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
)

func TestClientDialsDeepSocketPaths(t *testing.T) {
	deep := t.TempDir() + "/" + strings.Repeat("d", 60) + "/" + strings.Repeat("e", 40)
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	// Listen through a short relative path, as init does inside a sandbox.
	wd, _ := os.Getwd()
	os.Chdir(deep)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: SocketName, Net: "unix"})
	os.Chdir(wd)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.AcceptUnix()
		if err == nil {
			cn := newConn(c)
			var req Request
			cn.recv(&req)
			cn.send(Reply{Type: "status"})
			c.Close()
		}
	}()
	c := NewClient(deep)
	if len(c.Socket) < 108 {
		t.Fatalf("test path too short: %d", len(c.Socket))
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}
