package portproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// serve runs f's proxy through Serve on 127.0.0.1 and returns its
// address; the server stops (and Serve must return nil) at cleanup.
func (f *fixture) serve(t *testing.T, certFile, keyFile string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.p.Serve(ctx, ln, certFile, keyFile) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve returned %v after its context ended, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after its context ended")
		}
	})
	return ln.Addr().String()
}

func TestH2CWithPriorKnowledge(t *testing.T) {
	f := newFixture(t)
	addr := f.serve(t, "", "")
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protos}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	url := fmt.Sprintf("http://%s/v1/sandboxes/%s/ports/%d/h2c", addr, testSandbox, f.pubPort)
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	resp, body := do(t, c, req)
	if resp.ProtoMajor != 2 {
		t.Fatalf("the proxy answered over %s, want HTTP/2", resp.Proto)
	}
	e := decodeEcho(t)(resp, body)
	if e.Path != "/h2c" || e.Proto != 1 {
		t.Errorf("the app got %q over HTTP/%d, want /h2c over HTTP/1.1", e.Path, e.Proto)
	}
	// HTTP/1.1 still works on the same listener.
	resp, body = get(t, url, nil)
	if resp.ProtoMajor != 1 {
		t.Errorf("plain client answered over %s", resp.Proto)
	}
	decodeEcho(t)(resp, body)
}

func TestServerSeesHTTP2FromH2CClient(t *testing.T) {
	f := newFixture(t)
	srv := f.p.Server()
	seen := make(chan int, 1)
	inner := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.ProtoMajor
		inner.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protos}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet,
		fmt.Sprintf("http://%s/v1/sandboxes/%s/ports/%d/", ln.Addr(), testSandbox, f.pubPort), nil)
	decodeEcho(t)(do(t, &http.Client{Transport: tr}, req))
	if got := <-seen; got != 2 {
		t.Errorf("the proxy saw HTTP/%d, want HTTP/2", got)
	}
	if srv.WriteTimeout != 0 || srv.ReadHeaderTimeout <= 0 {
		t.Errorf("WriteTimeout %s, ReadHeaderTimeout %s: want none and some", srv.WriteTimeout, srv.ReadHeaderTimeout)
	}
}

func TestTLSNegotiatesHTTP2(t *testing.T) {
	f := newFixture(t)
	certFile, keyFile, pool := writeTestCert(t)
	addr := f.serve(t, certFile, keyFile)
	var protos http.Protocols
	protos.SetHTTP2(true)
	tr := &http.Transport{Protocols: &protos, TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	req, _ := http.NewRequest(http.MethodGet,
		fmt.Sprintf("https://%s/v1/sandboxes/%s/ports/%d/tls", addr, testSandbox, f.pubPort), nil)
	resp, body := do(t, c, req)
	if resp.ProtoMajor != 2 || resp.TLS == nil || resp.TLS.NegotiatedProtocol != "h2" {
		t.Fatalf("the proxy answered over %s (ALPN %v), want h2", resp.Proto, resp.TLS)
	}
	e := decodeEcho(t)(resp, body)
	if got := e.Header.Get("X-Forwarded-Proto"); got != "https" {
		t.Errorf("X-Forwarded-Proto %q, want https", got)
	}
}

// writeTestCert writes a self-signed certificate for 127.0.0.1 and
// returns its files and a pool trusting it.
func writeTestCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "stead test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IP(netip.MustParseAddr("127.0.0.1").AsSlice())},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
