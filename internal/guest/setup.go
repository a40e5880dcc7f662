package guest

import (
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A sandbox's setup, done by init itself (Config.Setup). The runtime
// starts init in the sandbox's new namespaces (user, mount, pid, network,
// IPC, UTS) still seeing the host's mount tree, with the sandbox's root
// and its bind mounts as detached mount trees the host made (idmapped,
// read-only where asked). Init attaches the root, makes every mount under
// it, pivots into it, names the host, brings up loopback and drops its
// capabilities; it says so on the setup socket and waits for the runtime's
// go (cgroups joined, network attached) before it serves anything.
//
// The root is the agent's and may hold anything where a mount goes: every
// target is resolved inside it with openat2 RESOLVE_IN_ROOT and no magic
// link, and mounted on through the descriptor it resolved to, so a symlink
// can move a mount only within the sandbox's own tree. The new file
// systems at the root's top (/proc, /dev, /sys, /tmp) follow no symlink at
// all: a symlink or file there is replaced by an empty directory.

// setupDoneArg, after SandboxInitArg in init's arguments, marks an init
// re-executed after its setup (the fallback where capabilities cannot be
// dropped on every thread). An argument, set by init alone: the
// environment is the sandbox's.
const setupDoneArg = "--setup-done"

// ShellArg, after SandboxInitArg in init's arguments, starts init as a
// shell: in the sandbox's new namespaces, as the runtime spawns it, but
// with no sandbox yet. It waits on the setup socket for the runtime's
// claim, which hands it a sandbox (awaitClaim), and goes on as an init
// spawned for that sandbox. The runtime keeps a few shells ready so that a
// start skips the fork, the id maps and the cgroup join. An argument, set
// by the runtime alone.
const ShellArg = "--shell"

// BoundingArg, after ShellArg, names the capabilities every sandbox the
// shell may be claimed for keeps in its bounding set (numbers, comma
// separated): the shell drops the others from its bounding set while it
// waits (narrowBounding), so that the claim's setup has only the last
// steps of dropCaps left. An argument, set by the runtime alone.
const BoundingArg = "--bounding="

// claimMsg is the payload of the runtime's claim of a shell.
const claimMsg = "claim"

// ShellWaitingMsg is what a shell says on its setup socket once it waits
// for its claim in its own root (prepareShell done); an error is
// "error: " and its text.
const ShellWaitingMsg = "waiting"

// maxClaimFiles bounds the descriptors of a claim: the log, the listening
// socket, the config and the trees, in one message (the kernel's
// SCM_MAX_FD).
const maxClaimFiles = 253

// awaitClaim waits, in a shell, for the runtime's claim on the setup
// socket: descriptors of the sandbox's log, init socket, config and trees
// (the root's first). The log goes to stdout and stderr, the socket and
// the config to ListenFD and ConfigFD (where a spawned init has them: the
// shell was started with placeholders there); the trees stay where they
// arrived and are returned, in order. An end of file (the runtime gave the
// shell up, or is gone) is an error: init exits.
func awaitClaim() ([]int, error) {
	b := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(4*maxClaimFiles))
	n, oobn, _, _, err := unix.Recvmsg(SetupFD, b, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("setup socket: %w", err)
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range msgs {
			if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	if n == 0 && len(fds) == 0 {
		return nil, errors.New("the runtime gave this shell up")
	}
	if string(b[:n]) != claimMsg || len(fds) < 4 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("setup socket: a claim with %d descriptors and %q", len(fds), b[:n])
	}
	for _, mv := range [][2]int{{fds[0], 1}, {fds[0], 2}, {fds[1], ListenFD}, {fds[2], ConfigFD}} {
		if err := unix.Dup3(mv[0], mv[1], 0); err != nil {
			return nil, fmt.Errorf("claim: descriptor %d: %w", mv[1], err)
		}
	}
	for _, fd := range fds[:3] {
		unix.Close(fd)
	}
	return fds[3:], nil
}

// shellDevices are the host device nodes a shell keeps in its placeholder
// root's /dev for the claim's setup to bind into the sandbox (runc's
// default set, which the runtime gives every sandbox).
func shellDevices() []string { return []string{"null", "zero", "full", "random", "urandom", "tty"} }

// placeholderAux is the one mount of a shell's placeholder root holding
// what the claim's setup needs from outside the sandbox (its procfs,
// sysfs and device nodes, reached through the symlinks /proc, /sys and
// /dev): one detach removes them all (each unmount waits for an RCU grace
// period).
const placeholderAux = "/aux"

// prepareShell gives a shell, before it waits for its claim, a root of
// its own in place of the copy of the host's mount tree its new mount
// namespace started with: a read-only placeholder tmpfs holding only what
// the claim's setup needs from the host (a procfs and a sysfs of the
// shell's own namespaces, which also let the sandbox mount its own; the
// device nodes of shellDevices, bound), all under placeholderAux. The
// host's tree is detached, so a waiting shell pins none of the host's file
// systems (one unmounted on the host meanwhile is released). The claim
// mounts the sandbox's root on top of the placeholder's, detaches
// placeholderAux and chroots into the root (setupSandbox). The pivot's
// walk of every task on the machine is the shell's, not a start's.
func prepareShell() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mount tree private: %w", err)
	}
	base := setupMountBase
	aux := base + placeholderAux
	if err := unix.Mount("tmpfs", base, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=755,size=16k"); err != nil {
		return fmt.Errorf("mount the placeholder root: %w", err)
	}
	if err := os.Mkdir(aux, 0o755); err != nil {
		return fmt.Errorf("placeholder root: %w", err)
	}
	if err := unix.Mount("tmpfs", aux, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=755,size=16k"); err != nil {
		return fmt.Errorf("placeholder root: %w", err)
	}
	for _, d := range []string{"proc", "sys", "dev"} {
		if err := os.Mkdir(aux+"/"+d, 0o755); err != nil {
			return fmt.Errorf("placeholder root: %w", err)
		}
		if err := os.Symlink(strings.TrimPrefix(placeholderAux, "/")+"/"+d, base+"/"+d); err != nil {
			return fmt.Errorf("placeholder root: %w", err)
		}
	}
	if err := unix.Mount("proc", aux+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("placeholder root: mount proc: %w", err)
	}
	if err := unix.Mount("sysfs", aux+"/sys", "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("placeholder root: mount sysfs: %w", err)
	}
	for _, name := range shellDevices() {
		target := aux + "/dev/" + name
		f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err != nil {
			return fmt.Errorf("placeholder root: %w", err)
		}
		f.Close()
		if err := unix.Mount("/dev/"+name, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("placeholder root: bind /dev/%s: %w", name, err)
		}
	}
	for _, d := range []string{aux, base} {
		if err := unix.Mount("", d, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("placeholder root: make it read-only: %w", err)
		}
	}
	if err := unix.Chdir(base); err != nil {
		return fmt.Errorf("placeholder root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("placeholder root: pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's mount tree: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	return nil
}

// spawnedTrees are the descriptors of n trees in an init the runtime
// spawned for its sandbox: from SetupFD+1 on.
func spawnedTrees(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = SetupFD + 1 + i
	}
	return out
}

