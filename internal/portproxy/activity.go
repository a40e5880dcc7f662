package portproxy

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// meter notes activity for one stream while bytes flow through it, at
// most once per interval. The stream's start is noted by its caller.
type meter struct {
	note  func()
	every time.Duration
	last  atomic.Int64 // unix nanoseconds of the last note
}

func newMeter(note func(), every time.Duration) *meter {
	m := &meter{note: note, every: every}
	m.last.Store(time.Now().UnixNano())
	return m
}

// flowed records that n bytes passed.
func (m *meter) flowed(n int) {
	if n <= 0 {
		return
	}
	now := time.Now().UnixNano()
	last := m.last.Load()
	if time.Duration(now-last) >= m.every && m.last.CompareAndSwap(last, now) {
		m.note()
	}
}

// meteredTransport meters the request and response bodies of every round
// trip, upgraded connections (websockets) included.
type meteredTransport struct {
	base http.RoundTripper
	m    *meter
}

// RoundTrip sends req through the base transport with metered bodies.
func (t *meteredTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		r2 := *req
		r2.Body = &meteredBody{ReadCloser: req.Body, m: t.m}
		req = &r2
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok {
		// A 101 Switching Protocols: ReverseProxy copies both ways
		// through this body.
		resp.Body = &meteredRWC{rwc: rwc, m: t.m}
	} else {
		resp.Body = &meteredBody{ReadCloser: resp.Body, m: t.m}
	}
	return resp, nil
}

// meteredBody is a body whose reads are metered.
type meteredBody struct {
	io.ReadCloser
	m *meter
}

func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.m.flowed(n)
	return n, err
}

// meteredRWC is an upgraded connection whose reads and writes are metered.
type meteredRWC struct {
	rwc io.ReadWriteCloser
	m   *meter
}

func (c *meteredRWC) Read(p []byte) (int, error) {
	n, err := c.rwc.Read(p)
	c.m.flowed(n)
	return n, err
}

func (c *meteredRWC) Write(p []byte) (int, error) {
	n, err := c.rwc.Write(p)
	c.m.flowed(n)
	return n, err
}

func (c *meteredRWC) Close() error { return c.rwc.Close() }

// meteredConn is a tunnel's connection to the sandbox, metered.
type meteredConn struct {
	net.Conn
	m *meter
}

func (c *meteredConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.m.flowed(n)
	return n, err
}

func (c *meteredConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.m.flowed(n)
	return n, err
}
