package network

import "net/netip"

// Pins names the network namespaces m holds pinned (for the tests'
// leftover checks).
func Pins(m *Manager) ([]string, error) { return m.pins.list() }

// ConnMark is the conntrack mark of the connections of the sandbox whose
// IPv4 address is a.
func ConnMark(a netip.Addr) uint32 { return connMark(a) }

// Unmark takes the mark off every tracked connection from or to a, as an
// earlier version of the Manager left them.
func Unmark(a netip.Addr) error {
	list, err := listTracked()
	if err != nil {
		return err
	}
	for _, t := range list {
		if t.src.Unmap() == a || t.dst.Unmap() == a {
			if err := t.setMark(0); err != nil {
				return err
			}
		}
	}
	return nil
}

// LinkGroup is the interface group of table's host ends.
func LinkGroup(table string) uint32 { return linkGroup(table) }
