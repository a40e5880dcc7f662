package e2b

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// allTraffic is E2B's selector of every address (ALL_TRAFFIC in the SDK).
const allTraffic = "0.0.0.0/0"

// networkBody is E2B's network configuration: of a create (the network
// field, with allow_internet_access beside it) and of PUT
// /sandboxes/{id}/network (allow_internet_access inside).
type networkBody struct {
	AllowOut            []string        `json:"allowOut"`
	DenyOut             []string        `json:"denyOut"`
	AllowInternetAccess *bool           `json:"allow_internet_access"`
	AllowPublicTraffic  *bool           `json:"allowPublicTraffic"`
	EgressProxy         json.RawMessage `json:"egressProxy"`
	Rules               json.RawMessage `json:"rules"`
	MaskRequestHost     json.RawMessage `json:"maskRequestHost"`
	HTTPSPorts          json.RawMessage `json:"httpsPorts"`
}

// steadPolicy maps E2B's egress rules onto stead's policy:
//   - allow_internet_access false, or a denyOut of all traffic
//     (0.0.0.0/0), refuses everything but allowOut: no allowOut is
//     internet off, else allowOut is stead's allow-list (default-deny);
//   - the other denyOut entries are stead's deny-list;
//   - allowOut without a deny of all traffic changes nothing (everything
//     is allowed already), unless it lies inside a denied CIDR: E2B lets
//     allowOut win there, stead lets deny win, so that is refused.
//
// What stead's egress policy cannot express (egress proxies, per-host
// rules, masked hosts, HTTPS ports, private public traffic) is refused
// with errs.ErrInvalid, naming the field.
func steadPolicy(n networkBody) (client.NetworkPolicy, error) {
	for name, raw := range map[string]json.RawMessage{"egressProxy": n.EgressProxy, "rules": n.Rules,
		"maskRequestHost": n.MaskRequestHost, "httpsPorts": n.HTTPSPorts} {
		if present(raw) && string(raw) != "[]" {
			return client.NetworkPolicy{}, fmt.Errorf("network.%s is not supported by stead's egress policy (docs/e2b.md); nothing was changed: %w", name, errs.ErrInvalid)
		}
	}
	if n.AllowPublicTraffic != nil && !*n.AllowPublicTraffic {
		return client.NetworkPolicy{}, fmt.Errorf("network.allowPublicTraffic=false is not supported (stead's exposed ports are private unless exposed public); nothing was changed: %w", errs.ErrInvalid)
	}
	closed := n.AllowInternetAccess != nil && !*n.AllowInternetAccess
	var deny []string
	for _, d := range n.DenyOut {
		if d == allTraffic {
			closed = true
			continue
		}
		deny = append(deny, d)
	}
	allow := slices.Clone(n.AllowOut)
	for _, a := range allow {
		if strings.TrimSpace(a) == "" {
			return client.NetworkPolicy{}, fmt.Errorf("network.allowOut has an empty entry: %w", errs.ErrInvalid)
		}
		for _, d := range deny {
			if overlaps(a, d) {
				return client.NetworkPolicy{}, fmt.Errorf("network: allowOut %s lies in denyOut %s; in stead a deny wins over an allow, so this rule would not mean what it means in E2B; nothing was changed: %w", a, d, errs.ErrInvalid)
			}
		}
	}
	p := client.NetworkPolicy{Deny: deny}
	switch {
	case closed && len(allow) == 0:
		off := false
		p.Internet = &off
	case closed:
		p.Allow = allow
	}
	return p, nil
}

// overlaps reports whether the address or CIDR a lies in (or is) the
// address or CIDR d; domain names overlap only when equal.
func overlaps(a, d string) bool {
	if a == d {
		return true
	}
	pa, errA := prefixOf(a)
	pd, errD := prefixOf(d)
	return errA == nil && errD == nil && pd.Overlaps(pa)
}

func prefixOf(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// updateNetwork serves PUT /sandboxes/{id}/network: the sandbox's egress
// rules are replaced, at once for a running sandbox.
func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request, p api.Principal) {
	const op = "update sandbox network"
	var body networkBody
	if err := decodeBody(r, &body); err != nil {
		h.fail(w, r, op, err)
		return
	}
	pol, err := steadPolicy(body)
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	sb, err := h.get(r, p, r.PathValue("id"))
	if err == nil {
		_, err = h.b.SetNetwork(r.Context(), p.TenantID, sb.ID, pol)
	}
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
