package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

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

// The pins: each sandbox's network namespace is held by a bind mount of
// its namespace file (so that it has a name, outlives the process that
// made it and survives a daemon restart). Those mounts are not the
// host's: a mount namespace copies every mount of its parent's, and the
// runtime makes one per sandbox, so a pin per running sandbox in the
// host's namespace made every create copy (and its init's pivot_root
// detach) one mount per sandbox already running. They live in a mount
// namespace of their own instead, which holds nothing else (a tmpfs root,
// a procfs and the pins under /ns: no filesystem of the host is kept
// busy by it). It is held by a bind mount of its namespace file at
// RunDir/pins, which the next daemon joins; a mount namespace file is one
// mount the runtime's namespaces do not copy.

// pinsHolder is the file under RunDir the pins' mount namespace is held on.
const pinsHolder = "pins"

// pins is the mount namespace the Manager's network-namespace pins live
// in.
type pins struct {
	holder string   // the bind mount of mntns in the host's namespace
	mntns  *os.File // the namespace
	dir    *os.File // its /ns (O_PATH), through which the host reaches the pins
}

// openPins joins the pins' namespace held at RunDir/pins, or makes it.
// Pins an earlier version left in the host's namespace (RunDir/ns) are
// moved into it.
func openPins(runDir string) (*pins, error) {
	p := &pins{holder: filepath.Join(runDir, pinsHolder)}
	if isNS(p.holder, unix.CLONE_NEWNS) {
		f, err := os.Open(p.holder)
		if err != nil {
			return nil, fmt.Errorf("open the netns pins' namespace: %w", err)
		}
		p.mntns = f
		if err := p.in(func() error {
			d, err := os.OpenFile("/ns", unix.O_PATH|unix.O_DIRECTORY, 0)
			p.dir = d
			return err
		}); err != nil {
			f.Close()
			return nil, fmt.Errorf("open the netns pins: %w", err)
		}
	} else if err := p.create(runDir); err != nil {
		return nil, err
	}
	if err := p.adoptHostPins(filepath.Join(runDir, "ns")); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// create makes the pins' namespace: a thread unshares a mount namespace,
// mounts a tmpfs over runDir in it only, pivots into that and detaches
// the rest; the host's side binds the namespace at p.holder.
func (p *pins) create(runDir string) error {
	if err := touch(p.holder); err != nil {
		return err
	}
	step := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	err := onThrowAwayThread(func() error {
		if err := step("unshare a mount namespace", unix.Unshare(unix.CLONE_FS|unix.CLONE_NEWNS)); err != nil {
			return err
		}
		if err := step("make its mounts private", unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")); err != nil {
			return err
		}
		const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
		if err := step("mount its root", unix.Mount("stead-pins", runDir, "tmpfs", flags, "mode=700,size=1m")); err != nil {
			return err
		}
		for _, d := range []string{"proc", "ns"} {
			if err := step("make its root", os.Mkdir(filepath.Join(runDir, d), 0o700)); err != nil {
				return err
			}
		}
		// A procfs of the host's PID namespace: bind sources are named
		// through /proc/self/fd and /proc/thread-self.
		if err := step("mount its proc", unix.Mount("proc", filepath.Join(runDir, "proc"), "proc", flags, "")); err != nil {
			return err
		}
		if err := step("enter its root", unix.Chdir(runDir)); err != nil {
			return err
		}
		if err := step("pivot into its root", unix.PivotRoot(".", ".")); err != nil {
			return err
		}
		if err := step("detach the host's mounts", unix.Unmount(".", unix.MNT_DETACH)); err != nil {
			return err
		}
		if err := step("enter its root", unix.Chdir("/")); err != nil {
			return err
		}
		mntns, err := os.Open("/proc/thread-self/ns/mnt")
		if err != nil {
			return step("open it", err)
		}
		dir, err := os.OpenFile("/ns", unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			mntns.Close()
			return step("open its /ns", err)
		}
		p.mntns, p.dir = mntns, dir
		return nil
	})
	if err != nil {
		os.Remove(p.holder)
		return fmt.Errorf("make the netns pins' namespace: %w", err)
	}
	if err := unix.Mount(fdPath(p.mntns), p.holder, "", unix.MS_BIND, ""); err != nil {
		p.close()
		os.Remove(p.holder)
		return fmt.Errorf("hold the netns pins' namespace at %s: %w", p.holder, err)
	}
	return nil
}

// adoptHostPins moves the pins an earlier version made in the host's
// namespace (under dir) into p, and removes dir.
func (p *pins) adoptHostPins(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, e := range ents {
		old := filepath.Join(dir, e.Name())
		if isNetNS(old) && !isNetNS(p.path(e.Name())) {
			if err := p.bind(old, e.Name()); err != nil {
				return err
			}
		}
		if err := unpin(old); err != nil {
			return err
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// unpin unmounts every namespace mounted at path and removes the file
// (idempotent). It works on the caller thread's mount namespace: the
// host's for the pins of an earlier version, the pins' own in p.in.
func unpin(path string) error {
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

// path names the pin key from the host's namespace (through the
// descriptor of the pins' /ns, which stays in theirs).
func (p *pins) path(key string) string { return fdPath(p.dir) + "/" + key }

// fdPath is the /proc/self/fd path of f.
func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

// in runs f on a throw-away OS thread that has joined the pins'
// namespace (its root is the pins' root: /ns, /proc).
func (p *pins) in(f func() error) error {
	return onThrowAwayThread(func() error {
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return fmt.Errorf("unshare fs: %w", err)
		}
		if err := unix.Setns(int(p.mntns.Fd()), unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("join the pins' namespace: %w", err)
		}
		return f()
	})
}

// onThrowAwayThread runs f on an OS thread of its own that ends with it,
// for f to change the thread's namespaces and root. Never the process's
// main thread: Go cannot end that one (a goroutine that exits locked to
// it wedges it instead), and /proc/self/* (mountinfo, root, cwd) shows
// that thread's view, which must stay the host's.
func onThrowAwayThread(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		// No UnlockOSThread: the goroutine exits locked, so the runtime
		// terminates the thread with whatever f made of it.
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread: held here, the one started now runs on
			// another.
			errc <- onThrowAwayThread(f)
			runtime.UnlockOSThread()
			return
		}
		errc <- f()
	}()
	return <-errc
}

// createNetNS makes a new network namespace pinned at key (which must not be
// pinned yet).
func (p *pins) createNetNS(key string) error {
	err := p.in(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare netns: %w", err)
		}
		return pinAt("/proc/thread-self/ns/net", key)
	})
	if err != nil {
		return fmt.Errorf("make netns %s: %w", key, err)
	}
	return nil
}

