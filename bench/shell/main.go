// Command shell measures whether a sandbox "shell" made ahead can meet
// issue 17's cold-create target (≤ 0.75x `runc run`), before stead builds
// one. A shell is a sandbox without its root filesystem: user, mount, pid,
// network, IPC and UTS namespaces with /proc, /sys, /dev, /dev/pts,
// /dev/mqueue, /dev/shm and /tmp already mounted, and its init waiting.
// Taking one gives it a root: the host clones the root's mount tree
// (open_tree), maps its owners into the shell's user namespace
// (mount_setattr MOUNT_ATTR_IDMAP) and hands the descriptors to the
// shell's init, which moves the root and /usr into place, moves its own
// mounts under the new root (every target resolved with openat2 inside
// it, no symlink followed), pivots into it and runs the first process.
//
//	go run ./bench/shell -n 20
//
// It prints the take → first exec exit beside `runc run` of the same root
// with a user namespace, and the cost of making a shell (off the create
// path, like spare clones and the lease made ahead). It is a probe of the
// kernel operations and their cost, not stead's runtime: no cgroup, no
// seccomp, no capability drop, no network links.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	hostBase = 100000 // the user namespace's root on the host
	idCount  = 65536
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "shell-init" {
		shellInit()
		return
	}
	n := flag.Int("n", 20, "iterations")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "bench/shell:", err)
		os.Exit(1)
	}
}

// skeleton makes a root like stead's host template: directories, the
// usual symlinks into /usr, an /etc of its own; /usr is bound from the
// host read-only. Owned by the host's root, as a pool dataset is.
func skeleton(dir string) error {
	for _, d := range []string{"proc", "dev", "sys", "tmp", "usr", "etc", "root", "run", "home/agent", "workspace", "var/log"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	for _, l := range [][2]string{{"bin", "usr/bin"}, {"sbin", "usr/sbin"}, {"lib", "usr/lib"}, {"lib64", "usr/lib64"}} {
		if err := os.Symlink(l[1], filepath.Join(dir, l[0])); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n"), 0o644)
}

type shell struct {
	cmd  *exec.Cmd
	sock *os.File // our end of the socket pair
}

// makeShell starts a shell's init in new namespaces and waits until its
// mounts are made.
func makeShell() (*shell, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "shell"), os.NewFile(uintptr(fds[1]), "shell-init")
	defer theirs.Close()
	cmd := exec.Command("/proc/self/exe", "shell-init")
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
			unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostBase, Size: idCount}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostBase, Size: idCount}},
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
	}
	if err := cmd.Start(); err != nil {
		ours.Close()
		return nil, err
	}
	s := &shell{cmd: cmd, sock: ours}
	var r reply
	if err := s.recv(&r); err != nil || r.Err != "" {
		s.kill()
		return nil, fmt.Errorf("shell init: %v %s", err, r.Err)
	}
	return s, nil
}

func (s *shell) kill() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.sock.Close()
}

type reply struct {
	Err  string `json:"err,omitempty"`
	Exit int    `json:"exit"`
}

func (s *shell) recv(r *reply) error {
	b := make([]byte, 4096)
	n, _, _, _, err := unix.Recvmsg(int(s.sock.Fd()), b, nil, 0)
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("shell init closed its socket")
	}
	return json.Unmarshal(b[:n], r)
}

// take gives the shell its root and /usr and waits for its first
// process, /bin/true, to exit.
func (s *shell) take(root string) error {
	userns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", s.cmd.Process.Pid))
	if err != nil {
		return err
	}
	defer userns.Close()
	rootfd, err := cloneTree(root, userns, false)
	if err != nil {
		return fmt.Errorf("root: %w", err)
	}
	defer unix.Close(rootfd)
	usrfd, err := cloneTree("/usr", userns, true)
	if err != nil {
		return fmt.Errorf("/usr: %w", err)
	}
	defer unix.Close(usrfd)
	if err := unix.Sendmsg(int(s.sock.Fd()), []byte("take"), unix.UnixRights(rootfd, usrfd), nil, 0); err != nil {
		return err
	}
	var r reply
	if err := s.recv(&r); err != nil {
		return err
	}
	if r.Err != "" {
		return errors.New(r.Err)
	}
	if r.Exit != 0 {
		return fmt.Errorf("first exec exited %d", r.Exit)
	}
	return nil
}

// cloneTree clones the mount tree at path into a detached mount whose
// owners are mapped through userns, read-only if asked.
func cloneTree(path string, userns *os.File, ro bool) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return -1, fmt.Errorf("open_tree: %w", err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID, Userns_fd: uint64(userns.Fd())}
	if ro {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mount_setattr: %w", err)
	}
	return fd, nil
}