// closeInherited closes every descriptor from from on, but those in keep,
// that names a file, a directory or a socket: what the process that
// forked init held without close-on-exec, which would reach the sandbox (a
// host directory is a way out of any root). Anonymous inodes stay: the Go
// runtime's own poller (epoll, eventfd) may be among them, and they name
// nothing on the host.
func closeInherited(from int, keep []int) {
	dir, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		// No /proc: close them all (but keep), as a last resort.
		lo := from
		for _, k := range append(slices.Sorted(slices.Values(keep)), int(^uint32(0)>>1)) {
			if k >= lo {
				if k > lo {
					unix.CloseRange(uint(lo), uint(k-1), 0)
				}
				lo = k + 1
			}
		}
		return
	}
	var fds []int
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(dir, buf)
		if err != nil || n <= 0 {
			break
		}
		var names []string
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
		for _, name := range names {
			if fd, err := strconv.Atoi(name); err == nil && fd >= from && fd != dir && !slices.Contains(keep, fd) {
				fds = append(fds, fd)
			}
		}
	}
	unix.Close(dir)
	link := make([]byte, 256)
	for _, fd := range fds {
		n, err := unix.Readlink(fdPath(fd), link)
		if err == nil && strings.HasPrefix(string(link[:n]), "anon_inode:") {
			continue
		}
		unix.Close(fd)
	}
}

