package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/netip"
	"slices"

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
	subnets = slices.Clone(subnets)
	for i, subnet := range subnets {
		if !subnet.IsValid() || subnet.Bits() > subnet.Addr().BitLen()-2 {
			return nil, fmt.Errorf("lease address for sandbox %s: subnet %s is invalid or too small: %w", sandboxID, subnet, errs.ErrInvalid)
		}
		subnets[i] = subnet.Masked()
	}
	out := make([]netip.Addr, len(subnets))
	// Leased already (a lease made ahead, an attach again): read without
	// taking the write lock.
	if s.heldLeases(ctx, sandboxID, subnets, out) {
		return out, nil
	}
	err := s.writeTx(ctx, func(tx *txn) error {
		for i, subnet := range subnets {
			a, err := leaseIn(ctx, tx, sandboxID, subnet)
			if err != nil {
				return err
			}
			out[i] = a
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lease address for sandbox %s: %w", sandboxID, err)
	}
	return out, nil
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
func leaseIn(ctx context.Context, tx *txn, sandboxID string, subnet netip.Prefix) (netip.Addr, error) {
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
	rows, err := tx.QueryContext(ctx, "SELECT address FROM network_leases WHERE family = ?", family)
	if err != nil {
		return out, err
	}
	taken := map[netip.Addr]bool{}
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			rows.Close()
			return out, err
		}
		if pa, err := netip.ParseAddr(a); err == nil {
			taken[pa] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, err
	}
	// The network address and the gateway are never leased; nor is
	// an IPv4 subnet's broadcast address.
	for a := subnet.Addr().Next().Next(); a.IsValid() && subnet.Contains(a); a = a.Next() {
		if family == 4 && !subnet.Contains(a.Next()) {
			break
		}
		if !taken[a] {
			out = a
			break
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
	if _, err := s.w.ExecContext(ctx, "DELETE FROM network_leases WHERE sandbox_id = ?", sandboxID); err != nil {
		return fmt.Errorf("release lease of sandbox %s: %w", sandboxID, err)
	}
	return nil
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
