package resolver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/network/policy"
)

// upstream is a fake nameserver on 127.0.0.1 that answers from zone.
type upstream struct {
	addr string
	// truncUDP: answers over UDP are empty and truncated.
	truncUDP atomic.Bool
	// servfail: every answer is SERVFAIL.
	servfail atomic.Bool
	mu       sync.Mutex
	zone     map[string][]dns.RR // by lower-case fqdn
	queries  map[string]int      // by "udp"/"tcp"
}

func startUpstream(t *testing.T, records ...string) *upstream {
	t.Helper()
	u := &upstream{zone: map[string][]dns.RR{}, queries: map[string]int{}}
	for _, s := range records {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("record %q: %v", s, err)
		}
		n := strings.ToLower(rr.Header().Name)
		u.zone[n] = append(u.zone[n], rr)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	u.addr = l.Addr().String()
	for _, srv := range []*dns.Server{{Listener: l, Handler: u}, {PacketConn: pc, Handler: u}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
		t.Cleanup(func() { srv.Shutdown() })
	}
	return u
}

func (u *upstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	_, isTCP := w.RemoteAddr().(*net.TCPAddr)
	u.mu.Lock()
	defer u.mu.Unlock()
	if isTCP {
		u.queries["tcp"]++
	} else {
		u.queries["udp"]++
	}
	m := new(dns.Msg)
	m.SetReply(r)
	m.Compress = true
	if u.servfail.Load() {
		m.Rcode = dns.RcodeServerFailure
		w.WriteMsg(m)
		return
	}
	if u.truncUDP.Load() && !isTCP {
		m.Truncated = true
		w.WriteMsg(m)
		return
	}
	// Follow CNAMEs within the zone, as a recursive resolver would.
	name := strings.ToLower(r.Question[0].Name)
	for range 10 {
		rrs := u.zone[name]
		if len(rrs) == 0 {
			break
		}
		next := ""
		for _, rr := range rrs {
			if rr.Header().Rrtype == r.Question[0].Qtype || rr.Header().Rrtype == dns.TypeCNAME {
				m.Answer = append(m.Answer, dns.Copy(rr))
			}
			if c, ok := rr.(*dns.CNAME); ok {
				next = strings.ToLower(c.Target)
			}
		}
		if next == "" {
			break
		}
		name = next
	}
	if len(m.Answer) == 0 {
		m.Rcode = dns.RcodeNameError
	}
	w.WriteMsg(m)
}

func (u *upstream) count(proto string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.queries[proto]
}

// harness is a resolver on 127.0.0.1 whose one sandbox, "sb1", owns
// 127.0.0.1.
type harness struct {
	addr     string
	pol      atomic.Pointer[policy.Policy]
	known    atomic.Bool
	mu       sync.Mutex
	resolved []resolvedCall
	refused  []string
	// gate, when set, holds OnResolved until it is closed.
	gate atomic.Pointer[chan struct{}]
}

type resolvedCall struct {
	id    string
	addrs []netip.Addr
	ttl   time.Duration
}

