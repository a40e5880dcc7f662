// Package policy holds a sandbox's egress policy in its parsed form and
// decides, for an address or a name, whether the sandbox may reach it. The
// firewall (package network), the resolver and the egress proxy all decide
// through it, so the three never disagree.
//
// The order of a decision is client.NetworkPolicy's: always-denied ranges,
// then internet off, then Deny, then (with Allow empty) admit, then Allow,
// else refuse.
package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// MaxEntries bounds the entries of Allow and Deny together.
const MaxEntries = 256

// Policy is a parsed client.NetworkPolicy. The zero value refuses
// everything; Default() admits the internet.
type Policy struct {
	Internet     bool
	AllowCIDRs   []netip.Prefix
	DenyCIDRs    []netip.Prefix
	AllowDomains []Pattern
	DenyDomains  []Pattern
}

// Pattern is a lower-case domain name, or "*." and a name for every name
// strictly below it.
type Pattern struct {
	Name     string // without the "*." and without a trailing dot
	Wildcard bool
}

// String is the pattern as written.
func (p Pattern) String() string {
	if p.Wildcard {
		return "*." + p.Name
	}
	return p.Name
}

// Match reports whether name (any case, trailing dot or not) matches.
func (p Pattern) Match(name string) bool {
	name = Canonical(name)
	if p.Wildcard {
		return strings.HasSuffix(name, "."+p.Name)
	}
	return name == p.Name
}

// Canonical is name in lower case without a trailing dot.
func Canonical(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// Verdict is a decision.
type Verdict int

// Verdicts.
const (
	// Refuse: the sandbox may not reach it.
	Refuse Verdict = iota
	// Admit: the sandbox may reach it.
	Admit
	// ByName: an address neither admitted nor refused by the policy
	// itself; it is admitted only as an address an admitted name resolved
	// to for the sandbox (the policy has domain entries in Allow).
	ByName
)

func (v Verdict) String() string {
	switch v {
	case Admit:
		return "admit"
	case ByName:
		return "by-name"
	}
	return "refuse"
}

// AlwaysDenied are the ranges no policy opens: loopback, link-local (and
// the cloud metadata address in it), the "this network" and multicast
// ranges, carrier-grade NAT (where some clouds put metadata services), and
// IPv6's equivalents. The host's own addresses, the bridge's subnet and
// other sandboxes are refused by the firewall on top of these.
var AlwaysDenied = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("fd00:ec2::/32"),
}

// Default is the policy of a sandbox created without one: the internet
// on, nothing else refused.
func Default() Policy { return Policy{Internet: true} }

// Parse checks and parses an API policy. Bad input gets an error wrapping
// errs.ErrInvalid that names the entry.
func Parse(p client.NetworkPolicy) (Policy, error) {
	out := Policy{Internet: p.InternetOn()}
	if n := len(p.Allow) + len(p.Deny); n > MaxEntries {
		return Policy{}, fmt.Errorf("network policy has %d entries, at most %d: %w", n, MaxEntries, errs.ErrInvalid)
	}
	for _, e := range p.Allow {
		c, d, err := parseEntry(e)
		if err != nil {
			return Policy{}, fmt.Errorf("allow %q: %w", e, err)
		}
		if c.IsValid() {
			out.AllowCIDRs = append(out.AllowCIDRs, c)
		} else {
			out.AllowDomains = append(out.AllowDomains, d)
		}
	}
	for _, e := range p.Deny {
		c, d, err := parseEntry(e)
		if err != nil {
			return Policy{}, fmt.Errorf("deny %q: %w", e, err)
		}
		if c.IsValid() {
			out.DenyCIDRs = append(out.DenyCIDRs, c)
		} else {
			out.DenyDomains = append(out.DenyDomains, d)
		}
	}
	return out, nil
}

// parseEntry parses an address, a CIDR or a domain pattern.
func parseEntry(e string) (netip.Prefix, Pattern, error) {
	e = strings.TrimSpace(e)
	if e == "" {
		return netip.Prefix{}, Pattern{}, fmt.Errorf("empty entry: %w", errs.ErrInvalid)
	}
	if strings.Contains(e, "/") {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return netip.Prefix{}, Pattern{}, fmt.Errorf("not a CIDR (want e.g. 10.0.0.0/8): %w", errs.ErrInvalid)
		}
		return p.Masked(), Pattern{}, nil
	}
	if a, err := netip.ParseAddr(e); err == nil {
		if a.Zone() != "" {
			return netip.Prefix{}, Pattern{}, fmt.Errorf("an address with a zone: %w", errs.ErrInvalid)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), Pattern{}, nil
	}
	d := Pattern{Name: Canonical(e)}
	if rest, ok := strings.CutPrefix(d.Name, "*."); ok {
		d = Pattern{Name: rest, Wildcard: true}
	}
	if err := checkDomain(d.Name); err != nil {
		return netip.Prefix{}, Pattern{}, err
	}
	return netip.Prefix{}, d, nil
}

