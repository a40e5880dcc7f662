// Package rig runs a stead cluster of several nodes on this machine for the
// cluster's end-to-end tests and its benchmark: one private PostgreSQL
// server and one S3 server (versitygw) on the host, and every node a
// `stead serve` in a network namespace of the rig's own, joined to a host
// bridge by a veth pair. A partition of a node is its host-side veth set
// down (it cuts the node from PostgreSQL, S3 and the other nodes); healing
// sets it up again.
//
// Addresses come from a private test range, 10.213.X.0/24 with X random
// per rig: the host bridge is .1, node i is .(10+i). PostgreSQL listens on
// 127.0.0.1 and the bridge address, the S3 server on the bridge address;
// nothing of the rig reaches beyond the machine.
//
// The daemons run in their namespace's network only (nsenter --net, not
// `ip netns exec`, which remounts /sys and hides /sys/fs/cgroup from the
// daemon). Each node's sandboxes get their network inside the node's
// namespace (its own bridge, stead0, and its own nftables table), so the
// nodes use the same bridge name and subnet without meeting.
//
// Close removes everything the rig made: daemons, sandbox processes (found
// by their cgroups), mounts, loop devices, namespaces, veths, the bridge
// and both servers, and reports what it could not remove.
package rig

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stead-dev/stead/internal/blobstore/s3/s3test"
)

// Options configure a cluster.
type Options struct {
	// Bin is the stead binary (bin/stead of a build; stead-init beside it).
	Bin string
	// Dir holds every node's directories and the servers' data (a fresh
	// temporary directory when empty; removed by Close then).
	Dir string
	// Nodes is the number of nodes (default 3).
	Nodes int
	// PoolGiB is the size of each node's pool image (sparse; default 8).
	PoolGiB int
	// Heartbeat, Grace and LeaseTTL are the nodes' --node-heartbeat,
	// --node-grace and --lease-ttl (defaults 500ms, 3s, 6s). A flag the
	// binary does not know is left out and reported by Missing.
	Heartbeat, Grace, LeaseTTL time.Duration
	// Serve are more flags for every node's `stead serve`.
	Serve []string
	// Logf reports progress (default: nothing).
	Logf func(format string, args ...any)
}

// Cluster is a running rig.
type Cluster struct {
	opts Options
	dir  string
	own  bool // dir is ours to remove
	// Net is the host side of the nodes' network.
	Net *Net
	// PG is the private PostgreSQL server; DSN the nodes' database on it
	// (through the bridge address).
	PG  *Postgres
	DSN string
	// S3 is the S3 server; Repo the repository URL every node uses.
	S3   *S3
	Repo string
	// RepoKeyFile, SecretFile and CredentialsFile are shared by every node.
	RepoKeyFile, SecretFile, CredentialsFile string
	// Key is the bootstrap admin key (made by the first node).
	Key string
	// Nodes are the cluster's nodes, node1 first.
	Nodes []*Node
	// Missing lists the serve flags the binary does not know (left out).
	Missing []string

	serveHelp string
}

