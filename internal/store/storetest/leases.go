package storetest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

var leaseNet = netip.MustParsePrefix("10.88.0.0/16")

func mustLease(t *testing.T, s store.Store, id string, subnet netip.Prefix) netip.Addr {
	t.Helper()
	a, err := s.LeaseAddress(context.Background(), id, subnet)
	if err != nil {
		t.Fatalf("LeaseAddress(%s, %s): %v", id, subnet, err)
	}
	return a
}

func testLeaseStableLowestFree(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := mustLease(t, s, "sb-a", leaseNet)
	b := mustLease(t, s, "sb-b", leaseNet)
	if a.String() != "10.88.0.2" || b.String() != "10.88.0.3" {
		t.Fatalf("first leases = %s, %s; want 10.88.0.2, 10.88.0.3", a, b)
	}
	if again := mustLease(t, s, "sb-a", leaseNet); again != a {
		t.Fatalf("lease of sb-a again = %s, want %s", again, a)
	}
	if err := s.ReleaseLease(ctx, "sb-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLease(ctx, "sb-a"); err != nil {
		t.Fatalf("releasing twice: %v", err)
	}
	if c := mustLease(t, s, "sb-c", leaseNet); c != a {
		t.Fatalf("lease after a release = %s, want the freed %s", c, a)
	}
	v6 := netip.MustParsePrefix("fd00:5ead::/64")
	if a6 := mustLease(t, s, "sb-b", v6); a6.String() != "fd00:5ead::2" {
		t.Fatalf("IPv6 lease = %s", a6)
	}
	list, err := s.ListLeases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range list {
		got = append(got, l.SandboxID+"="+l.Addr.String())
	}
	if fmt.Sprint(got) != "[sb-b=10.88.0.3 sb-b=fd00:5ead::2 sb-c=10.88.0.2]" {
		t.Fatalf("ListLeases = %v", got)
	}
	if err := s.ReleaseLease(ctx, "sb-b"); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.ListLeases(ctx); len(list) != 1 {
		t.Fatalf("release frees both families: %v", list)
	}
}

// testLeaseBothFamiliesAtOnce: LeaseAddresses leases one address per
// subnet, as LeaseAddress would, all or none (a full subnet leaves the
// other family unleased too), and again returns the same.
func testLeaseBothFamiliesAtOnce(t *testing.T, s store.Store) {
	ctx := context.Background()
	v6 := netip.MustParsePrefix("fd00:5ead::/64")
	mustLease(t, s, "sb-x", leaseNet)
	got, err := s.LeaseAddresses(ctx, "sb-a", leaseNet, v6)
	if err != nil || len(got) != 2 || got[0].String() != "10.88.0.3" || got[1].String() != "fd00:5ead::2" {
		t.Fatalf("LeaseAddresses = %v %v", got, err)
	}
	again, err := s.LeaseAddresses(ctx, "sb-a", leaseNet, v6)
	if err != nil || fmt.Sprint(again) != fmt.Sprint(got) {
		t.Fatalf("LeaseAddresses again = %v %v, want %v", again, err, got)
	}
	if a := mustLease(t, s, "sb-a", v6); a != got[1] {
		t.Fatalf("LeaseAddress of the same = %s, want %s", a, got[1])
	}
	full := netip.MustParsePrefix("192.168.7.0/30") // one address: .2
	mustLease(t, s, "sb-y", full)
	if _, err := s.LeaseAddresses(ctx, "sb-b", v6, full); !errors.Is(err, errs.ErrQuota) {
		t.Fatalf("LeaseAddresses with a full subnet: %v, want ErrQuota", err)
	}
	list, _ := s.ListLeases(ctx)
	for _, l := range list {
		if l.SandboxID == "sb-b" {
			t.Fatalf("a failed LeaseAddresses left %s", l.Addr)
		}
	}
	if _, err := s.LeaseAddresses(ctx, "sb-b"); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("LeaseAddresses without a subnet: %v, want ErrInvalid", err)
	}
}

func testLeaseSkipsReserved(t *testing.T, s store.Store) {
	small := netip.MustParsePrefix("192.168.7.0/29") // .0 net, .1 gateway, .7 broadcast
	var got []string
	for i := range 5 {
		got = append(got, mustLease(t, s, fmt.Sprintf("sb-%d", i), small).String())
	}
	if fmt.Sprint(got) != "[192.168.7.2 192.168.7.3 192.168.7.4 192.168.7.5 192.168.7.6]" {
		t.Fatalf("leases = %v", got)
	}
	if _, err := s.LeaseAddress(context.Background(), "sb-full", small); !errors.Is(err, errs.ErrQuota) {
		t.Fatalf("lease in a full subnet: %v, want ErrQuota", err)
	}
}

func testLeaseNewSubnet(t *testing.T, s store.Store) {
	mustLease(t, s, "sb-a", leaseNet)
	other := netip.MustParsePrefix("10.99.0.0/24")
	if a := mustLease(t, s, "sb-a", other); a.String() != "10.99.0.2" {
		t.Fatalf("lease after a subnet change = %s", a)
	}
	list, _ := s.ListLeases(context.Background())
	if len(list) != 1 || list[0].Addr.String() != "10.99.0.2" {
		t.Fatalf("the old lease stayed: %v", list)
	}
}