func newHarness(t *testing.T, pol client.NetworkPolicy, opts Options, upstreams ...string) *harness {
	t.Helper()
	h := &harness{}
	h.setPolicy(t, pol)
	h.known.Store(true)
	opts.Listen = []string{"127.0.0.1:0"}
	opts.Upstreams = upstreams
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	opts.Lookup = func(src netip.Addr) (string, policy.Policy, bool) {
		if src != netip.MustParseAddr("127.0.0.1") || !h.known.Load() {
			return "", policy.Policy{}, false
		}
		return "sb1", *h.pol.Load(), true
	}
	opts.OnResolved = func(id string, addrs []netip.Addr, ttl time.Duration) {
		if g := h.gate.Load(); g != nil {
			<-*g
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.resolved = append(h.resolved, resolvedCall{id, addrs, ttl})
	}
	opts.OnRefused = func(id, name string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.refused = append(h.refused, id+" "+name)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	h.addr = s.Addrs()[0].String()
	return h
}

func (h *harness) setPolicy(t *testing.T, pol client.NetworkPolicy) {
	t.Helper()
	p, err := policy.Parse(pol)
	if err != nil {
		t.Fatal(err)
	}
	h.pol.Store(&p)
}

func (h *harness) calls() ([]resolvedCall, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.resolved), slices.Clone(h.refused)
}

func (h *harness) query(t *testing.T, proto, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(1232, false)
	c := &dns.Client{Net: proto, Timeout: 3 * time.Second}
	r, _, err := c.Exchange(m, h.addr)
	if err != nil {
		t.Fatalf("query %s %s: %v", proto, name, err)
	}
	if r.Id != m.Id || len(r.Question) != 1 || r.Question[0] != m.Question[0] {
		t.Fatalf("answer does not keep the id and question: %v", r)
	}
	return r
}

func addrsOf(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		}
	}
	return out
}

func off() *bool { b := false; return &b }

var zone = []string{
	"api.example.test. 30 IN A 198.18.1.10",
	"api.example.test. 300 IN AAAA 2001:db8::10",
	"www.example.test. 600 IN CNAME edge.cdn.test.",
	"edge.cdn.test. 300 IN CNAME e1.cdn.test.",
	"e1.cdn.test. 120 IN A 198.18.2.20",
	"e1.cdn.test. 120 IN A 198.18.2.21",
	"evil.test. 300 IN A 198.18.3.30",
	"long.example.test. 86400 IN A 198.18.1.11",
}

func TestAllowedNameForwardedAndAdmittedBeforeAnswer(t *testing.T) {
	up := startUpstream(t, zone...)
	h := newHarness(t, client.NetworkPolicy{Allow: []string{"api.example.test"}}, Options{}, up.addr)
	r := h.query(t, "udp", "API.example.test", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || !slices.Equal(addrsOf(r), []string{"198.18.1.10"}) {
		t.Fatalf("answer %v", r)
	}
	// OnResolved ran before the answer was written.
	res, ref := h.calls()
	if len(res) != 1 || res[0].id != "sb1" || len(res[0].addrs) != 1 || res[0].addrs[0] != netip.MustParseAddr("198.18.1.10") {
		t.Fatalf("OnResolved calls %+v", res)
	}
	if res[0].ttl != MinAdmitTTL {
		t.Fatalf("ttl %v, want the floor %v", res[0].ttl, MinAdmitTTL)
	}
	if len(ref) != 0 {
		t.Fatalf("OnRefused calls %v", ref)
	}
	r = h.query(t, "udp", "api.example.test", dns.TypeAAAA)
	if !slices.Equal(addrsOf(r), []string{"2001:db8::10"}) {
		t.Fatalf("AAAA answer %v", r)
	}
	res, _ = h.calls()
	if len(res) != 2 || res[1].ttl != 300*time.Second {
		t.Fatalf("AAAA OnResolved %+v", res)
	}
}

func TestAnswerWaitsForOnResolved(t *testing.T) {
	up := startUpstream(t, zone...)
	gate := make(chan struct{})
	h := newHarness(t, client.NetworkPolicy{Allow: []string{"api.example.test"}}, Options{}, up.addr)
	h.gate.Store(&gate)
	answered := make(chan *dns.Msg, 1)
	go func() {
		m := new(dns.Msg)
		m.SetQuestion("api.example.test.", dns.TypeA)
		c := &dns.Client{Net: "tcp", Timeout: 10 * time.Second}
		r, _, _ := c.Exchange(m, h.addr)
		answered <- r
	}()
	select {
	case r := <-answered:
		t.Fatalf("answered before OnResolved returned: %v", r)
	case <-time.After(300 * time.Millisecond):
	}
	close(gate)
	if r := <-answered; r == nil || !slices.Equal(addrsOf(r), []string{"198.18.1.10"}) {
		t.Fatalf("answer %v", r)
	}
}

func TestTTLCappedInAnswerAndAdmission(t *testing.T) {
	up := startUpstream(t, zone...)
	h := newHarness(t, client.NetworkPolicy{Allow: []string{"*.example.test"}}, Options{}, up.addr)
	r := h.query(t, "udp", "long.example.test", dns.TypeA)
	if len(r.Answer) != 1 || r.Answer[0].Header().Ttl != uint32(MaxTTL/time.Second) {
		t.Fatalf("answer %v", r)
	}
	res, _ := h.calls()
	if len(res) != 1 || res[0].ttl != MaxTTL {
		t.Fatalf("OnResolved %+v", res)
	}
}

func TestDeniedNameNXDOMAINWithEDE(t *testing.T) {
	up := startUpstream(t, zone...)
	h := newHarness(t, client.NetworkPolicy{Allow: []string{"api.example.test"}}, Options{}, up.addr)
	for _, proto := range []string{"udp", "tcp"} {
		r := h.query(t, proto, "evil.test", dns.TypeA)
		if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
			t.Fatalf("%s: answer %v", proto, r)
		}
		opt := r.IsEdns0()
		if opt == nil {
			t.Fatalf("%s: no OPT", proto)
		}
		var ede *dns.EDNS0_EDE
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_EDE); ok {
				ede = e
			}
		}
		if ede == nil || ede.InfoCode != dns.ExtendedErrorCodeBlocked || !strings.Contains(ede.ExtraText, "stead's network policy") {
			t.Fatalf("%s: EDE %v", proto, ede)
		}
	}
	res, ref := h.calls()
	if len(res) != 0 || !slices.Equal(ref, []string{"sb1 evil.test", "sb1 evil.test"}) {
		t.Fatalf("calls %+v %v", res, ref)
	}
	if up.count("udp")+up.count("tcp") != 0 {
		t.Fatal("a refused name reached the upstream")
	}
}

