package e2b

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

func TestE2BNetworkRulesMapOntoTheEgressPolicy(t *testing.T) {
	no, yes := false, true
	off := client.NetworkPolicy{Internet: &no}
	for name, c := range map[string]struct {
		in   networkBody
		want client.NetworkPolicy
	}{
		"nothing":                  {networkBody{}, client.NetworkPolicy{}},
		"internet allowed":         {networkBody{AllowInternetAccess: &yes}, client.NetworkPolicy{}},
		"no internet":              {networkBody{AllowInternetAccess: &no}, off},
		"deny all":                 {networkBody{DenyOut: []string{allTraffic}}, off},
		"deny all but":             {networkBody{DenyOut: []string{allTraffic}, AllowOut: []string{"1.1.1.1", "example.com"}}, client.NetworkPolicy{Allow: []string{"1.1.1.1", "example.com"}}},
		"no internet but":          {networkBody{AllowInternetAccess: &no, AllowOut: []string{"10.1.0.0/16"}}, client.NetworkPolicy{Allow: []string{"10.1.0.0/16"}}},
		"deny some":                {networkBody{DenyOut: []string{"8.8.8.8", "10.0.0.0/8"}}, client.NetworkPolicy{Deny: []string{"8.8.8.8", "10.0.0.0/8"}}},
		"allow alone changes none": {networkBody{AllowOut: []string{"1.1.1.1"}}, client.NetworkPolicy{}},
		"deny all but, deny some":  {networkBody{DenyOut: []string{allTraffic, "9.9.9.9"}, AllowOut: []string{"1.1.1.1"}}, client.NetworkPolicy{Allow: []string{"1.1.1.1"}, Deny: []string{"9.9.9.9"}}},
	} {
		got, err := steadPolicy(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v %v, want %+v", name, got, err, c.want)
		}
	}
	for name, in := range map[string]networkBody{
		"allow inside a denied CIDR": {DenyOut: []string{"10.0.0.0/8"}, AllowOut: []string{"10.1.2.3"}},
		"allow equal to a deny":      {DenyOut: []string{"example.com"}, AllowOut: []string{"example.com"}},
		"egress proxy":               {EgressProxy: []byte(`{"address":"p:1080"}`)},
		"rules":                      {Rules: []byte(`{"example.com":[{}]}`)},
		"private public traffic":     {AllowPublicTraffic: &no},
		"empty allow entry":          {DenyOut: []string{allTraffic}, AllowOut: []string{" "}},
	} {
		if _, err := steadPolicy(in); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// FuzzSteadPolicy: no network body panics the mapping, and what it
// accepts keeps stead's own rule that deny wins: no allowed address or
// CIDR lies inside a denied one.
func FuzzSteadPolicy(f *testing.F) {
	f.Add([]byte(`{"allowOut":["1.1.1.1"],"denyOut":["0.0.0.0/0"]}`))
	f.Add([]byte(`{"denyOut":["10.0.0.0/8"],"allowOut":["10.1.1.1"]}`))
	f.Add([]byte(`{"allow_internet_access":false,"allowOut":["example.com"]}`))
	f.Add([]byte(`{"egressProxy":{"address":"p:1"},"rules":{}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var n networkBody
		if json.Unmarshal(in, &n) != nil {
			return
		}
		p, err := steadPolicy(n)
		if err != nil {
			return
		}
		for _, a := range p.Allow {
			for _, d := range p.Deny {
				if overlaps(a, d) {
					t.Fatalf("accepted allow %q inside deny %q", a, d)
				}
			}
		}
		if !p.InternetOn() && (len(p.Allow) > 0 || len(p.Deny) > 0 && len(n.AllowOut) > 0) {
			t.Fatalf("internet off with an allow-list: %+v", p)
		}
	})
}
