package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// policyEntrySyntax is the form of an --allow or --deny entry.
const policyEntrySyntax = "an address (1.2.3.4), a CIDR (10.0.0.0/8), a name (example.com) or a domain pattern (*.example.com)"

// newNetworkCmd is `stead network` and its subcommands.
func newNetworkCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "network",
		Aliases: []string{"net"},
		Short:   "Show a sandbox's network, or change its egress policy",
		Long: `A sandbox has an IPv4 address in the daemon's subnet, stable across stop/start
and daemon restarts; the gateway address (the subnet's first) is its default route and
DNS resolver. Traffic leaving it follows its egress policy, decided in this
order:

  1. the host, other sandboxes, link-local, loopback and metadata ranges are
     always refused;
  2. with internet off, everything is refused;
  3. an entry of the deny list that matches refuses it;
  4. with an empty allow list, it is admitted;
  5. an entry of the allow list that matches admits it; anything else is
     refused (an allow list makes the policy default-deny).

Entries are ` + policyEntrySyntax + `.
"example.com" matches that name only, "*.example.com" every name below it.

A policy change applies at once to a running sandbox and is kept across
stop/start, snapshot and fork. The agent inside the sandbox may read its
network but never change it. Ports are exposed with stead port.`,
		Example: `  stead network show agent-1
  stead network set agent-1 --allow '*.pypi.org' --allow files.pythonhosted.org
  stead network set agent-1 --deny 10.0.0.0/8
  stead network set agent-1 --internet off
  stead network set agent-1 --clear-allow`,
	}
	group(cmd)
	cmd.AddCommand(newNetworkShowCmd(g), newNetworkSetCmd(g))
	return cmd
}

func newNetworkShowCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "show SANDBOX",
		Aliases: []string{"info", "inspect"},
		Short:   "Show a sandbox's address, egress policy, counters and exposed ports",
		Long: `Show a sandbox's address and gateway, its egress policy, how many connections
and lookups the policy refused, bytes received and sent since it started, its
bandwidth and connection limits, and its exposed ports with their URLs.

Exits 3 if there is no such sandbox.`,
		Example: `  stead network show agent-1
  stead network show agent-1 --json`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			n, err := c.GetNetwork(cmd.Context(), a[0])
			if err != nil {
				return fmt.Errorf("get network of sandbox %s: %w", a[0], err)
			}
			return g.printNetwork(n, c.Endpoint())
		},
	}
}

// networkSetFlags are the flags of stead network set.
type networkSetFlags struct {
	internet   string
	allow      []string
	deny       []string
	clearAllow bool
	clearDeny  bool
}

func newNetworkSetCmd(g *globals) *cobra.Command {
	var f networkSetFlags
	cmd := &cobra.Command{
		Use:   "set SANDBOX [--internet on|off] [--allow ENTRY]... [--deny ENTRY]... [--clear-allow] [--clear-deny]",
		Short: "Change a sandbox's egress policy",
		Long: `Change a sandbox's egress policy: read the current one, change what the flags
say, and write it back. --allow and --deny add entries to the lists (each is
` + policyEntrySyntax + `);
--clear-allow and --clear-deny empty a list first. --internet off refuses
everything leaving the sandbox, whatever the lists say.

A non-empty allow list makes the policy default-deny: only what it admits is
reachable. The change applies at once, without a restart. Prints the network
with the new policy.

Exits 3 if there is no such sandbox; an entry the daemon cannot parse is
refused (exit 1) and nothing is changed.`,
		Example: `  stead network set agent-1 --allow '*.pypi.org' --allow files.pythonhosted.org
  stead network set agent-1 --deny 169.254.0.0/16 --deny '*.internal.example'
  stead network set agent-1 --internet off
  stead network set agent-1 --clear-allow --allow api.openai.com`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if !cmd.Flags().Changed("internet") && len(f.allow) == 0 && len(f.deny) == 0 && !f.clearAllow && !f.clearDeny {
				return usageError{fmt.Errorf("network set %s: nothing to change; give --internet, --allow, --deny, --clear-allow or --clear-deny", a[0])}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			cur, err := c.GetNetwork(cmd.Context(), a[0])
			if err != nil {
				return fmt.Errorf("get network of sandbox %s: %w", a[0], err)
			}
			p, err := f.apply(cur.Policy, cmd.Flags().Changed("internet"))
			if err != nil {
				return err
			}
			if len(cur.Policy.Allow) == 0 && len(p.Allow) > 0 && !g.json {
				fmt.Fprintln(g.stderr, "note: the allow list makes the policy default-deny: only what it admits is reachable")
			}
			n, err := c.SetNetwork(cmd.Context(), a[0], p)
			if err != nil {
				return fmt.Errorf("set network of sandbox %s: %w", a[0], err)
			}
			return g.printNetwork(n, c.Endpoint())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.internet, "internet", "", "on: let traffic leave (the lists apply); off: refuse everything")
	fl.StringArrayVar(&f.allow, "allow", nil, "add an entry to the allow list (repeatable; makes the policy default-deny)")
	fl.StringArrayVar(&f.deny, "deny", nil, "add an entry to the deny list (repeatable; deny wins over allow)")
	fl.BoolVar(&f.clearAllow, "clear-allow", false, "empty the allow list first (then everything not denied is admitted)")
	fl.BoolVar(&f.clearDeny, "clear-deny", false, "empty the deny list first")
	return cmd
}

// apply returns cur changed as the flags say: the lists are cleared when
// asked, then the new entries are added (each once, in order); Internet
// is set when internetSet. cur itself is not modified.
func (f networkSetFlags) apply(cur client.NetworkPolicy, internetSet bool) (client.NetworkPolicy, error) {
	p := client.NetworkPolicy{Internet: cur.Internet, Allow: slices.Clone(cur.Allow), Deny: slices.Clone(cur.Deny)}
	if internetSet {
		on, err := parseOnOff(f.internet)
		if err != nil {
			return client.NetworkPolicy{}, usageError{fmt.Errorf("--internet %q: %w", f.internet, err)}
		}
		p.Internet = &on
	}
	if f.clearAllow {
		p.Allow = nil
	}
	if f.clearDeny {
		p.Deny = nil
	}
	var err error
	if p.Allow, err = addEntries(p.Allow, f.allow, "--allow"); err != nil {
		return client.NetworkPolicy{}, err
	}
	if p.Deny, err = addEntries(p.Deny, f.deny, "--deny"); err != nil {
		return client.NetworkPolicy{}, err
	}
	return p, nil
}

// parseOnOff reads an on/off flag value.
func parseOnOff(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "on", "true", "yes":
		return true, nil
	case "off", "false", "no":
		return false, nil
	}
	return false, fmt.Errorf("want on or off")
}

