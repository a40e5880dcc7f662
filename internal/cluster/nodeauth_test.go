package cluster

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

var (
	testSecret  = []byte("0123456789abcdef0123456789abcdef-cluster")
	otherSecret = []byte("fedcba9876543210fedcba9876543210-cluster")
)

// fixedClock returns a clock standing at t.
func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

func newAuth(t *testing.T, node string, secret []byte, now time.Time) *NodeAuth {
	t.Helper()
	a, err := NewNodeAuth(node, secret, fixedClock(now))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// signedRequest is a client's request as node-a forwards it.
func signedRequest(t *testing.T, a *NodeAuth) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/sandboxes/sb-1/exec?stream=true", nil)
	r.Header.Set("Authorization", "Bearer key-alice")
	r.Header.Set(client.TenantHeader, "default")
	a.Sign(r)
	return r
}

func TestNodeSignatureVerifiesOnlyTheRequestItSigned(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	signer := newAuth(t, "node-a", testSecret, now)
	cases := []struct {
		name string
		// verifier's clock offset and secret
		skew   time.Duration
		secret []byte
		change func(r *http.Request)
		// wantNode is the verified node; "" with wantErr false: a client call
		wantNode string
		wantErr  string
	}{
		{name: "as signed", wantNode: "node-a"},
		{name: "59 s later", skew: 59 * time.Second, wantNode: "node-a"},
		{name: "59 s earlier", skew: -59 * time.Second, wantNode: "node-a"},
		{name: "61 s later is stale", skew: 61 * time.Second, wantErr: "off this node's clock"},
		{name: "61 s earlier is from the future", skew: -61 * time.Second, wantErr: "off this node's clock"},
		{name: "another secret", secret: otherSecret, wantErr: "bad signature"},
		{name: "another method", change: func(r *http.Request) { r.Method = http.MethodDelete }, wantErr: "bad signature"},
		{name: "another path", change: func(r *http.Request) { r.URL.Path = "/v1/sandboxes/sb-2/exec" }, wantErr: "bad signature"},
		{name: "another query", change: func(r *http.Request) { r.URL.RawQuery = "stream=false" }, wantErr: "bad signature"},
		{name: "no query", change: func(r *http.Request) { r.URL.RawQuery = "" }, wantErr: "bad signature"},
		{name: "another key", change: func(r *http.Request) { r.Header.Set("Authorization", "Bearer key-mallory") }, wantErr: "bad signature"},
		{name: "key moved to X-API-Key", change: func(r *http.Request) {
			r.Header.Del("Authorization")
			r.Header.Set("X-API-Key", "Bearer key-alice")
		}, wantErr: "bad signature"},
		{name: "a second key", change: func(r *http.Request) { r.Header.Add("X-API-Key", "key-admin") }, wantErr: "bad signature"},
		{name: "another tenant", change: func(r *http.Request) { r.Header.Set(client.TenantHeader, "t-bob") }, wantErr: "bad signature"},
		{name: "another node name", change: func(r *http.Request) { r.Header.Set(HeaderNode, "node-b") }, wantErr: "bad signature"},
		{name: "time changed to fit", skew: 120 * time.Second, change: func(r *http.Request) {
			r.Header.Set(HeaderNodeTime, strconv.FormatInt(now.Add(120*time.Second).Unix(), 10))
		}, wantErr: "bad signature"},
		{name: "signature flipped", change: func(r *http.Request) {
			s := []byte(r.Header.Get(HeaderNodeSignature))
			if s[0] == '0' {
				s[0] = '1'
			} else {
				s[0] = '0'
			}
			r.Header.Set(HeaderNodeSignature, string(s))
		}, wantErr: "bad signature"},
		{name: "signature upper case", change: func(r *http.Request) {
			r.Header.Set(HeaderNodeSignature, strings.ToUpper(r.Header.Get(HeaderNodeSignature)))
		}, wantNode: "node-a"}, // hex decodes either case; the bytes are what count
		{name: "signature missing", change: func(r *http.Request) { r.Header.Del(HeaderNodeSignature) }, wantErr: "must each be sent once"},
		{name: "node missing", change: func(r *http.Request) { r.Header.Del(HeaderNode) }, wantErr: "must each be sent once"},
		{name: "time twice", change: func(r *http.Request) { r.Header.Add(HeaderNodeTime, r.Header.Get(HeaderNodeTime)) }, wantErr: "must each be sent once"},
		{name: "time with a plus", change: func(r *http.Request) { r.Header.Set(HeaderNodeTime, "+"+r.Header.Get(HeaderNodeTime)) }, wantErr: "not a unix time"},
		{name: "time in milliseconds text", change: func(r *http.Request) { r.Header.Set(HeaderNodeTime, "1.8e9") }, wantErr: "not a unix time"},
		{name: "short signature", change: func(r *http.Request) { r.Header.Set(HeaderNodeSignature, "abcd") }, wantErr: "hex digits"},
		{name: "signature not hex", change: func(r *http.Request) { r.Header.Set(HeaderNodeSignature, strings.Repeat("zz", 32)) }, wantErr: "hex digits"},
		{name: "node with a space", change: func(r *http.Request) { r.Header.Set(HeaderNode, "node a") }, wantErr: "no spaces"},
		{name: "no node headers", change: func(r *http.Request) {
			r.Header.Del(HeaderNode)
			r.Header.Del(HeaderNodeTime)
			r.Header.Del(HeaderNodeSignature)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			secret := tc.secret
			if secret == nil {
				secret = testSecret
			}
			verifier := newAuth(t, "node-b", secret, now.Add(tc.skew))
			r := signedRequest(t, signer)
			if tc.change != nil {
				tc.change(r)
			}
			node, err := verifier.Verify(r)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, errs.ErrUnauthenticated) {
					t.Fatalf("Verify = %q, %v; want an unauthenticated error saying %q", node, err, tc.wantErr)
				}
				if node != "" {
					t.Fatalf("a refused call names node %q", node)
				}
				return
			}
			if err != nil || node != tc.wantNode {
				t.Fatalf("Verify = %q, %v; want %q", node, err, tc.wantNode)
			}
		})
	}
}

