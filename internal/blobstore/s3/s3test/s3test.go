// Package s3test starts a real S3 server on 127.0.0.1 for tests: versitygw
// (Apache-2.0) with its posix backend in a temporary directory. The binary is
// installed by scripts/setup.sh (`go install
// github.com/versity/versitygw/cmd/versitygw@v1.8.0`); it is run, never
// linked.
package s3test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/blobstore/s3"
)

// Binary is the server's executable name.
const Binary = "versitygw"

// readyTimeout bounds how long Start waits for the server to answer.
const readyTimeout = 10 * time.Second

// FindBinary returns the path of the versitygw executable: on PATH, then in
// $(go env GOBIN), $(go env GOPATH)/bin, $HOME/go/bin and /root/go/bin.
func FindBinary() (string, error) {
	if p, err := exec.LookPath(Binary); err == nil {
		return p, nil
	}
	var dirs []string
	gobin, gopath := goEnv()
	if gobin != "" {
		dirs = append(dirs, gobin)
	}
	for d := range strings.SplitSeq(gopath, string(os.PathListSeparator)) {
		if d != "" {
			dirs = append(dirs, filepath.Join(d, "bin"))
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	dirs = append(dirs, "/root/go/bin")
	for _, d := range dirs {
		p := filepath.Join(d, Binary)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("find %s: not on PATH nor in %s", Binary, strings.Join(dirs, ", "))
}

// goEnv returns GOBIN and GOPATH as the go command sees them (the
// environment's values if the go command is not found).
func goEnv() (gobin, gopath string) {
	gobin, gopath = os.Getenv("GOBIN"), os.Getenv("GOPATH")
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = "/usr/local/go/bin/go"
	}
	out, err := exec.Command(goCmd, "env", "GOBIN", "GOPATH").Output()
	if err != nil {
		return gobin, gopath
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) == 2 {
		return lines[0], lines[1]
	}
	return gobin, gopath
}

// Start runs a fresh S3 server on a free 127.0.0.1 port, backed by a
// directory under t.TempDir(), waits until it answers (at most 10 s), and
// stops it when the test ends. The returned Config names a bucket no one has
// used (s3.New creates it) and random credentials. Start fails the test if
// the server is not installed or does not come up.
func Start(t testing.TB) s3.Config {
	t.Helper()
	bin, err := FindBinary()
	if err != nil {
		t.Fatalf("S3 test server not installed: run scripts/setup.sh (%v)", err)
	}
	dir := t.TempDir()
	access, secret := "stead"+randHex(6), randHex(20)
	var lastErr error
	for attempt := range 3 {
		addr, err := freePort()
		if err != nil {
			t.Fatalf("start S3 server: %v", err)
		}
		data := filepath.Join(dir, fmt.Sprintf("data%d", attempt))
		logPath := filepath.Join(dir, fmt.Sprintf("server%d.log", attempt))
		if err := startServer(t, bin, addr, data, logPath, access, secret); err != nil {
			// Most likely another process took the port between freePort
			// and the server's bind: try another.
			lastErr = err
			continue
		}
		return s3.Config{
			Endpoint:  addr,
			Bucket:    "stead-test-" + randHex(6),
			AccessKey: access,
			SecretKey: secret,
			Region:    "us-east-1",
			Secure:    false,
		}
	}
	t.Fatalf("start S3 server %s: %v", bin, lastErr)
	return s3.Config{}
}

func startServer(t testing.TB, bin, addr, data, logPath, access, secret string) error {
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--port", addr, "--region", "us-east-1", "--quiet", "posix", data)
	// Credentials through the environment, not argv (visible in ps).
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+access, "ROOT_SECRET_ACCESS_KEY="+secret)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		cmd.Process.Kill()
		<-exited
	}
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("server exited before it was ready (%v): %s", err, tail(logPath))
		default:
		}
		// Any HTTP answer (403 for an unsigned request) means it serves.
		resp, err := client.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("server not ready after %v: %v: %s", readyTimeout, err, tail(logPath))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("S3 server log (%s):\n%s", logPath, tail(logPath))
		}
	})
	return nil
}

// freePort returns a 127.0.0.1 address no one listened on a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// tail returns the last 4 KiB of the file at p.
func tail(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "(no log)"
		}
		return err.Error()
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(bytes.TrimSpace(b))
}
