// Package resolver is the DNS server every sandbox uses as its only
// nameserver. It listens on the bridge's gateway address (UDP and TCP),
// finds the sandbox a query comes from by its source address, answers
// NXDOMAIN (with an Extended DNS Error) for the names the sandbox's egress
// policy does not let it resolve, and forwards the others to the upstream
// nameservers. Before it answers a name the policy admits by name, it
// reports the addresses of the answer (Options.OnResolved), so the
// firewall admits them for that sandbox only.
//
// The resolver never amplifies: it answers only to sandboxes it knows, at
// most Options.Rate queries a second each, with UDP answers no larger than
// the query's EDNS0 size (512 bytes without EDNS0, 1232 at most), and it
// refuses ANY, AXFR and IXFR.
package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/time/rate"

	"github.com/stead-dev/stead/internal/network/policy"
)

// Defaults of Options.
const (
	DefaultTimeout = 2 * time.Second
	DefaultRate    = 100
	DefaultBurst   = 200
	// MinAdmitTTL is the shortest admission OnResolved is given: an
	// answer with a shorter TTL is admitted for this long.
	MinAdmitTTL = 60 * time.Second
	// MaxTTL caps the TTL of every record the resolver passes on (and so
	// the admission OnResolved is given), so that no sandbox caches an
	// address longer than the firewall admits it.
	MaxTTL = time.Hour
	// ednsSize is the UDP payload size the resolver advertises to
	// sandboxes and to upstreams (the DNS flag day 2020 value).
	ednsSize = 1232
	// maxInflight bounds the queries forwarded upstream at once.
	maxInflight = 1024
)

// RefusedText is the EDE extra text of an answer to a refused name.
const RefusedText = "refused by stead's network policy for this sandbox"