func testLeaseBadInputFull(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, c := range []struct {
		id     string
		subnet netip.Prefix
	}{{"", leaseNet}, {"sb-a", netip.Prefix{}}, {"sb-a", netip.MustParsePrefix("10.0.0.0/31")}} {
		if _, err := s.LeaseAddress(ctx, c.id, c.subnet); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("LeaseAddress(%q, %s) = %v, want ErrInvalid", c.id, c.subnet, err)
		}
	}
	if list, _ := s.ListLeases(ctx); len(list) != 0 {
		t.Fatalf("bad input stored a lease: %v", list)
	}
}

func testLeaseConcurrent(t *testing.T, s store.Store) {
	var wg sync.WaitGroup
	addrs := make([]netip.Addr, 20)
	errs := make([]error, 20)
	for i := range addrs {
		wg.Go(func() {
			addrs[i], errs[i] = s.LeaseAddress(context.Background(), fmt.Sprintf("sb-%02d", i), leaseNet)
		})
	}
	wg.Wait()
	seen := map[netip.Addr]bool{}
	for i, a := range addrs {
		if errs[i] != nil {
			t.Fatalf("lease %d: %v", i, errs[i])
		}
		if seen[a] {
			t.Fatalf("address %s leased twice", a)
		}
		seen[a] = true
	}
}

// testCreateSandboxLeases: a sandbox created with LeaseIn is leased its
// addresses in the transaction that creates its record (through
// CreateSandboxEvent too), as LeaseAddresses would; a create that is
// refused leases nothing, and a lease that cannot be made refuses the
// create.
func testCreateSandboxLeases(t *testing.T, s store.Store) {
	ctx := context.Background()
	v6 := netip.MustParsePrefix("fd00:5ead::/64")
	mustLease(t, s, "sb-x", leaseNet)
	leasesOf := func(id string) []string {
		list, err := s.ListLeases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range list {
			if l.SandboxID == id {
				out = append(out, l.Addr.String())
			}
		}
		return out
	}
	sb := newSandbox("sb-a", store.DefaultTenant, "a", time.Now())
	sb.LeaseIn = []netip.Prefix{leaseNet, v6}
	got, err := s.CreateSandbox(ctx, sb)
	if err != nil || got.LeaseIn != nil {
		t.Fatalf("create with leases: %+v %v", got, err)
	}
	if l := leasesOf("sb-a"); fmt.Sprint(l) != "[10.88.0.3 fd00:5ead::2]" {
		t.Fatalf("leases of the new sandbox: %v", l)
	}
	if again, err := s.LeaseAddresses(ctx, "sb-a", leaseNet, v6); err != nil || fmt.Sprint(again) != "[10.88.0.3 fd00:5ead::2]" {
		t.Fatalf("LeaseAddresses after the create: %v %v", again, err)
	}
	// Refused (the name is taken): no lease.
	dup := newSandbox("sb-b", store.DefaultTenant, "a", time.Now())
	dup.LeaseIn = []netip.Prefix{leaseNet}
	if _, err := s.CreateSandbox(ctx, dup); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("create with a taken name: %v", err)
	}
	// A full subnet refuses the create; a bad one too, before anything.
	full := netip.MustParsePrefix("192.168.7.0/30") // one address: .2
	mustLease(t, s, "sb-y", full)
	c := newSandbox("sb-c", store.DefaultTenant, "c", time.Now())
	c.LeaseIn = []netip.Prefix{leaseNet, full}
	if _, err := s.CreateSandbox(ctx, c); !errors.Is(err, errs.ErrQuota) {
		t.Fatalf("create with a full subnet: %v, want ErrQuota", err)
	}
	c.LeaseIn = []netip.Prefix{netip.MustParsePrefix("10.9.9.9/32")}
	if _, err := s.CreateSandbox(ctx, c); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("create with a /32 to lease in: %v, want ErrInvalid", err)
	}
	for _, id := range []string{"sb-b", "sb-c"} {
		if l := leasesOf(id); len(l) > 0 {
			t.Fatalf("a refused create of %s leased %v", id, l)
		}
		if _, err := s.GetSandbox(ctx, "", id); !errors.Is(err, errs.ErrNotFound) {
			t.Fatalf("a refused create of %s left its record: %v", id, err)
		}
	}
	if w, ok := s.(store.SandboxEventWriter); ok {
		d := newSandbox("sb-d", store.DefaultTenant, "d", time.Now())
		d.LeaseIn = []netip.Prefix{leaseNet}
		if _, _, err := w.CreateSandboxEvent(ctx, d, store.DaemonEvent{Type: "sandbox.created", Tenant: store.DefaultTenant, Sandbox: "sb-d"}, nil); err != nil {
			t.Fatal(err)
		}
		if l := leasesOf("sb-d"); fmt.Sprint(l) != "[10.88.0.4]" {
			t.Fatalf("leases of a sandbox created with its event: %v", l)
		}
	}
}
