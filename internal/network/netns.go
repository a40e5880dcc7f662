package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// nsfsMagic is the f_type statfs reports for a namespace file (NSFS_MAGIC).
const nsfsMagic = 0x6e736673

// isNetNS reports whether path is a bind-mounted namespace file.
func isNetNS(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == nsfsMagic
}

// mountPoint makes the file a namespace is bind-mounted on.
func mountPoint(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create netns dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o400)
	if err != nil {
		return fmt.Errorf("create netns file %s: %w", path, err)
	}
	_ = f.Close()
	return nil
}

// createNetNS makes a new network namespace and bind-mounts it at path
// (which must not be a namespace yet). It runs on a throw-away OS thread:
// the thread that unshared is never returned to the Go scheduler.
func createNetNS(path string) error {
	if err := mountPoint(path); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		// No UnlockOSThread: the goroutine exits locked, so the runtime
		// terminates the thread, which is in the new namespace.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare netns: %w", err)
			return
		}
		if err := unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("bind-mount netns at %s: %w", path, err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// bindNetNS holds the namespace at src (a /proc/<pid>/ns/net) by a bind
// mount at path.
func bindNetNS(src, path string) error {
	if !isNetNS(src) {
		return fmt.Errorf("hold netns %s: not a network namespace", src)
	}
	if err := mountPoint(path); err != nil {
		return err
	}
	if err := unix.Mount(src, path, "", unix.MS_BIND, ""); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("bind-mount netns %s at %s: %w", src, path, err)
	}
	return nil
}

// sameFile reports whether a and b are the same namespace (inode and
// device).
func sameFile(a, b string) bool {
	var sa, sb unix.Stat_t
	if unix.Stat(a, &sa) != nil || unix.Stat(b, &sb) != nil {
		return false
	}
	return sa.Ino == sb.Ino && sa.Dev == sb.Dev
}

// removeNetNS unmounts and removes a netns file (idempotent).
func removeNetNS(path string) error {
	for isNetNS(path) {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				break
			}
			return fmt.Errorf("unmount netns %s: %w", path, err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns file %s: %w", path, err)
	}
	return nil
}

// inNetNS runs f on an OS thread that has joined the namespace at path.
// The sockets f opens stay in that namespace; f must not start goroutines
// that expect to be in it.
func inNetNS(path string, f func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open own netns: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("join netns %s: %w", path, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Leave the thread locked: it dies with the goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("return to own netns: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// writeSysctl writes a value under /proc/sys (in the caller thread's
// network namespace for net.* keys).
func writeSysctl(key, value string) error {
	p := filepath.Join("/proc/sys", filepath.FromSlash(key))
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("write sysctl %s: %w", key, err)
	}
	return nil
}