// Options configure a Server. Lookup is required; the rest have defaults.
type Options struct {
	// Listen are the addresses (host:port) to serve UDP and TCP on, e.g.
	// "10.88.0.1:53". Port 0 picks one free port for both protocols.
	Listen []string
	// Upstreams are the nameservers (host:port) queries are forwarded
	// to, tried in order.
	Upstreams []string
	// Lookup finds the sandbox that owns a source address (network's
	// Manager.Lookup). A source it does not know is answered REFUSED.
	Lookup func(src netip.Addr) (id string, p policy.Policy, ok bool)
	// OnResolved is called, before the answer is sent, with the
	// addresses a name the sandbox's policy admits by name resolved to
	// (network's Manager.AddResolved). nil: not called.
	OnResolved func(id string, addrs []netip.Addr, ttl time.Duration)
	// OnRefused is called for every name refused by the policy
	// (network's Manager.NoteRefused). nil: not called.
	OnRefused func(id, name string)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Timeout bounds one exchange with one upstream (default
	// DefaultTimeout).
	Timeout time.Duration
	// Rate and Burst are each source's token bucket in queries a second
	// (defaults DefaultRate and DefaultBurst). A query over the limit
	// gets no answer.
	Rate  float64
	Burst int
}

// Server is the resolver. Its methods are safe for concurrent use.
type Server struct {
	opts     Options
	log      *slog.Logger
	limits   *limiter
	inflight chan struct{}

	mu      sync.Mutex
	servers []*dns.Server
	addrs   []netip.AddrPort
	cancel  context.CancelFunc
	base    context.Context
	closed  bool
	wg      sync.WaitGroup
}

// New checks opts and returns a Server that is not listening yet.
func New(opts Options) (*Server, error) {
	if opts.Lookup == nil {
		return nil, errors.New("new resolver: Lookup is required")
	}
	if len(opts.Listen) == 0 {
		return nil, errors.New("new resolver: no listen address")
	}
	if len(opts.Upstreams) == 0 {
		return nil, errors.New("new resolver: no upstream nameserver")
	}
	for _, u := range opts.Upstreams {
		if _, _, err := net.SplitHostPort(u); err != nil {
			return nil, fmt.Errorf("new resolver: upstream %q: %w", u, err)
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Rate <= 0 {
		opts.Rate = DefaultRate
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	return &Server{
		opts:     opts,
		log:      opts.Logger.With("op", "resolver"),
		limits:   newLimiter(rate.Limit(opts.Rate), opts.Burst),
		inflight: make(chan struct{}, maxInflight),
	}, nil
}

// Start binds every listen address (UDP and TCP) and returns once all
// are listening; queries are served until Close or until ctx ends. On
// error nothing stays bound.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.base != nil || s.closed {
		return errors.New("start resolver: already started or closed")
	}
	var (
		pcs   []net.PacketConn
		lns   []net.Listener
		bound []netip.AddrPort
	)
	closeAll := func() {
		for _, pc := range pcs {
			pc.Close()
		}
		for _, l := range lns {
			l.Close()
		}
	}
	for _, addr := range s.opts.Listen {
		pc, l, ap, err := listenBoth(ctx, addr)
		if err != nil {
			closeAll()
			return fmt.Errorf("start resolver: %w", err)
		}
		pcs, lns, bound = append(pcs, pc), append(lns, l), append(bound, ap)
	}
	s.base, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	h := dns.HandlerFunc(s.serveDNS)
	for i := range pcs {
		udp := &dns.Server{PacketConn: pcs[i], Handler: h, UDPSize: ednsSize}
		tcp := &dns.Server{Listener: lns[i], Handler: h, MaxTCPQueries: 128,
			IdleTimeout: func() time.Duration { return 8 * time.Second }}
		for _, srv := range []*dns.Server{udp, tcp} {
			started := make(chan struct{})
			srv.NotifyStartedFunc = func() { close(started) }
			s.servers = append(s.servers, srv)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				if err := srv.ActivateAndServe(); err != nil {
					s.log.ErrorContext(s.base, "resolver stopped", "err", err)
				}
			}()
			<-started
		}
	}
	s.addrs = bound
	s.log.InfoContext(ctx, "resolver listening", "addrs", bound, "upstreams", s.opts.Upstreams)
	go func() {
		select {
		case <-ctx.Done():
			s.Close()
		case <-s.base.Done():
		}
	}()
	return nil
}

// listenBoth binds UDP and TCP on addr, on the same port when addr's
// port is 0.
func listenBoth(ctx context.Context, addr string) (net.PacketConn, net.Listener, netip.AddrPort, error) {
	var lc net.ListenConfig
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, netip.AddrPort{}, fmt.Errorf("listen %q: %w", addr, err)
	}
	for range 10 {
		l, err := lc.Listen(ctx, "tcp", addr)
		if err != nil {
			return nil, nil, netip.AddrPort{}, fmt.Errorf("listen tcp %s: %w", addr, err)
		}
		ap := l.Addr().(*net.TCPAddr).AddrPort()
		pc, err := lc.ListenPacket(ctx, "udp", net.JoinHostPort(host, strconv.Itoa(int(ap.Port()))))
		if err == nil {
			return pc, l, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
		}
		l.Close()
		if port != "0" {
			return nil, nil, netip.AddrPort{}, fmt.Errorf("listen udp %s: %w", addr, err)
		}
	}
	return nil, nil, netip.AddrPort{}, fmt.Errorf("listen %s: no port free for both udp and tcp", addr)
}

// Addrs are the bound addresses (UDP and TCP share each), after Start.
func (s *Server) Addrs() []netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]netip.AddrPort(nil), s.addrs...)
}

// Close stops serving and waits for the listeners to close. It is
// idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	servers := s.servers
	s.servers = nil
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
	var errsOut []error
	for _, srv := range servers {
		if err := srv.Shutdown(); err != nil {
			errsOut = append(errsOut, err)
		}
	}
	s.wg.Wait()
	if err := errors.Join(errsOut...); err != nil {
		return fmt.Errorf("close resolver: %w", err)
	}
	return nil
}

