package template

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/testutil"
)

// fakeHost lays out a host root with the secrets and oddities BuildHost must
// handle, and returns its path.
func fakeHost(t *testing.T) string {
	t.Helper()
	h := t.TempDir()
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	type node struct {
		path, data, link string
		mode             os.FileMode
		uid, gid         int
		dir              bool
	}
	nodes := []node{
		{path: "usr/bin", dir: true, mode: 0o755},
		{path: "usr/lib", dir: true, mode: 0o755},
		{path: "usr/share/ca/a.crt", data: "PUBLIC CERT\n", mode: 0o644},
		{path: "bin", link: "usr/bin"},
		{path: "sbin", link: "/usr/sbin"},
		{path: "lib", dir: true, mode: 0o755}, // not merged: must be bound
		{path: "opt/tool", dir: true, mode: 0o755},
		{path: "etc", dir: true, mode: 0o755},
		{path: "etc/passwd", data: "root:x:0:0:root:/root:/bin/bash\nhostadmin:x:1001:1001::/home/hostadmin:/bin/bash\n", mode: 0o644},
		{path: "etc/passwd-", data: "hostadmin:x:1001:1001::/home/hostadmin:/bin/bash\n", mode: 0o644},
		{path: "etc/group", data: "hostadmin:x:1001:\n", mode: 0o644},
		{path: "etc/shadow", data: "root:$6$SECRETHASHROOT:19000::::::\n", mode: 0o640, gid: 42},
		{path: "etc/shadow-", data: "root:$6$SECRETHASHOLD:19000::::::\n", mode: 0o640, gid: 42},
		{path: "etc/gshadow", data: "hostadmin:$6$SECRETHASHGROUP::\n", mode: 0o640, gid: 42},
		{path: "etc/subuid", data: "hostadmin:100000:65536\n", mode: 0o644},
		{path: "etc/machine-id", data: "0123456789abcdef0123456789abcdef\n", mode: 0o444},
		{path: "etc/hostname", data: "host-secret-name\n", mode: 0o644},
		{path: "etc/hosts", data: "10.1.2.3 host-secret-name\n", mode: 0o644},
		{path: "etc/resolv.conf", data: "nameserver 127.0.0.53\nnameserver 192.0.2.53\nsearch corp.example\noptions edns0\n", mode: 0o644},
		{path: "etc/ssh", dir: true, mode: 0o755},
		{path: "etc/ssh/ssh_config", data: "Host *\n", mode: 0o644},
		{path: "etc/ssh/ssh_host_ed25519_key", data: "SECRETHOSTKEY\n", mode: 0o600},
		{path: "etc/ssh/ssh_host_ed25519_key.pub", data: "ssh-ed25519 AAAA host\n", mode: 0o644},
		{path: "etc/ssl/certs", dir: true, mode: 0o755},
		{path: "etc/ssl/certs/a.pem", link: "/usr/share/ca/a.crt"},
		{path: "etc/ssl/private", dir: true, mode: 0o710, gid: 107},
		{path: "etc/ssl/private/snakeoil.key", data: "SECRETTLSKEY\n", mode: 0o640},
		{path: "etc/sudoers", data: "hostadmin ALL=(ALL) NOPASSWD: ALL SECRETSUDO\n", mode: 0o440},
		{path: "etc/sudoers.d", dir: true, mode: 0o750},
		{path: "etc/sudoers.d/hostadmin", data: "hostadmin ALL=(ALL) ALL SECRETSUDO\n", mode: 0o440},
		{path: "etc/stead/config.toml", data: "master_key = SECRETSTEAD\n", mode: 0o644},
		{path: "etc/docker/key.json", data: "SECRETDOCKER\n", mode: 0o644},
		{path: "etc/ppp/chap-secrets", data: "SECRETCHAP\n", mode: 0o644},
		{path: "etc/app/db.conf", data: "password=SECRETPERM\n", mode: 0o600},
		{path: "etc/app/public.conf", data: "colour=blue\n", mode: 0o604, uid: 123, gid: 456},
		{path: "etc/alternatives/editor", link: "/usr/bin/vim.basic"},
		{path: "etc/localtime", link: "/usr/share/zoneinfo/Etc/UTC"},
		{path: "etc/mtab", link: "../proc/self/mounts"},
		{path: "etc/ld.so.cache", data: "LDCACHE", mode: 0o644},
		{path: "etc/hard1", data: "same inode\n", mode: 0o644},
		{path: "etc/skel/.bashrc", data: "# bashrc\n", mode: 0o644},
		{path: "etc/skel/.profile", data: "# profile\n", mode: 0o644},
	}
	for _, n := range nodes {
		p := filepath.Join(h, n.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case n.link != "":
			if err := os.Symlink(n.link, p); err != nil {
				t.Fatal(err)
			}
			continue
		case n.dir:
			if err := os.MkdirAll(p, n.mode); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.WriteFile(p, []byte(n.data), n.mode); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(p, n.uid, n.gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, n.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(h, "etc/hard1"), filepath.Join(h, "etc/hard2")); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestBuildHostLeavesOutSecrets(t *testing.T) {
	testutil.RequireRoot(t)
	host := fakeHost(t)
	dst := filepath.Join(t.TempDir(), "tpl")
	if err := buildHost(context.Background(), host, dst); err != nil {
		t.Fatal(err)
	}

	// No secret marker anywhere in the template.
	err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, marker := range []string{"SECRET", "hostadmin", "host-secret-name", "0123456789abcdef"} {
			if bytes.Contains(data, []byte(marker)) {
				t.Errorf("%s contains %q", p, marker)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{
		"etc/ssh/ssh_host_ed25519_key", "etc/ssh/ssh_host_ed25519_key.pub", "etc/ssl/private/snakeoil.key",
		"etc/sudoers", "etc/sudoers.d/hostadmin", "etc/stead", "etc/docker/key.json", "etc/ppp/chap-secrets",
		"etc/app/db.conf", "etc/subuid", "etc/passwd-", "etc/shadow-",
	} {
		if _, err := os.Lstat(filepath.Join(dst, gone)); err == nil {
			t.Errorf("%s was copied", gone)
		}
	}
	for _, empty := range []string{"etc/ssl/private", "etc/sudoers.d"} {
		entries, err := os.ReadDir(filepath.Join(dst, empty))
		if err != nil || len(entries) != 0 {
			t.Errorf("%s: want an empty directory, got %v entries, err %v", empty, len(entries), err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dst, "etc/ssl/private")); err == nil {
		if fi.Mode().Perm() != 0o710 || fi.Sys().(*syscall.Stat_t).Gid != 107 {
			t.Errorf("etc/ssl/private: mode %v gid %d, want 0710 gid 107", fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid)
		}
	}

	// Generated account databases and identity files.
	wantFile(t, dst, "etc/passwd", hostPasswd)
	wantFile(t, dst, "etc/group", hostGroup)
	wantFile(t, dst, "etc/shadow", hostShadow)
	wantFile(t, dst, "etc/gshadow", hostGShadow)
	wantFile(t, dst, "etc/machine-id", "")
	wantFile(t, dst, "etc/hostname", Hostname+"\n")
	wantMode(t, dst, "etc/shadow", 0o640, 0, 42)
	hosts := readFile(t, dst, "etc/hosts")
	if !strings.Contains(hosts, "127.0.0.1\tlocalhost") || !strings.Contains(hosts, Hostname) {
		t.Errorf("etc/hosts = %q", hosts)
	}
	resolv := readFile(t, dst, "etc/resolv.conf")
	if strings.Contains(resolv, "127.0.0.53") || !strings.Contains(resolv, "nameserver 192.0.2.53") ||
		!strings.Contains(resolv, "search corp.example") {
		t.Errorf("etc/resolv.conf = %q", resolv)
	}

	// What is copied is copied faithfully.
	wantFile(t, dst, "etc/ssh/ssh_config", "Host *\n")
	wantFile(t, dst, "etc/app/public.conf", "colour=blue\n")
	wantMode(t, dst, "etc/app/public.conf", 0o604, 123, 456)
	for link, target := range map[string]string{
		"etc/ssl/certs/a.pem":     "/usr/share/ca/a.crt",
		"etc/alternatives/editor": "/usr/bin/vim.basic",
		"etc/localtime":           "/usr/share/zoneinfo/Etc/UTC",
		"etc/mtab":                "../proc/self/mounts",
		"bin":                     "usr/bin",
		"sbin":                    "/usr/sbin",
		"var/run":                 "../run",
	} {
		if got, err := os.Readlink(filepath.Join(dst, link)); err != nil || got != target {
			t.Errorf("%s -> %q (%v), want -> %q", link, got, err, target)
		}
	}
	fi1, err1 := os.Stat(filepath.Join(dst, "etc/hard1"))
	fi2, err2 := os.Stat(filepath.Join(dst, "etc/hard2"))
	if err1 != nil || err2 != nil || !os.SameFile(fi1, fi2) {
		t.Errorf("etc/hard1 and etc/hard2 are not one inode (%v, %v)", err1, err2)
	}
	if fi, err := os.Stat(filepath.Join(dst, "etc/ld.so.cache")); err != nil ||
		!fi.ModTime().Equal(time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)) {
		t.Errorf("etc/ld.so.cache mtime not kept: %v", err)
	}

	// Skeleton.
	for _, d := range []struct {
		path     string
		mode     os.FileMode
		uid, gid uint32
	}{
		{"workspace", 0o755, 1000, 1000}, {"data", 0o755, 1000, 1000}, {"home/agent", 0o755, 1000, 1000},
		{"root", 0o700, 0, 0}, {"tmp", os.ModeSticky | 0o777, 0, 0}, {"var/tmp", os.ModeSticky | 0o777, 0, 0},
		{"var/log", 0o755, 0, 0}, {"var/lib", 0o755, 0, 0}, {"var/cache", 0o755, 0, 0}, {"run", 0o755, 0, 0},
		{"srv", 0o755, 0, 0}, {"mnt", 0o755, 0, 0}, {"proc", 0o555, 0, 0}, {"sys", 0o555, 0, 0},
		{"dev", 0o755, 0, 0}, {".stead", 0o755, 0, 0},
		{"usr", 0o755, 0, 0}, {"lib", 0o755, 0, 0}, {"opt", 0o755, 0, 0}, // bind mount points
	} {
		wantMode(t, dst, d.path, d.mode|fs.ModeDir, int(d.uid), int(d.gid))
	}
	for _, p := range []string{"usr", "lib", "opt"} {
		if entries, _ := os.ReadDir(filepath.Join(dst, p)); len(entries) != 0 {
			t.Errorf("mount point /%s is not empty", p)
		}
	}
	wantFile(t, dst, "home/agent/.bashrc", "# bashrc\n")
	wantMode(t, dst, "home/agent/.profile", 0o644, 1000, 1000)

	// Mounts of this layout.
	mounts, links := hostLayout(host)
	var dests []string
	for _, m := range mounts {
		if !m.ReadOnly || m.Source != filepath.Join(host, m.Destination) {
			t.Errorf("mount %+v", m)
		}
		dests = append(dests, m.Destination)
	}
	if got := strings.Join(dests, " "); got != "/usr /lib /opt" {
		t.Errorf("mounts %q, want \"/usr /lib /opt\"", got)
	}
	if len(links) != 2 || links["bin"] != "usr/bin" || links["sbin"] != "/usr/sbin" {
		t.Errorf("links %v", links)
	}
}

func TestBuildHostRefusesNonEmptyDestination(t *testing.T) {
	dst := t.TempDir()
	keep := filepath.Join(dst, "keep")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := BuildHost(context.Background(), dst)
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("err = %v, want a not-empty error", err)
	}
	entries, _ := os.ReadDir(dst)
	if len(entries) != 1 {
		t.Errorf("destination changed: %d entries", len(entries))
	}
}

func TestBuildHostFromThisHost(t *testing.T) {
	testutil.RequireRoot(t)
	dst := filepath.Join(t.TempDir(), "tpl")
	start := time.Now()
	if err := BuildHost(context.Background(), dst); err != nil {
		t.Fatal(err)
	}
	t.Logf("BuildHost took %v", time.Since(start))

	hostShadow, err := os.ReadFile("/etc/shadow")
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, dst, "etc/shadow"); got == string(hostShadow) || strings.Contains(got, "$") {
		t.Errorf("template shadow looks like the host's: %q", got)
	}
	passwd := readFile(t, dst, "etc/passwd")
	for _, want := range []string{"root:x:0:0:", "agent:x:1000:1000:agent:/home/agent:/bin/bash"} {
		if !strings.Contains(passwd, want) {
			t.Errorf("passwd lacks %q", want)
		}
	}
	// Every symlink of the host's /etc/alternatives is kept as is.
	alts, err := os.ReadDir("/etc/alternatives")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alts {
		if a.Type()&fs.ModeSymlink == 0 {
			continue
		}
		want, _ := os.Readlink(filepath.Join("/etc/alternatives", a.Name()))
		if got, err := os.Readlink(filepath.Join(dst, "etc/alternatives", a.Name())); err != nil || got != want {
			t.Errorf("etc/alternatives/%s -> %q (%v), want %q", a.Name(), got, err, want)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(dst, "etc/ssl/private")); err == nil && len(entries) > 0 {
		t.Errorf("etc/ssl/private has %d entries", len(entries))
	}

	// HostMounts matches this merged-/usr host.
	mounts := HostMounts()
	seen := map[string]bool{}
	for _, m := range mounts {
		seen[m.Destination] = true
		if !m.ReadOnly || m.Source != m.Destination {
			t.Errorf("mount %+v", m)
		}
	}
	if !seen["/usr"] {
		t.Errorf("HostMounts lacks /usr: %+v", mounts)
	}
	if fi, err := os.Stat("/opt"); err == nil && fi.IsDir() && !seen["/opt"] {
		t.Errorf("HostMounts lacks /opt: %+v", mounts)
	}
	for _, name := range []string{"bin", "sbin", "lib", "lib64"} {
		target, err := os.Readlink("/" + name)
		if err != nil {
			continue // not a symlink on this host
		}
		if seen["/"+name] {
			t.Errorf("HostMounts binds /%s, a symlink on this host", name)
		}
		if got, err := os.Readlink(filepath.Join(dst, name)); err != nil || got != target {
			t.Errorf("/%s -> %q (%v), want %q", name, got, err, target)
		}
	}
}

func TestBuildHostRunsHostBinariesUnderChroot(t *testing.T) {
	testutil.RequireRoot(t)
	dst := filepath.Join(t.TempDir(), "tpl")
	if err := BuildHost(context.Background(), dst); err != nil {
		t.Fatal(err)
	}
	out := runChrooted(t, dst, HostMounts(), 0,
		`id agent && ls /usr/bin/env && cat /etc/hostname && `+
			`if touch /usr/stead-ro-probe 2>/dev/null; then echo usr-writable; exit 1; fi && `+
			`touch /etc/stead-rw-probe && echo ok`)
	for _, want := range []string{"uid=1000(agent) gid=1000(agent)", "/usr/bin/env", Hostname, "ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out = runChrooted(t, dst, HostMounts(), 1000,
		`id -un && touch /workspace/w /home/agent/h /data/d /tmp/t && echo $HOME-ok`)
	if !strings.Contains(out, "agent\n") || !strings.Contains(out, "-ok") {
		t.Errorf("agent run output:\n%s", out)
	}
}

// runChrooted runs script with /bin/sh chrooted into root (as uid:uid when
// uid is not 0), with mounts bound read-only, in a private mount namespace
// (unshare -m) so that the binds vanish with the command.
func runChrooted(t *testing.T, root string, mounts []Mount, uid int, script string) string {
	t.Helper()
	var sh strings.Builder
	sh.WriteString("set -e\n")
	for _, m := range mounts {
		target := filepath.Join(root, m.Destination)
		sh.WriteString("mount --bind " + shellQuote(m.Source) + " " + shellQuote(target) + "\n")
		if m.ReadOnly {
			sh.WriteString("mount -o remount,bind,ro " + shellQuote(target) + "\n")
		}
	}
	user := ""
	if uid != 0 {
		user = "--userspec=" + strconv.Itoa(uid) + ":" + strconv.Itoa(uid) + " "
	}
	sh.WriteString("exec env -i HOME=/home/agent PATH=/usr/sbin:/usr/bin:/sbin:/bin chroot " + user + shellQuote(root) +
		" /bin/sh -c " + shellQuote(script) + "\n")
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", sh.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chrooted run failed: %v\n%s", err, out)
	}
	return string(out)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func readFile(t *testing.T, root, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Errorf("read %s: %v", rel, err)
	}
	return string(data)
}

func wantFile(t *testing.T, root, rel, want string) {
	t.Helper()
	if got := readFile(t, root, rel); got != want {
		t.Errorf("%s = %q, want %q", rel, got, want)
	}
}

func wantMode(t *testing.T, root, rel string, mode os.FileMode, uid, gid int) {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(root, rel))
	if err != nil {
		t.Errorf("stat %s: %v", rel, err)
		return
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode() != mode || int(st.Uid) != uid || int(st.Gid) != gid {
		t.Errorf("%s: mode %v owner %d:%d, want %v %d:%d", rel, fi.Mode(), st.Uid, st.Gid, mode, uid, gid)
	}
}

func BenchmarkBuildHost(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	base := b.TempDir()
	for i := 0; b.Loop(); i++ {
		if err := BuildHost(context.Background(), filepath.Join(base, strconv.Itoa(i+1))); err != nil {
			b.Fatal(err)
		}
	}
}
