package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// clientHello returns the first bytes a crypto/tls client sends: its
// ClientHello records.
func clientHello(t testing.TB, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
		c.Handshake()
	}()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := b.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			t.Fatalf("read ClientHello: %v", err)
		}
		if _, _, err := clientHelloSNI(out); !errors.Is(err, errNeedMore) {
			return out
		}
	}
}

// resplit cuts the handshake stream of records into records of at most
// size bytes of fragment each.
func resplit(t testing.TB, records []byte, size int) []byte {
	t.Helper()
	var hs []byte
	for len(records) > 0 {
		n := int(records[3])<<8 | int(records[4])
		hs = append(hs, records[5:5+n]...)
		records = records[5+n:]
	}
	var out []byte
	for len(hs) > 0 {
		k := min(size, len(hs))
		out = append(out, recordHandshake, 3, 1, byte(k>>8), byte(k))
		out = append(out, hs[:k]...)
		hs = hs[k:]
	}
	return out
}

func TestClientHelloSNI(t *testing.T) {
	for _, name := range []string{"api.example.test", "Mixed.Case.Test", ""} {
		b := clientHello(t, name)
		for _, size := range []int{0, 1, 3, 100} {
			in := b
			if size > 0 {
				in = resplit(t, b, size)
			}
			got, _, err := clientHelloSNI(in)
			if err != nil || got != strings.ToLower(name) {
				t.Fatalf("name %q split %d: %q %v", name, size, got, err)
			}
			// Every prefix asks for more, and for no more than it needs.
			for i := 0; i < len(in); i += 7 {
				_, need, err := clientHelloSNI(in[:i])
				if !errors.Is(err, errNeedMore) || need <= i || need > len(in) {
					t.Fatalf("prefix %d of %d: need %d, %v", i, len(in), need, err)
				}
			}
		}
	}
}

