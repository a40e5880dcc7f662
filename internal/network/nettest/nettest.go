// Package nettest gives tests a stand-in internet that never reaches the
// machine's resolver or any outside address: a network namespace of the
// test's own, joined to the host by a veth on a /24 of 198.18.0.0/15 (the
// benchmarking range), reached through the host's normal routing (so
// sandbox traffic crosses the NAT as real traffic would). Inside it run
// an HTTP server on :80, an HTTPS server on :443, a DNS server on :53
// whose zone the test sets, and a TCP sink and source for throughput.
//
// Every instance takes a distinct /24 (a lock file under /run picks it),
// so test binaries running in parallel never collide; t.Cleanup removes
// everything. It needs root.
package nettest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/testutil"
)

// Ports of the stand-in internet's services.
const (
	HTTPPort   = 80
	HTTPSPort  = 443
	DNSPort    = 53
	SinkPort   = 9000 // reads and discards everything
	SourcePort = 9001 // writes zeros until the peer closes
)

// lockDir holds one lock file per /24 in use.
const lockDir = "/run/stead-nettest"

// Internet is one stand-in internet.
type Internet struct {
	// Prefix is the instance's /24 of 198.18.0.0/15.
	Prefix netip.Prefix
	// HostAddr is the host's end of the veth.
	HostAddr netip.Addr
	// Web and Web2 are two addresses every server listens on (Web also
	// serves DNS).
	Web, Web2 netip.Addr
	// Prefix6, HostAddr6, Web6 and Web26 are the same in IPv6, on a /64
	// of the benchmarking range 2001:2::/48.
	Prefix6                netip.Prefix
	HostAddr6, Web6, Web26 netip.Addr
	// CertPEM is the HTTPS server's self-signed certificate (for *.test,
	// localhost and the four addresses); Certs is a pool holding it;
	// CertFile a file holding it (for curl --cacert).
	CertPEM  []byte
	Certs    *x509.CertPool
	CertFile string

	ns   netns.NsHandle
	veth string

	mu   sync.Mutex
	zone map[string][]netip.Addr

	closers []func()
}

// NewInternet makes a stand-in internet for the test; t.Cleanup removes it.
// Its zone starts as example.test and other.test at Web (and Web6),
// third.test at Web2 (and Web26); SetZone replaces it.
func NewInternet(t testing.TB) *Internet {
	t.Helper()
	testutil.RequireRoot(t)
	in, err := newInternet(t.TempDir())
	if err != nil {
		t.Fatalf("nettest: %v", err)
	}
	t.Cleanup(in.Close)
	return in
}

// Start makes a stand-in internet outside a test (for benchmarks), as
// NewInternet does; Close removes it.
func Start() (*Internet, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("nettest: a stand-in internet needs root")
	}
	dir, err := os.MkdirTemp("", "stead-nettest-")
	if err != nil {
		return nil, fmt.Errorf("nettest: %w", err)
	}
	in, err := newInternet(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("nettest: %w", err)
	}
	in.closers = append([]func(){func() { _ = os.RemoveAll(dir) }}, in.closers...)
	return in, nil
}

