package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Mount is a bind mount the runtime adds to a sandbox started from a host
// template.
type Mount struct {
	// Source is the path on the host.
	Source string
	// Destination is the absolute path inside the sandbox.
	Destination string
	// ReadOnly asks for a read-only bind (MS_BIND then MS_REMOUNT|MS_RDONLY).
	ReadOnly bool
}

// hostTopLevel lists the top-level host directories a host template takes
// from the host at run time, in mount order. A real directory becomes a
// read-only bind mount; a symlink into /usr (merged /usr) is recreated in the
// template instead.
func hostTopLevel() []string {
	return []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "opt"}
}

// hostLayout inspects hostRoot and returns the bind mounts and the symlinks
// (name → target) of a host template.
func hostLayout(hostRoot string) ([]Mount, map[string]string) {
	var mounts []Mount
	links := map[string]string{}
	for _, name := range hostTopLevel() {
		p := filepath.Join(hostRoot, name)
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		switch {
		case fi.IsDir():
			mounts = append(mounts, Mount{Source: p, Destination: "/" + name, ReadOnly: true})
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				continue
			}
			t := strings.TrimPrefix(filepath.Clean(target), "/")
			if t == "usr" || strings.HasPrefix(t, "usr/") {
				// Merged /usr: the link resolves inside the /usr bind.
				links[name] = target
				continue
			}
			// A link elsewhere (say /opt -> /srv/opt): bind what it points to.
			resolved, err := filepath.EvalSymlinks(p)
			if err != nil {
				continue
			}
			if rfi, err := os.Stat(resolved); err == nil && rfi.IsDir() {
				mounts = append(mounts, Mount{Source: resolved, Destination: "/" + name, ReadOnly: true})
			}
		}
	}
	return mounts, links
}

// HostMounts returns the read-only bind mounts a sandbox started from a host
// template needs: /usr, /opt when the host has it, and /bin, /sbin, /lib… on
// a host whose /usr is not merged. On a merged-/usr host those are symlinks
// that BuildHost recreated in the template, so they are not listed. The
// result describes the host as it is now; call it at each sandbox start.
func HostMounts() []Mount {
	m, _ := hostLayout("/")
	return m
}

// BuildHost fills dst, which must be absent or an empty directory, with a
// host template: the skeleton of a root filesystem whose /usr (and other
// directories listed by HostMounts) the runtime bind-mounts read-only from the
// host, and a private writable copy of the host's /etc with every secret
// removed (see sensitiveEtc) and generated passwd, group, shadow, gshadow,
// hostname, hosts, resolv.conf and an empty machine-id. It must run as root
// (it preserves file owners). On error dst is left empty (or removed if
// BuildHost created it).
func BuildHost(ctx context.Context, dst string) error {
	return buildHost(ctx, "/", dst)
}

// skelDir is one directory of a template skeleton.
type skelDir struct {
	path     string
	mode     os.FileMode
	uid, gid int
}

// skeleton lists the directories every host template has, parents first.
func skeleton() []skelDir {
	return []skelDir{
		{"workspace", 0o755, AgentUID, AgentGID},
		{"data", 0o755, AgentUID, AgentGID},
		{"home", 0o755, 0, 0},
		{"home/agent", 0o755, AgentUID, AgentGID},
		{"root", 0o700, 0, 0},
		{"tmp", os.ModeSticky | 0o777, 0, 0},
		{"var", 0o755, 0, 0},
		{"var/tmp", os.ModeSticky | 0o777, 0, 0},
		{"var/log", 0o755, 0, 0},
		{"var/lib", 0o755, 0, 0},
		{"var/cache", 0o755, 0, 0},
		{"run", 0o755, 0, 0},
		{"srv", 0o755, 0, 0},
		{"mnt", 0o755, 0, 0},
		{"proc", 0o555, 0, 0},
		{"sys", 0o555, 0, 0},
		{"dev", 0o755, 0, 0},
		{".stead", 0o755, 0, 0},
	}
}

