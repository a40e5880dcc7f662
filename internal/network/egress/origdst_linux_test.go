package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/network/policy"
	"github.com/stead-dev/stead/internal/testutil"
)

// newNetns makes a network namespace on a thread that then dies, and
// returns a descriptor of it (closed at the test's end).
func newNetns(t *testing.T) int {
	t.Helper()
	testutil.RequireRoot(t)
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{-1, err}
			return
		}
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		ch <- result{fd, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("cannot make a network namespace: %v", r.err)
	}
	t.Cleanup(func() { unix.Close(r.fd) })
	return r.fd
}

// inNetns runs fn on a thread in the namespace ns; sockets fn makes
// belong to ns.
func inNetns(ns int, fn func() error) error {
	ch := make(chan error)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- err
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			ch <- err
			return
		}
		err = fn()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

// redirect adds, in ns, the rule the firewall uses: TCP to port 80 goes
// to the local port (here in the output hook, for the test's own
// connections).
func redirect(ns int, port uint16) error {
	c, err := nftables.New(nftables.WithNetNSFd(ns))
	if err != nil {
		return err
	}
	tbl := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "stead_test"})
	ch := c.AddChain(&nftables.Chain{Name: "out", Table: tbl, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	be16 := func(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
	c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be16(80)},
		&expr.Immediate{Register: 1, Data: be16(port)},
		&expr.Redir{RegisterProtoMin: 1},
	}})
	return c.Flush()
}

// TestOriginalDstThroughNftRedirect runs the proxy with the real
// SO_ORIGINAL_DST in a network namespace of its own, where an nft
// redirect rule sends TCP to port 80 to it.
func TestOriginalDstThroughNftRedirect(t *testing.T) {
	ns := newNetns(t)
	sbAddr := netip.MustParseAddr("198.18.5.1")
	dst := netip.MustParseAddrPort("198.18.5.10:80")

	var (
		upLn net.Listener
		mu   sync.Mutex
		refs []string
	)
	err := inNetns(ns, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		// On lo the whole prefix is local: 198.18.5.10 is reachable, and
		// nothing listens on its port 80.
		a, _ := netlink.ParseAddr("198.18.5.1/24")
		if err := netlink.AddrAdd(lo, a); err != nil {
			return err
		}
		upLn, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	})
	if err != nil {
		t.Fatalf("set up the namespace: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host=%s", r.Host)
	})}
	go srv.Serve(upLn)
	t.Cleanup(func() { srv.Close() })

	pol, err := policy.Parse(client.NetworkPolicy{Allow: []string{"api.example.test"}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{
		Listen: "127.0.0.1:0",
		Lookup: func(src netip.Addr) (string, policy.Policy, bool) {
			return sandbox, pol, src == sbAddr
		},
		Resolved:  func(id string, a netip.Addr) bool { return a == dst.Addr() },
		Forbidden: func(netip.Addr) bool { return false },
		OnRefused: func(id string, d netip.AddrPort, name string) {
			mu.Lock()
			defer mu.Unlock()
			refs = append(refs, fmt.Sprintf("%s %s %s", id, d, name))
		},
		// OriginalDst: the default, SO_ORIGINAL_DST.
		Dial: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			if addr != dst.String() {
				return nil, fmt.Errorf("dial %s: not the original destination", addr)
			}
			err = inNetns(ns, func() error {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, upLn.Addr().String())
				return err
			})
			return c, err
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := inNetns(ns, func() error { return p.Start(context.Background()) }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	port := p.Addr().(*net.TCPAddr).Port
	if err := redirect(ns, uint16(port)); err != nil {
		t.Fatalf("nft redirect in the namespace: %v", err)
	}

	request := func(host string) (int, string) {
		t.Helper()
		var c net.Conn
		err := inNetns(ns, func() (err error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: sbAddr.AsSlice()}, Timeout: 5 * time.Second}
			c, err = d.Dial("tcp", dst.String())
			return err
		})
		if err != nil {
			t.Fatalf("dial %s: %v", dst, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, get(host, "/"))
		return readResponse(t, bufio.NewReader(c))
	}
	if code, body := request("api.example.test"); code != 200 || body != "host=api.example.test" {
		t.Fatalf("admitted: %d %q", code, body)
	}
	if code, _ := request("evil.test"); code != 403 {
		t.Fatalf("refused: %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(refs, []string{"sb1 198.18.5.10:80 evil.test"}) {
		t.Fatalf("refusals %v (the original destination comes from conntrack)", refs)
	}
}

func TestOriginalDstOfAConnectionNotRedirected(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			time.Sleep(100 * time.Millisecond)
			c.Close()
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := OriginalDst(c.(*net.TCPConn))
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOPROTOOPT) {
		// No conntrack hook in this namespace: the documented answer.
		return
	}
	if err != nil || got.String() != ln.Addr().String() {
		t.Fatalf("OriginalDst = %v, %v; want %v", got, err, ln.Addr())
	}
}
