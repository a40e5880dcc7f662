package e2b

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestKeyEncodingRoundTripsAndLeavesOtherKeysAlone(t *testing.T) {
	const secret = "stead_ge6akqfqkdosjiiyiim6am4s4irk4g7ouwf73hq"
	k := EncodeKey(secret)
	if !strings.HasPrefix(k, "e2b_") || strings.Trim(k[4:], "0123456789abcdef") != "" {
		t.Fatalf("%q is not e2b_<hex>", k)
	}
	if got := decodeKey(k); got != secret {
		t.Fatalf("decode %q = %q", k, got)
	}
	for _, other := range []string{secret, "e2b_zz", "e2b_"} {
		if got := decodeKey(other); got != other && other != "e2b_" {
			t.Errorf("decode %q = %q, want it unchanged", other, got)
		}
	}
}

func TestAccessTokenOpensOnlyItsSandboxOfItsTenant(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	tok := accessToken(key, "acme", "sb-1")
	if tenant, ok := checkToken(key, "sb-1", tok); !ok || tenant != "acme" {
		t.Fatalf("own token: %q %v", tenant, ok)
	}
	for name, c := range map[string]struct{ key, id, tok string }{
		"other sandbox":   {string(key), "sb-2", tok},
		"other daemon":    {"another key", "sb-1", tok},
		"tenant swapped":  {string(key), "sb-1", accessToken(key, "evil", "sb-1")[:5] + tok[strings.Index(tok, "."):]},
		"no mac":          {string(key), "sb-1", strings.Split(tok, ".")[0]},
		"empty":           {string(key), "sb-1", ""},
		"no key (off)":    {"", "sb-1", tok},
		"bad tenant code": {string(key), "sb-1", "!!!." + strings.Split(tok, ".")[1]},
	} {
		if _, ok := checkToken([]byte(c.key), c.id, c.tok); ok {
			t.Errorf("%s: token accepted", name)
		}
	}
}

func TestDataPlaneRequestsAreRecognisedByHeaderOrHost(t *testing.T) {
	h := New(Options{Backend: nil, Key: []byte("k"), Domain: "sandbox.example"})
	for _, c := range []struct {
		host, header, want string
	}{
		{"127.0.0.1:7878", "sb-abc", "sb-abc"},
		{"49983-sb-abc.sandbox.example", "", "sb-abc"},
		{"49983-sb-abc.sandbox.example:443", "", "sb-abc"},
		{"8080-sb-abc.sandbox.example", "", ""},
		{"49983-sb-abc.other.example", "", ""},
		{"sandbox.example", "", ""},
		{"127.0.0.1:7878", "", ""},
	} {
		r := httptest.NewRequest("GET", "http://"+c.host+"/files", nil)
		r.Host = c.host
		if c.header != "" {
			r.Header.Set("E2b-Sandbox-Id", c.header)
		}
		if got := h.envdSandbox(r); got != c.want {
			t.Errorf("host %q header %q: %q, want %q", c.host, c.header, got, c.want)
		}
	}
}

func TestControlPaths(t *testing.T) {
	for p, want := range map[string]bool{"/sandboxes": true, "/sandboxes/sb-1/pause": true, "/v2/sandboxes": true,
		"/snapshots": true, "/v1/sandboxes": false, "/sandboxesx": false, "/healthz": false, "/files": false} {
		if isControlPath(p) != want {
			t.Errorf("%s: %v, want %v", p, !want, want)
		}
	}
}

func TestListQueryReadsTheSDKsDoubleEncodedMetadata(t *testing.T) {
	// The JS SDK encodes each key and value, then the pairs as a query
	// string, then the whole as one query parameter.
	inner := url.Values{url.QueryEscape("run id"): {url.QueryEscape("a&b=c")}, "suite": {"e2b"}}.Encode()
	q := url.Values{"metadata": {inner}, "state": {"running,paused"}}
	lq, err := parseListQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	if lq.metadata["run id"] != "a&b=c" || lq.metadata["suite"] != "e2b" || !lq.states["running"] || !lq.states["paused"] {
		t.Fatalf("parsed %+v", lq)
	}
	if _, err := parseListQuery(url.Values{"state": {"dead"}}); err == nil {
		t.Fatal("state dead accepted")
	}
}

func TestPathsMapE2BsHomeOntoTheAgents(t *testing.T) {
	for _, c := range []struct{ in, user, e2b, stead string }{
		{"a.txt", "", "/home/user/a.txt", "/home/agent/a.txt"},
		{"a.txt", "root", "/root/a.txt", "/root/a.txt"},
		{"/home/user", "", "/home/user", "/home/agent"},
		{"/home/username/x", "", "/home/username/x", "/home/username/x"},
		{"/tmp/../etc/x", "", "/etc/x", "/etc/x"},
		{"../../etc", "", "/etc", "/etc"},
	} {
		p := e2bPath(c.in, c.user)
		if p != c.e2b || steadPath(p) != c.stead {
			t.Errorf("%q as %q: %q %q, want %q %q", c.in, c.user, p, steadPath(p), c.e2b, c.stead)
		}
	}
	for u, want := range map[string]string{"": "agent", "user": "agent", "root": "root", "1001": "1001", "1001:1001": "1001:1001"} {
		if got, err := steadUser(u); err != nil || got != want {
			t.Errorf("user %q: %q %v, want %q", u, got, err, want)
		}
	}
	if _, err := steadUser("bob"); err == nil {
		t.Error("user bob accepted")
	}
}

func TestRawFilenameKeepsTheWholePath(t *testing.T) {
	if got := rawFilename(`form-data; name="file"; filename="/home/user/m/one.txt"`); got != "/home/user/m/one.txt" {
		t.Fatalf("filename %q", got)
	}
	if got := rawFilename(`form-data; name="file"`); got != "" {
		t.Fatalf("no filename: %q", got)
	}
}

// FuzzCheckToken: no token makes the check panic, and none but the
// derived one opens the sandbox.
func FuzzCheckToken(f *testing.F) {
	key := []byte("fuzz-key")
	f.Add(accessToken(key, "default", "sb-1"))
	f.Add("")
	f.Add(".")
	f.Add("ZGVmYXVsdA.00")
	f.Fuzz(func(t *testing.T, tok string) {
		tenant, ok := checkToken(key, "sb-1", tok)
		if ok && tok != accessToken(key, tenant, "sb-1") {
			t.Fatalf("token %q accepted for tenant %q", tok, tenant)
		}
	})
}

// FuzzParseListQuery: no query makes the list filter panic.
func FuzzParseListQuery(f *testing.F) {
	f.Add("metadata=suite%3De2b&state=running,paused&limit=2")
	f.Add("metadata=%25zz&state=")
	f.Add("nextToken=bzox")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		lq, err := parseListQuery(q)
		if err == nil {
			for s := range lq.states {
				if s != "running" && s != "paused" {
					t.Fatalf("state %q accepted", s)
				}
			}
		}
	})
}