// setupTrees is the number of detached trees the runtime hands init for
// s: the root's and one per Tree mount.
func setupTrees(s *Setup) int {
	n := 1
	for _, m := range s.Mounts {
		if m.Tree {
			n++
		}
	}
	return n
}

// setupMountBase is where the root is attached before the pivot: a tmpfs
// over the host's /tmp in init's own mount namespace.
const setupMountBase = "/tmp"

// Init's answers on the setup socket once its setup is done: readyMsg
// when nothing is left that can fail (the filter is on; after go, init
// only serves its socket, where the daemon's connections wait), or
// readyReexecMsg when init re-executes itself after go (the new image
// loads the filter: the daemon must wait for it to answer).
const (
	readyMsg       = "ready"
	readyReexecMsg = "ready reexec"
)

// prepare makes the sandbox of s from trees (the caller is init before it
// serves; shell: a claimed shell, prepareShell done), with the seccomp filter on when seccomp is set (filtered is
// whether it is: not when init re-executes itself): it returns once the
// runtime said go. A failure is reported on the setup socket too.
func prepare(s *Setup, trees []int, seccomp, shell bool) (filtered bool, err error) {
	sock := SetupFD
	defer unix.Close(sock)
	reexec, err := setupSandbox(s, trees, shell)
	if err == nil && seccomp && !reexec {
		err = loadSeccomp()
		filtered = err == nil
	}
	if err != nil {
		msg := err.Error()
		unix.Sendmsg(sock, []byte("error: "+msg), nil, nil, 0)
		return false, err
	}
	ready := readyMsg
	if reexec {
		ready = readyReexecMsg
	}
	if err := unix.Sendmsg(sock, []byte(ready), nil, nil, 0); err != nil {
		return filtered, fmt.Errorf("setup socket: %w", err)
	}
	if !reexec {
		// While the host joins cgroups and attaches the network. (After
		// a re-execution, the new image makes them.)
		reserveThreads(spareThreads)
	}
	b := make([]byte, 16)
	n, _, _, _, err := unix.Recvmsg(sock, b, nil, 0)
	if err != nil {
		return filtered, fmt.Errorf("setup socket: %w", err)
	}
	if string(b[:n]) != "go" {
		return filtered, errors.New("the runtime gave up on this start")
	}
	if reexec {
		// Only stdio, the socket, the config and the binary go along
		// (the trees are closed; the new image closes anything else).
		unix.Close(sock)
		return filtered, reexecAfterSetup()
	}
	return filtered, nil
}

