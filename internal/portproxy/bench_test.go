package portproxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
)

// BenchmarkProxiedGET measures a GET through the proxy (Host routing, a
// public port) against the same GET sent directly, over keep-alive
// connections, in one process: the proxy's own cost per request.
func BenchmarkProxiedGET(b *testing.B) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") }))
	defer app.Close()
	port, _ := strconv.Atoi(app.URL[len("http://127.0.0.1:"):])
	be := &fakeBackend{TargetFunc: func(ctx context.Context, id string, p int) (Target, error) {
		return Target{SandboxID: id, Addr: netip.MustParseAddr("127.0.0.1"), Exposed: true, Public: true, State: "running"}, nil
	}}
	p := New(Options{Backend: be, Domain: "localhost"})
	front := httptest.NewServer(p.Handler())
	defer front.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, front.Listener.Addr().String())
	}}
	direct := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	proxied := &http.Client{Transport: tr}
	get := func(b *testing.B, c *http.Client, url string) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := c.Get(url)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	b.Run("direct", func(b *testing.B) { get(b, direct, app.URL+"/") })
	b.Run("proxied", func(b *testing.B) { get(b, proxied, "http://"+strconv.Itoa(port)+"-sb-x.localhost/") })
}