func TestDenyPatternWinsOverDefaultAdmit(t *testing.T) {
	up := startUpstream(t, zone...)
	h := newHarness(t, client.NetworkPolicy{Deny: []string{"*.example.test"}}, Options{}, up.addr)
	if r := h.query(t, "udp", "api.example.test", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("denied name answered %v", r)
	}
	r := h.query(t, "udp", "evil.test", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("default-admitted name %v", r)
	}
	// The policy names domains and admits evil.test by name (by
	// default): its addresses are admitted, as for any admitted name.
	if res, _ := h.calls(); len(res) != 1 {
		t.Fatalf("OnResolved %+v", res)
	}
}

func TestInternetOffRefusesAll(t *testing.T) {
	up := startUpstream(t, zone...)
	h := newHarness(t, client.NetworkPolicy{Internet: off(), Allow: []string{"api.example.test", "198.18.0.0/15"}}, Options{}, up.addr)
	for _, n := range []string{"api.example.test", "evil.test", "localhost"} {
		if r := h.query(t, "udp", n, dns.TypeA); r.Rcode != dns.RcodeNameError {
			t.Fatalf("%s: %v", n, r)
		}
	}
	if _, ref := h.calls(); len(ref) != 3 {
		t.Fatalf("OnRefused %v", ref)
	}
}

func TestUnknownSourceRefused(t *testing.T) {
	up := startUpstream(t, zone...)
	h := newHarness(t, client.NetworkPolicy{}, Options{}, up.addr)
	h.known.Store(false)
	for _, proto := range []string{"udp", "tcp"} {
		if r := h.query(t, proto, "api.example.test", dns.TypeA); r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
			t.Fatalf("%s: %v", proto, r)
		}
	}
	if up.count("udp")+up.count("tcp") != 0 {
		t.Fatal("an unknown source's query reached the upstream")
	}
}