// setupSandbox makes the mounts, pivots and drops capabilities; reexec
// is true when the capabilities could not be dropped on every thread and
// init must re-execute itself to shed the others.
func setupSandbox(s *Setup, trees []int, shell bool) (reexec bool, err error) {
	// The root, then one per Tree mount.
	if len(trees) != setupTrees(s) {
		return false, fmt.Errorf("%d mount trees for a setup of %d", len(trees), setupTrees(s))
	}
	defer func() {
		for _, fd := range trees {
			unix.Close(fd)
		}
	}()
	next := 0
	tree := func() int {
		next++
		return trees[next-1]
	}
	rootTree := tree()
	lastCap, err := readLastCap()
	if err != nil {
		return false, err
	}
	var rdir int
	if shell {
		// prepareShell made the placeholder root: the sandbox's goes on
		// top of it (entered by chroot below).
		if err := unix.MoveMount(rootTree, "", unix.AT_FDCWD, "/", unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return false, fmt.Errorf("attach the root: %w", err)
		}
		if rdir, err = unix.FcntlInt(uintptr(rootTree), unix.F_DUPFD_CLOEXEC, 0); err != nil {
			return false, fmt.Errorf("open the root: %w", err)
		}
	} else {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return false, fmt.Errorf("make the mount tree private: %w", err)
		}
		if err := unix.Mount("tmpfs", setupMountBase, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=700,size=4k"); err != nil {
			return false, fmt.Errorf("mount a tmpfs for the root: %w", err)
		}
		newRoot := setupMountBase + "/root"
		if err := os.Mkdir(newRoot, 0o755); err != nil {
			return false, fmt.Errorf("root mount point: %w", err)
		}
		if err := unix.MoveMount(rootTree, "", unix.AT_FDCWD, newRoot, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return false, fmt.Errorf("attach the root: %w", err)
		}
		if rdir, err = unix.Open(newRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return false, fmt.Errorf("open the root: %w", err)
		}
	}
	defer unix.Close(rdir)
	for _, m := range s.Mounts {
		if err := setupMount(rdir, m, tree); err != nil {
			return false, err
		}
		if m.Dest == "/dev" && !m.Tree {
			if err := setupDev(rdir, s.Devices); err != nil {
				return false, err
			}
		}
	}
	for _, p := range s.MaskPaths {
		if err := maskPath(rdir, p); err != nil {
			return false, err
		}
	}
	for _, p := range s.ReadonlyPaths {
		if err := readonlyPath(rdir, p); err != nil {
			return false, err
		}
	}
	if err := unix.Fchdir(rdir); err != nil {
		return false, fmt.Errorf("enter the root: %w", err)
	}
	if shell {
		// The placeholder's procfs, sysfs and device nodes served the
		// mounts above; they go, so the sandbox's masked /proc is the
		// only procfs of the namespace (a fully visible one would let a
		// nested namespace mount an unmasked procfs).
		if err := unix.Unmount(placeholderAux, unix.MNT_DETACH); err != nil {
			return false, fmt.Errorf("detach the placeholder's %s: %w", placeholderAux, err)
		}
		// Beneath is the placeholder, which holds nothing of the host.
		if err := unix.Chroot("."); err != nil {
			return false, fmt.Errorf("chroot: %w", err)
		}
	} else {
		if err := unix.PivotRoot(".", "."); err != nil {
			return false, fmt.Errorf("pivot_root: %w", err)
		}
		if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
			return false, fmt.Errorf("detach the host's mount tree: %w", err)
		}
	}
	if err := unix.Chdir("/"); err != nil {
		return false, fmt.Errorf("chdir /: %w", err)
	}
	if s.Hostname != "" {
		if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
			return false, fmt.Errorf("hostname: %w", err)
		}
	}
	if err := loopbackUp(); err != nil {
		return false, err
	}
	return dropCaps(s.Caps, lastCap)
}

// resolveFlags resolve a target inside the sandbox's root: ".." and
// absolute symlinks stay inside it, magic links (/proc/<pid>/root) are
// refused.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// openInRoot resolves p (absolute, inside the root) to an O_PATH
// descriptor.
func openInRoot(rdir int, p string, resolve uint64) (int, error) {
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		rel = "."
	}
	for {
		fd, err := unix.Openat2(rdir, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolve})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// makeTarget returns a descriptor of the mount target p inside the
