package network

import (
	"testing"

	"github.com/google/nftables"

	"github.com/stead-dev/stead/internal/network/nettest"
	"github.com/stead-dev/stead/internal/testutil"
)

// TestChainExistsLooksUpOneChain: the single-chain lookup listPresent uses
// (instead of a dump of every chain of every table on the host) finds a
// chain that is there, and says absent, without an error, for a chain or
// a table that is not.
func TestChainExistsLooksUpOneChain(t *testing.T) {
	testutil.RequireRoot(t)
	ns, err := nettest.NewAnonNetNS()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	tbl := c.AddTable(&nftables.Table{Name: "present", Family: nftables.TableFamilyINet})
	c.AddChain(&nftables.Chain{Name: "sb-here", Table: tbl})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		table, chain string
		want         bool
	}{
		{"present", "sb-here", true},
		{"present", "sb-gone", false},
		{"absent", "sb-here", false},
	} {
		got, err := chainExists(c, &nftables.Table{Name: tc.table, Family: nftables.TableFamilyINet}, tc.chain)
		if err != nil || got != tc.want {
			t.Errorf("chainExists(%s, %s) = %v, %v; want %v", tc.table, tc.chain, got, err, tc.want)
		}
	}
}
