package daemon

import (
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Nothing of a sandbox is reachable by another host user. The data dir
// (database, keys, pool) and the run dir are 0700 and owned by the
// daemon's user (root), made so or narrowed at every start; every file at
// the top of the data dir (the database and its -wal/-shm, the keys, the
// lock) is 0600; the per-sandbox directories under the run dir (agent
// sockets and tokens, init sockets and configs, runtime state, staged
// volume mounts) sit in 0700 directories of their own, so no host user can
// reach them whatever the modes below (a sandbox reaches its own through
// the bind mount of its directory, whose parent it never sees).

// runSubdirs are the run dir's per-sandbox parents.
var runSubdirs = []string{"api", "sandboxes", "containers", "stage"}

// privateDir makes dir (0700) or narrows an existing one to 0700 and the
// daemon's user, logging what it changed.
func privateDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return private(dir, fi, 0o700, log)
}

// private narrows path (described by fi) to mode and the daemon's user.
func private(path string, fi fs.FileInfo, mode fs.FileMode, log *slog.Logger) error {
	uid, gid := os.Geteuid(), os.Getegid()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != uid || int(st.Gid) != gid) {
		if err := os.Chown(path, uid, gid); err != nil {
			return fmt.Errorf("take ownership of %s: %w", path, err)
		}
		log.Warn("took ownership: it must be reachable by the daemon's user only", "path", path,
			"owner", strconv.Itoa(int(st.Uid))+":"+strconv.Itoa(int(st.Gid)), "now", strconv.Itoa(uid)+":"+strconv.Itoa(gid))
	}
	if old := fi.Mode().Perm(); old&^mode != 0 {
		if err := os.Chmod(path, old&mode); err != nil {
			return fmt.Errorf("narrow the permissions of %s: %w", path, err)
		}
		log.Warn("narrowed permissions: it must be reachable by the daemon's user only", "path", path,
			"mode", fmt.Sprintf("%04o", old), "now", fmt.Sprintf("%04o", old&mode))
	}
	return nil
}

// privateFilesIn narrows every regular file directly in dir to 0600 (no
// group or other bits) and the daemon's user.
func privateFilesIn(dir string, log *slog.Logger) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if err := private(filepath.Join(dir, e.Name()), fi, 0o600, log); err != nil {
			return err
		}
	}
	return nil
}

// privateFile narrows an existing regular file to 0600; an absent one is
// no error.
func privateFile(path string, log *slog.Logger) error {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	return private(path, fi, 0o600, log)
}

// prepareDirs makes the data and run dirs and their private parts, and
// narrows what an older stead (or an operator) left reachable.
func prepareDirs(cfg Config, log *slog.Logger) error {
	for _, d := range []string{cfg.DataDir, cfg.RunDir} {
		if err := privateDir(d, log); err != nil {
			return err
		}
	}
	for _, d := range runSubdirs {
		if err := privateDir(filepath.Join(cfg.RunDir, d), log); err != nil {
			return err
		}
	}
	if err := privateFilesIn(cfg.DataDir, log); err != nil {
		return err
	}
	if cfg.RepoKeyFile != "" {
		return privateFile(cfg.RepoKeyFile, log)
	}
	return nil
}

// listenUnixPrivate listens on a unix socket at path that only the
// daemon's user and group can connect to (0660). The socket is bound in a
// fresh 0700 directory beside path, given its mode there and renamed into
// place, so it never exists at path with looser permissions, whatever the
// umask.
func listenUnixPrivate(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	tmp, err := os.MkdirTemp(dir, ".stead-sock-")
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	defer os.RemoveAll(tmp)
	// Bind through a descriptor of tmp: a short name, however long path.
	d, err := os.OpenFile(tmp, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	defer d.Close()
	bound := "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/s"
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(filepath.Join(tmp, "s"), 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Rename(filepath.Join(tmp, "s"), path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return ln, nil
}