func buildHost(ctx context.Context, hostRoot, dst string) (err error) {
	start := time.Now()
	created, err := prepareEmptyDir(dst)
	if err != nil {
		return fmt.Errorf("build host template %s: %w", dst, err)
	}
	defer func() {
		if err != nil {
			cleanupDir(dst, created)
			err = fmt.Errorf("build host template %s: %w", dst, err)
		}
	}()
	if _, err := os.Stat(filepath.Join(hostRoot, "usr")); err != nil {
		return fmt.Errorf("host has no /usr: %w", err)
	}
	if err := os.Chmod(dst, 0o755); err != nil {
		return fmt.Errorf("chmod root: %w", err)
	}

	mounts, links := hostLayout(hostRoot)
	for _, m := range mounts {
		if err := mkdirOwned(filepath.Join(dst, m.Destination), 0o755, 0, 0); err != nil {
			return err
		}
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dst, name)); err != nil {
			return fmt.Errorf("create symlink /%s: %w", name, err)
		}
	}
	for _, d := range skeleton() {
		if err := mkdirOwned(filepath.Join(dst, d.path), d.mode, d.uid, d.gid); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"var/run": "../run", "var/lock": "../run/lock"} {
		if err := os.Symlink(target, filepath.Join(dst, name)); err != nil {
			return fmt.Errorf("create symlink /%s: %w", name, err)
		}
	}

	if err := copyEtc(ctx, filepath.Join(hostRoot, "etc"), filepath.Join(dst, "etc")); err != nil {
		return err
	}
	if err := writeHostEtc(hostRoot, filepath.Join(dst, "etc")); err != nil {
		return err
	}
	if err := copySkel(filepath.Join(hostRoot, "etc", "skel"), filepath.Join(dst, "home", "agent")); err != nil {
		return err
	}
	slog.Debug("built host template", "dst", dst, "dur", time.Since(start))
	return nil
}

// prepareEmptyDir makes sure dst is an empty directory, creating it (and
// reporting so) when absent.
func prepareEmptyDir(dst string) (created bool, err error) {
	entries, err := os.ReadDir(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(dst, 0o755); err != nil {
			return false, fmt.Errorf("create destination: %w", err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("read destination: %w", err)
	case len(entries) > 0:
		return false, fmt.Errorf("destination is not empty (%d entries)", len(entries))
	}
	return false, nil
}

// cleanupDir undoes a failed build: it removes dst if the build created it,
// else empties it.
func cleanupDir(dst string, created bool) {
	if created {
		if err := os.RemoveAll(dst); err != nil {
			slog.Warn("remove failed template", "dst", dst, "err", err)
		}
		return
	}
	entries, err := os.ReadDir(dst)
	if err != nil {
		slog.Warn("clean failed template", "dst", dst, "err", err)
		return
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dst, e.Name())); err != nil {
			slog.Warn("clean failed template", "dst", dst, "err", err)
		}
	}
}

// mkdirOwned creates one directory (or adopts an existing one) with exactly
// mode (umask ignored) and owner uid:gid.
func mkdirOwned(p string, mode os.FileMode, uid, gid int) error {
	if err := os.Mkdir(p, mode.Perm()); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create directory %s: %w", p, err)
	}
	if err := os.Lchown(p, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", p, err)
	}
	if err := os.Chmod(p, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", p, err)
	}
	return nil
}

// replacedEtc lists the /etc entries a host template never copies because
// BuildHost writes its own version of them.
func replacedEtc(rel string) bool {
	switch rel {
	case "passwd", "passwd-", "group", "group-", "shadow", "shadow-", "gshadow", "gshadow-",
		"hostname", "hosts", "resolv.conf", "machine-id":
		return true
	}
	return false
}