func TestCNAMEChainAddressesAdmitted(t *testing.T) {
	up := startUpstream(t, zone...)
	h := newHarness(t, client.NetworkPolicy{Allow: []string{"www.example.test"}}, Options{}, up.addr)
	r := h.query(t, "udp", "www.example.test", dns.TypeA)
	if !slices.Equal(addrsOf(r), []string{"198.18.2.20", "198.18.2.21"}) {
		t.Fatalf("answer %v", r)
	}
	res, _ := h.calls()
	want := []netip.Addr{netip.MustParseAddr("198.18.2.20"), netip.MustParseAddr("198.18.2.21")}
	if len(res) != 1 || !slices.Equal(res[0].addrs, want) || res[0].ttl != 120*time.Second {
		t.Fatalf("OnResolved %+v", res)
	}
}

func TestAddressesIgnoresRecordsOffTheChain(t *testing.T) {
	var rrs []dns.RR
	for _, s := range []string{
		"a.test. 100 IN CNAME b.test.",
		"b.test. 100 IN A 198.18.0.1",
		"other.test. 5 IN A 198.18.0.2",
		"b.test. 100 IN A 127.0.0.1",
		"c.test. 100 IN CNAME a.test.",
	} {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		rrs = append(rrs, rr)
	}
	addrs, ttl := Addresses("A.test.", rrs)
	if !slices.Equal(addrs, []netip.Addr{netip.MustParseAddr("198.18.0.1")}) || ttl != 100*time.Second {
		t.Fatalf("Addresses = %v %v", addrs, ttl)
	}
}

func TestTCPAndTruncationRetry(t *testing.T) {
	up := startUpstream(t, zone...)
	up.truncUDP.Store(true)
	h := newHarness(t, client.NetworkPolicy{Allow: []string{"api.example.test"}}, Options{}, up.addr)
	r := h.query(t, "udp", "api.example.test", dns.TypeA)
	if r.Truncated || !slices.Equal(addrsOf(r), []string{"198.18.1.10"}) {
		t.Fatalf("answer %v", r)
	}
	if up.count("udp") != 1 || up.count("tcp") != 1 {
		t.Fatalf("upstream queries udp %d tcp %d, want 1 and 1", up.count("udp"), up.count("tcp"))
	}
	r = h.query(t, "tcp", "api.example.test", dns.TypeA)
	if !slices.Equal(addrsOf(r), []string{"198.18.1.10"}) {
		t.Fatalf("tcp answer %v", r)
	}
}

func TestLargeAnswerTruncatedForUDPClient(t *testing.T) {
	var recs []string
	for i := range 50 {
		recs = append(recs, "many.example.test. 300 IN A 198.18.4."+itoa(i))
	}
	up := startUpstream(t, recs...)
	h := newHarness(t, client.NetworkPolicy{}, Options{}, up.addr)
	m := new(dns.Msg)
	m.SetQuestion("many.example.test.", dns.TypeA) // no EDNS0: 512 bytes
	c := &dns.Client{Net: "udp", Timeout: 3 * time.Second}
	r, _, err := c.Exchange(m, h.addr)
	if err != nil {
		t.Fatal(err)
	}
	r.Compress = true // as sent
	if !r.Truncated || r.Len() > dns.MinMsgSize {
		t.Fatalf("udp answer of %d bytes, truncated %v", r.Len(), r.Truncated)
	}
	r = h.query(t, "tcp", "many.example.test", dns.TypeA)
	if r.Truncated || len(r.Answer) != 50 {
		t.Fatalf("tcp answer has %d records", len(r.Answer))
	}
}

func itoa(i int) string { return netip.AddrFrom4([4]byte{0, 0, 0, byte(i)}).String()[6:] }