// root, made (as a directory, or an empty file when file) where it is
// missing. With strict, p is a name at the root's top that must be a real
// directory: a symlink or anything else there is removed and a directory
// made in its place.
func makeTarget(rdir int, p string, file, strict bool) (int, error) {
	clean := strings.TrimPrefix(path.Clean("/"+p), "/")
	if clean == "" {
		return -1, fmt.Errorf("mount target %q: the root itself", p)
	}
	if strict {
		if strings.Contains(clean, "/") {
			return -1, fmt.Errorf("mount target %q: not at the root's top", p)
		}
		var st unix.Stat_t
		err := unix.Fstatat(rdir, clean, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := unix.Unlinkat(rdir, clean, 0); err != nil {
				return -1, fmt.Errorf("mount target /%s is not a directory and cannot be removed: %w", clean, err)
			}
		}
		if err := unix.Mkdirat(rdir, clean, 0o755); err != nil && err != unix.EEXIST {
			return -1, fmt.Errorf("mount target /%s: %w", clean, err)
		}
		fd, err := openInRoot(rdir, clean, resolveFlags|unix.RESOLVE_NO_SYMLINKS)
		if err != nil {
			return -1, fmt.Errorf("mount target /%s: %w", clean, err)
		}
		return fd, nil
	}
	// Make what is missing, one component at a time, each parent
	// resolved again from the root, so a symlink met on the way is
	// followed inside the root, never out of it. A dangling symlink is
	// followed to what it names, which is made (as libcontainer's
	// securejoin does: /etc/resolv.conf may link to a file not there yet).
	for hops := 0; hops < 40; hops++ {
		fd, err := openInRoot(rdir, clean, resolveFlags)
		if err == nil {
			return fd, nil
		}
		if err != unix.ENOENT {
			return -1, fmt.Errorf("mount target %s: %w", p, err)
		}
		next, err := makeMissing(rdir, clean, file)
		if err != nil {
			return -1, fmt.Errorf("mount target %s: %w", p, err)
		}
		clean = next
	}
	return -1, fmt.Errorf("mount target %s: %w", p, unix.ELOOP)
}

// makeMissing makes the first missing component of rel (relative to the
// root) and every one after it; it returns the path to try next: rel
// itself, or, where a component is a dangling symlink, the path with the
// link's target in its place.
func makeMissing(rdir int, rel string, file bool) (string, error) {
	parts := strings.Split(rel, "/")
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		fd, err := openInRoot(rdir, prefix, resolveFlags)
		if err == nil {
			unix.Close(fd)
			continue
		}
		if err != unix.ENOENT {
			return "", err
		}
		parent, err := openInRoot(rdir, strings.Join(parts[:i], "/"), resolveFlags)
		if err != nil {
			return "", err
		}
		var st unix.Stat_t
		if err := unix.Fstatat(parent, parts[i], &st, unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH); err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(parent, parts[i], buf)
			unix.Close(parent)
			if err != nil {
				return "", err
			}
			target := string(buf[:n])
			if !path.IsAbs(target) {
				target = path.Join(strings.Join(parts[:i], "/"), target)
			}
			rest := strings.Join(parts[i+1:], "/")
			return strings.TrimPrefix(path.Clean("/"+path.Join(target, rest)), "/"), nil
		}
		if i == len(parts)-1 && file {
			var fd int
			fd, err = unix.Openat(parent, parts[i], unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
			if err == nil {
				unix.Close(fd)
			}
		} else {
			err = unix.Mkdirat(parent, parts[i], 0o755)
		}
		unix.Close(parent)
		if err != nil && err != unix.EEXIST {
			return "", err
		}
	}
	return rel, nil
}

