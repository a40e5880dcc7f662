package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// LeaseAddress returns the sandbox's address in subnet, leasing the lowest
// free one on the first call (see store.LeaseStore).
func (s *Store) LeaseAddress(ctx context.Context, sandboxID string, subnet netip.Prefix) (netip.Addr, error) {
	out, err := s.LeaseAddresses(ctx, sandboxID, subnet)
	if err != nil {
		return netip.Addr{}, err
	}
	return out[0], nil
}

// LeaseAddresses is LeaseAddress for each subnet, in one transaction (one
// commit for a sandbox's IPv4 and IPv6 addresses).
func (s *Store) LeaseAddresses(ctx context.Context, sandboxID string, subnets ...netip.Prefix) ([]netip.Addr, error) {
	if sandboxID == "" {
		return nil, fmt.Errorf("lease address: empty sandbox id: %w", errs.ErrInvalid)
	}
	if len(subnets) == 0 {
		return nil, fmt.Errorf("lease address for sandbox %s: no subnet: %w", sandboxID, errs.ErrInvalid)
	}
	subnets, err := leaseSubnets(sandboxID, subnets)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, len(subnets))
	// Leased already (a lease made ahead, an attach again): read without
	// taking the write lock.
	if s.heldLeases(ctx, sandboxID, subnets, out) {
		return out, nil
	}
	err = s.writeTx(ctx, func(tx *txn) error { return s.leaseAllIn(ctx, tx, sandboxID, subnets, out) })
	if err != nil {
		return nil, fmt.Errorf("lease address for sandbox %s: %w", sandboxID, err)
	}
	s.setLeaseHints(subnets, out)
	return out, nil
}

// leaseAllIn leases the sandbox an address in each subnet within tx, into
// out (as long as subnets); once tx commits, setLeaseHints.
func (s *Store) leaseAllIn(ctx context.Context, tx *txn, sandboxID string, subnets []netip.Prefix, out []netip.Addr) error {
	for i, subnet := range subnets {
		a, err := s.leaseIn(ctx, tx, sandboxID, subnet)
		if err != nil {
			return err
		}
		out[i] = a
	}
	return nil
}

// setLeaseHints moves each subnet's hint past the address leased in it.
func (s *Store) setLeaseHints(subnets []netip.Prefix, leased []netip.Addr) {
	for i, subnet := range subnets {
		s.setLeaseHint(subnet, leased[i].Next())
	}
}

// leaseSubnets checks the subnets a lease is asked in and returns them
// masked (a copy).
func leaseSubnets(sandboxID string, subnets []netip.Prefix) ([]netip.Prefix, error) {
	subnets = slices.Clone(subnets)
	for i, subnet := range subnets {
		if !subnet.IsValid() || subnet.Bits() > subnet.Addr().BitLen()-2 {
			return nil, fmt.Errorf("lease address for sandbox %s: subnet %s is invalid or too small: %w", sandboxID, subnet, errs.ErrInvalid)
		}
		subnets[i] = subnet.Masked()
	}
	return subnets, nil
}

// heldLeases fills out with the sandbox's addresses in subnets and
// reports whether it holds one in each.
func (s *Store) heldLeases(ctx context.Context, sandboxID string, subnets []netip.Prefix, out []netip.Addr) bool {
	rows, err := s.r.QueryContext(ctx, "SELECT address FROM network_leases WHERE sandbox_id = ?", sandboxID)
	if err != nil {
		return false
	}
	defer rows.Close()
	var have []netip.Addr
	for rows.Next() {
		var a string
		if rows.Scan(&a) != nil {
			return false
		}
		if pa, err := netip.ParseAddr(a); err == nil {
			have = append(have, pa)
		}
	}
	if rows.Err() != nil {
		return false
	}
	for i, subnet := range subnets {
		ok := slices.ContainsFunc(have, func(a netip.Addr) bool {
			if subnet.Contains(a) {
				out[i] = a
				return true
			}
			return false
		})
		if !ok {
			return false
		}
	}
	return true
}

// leaseIn leases the sandbox's address in subnet within tx.
func (s *Store) leaseIn(ctx context.Context, tx *txn, sandboxID string, subnet netip.Prefix) (netip.Addr, error) {
	family := 4
	if subnet.Addr().Is6() {
		family = 6
	}
	var out netip.Addr
	var have string
	err := tx.QueryRowContext(ctx, "SELECT address FROM network_leases WHERE sandbox_id = ? AND family = ?", sandboxID, family).Scan(&have)
	switch {
	case err == nil:
		if a, perr := netip.ParseAddr(have); perr == nil && subnet.Contains(a) {
			out = a
			return out, nil
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM network_leases WHERE sandbox_id = ? AND family = ?", sandboxID, family); err != nil {
			return out, err
		}
	case !errors.Is(err, sql.ErrNoRows):
		return out, err
	}
	// From the lowest address that may be free, a few indexed probes;
	// a subnet that has no free address there is scanned whole.
	for a, i := s.leaseHint(subnet), 0; i < leaseProbes && leasable(subnet, a); a, i = a.Next(), i+1 {
		var one int
		err := tx.QueryRowContext(ctx, "SELECT 1 FROM network_leases WHERE address = ?", a.String()).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			out = a
			break
		}
		if err != nil {
			return out, err
		}
	}
	if !out.IsValid() {
		if out, err = lowestFree(ctx, tx, subnet, family); err != nil {
			return out, err
		}
	}
	if !out.IsValid() {
		return out, fmt.Errorf("subnet %s is full: %w", subnet, errs.ErrQuota)
	}
	created, err := FormatTime(now())
	if err != nil {
		return out, err
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO network_leases (sandbox_id, family, address, created_at) VALUES (?, ?, ?, ?)",
		sandboxID, family, out.String(), created)
	return out, err
}