// serveDNS answers one query.
func (s *Server) serveDNS(w dns.ResponseWriter, r *dns.Msg) {
	src, proto := remote(w)
	id, p, ok := s.opts.Lookup(src)
	if !ok {
		s.log.Debug("query from unknown source refused", "src", src)
		s.reply(w, r, proto, refuse(r, dns.RcodeRefused))
		return
	}
	if !s.limits.allow(src) {
		// No answer at all: a flood gets nothing back.
		s.log.Debug("query over the rate limit dropped", "sandbox", id, "src", src)
		return
	}
	if r.Response || r.Opcode != dns.OpcodeQuery || len(r.Question) != 1 {
		s.reply(w, r, proto, refuse(r, dns.RcodeFormatError))
		return
	}
	if opt := r.IsEdns0(); opt != nil && opt.Version() != 0 {
		s.reply(w, r, proto, refuse(r, dns.RcodeBadVers))
		return
	}
	q := r.Question[0]
	switch {
	case q.Qclass != dns.ClassINET:
		s.reply(w, r, proto, refuse(r, dns.RcodeRefused))
		return
	case q.Qtype == dns.TypeANY || q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR:
		s.reply(w, r, proto, refuse(r, dns.RcodeRefused))
		return
	}
	name := policy.Canonical(q.Name)
	if !p.Resolves(name) {
		s.log.Info("name refused", "sandbox", id, "name", name, "qtype", dns.TypeToString[q.Qtype])
		if s.opts.OnRefused != nil {
			s.opts.OnRefused(id, name)
		}
		s.reply(w, r, proto, blocked(r, name))
		return
	}
	ctx := s.base
	select {
	case s.inflight <- struct{}{}:
		defer func() { <-s.inflight }()
	default:
		s.reply(w, r, proto, refuse(r, dns.RcodeServerFailure))
		return
	}
	resp, err := s.forward(ctx, r)
	if err != nil {
		s.log.Warn("upstreams failed", "sandbox", id, "name", name, "err", err)
		s.reply(w, r, proto, refuse(r, dns.RcodeServerFailure))
		return
	}
	withoutOPT(resp)
	capTTLs(resp)
	if s.opts.OnResolved != nil && p.HasDomains() && p.Name(name) == policy.Admit && resp.Rcode == dns.RcodeSuccess {
		if addrs, ttl := Addresses(q.Name, resp.Answer); len(addrs) > 0 {
			s.opts.OnResolved(id, addrs, ttl)
		}
	}
	s.reply(w, r, proto, resp)
}

// remote is the query's source address and "udp" or "tcp".
func remote(w dns.ResponseWriter) (netip.Addr, string) {
	switch a := w.RemoteAddr().(type) {
	case *net.UDPAddr:
		return a.AddrPort().Addr().Unmap(), "udp"
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap(), "tcp"
	}
	return netip.Addr{}, "udp"
}

// reply sends m as the answer to r: r's id and question, the resolver's
// own OPT record when r had one, truncated to what r's transport and
// EDNS0 size allow.
func (s *Server) reply(w dns.ResponseWriter, r *dns.Msg, proto string, m *dns.Msg) {
	m.Id = r.Id
	m.Response = true
	m.Opcode = r.Opcode
	m.RecursionDesired = r.RecursionDesired
	m.RecursionAvailable = true
	m.Question = r.Question
	size := dns.MaxMsgSize
	if ropt := r.IsEdns0(); ropt != nil {
		if m.IsEdns0() == nil {
			m.SetEdns0(ednsSize, ropt.Do())
		}
		if proto == "udp" {
			size = min(max(int(ropt.UDPSize()), dns.MinMsgSize), ednsSize)
		}
	} else if proto == "udp" {
		size = dns.MinMsgSize
	}
	m.Truncate(size)
	if err := w.WriteMsg(m); err != nil {
		s.log.Debug("write answer", "err", err)
	}
}

// withoutOPT removes the OPT records of an upstream's answer (the
// resolver sends its own).
func withoutOPT(m *dns.Msg) {
	extra := m.Extra[:0]
	for _, rr := range m.Extra {
		if rr.Header().Rrtype != dns.TypeOPT {
			extra = append(extra, rr)
		}
	}
	m.Extra = extra
}

// refuse is an empty answer to r with rcode.
func refuse(r *dns.Msg, rcode int) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(r, rcode)
	m.RecursionAvailable = true
	return m
}

// blocked is the NXDOMAIN answer to a name the policy refuses, with an
// Extended DNS Error "Blocked" saying why (sent when r has EDNS0).
func blocked(r *dns.Msg, name string) *dns.Msg {
	m := refuse(r, dns.RcodeNameError)
	if r.IsEdns0() != nil {
		m.SetEdns0(ednsSize, false)
		opt := m.IsEdns0()
		opt.Option = append(opt.Option, &dns.EDNS0_EDE{
			InfoCode:  dns.ExtendedErrorCodeBlocked,
			ExtraText: name + ": " + RefusedText,
		})
	}
	return m
}

