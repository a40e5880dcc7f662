package nettest

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestInternetServesHTTPHTTPSAndDNSFromTheHost(t *testing.T) {
	in := NewInternet(t)
	in.SetZone(map[string][]netip.Addr{"example.test": {in.Web}, "third.test": {in.Web2}})

	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: in.Certs}}}
	for _, u := range []string{URL(false, in.Web.String()), URL(true, in.Web2.String()), URL(false, in.Web6.String()), URL(true, in.Web26.String())} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("get %s: %v", u, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("%s: %s", u, body)
	}

	m := new(dns.Msg)
	m.SetQuestion("third.test.", dns.TypeA)
	r, err := dns.Exchange(m, in.DNS().String())
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != in.Web2.String() {
		t.Fatalf("answer %v, want %s", r.Answer, in.Web2)
	}
	m.SetQuestion("missing.test.", dns.TypeA)
	if r, err = dns.Exchange(m, in.DNS().String()); err != nil || r.Rcode != dns.RcodeNameError {
		t.Fatalf("missing name: %v %v", r, err)
	}

	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(context.Background(), "tcp", netip.AddrPortFrom(in.Web, SourcePort).String())
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.CopyN(io.Discard, conn, 1<<20)
	conn.Close()
	if n != 1<<20 {
		t.Fatalf("source gave %d bytes", n)
	}
}

func TestInternetsInParallelTakeDistinctPrefixes(t *testing.T) {
	a, b := NewInternet(t), NewInternet(t)
	if a.Prefix == b.Prefix {
		t.Fatalf("both on %s", a.Prefix)
	}
}
