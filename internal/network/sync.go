package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Sync makes the host's network state match the running sandboxes.
// A sandbox that is running counts as existing; a nil exists releases
// every other lease.
func (m *Manager) Sync(ctx context.Context, running []Attachment, exists map[string]bool) error {
	m.op.Lock()
	defer m.op.Unlock()
	if err := m.subnetsFree(); err != nil {
		return err
	}
	return m.sync(ctx, running, exists, true)
}

func (m *Manager) sync(ctx context.Context, running []Attachment, exists map[string]bool, releaseLeases bool) error {
	var errs []error
	if _, err := m.ensureGateway(true); err != nil {
		return err
	}
	now := time.Now()
	var sbs []*sandbox
	keep := map[string]bool{}     // keys of RunDir entries
	keepLink := map[string]bool{} // host veth names
	keepAddr := map[netip.Addr]bool{}
	// A host end made ahead (Prepare) keeps its name: each sandbox's is
	// found by its alias.
	byAlias := m.hostEndsByAlias()
	for _, a := range running {
		addr, addr6, err := m.lease(ctx, a.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sb := m.newSandbox(a, addr, addr6)
		if names := byAlias[aliasPrefix(m.cfg.Table)+sb.key]; len(names) > 0 {
			sb.veth = names[0]
		}
		// Its link and its connections are kept even if the repair
		// below fails (a later attach or sync retries it).
		keep[sb.key], keepLink[sb.veth] = true, true
		keepAddr[sb.addr], keepAddr[sb.addr6] = true, true
		if err := m.ensureLinks(sb, nil); err != nil {
			errs = append(errs, fmt.Errorf("sync network of %s: %w", a.ID, err))
			continue
		}
		sbs = append(sbs, sb)
	}

	b, err := m.newBatch()
	if err != nil {
		return err
	}
	counts, err := m.refusedCounters(b)
	if err != nil {
		return err
	}
	for _, sb := range sbs {
		sb.refusedBase += refusedOf(counts, sb)
	}
	if err := m.rebuild(b, sbs, now); err != nil {
		return err
	}
	if err := m.flush(b, "table "+m.cfg.Table); err != nil {
		return err
	}
	m.mu.Lock()
	old := m.sbs
	m.sbs, m.byAddr = map[string]*sandbox{}, map[netip.Addr]*sandbox{}
	for _, sb := range sbs {
		if o, ok := old[sb.id]; ok {
			sb.noted = o.noted
		}
		m.sbs[sb.id], m.byAddr[sb.addr] = sb, sb
		if sb.addr6.IsValid() {
			m.byAddr[sb.addr6] = sb
		}
	}
	m.mu.Unlock()

	errs = append(errs, m.sweep(ctx, keep, keepLink)...)
	// One pass over the tracked connections: those of an address of the
	// subnets that no kept sandbox holds go (whatever left it: a link
	// swept, a crash between a detach's steps, an earlier version), and
	// those of a kept sandbox an earlier version tracked unmarked get its
	// mark (conntrack.go).
	stale := func(a netip.Addr) bool {
		return !keepAddr[a] && a != m.gw && a != m.gw6 &&
			(m.cfg.Subnet.Contains(a) || m.cfg.Subnet6.IsValid() && m.cfg.Subnet6.Contains(a))
	}
	marks := map[netip.Addr]uint32{}
	for _, sb := range sbs {
		for _, a := range []netip.Addr{sb.addr, sb.addr6} {
			if a.IsValid() {
				marks[a] = connMark(sb.addr)
			}
		}
	}
	if err := tidyConnections(marks, stale); err != nil {
		m.log.WarnContext(ctx, "tidy the tracked connections", "err", err)
	}

	if releaseLeases {
		leases, err := m.cfg.Leases.ListLeases(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("list leases: %w", err))
		}
		isRunning := map[string]bool{}
		for _, a := range running {
			isRunning[a.ID] = true
		}
		for _, l := range leases {
			if exists[l.SandboxID] || isRunning[l.SandboxID] {
				continue
			}
			if err := m.cfg.Leases.ReleaseLease(ctx, l.SandboxID); err != nil {
				errs = append(errs, fmt.Errorf("release lease of %s: %w", l.SandboxID, err))
				continue
			}
			m.log.InfoContext(ctx, "released lease of a deleted sandbox", "sandbox", l.SandboxID, "addr", l.Addr)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sync network: %w", err)
	}
	return nil
}

// sweep removes this instance's links, netns files and RunDir entries
// that belong to no kept sandbox (a link's routes and neighbour entries go
// with it), and the neighbour entries an earlier version pinned on the
// gateway link (a bridge then).
func (m *Manager) sweep(ctx context.Context, keep, keepLink map[string]bool) []error {
	var errs []error
	links, err := m.ownedLinks()
	if err != nil {
		errs = append(errs, err)
	}
	for name, l := range links {
		if keepLink[name] || m.isPrepared(name) {
			continue
		}
		if err := delLink(netlink.LinkDel, l); err != nil {
			errs = append(errs, fmt.Errorf("delete link %s: %w", name, err))
			continue
		}
		m.log.InfoContext(ctx, "deleted stale link", "link", name, "alias", l.Attrs().Alias)
	}
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		if m.gwIndex <= 0 {
			break // (0 would list every link's)
		}
		neighs, err := dump(func() ([]netlink.Neigh, error) { return netlink.NeighList(m.gwIndex, fam) })
		if err != nil {
			errs = append(errs, fmt.Errorf("list neighbours of %s: %w", m.cfg.Bridge, err))
		}
		for _, n := range neighs {
			if n.State&netlink.NUD_PERMANENT == 0 {
				continue
			}
			if err := netlink.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("delete neighbour %s of %s: %w", n.IP, m.cfg.Bridge, err))
			}
		}
	}
	if names, err := m.pins.list(); err == nil {
		for _, name := range names {
			if keep[name] {
				continue
			}
			if err := m.pins.remove(name); err != nil {
				errs = append(errs, err)
				continue
			}
			m.log.InfoContext(ctx, "removed stale netns", "netns", name)
		}
	} else {
		errs = append(errs, err)
	}
	if ents, err := os.ReadDir(m.cfg.RunDir); err == nil {
		for _, e := range ents {
			if e.Name() == pinsHolder || e.Name() == resolvConfName || keep[e.Name()] {
				continue
			}
			if err := os.RemoveAll(filepath.Join(m.cfg.RunDir, e.Name())); err != nil {
				errs = append(errs, fmt.Errorf("remove run dir entry %s: %w", e.Name(), err))
			}
		}
	}
	return errs
}

