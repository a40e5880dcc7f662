package portproxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestParseHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		port int
		id   string
		ok   bool
	}{
		{"8080-sb-1a2b3c4d.stead.localhost", 8080, "sb-1a2b3c4d", true},
		{"8080-sb-1a2b3c4d.stead.localhost:443", 8080, "sb-1a2b3c4d", true},
		{"8080-SB-1A2B3C4D.Stead.LOCALHOST.", 8080, "sb-1a2b3c4d", true},
		{"1-x.stead.localhost", 1, "x", true},
		{"65535-my-agent.stead.localhost", 65535, "my-agent", true},
		{"65536-sb-1.stead.localhost", 0, "", false},
		{"0-sb-1.stead.localhost", 0, "", false},
		{"080-sb-1.stead.localhost", 0, "", false},
		{"+80-sb-1.stead.localhost", 0, "", false},
		{"80.stead.localhost", 0, "", false},
		{"80-.stead.localhost", 0, "", false},
		{"stead.localhost", 0, "", false},
		{"a.80-sb-1.stead.localhost", 0, "", false},
		{"80-sb-1.stead.localhost.evil", 0, "", false},
		{"80-sb-1.xstead.localhost", 0, "", false},
		{"80-sb-1.stead.localhost:x", 0, "", false},
		{"[::1]:80", 0, "", false},
		{"", 0, "", false},
	} {
		port, id, ok := parseHost(tc.host, testDomain)
		if port != tc.port || id != tc.id || ok != tc.ok {
			t.Errorf("parseHost(%q) = %d, %q, %v; want %d, %q, %v", tc.host, port, id, ok, tc.port, tc.id, tc.ok)
		}
	}
	if _, _, ok := parseHost("80-sb-1.stead.localhost", ""); ok {
		t.Error("parseHost routed without a domain")
	}
}

func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"8080-sb-1a2b3c4d.stead.localhost", "8080-sb-1.stead.localhost:1", "x.stead.localhost", "1-a.b.stead.localhost", "[::1]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		port, id, ok := parseHost(host, testDomain)
		if !ok {
			return
		}
		if port < 1 || port > 65535 || id == "" || strings.ContainsAny(id, ".:/") || id != strings.ToLower(id) {
			t.Fatalf("parseHost(%q) = %d, %q", host, port, id)
		}
		// The canonical form parses to the same.
		p2, id2, ok2 := parseHost(fmt.Sprintf("%d-%s.%s", port, id, testDomain), testDomain)
		if !ok2 || p2 != port || id2 != id {
			t.Fatalf("canonical form of %q parses to %d, %q, %v", host, p2, id2, ok2)
		}
	})
}

func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"/v1/sandboxes/sb-1/ports/80/a/b", "/v1/sandboxes/sb-1/ports/80", "/v1/sandboxes/a%2Fb/ports/1/", "/v1/sandboxes//ports/1/", "/v1/sandboxes/x/port-forward/22"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		rt, ok := parsePath(path)
		if ok {
			if rt.port < 1 || rt.port > 65535 || rt.id == "" || strings.Contains(rt.id, "/") {
				t.Fatalf("parsePath(%q) = %+v", path, rt)
			}
			if rt.bare != (rt.rest == "") || rt.prefix+rt.rest != path || !strings.HasPrefix(rt.prefix, pathPrefix) {
				t.Fatalf("parsePath(%q) = %+v: prefix and rest do not make the path", path, rt)
			}
			if !rt.bare && rt.rest[0] != '/' {
				t.Fatalf("parsePath(%q): rest %q does not start with /", path, rt.rest)
			}
		}
		if id, port, ok := parseForwardPath(path); ok && (id == "" || port < 1 || port > 65535) {
			t.Fatalf("parseForwardPath(%q) = %q, %d", path, id, port)
		}
	})
}

func FuzzStripCredentials(f *testing.F) {
	f.Add("a=1&stead_token=x&b=2", "a=1; stead_port_token=x; b=2")
	f.Add("stead%5Ftoken=x", "stead_port_token=")
	f.Add("", ";;")
	f.Fuzz(func(t *testing.T, rawQuery, cookie string) {
		r := &http.Request{URL: &url.URL{Path: "/", RawQuery: rawQuery}, Header: http.Header{
			"Cookie": {cookie}, "Authorization": {"Bearer k"}, "X-Api-Key": {"k"}, TokenHeader: {"t"},
		}}
		stripCredentials(r)
		if _, _, found := cutQueryParam(r.URL.RawQuery, TokenQuery); found {
			t.Fatalf("query %q keeps %s after stripping %q", r.URL.RawQuery, TokenQuery, rawQuery)
		}
		if len(r.CookiesNamed(TokenCookie)) > 0 {
			t.Fatalf("cookie %q keeps %s", r.Header["Cookie"], TokenCookie)
		}
		for _, h := range []string{"Authorization", "X-Api-Key", TokenHeader} {
			if r.Header.Get(h) != "" {
				t.Fatalf("%s kept", h)
			}
		}
		if loc := safeLocation(rawQuery, ""); strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, `/\`) {
			t.Fatalf("safeLocation(%q) = %q names another host", rawQuery, loc)
		}
	})
}