func TestSignReplacesNodeHeadersTheClientSent(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	a := newAuth(t, "node-a", testSecret, now)
	r := httptest.NewRequest(http.MethodGet, "/v1/sandboxes/sb-1", nil)
	r.Header.Set(HeaderNode, "forged")
	r.Header.Add(HeaderNodeSignature, "x")
	r.Header.Add(HeaderNodeSignature, "y")
	a.Sign(r)
	if node, err := newAuth(t, "node-b", testSecret, now).Verify(r); err != nil || node != "node-a" {
		t.Fatalf("Verify = %q, %v", node, err)
	}
}

func TestNodeAuthRefusesShortSecretsAndBadNames(t *testing.T) {
	if _, err := NewNodeAuth("node-a", testSecret[:MinSecretBytes-1], nil); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("short secret: %v", err)
	}
	for _, name := range []string{"", "a b", "a\nb", strings.Repeat("n", 254)} {
		if _, err := NewNodeAuth(name, testSecret, nil); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("node name %q: %v", name, err)
		}
	}
}

func TestLoadSecretTrimsNewlineAndRefusesShortOrOpenFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := strings.Repeat("ab", 32)
	s, err := LoadSecret(write("good", good+"\n", 0o600))
	if err != nil || string(s) != good {
		t.Fatalf("LoadSecret = %q, %v", s, err)
	}
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want          string
	}{
		{"short", strings.Repeat("a", 31) + "\n", 0o600, "fewer than 32"},
		{"blank", "   \n", 0o400, "fewer than 32"},
		{"group-readable", good, 0o640, "chmod 600"},
		{"world-readable", good, 0o604, "chmod 600"},
	} {
		_, err := LoadSecret(write(tc.name, tc.content, tc.mode))
		if !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an invalid error saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := LoadSecret(filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent: %v", err)
	}
	if _, err := LoadSecret(dir); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("a directory: %v", err)
	}
}