// newInternet makes an internet whose certificate file goes in certDir;
// on an error it has removed what it made.
func newInternet(certDir string) (in *Internet, err error) {
	lock, n, err := allocate()
	if err != nil {
		return nil, err
	}
	in = &Internet{zone: map[string][]netip.Addr{}}
	defer func() {
		if err != nil {
			in.Close()
			in = nil
		}
	}()
	in.closers = append(in.closers, func() { _ = lock.Close() })

	base := netip.AddrFrom4([4]byte{198, 18 + byte(n/256), byte(n % 256), 0})
	in.Prefix = netip.PrefixFrom(base, 24)
	in.HostAddr = base.Next()
	in.Web = in.HostAddr.Next()
	in.Web2 = in.Web.Next()
	in.veth = fmt.Sprintf("stnt%03dh", n)
	base6 := netip.AddrFrom16([16]byte{0x20, 0x01, 0, 0x02, 0, 0, byte(n >> 8), byte(n)})
	in.Prefix6 = netip.PrefixFrom(base6, 64)
	in.HostAddr6 = base6.Next()
	in.Web6 = in.HostAddr6.Next()
	in.Web26 = in.Web6.Next()

	if l, err := netlink.LinkByName(in.veth); err == nil {
		_ = netlink.LinkDel(l) // left by a killed test that held this /24
	}
	if in.ns, err = NewAnonNetNS(); err != nil {
		return nil, err
	}
	in.closers = append(in.closers, func() { _ = in.ns.Close() })

	la := netlink.NewLinkAttrs()
	la.Name = in.veth
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(in.ns))}); err != nil {
		return nil, fmt.Errorf("create veth %s: %w", in.veth, err)
	}
	in.closers = append(in.closers, func() {
		if l, err := netlink.LinkByName(in.veth); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	host, err := netlink.LinkByName(in.veth)
	if err != nil {
		return nil, fmt.Errorf("find veth %s: %w", in.veth, err)
	}
	for _, a := range []*netlink.Addr{nlAddr(in.HostAddr, 24), nlAddr(in.HostAddr6, 64)} {
		if err := netlink.AddrAdd(host, a); err != nil {
			return nil, fmt.Errorf("address %s: %w", in.veth, err)
		}
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return nil, fmt.Errorf("bring up %s: %w", in.veth, err)
	}
	nh, err := netlink.NewHandleAt(in.ns)
	if err != nil {
		return nil, fmt.Errorf("open netlink in the internet netns: %w", err)
	}
	defer nh.Close()
	eth, err := nh.LinkByName("eth0")
	if err != nil {
		return nil, fmt.Errorf("find eth0: %w", err)
	}
	for _, a := range []*netlink.Addr{nlAddr(in.Web, 24), nlAddr(in.Web2, 24), nlAddr(in.Web6, 64), nlAddr(in.Web26, 64)} {
		if err := nh.AddrAdd(eth, a); err != nil {
			return nil, fmt.Errorf("address eth0: %w", err)
		}
	}
	for _, l := range []netlink.Link{eth} {
		if err := nh.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("bring up eth0: %w", err)
		}
	}
	if lo, err := nh.LinkByName("lo"); err == nil {
		_ = nh.LinkSetUp(lo)
	}
	if err := nh.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: in.HostAddr.AsSlice()}); err != nil {
		return nil, fmt.Errorf("add default route: %w", err)
	}
	def6 := &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	if err := nh.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Dst: def6, Gw: in.HostAddr6.AsSlice()}); err != nil {
		return nil, fmt.Errorf("add default IPv6 route: %w", err)
	}
	if err := in.serve(); err != nil {
		return nil, err
	}
	in.CertFile = filepath.Join(certDir, "nettest-cert.pem")
	if err := os.WriteFile(in.CertFile, in.CertPEM, 0o644); err != nil {
		return nil, fmt.Errorf("write certificate: %w", err)
	}
	in.SetZone(map[string][]netip.Addr{
		"example.test": {in.Web, in.Web6},
		"other.test":   {in.Web, in.Web6},
		"third.test":   {in.Web2, in.Web26},
	})
	return in, nil
}

func nlAddr(a netip.Addr, bits int) *netlink.Addr {
	ad := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}}
	if a.Is6() {
		ad.Flags = unix.IFA_F_NODAD
	}
	return ad
}

// allocate takes the lock of a free /24 (of 512) and returns its index.
func allocate() (*os.File, int, error) {
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("create %s: %w", lockDir, err)
	}
	start := (os.Getpid() * 7) % 512
	for i := range 512 {
		n := (start + i) % 512
		if n == 9 {
			continue // 198.18.9.0/24 served manual experiments
		}
		f, err := os.OpenFile(filepath.Join(lockDir, fmt.Sprintf("%03d.lock", n)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, 0, fmt.Errorf("open lock: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		return f, n, nil
	}
	return nil, 0, errors.New("allocate a /24 of 198.18.0.0/15: all in use")
}

// NewAnonNetNS makes a network namespace held only by the returned handle.
func NewAnonNetNS() (netns.NsHandle, error) {
	type res struct {
		h   netns.NsHandle
		err error
	}
	c := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			c <- res{err: fmt.Errorf("unshare netns: %w", err)}
			return
		}
		h, err := netns.GetFromPath("/proc/thread-self/ns/net")
		c <- res{h, err}
	}()
	r := <-c
	return r.h, r.err
}

// Do runs f on an OS thread inside the network namespace at nsPath (a
// bind-mounted namespace file such as a sandbox's NetNS). Sockets f opens
// belong to that namespace for their whole life.
func Do(nsPath string, f func() error) error {
	h, err := netns.GetFromPath(nsPath)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", nsPath, err)
	}
	defer h.Close()
	return DoIn(h, f)
}

// DoIn runs f on an OS thread that has joined the namespace h.
func DoIn(h netns.NsHandle, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(h); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("join netns: %w", err)
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, err) // the thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Dial connects from inside the namespace at nsPath.
func Dial(ctx context.Context, nsPath, network, address string) (net.Conn, error) {
	var c net.Conn
	err := Do(nsPath, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// HTTPClient is a client whose connections start inside the namespace at
// nsPath; it trusts in's certificate (in may be nil) and times out.
func HTTPClient(nsPath string, in *Internet, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return Dial(ctx, nsPath, network, addr)
		},
		DisableKeepAlives: true,
	}
	if in != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: in.Certs}
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// SetZone replaces the DNS server's zone: names (any case, with or
// without the trailing dot) to their addresses (A and AAAA records).
func (in *Internet) SetZone(zone map[string][]netip.Addr) {
	z := map[string][]netip.Addr{}
	for name, addrs := range zone {
		z[dns.CanonicalName(name)] = addrs
	}
	in.mu.Lock()
	in.zone = z
	in.mu.Unlock()
}

// DNS is the DNS server's address.
func (in *Internet) DNS() netip.AddrPort { return netip.AddrPortFrom(in.Web, DNSPort) }

