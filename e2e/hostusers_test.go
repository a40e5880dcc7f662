package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/fsutil"
)

// A probe is one attempt of a host user at something of the daemon's:
// read a file, list a directory, connect to a socket.
type probe struct {
	Op   string `json:"op"` // "read", "list" or "connect"
	Path string `json:"path"`
}

// TestHostUserProbe is not a test: run as another host user by
// runAsNobody (STEAD_E2E_PROBE=1), it makes the probes read from stdin
// and prints, for each, "ok" or the errno it failed with.
func TestHostUserProbe(t *testing.T) {
	if os.Getenv("STEAD_E2E_PROBE") != "1" {
		return
	}
	var probes []probe
	if err := json.NewDecoder(os.Stdin).Decode(&probes); err != nil {
		os.Exit(2)
	}
	out := make([]string, len(probes))
	for i, p := range probes {
		out[i] = attempt(p)
	}
	json.NewEncoder(os.Stdout).Encode(out)
	os.Exit(0)
}

func attempt(p probe) string {
	var err error
	switch p.Op {
	case "read":
		_, err = os.ReadFile(p.Path)
	case "list":
		_, err = os.ReadDir(p.Path)
	case "connect":
		path := p.Path
		if len(path) > 100 { // too long for a socket address: through its directory
			var d *os.File
			if d, err = os.OpenFile(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
				break
			}
			defer d.Close()
			path = "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + filepath.Base(path)
		}
		var c net.Conn
		if c, err = net.Dial("unix", path); err == nil {
			c.Close()
		}
	default:
		return "bad op " + p.Op
	}
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// runAsNobody makes the probes as host user nobody (65534, no
// supplementary groups), with a copy of this test binary it can run.
func runAsNobody(t *testing.T, probes []probe) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "stead-probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "probe")
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(dst, src)
	src.Close()
	if cerr := dst.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	in, _ := json.Marshal(probes)
	cmd := exec.Command(bin, "-test.run=^TestHostUserProbe$")
	cmd.Dir = "/"
	cmd.Env = []string{"STEAD_E2E_PROBE=1", "PATH=/usr/bin:/bin"}
	cmd.Stdin = bytes.NewReader(in)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe as nobody: %v\n%s", err, stderr.String())
	}
	var res []string
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(probes) {
		t.Fatalf("probe output %q: %v", out, err)
	}
	return res
}