// forward asks the upstreams in order: UDP first, TCP when the UDP answer
// is truncated; an error, a timeout, SERVFAIL or REFUSED moves on to the
// next upstream.
func (s *Server) forward(ctx context.Context, r *dns.Msg) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.Id = dns.Id()
	q.Opcode = dns.OpcodeQuery
	q.RecursionDesired = r.RecursionDesired
	q.CheckingDisabled = r.CheckingDisabled
	q.Question = []dns.Question{r.Question[0]}
	do := false
	if opt := r.IsEdns0(); opt != nil {
		do = opt.Do()
	}
	q.SetEdns0(ednsSize, do)

	var errsOut []error
	for _, up := range s.opts.Upstreams {
		resp, err := s.exchange(ctx, q, up)
		if err == nil {
			switch resp.Rcode {
			case dns.RcodeServerFailure, dns.RcodeRefused, dns.RcodeNotImplemented, dns.RcodeFormatError:
				err = fmt.Errorf("rcode %s", dns.RcodeToString[resp.Rcode])
			}
		}
		if err != nil {
			errsOut = append(errsOut, fmt.Errorf("upstream %s: %w", up, err))
			continue
		}
		return resp, nil
	}
	return nil, errors.Join(errsOut...)
}

// exchange asks one upstream, retrying over TCP when UDP truncates.
func (s *Server) exchange(ctx context.Context, q *dns.Msg, up string) (*dns.Msg, error) {
	resp, err := s.exchangeNet(ctx, q, up, "udp")
	if err == nil && resp.Truncated {
		resp, err = s.exchangeNet(ctx, q, up, "tcp")
	}
	return resp, err
}

func (s *Server) exchangeNet(ctx context.Context, q *dns.Msg, up, network string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	c := &dns.Client{Net: network, UDPSize: ednsSize, Timeout: s.opts.Timeout}
	resp, _, err := c.ExchangeContext(ctx, q, up)
	if err != nil {
		return nil, fmt.Errorf("exchange over %s: %w", network, err)
	}
	if resp.Id != q.Id || len(resp.Question) != 1 ||
		policy.Canonical(resp.Question[0].Name) != policy.Canonical(q.Question[0].Name) ||
		resp.Question[0].Qtype != q.Question[0].Qtype {
		return nil, fmt.Errorf("exchange over %s: answer does not match the question", network)
	}
	return resp, nil
}

// capTTLs caps every record's TTL at MaxTTL.
func capTTLs(m *dns.Msg) {
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT && h.Ttl > uint32(MaxTTL/time.Second) {
				h.Ttl = uint32(MaxTTL / time.Second)
			}
		}
	}
}

// Addresses returns the A and AAAA addresses answer gives for qname,
// following CNAME (and DNAME-synthesized CNAME) chains from qname, and
// the admission TTL: the least TTL of the records on the way, at least
// MinAdmitTTL. Records of other owners are ignored, as are addresses no
// policy admits (policy.AlwaysDenied).
func Addresses(qname string, answer []dns.RR) ([]netip.Addr, time.Duration) {
	owners := map[string]bool{policy.Canonical(qname): true}
	minTTL := uint32(MaxTTL / time.Second)
	// A chain is at most len(answer) long; each pass adds one link.
	for range answer {
		grew := false
		for _, rr := range answer {
			c, ok := rr.(*dns.CNAME)
			if !ok || !owners[policy.Canonical(c.Hdr.Name)] || owners[policy.Canonical(c.Target)] {
				continue
			}
			owners[policy.Canonical(c.Target)] = true
			minTTL = min(minTTL, c.Hdr.Ttl)
			grew = true
		}
		if !grew {
			break
		}
	}
	var addrs []netip.Addr
	for _, rr := range answer {
		var a netip.Addr
		switch rr := rr.(type) {
		case *dns.A:
			a, _ = netip.AddrFromSlice(rr.A.To4())
		case *dns.AAAA:
			a, _ = netip.AddrFromSlice(rr.AAAA.To16())
		default:
			continue
		}
		if !owners[policy.Canonical(rr.Header().Name)] || !a.IsValid() {
			continue
		}
		a = a.Unmap()
		if policy.IsAlwaysDenied(a) {
			continue
		}
		addrs = append(addrs, a)
		minTTL = min(minTTL, rr.Header().Ttl)
	}
	return addrs, max(time.Duration(minTTL)*time.Second, MinAdmitTTL)
}
