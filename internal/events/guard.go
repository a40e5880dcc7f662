package events

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/stead-dev/stead/internal/errs"
)

// Webhook URLs are chosen by tenants and fetched by the daemon, as root, on
// the host: a server-side request forgery surface. The guard refuses, at
// connect time (after name resolution, so a name that resolves to a refused
// address is refused too, and DNS rebinding gains nothing):
//   - link-local addresses (169.254.0.0/16, fe80::/10): cloud metadata
//     services live there (169.254.169.254), and the known metadata
//     addresses outside it (fd00:ec2::254, 100.100.100.200);
//   - unspecified, multicast and broadcast addresses;
//   - loopback and every address of the host's own interfaces (the
//     daemon's API, the sandboxes' gateway) unless AllowLoopback.
//
// Private ranges (10/8, 172.16/12, 192.168/16, fc00::/7) are allowed: a
// self-hosted daemon's receivers usually live there. No proxy is used and
// redirects are not followed (a 3xx is a failed attempt), so the address
// checked is the address posted to.

// metadataAddr reports the cloud metadata endpoints outside the
// link-local ranges (AWS's IPv6 one, Alibaba's).
func metadataAddr(ip netip.Addr) bool {
	switch ip.String() {
	case "fd00:ec2::254", "100.100.100.200":
		return true
	}
	return false
}

// checkAddr says why the daemon must not connect to ip ("" when it may).
func checkAddr(ip netip.Addr, allowLoopback bool) string {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid():
		return "not an address"
	case ip.IsUnspecified():
		return "an unspecified address"
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return "a link-local address (cloud metadata lives there)"
	case ip.IsMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "a multicast or broadcast address"
	case ip.IsLoopback() && !allowLoopback:
		return "a loopback address (the daemon's host; allowed only with --webhook-allow-loopback)"
	}
	if metadataAddr(ip) {
		return "a cloud metadata address"
	}
	if !allowLoopback && hostAddr(ip) {
		return "an address of the daemon's host (allowed only with --webhook-allow-loopback)"
	}
	return ""
}

// hostAddr reports whether ip is an address of one of the host's
// interfaces.
func hostAddr(ip netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: refuse
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == ip {
			return true
		}
	}
	return false
}

// ValidateURL checks a webhook URL as given: http or https, a host, no
// user info (it would be shown by every list), no fragment, and, for a
// literal address or "localhost", the guard's rules. Names are checked
// again at each connect.
func ValidateURL(raw string, allowLoopback bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("webhook url: %w: %w", err, errs.ErrInvalid)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("webhook url %q: want an http:// or https:// URL: %w", raw, errs.ErrInvalid)
	}
	if u.Hostname() == "" || u.Opaque != "" {
		return fmt.Errorf("webhook url %q: no host: %w", raw, errs.ErrInvalid)
	}
	if u.User != nil {
		return fmt.Errorf("webhook url: user info in a URL is refused (it would be shown by every list); authenticate the daemon by the signature: %w", errs.ErrInvalid)
	}
	if u.Fragment != "" {
		return fmt.Errorf("webhook url %q: a fragment is never sent: %w", raw, errs.ErrInvalid)
	}
	if len(raw) > 2048 {
		return fmt.Errorf("webhook url: longer than 2048 bytes: %w", errs.ErrInvalid)
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		if why := checkAddr(ip, allowLoopback); why != "" {
			return fmt.Errorf("webhook url %q: %s is %s: %w", raw, ip, why, errs.ErrInvalid)
		}
	} else if (host == "localhost" || strings.HasSuffix(host, ".localhost")) && !allowLoopback {
		return fmt.Errorf("webhook url %q: localhost is the daemon's host (allowed only with --webhook-allow-loopback): %w", raw, errs.ErrInvalid)
	}
	return nil
}

// newDeliveryClient returns the HTTP client of webhook deliveries: the
// guard on every connect, no proxy, no redirects, timeout per attempt.
func newDeliveryClient(allowLoopback bool, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: timeout, Control: func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("webhook connect to %s: not an address", address)
		}
		if why := checkAddr(ap.Addr(), allowLoopback); why != "" {
			return fmt.Errorf("webhook connect to %s refused: %s", ap.Addr(), why)
		}
		return nil
	}}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			},
			TLSHandshakeTimeout: timeout,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