// Close removes the internet: its servers, namespace, veth and lock. It
// may be called more than once.
func (in *Internet) Close() {
	for i := len(in.closers) - 1; i >= 0; i-- {
		in.closers[i]()
	}
	in.closers = nil
}

// listen opens a listener inside the internet's namespace.
func (in *Internet) listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := DoIn(in.ns, func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s %s: %w", network, addr, err)
	}
	in.closers = append(in.closers, func() { _ = l.Close() })
	return l, nil
}

// Echo is the body the web servers answer with; tests compare against it.
func Echo(host string, local netip.AddrPort) string {
	return fmt.Sprintf("host=%s addr=%s\n", host, local)
}

func (in *Internet) serve() error {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		ap, _ := netip.ParseAddrPort(fmt.Sprint(local))
		_, _ = io.WriteString(w, Echo(r.Host, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())))
	})
	cert, err := in.selfSigned()
	if err != nil {
		return err
	}
	hl, err := in.listen("tcp", fmt.Sprintf(":%d", HTTPPort))
	if err != nil {
		return err
	}
	sl, err := in.listen("tcp", fmt.Sprintf(":%d", HTTPSPort))
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	ss := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go func() { _ = hs.Serve(hl) }()
	go func() { _ = ss.ServeTLS(sl, "", "") }()
	in.closers = append(in.closers, func() { _ = hs.Close(); _ = ss.Close() })

	sink, err := in.listen("tcp", fmt.Sprintf(":%d", SinkPort))
	if err != nil {
		return err
	}
	go acceptLoop(sink, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	src, err := in.listen("tcp", fmt.Sprintf(":%d", SourcePort))
	if err != nil {
		return err
	}
	go acceptLoop(src, func(c net.Conn) {
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})

	mux := dns.NewServeMux()
	mux.HandleFunc(".", in.answer)
	var pc net.PacketConn
	if err := DoIn(in.ns, func() error {
		var err error
		pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", DNSPort))
		return err
	}); err != nil {
		return fmt.Errorf("listen on udp :%d: %w", DNSPort, err)
	}
	dl, err := in.listen("tcp", fmt.Sprintf(":%d", DNSPort))
	if err != nil {
		_ = pc.Close()
		return err
	}
	us := &dns.Server{PacketConn: pc, Handler: mux}
	ts := &dns.Server{Listener: dl, Handler: mux}
	go func() { _ = us.ActivateAndServe() }()
	go func() { _ = ts.ActivateAndServe() }()
	in.closers = append(in.closers, func() { _ = us.Shutdown(); _ = ts.Shutdown(); _ = pc.Close() })
	return nil
}

func acceptLoop(l net.Listener, serve func(net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			serve(c)
		}()
	}
}

// answer serves the zone: A and AAAA records, NXDOMAIN for other names.
func (in *Internet) answer(w dns.ResponseWriter, req *dns.Msg) {
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.Authoritative = true
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, q := range req.Question {
		addrs, ok := in.zone[dns.CanonicalName(q.Name)]
		if !ok {
			resp.Rcode = dns.RcodeNameError
			continue
		}
		for _, a := range addrs {
			hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 30}
			switch {
			case a.Is4() && q.Qtype == dns.TypeA:
				hdr.Rrtype = dns.TypeA
				resp.Answer = append(resp.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
			case a.Is6() && !a.Is4In6() && q.Qtype == dns.TypeAAAA:
				hdr.Rrtype = dns.TypeAAAA
				resp.Answer = append(resp.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		}
	}
	_ = w.WriteMsg(resp)
}

// selfSigned makes the HTTPS server's certificate.
func (in *Internet) selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "stead nettest"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"*.test", "example.test", "other.test", "third.test", "localhost"},
		IPAddresses:           []net.IP{in.Web.AsSlice(), in.Web2.AsSlice(), in.Web6.AsSlice(), in.Web26.AsSlice()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("create certificate: %w", err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parse certificate: %w", err)
	}
	in.CertPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	in.Certs = x509.NewCertPool()
	in.Certs.AddCert(parsed)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: parsed}, nil
}

// URL is http://host/ or https://host/ for a name or address of the
// internet (a convenience for tests).
func URL(tls bool, host string) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		host = "[" + host + "]"
	}
	return scheme + "://" + strings.TrimSuffix(host, ".") + "/"
}

// Slot returns a number in [0, 256) that no other test on the machine
// holds until t ends: tests derive distinct bridge names, subnets and
// table names from it.
func Slot(t testing.TB) int {
	t.Helper()
	testutil.RequireRoot(t)
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		t.Fatalf("nettest: create %s: %v", lockDir, err)
	}
	start := (os.Getpid() * 13) % 256
	for i := range 256 {
		n := (start + i) % 256
		f, err := os.OpenFile(filepath.Join(lockDir, fmt.Sprintf("slot-%03d.lock", n)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatalf("nettest: open lock: %v", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		t.Cleanup(func() { _ = f.Close() })
		return n
	}
	t.Fatal("nettest: all 256 slots in use")
	return 0
}
