package portproxy

import (
	"net/url"
	"strings"
)

// pathPrefix starts every path-routed port URL and the port-forward URL.
const pathPrefix = "/v1/sandboxes/"

// route is where a request goes: a sandbox's port, and for path routing
// the prefix that was stripped.
type route struct {
	id   string // sandbox id or name, as requested
	port int
	// prefix is the escaped "/v1/sandboxes/{id}/ports/{port}" of a
	// path-routed request, "" for a host-routed one.
	prefix string
	// rest is the escaped path to forward (path-routed requests only).
	rest string
	// bare is a path-routed request for the prefix without a trailing
	// slash: it is redirected.
	bare bool
}

// hostRouted reports whether the route came from the Host header.
func (rt route) hostRouted() bool { return rt.prefix == "" }

// parseHost parses a Host header "<port>-<sandbox>.<domain>[:port]"
// against domain (lower case, without leading or trailing dots). The first
// label is split at its first dash, since sandbox ids contain dashes
// ("sb-1a2b3c4d"). Matching is case-insensitive; the id is returned in
// lower case.
func parseHost(host, domain string) (port int, id string, ok bool) {
	if domain == "" || host == "" || host[0] == '[' {
		return 0, "", false
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		if !allDigits(host[i+1:]) {
			return 0, "", false
		}
		host = host[:i]
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	label, found := strings.CutSuffix(host, "."+domain)
	if !found || label == "" || strings.IndexByte(label, '.') >= 0 {
		return 0, "", false
	}
	portStr, id, found := strings.Cut(label, "-")
	if !found || id == "" {
		return 0, "", false
	}
	port, ok = parsePort(portStr)
	if !ok {
		return 0, "", false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return 0, "", false
		}
	}
	return port, id, true
}

// parsePath parses an escaped request path
// "/v1/sandboxes/{id}/ports/{port}[/rest]".
func parsePath(escaped string) (route, bool) {
	id, port, tail, ok := parseSandboxPath(escaped, "ports")
	if !ok {
		return route{}, false
	}
	rt := route{id: id, port: port, prefix: escaped[:len(escaped)-len(tail)]}
	if tail == "" {
		rt.bare = true
		return rt, true
	}
	// tail starts with "/": parseSandboxPath cut the port at the slash.
	if _, err := url.PathUnescape(tail); err != nil {
		return route{}, false
	}
	rt.rest = tail
	return rt, true
}

// parseForwardPath parses an escaped "/v1/sandboxes/{id}/port-forward/{port}".
func parseForwardPath(escaped string) (id string, port int, ok bool) {
	id, port, tail, ok := parseSandboxPath(escaped, "port-forward")
	if !ok || tail != "" {
		return "", 0, false
	}
	return id, port, true
}

// parseSandboxPath parses "/v1/sandboxes/{id}/{kind}/{port}" followed by
// tail, which is empty or starts with a slash.
func parseSandboxPath(escaped, kind string) (id string, port int, tail string, ok bool) {
	s, found := strings.CutPrefix(escaped, pathPrefix)
	if !found {
		return "", 0, "", false
	}
	idEsc, s, found := strings.Cut(s, "/")
	if !found || idEsc == "" {
		return "", 0, "", false
	}
	id, err := url.PathUnescape(idEsc)
	if err != nil || id == "" || strings.ContainsAny(id, "/?#") {
		return "", 0, "", false
	}
	s, found = strings.CutPrefix(s, kind+"/")
	if !found {
		return "", 0, "", false
	}
	portStr := s
	if i := strings.IndexByte(s, '/'); i >= 0 {
		portStr, tail = s[:i], s[i:]
	}
	port, ok = parsePort(portStr)
	if !ok {
		return "", 0, "", false
	}
	return id, port, tail, true
}

// parsePort parses a decimal TCP port 1-65535 without sign or leading zero.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' || !allDigits(s) {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		n = n*10 + int(s[i]-'0')
	}
	if n > 65535 {
		return 0, false
	}
	return n, true
}

// allDigits reports whether s is ASCII digits only (true for "").
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