// sameInode reports whether descriptors a and b are the same file.
func sameInode(a, b int) bool {
	var sa, sb unix.Stat_t
	if unix.Fstat(a, &sa) != nil || unix.Fstat(b, &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// fdPath names a descriptor for mount(2) (the kernel follows the magic
// link to exactly the file resolved).
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// setupMount makes one mount under the root.
func setupMount(rdir int, m SetupMount, tree func() int) error {
	strict := !m.Tree && !strings.Contains(strings.Trim(path.Clean(m.Dest), "/"), "/")
	target, err := makeTarget(rdir, m.Dest, m.File, strict)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	if sameInode(target, rdir) {
		return fmt.Errorf("mount target %s resolves to the root itself", m.Dest)
	}
	if m.Tree {
		if err := unix.MoveMount(tree(), "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return fmt.Errorf("mount %s: %w", m.Dest, err)
		}
		return nil
	}
	if err := unix.Mount(m.Source, fdPath(target), m.Type, m.Flags, m.Data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", m.Type, m.Dest, err)
	}
	return nil
}

// setupDev fills the sandbox's new /dev: the host's device files bound
// in (a user namespace cannot make device nodes), and the usual links.
func setupDev(rdir int, devices []string) error {
	dev, err := openInRoot(rdir, "dev", resolveFlags|unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return fmt.Errorf("open /dev: %w", err)
	}
	defer unix.Close(dev)
	// An O_PATH descriptor cannot be a dirfd for creating files; the
	// tmpfs is init's own, so a real one is opened through it.
	d, err := unix.Openat(dev, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev: %w", err)
	}
	defer unix.Close(d)
	for _, name := range devices {
		if name == "" || strings.ContainsAny(name, "/") {
			return fmt.Errorf("device %q: bad name", name)
		}
		fd, err := unix.Openat(d, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666)
		if err != nil {
			return fmt.Errorf("device /dev/%s: %w", name, err)
		}
		err = unix.Mount("/dev/"+name, fdPath(fd), "", unix.MS_BIND, "")
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("bind device /dev/%s: %w", name, err)
		}
	}
	links := [][2]string{
		{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"},
		{"/proc/self/fd/2", "stderr"}, {"pts/ptmx", "ptmx"},
	}
	// /dev/core only where the kernel has /proc/kcore (as libcontainer).
	if fd, err := openInRoot(rdir, "proc/kcore", resolveFlags|unix.RESOLVE_NO_SYMLINKS); err == nil {
		unix.Close(fd)
		links = append(links, [2]string{"/proc/kcore", "core"})
	}
	for _, l := range links {
		if err := unix.Symlinkat(l[0], d, l[1]); err != nil && err != unix.EEXIST {
			return fmt.Errorf("link /dev/%s: %w", l[1], err)
		}
	}
	return nil
}

// maskPath hides p: /dev/null over a file, an empty read-only tmpfs over
// a directory. It follows no symlink (the paths are in /proc and /sys,
// which init mounted).
func maskPath(rdir int, p string) error {
	fd, err := openInRoot(rdir, p, resolveFlags|unix.RESOLVE_NO_SYMLINKS)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mask %s: %w", p, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("mask %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = unix.Mount("tmpfs", fdPath(fd), "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	} else {
		err = unix.Mount("/dev/null", fdPath(fd), "", unix.MS_BIND, "")
	}
	if err != nil {
		return fmt.Errorf("mask %s: %w", p, err)
	}
	return nil
}

// readonlyPath makes p read-only: a read-only clone of its mount tree
// placed over it.
func readonlyPath(rdir int, p string) error {
	fd, err := openInRoot(rdir, p, resolveFlags|unix.RESOLVE_NO_SYMLINKS)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read-only %s: %w", p, err)
	}
	defer unix.Close(fd)
	t, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("read-only %s: %w", p, err)
	}
	defer unix.Close(t)
	if err := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY, Propagation: unix.MS_PRIVATE}); err != nil {
		return fmt.Errorf("read-only %s: %w", p, err)
	}
	if err := unix.MoveMount(t, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("read-only %s: %w", p, err)
	}
	return nil
}

// loopbackUp brings up the sandbox's loopback interface.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}

// readLastCap reads the highest capability number the kernel knows.
func readLastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("capabilities: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 || n > 63 {
		return 0, fmt.Errorf("capabilities: cap_last_cap %q", b)
	}
	return n, nil
}

