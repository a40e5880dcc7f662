package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// networkBackend is an in-memory api.NetworkBackend for the CLI tests; the
// other routes come from cliBackend. It keeps one policy and one set of
// ports for every sandbox but "missing" (404), and records what was set
// and created.
type networkBackend struct {
	*cliBackend
	mu      sync.Mutex
	policy  client.NetworkPolicy
	ports   []client.Port
	sets    []client.NetworkPolicy
	created []client.CreateSandboxRequest
	tokens  int
}

var _ api.NetworkBackend = (*networkBackend)(nil)

func (b *networkBackend) known(sandbox string) error {
	if sandbox == "missing" {
		return fmt.Errorf("sandbox %q: %w", sandbox, errs.ErrNotFound)
	}
	return nil
}

func (b *networkBackend) info() client.NetworkInfo {
	return client.NetworkInfo{Enabled: true, Address: "10.88.0.7", Gateway: "10.88.0.1", Policy: b.policy,
		Refused: 12, RxBytes: 3 << 20, TxBytes: 1 << 10, Bandwidth: 100e6, MaxConns: 4096, Ports: slices.Clone(b.ports)}
}

func (b *networkBackend) GetNetwork(_ context.Context, _, sandbox string) (client.NetworkInfo, error) {
	if err := b.known(sandbox); err != nil {
		return client.NetworkInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.info(), nil
}

func (b *networkBackend) SetNetwork(_ context.Context, _, sandbox string, p client.NetworkPolicy) (client.NetworkInfo, error) {
	if err := b.known(sandbox); err != nil {
		return client.NetworkInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range append(slices.Clone(p.Allow), p.Deny...) {
		if strings.Contains(e, " ") {
			return client.NetworkInfo{}, fmt.Errorf("policy entry %q: not an address, CIDR or domain pattern: %w", e, errs.ErrInvalid)
		}
	}
	b.sets = append(b.sets, p)
	b.policy = p
	return b.info(), nil
}

func (b *networkBackend) ListPorts(_ context.Context, _, sandbox string) ([]client.Port, error) {
	if err := b.known(sandbox); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.ports), nil
}

func (b *networkBackend) ExposePort(_ context.Context, _, sandbox string, port int, req client.ExposePortRequest) (client.ExposedPort, error) {
	if err := b.known(sandbox); err != nil {
		return client.ExposedPort{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p := client.Port{Port: port, Public: req.Public, URL: fmt.Sprintf("https://%d-sb-1.stead.example", port),
		PathURL: fmt.Sprintf("/v1/sandboxes/sb-1/ports/%d/", port), ExposedAt: time.Now()}
	b.ports = slices.DeleteFunc(b.ports, func(q client.Port) bool { return q.Port == port })
	b.ports = append(b.ports, p)
	ep := client.ExposedPort{Port: p}
	if !req.Public {
		b.tokens++
		ep.Token = fmt.Sprintf("tok-%d", b.tokens)
	}
	return ep, nil
}

func (b *networkBackend) UnexposePort(_ context.Context, _, sandbox string, port int) error {
	if err := b.known(sandbox); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.ports)
	b.ports = slices.DeleteFunc(b.ports, func(q client.Port) bool { return q.Port == port })
	if len(b.ports) == n {
		return fmt.Errorf("port %d of sandbox %s is not exposed: %w", port, sandbox, errs.ErrNotFound)
	}
	return nil
}

func (b *networkBackend) CreateSandbox(_ context.Context, tenant string, req client.CreateSandboxRequest) (client.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.created = append(b.created, req)
	return client.Sandbox{ID: "sb-9", Name: req.Name, Tenant: tenant, State: "running"}, nil
}

// GetSandbox describes "netted" with an address, a policy and
// auto-resume, the rest as cliBackend.
func (b *networkBackend) GetSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	sb, err := b.cliBackend.GetSandbox(ctx, tenant, id)
	if id == "netted" {
		sb.Address = "10.88.0.7"
		sb.Network = client.NetworkPolicy{Allow: []string{"*.pypi.org", "1.2.3.4"}, Deny: []string{"10.0.0.0/8"}}
		sb.AutoResume = true
	}
	return sb, err
}

func newNetworkServer(t *testing.T) (*httptest.Server, *networkBackend) {
	t.Helper()
	b := &networkBackend{cliBackend: &cliBackend{}}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	return srv, b
}

func TestNetworkSetFlagsChangeOnlyWhatTheySay(t *testing.T) {
	on, off := true, false
	cur := client.NetworkPolicy{Allow: []string{"*.pypi.org"}, Deny: []string{"10.0.0.0/8"}}
	for _, c := range []struct {
		name        string
		flags       networkSetFlags
		internetSet bool
		cur         client.NetworkPolicy
		want        client.NetworkPolicy
	}{
		{"add to allow keeps the rest", networkSetFlags{allow: []string{"github.com"}}, false, cur,
			client.NetworkPolicy{Allow: []string{"*.pypi.org", "github.com"}, Deny: []string{"10.0.0.0/8"}}},
		{"an entry already there is not repeated", networkSetFlags{allow: []string{"*.pypi.org"}, deny: []string{"10.0.0.0/8", "1.1.1.1"}}, false, cur,
			client.NetworkPolicy{Allow: []string{"*.pypi.org"}, Deny: []string{"10.0.0.0/8", "1.1.1.1"}}},
		{"clear-allow then add", networkSetFlags{clearAllow: true, allow: []string{"api.openai.com"}}, false, cur,
			client.NetworkPolicy{Allow: []string{"api.openai.com"}, Deny: []string{"10.0.0.0/8"}}},
		{"clear both", networkSetFlags{clearAllow: true, clearDeny: true}, false, cur, client.NetworkPolicy{}},
		{"internet off keeps the lists", networkSetFlags{internet: "off"}, true, cur,
			client.NetworkPolicy{Internet: &off, Allow: []string{"*.pypi.org"}, Deny: []string{"10.0.0.0/8"}}},
		{"internet on", networkSetFlags{internet: "ON"}, true, client.NetworkPolicy{Internet: &off},
			client.NetworkPolicy{Internet: &on}},
		{"internet untouched without the flag", networkSetFlags{deny: []string{"x.example"}}, false, client.NetworkPolicy{Internet: &off},
			client.NetworkPolicy{Internet: &off, Deny: []string{"x.example"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := fmt.Sprintf("%+v", c.cur)
			got, err := c.flags.apply(c.cur, c.internetSet)
			if err != nil {
				t.Fatal(err)
			}
			if policyStr(got) != policyStr(c.want) {
				t.Errorf("got %s, want %s", policyStr(got), policyStr(c.want))
			}
			if fmt.Sprintf("%+v", c.cur) != before {
				t.Errorf("the current policy was modified: %+v", c.cur)
			}
		})
	}
	for _, f := range []networkSetFlags{{internet: "maybe"}, {internet: ""}} {
		if _, err := f.apply(cur, true); exitCodeFor(err) != exitUsage {
			t.Errorf("--internet %q: %v, want a usage error", f.internet, err)
		}
	}
	if _, err := (networkSetFlags{allow: []string{" "}}).apply(cur, false); exitCodeFor(err) != exitUsage {
		t.Errorf("empty --allow: %v, want a usage error", err)
	}
}

// policyStr renders a policy with its Internet pointer dereferenced.
func policyStr(p client.NetworkPolicy) string {
	in := "nil"
	if p.Internet != nil {
		in = fmt.Sprint(*p.Internet)
	}
	return fmt.Sprintf("internet=%s allow=%q deny=%q", in, p.Allow, p.Deny)
}

func TestNetworkSetReadsChangesAndWritesThePolicy(t *testing.T) {
	srv, b := newNetworkServer(t)
	b.policy = client.NetworkPolicy{Deny: []string{"10.0.0.0/8"}}

	code, out, errOut := stead(t, srv, "network", "set", "agent-1", "--allow", "*.pypi.org", "--allow", "files.pythonhosted.org")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "default-deny") {
		t.Errorf("no note that an allow list is default-deny: %q", errOut)
	}
	if !strings.Contains(out, "*.pypi.org, files.pythonhosted.org (default-deny") || !strings.Contains(out, "10.0.0.0/8") {
		t.Errorf("set does not print the new policy:\n%s", out)
	}
	code, out, errOut = stead(t, srv, "network", "set", "agent-1", "--internet", "off", "--clear-deny", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var n client.NetworkInfo
	if err := json.Unmarshal([]byte(out), &n); err != nil || n.Policy.InternetOn() || len(n.Policy.Allow) != 2 || n.Policy.Deny != nil {
		t.Errorf("set --json: %v %s", err, out)
	}
	b.mu.Lock()
	got := make([]string, len(b.sets))
	for i, p := range b.sets {
		got[i] = policyStr(p)
	}
	b.mu.Unlock()
	want := []string{
		`internet=nil allow=["*.pypi.org" "files.pythonhosted.org"] deny=["10.0.0.0/8"]`,
		`internet=false allow=["*.pypi.org" "files.pythonhosted.org"] deny=[]`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("policies set:\n%q\nwant\n%q", got, want)
	}

	// Nothing to change, a bad flag value, an unknown sandbox, an entry the
	// daemon refuses: nothing is set.
	for _, c := range []struct {
		args []string
		code int
		say  string
	}{
		{[]string{"network", "set", "agent-1"}, exitUsage, "nothing to change"},
		{[]string{"network", "set", "agent-1", "--internet", "maybe"}, exitUsage, "want on or off"},
		{[]string{"network", "set", "missing", "--deny", "1.2.3.4"}, exitNotFound, "missing"},
		{[]string{"network", "set", "agent-1", "--deny", "not an entry"}, exitError, "not an entry"},
		{[]string{"network", "show"}, exitUsage, "usage"},
		{[]string{"network", "show", "missing"}, exitNotFound, "missing"},
	} {
		code, _, errOut := stead(t, srv, c.args...)
		if code != c.code || !strings.Contains(errOut, c.say) {
			t.Errorf("%q: exit %d, want %d, saying %q: %s", c.args, code, c.code, c.say, errOut)
		}
	}
	b.mu.Lock()
	if len(b.sets) != 2 {
		t.Errorf("refused invocations set %+v", b.sets[2:])
	}
	b.mu.Unlock()
}

func TestNetworkShowPrintsAddressPolicyCountersAndPorts(t *testing.T) {
	srv, b := newNetworkServer(t)
	off := false
	b.policy = client.NetworkPolicy{Internet: &off}
	code, out, errOut := stead(t, srv, "network", "show", "agent-1")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, w := range []string{"Address:", "10.88.0.7", "Gateway:", "10.88.0.1", "Internet:", "off", "Refused:", "12",
		"rx 3.0 MiB, tx 1.0 KiB", "100 Mbit/s", "4096", "stead port expose"} {
		if !strings.Contains(out, w) {
			t.Errorf("network show lacks %q:\n%s", w, out)
		}
	}
	b.ports = []client.Port{{Port: 3000, Public: true, URL: "https://3000-sb-1.stead.example", PathURL: "/v1/sandboxes/sb-1/ports/3000/"}}
	_, out, _ = stead(t, srv, "network", "show", "agent-1")
	if !strings.Contains(out, "https://3000-sb-1.stead.example") || !strings.Contains(out, srv.URL+"/v1/sandboxes/sb-1/ports/3000/") ||
		!strings.Contains(out, "public") {
		t.Errorf("network show does not list the port with its URLs:\n%s", out)
	}
	code, out, _ = stead(t, srv, "network", "show", "agent-1", "--json")
	var n client.NetworkInfo
	if err := json.Unmarshal([]byte(out), &n); code != exitOK || err != nil || n.Address != "10.88.0.7" || len(n.Ports) != 1 {
		t.Errorf("network show --json: %d %v %s", code, err, out)
	}
}

func TestPortCommands(t *testing.T) {
	srv, b := newNetworkServer(t)
	must := func(a ...string) string {
		t.Helper()
		code, out, errOut := stead(t, srv, a...)
		if code != exitOK {
			t.Fatalf("%q: exit %d: %s", a, code, errOut)
		}
		return out
	}
	if out := must("port", "ls", "agent-1"); !strings.Contains(out, "No exposed ports") {
		t.Errorf("empty ls: %q", out)
	}
	if out := must("port", "ls", "agent-1", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("empty ls --json: %q, want []", out)
	}
	out := must("port", "expose", "agent-1", "8080")
	for _, w := range []string{"Port 8080 of agent-1 exposed (private", "https://8080-sb-1.stead.example",
		srv.URL + "/v1/sandboxes/sb-1/ports/8080/", "Token: tok-1", "only this once", "X-Stead-Port-Token"} {
		if !strings.Contains(out, w) {
			t.Errorf("expose lacks %q:\n%s", w, out)
		}
	}
	out = must("port", "expose", "agent-1", "3000", "--public")
	if !strings.Contains(out, "public") || strings.Contains(out, "Token") {
		t.Errorf("public expose:\n%s", out)
	}
	var ep client.ExposedPort
	if err := json.Unmarshal([]byte(must("port", "expose", "agent-1", "8080", "--json")), &ep); err != nil || ep.Token != "tok-2" || ep.Port.Port != 8080 {
		t.Errorf("expose --json: %+v %v", ep, err)
	}
	out = must("port", "ls", "agent-1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "PORT") || !strings.Contains(out, "token") || !strings.Contains(out, "public") {
		t.Errorf("ls (two ports, two URLs each):\n%s", out)
	}
	if out := must("port", "unexpose", "agent-1", "8080"); !strings.Contains(out, "no longer exposed") {
		t.Errorf("unexpose: %q", out)
	}
	b.mu.Lock()
	if len(b.ports) != 1 || b.ports[0].Port != 3000 {
		t.Errorf("ports left %+v", b.ports)
	}
	b.mu.Unlock()

	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"port", "expose", "agent-1", "0"}, exitUsage},
		{[]string{"port", "expose", "agent-1", "65536"}, exitUsage},
		{[]string{"port", "expose", "agent-1", "http"}, exitUsage},
		{[]string{"port", "expose", "agent-1"}, exitUsage},
		{[]string{"port", "unexpose", "agent-1", "-1"}, exitUsage},
		{[]string{"port", "unexpose", "agent-1", "8080"}, exitNotFound}, // not exposed any more
		{[]string{"port", "expose", "missing", "80"}, exitNotFound},
		{[]string{"port", "ls", "missing"}, exitNotFound},
	} {
		if code, _, errOut := stead(t, srv, c.args...); code != c.code {
			t.Errorf("%q: exit %d, want %d: %s", c.args, code, c.code, errOut)
		}
	}
}