// exposeTestDirs opens the test's own temporary directories (0700 by
// default) to every host user, so that only the modes stead sets stand
// between another user and the daemon's files; the daemon log (it holds
// the bootstrap admin key) stays the test's.
func exposeTestDirs(t *testing.T, d *daemon) {
	t.Helper()
	base := filepath.Dir(d.dataDir)
	for _, p := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(base, "daemon.log"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// initPID returns the host pid of a sandbox's init from the runtime state.
func initPID(t *testing.T, d *daemon, id string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.runDir, "containers", id, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Pid int `json:"init_process_pid"`
	}
	if err := json.Unmarshal(b, &st); err != nil || st.Pid <= 0 {
		t.Fatalf("state of %s: %v", id, err)
	}
	return st.Pid
}

func ownerMode(t *testing.T, p string) (uint32, fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid, fi.Mode()
}

// TestAnotherHostUserReachesNothingOfTheDaemonOrItsSandboxes: a second,
// unprivileged host user (nobody), knowing every path (found by walking
// the data and run dirs as root, as /proc/<pid>/mountinfo would tell it),
// cannot read any token, key, database file (WAL and shm included) or
// init config, list any of the daemon's directories or a sandbox's root,
// connect to any socket (the API's, each sandbox's api.sock and init
// socket), or go through a sandbox's /proc/<pid>/root or read its
// environ: every attempt fails with permission denied. The modes are
// checked directly too: data and run dirs 0700 and root's, every
// directory at the top of the run dir 0700 and root's, every file at the
// top of the data dir 0600, the API socket 0660.
func TestAnotherHostUserReachesNothingOfTheDaemonOrItsSandboxes(t *testing.T) {
	d := newDaemon(t)
	exposeTestDirs(t, d)
	ctx := ctxT(t)
	var ids []string
	for _, req := range []client.CreateSandboxRequest{
		{Name: "alpha", Env: map[string]string{"OPENAI_API_KEY": "sk-e2e-hostuser"}},
		{Name: "beta", Service: &client.Service{Command: []string{"sleep", "1d"}}},
	} {
		sb, err := d.c.CreateSandbox(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		// The agent inside still reads its token and reaches its socket.
		if got := d.sh(ctx, sb.ID, "agent", `cat /run/stead/token >/dev/null && curl -s -o /dev/null -w '%{http_code}' --unix-socket /run/stead/api.sock -H "Authorization: Bearer $(cat /run/stead/token)" http://stead/v1/sandboxes/$STEAD_SANDBOX/orient`); got != "200" {
			t.Fatalf("agent of %s through its socket: HTTP %s", sb.Name, got)
		}
	}

	var probes []probe
	counts := map[string]int{}
	add := func(op, p string) { probes = append(probes, probe{op, p}) }
	pool := filepath.Join(d.dataDir, "pool")
	for _, root := range []string{d.runDir, d.dataDir} {
		err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch {
			case p == pool:
				add("list", p)
				return fs.SkipDir
			case e.IsDir():
				add("list", p)
			case e.Type()&fs.ModeSocket != 0:
				add("connect", p)
				counts["socket"]++
			case e.Type().IsRegular():
				add("read", p)
				switch name := e.Name(); {
				case name == "token":
					counts["token"]++
				case strings.HasSuffix(name, ".key"):
					counts["key"]++
				case strings.HasPrefix(name, "stead.db"):
					counts["db"]++
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The API socket, two per sandbox (api.sock, init), both tokens,
	// admin/token/audit/secrets keys, stead.db with its -wal and -shm.
	if counts["socket"] < 1+2*len(ids) || counts["token"] != len(ids) || counts["key"] < 4 || counts["db"] != 3 {
		t.Fatalf("found %v by walking %s and %s", counts, d.runDir, d.dataDir)
	}
	for _, id := range ids {
		pid := strconv.Itoa(initPID(t, d, id))
		add("read", "/proc/"+pid+"/root/run/stead/token")
		add("connect", "/proc/"+pid+"/root/run/stead/api.sock")
		add("read", "/proc/"+pid+"/environ")
		add("list", d.rootDir(id))
		add("read", filepath.Join(d.rootDir(id), "etc/hostname"))
	}
	res := runAsNobody(t, probes)
	for i, p := range probes {
		if res[i] != syscall.EACCES.Error() {
			t.Errorf("nobody: %s %s: %s, want %s", p.Op, p.Path, res[i], syscall.EACCES.Error())
		}
	}
	if !t.Failed() {
		t.Logf("%d attempts by nobody, each refused (%v)", len(probes), counts)
	}

	// The modes themselves.
	for _, dir := range []string{d.dataDir, d.runDir} {
		if uid, m := ownerMode(t, dir); uid != 0 || m != fs.ModeDir|0o700 {
			t.Errorf("%s: uid %d mode %v, want root's drwx------", dir, uid, m)
		}
	}
	ents, _ := os.ReadDir(d.runDir)
	for _, e := range ents {
		p := filepath.Join(d.runDir, e.Name())
		uid, m := ownerMode(t, p)
		switch {
		case e.IsDir() && (uid != 0 || m != fs.ModeDir|0o700):
			t.Errorf("%s: uid %d mode %v, want root's drwx------", p, uid, m)
		case e.Type()&fs.ModeSocket != 0 && (uid != 0 || m.Perm() != 0o660):
			t.Errorf("API socket %s: uid %d mode %v, want root's 0660", p, uid, m)
		}
	}
	ents, _ = os.ReadDir(d.dataDir)
	for _, e := range ents {
		p := filepath.Join(d.dataDir, e.Name())
		if uid, m := ownerMode(t, p); e.Type().IsRegular() && (uid != 0 || m != 0o600) {
			t.Errorf("%s: uid %d mode %v, want root's -rw-------", p, uid, m)
		}
	}
}

// TestEnvironmentSecretIsNeverStoredInPlaintext: values given at create
// (the sandbox's env and its service's) reach the sandbox's processes, a
// fork and a restart, while no file of the data dir (the database, its
// WAL, the keys) holds them, the API shows the names with masked values,
// and neither the audit trail nor the daemon's log holds them.
func TestEnvironmentSecretIsNeverStoredInPlaintext(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	const secret, svcSecret = "sk-e2e-5ea1ed-9b1c7d", "svc-e2e-7e57a2"
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "sealed",
		Env: map[string]string{"OPENAI_API_KEY": secret},
		Service: &client.Service{Command: []string{"sh", "-c", `echo "$SVC_TOKEN" > /tmp/svc-token; exec sleep 1d`},
			Env: map[string]string{"SVC_TOKEN": svcSecret}}})
	if err != nil {
		t.Fatal(err)
	}
	seen := func(id string) string {
		t.Helper()
		return d.sh(ctx, id, "agent", `for i in $(seq 100); do [ -s /tmp/svc-token ] && break; sleep 0.05; done; printenv OPENAI_API_KEY; cat /tmp/svc-token`)
	}
	want := secret + "\n" + svcSecret + "\n"
	if got := seen(sb.ID); got != want {
		t.Fatalf("in the sandbox: %q, want %q", got, want)
	}
	snap, err := d.c.CreateSnapshot(ctx, sb.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	forks, err := d.c.Fork(ctx, snap.ID, client.ForkRequest{})
	if err != nil || len(forks) != 1 {
		t.Fatalf("fork: %v %v", forks, err)
	}
	if got := seen(forks[0].ID); got != want {
		t.Fatalf("in the fork: %q, want %q", got, want)
	}
	if _, err := d.c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := seen(sb.ID); got != want {
		t.Fatalf("after stop and start: %q, want %q", got, want)
	}

	// The API shows names with masked values.
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+d.addr+"/v1/sandboxes/"+sb.ID, nil)
	req.Header.Set("Authorization", "Bearer "+d.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if bytes.Contains(body, []byte(secret)) || bytes.Contains(body, []byte(svcSecret)) ||
		!bytes.Contains(body, []byte(`"OPENAI_API_KEY":"`+client.SecretMask+`"`)) || !bytes.Contains(body, []byte(`"SVC_TOKEN":"`+client.SecretMask+`"`)) {
		t.Fatalf("GET /v1/sandboxes/%s: %s", sb.ID, body)
	}

	// No file of the data dir holds a value, the live WAL included.
	if fi, err := os.Stat(filepath.Join(d.dataDir, "stead.db-wal")); err != nil || fi.Size() == 0 {
		t.Fatalf("no WAL to search: %v %v", fi, err)
	}
	pool := filepath.Join(d.dataDir, "pool")
	searched := 0
	err = filepath.WalkDir(d.dataDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == pool {
			if p == pool {
				return fs.SkipDir
			}
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		found, err := fileHolds(p, secret, svcSecret)
		if err != nil {
			return err
		}
		searched++
		for _, v := range found {
			t.Errorf("%s holds the value %q", p, v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var trail bytes.Buffer
	if err := d.c.ExportAudit(ctx, client.AuditQuery{}, &trail); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{secret, svcSecret} {
		if strings.Contains(trail.String(), v) || strings.Contains(d.logText(), v) {
			t.Errorf("the audit trail or the daemon log holds the value %q", v)
		}
	}
	if trail.Len() == 0 || searched < 5 {
		t.Fatalf("searched %d files and %d bytes of audit trail", searched, trail.Len())
	}
}

// fileHolds returns which of vals occur in the file at path. It reads only
// the file's data regions, a few MiB at a time (the pool image is a sparse
// file of many GiB).
func fileHolds(path string, vals ...string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	regions, sparse, err := fsutil.DataRegions(int(f.Fd()), fi.Size())
	if err != nil {
		return nil, err
	}
	if !sparse {
		regions = []fsutil.Region{{Off: 0, Len: fi.Size()}}
	}
	overlap := 0
	for _, v := range vals {
		overlap = max(overlap, len(v)-1)
	}
	found := map[string]bool{}
	buf := make([]byte, 4<<20+overlap)
	for _, r := range regions {
		for off := r.Off; off < r.Off+r.Len; off += 4 << 20 {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), r.Off+r.Len-off)], off)
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			for _, v := range vals {
				if bytes.Contains(buf[:n], []byte(v)) {
					found[v] = true
				}
			}
		}
	}
	var out []string
	for _, v := range vals {
		if found[v] {
			out = append(out, v)
		}
	}
	return out, nil
}
