package network

// Pins names the network namespaces m holds pinned (for the tests'
// leftover checks).
func Pins(m *Manager) ([]string, error) { return m.pins.list() }