func TestUpstreamFailover(t *testing.T) {
	bad := startUpstream(t)
	bad.servfail.Store(true)
	good := startUpstream(t, zone...)
	// A port nothing answers on (UDP: the query times out or is refused).
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := pc.LocalAddr().String()
	t.Cleanup(func() { pc.Close() })
	h := newHarness(t, client.NetworkPolicy{}, Options{Timeout: 200 * time.Millisecond}, dead, bad.addr, good.addr)
	r := h.query(t, "udp", "api.example.test", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || !slices.Equal(addrsOf(r), []string{"198.18.1.10"}) {
		t.Fatalf("answer %v", r)
	}
	if bad.count("udp") != 1 || good.count("udp") != 1 {
		t.Fatalf("bad %d good %d", bad.count("udp"), good.count("udp"))
	}
}

func TestAllUpstreamsFailingIsSERVFAIL(t *testing.T) {
	bad := startUpstream(t)
	bad.servfail.Store(true)
	h := newHarness(t, client.NetworkPolicy{}, Options{}, bad.addr)
	if r := h.query(t, "udp", "api.example.test", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("answer %v", r)
	}
}

func TestRefusesANYAndZoneTransfers(t *testing.T) {
	up := startUpstream(t, zone...)
	h := newHarness(t, client.NetworkPolicy{}, Options{}, up.addr)
	for _, qt := range []uint16{dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR} {
		if r := h.query(t, "tcp", "example.test", qt); r.Rcode != dns.RcodeRefused {
			t.Fatalf("%s: %v", dns.TypeToString[qt], r)
		}
	}
	if up.count("udp")+up.count("tcp") != 0 {
		t.Fatal("a refused query type reached the upstream")
	}
}

func TestUnknownEDNSVersionIsBADVERS(t *testing.T) {
	up := startUpstream(t, zone...)
	h := newHarness(t, client.NetworkPolicy{}, Options{}, up.addr)
	m := new(dns.Msg)
	m.SetQuestion("api.example.test.", dns.TypeA)
	m.SetEdns0(1232, false)
	m.IsEdns0().SetVersion(1)
	c := &dns.Client{Net: "udp", Timeout: 3 * time.Second}
	r, _, err := c.Exchange(m, h.addr)
	if err != nil || r.Rcode != dns.RcodeBadVers || r.IsEdns0() == nil {
		t.Fatalf("answer %v, %v", r, err)
	}
}

func TestRateLimitPerSource(t *testing.T) {
	up := startUpstream(t, zone...)
	h := newHarness(t, client.NetworkPolicy{}, Options{Rate: 0.001, Burst: 5}, up.addr)
	answered := 0
	for range 8 {
		m := new(dns.Msg)
		m.SetQuestion("api.example.test.", dns.TypeA)
		c := &dns.Client{Net: "udp", Timeout: 200 * time.Millisecond}
		if _, _, err := c.Exchange(m, h.addr); err == nil {
			answered++
		}
	}
	if answered != 5 {
		t.Fatalf("%d of 8 queries answered, want the burst of 5", answered)
	}
}

func TestParseResolvConf(t *testing.T) {
	got := ParseResolvConf([]byte("# comment\nsearch example.test\nnameserver 10.0.0.2 # main\nnameserver fe80::1%eth0\nnameserver bogus\nnameserver 10.0.0.2\n nameserver ::ffff:10.0.0.3\noptions ndots:2\n"))
	want := []string{"10.0.0.2:53", "[fe80::1%eth0]:53", "10.0.0.3:53"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func FuzzParseResolvConf(f *testing.F) {
	f.Add([]byte("nameserver 1.2.3.4\nnameserver ::1\n"))
	f.Add([]byte("nameserver\tfe80::1%eth0 ; x\n#nameserver 9.9.9.9"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, hp := range ParseResolvConf(data) {
			host, port, err := net.SplitHostPort(hp)
			if err != nil || port != "53" {
				t.Fatalf("%q: not host:53", hp)
			}
			if _, err := netip.ParseAddr(host); err != nil {
				t.Fatalf("%q: host not an address", hp)
			}
		}
	})
}
