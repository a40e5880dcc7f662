package resolver

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
)

// DefaultResolvConf is where HostUpstreams reads the host's nameservers.
const DefaultResolvConf = "/etc/resolv.conf"

// maxResolvConf bounds the resolv.conf read.
const maxResolvConf = 64 << 10

// HostUpstreams returns the nameservers of a resolv.conf(5) file as
// host:port on port 53, in the file's order. Loopback nameservers
// (systemd-resolved's 127.0.0.53, a local dnsmasq) are kept: the daemon
// runs in the host's network namespace and reaches them. A file without a
// nameserver is an error.
func HostUpstreams(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read nameservers: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxResolvConf))
	if err != nil {
		return nil, fmt.Errorf("read nameservers %s: %w", path, err)
	}
	ups := ParseResolvConf(data)
	if len(ups) == 0 {
		return nil, fmt.Errorf("read nameservers %s: no nameserver line", path)
	}
	return ups, nil
}

// ParseResolvConf returns the addresses of the "nameserver" lines of a
// resolv.conf as host:port (port 53), skipping comments and lines whose
// address is not an IP address (an IPv6 zone is kept). Duplicates are
// dropped.
func ParseResolvConf(data []byte) []string {
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxResolvConf)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil {
			continue
		}
		hp := net.JoinHostPort(a.Unmap().String(), "53")
		if !seen[hp] {
			seen[hp] = true
			out = append(out, hp)
		}
	}
	return out
}