// Start makes the network, starts both servers and the nodes (the first
// one alone until it made the admin key, then the others), initializes
// the repository and returns when every node's API answers. On error,
// whatever was made is removed.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Bin == "" {
		return nil, errors.New("rig: Options.Bin (the stead binary) is required")
	}
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.PoolGiB <= 0 {
		o.PoolGiB = 8
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 500 * time.Millisecond
	}
	if o.Grace <= 0 {
		o.Grace = 3 * time.Second
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 6 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	c = &Cluster{opts: o, dir: o.Dir}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "stead-cluster-"); err != nil {
			return nil, fmt.Errorf("rig: make dir: %w", err)
		}
		c.own = true
	}
	defer func() {
		if err != nil {
			if cerr := c.Close(); cerr != nil {
				err = fmt.Errorf("%w (and cleaning up: %v)", err, cerr)
			}
			c = nil
		}
	}()
	help, err := exec.Command(o.Bin, "serve", "--help").CombinedOutput()
	if err != nil {
		return c, fmt.Errorf("rig: %s serve --help: %v: %s", o.Bin, err, help)
	}
	c.serveHelp = string(help)
	if c.Net, err = newNet(o.Nodes); err != nil {
		return c, err
	}
	o.Logf("rig: bridge %s %s, namespaces %s", c.Net.Bridge, c.Net.HostAddr, strings.Join(c.Net.Namespaces(), " "))
	// The server runs as the postgres user: its directory must be
	// reachable by it, which a test's temporary directory (0700) is not.
	pgDir, err := os.MkdirTemp("", "stead-cluster-pg-")
	if err != nil {
		return c, fmt.Errorf("rig: %w", err)
	}
	if c.PG, err = startPostgres(ctx, pgDir, c.Net.HostAddr); err != nil {
		os.RemoveAll(pgDir)
		return c, err
	}
	if c.DSN, err = c.PG.CreateDatabase(ctx, "stead_cluster"); err != nil {
		return c, err
	}
	if c.S3, err = startS3(filepath.Join(c.dir, "s3"), c.Net.HostAddr); err != nil {
		return c, err
	}
	c.Repo = fmt.Sprintf("s3://%s/%s/stead?secure=false", c.S3.Endpoint, c.S3.Bucket)
	c.CredentialsFile = filepath.Join(c.dir, "s3.credentials")
	if err := os.WriteFile(c.CredentialsFile, []byte(fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", c.S3.AccessKey, c.S3.SecretKey)), 0o600); err != nil {
		return c, fmt.Errorf("rig: write credentials: %w", err)
	}
	c.SecretFile = filepath.Join(c.dir, "cluster.secret")
	if err := os.WriteFile(c.SecretFile, []byte(randHex(32)+"\n"), 0o600); err != nil {
		return c, fmt.Errorf("rig: write cluster secret: %w", err)
	}
	c.RepoKeyFile = filepath.Join(c.dir, "repo.key")
	for _, f := range []string{"--cluster-secret-file", "--node-heartbeat", "--node-grace", "--lease-ttl"} {
		if !c.knows(f) {
			c.Missing = append(c.Missing, f)
		}
	}
	if len(c.Missing) > 0 {
		o.Logf("rig: %s serve does not know %s: left out", o.Bin, strings.Join(c.Missing, ", "))
	}
	for i := range o.Nodes {
		n := &Node{c: c, Index: i + 1, Name: fmt.Sprintf("node%d", i+1), NS: c.Net.ns[i], HostVeth: c.Net.veths[i],
			IP: c.Net.NodeAddr(i + 1)}
		n.API = net.JoinHostPort(n.IP, "7878")
		base := filepath.Join(c.dir, n.Name)
		n.DataDir, n.RunDir = filepath.Join(base, "data"), filepath.Join(base, "run")
		n.Socket = filepath.Join(n.RunDir, "stead.sock")
		n.LogPath = filepath.Join(base, "daemon.log")
		if err := os.MkdirAll(n.DataDir, 0o755); err != nil {
			return c, fmt.Errorf("rig: %w", err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	// The first node makes the admin key and initializes the repository;
	// the others start with a copy of the key in their data dirs (for the
	// CLI's --data-dir) once it exists.
	if err := c.Nodes[0].Start(ctx); err != nil {
		return c, err
	}
	c.Key = c.Nodes[0].Key
	if _, err := c.Nodes[0].Client.InitRepo(ctx); err != nil {
		return c, fmt.Errorf("rig: init the repository through node1: %w", err)
	}
	var wg sync.WaitGroup
	errc := make(chan error, o.Nodes)
	for _, n := range c.Nodes[1:] {
		if err := os.WriteFile(filepath.Join(n.DataDir, "admin.key"), []byte(c.Key+"\n"), 0o600); err != nil {
			return c, fmt.Errorf("rig: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- n.Start(ctx)
		}()
	}
	wg.Wait()
	close(errc)
	var errsAll []error
	for e := range errc {
		if e != nil {
			errsAll = append(errsAll, e)
		}
	}
	if err := errors.Join(errsAll...); err != nil {
		return c, err
	}
	return c, nil
}

// knows reports whether `stead serve` has the flag.
func (c *Cluster) knows(flag string) bool {
	return strings.Contains(c.serveHelp, flag+" ")
}

// Dir is the directory of the rig's files.
func (c *Cluster) Dir() string { return c.dir }

// Node returns the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Close stops every node and removes its sandboxes, mounts and loop
// device, then the namespaces, veths, bridge and both servers. It returns
// what it found left over and could not remove.
func (c *Cluster) Close() error {
	var problems []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, n := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.teardown(); err != nil {
				mu.Lock()
				problems = append(problems, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if c.Net != nil {
		if err := c.Net.Close(); err != nil {
			problems = append(problems, err)
		}
	}
	if c.S3 != nil {
		c.S3.Stop()
	}
	if c.PG != nil {
		c.PG.Stop()
	}
	for _, n := range c.Nodes {
		if err := n.leftovers(); err != nil {
			problems = append(problems, err)
		}
	}
	if c.own && len(problems) == 0 {
		os.RemoveAll(c.dir)
	}
	return errors.Join(problems...)
}

// Net is the host bridge and the nodes' namespaces and veths.
type Net struct {
	// Bridge is the host bridge; HostAddr its address, Prefix the range.
	Bridge, HostAddr, Prefix string
	ns, veths                []string
}

// newNet makes the bridge and one namespace and veth pair per node.
func newNet(nodes int) (n *Net, err error) {
	tag := randHex(3)
	b := make([]byte, 1)
	rand.Read(b)
	third := int(b[0])
	n = &Net{Bridge: "scb" + tag, HostAddr: fmt.Sprintf("10.213.%d.1", third), Prefix: fmt.Sprintf("10.213.%d.0/24", third)}
	if err := checkRangeFree(n.Prefix); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := ip("link", "add", n.Bridge, "type", "bridge"); err != nil {
		return n, err
	}
	if err := ip("addr", "add", n.HostAddr+"/24", "dev", n.Bridge); err != nil {
		return n, err
	}
	if err := ip("link", "set", n.Bridge, "up"); err != nil {
		return n, err
	}
	for i := 1; i <= nodes; i++ {
		ns, veth, peer := fmt.Sprintf("scn%s-%d", tag, i), fmt.Sprintf("sch%s%d", tag, i), fmt.Sprintf("scp%s%d", tag, i)
		if err := ip("netns", "add", ns); err != nil {
			return n, err
		}
		n.ns = append(n.ns, ns)
		if err := ip("link", "add", veth, "type", "veth", "peer", "name", peer); err != nil {
			return n, err
		}
		n.veths = append(n.veths, veth)
		for _, args := range [][]string{
			{"link", "set", peer, "netns", ns},
			{"link", "set", veth, "master", n.Bridge},
			{"link", "set", veth, "up"},
			{"-n", ns, "link", "set", peer, "name", "eth0"},
			{"-n", ns, "addr", "add", n.NodeAddr(i) + "/24", "dev", "eth0"},
			{"-n", ns, "link", "set", "eth0", "up"},
			{"-n", ns, "link", "set", "lo", "up"},
			{"-n", ns, "route", "add", "default", "via", n.HostAddr},
		} {
			if err := ip(args...); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// checkRangeFree fails if an address of prefix is on a host link already
// (another rig, or anything else).
func checkRangeFree(prefix string) error {
	out, err := exec.Command("ip", "-4", "-o", "addr", "show").Output()
	if err != nil {
		return fmt.Errorf("rig: ip addr show: %w", err)
	}
	base := strings.TrimSuffix(prefix, "0/24")
	if strings.Contains(string(out), " "+base) {
		return fmt.Errorf("rig: %s is in use on this host; try again", prefix)
	}
	return nil
}

// NodeAddr is node i's address (1-based).
func (n *Net) NodeAddr(i int) string {
	return strings.TrimSuffix(n.HostAddr, ".1") + "." + strconv.Itoa(10+i)
}

// Namespaces names the nodes' network namespaces.
func (n *Net) Namespaces() []string { return append([]string(nil), n.ns...) }

// Close deletes the namespaces (their ends of the veths go with them),
// the host-side veths and the bridge, and reports any that remain.
func (n *Net) Close() error {
	for _, ns := range n.ns {
		ip("netns", "del", ns)
	}
	for _, v := range n.veths {
		if linkExists(v) {
			ip("link", "del", v)
		}
	}
	if linkExists(n.Bridge) {
		ip("link", "del", n.Bridge)
	}
	var left []string
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, ns := range n.ns {
		if strings.Contains(string(out), ns) {
			left = append(left, "netns "+ns)
		}
	}
	for _, l := range append([]string{n.Bridge}, n.veths...) {
		if linkExists(l) {
			left = append(left, "link "+l)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("rig: left behind: %s", strings.Join(left, ", "))
	}
	return nil
}

func linkExists(name string) bool {
	return exec.Command("ip", "link", "show", "dev", name).Run() == nil
}

// ip runs the ip command.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("rig: ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Postgres is a private PostgreSQL server listening on 127.0.0.1 and the
// bridge address (started as the postgres user: it refuses root).
type Postgres struct {
	// Admin is the maintenance database's DSN on 127.0.0.1.
	Admin    string
	host     string
	port     int
	password string
	dir      string
	cmd      *exec.Cmd
	done     chan error
}

// startPostgres runs initdb into dir and the server with password
// authentication for 127.0.0.1 and the bridge's range.
func startPostgres(ctx context.Context, dir, bridgeAddr string) (*Postgres, error) {
	bin, err := pgBin()
	if err != nil {
		return nil, err
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("rig: PostgreSQL refuses to run as root and there is no postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("rig: %w", err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, fmt.Errorf("rig: %w", err)
	}
	p := &Postgres{password: randHex(16), dir: dir, host: bridgeAddr}
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte(p.password+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("rig: %w", err)
	}
	os.Chown(pw, uid, gid)
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "stead", "--pwfile", pw,
		"--auth=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8", "--no-instructions")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("rig: initdb: %v: %s", err, out)
	}
	// The nodes connect from the bridge's range.
	prefix := strings.TrimSuffix(bridgeAddr, ".1") + ".0/24"
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("rig: %w", err)
	}
	fmt.Fprintf(hba, "host all all %s scram-sha-256\n", prefix)
	hba.Close()
	for range 3 { // a free port may be taken before the server binds it
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("rig: %w", err)
		}
		p.port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		logf, err := os.Create(filepath.Join(dir, "server.log"))
		if err != nil {
			return nil, fmt.Errorf("rig: %w", err)
		}
		p.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data,
			"-c", "listen_addresses=127.0.0.1,"+bridgeAddr, "-c", "port="+strconv.Itoa(p.port),
			"-c", "unix_socket_directories="+dir, "-c", "max_connections=300", "-c", "shared_buffers=32MB")
		p.cmd.Dir = dir
		p.cmd.Stdout, p.cmd.Stderr = logf, logf
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
		err = p.cmd.Start()
		logf.Close()
		if err != nil {
			return nil, fmt.Errorf("rig: start postgres: %w", err)
		}
		p.done = make(chan error, 1)
		go func() { p.done <- p.cmd.Wait() }()
		p.Admin = p.dsn("127.0.0.1", "postgres")
		if err = p.ping(ctx); err == nil {
			return p, nil
		}
		p.kill()
	}
	return nil, fmt.Errorf("rig: postgres did not come up")
}

func (p *Postgres) dsn(host, db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword("stead", p.password), Host: net.JoinHostPort(host, strconv.Itoa(p.port)),
		Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

func (p *Postgres) ping(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(cctx, p.Admin)
		if err == nil {
			conn.Close(cctx)
			cancel()
			return nil
		}
		cancel()
		select {
		case werr := <-p.done:
			p.done <- werr
			b, _ := os.ReadFile(filepath.Join(p.dir, "server.log"))
			return fmt.Errorf("rig: postgres exited (%v): %s", werr, b)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rig: postgres not ready: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CreateDatabase makes a database and returns its DSN on the bridge
// address (what the nodes use).
func (p *Postgres) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, p.Admin)
	if err != nil {
		return "", fmt.Errorf("rig: connect to postgres: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("rig: create database %s: %w", name, err)
	}
	return p.dsn(p.host, name), nil
}

// LocalDSN is the DSN of the database name on 127.0.0.1 (for the test
// process: it reaches the bridge address too, but this way a test reads
// the store whatever the bridge's state).
func (p *Postgres) LocalDSN(name string) string { return p.dsn("127.0.0.1", name) }

// Stop stops the server and removes its directory.
func (p *Postgres) Stop() {
	p.kill()
	os.RemoveAll(p.dir)
}

// kill stops the server (fast shutdown).
func (p *Postgres) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	p.cmd = nil
}

// pgBin finds the directory of initdb and postgres.
func pgBin() (string, error) {
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(m) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(m[i], "initdb")); err == nil {
			return m[i], nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("rig: PostgreSQL server binaries not found (Debian: apt-get install postgresql, or run scripts/setup.sh)")
}

// S3 is a versitygw server on the bridge address.
type S3 struct {
	Endpoint, Bucket, AccessKey, SecretKey string
	cmd                                    *exec.Cmd
	done                                   chan error
	dir                                    string
}

// startS3 runs versitygw (posix backend in dir) on the bridge address.
func startS3(dir, bridgeAddr string) (*S3, error) {
	bin, err := s3test.FindBinary()
	if err != nil {
		return nil, fmt.Errorf("rig: S3 test server not installed: run scripts/setup.sh (%v)", err)
	}
	s := &S3{Bucket: "stead-cluster-" + randHex(4), AccessKey: "stead" + randHex(6), SecretKey: randHex(20), dir: dir}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, fmt.Errorf("rig: %w", err)
	}
	for range 3 {
		l, err := net.Listen("tcp", net.JoinHostPort(bridgeAddr, "0"))
		if err != nil {
			return nil, fmt.Errorf("rig: %w", err)
		}
		s.Endpoint = l.Addr().String()
		l.Close()
		logf, err := os.Create(filepath.Join(dir, "server.log"))
		if err != nil {
			return nil, fmt.Errorf("rig: %w", err)
		}
		s.cmd = exec.Command(bin, "--port", s.Endpoint, "--region", "us-east-1", "--quiet", "posix", data)
		s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKey, "ROOT_SECRET_ACCESS_KEY="+s.SecretKey)
		s.cmd.Stdout, s.cmd.Stderr = logf, logf
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err = s.cmd.Start()
		logf.Close()
		if err != nil {
			return nil, fmt.Errorf("rig: start %s: %w", bin, err)
		}
		s.done = make(chan error, 1)
		go func() { s.done <- s.cmd.Wait() }()
		if err := s.wait(); err == nil {
			return s, nil
		}
		s.cmd.Process.Kill()
		<-s.done
	}
	b, _ := os.ReadFile(filepath.Join(dir, "server.log"))
	return nil, fmt.Errorf("rig: S3 server did not come up: %s", b)
}

func (s *S3) wait() error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("exited: %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", s.Endpoint, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("not ready")
}

// Stop stops the server and removes its data.
func (s *S3) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		<-s.done
		s.cmd = nil
	}
	os.RemoveAll(s.dir)
}