// bind pins the namespace at src (a path in the host's namespace, such
// as /proc/<pid>/ns/net) at key.
func (p *pins) bind(src, key string) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("hold netns %s: %w", src, err)
	}
	defer f.Close()
	if !isNetNS(fdPath(f)) {
		return fmt.Errorf("hold netns %s: not a network namespace", src)
	}
	if err := p.in(func() error { return pinAt(fdPath(f), key) }); err != nil {
		return fmt.Errorf("hold netns %s: %w", src, err)
	}
	return nil
}

// remove unpins key (idempotent).
func (p *pins) remove(key string) error {
	if _, err := os.Lstat(p.path(key)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return p.in(func() error { return unpin("/ns/" + key) })
}

// pinAt bind-mounts the namespace file src at /ns/key; the caller's
// thread is in the pins' namespace (p.in).
func pinAt(src, key string) error {
	if err := touch("/ns/" + key); err != nil {
		return err
	}
	if err := unix.Mount(src, "/ns/"+key, "", unix.MS_BIND, ""); err != nil {
		os.Remove("/ns/" + key)
		return fmt.Errorf("bind-mount a netns at %s: %w", key, err)
	}
	return nil
}

// list names the pins.
func (p *pins) list() ([]string, error) {
	ents, err := os.ReadDir(fdPath(p.dir))
	if err != nil {
		return nil, fmt.Errorf("list the netns pins: %w", err)
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// close lets go of the namespace, and, when it holds no pin, of its
// holder too: the namespace and everything in it go with it.
func (p *pins) close() error {
	var err error
	if names, lerr := p.list(); lerr == nil && len(names) == 0 {
		if uerr := unix.Unmount(p.holder, unix.MNT_DETACH); uerr == nil {
			os.Remove(p.holder)
		} else if !errors.Is(uerr, unix.EINVAL) {
			err = fmt.Errorf("unmount the netns pins' namespace at %s: %w", p.holder, uerr)
		}
	}
	if p.dir != nil {
		p.dir.Close()
	}
	if p.mntns != nil {
		p.mntns.Close()
	}
	return err
}

// touch makes the empty file a namespace is bind-mounted on.
func touch(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o400)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return f.Close()
}

// isNS reports whether path is a namespace file of the type given
// (CLONE_NEW*).
func isNS(path string, typ int) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	t, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	return err == nil && t == typ
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