// sensitiveEtc reports whether the /etc entry rel (slash-separated, relative
// to /etc) may hold a secret or the host's identity, and so must not be copied
// into a host template. For a directory, emptyDir asks to create it without
// its contents (packages expect it to exist). What counts as sensitive:
//
//   - account databases and their backups or locks beyond the ones BuildHost
//     regenerates: passwd.*, group.*, shadow*, gshadow*, subuid*, subgid*,
//     .pwd.lock, security/opasswd (old password hashes);
//   - host keys and identity: ssh/ssh_host_* and anything with "key" in its
//     name under ssh/, machine-id (written empty), krb5.keytab and every
//     *.keytab, *.key, *_key, *.keyring, *.p12, *.pfx, any directory named
//     "private" (ssl/private, ipsec.d/private, pki/tls/private);
//   - privilege policy of the host: sudoers, sudoers.d, polkit rules;
//   - stored credentials: any name containing "secret" (ipsec.secrets,
//     ppp/chap-secrets, ldap.secret), NetworkManager/system-connections,
//     wpa_supplicant, netplan, wireguard, openvpn, letsencrypt,
//     docker/key.json, docker/certs.d, containers/auth.json, kubernetes,
//     rancher, gitlab-runner, cloud (cloud-init datasources), apt/auth.conf
//     and apt/auth.conf.d, mysql/debian.cnf, samba/smbpasswd, sssd, ceph
//     keyrings, iscsi (CHAP passwords), libvirt/secrets, postfix/sasl_passwd,
//     exim4/passwd.client, default/cacerts (the Java keystore password),
//     crypttab and cryptsetup-keys.d (disk encryption keys);
//   - stead's own configuration (stead/), which holds the repository keys;
//   - as a catch-all, any regular file that is not world-readable and any
//     directory that others cannot list and enter: on a Debian host such a
//     mode marks a secret (shadow, ssh host keys, pg_hba.conf …).
func sensitiveEtc(rel string, fi fs.FileInfo) (skip, emptyDir bool) {
	base := filepath.Base(rel)
	lbase := strings.ToLower(base)
	top := rel
	if i := strings.IndexByte(rel, '/'); i >= 0 {
		top = rel[:i]
	}
	isDir := fi.IsDir()

	switch top {
	case "stead", "sudoers", "wireguard", "openvpn", "letsencrypt", "kubernetes",
		"rancher", "gitlab-runner", "cloud", "sssd", "ceph", "iscsi", "netplan",
		"wpa_supplicant", "crypttab", "cryptsetup-keys.d", "krb5.keytab", ".pwd.lock":
		return true, false
	case "sudoers.d":
		return true, rel == "sudoers.d"
	}
	if rel == top && (strings.HasPrefix(base, "passwd.") || strings.HasPrefix(base, "group.") ||
		strings.HasPrefix(base, "shadow") || strings.HasPrefix(base, "gshadow") ||
		strings.HasPrefix(base, "subuid") || strings.HasPrefix(base, "subgid")) {
		return true, false
	}
	switch rel {
	case "security/opasswd", "docker/key.json", "containers/auth.json", "apt/auth.conf",
		"mysql/debian.cnf", "samba/smbpasswd", "postfix/sasl_passwd", "postfix/sasl_passwd.db",
		"exim4/passwd.client", "default/cacerts":
		return true, false
	case "docker/certs.d", "apt/auth.conf.d", "libvirt/secrets", "polkit-1/rules.d",
		"NetworkManager/system-connections":
		return true, true
	}
	if top == "ssh" && (strings.Contains(lbase, "key") || strings.HasPrefix(lbase, "ssh_host_")) {
		return true, false
	}
	if isDir && base == "private" {
		return true, true
	}
	if strings.Contains(lbase, "secret") {
		return true, isDir
	}
	for _, suf := range []string{".key", "_key", ".keytab", ".keyring", ".p12", ".pfx"} {
		if !isDir && strings.HasSuffix(lbase, suf) {
			return true, false
		}
	}
	perm := fi.Mode().Perm()
	switch {
	case fi.Mode().IsRegular() && perm&0o004 == 0:
		return true, false
	case isDir && perm&0o005 != 0o005:
		return true, true
	}
	return false, false
}

// devIno identifies an inode, to keep hardlinks hardlinked.
type devIno struct{ dev, ino uint64 }

// copyEtc copies the host's /etc (src) to dst faithfully — modes, owners,
// mtimes, symlinks and hardlinks — leaving out what replacedEtc and
// sensitiveEtc exclude and special files (sockets, fifos, devices).
func copyEtc(ctx context.Context, src, dst string) error {
	type dirTimes struct {
		path  string
		mtime time.Time
	}
	var dirs []dirTimes
	links := map[devIno]string{}
	n := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, walkErr error) error {
		if walkErr != nil {
			return walkErr
		}
		if n++; n%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("stat %s: no owner information", p)
		}
		uid, gid := int(st.Uid), int(st.Gid)
		if rel != "." {
			rel = filepath.ToSlash(rel)
			if replacedEtc(rel) {
				return skipEntry(d)
			}
			if skip, emptyDir := sensitiveEtc(rel, fi); skip {
				slog.Debug("host template: leave out sensitive file", "path", "/etc/"+rel)
				if emptyDir {
					if err := mkdirOwned(target, fi.Mode()&(fs.ModePerm|fs.ModeSetgid|fs.ModeSticky), uid, gid); err != nil {
						return err
					}
					dirs = append(dirs, dirTimes{target, fi.ModTime()})
				}
				return skipEntry(d)
			}
		}
		mode := fi.Mode()
		switch {
		case mode.IsDir():
			if err := mkdirOwned(target, mode&(fs.ModePerm|fs.ModeSetgid|fs.ModeSticky|fs.ModeSetuid), uid, gid); err != nil {
				return err
			}
			dirs = append(dirs, dirTimes{target, fi.ModTime()})
			return nil
		case mode&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("read symlink %s: %w", p, err)
			}
			if err := os.Symlink(link, target); err != nil {
				return fmt.Errorf("create symlink %s: %w", target, err)
			}
			if err := os.Lchown(target, uid, gid); err != nil {
				return fmt.Errorf("chown %s: %w", target, err)
			}
			return setTimes(target, fi.ModTime())
		case mode.IsRegular():
			key := devIno{uint64(st.Dev), st.Ino}
			if st.Nlink > 1 {
				if first, ok := links[key]; ok {
					if err := os.Link(first, target); err != nil {
						return fmt.Errorf("hardlink %s: %w", target, err)
					}
					return nil
				}
				links[key] = target
			}
			return copyRegular(p, target, mode, uid, gid, fi.ModTime())
		default:
			slog.Debug("host template: leave out special file", "path", p)
			return nil
		}
	})
	if err != nil {
		return fmt.Errorf("copy /etc: %w", err)
	}
	// Set directory times last: creating entries changes them.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := setTimes(dirs[i].path, dirs[i].mtime); err != nil {
			return fmt.Errorf("copy /etc: %w", err)
		}
	}
	return nil
}

