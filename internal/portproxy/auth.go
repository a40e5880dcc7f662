package portproxy

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/stead-dev/stead/internal/api"
)

// The credentials the proxy accepts besides an API key; all of them are
// removed before a request is forwarded.
const (
	// TokenHeader carries a private port's access token.
	TokenHeader = "X-Stead-Port-Token"
	// TokenQuery carries a private port's access token once, in a link
	// opened in a browser: the proxy answers with a redirect that sets
	// the TokenCookie.
	TokenQuery = "stead_token"
	// TokenCookie carries a private port's access token in a browser.
	TokenCookie = "stead_port_token"
)

// apiKey returns the API key of r, read as the API reads it.
func apiKey(r *http.Request) string { return api.KeyFromRequest(r) }

// cutQueryParam removes every name=value pair from the raw query q,
// leaving the other pairs exactly as they were, and returns the last
// value it removed.
func cutQueryParam(q, name string) (rest, value string, found bool) {
	if q == "" {
		return q, "", false
	}
	var kept []string
	for _, pair := range strings.Split(q, "&") {
		k, v, _ := strings.Cut(pair, "=")
		if uk, err := url.QueryUnescape(k); err == nil && uk == name {
			found = true
			value, _ = url.QueryUnescape(v)
			continue
		}
		kept = append(kept, pair)
	}
	if !found {
		return q, "", false
	}
	return strings.Join(kept, "&"), value, true
}

// tokenCookies returns the values of every TokenCookie of r.
func tokenCookies(r *http.Request) []string {
	var out []string
	for _, c := range r.CookiesNamed(TokenCookie) {
		out = append(out, c.Value)
	}
	return out
}

// stripCredentials removes from an outbound request everything that
// authenticated it to the proxy: Authorization, X-API-Key, the token
// header, the token query parameter and the token cookie (other cookies
// stay).
func stripCredentials(r *http.Request) {
	r.Header.Del("Authorization")
	r.Header.Del("X-Api-Key")
	r.Header.Del(TokenHeader)
	if rest, _, found := cutQueryParam(r.URL.RawQuery, TokenQuery); found {
		r.URL.RawQuery = rest
	}
	r.URL.ForceQuery = false
	if cookies, ok := r.Header["Cookie"]; ok {
		var kept []string
		for _, line := range cookies {
			var parts []string
			for _, part := range strings.Split(line, ";") {
				name, _, _ := strings.Cut(strings.TrimSpace(part), "=")
				if name == TokenCookie || strings.TrimSpace(part) == "" {
					continue
				}
				parts = append(parts, strings.TrimSpace(part))
			}
			if len(parts) > 0 {
				kept = append(kept, strings.Join(parts, "; "))
			}
		}
		if len(kept) == 0 {
			r.Header.Del("Cookie")
		} else {
			r.Header["Cookie"] = kept
		}
	}
}

// safeLocation makes an escaped path usable as a same-host Location: a
// path starting with "//" would name another host.
func safeLocation(path, rawQuery string) string {
	if strings.HasPrefix(path, "//") || strings.HasPrefix(path, `/\`) {
		path = "/." + path
	}
	if path == "" {
		path = "/"
	}
	if rawQuery != "" {
		path += "?" + rawQuery
	}
	return path
}
