// Package pgtest runs a private PostgreSQL server for tests: initdb into a
// temporary directory, the server listening on 127.0.0.1 on a free port (and
// a unix socket in that directory) with password authentication and fsync
// on, a fresh database per test, and the server stopped and its directory
// removed at the end.
//
// If STEAD_TEST_POSTGRES is set, it is the DSN of an existing server's
// maintenance database (a superuser, or a role with CREATEDB) and tests
// create their databases there instead. Without it the PostgreSQL binaries
// must be installed (Debian: apt-get install postgresql); if they are not,
// the tests fail with an error saying so — they never skip.
//
// PostgreSQL refuses to run as root: when the tests run as root, initdb and
// the server run as the postgres user (or STEAD_TEST_POSTGRES_USER).
package pgtest

import (
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
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvServer names the environment variable holding the DSN of an existing
// server to use instead of starting one.
const EnvServer = "STEAD_TEST_POSTGRES"

// EnvUser names the environment variable holding the user a private server
// runs as when the tests run as root (default "postgres").
const EnvUser = "STEAD_TEST_POSTGRES_USER"

// binDirs returns where PostgreSQL's server binaries are looked for, newest
// first; PATH is tried after them.
func binDirs() []string { return []string{"/usr/lib/postgresql/*/bin", "/usr/local/pgsql/bin"} }

// Server is a PostgreSQL server tests create databases on.
type Server struct {
	// admin is the DSN of the maintenance database (postgres).
	admin *url.URL
	dir   string
	cmd   *exec.Cmd
	done  chan error
	log   string
}

// Start returns a server for tb (STEAD_TEST_POSTGRES's, or a private one
// stopped when tb ends) and fails tb if none can be had.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := Launch(context.Background())
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Launch starts a private server (or, with STEAD_TEST_POSTGRES set, connects
// to that one). The caller must call Stop.
func Launch(ctx context.Context) (*Server, error) {
	if dsn := os.Getenv(EnvServer); dsn != "" {
		u, err := url.Parse(dsn)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return nil, fmt.Errorf("%s must be a postgres:// URL", EnvServer)
		}
		s := &Server{admin: u}
		if err := s.ping(ctx, 10*time.Second); err != nil {
			return nil, fmt.Errorf("connect to %s: %w", EnvServer, err)
		}
		return s, nil
	}
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 { // a free port can be taken between choosing and binding it
		s, err := launch(ctx, bin)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// findBin returns the directory holding initdb and postgres.
func findBin() (string, error) { return findBinIn(binDirs(), exec.LookPath) }

// findBinIn is findBin over the directory patterns pats, then lookPath.
func findBinIn(pats []string, lookPath func(string) (string, error)) (string, error) {
	var dirs []string
	for _, pat := range pats {
		m, _ := filepath.Glob(pat)
		sort.Sort(sort.Reverse(sort.StringSlice(m)))
		dirs = append(dirs, m...)
	}
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if p, err := lookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		if isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("PostgreSQL server binaries (initdb, postgres) not found in %s or PATH: install them (Debian: apt-get install postgresql, or run scripts/setup.sh) or set %s to a server's DSN",
		strings.Join(pats, ", "), EnvServer)
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// runAs returns the credential the server runs with: as root, the
// postgres user's; otherwise nil (the current user's).
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	name := os.Getenv(EnvUser)
	if name == "" {
		name = "postgres"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and user %q does not exist (set %s): %w", name, EnvUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", name, u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func launch(ctx context.Context, bin string) (s *Server, err error) {
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "stead-pgtest-")
	if err != nil {
		return nil, fmt.Errorf("make server dir: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("chown server dir: %w", err)
		}
	}
	data := filepath.Join(dir, "data")
	password := randomHex(16)
	pwfile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write password file: %w", err)
	}
	if cred != nil {
		if err := os.Chown(pwfile, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("chown password file: %w", err)
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "stead", "--pwfile", pwfile,
		"--auth=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8", "--no-instructions")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("choose port: %w", err)
	}
	logPath := filepath.Join(dir, "server.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open server log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port="+strconv.Itoa(port),
		"-c", "unix_socket_directories="+dir,
		"-c", "fsync=on",
		"-c", "synchronous_commit=on",
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
	)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// The server dies with the test process (SIGQUIT: immediate shutdown).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	// Pdeathsig fires when the OS thread that forked the server exits,
	// not the process: the server is forked, and waited for, on a thread
	// that lives until the server ends.
	done := make(chan error, 1)
	started := make(chan error)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
		runtime.UnlockOSThread()
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s = &Server{
		admin: &url.URL{Scheme: "postgres", User: url.UserPassword("stead", password),
			Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: "/postgres", RawQuery: "sslmode=disable"},
		dir: dir, cmd: cmd, done: done, log: logPath,
	}
	if err := s.ping(ctx, 60*time.Second); err != nil {
		s.Stop()
		b, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("postgres did not come up: %w\n%s", err, b)
	}
	return s, nil
}

// ping waits up to d for the server to accept a connection.
func (s *Server) ping(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := func() error {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			c, err := pgx.Connect(cctx, s.admin.String())
			if err != nil {
				return err
			}
			return c.Close(cctx)
		}()
		if err == nil {
			return nil
		}
		if s.done != nil {
			select {
			case werr := <-s.done:
				s.done <- werr
				return fmt.Errorf("server exited: %v", werr)
			default:
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops a private server (fast shutdown) and removes its directory;
// for STEAD_TEST_POSTGRES's server it does nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	}
	os.RemoveAll(s.dir)
	s.cmd = nil
}

// DSN returns the URL of database name on the server.
func (s *Server) DSN(name string) string {
	u := *s.admin
	u.Path = "/" + name
	return u.String()
}

// CreateDatabase creates a new database with a unique name as a copy of
// template (template0, an empty database, when template is "") and returns
// its name. The template must have no open connections.
func (s *Server) CreateDatabase(ctx context.Context, template string) (string, error) {
	if template == "" {
		template = "template0"
	}
	name := "stead_test_" + randomHex(8)
	c, err := pgx.Connect(ctx, s.admin.String())
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+pgx.Identifier{template}.Sanitize()+" ENCODING 'UTF8'"); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return name, nil
}

// DropDatabase drops the named database, ending its sessions.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	c, err := pgx.Connect(ctx, s.admin.String())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// NewDatabase creates a fresh, empty database for tb, dropped when tb ends,
// and returns its DSN.
func (s *Server) NewDatabase(tb testing.TB) string {
	tb.Helper()
	return s.NewDatabaseFrom(tb, "")
}

// NewDatabaseFrom is NewDatabase for a copy of the database template (see
// CreateDatabase).
func (s *Server) NewDatabaseFrom(tb testing.TB, template string) string {
	tb.Helper()
	ctx := context.Background()
	name, err := s.CreateDatabase(ctx, template)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.DropDatabase(ctx, name); err != nil && !errors.Is(err, context.Canceled) {
			tb.Errorf("pgtest: %v", err)
		}
	})
	return s.DSN(name)
}