// checkDomain accepts a DNS name of letters, digits, hyphens and
// underscores in labels of 1–63 bytes, 253 bytes at most, at least two
// labels.
func checkDomain(name string) error {
	if len(name) > 253 {
		return fmt.Errorf("a domain longer than 253 bytes: %w", errs.ErrInvalid)
	}
	labels := strings.Split(name, ".")
	if len(labels) < 2 {
		return fmt.Errorf("not an address, CIDR or domain (a domain has a dot; *.example.com matches the names below example.com): %w", errs.ErrInvalid)
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return fmt.Errorf("a domain's last label is not a number (an address is written without a trailing dot): %w", errs.ErrInvalid)
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return fmt.Errorf("a domain label is empty or longer than 63 bytes: %w", errs.ErrInvalid)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' && i > 0 && i < len(l)-1
			if !ok {
				return fmt.Errorf("a domain may hold letters, digits, - and _ (only * as the first label): %w", errs.ErrInvalid)
			}
		}
	}
	return nil
}

// API returns the policy in the API's form (entries in their canonical
// spelling).
func (p Policy) API() client.NetworkPolicy {
	on := p.Internet
	out := client.NetworkPolicy{Internet: &on}
	for _, c := range p.AllowCIDRs {
		out.Allow = append(out.Allow, prefixString(c))
	}
	for _, d := range p.AllowDomains {
		out.Allow = append(out.Allow, d.String())
	}
	for _, c := range p.DenyCIDRs {
		out.Deny = append(out.Deny, prefixString(c))
	}
	for _, d := range p.DenyDomains {
		out.Deny = append(out.Deny, d.String())
	}
	return out
}

func prefixString(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// HasDomains reports whether the policy names any domain: then the
// resolver's answers and Host/SNI matter to what is admitted.
func (p Policy) HasDomains() bool { return len(p.AllowDomains)+len(p.DenyDomains) > 0 }

// DefaultAdmit reports whether an address no entry names is admitted.
func (p Policy) DefaultAdmit() bool {
	return p.Internet && len(p.AllowCIDRs)+len(p.AllowDomains) == 0
}

// IsAlwaysDenied reports whether a falls in AlwaysDenied.
func IsAlwaysDenied(a netip.Addr) bool {
	a = a.Unmap()
	return slices.ContainsFunc(AlwaysDenied, func(p netip.Prefix) bool { return p.Contains(a) })
}

// Addr decides an address by the policy alone (the firewall adds the
// host's addresses and the bridge). ByName means: admitted only if an
// admitted name resolved to it for this sandbox.
func (p Policy) Addr(a netip.Addr) Verdict {
	a = a.Unmap()
	if !a.IsValid() || IsAlwaysDenied(a) || !p.Internet {
		return Refuse
	}
	if slices.ContainsFunc(p.DenyCIDRs, func(c netip.Prefix) bool { return c.Contains(a) }) {
		return Refuse
	}
	if p.DefaultAdmit() {
		return Admit
	}
	if slices.ContainsFunc(p.AllowCIDRs, func(c netip.Prefix) bool { return c.Contains(a) }) {
		return Admit
	}
	if len(p.AllowDomains) > 0 {
		return ByName
	}
	return Refuse
}

// Name decides a name: whether the resolver answers it, and whether a
// Host or SNI may carry it.
func (p Policy) Name(name string) Verdict {
	if !p.Internet {
		return Refuse
	}
	name = Canonical(name)
	if slices.ContainsFunc(p.DenyDomains, func(d Pattern) bool { return d.Match(name) }) {
		return Refuse
	}
	if p.DefaultAdmit() {
		return Admit
	}
	if slices.ContainsFunc(p.AllowDomains, func(d Pattern) bool { return d.Match(name) }) {
		return Admit
	}
	return Refuse
}

// Resolves reports whether the resolver should answer queries for name:
// its verdict is Admit, or the policy admits addresses by CIDR (a name
// may lead to an allowed address even when it is not on an allow-list),
// unless a Deny pattern names it.
func (p Policy) Resolves(name string) bool {
	if p.Name(name) == Admit {
		return true
	}
	if !p.Internet || slices.ContainsFunc(p.DenyDomains, func(d Pattern) bool { return d.Match(name) }) {
		return false
	}
	return len(p.AllowCIDRs) > 0
}

// Connect decides a connection to dst on port 80 or 443 that carries name
// (the HTTP Host or the TLS SNI; "" when it carries none). resolved says
// whether an admitted name resolved to dst for this sandbox. A name a Deny
// pattern matches is refused whatever the address; an address admitted
// by the policy itself is admitted; an address admitted only by name
// needs an admitted name that resolved to it.
func (p Policy) Connect(dst netip.Addr, name string, resolved bool) Verdict {
	v := p.Addr(dst)
	if v == Refuse {
		return Refuse
	}
	if name != "" && slices.ContainsFunc(p.DenyDomains, func(d Pattern) bool { return d.Match(name) }) {
		return Refuse
	}
	if v == Admit {
		return Admit
	}
	if name != "" && resolved && p.Name(name) == Admit {
		return Admit
	}
	return Refuse
}
