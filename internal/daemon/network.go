package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/stead-dev/stead/internal/network"
	"github.com/stead-dev/stead/internal/network/egress"
	"github.com/stead-dev/stead/internal/network/resolver"
	"github.com/stead-dev/stead/internal/portproxy"
	"github.com/stead-dev/stead/internal/sandbox"
	"github.com/stead-dev/stead/internal/store"
)

// NetworkConfig configures sandbox networking and the port proxy.
type NetworkConfig struct {
	// Disabled gives sandboxes loopback only.
	Disabled bool
	// Bridge is the host link that holds the sandboxes' gateway (default
	// "stead0"; a bridge with no ports: sandboxes are routed); it also
	// names the daemon's nftables table, so two daemons on one host need
	// two.
	Bridge string
	// Subnet is the sandboxes' IPv4 subnet (default 10.88.0.0/16).
	Subnet string
	// Subnet6 is an IPv6 /64 (ULA) for sandboxes; "auto" (the default)
	// is DefaultSubnet6 when the host has IPv6 (a global address and a
	// default route), "off" or "" IPv4 only.
	Subnet6 string
	// DNSUpstreams are the resolver's upstreams (host:port); empty = the
	// nameservers of the host's /etc/resolv.conf.
	DNSUpstreams []string
	// ProxyListen is the port proxy's address ("" = no proxy listener;
	// the path routes on the API still work).
	ProxyListen string
	// ProxyDomain routes <port>-<sandbox>.<domain> by Host ("" = path
	// routing only).
	ProxyDomain string
	// ProxyTLSCert and ProxyTLSKey serve the proxy over TLS (HTTP/2).
	ProxyTLSCert, ProxyTLSKey string
}

// netParts are the running parts of sandbox networking.
type netParts struct {
	opts  *sandbox.NetworkOptions
	mgr   *network.Manager
	res   *resolver.Server
	eg    *egress.Proxy
	proxy *portproxy.Proxy
	ln    net.Listener
	log   *slog.Logger
}

func (p *netParts) close() {
	if p == nil {
		return
	}
	if p.mgr != nil {
		// The shells go with the daemon (the runtime closes after
		// this); the links made ahead for them go now, not once the
		// kernel has cleaned up their namespaces.
		if err := p.mgr.Close(); err != nil {
			p.log.Warn("close the sandbox network", "err", err)
		}
	}
	if p.ln != nil {
		p.ln.Close()
	}
	if p.eg != nil {
		p.eg.Close()
	}
	if p.res != nil {
		p.res.Close()
	}
}

// startNetwork sets up the bridge, the firewall, the resolver and the
// egress proxy; sandboxes are attached by the service.
func startNetwork(ctx context.Context, cfg Config, st store.Store, log *slog.Logger) (*netParts, error) {
	nc := cfg.Network
	parts := &netParts{opts: &sandbox.NetworkOptions{ProxyDomain: nc.ProxyDomain}, log: log}
	if cfg.Listen != "" {
		parts.opts.APIBase = "http://" + cfg.Listen
	}
	if nc.ProxyListen != "" {
		ln, err := net.Listen("tcp", nc.ProxyListen)
		if err != nil {
			return nil, fmt.Errorf("port proxy: listen on %s: %w", nc.ProxyListen, err)
		}
		parts.ln = ln
		scheme := "http"
		if nc.ProxyTLSCert != "" {
			scheme = "https"
		}
		parts.opts.ProxyBase = scheme + "://" + ln.Addr().String()
	}
	if nc.Disabled {
		log.Warn("sandbox networking is off: sandboxes have loopback only")
		return parts, nil
	}
	subnet, err := netip.ParsePrefix(orDefault(nc.Subnet, "10.88.0.0/16"))
	if err != nil || !subnet.Addr().Is4() {
		parts.close()
		return nil, fmt.Errorf("network subnet %q: want an IPv4 CIDR such as 10.88.0.0/16", nc.Subnet)
	}
	bridge := orDefault(nc.Bridge, "stead0")
	var subnet6 netip.Prefix
	switch nc.Subnet6 {
	case "", "off":
	case "auto":
		if hostHasIPv6() {
			subnet6 = autoSubnet6(bridge, netip.MustParsePrefix(DefaultSubnet6), log)
		}
	default:
		if subnet6, err = netip.ParsePrefix(nc.Subnet6); err != nil || !subnet6.Addr().Is6() || subnet6.Bits() > 120 {
			parts.close()
			return nil, fmt.Errorf("network subnet6 %q: want an IPv6 CIDR such as %s, auto or off", nc.Subnet6, DefaultSubnet6)
		}
	}
	runDir := filepath.Join(cfg.RunDir, "net")
	mgr, err := network.New(ctx, network.Config{Bridge: bridge, Table: bridge, Subnet: subnet.Masked(), Subnet6: subnet6.Masked(),
		RunDir: runDir, Leases: st, Logger: log})
	if err != nil {
		parts.close()
		return nil, fmt.Errorf("sandbox network: %w", err)
	}
	parts.mgr = mgr
	parts.opts.Manager = mgr
	parts.opts.Leases = st
	gw := mgr.Gateway()
	ups := nc.DNSUpstreams
	if len(ups) == 0 {
		if ups, err = resolver.HostUpstreams("/etc/resolv.conf"); err != nil || len(ups) == 0 {
			parts.close()
			return nil, fmt.Errorf("sandbox DNS: no upstream in /etc/resolv.conf (%v); give --dns-upstream", err)
		}
	}
	res, err := resolver.New(resolver.Options{
		Listen: []string{net.JoinHostPort(gw.String(), "53")}, Upstreams: ups, Logger: log,
		Lookup: mgr.Lookup, OnResolved: mgr.AddResolved,
		OnRefused: func(id, name string) { mgr.NoteRefused(id) },
	})
	if err == nil {
		err = res.Start(ctx)
	}
	if err != nil {
		parts.close()
		return nil, fmt.Errorf("sandbox DNS resolver on %s: %w", gw, err)
	}
	parts.res = res
	eg, err := egress.New(egress.Options{
		Listen: net.JoinHostPort(gw.String(), strconv.Itoa(network.DefaultEgressPort)), Logger: log,
		Lookup: mgr.Lookup, Resolved: mgr.Resolved, Forbidden: mgr.Forbidden,
		OnRefused: func(id string, dst netip.AddrPort, name string) { mgr.NoteRefused(id) },
	})
	if err == nil {
		err = eg.Start(ctx)
	}
	if err != nil {
		parts.close()
		return nil, fmt.Errorf("sandbox egress proxy on %s: %w", gw, err)
	}
	parts.eg = eg
	parts.opts.ResolvConf = mgr.ResolvConf()
	log.Info("sandbox network ready", "bridge", bridge, "subnet", subnet, "gateway", gw, "dns_upstreams", strings.Join(ups, ","))
	return parts, nil
}