// ReleaseLease frees every address of the sandbox.
func (s *Store) ReleaseLease(ctx context.Context, sandboxID string) error {
	var freed []netip.Addr
	err := s.writeTx(ctx, func(tx *txn) error {
		rows, err := tx.QueryContext(ctx, "SELECT address FROM network_leases WHERE sandbox_id = ?", sandboxID)
		if err != nil {
			return err
		}
		for rows.Next() {
			var a string
			if err := rows.Scan(&a); err != nil {
				rows.Close()
				return err
			}
			if pa, err := netip.ParseAddr(a); err == nil {
				freed = append(freed, pa)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "DELETE FROM network_leases WHERE sandbox_id = ?", sandboxID)
		return err
	})
	if err != nil {
		return fmt.Errorf("release lease of sandbox %s: %w", sandboxID, err)
	}
	for _, a := range freed {
		s.lowerLeaseHints(a)
	}
	return nil
}

// leaseProbes is how many addresses a lease looks up one by one, from
// the lowest that may be free, before it scans the subnet's leases.
const leaseProbes = 16

// leasable reports whether a may be leased in subnet: not the network
// address, the gateway (the one after it) or an IPv4 subnet's broadcast
// address.
func leasable(subnet netip.Prefix, a netip.Addr) bool {
	if !a.IsValid() || !subnet.Contains(a) || a.Less(subnet.Addr().Next().Next()) {
		return false
	}
	return a.Is6() || subnet.Contains(a.Next())
}

// lowestFree scans the subnet's leases for its lowest free address.
func lowestFree(ctx context.Context, tx *txn, subnet netip.Prefix, family int) (netip.Addr, error) {
	rows, err := tx.QueryContext(ctx, "SELECT address FROM network_leases WHERE family = ?", family)
	if err != nil {
		return netip.Addr{}, err
	}
	taken := map[netip.Addr]bool{}
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			rows.Close()
			return netip.Addr{}, err
		}
		if pa, err := netip.ParseAddr(a); err == nil {
			taken[pa] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return netip.Addr{}, err
	}
	for a := subnet.Addr().Next().Next(); leasable(subnet, a); a = a.Next() {
		if !taken[a] {
			return a, nil
		}
	}
	return netip.Addr{}, nil
}

// leaseHints remembers, per subnet, an address below which every address
// is leased as far as this store saw (its own leases and releases), so
// that a lease finds the lowest free address in a probe or two instead of
// reading every lease. Another process's release may leave a lower one
// free: a lease is then not the lowest, never a taken one (the address is
// unique in the table).
type leaseHints struct {
	mu  sync.Mutex
	low map[netip.Prefix]netip.Addr
}

// leaseHint is where a lease in subnet starts looking.
func (s *Store) leaseHint(subnet netip.Prefix) netip.Addr {
	s.hints.mu.Lock()
	defer s.hints.mu.Unlock()
	if a, ok := s.hints.low[subnet]; ok && leasable(subnet, a) {
		return a
	}
	return subnet.Addr().Next().Next()
}

// setLeaseHint sets subnet's hint to a.
func (s *Store) setLeaseHint(subnet netip.Prefix, a netip.Addr) {
	s.hints.mu.Lock()
	defer s.hints.mu.Unlock()
	if s.hints.low == nil {
		s.hints.low = map[netip.Prefix]netip.Addr{}
	}
	s.hints.low[subnet] = a
}

// lowerLeaseHints lowers to a the hint of every subnet holding a above it.
func (s *Store) lowerLeaseHints(a netip.Addr) {
	s.hints.mu.Lock()
	defer s.hints.mu.Unlock()
	for p, cur := range s.hints.low {
		if p.Contains(a) && a.Less(cur) {
			s.hints.low[p] = a
		}
	}
}

// ListLeases lists every lease.
func (s *Store) ListLeases(ctx context.Context) ([]store.Lease, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT sandbox_id, address, created_at FROM network_leases ORDER BY sandbox_id, family")
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	defer rows.Close()
	var out []store.Lease
	for rows.Next() {
		var l store.Lease
		var addr, created string
		if err := rows.Scan(&l.SandboxID, &addr, &created); err != nil {
			return nil, fmt.Errorf("list leases: %w", err)
		}
		if l.Addr, err = netip.ParseAddr(addr); err != nil {
			return nil, fmt.Errorf("list leases: sandbox %s: %w", l.SandboxID, err)
		}
		if l.CreatedAt, err = parseTime(created); err != nil {
			return nil, fmt.Errorf("list leases: sandbox %s: %w", l.SandboxID, err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	return out, nil
}