func TestRequireNodeServesOnlySignedCalls(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	a := newAuth(t, "node-b", testSecret, now)
	var served []string
	h := a.RequireNode(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := CallingNode(r.Context())
		served = append(served, n)
	}))
	// A client's call, with a valid API key but no signature.
	r := httptest.NewRequest(http.MethodPost, "/internal/adopt", nil)
	r.Header.Set("Authorization", "Bearer key-admin")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	wantProblem(t, w.Result(), http.StatusUnauthorized, "node-to-node route")
	// A call signed with another secret.
	r = httptest.NewRequest(http.MethodPost, "/internal/adopt", nil)
	newAuth(t, "node-a", otherSecret, now).Sign(r)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	wantProblem(t, w.Result(), http.StatusUnauthorized, "bad signature")
	if len(served) != 0 {
		t.Fatalf("served %v", served)
	}
	r = httptest.NewRequest(http.MethodPost, "/internal/adopt", nil)
	newAuth(t, "node-a", testSecret, now).Sign(r)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK || len(served) != 1 || served[0] != "node-a" {
		t.Fatalf("signed call: status %d, served %v", w.Code, served)
	}
}

// wantProblem checks that res is a problem document of status whose detail
// says want.
func wantProblem(t *testing.T, res *http.Response, status int, want string) {
	t.Helper()
	defer res.Body.Close()
	var p problemDoc
	if err := json.NewDecoder(res.Body).Decode(&p); err != nil {
		t.Fatalf("status %d, body not a problem document: %v", res.StatusCode, err)
	}
	if res.StatusCode != status || p.Status != status || res.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(p.Detail, want) {
		t.Fatalf("answer %d %s %+v; want a %d problem saying %q", res.StatusCode, res.Header.Get("Content-Type"), p, status, want)
	}
}

// FuzzParseNodeHeaders feeds arbitrary header values to the parser and to
// Verify: nothing panics, a parse either fails with ErrUnauthenticated or
// yields a canonical time, a valid node name and a 32-byte signature, and
// no made-up signature verifies.
func FuzzParseNodeHeaders(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	signer, _ := NewNodeAuth("node-a", testSecret, fixedClock(now))
	r := httptest.NewRequest(http.MethodGet, "/v1/sandboxes/sb-1", nil)
	signer.Sign(r)
	f.Add(r.Header.Get(HeaderNode), r.Header.Get(HeaderNodeTime), r.Header.Get(HeaderNodeSignature), true)
	f.Add("node-a", "1800000000", strings.Repeat("0", 64), true)
	f.Add("", "", "", false)
	f.Add("n\x00", "-1", "zz", true)
	f.Add("node-a", "99999999999999999999", strings.Repeat("f", 64), true)
	verifier, _ := NewNodeAuth("node-b", testSecret, fixedClock(now))
	f.Fuzz(func(t *testing.T, node, ts, sig string, twice bool) {
		h := http.Header{}
		h[HeaderNode] = []string{node}
		h[HeaderNodeTime] = []string{ts}
		h[HeaderNodeSignature] = []string{sig}
		if twice {
			h[HeaderNodeSignature] = append(h[HeaderNodeSignature], sig)
		}
		p, present, err := parseNodeHeaders(h)
		if !present {
			t.Fatal("headers present but not seen")
		}
		if err != nil {
			if !errors.Is(err, errs.ErrUnauthenticated) {
				t.Fatalf("parse error %v is not unauthenticated", err)
			}
			return
		}
		if twice {
			t.Fatal("a repeated header parsed")
		}
		if checkNodeName(p.node) != nil || strconv.FormatInt(p.ts, 10) != p.tsText || len(p.sig) != 32 {
			t.Fatalf("parsed %+v from %q %q %q", p, node, ts, sig)
		}
		req := httptest.NewRequest(http.MethodGet, "/v1/sandboxes/sb-1", nil)
		req.Header = h
		got, err := verifier.Verify(req)
		want := signer.mac(http.MethodGet, "/v1/sandboxes/sb-1", node, ts, h)
		if err == nil && (got != node || !strings.EqualFold(sig, hex.EncodeToString(want))) {
			t.Fatalf("Verify accepted %q %q %q", node, ts, sig)
		}
	})
}