// dropCaps leaves init (every thread of it) with just keep, in its
// bounding, permitted and effective sets, none inheritable or ambient,
// and no_new_privs. A capability is per thread: every thread of the Go
// runtime is changed at once (AllThreadsSyscall), or, where that is not
// available (a binary linked with cgo), this thread alone and reexec is
// true: init then re-executes itself from it, and the new image starts
// with this thread's sets.
func dropCaps(keep []int, lastCap int) (reexec bool, err error) {
	var data [2]unix.CapUserData
	kept := map[int]bool{}
	for _, c := range keep {
		if c < 0 || c > lastCap {
			continue
		}
		kept[c] = true
		data[c/32].Effective |= 1 << (c % 32)
		data[c/32].Permitted |= 1 << (c % 32)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err == syscall.ENOTSUP {
		return true, dropCapsThisThread(kept, lastCap)
	} else if err != nil {
		return false, fmt.Errorf("no_new_privs: %w", err)
	}
	if err := dropBounding(kept, lastCap); err != nil {
		return false, err
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		return false, fmt.Errorf("clear ambient capabilities: %w", err)
	}
	err = allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	runtime.KeepAlive(&hdr)
	runtime.KeepAlive(&data)
	if err != nil {
		return false, fmt.Errorf("set capabilities: %w", err)
	}
	return false, nil
}

// allThreads makes a system call on every thread of the process
// (syscall.AllThreadsSyscall: syscall.ENOTSUP in a binary linked with
// cgo). Each call stops the world and signals every thread: 41 of them
// took 2.6 ms with five threads here.
func allThreads(trap, a1, a2, a3 uintptr) error {
	if _, _, e := syscall.AllThreadsSyscall(trap, a1, a2, a3); e != 0 {
		return e
	}
	return nil
}

// dropBounding drops from every thread's bounding set each capability up
// to lastCap that is not kept and is still there. Every change to the set
// is made on all threads at once (and a new thread copies its creator's),
// so the calling thread's set is every thread's: a capability a shell
// dropped while it waited (narrowBounding) costs the claim nothing.
func dropBounding(kept map[int]bool, lastCap int) error {
	for c := 0; c <= lastCap; c++ {
		if kept[c] {
			continue
		}
		if in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && in == 0 {
			continue
		}
		if err := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); err != nil {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	return nil
}

// narrowBounding is a shell's part of dropCaps, made while it waits for
// its claim: the capabilities no sandbox keeps (BoundingArg's complement)
// leave every thread's bounding set. The bounding set only limits what
// an exec may gain, so the claim's setup keeps every capability it uses.
// A binary linked with cgo cannot change every thread: the claim then
// drops them all from one thread and re-executes (dropCapsThisThread).
func narrowBounding(arg string) error {
	kept := map[int]bool{}
	for _, f := range strings.Split(arg, ",") {
		c, err := strconv.Atoi(f)
		if err != nil || c < 0 {
			return fmt.Errorf("bounding set %q: want capability numbers", arg)
		}
		kept[c] = true
	}
	lastCap, err := readLastCap()
	if err != nil {
		return err
	}
	if err := dropBounding(kept, lastCap); err != nil && !errors.Is(err, syscall.ENOTSUP) {
		return err
	}
	return nil
}

// dropCapsThisThread is dropCaps for the calling thread only, which stays
// locked to its goroutine until init re-executes itself from it.
func dropCapsThisThread(kept map[int]bool, lastCap int) error {
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	for c := 0; c <= lastCap; c++ {
		if kept[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	return nil
}

// reexecAfterSetup re-executes init from the thread whose capabilities
// were dropped (dropCapsThisThread); the new image finds its setup done.
// Root's permitted and effective sets after the exec are its bounding set.
func reexecAfterSetup() error {
	if _, err := unix.Seek(ConfigFD, 0, 0); err != nil {
		return fmt.Errorf("re-execute init: rewind its config: %w", err)
	}
	args := []string{os.Args[0], os.Args[1], setupDoneArg}
	for _, a := range os.Args[2:] {
		// The new image is claimed already: a shell's arguments stay
		// behind.
		if a != ShellArg && !strings.HasPrefix(a, BoundingArg) {
			args = append(args, a)
		}
	}
	err := unix.Exec(fdPath(BinaryFD), args, os.Environ())
	return fmt.Errorf("re-execute init: %w", err)
}