// addEntries appends the entries of add that list lacks. An empty entry
// is a usage error (the daemon checks the syntax of the others).
func addEntries(list, add []string, flag string) ([]string, error) {
	for _, e := range add {
		e = strings.TrimSpace(e)
		if e == "" {
			return nil, usageError{fmt.Errorf("%s: an empty entry; want %s", flag, policyEntrySyntax)}
		}
		if !slices.Contains(list, e) {
			list = append(list, e)
		}
	}
	return list, nil
}

// policyLine describes an egress policy in one line.
func policyLine(p client.NetworkPolicy) string {
	if !p.InternetOn() {
		return "internet off"
	}
	s := "internet on"
	if len(p.Allow) > 0 {
		s += "; allow only " + strings.Join(p.Allow, ", ")
	}
	if len(p.Deny) > 0 {
		s += "; deny " + strings.Join(p.Deny, ", ")
	}
	return s
}

// printNetwork prints a sandbox's network as JSON or as a key/value block
// followed by its ports. endpoint makes the ports' path URLs absolute.
func (g *globals) printNetwork(n client.NetworkInfo, endpoint string) error {
	if g.json {
		if n.Ports == nil {
			n.Ports = []client.Port{}
		}
		return printJSON(g.stdout, n)
	}
	tw := newTable(g.stdout)
	if !n.Enabled {
		row(tw, "Network:", "none: the daemon runs without networking (loopback only)")
	}
	addr := orDash(n.Address)
	if n.Address6 != "" {
		addr += ", " + n.Address6
	}
	row(tw, "Address:", addr)
	row(tw, "Gateway:", orDash(n.Gateway)+" (default route and DNS)")
	if n.Policy.InternetOn() {
		row(tw, "Internet:", "on")
	} else {
		row(tw, "Internet:", "off (everything leaving the sandbox is refused)")
	}
	if len(n.Policy.Allow) > 0 {
		row(tw, "Allow:", strings.Join(n.Policy.Allow, ", ")+" (default-deny: nothing else)")
	} else {
		row(tw, "Allow:", "- (everything not denied)")
	}
	row(tw, "Deny:", orDash(strings.Join(n.Policy.Deny, ", ")))
	row(tw, "Refused:", strconv.FormatUint(n.Refused, 10)+" connections and lookups since start")
	row(tw, "Traffic:", "rx "+humanize.IBytes(n.RxBytes)+", tx "+humanize.IBytes(n.TxBytes))
	row(tw, "Bandwidth:", bandwidthStr(n.Bandwidth))
	if n.MaxConns > 0 {
		row(tw, "Max conns:", strconv.Itoa(n.MaxConns))
	} else {
		row(tw, "Max conns:", "unlimited")
	}
	if len(n.Ports) == 0 {
		row(tw, "Ports:", "- (stead port expose)")
		return tw.Flush()
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(g.stdout, "\nPorts:")
	return printPorts(g.stdout, "  ", n.Ports, endpoint)
}

// bandwidthStr formats a rate limit in bits/s ("unlimited" for 0).
func bandwidthStr(bits int64) string {
	if bits <= 0 {
		return "unlimited"
	}
	return humanize.SIWithDigits(float64(bits), 1, "bit/s")
}

// printPorts prints exposed ports as a table, each line starting with
// indent.
func printPorts(w io.Writer, indent string, ports []client.Port, endpoint string) error {
	tw := newTable(w)
	row(tw, indent+"PORT", "ACCESS", "EXPOSED", "URL")
	for _, p := range ports {
		urls := portURLs(p, endpoint)
		first := "-"
		if len(urls) > 0 {
			first = urls[0]
		}
		row(tw, indent+strconv.Itoa(p.Port), portAccess(p.Public), ago(p.ExposedAt), first)
		for _, u := range urls[min(1, len(urls)):] {
			row(tw, indent, "", "", u)
		}
	}
	return tw.Flush()
}

// portAccess names a port's access.
func portAccess(public bool) string {
	if public {
		return "public"
	}
	return "token"
}

// portURLs are the URLs of an exposed port: by host, then by path. A path
// URL the daemon gives relative is made absolute on an http(s) endpoint.
func portURLs(p client.Port, endpoint string) []string {
	var urls []string
	if p.URL != "" {
		urls = append(urls, p.URL)
	}
	if u := p.PathURL; u != "" {
		if strings.HasPrefix(u, "/") && (strings.HasPrefix(endpoint, "http://") || strings.HasPrefix(endpoint, "https://")) {
			u = strings.TrimSuffix(endpoint, "/") + u
		}
		urls = append(urls, u)
	}
	return urls
}