// shellInit runs as PID 1 of a shell: it makes its mounts in a tmpfs of
// its own, says so, waits for a take, then sets up the root and runs
// /bin/true as the first process.
func shellInit() {
	runtime.LockOSThread()
	sock := 3
	send := func(r reply) {
		b, _ := json.Marshal(r)
		unix.Sendmsg(sock, b, nil, nil, 0)
	}
	fail := func(what string, err error) {
		st, _ := os.ReadFile("/proc/self/status")
		send(reply{Err: fmt.Sprintf("%s: %v (uid %d) %s", what, err, os.Getuid(), st)})
		os.Exit(1)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fail("make / private", err)
	}
	// The skeleton's mounts live in a tmpfs over /tmp of the copied host
	// tree (private to this mount namespace).
	skel := "/tmp"
	if err := unix.Mount("tmpfs", skel, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=700"); err != nil {
		fail("skeleton tmpfs", err)
	}
	type m struct {
		src, dst, fstype string
		flags            uintptr
		data             string
	}
	const def = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	mounts := []m{
		{"proc", "proc", "proc", def, ""},
		{"tmpfs", "dev", "tmpfs", unix.MS_NOSUID | unix.MS_STRICTATIME, "mode=755,size=65536k"},
		{"devpts", "dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"},
		{"shm", "dev/shm", "tmpfs", def, "mode=1777,size=65536k"},
		{"mqueue", "dev/mqueue", "mqueue", def, ""},
		{"sysfs", "sys", "sysfs", def | unix.MS_RDONLY, ""},
		{"tmpfs", "tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777,size=268435456"},
	}
	for _, x := range mounts {
		d := filepath.Join(skel, x.dst)
		if err := os.MkdirAll(d, 0o755); err != nil {
			fail("mkdir "+d, err)
		}
		if err := unix.Mount(x.src, d, x.fstype, x.flags, x.data); err != nil {
			fail("mount "+x.dst, err)
		}
	}
	for _, dev := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		d := filepath.Join(skel, "dev", dev)
		if err := os.WriteFile(d, nil, 0o666); err != nil {
			fail("device node "+dev, err)
		}
		if err := unix.Mount("/dev/"+dev, d, "", unix.MS_BIND, ""); err != nil {
			fail("bind /dev/"+dev, err)
		}
	}
	// What stead's runtime adds to runc's default mounts (linux.config):
	// masked and read-only /proc and /sys paths, and the ten /proc views
	// (lxcfs files bound over procfs's; here the host's own files stand in
	// for lxcfs's, for the cost of the binds).
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats", "/proc/timer_stats"} {
		d := filepath.Join(skel, p)
		if _, err := os.Stat(d); err != nil {
			continue
		}
		if err := unix.Mount("/dev/null", d, "", unix.MS_BIND, ""); err != nil {
			fail("mask "+p, err)
		}
	}
	for _, p := range []string{"/proc/acpi", "/proc/asound", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"} {
		d := filepath.Join(skel, p)
		if _, err := os.Stat(d); err != nil {
			continue
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", unix.MS_RDONLY, ""); err != nil {
			fail("mask "+p, err)
		}
	}
	for _, p := range []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"} {
		d := filepath.Join(skel, p)
		if _, err := os.Stat(d); err != nil {
			continue
		}
		if err := unix.Mount(d, d, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			fail("read-only "+p, err)
		}
		if err := unix.Mount(d, d, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_REC, ""); err != nil {
			fail("read-only "+p, err)
		}
	}
	for _, p := range []string{"cpuinfo", "diskstats", "loadavg", "meminfo", "stat", "swaps", "uptime", "slabinfo", "pressure/cpu", "pressure/memory"} {
		src := filepath.Join("/proc", p)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		if err := unix.Mount(src, filepath.Join(skel, "proc", p), "", unix.MS_BIND, ""); err != nil {
			fail("view "+p, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(skel, "root"), 0o755); err != nil {
		fail("mkdir root", err)
	}
	send(reply{})

	// The take: the root and /usr as detached mounts.
	b := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(2*4))
	_, oobn, _, _, err := unix.Recvmsg(sock, b, oob, 0)
	if err != nil {
		fail("receive the take", err)
	}
	cm, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(cm) != 1 {
		fail("take's descriptors", err)
	}
	fds, err := unix.ParseUnixRights(&cm[0])
	if err != nil || len(fds) != 2 {
		fail("take's descriptors", err)
	}
	rootfd, usrfd := fds[0], fds[1]
	newRoot := filepath.Join(skel, "root")
	if err := unix.MoveMount(rootfd, "", unix.AT_FDCWD, newRoot, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		fail("move the root into place", err)
	}
	rdir, err := unix.Open(newRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		fail("open the new root", err)
	}
	// Each target is resolved inside the new root without following a
	// symlink or crossing a mount: the root is the agent's, and may hold
	// a symlink where /proc should be.
	target := func(p string) int {
		fd, err := unix.Openat2(rdir, p, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
		})
		if err != nil {
			fail("resolve "+p+" in the root", err)
		}
		return fd
	}
	if err := unix.MoveMount(usrfd, "", target("usr"), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		fail("move /usr", err)
	}
	for _, p := range []string{"proc", "dev", "sys", "tmp"} {
		if err := unix.MoveMount(unix.AT_FDCWD, filepath.Join(skel, p), target(p), "", unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			fail("move /"+p, err)
		}
	}
	if err := unix.Fchdir(rdir); err != nil {
		fail("chdir into the root", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		fail("pivot_root", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		fail("detach the old root", err)
	}
	if err := unix.Chdir("/"); err != nil {
		fail("chdir /", err)
	}
	if err := unix.Sethostname([]byte("sb-probe")); err != nil {
		fail("hostname", err)
	}
	cmd := exec.Command("/bin/true")
	if v := os.Getenv("SHELL_PROBE_VERIFY"); v != "" {
		cmd = exec.Command("/bin/sh", "-c", v)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	err = cmd.Run()
	code := 0
	if err != nil {
		code = -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			fail("first exec", err)
		}
	}
	send(reply{Exit: code})
	os.Exit(0)
}

func run(n int) error {
	if os.Geteuid() != 0 {
		return errors.New("run as root")
	}
	work, err := os.MkdirTemp("", "stead-bench-shell-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	os.Chmod(work, 0o755)
	root := filepath.Join(work, "rootfs")
	if err := skeleton(root); err != nil {
		return err
	}

	var makes, takes, boths []time.Duration
	for range n {
		t0 := time.Now()
		s, err := makeShell()
		if err != nil {
			return fmt.Errorf("make a shell: %w", err)
		}
		t1 := time.Now()
		err = s.take(root)
		t2 := time.Now()
		s.kill()
		if err != nil {
			return fmt.Errorf("take a shell: %w", err)
		}
		makes, takes, boths = append(makes, t1.Sub(t0)), append(takes, t2.Sub(t1)), append(boths, t2.Sub(t0))
	}

	// runc run of the same root with a user namespace: the root copied so
	// the namespace's root owns it, /usr bound read-only from the host.
	var runcs []time.Duration
	if _, err := exec.LookPath("runc"); err == nil {
		bundle := filepath.Join(work, "bundle")
		if err := runcBundle(bundle, root); err != nil {
			return err
		}
		for i := range n {
			t0 := time.Now()
			out, err := exec.Command("runc", "run", "--bundle", bundle, "shell-bench-"+strconv.Itoa(i)).CombinedOutput()
			if err != nil {
				return fmt.Errorf("runc run: %v: %s", err, out)
			}
			runcs = append(runcs, time.Since(t0))
		}
	}
	p50 := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	fmt.Printf("shell probe, %d iterations, %s\n\n", n, time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("%-58s %9.2f ms\n", "take a shell: root given → first exec (/bin/true) exits", ms(p50(takes)))
	fmt.Printf("%-58s %9.2f ms\n", "make a shell (namespaces and mounts; off the create path)", ms(p50(makes)))
	fmt.Printf("%-58s %9.2f ms\n", "make and take, one after the other (no shell made ahead)", ms(p50(boths)))
	if len(runcs) > 0 {
		fmt.Printf("%-58s %9.2f ms\n", "`runc run` /bin/true, user namespace (same root)", ms(p50(runcs)))
		fmt.Printf("\ntake / runc run: %.2fx; make and take / runc run: %.2fx\n",
			float64(p50(takes))/float64(p50(runcs)), float64(p50(boths))/float64(p50(runcs)))
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// runcBundle writes a bundle of a copy of root owned by the user
// namespace's root, with runc's default mounts and /usr bound read-only.
func runcBundle(bundle, root string) error {
	rootfs := filepath.Join(bundle, "rootfs")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", root, rootfs).CombinedOutput(); err != nil {
		return fmt.Errorf("copy the root: %v: %s", err, out)
	}
	if out, err := exec.Command("chown", "-R", "-h", fmt.Sprintf("%d:%d", hostBase, hostBase), rootfs).CombinedOutput(); err != nil {
		return fmt.Errorf("chown the root: %v: %s", err, out)
	}
	if out, err := exec.Command("runc", "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		return fmt.Errorf("runc spec: %v: %s", err, out)
	}
	p := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		return err
	}
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = []string{"/bin/true"}
	spec["root"] = map[string]any{"path": "rootfs", "readonly": false}
	mounts := spec["mounts"].([]any)
	mounts = append(mounts, map[string]any{"destination": "/usr", "type": "bind", "source": "/usr", "options": []string{"rbind", "ro"}})
	spec["mounts"] = mounts
	lin := spec["linux"].(map[string]any)
	nss := lin["namespaces"].([]any)
	nss = append(nss, map[string]any{"type": "user"})
	lin["namespaces"] = nss
	idmap := []map[string]any{{"containerID": 0, "hostID": hostBase, "size": idCount}}
	lin["uidMappings"], lin["gidMappings"] = idmap, idmap
	b, err = json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}