// skipEntry tells WalkDir to leave out d (and, for a directory, its contents).
func skipEntry(d fs.DirEntry) error {
	if d.IsDir() {
		return filepath.SkipDir
	}
	return nil
}

// copyRegular copies one regular file (copy_file_range, so a reflink where
// the file system offers one) with its mode, owner and mtime.
func copyRegular(src, dst string, mode fs.FileMode, uid, gid int, mtime time.Time) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("close %s: %w", dst, err)
	}
	if err := os.Lchown(dst, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", dst, err)
	}
	// Chmod after chown: chown clears the setuid and setgid bits.
	if err := os.Chmod(dst, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return fmt.Errorf("chmod %s: %w", dst, err)
	}
	return setTimes(dst, mtime)
}

// setTimes sets the access and modification times of p (not following a
// symlink) to mtime.
func setTimes(p string, mtime time.Time) error {
	ts := []unix.Timespec{unix.NsecToTimespec(mtime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times of %s: %w", p, err)
	}
	return nil
}

// writeHostEtc writes the generated files of a host template's /etc.
func writeHostEtc(hostRoot, etc string) error {
	files := []struct {
		name string
		data string
		mode os.FileMode
		gid  int
	}{
		{"passwd", hostPasswd, 0o644, 0},
		{"group", hostGroup, 0o644, 0},
		{"shadow", hostShadow, 0o640, 42},
		{"gshadow", hostGShadow, 0o640, 42},
		{"hostname", Hostname + "\n", 0o644, 0},
		{"hosts", "127.0.0.1\tlocalhost\n" +
			"::1\tlocalhost ip6-localhost ip6-loopback\n" +
			"127.0.1.1\t" + Hostname + "\n", 0o644, 0},
		{"resolv.conf", resolvConf(filepath.Join(hostRoot, "etc", "resolv.conf")), 0o644, 0},
		// Empty: systemd and dbus treat it as "not yet initialised"; the
		// runtime may write a per-sandbox id.
		{"machine-id", "", 0o444, 0},
	}
	for _, f := range files {
		if err := writeFileOwned(filepath.Join(etc, f.name), []byte(f.data), f.mode, 0, f.gid); err != nil {
			return err
		}
	}
	return nil
}

// writeFileOwned creates p (which must not exist) with data, exactly mode and
// owner uid:gid.
func writeFileOwned(p string, data []byte, mode os.FileMode, uid, gid int) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", p, err)
	}
	if err := os.Lchown(p, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", p, err)
	}
	if err := os.Chmod(p, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", p, err)
	}
	return nil
}

// resolvConf derives a sandbox resolv.conf from the host's: it keeps the
// search, domain and options lines and every nameserver that is not a
// loopback address (a host-local stub resolver such as systemd-resolved's
// 127.0.0.53 is unreachable from a sandbox's network namespace).
func resolvConf(hostPath string) string {
	var b strings.Builder
	b.WriteString("# Generated by stead from the host's resolver configuration.\n")
	data, err := os.ReadFile(hostPath)
	if err != nil {
		b.WriteString("# The host has none; no name servers configured.\n")
		return b.String()
	}
	servers := 0
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			ip := net.ParseIP(f[1])
			if ip == nil || ip.IsLoopback() {
				continue
			}
			servers++
		case "search", "domain", "options":
		default:
			continue
		}
		b.WriteString(strings.Join(f, " "))
		b.WriteByte('\n')
	}
	if servers == 0 {
		b.WriteString("# No usable name server on the host (loopback ones are left out).\n")
	}
	return b.String()
}

// copySkel copies the regular files at the top of the host's /etc/skel
// (.bashrc, .profile, .bash_logout) into home, owned by the agent.
func copySkel(skel, home string) error {
	entries, err := os.ReadDir(skel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read /etc/skel: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return fmt.Errorf("read /etc/skel: %w", err)
		}
		src := filepath.Join(skel, e.Name())
		if err := copyRegular(src, filepath.Join(home, e.Name()), fi.Mode(), AgentUID, AgentGID, fi.ModTime()); err != nil {
			return fmt.Errorf("copy skeleton file: %w", err)
		}
	}
	return nil
}