// serveProxy starts the port proxy on its listener (if any) and returns
// the API handler with the proxy's path and port-forward routes in front.
//
// In a cluster, fwd (cluster.Router.ForwardSandbox) sends a request for a
// sandbox another node owns to that node: the proxy's path routes on the
// API listener, and every request of the proxy's own listener (by Host
// and by path). The owner gets a forwarded host-routed request on its API
// listener, where clusterNode.hostRoutes has the proxy's Host routing
// serve it. The API
// forwards its own routes itself.
func (p *netParts) serveProxy(ctx context.Context, svc *sandbox.Service, apiHandler http.Handler, nc NetworkConfig, errc chan<- error, log *slog.Logger,
	fwd func(idOf func(*http.Request) (string, bool)) func(http.Handler) http.Handler) http.Handler {
	var front func(http.Handler) http.Handler
	pathFwd := func(h http.Handler) http.Handler { return h }
	if fwd != nil {
		front = fwd(func(r *http.Request) (string, bool) { return portproxy.SandboxOf(r, nc.ProxyDomain) })
		pathFwd = fwd(func(r *http.Request) (string, bool) { return portproxy.SandboxOf(r, "") })
	}
	p.proxy = portproxy.New(portproxy.Options{Backend: svc.PortBackend(), Domain: nc.ProxyDomain, Logger: log, Front: front})
	if p.ln != nil {
		go func() {
			err := p.proxy.Serve(ctx, p.ln, nc.ProxyTLSCert, nc.ProxyTLSKey)
			if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				errc <- fmt.Errorf("port proxy: %w", err)
			}
		}()
		log.Info("port proxy listening", "addr", p.ln.Addr().String(), "domain", nc.ProxyDomain)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/sandboxes/{id}/ports/{port}/", pathFwd(p.proxy.PathHandler()))
	mux.Handle("GET /v1/sandboxes/{id}/port-forward/{port}", pathFwd(p.proxy.ForwardHandler()))
	// The bare path is the API's (expose, unexpose): without this exact
	// pattern the mux would redirect it into the proxy's subtree.
	mux.Handle("/v1/sandboxes/{id}/ports/{port}", apiHandler)
	mux.Handle("/", apiHandler)
	return mux
}

// DefaultSubnet6 is the sandboxes' IPv6 subnet when the host has IPv6.
const DefaultSubnet6 = "fd5e:ad00:88::/64"

// autoSubnet6 is the IPv6 subnet "auto" gives a daemon on bridge: def
// (DefaultSubnet6), or none when another link holds part of it (a second
// daemon on the host, which also took the default): sandboxes then have
// IPv4 only, and the log says how to give them IPv6.
func autoSubnet6(bridge string, def netip.Prefix, log *slog.Logger) netip.Prefix {
	held, link, err := network.SubnetInUse(bridge, def)
	if err != nil || !held.IsValid() {
		return def // an error here is New's to report
	}
	log.Warn("sandboxes get no IPv6: the default IPv6 subnet is in use on another link (another daemon's?); give this daemon one of its own with --subnet6",
		"subnet6", def.String(), "held", held.String(), "link", link)
	return netip.Prefix{}
}

// hostHasIPv6 reports whether the host reaches an IPv6 network: a global
// unicast address and a default route.
func hostHasIPv6() bool {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V6)
	if err != nil {
		return false
	}
	def := false
	for _, r := range routes {
		def = def || r.Dst == nil || r.Dst.IP.IsUnspecified() && r.Dst.Mask != nil && isZeroMask(r.Dst.Mask)
	}
	if !def {
		return false
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is6() && p.Addr().IsGlobalUnicast() {
			return true
		}
	}
	return false
}

func isZeroMask(m net.IPMask) bool {
	ones, _ := m.Size()
	return ones == 0
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