// Remove detaches every sandbox of this instance (keeping leases), then
// deletes the nftables table and the gateway link: the host is left as before
// New. The Manager must not be used afterwards.
func (m *Manager) Remove(ctx context.Context) error {
	m.op.Lock()
	defer m.op.Unlock()
	if err := m.sync(ctx, nil, nil, false); err != nil {
		return err
	}
	b, err := m.newBatch()
	if err != nil {
		return err
	}
	for _, t := range []*nftables.Table{b.t, b.bt} {
		b.c.AddTable(t)
		b.c.DelTable(t)
	}
	if err := b.c.Flush(); err != nil {
		return fmt.Errorf("remove nftables tables %s: %w", m.cfg.Table, err)
	}
	if br, err := netlink.LinkByName(m.cfg.Bridge); err == nil {
		if err := netlink.LinkDel(br); err != nil {
			return fmt.Errorf("delete gateway link %s: %w", m.cfg.Bridge, err)
		}
	}
	return m.pins.close()
}

// Close lets go of what the Manager holds open for the daemon's life: the
// pairs made ahead (DropPrepared), and the namespace the netns pins live
// in, which goes when no sandbox is attached (a running sandbox's pin
// stays for the next daemon). The Manager must not be used afterwards.
func (m *Manager) Close() error {
	m.DropPrepared()
	m.op.Lock()
	defer m.op.Unlock()
	return m.pins.close()
}
