package policy

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

func mustParse(t *testing.T, p client.NetworkPolicy) Policy {
	t.Helper()
	out, err := Parse(p)
	if err != nil {
		t.Fatalf("Parse(%+v): %v", p, err)
	}
	return out
}

func off() *bool { b := false; return &b }

func TestDecisionOrder(t *testing.T) {
	a := netip.MustParseAddr
	cases := []struct {
		name   string
		pol    client.NetworkPolicy
		addr   string
		host   string
		wantA  Verdict
		wantN  Verdict
		wantRv bool
	}{
		{"default admits", client.NetworkPolicy{}, "198.18.1.10", "example.test", Admit, Admit, true},
		{"metadata always refused", client.NetworkPolicy{Allow: []string{"169.254.0.0/16"}}, "169.254.169.254", "x.test", Refuse, Refuse, true},
		{"loopback always refused", client.NetworkPolicy{}, "127.0.0.1", "example.test", Refuse, Admit, true},
		{"internet off refuses all", client.NetworkPolicy{Internet: off(), Allow: []string{"example.test", "198.18.0.0/15"}}, "198.18.1.10", "example.test", Refuse, Refuse, false},
		{"deny cidr", client.NetworkPolicy{Deny: []string{"198.18.1.0/24"}}, "198.18.1.10", "example.test", Refuse, Admit, true},
		{"deny wins over allow", client.NetworkPolicy{Allow: []string{"198.18.0.0/15", "*.example.test"}, Deny: []string{"198.18.1.10", "bad.example.test"}}, "198.18.1.10", "bad.example.test", Refuse, Refuse, false},
		{"allow domain: address by name", client.NetworkPolicy{Allow: []string{"example.test"}}, "198.18.1.10", "example.test", ByName, Admit, true},
		{"allow domain: other name refused", client.NetworkPolicy{Allow: []string{"example.test"}}, "198.18.1.10", "other.test", ByName, Refuse, false},
		{"wildcard excludes apex", client.NetworkPolicy{Allow: []string{"*.example.test"}}, "198.18.1.10", "example.test", ByName, Refuse, false},
		{"wildcard matches below", client.NetworkPolicy{Allow: []string{"*.example.test"}}, "198.18.1.10", "A.b.Example.Test.", ByName, Admit, true},
		{"allow cidr only", client.NetworkPolicy{Allow: []string{"198.18.1.0/24"}}, "198.18.1.10", "example.test", Admit, Refuse, true},
		{"allow cidr only: outside", client.NetworkPolicy{Allow: []string{"198.18.1.0/24"}}, "198.18.2.10", "example.test", Refuse, Refuse, true},
		{"ipv4-mapped is unmapped", client.NetworkPolicy{Deny: []string{"198.18.1.10"}}, "::ffff:198.18.1.10", "", Refuse, Admit, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := mustParse(t, c.pol)
			if got := p.Addr(a(c.addr)); got != c.wantA {
				t.Errorf("Addr(%s) = %v, want %v", c.addr, got, c.wantA)
			}
			if c.host != "" {
				if got := p.Name(c.host); got != c.wantN {
					t.Errorf("Name(%s) = %v, want %v", c.host, got, c.wantN)
				}
				if got := p.Resolves(c.host); got != c.wantRv {
					t.Errorf("Resolves(%s) = %v, want %v", c.host, got, c.wantRv)
				}
			}
		})
	}
}

func TestConnectChecksTheNameOnASharedAddress(t *testing.T) {
	p := mustParse(t, client.NetworkPolicy{Allow: []string{"example.test"}})
	dst := netip.MustParseAddr("198.18.1.10")
	if v := p.Connect(dst, "example.test", true); v != Admit {
		t.Errorf("allowed name on its resolved address: %v", v)
	}
	if v := p.Connect(dst, "other.test", true); v != Refuse {
		t.Errorf("other name on the same address: %v", v)
	}
	if v := p.Connect(dst, "example.test", false); v != Refuse {
		t.Errorf("allowed name on an address it did not resolve to: %v", v)
	}
	if v := p.Connect(dst, "", true); v != Refuse {
		t.Errorf("no name: %v", v)
	}
	deny := mustParse(t, client.NetworkPolicy{Deny: []string{"*.evil.test"}})
	if v := deny.Connect(dst, "www.evil.test", false); v != Refuse {
		t.Errorf("denied name on an admitted address: %v", v)
	}
	if v := deny.Connect(dst, "fine.test", false); v != Admit {
		t.Errorf("other name under a deny-list: %v", v)
	}
}

func TestParseRefusesBadEntries(t *testing.T) {
	for _, e := range []string{"", " ", "localhost", "*", "*.", "a..b", "-a.com", "a-.com", "a b.com", "10.0.0.0/33", "fe80::1%eth0", "x/y", "*.*.com", "ex ample.com", string(make([]byte, 300))} {
		_, err := Parse(client.NetworkPolicy{Allow: []string{e}})
		if !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("Parse(allow %q) = %v, want ErrInvalid", e, err)
		}
	}
	many := make([]string, MaxEntries+1)
	for i := range many {
		many[i] = "10.0.0.1"
	}
	if _, err := Parse(client.NetworkPolicy{Deny: many}); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("too many entries: %v", err)
	}
}

func TestAPIRoundTrip(t *testing.T) {
	in := client.NetworkPolicy{Internet: off(), Allow: []string{"10.1.2.3", "10.0.0.0/8", "*.Example.COM"}, Deny: []string{"b.example.com", "10.9.0.0/16"}}
	p := mustParse(t, in)
	q := mustParse(t, p.API())
	if len(q.AllowCIDRs) != 2 || len(q.AllowDomains) != 1 || q.AllowDomains[0].String() != "*.example.com" || q.Internet {
		t.Fatalf("round trip: %+v", q.API())
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"example.com", "*.github.com", "10.0.0.0/8", "::1", "fe80::1%x", "a..b", "*.*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, e string) {
		p, err := Parse(client.NetworkPolicy{Allow: []string{e}, Deny: []string{e}})
		if err != nil {
			if !errors.Is(err, errs.ErrInvalid) {
				t.Fatalf("Parse(%q): error without ErrInvalid: %v", e, err)
			}
			return
		}
		// What parsed must parse again to the same thing.
		q, err := Parse(p.API())
		if err != nil {
			t.Fatalf("reparse of %q: %v", e, err)
		}
		if len(q.AllowCIDRs) != len(p.AllowCIDRs) || len(q.AllowDomains) != len(p.AllowDomains) {
			t.Fatalf("reparse of %q differs", e)
		}
		// Deny wins over allow for the same entry.
		for _, d := range p.AllowDomains {
			name := d.Name
			if d.Wildcard {
				name = "x." + name
			}
			if p.Name(name) != Refuse {
				t.Fatalf("%q: a name both allowed and denied was admitted", e)
			}
		}
	})
}
