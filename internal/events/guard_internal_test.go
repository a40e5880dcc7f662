package events

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/store"
)

// TestDeliveryClientChecksTheAddressAtConnect: whatever URL got past
// ValidateURL (a name that resolves to loopback, a rebinding DNS answer),
// the connect itself is refused; and redirects are not followed.
func TestDeliveryClientChecksTheAddressAtConnect(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://169.254.169.254/", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	_, err := newDeliveryClient(false, time.Second).Get(srv.URL)
	if err == nil || !strings.Contains(err.Error(), "refused: a loopback address") || hits != 0 {
		t.Fatalf("loopback connect without the flag = %v (hits %d)", err, hits)
	}
	c := newDeliveryClient(true, time.Second)
	resp, err := c.Get(srv.URL + "/redirect")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || hits != 1 {
		t.Fatalf("redirect: status %d, hits %d; want the 302 itself, not followed", resp.StatusCode, hits)
	}
}

func TestValidateURLStripsTheRootDot(t *testing.T) {
	if err := ValidateURL("http://localhost.:80/x", false); err == nil {
		t.Fatal("localhost. accepted")
	}
}

func TestSealedWebhookSecretOpensOnlyForItsWebhookAndKey(t *testing.T) {
	h := New(nil, Options{SecretKey: []byte("0123456789abcdef0123456789abcdef")})
	sealed, err := h.sealSecret("wh-1", "whsec_x")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := h.secretOf(store.Webhook{ID: "wh-1", Secret: sealed}); err != nil || got != "whsec_x" {
		t.Fatalf("open = %q, %v", got, err)
	}
	if _, err := h.secretOf(store.Webhook{ID: "wh-2", Secret: sealed}); err == nil {
		t.Fatal("a sealed secret opened for another webhook")
	}
	other := New(nil, Options{SecretKey: []byte("fedcba9876543210fedcba9876543210")})
	if _, err := other.secretOf(store.Webhook{ID: "wh-1", Secret: sealed}); err == nil {
		t.Fatal("a sealed secret opened with another key")
	}
	if got, err := New(nil, Options{}).secretOf(store.Webhook{ID: "wh-1", Secret: "plain"}); err != nil || got != "plain" {
		t.Fatalf("a plain secret = %q, %v", got, err)
	}
}

// FuzzValidateURL: tenant input never panics the check, and a URL it
// accepts never names a refused literal address.
func FuzzValidateURL(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1/", "https://hooks.example.com/x?y=1", "http://[::ffff:169.254.169.254]/",
		"http://0x7f.1/", "http://[fe80::1%25eth0]:80/", "http://localhost./", "//x", "http://a@b/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if ValidateURL(raw, false) != nil {
			return
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("accepted %q that does not parse: %v", raw, err)
		}
		if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
			if why := checkAddr(ip, false); why != "" {
				t.Fatalf("accepted %q: %s is %s", raw, ip, why)
			}
		}
	})
}