func TestClientHelloSNIRejects(t *testing.T) {
	b := clientHello(t, "api.example.test")
	cases := map[string][]byte{
		"not handshake":  append([]byte{23}, b[1:]...),
		"empty record":   append([]byte{22, 3, 1, 0, 0}, b...),
		"record too big": {22, 3, 1, 0x40, 1},
		"not a hello":    {22, 3, 1, 0, 4, 2, 0, 0, 0},
		"alert between":  append(resplit(t, b, 100)[:105], 21, 3, 1, 0, 2, 2, 40),
	}
	for name, in := range cases {
		if _, _, err := clientHelloSNI(in); err == nil || errors.Is(err, errNeedMore) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestParseRequestHead(t *testing.T) {
	ok := []struct {
		in   string
		want requestHead
	}{
		{"GET / HTTP/1.1\r\nHost: Example.TEST:8080\r\n\r\n", requestHead{Method: "GET", Name: "example.test", ContentLength: -1}},
		{"GET / HTTP/1.0\r\n\r\n", requestHead{Method: "GET", ContentLength: -1}},
		{"POST /x HTTP/1.1\r\nhost:a.test\r\ncontent-length: 10\r\nContent-Length: 10\r\n\r\n", requestHead{Method: "POST", Name: "a.test", ContentLength: 10}},
		{"POST /x HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: Chunked\r\n\r\n", requestHead{Method: "POST", Name: "a.test", ContentLength: -1, Chunked: true}},
		{"GET http://b.test/p?q HTTP/1.1\r\nHost: b.test\r\n\r\n", requestHead{Method: "GET", Name: "b.test", ContentLength: -1}},
		{"GET HTTP://b.test:81 HTTP/1.1\r\n\r\n", requestHead{Method: "GET", Name: "b.test", ContentLength: -1}},
		{"CONNECT c.test:443 HTTP/1.1\r\nHost: c.test:443\r\n\r\n", requestHead{Method: "CONNECT", Name: "c.test", ContentLength: -1}},
		{"GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\nUpgrade: websocket\r\n\r\n", requestHead{Method: "GET", Name: "2001:db8::1", ContentLength: -1, Upgrade: "websocket"}},
		{"OPTIONS * HTTP/1.1\r\nHost: d.test\r\n\r\n", requestHead{Method: "OPTIONS", Name: "d.test", ContentLength: -1}},
	}
	for _, c := range ok {
		got, err := parseRequestHead([]byte(c.in))
		if err != nil || got != c.want {
			t.Errorf("%q: %+v %v, want %+v", c.in, got, err, c.want)
		}
	}
	bad := []string{
		"GET / HTTP/1.1\r\nHost: a.test\r\nHost: a.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\rb.test\r\n\r\n",
		"GET / HTTP/1.1\r\nX: 1\r\n folded\r\n\r\n",
		"GET / HTTP/1.1\r\nHost : a.test\r\n\r\n",
		"GET  / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.2\r\n\r\n",
		"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"GET / HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
		"GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n",
		"GET http://u@a.test/ HTTP/1.1\r\n\r\n",
		"GET ftp://a.test/ HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test:x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a..test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a test\r\n\r\n",
		"CONNECT c.test HTTP/1.1\r\n\r\n",
		"GET * HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\n",
	}
	for _, in := range bad {
		if _, err := parseRequestHead([]byte(in)); !errors.Is(err, errMalformed) {
			t.Errorf("%q: %v", in, err)
		}
	}
}

func TestCopyChunkedIsStrict(t *testing.T) {
	good := "5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nT: 1\r\n\r\nNEXT"
	var w bytes.Buffer
	br := bufio.NewReader(strings.NewReader(good))
	if err := copyChunked(&w, br); err != nil || w.String() != strings.TrimSuffix(good, "NEXT") {
		t.Fatalf("%q %v", w.String(), err)
	}
	for _, in := range []string{
		"5\nhello\r\n0\r\n\r\n",
		"5\r\nhelloX\r\n0\r\n\r\n",
		" 5\r\nhello\r\n0\r\n\r\n",
		"-5\r\nhello\r\n0\r\n\r\n",
		"10000000000000000\r\n",
		"0\r\nbad trailer\r\n\r\n",
	} {
		if err := copyChunked(&bytes.Buffer{}, bufio.NewReader(strings.NewReader(in))); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func FuzzClientHelloSNI(f *testing.F) {
	b := clientHello(f, "api.example.test")
	f.Add(b)
	f.Add(resplit(f, b, 50))
	f.Add(clientHello(f, ""))
	f.Add([]byte{22, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		name, need, err := clientHelloSNI(in)
		switch {
		case errors.Is(err, errNeedMore):
			if need <= len(in) {
				t.Fatalf("need %d with %d bytes", need, len(in))
			}
		case err == nil:
			if name != "" {
				if n, err := hostName(name); err != nil || n != name {
					t.Fatalf("name %q not canonical: %v", name, err)
				}
			}
		}
	})
}

func FuzzParseRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"POST http://a.test:80/x HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
		"CONNECT [::1]:443 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.0\r\nHost: [2001:db8::1]\r\nUpgrade: x\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := parseRequestHead(in)
		if err != nil {
			return
		}
		if h.Chunked && h.ContentLength >= 0 {
			t.Fatal("chunked with a Content-Length")
		}
		if h.Name != "" {
			if _, err := hostName(h.Name); err != nil {
				if a, err := netip.ParseAddr(h.Name); err != nil || !a.Is6() || a.String() != h.Name {
					t.Fatalf("name %q is neither a host name nor an IPv6 address", h.Name)
				}
			}
		}
		// The head read from a stream is the same head.
		br := bufio.NewReaderSize(bytes.NewReader(append(in, "rest"...)), maxPeek)
		raw, err := peekHead(br)
		if len(in) <= maxPeek && (err != nil || !bytes.Equal(raw, in)) {
			t.Fatalf("peekHead: %d bytes, %v", len(raw), err)
		}
	})
}