func TestCreateNetworkFlagsFillTheRequest(t *testing.T) {
	srv, b := newNetworkServer(t)
	for _, a := range [][]string{
		{"create", "plain"},
		{"create", "closed", "--no-internet"},
		{"create", "listed", "--allow", "*.pypi.org", "--allow", "1.2.3.4", "--deny", "10.0.0.0/8", "--auto-resume"},
	} {
		if code, _, errOut := stead(t, srv, a...); code != exitOK {
			t.Fatalf("%q: exit %d: %s", a, code, errOut)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.created) != 3 {
		t.Fatalf("created %+v", b.created)
	}
	if b.created[0].Network != nil || b.created[0].AutoResume {
		t.Errorf("without flags the request carries a policy %+v or auto-resume", b.created[0].Network)
	}
	if p := b.created[1].Network; p == nil || policyStr(*p) != `internet=false allow=[] deny=[]` {
		t.Errorf("--no-internet sent %+v", p)
	}
	if p := b.created[2].Network; p == nil || policyStr(*p) != `internet=nil allow=["*.pypi.org" "1.2.3.4"] deny=["10.0.0.0/8"]` ||
		!b.created[2].AutoResume {
		t.Errorf("--allow/--deny/--auto-resume sent %+v auto_resume=%v", p, b.created[2].AutoResume)
	}
}

func TestInfoShowsAddressPolicyAndAutoResume(t *testing.T) {
	srv, _ := newNetworkServer(t)
	code, out, errOut := stead(t, srv, "info", "netted")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, w := range []string{"Address:", "10.88.0.7", "Network:", "internet on; allow only *.pypi.org, 1.2.3.4; deny 10.0.0.0/8",
		"Auto-resume:", "yes", "State:", "running"} {
		if !strings.Contains(out, w) {
			t.Errorf("info lacks %q:\n%s", w, out)
		}
	}
	_, out, _ = stead(t, srv, "info", "agent")
	if !strings.Contains(out, "Network:") || !strings.Contains(out, "internet on") || !strings.Contains(out, "Auto-resume:") {
		t.Errorf("info of a sandbox with the default policy:\n%s", out)
	}
	_, out, _ = stead(t, srv, "info", "netted", "--json")
	if !strings.Contains(out, `"address": "10.88.0.7"`) || !strings.Contains(out, `"auto_resume": true`) {
		t.Errorf("info --json:\n%s", out)
	}
}

func TestPolicyLine(t *testing.T) {
	off := false
	for _, c := range []struct {
		p    client.NetworkPolicy
		want string
	}{
		{client.NetworkPolicy{}, "internet on"},
		{client.NetworkPolicy{Internet: &off, Allow: []string{"x"}}, "internet off"},
		{client.NetworkPolicy{Deny: []string{"10.0.0.0/8", "*.evil.example"}}, "internet on; deny 10.0.0.0/8, *.evil.example"},
	} {
		if got := policyLine(c.p); got != c.want {
			t.Errorf("policyLine(%+v) = %q, want %q", c.p, got, c.want)
		}
	}
}

// TestNetworkAndPortVerbsHaveHelpWithExamples: every network and port verb
// says what it does and shows how (house style), and the groups alone
// print their help.
func TestNetworkAndPortVerbsHaveHelpWithExamples(t *testing.T) {
	root := newRootCmd(&globals{})
	for _, path := range [][]string{
		{"network"}, {"network", "show"}, {"network", "set"},
		{"port"}, {"port", "ls"}, {"port", "expose"}, {"port", "unexpose"},
	} {
		cmd, rest, err := root.Find(path)
		if err != nil || len(rest) != 0 || cmd.Name() != path[len(path)-1] {
			t.Errorf("%q: not a verb (%v)", path, err)
			continue
		}
		if cmd.Short == "" || cmd.Example == "" || !strings.Contains(cmd.Example, "stead "+strings.Join(path, " ")) {
			t.Errorf("%q: short %q, example %q", path, cmd.Short, cmd.Example)
		}
	}
	srv, _ := newNetworkServer(t)
	for _, group := range []string{"network", "port"} {
		if code, out, _ := stead(t, srv, group); code != exitOK || !strings.Contains(out, "Usage:") {
			t.Errorf("stead %s: exit %d:\n%s", group, code, out)
		}
		if code, _, _ := stead(t, srv, group, "bogus"); code != exitUsage {
			t.Errorf("stead %s bogus: exit %d, want %d", group, code, exitUsage)
		}
	}
}
