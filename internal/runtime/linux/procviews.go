package linux

// The sandbox sees its own size.
//
// Build tools size themselves from /proc and from the CPU affinity mask
// (make -j$(nproc), JVMs, node, Python's os.cpu_count); on the host's
// figures they over-commit a small sandbox and get throttled or OOM-killed.
// Two mechanisms fix what a sandbox sees:
//
//   - lxcfs (the FUSE file system of LXC and Incus; Debian package lxcfs)
//     answers reads of its proc/meminfo, proc/cpuinfo, ... with figures
//     computed from the cgroups of the reading process. Each sandbox gets
//     those files bind-mounted read-only over its own /proc/... files. One
//     lxcfs serves every sandbox on the host.
//   - A cpuset of ceil(CPUs) CPUs per sandbox: nproc, Go, the JVM and
//     libuv's available_parallelism read sched_getaffinity, not /proc.
//     Sandboxes are spread over the CPUs (the least used window first) so
//     they are not all pinned to CPU 0.
//
// Lifetime: lxcfs runs detached from the daemon (its own session, stdio on
// a log file), so it outlives a daemon restart or kill -9; running
// sandboxes hold bind mounts of its files, and those fail with ENOTCONN
// for good if it dies (a new lxcfs cannot repair existing bind mounts:
// such sandboxes get working views again on their next start). It is never
// stopped by stead. Views are an improvement, never a condition: if lxcfs
// is missing or fails, sandboxes start without them and a warning is
// logged once.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

const (
	// defaultLXCFSDir is where stead mounts its lxcfs. It is one per host
	// (not per state directory): lxcfs serves any process by its cgroup,
	// so every runtime on the host, tests included, shares it.
	defaultLXCFSDir = "/run/stead/lxcfs"
	// systemLXCFSDir is where the distribution's lxcfs service mounts; it
	// is used when stead's own cannot be started.
	systemLXCFSDir = "/var/lib/lxcfs"
	// lxcfsRetry is how long after a failed start no new one is tried
	// (each try can take up to lxcfsStartTimeout of a create).
	lxcfsRetry        = time.Minute
	lxcfsStartTimeout = 10 * time.Second
	// lxcfsAnswerTimeout bounds a check of a running lxcfs.
	lxcfsAnswerTimeout = 5 * time.Second
)

// lxcfsFlags are the flags stead's lxcfs runs with (lxcfs 5.0):
//   - --enable-loadavg: /proc/loadavg from the sandbox's own tasks (a
//     thread of lxcfs samples each cgroup that was read); without it lxcfs
//     passes the host's load through.
//   - --enable-cfs: cpuinfo, stat and sys/devices/system/cpu/online also
//     follow the CFS quota (min of ceil(quota/period) and the cpuset), not
//     only the cpuset.
//   - --enable-pidfd: track each sandbox's init by pidfd, so a recycled pid
//     never gives one sandbox another's uptime.
//
// The cgroup v1 hierarchies (and cgroup2) are found by lxcfs itself; it
// needs no flag for them. Its FUSE options are its defaults:
// allow_other (processes of every uid and user namespace may read),
// entry and attribute timeouts of 0.5 s, read-only files.
var lxcfsFlags = []string{"--enable-loadavg", "--enable-cfs", "--enable-pidfd"}

// procViewFiles are the lxcfs files bound over the same path in a sandbox
// (runc allows exactly these under /proc). /proc/slabinfo is left out: it
// is root-only on the host and no sizing tool reads it.
var procViewFiles = []string{
	"proc/cpuinfo", "proc/diskstats", "proc/loadavg", "proc/meminfo",
	"proc/stat", "proc/swaps", "proc/uptime",
	// glibc's sysconf(_SC_NPROCESSORS_ONLN) (Python's os.cpu_count,
	// getconf) reads this file, not the affinity mask.
	"sys/devices/system/cpu/online",
}

// procViews is the runtime's view of lxcfs and of the host's CPUs. The zero
// value is ready: lxcfs is found or started by the first sandbox start.
type procViews struct {
	mu sync.Mutex // guards the lxcfs fields (held while lxcfs starts)
	// own and system: stead's lxcfs and the distribution's, to fall back
	// on; zero fields are the defaults (tests set them).
	own, system lxcfs
	// inUse is the lxcfs the views come from (dir "" = none yet).
	inUse   lxcfs
	files   []string
	retryAt time.Time
	warned  bool
	// inUsePid is a pidfd of the lxcfs process in use (nil if not known),
	// and answeredAt the time it last answered a check: a start within
	// lxcfsRecheck of that answer whose lxcfs still runs takes the views
	// without asking lxcfs again (a round trip to the FUSE daemon on
	// every create, which waits for lxcfs to get a CPU).
	inUsePid   *os.File
	answeredAt time.Time

	cpuMu sync.Mutex // guards cpus, recent and cpusets
	cpus  *hostCPUs
	// recent holds cpusets handed out in the last seconds, whose cgroups
	// may not exist yet (concurrent starts must not all take one CPU).
	recent map[string]recentCpuset
	// cpusets is every running sandbox's cpuset as last read from the
	// cgroup tree (at cpusetsAt) and kept since as cpusets are handed out
	// and sandboxes destroyed, so that a start does not read the cpuset
	// of every other sandbox (O(n) files per create); it is read again
	// from the cgroups every cpusetRescan, which catches what this
	// process did not see.
	cpusets   map[string][]int
	cpusetsAt time.Time
	// perCPU counts, for each CPU, the cpusets that hold it: a start
	// reads the load from it, not from every sandbox's cpuset.
	perCPU map[int]int
	// rescanning is set while a rescan reads the cgroup tree (off any
	// start's path); forgotten holds the sandboxes destroyed meanwhile,
	// which the rescan may have read before their cgroups went.
	rescanning bool
	forgotten  map[string]bool
}

// setCpuset records id's cpuset, keeping perCPU in step. Called with
// cpuMu held.
func (v *procViews) setCpuset(id string, set []int) {
	v.dropCpuset(id)
	v.cpusets[id] = set
	for _, c := range set {
		v.perCPU[c]++
	}
}

// dropCpuset forgets id's cpuset. Called with cpuMu held.
func (v *procViews) dropCpuset(id string) {
	for _, c := range v.cpusets[id] {
		v.perCPU[c]--
	}
	delete(v.cpusets, id)
}

// replaceCpusets takes m, read from the cgroup tree, as every sandbox's
// cpuset. Called with cpuMu held.
func (v *procViews) replaceCpusets(m map[string][]int) {
	v.cpusets, v.perCPU = map[string][]int{}, map[int]int{}
	for id, set := range m {
		v.setCpuset(id, set)
	}
	v.cpusetsAt = time.Now()
}

// cpusetRescan is how often cpuLoad reads every sandbox's cpuset again.
const cpusetRescan = 30 * time.Second

// forgetCpuset drops a destroyed sandbox's cpuset from the load count.
func (r *Runtime) forgetCpuset(id string) {
	v := &r.views
	v.cpuMu.Lock()
	if v.cpusets != nil {
		v.dropCpuset(id)
	}
	if v.rescanning {
		v.forgotten[id] = true
	}
	delete(v.recent, id)
	v.cpuMu.Unlock()
}

type recentCpuset struct {
	cpus []int
	at   time.Time
}

// procViewMounts returns the bind mounts of the lxcfs views for a new
// sandbox, starting lxcfs if need be; nil if lxcfs is unavailable.
func (r *Runtime) procViewMounts() []*configs.Mount {
	v := &r.views
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.inUse.dir != "" {
		if v.inUsePid != nil && time.Since(v.answeredAt) < lxcfsRecheck && pidfdRuns(v.inUsePid) {
			return viewMounts(v.inUse.dir, v.files)
		}
		err := v.inUse.alive()
		if err == nil {
			v.answeredAt = time.Now()
			return viewMounts(v.inUse.dir, v.files)
		}
		v.forgetPid()
		if errors.Is(err, errNoAnswer) {
			r.log.Warn("lxcfs is hung; it is left alone, and sandboxes start without /proc views until it answers", "dir", v.inUse.dir, "err", err)
		} else {
			r.log.Warn("lxcfs is gone; sandboxes already running keep broken /proc views until they restart", "dir", v.inUse.dir, "err", err)
		}
		v.inUse, v.files, v.retryAt = lxcfs{}, nil, time.Time{}
	}
	if time.Now().Before(v.retryAt) {
		return nil
	}
	l := v.own
	l.dir = cmp.Or(l.dir, defaultLXCFSDir)
	pid, err := l.ensure(r.log)
	if sys := v.system; err != nil {
		sys.dir = cmp.Or(sys.dir, systemLXCFSDir)
		if sys.healthy() == nil {
			r.log.Info("using the system lxcfs for sandbox /proc views", "dir", sys.dir, "err", err)
			l, err = sys, nil
		}
	}
	var files []string
	if err == nil {
		err = l.answered(func() error {
			for _, f := range procViewFiles {
				if _, err := os.Stat(filepath.Join(l.dir, f)); err == nil {
					files = append(files, f)
				}
			}
			return nil
		})
	}
	if err != nil {
		v.retryAt = time.Now().Add(lxcfsRetry)
		lvl := slog.LevelWarn
		if v.warned {
			lvl = slog.LevelDebug
		}
		v.warned = true
		r.log.Log(context.Background(), lvl, "sandboxes start without /proc views of their own size: no lxcfs", "err", err)
		return nil
	}
	v.inUse, v.files, v.answeredAt = l, files, time.Now()
	v.forgetPid()
	v.inUsePid, _ = lxcfsPidfd(pid)
	r.log.Debug("sandbox /proc views from lxcfs", "dir", l.dir, "pid", pid, "files", len(files))
	return viewMounts(l.dir, files)
}

// lxcfsRecheck is how long an answer of lxcfs stands for the starts after
// it, as long as its process runs: a start asks again after that.
const lxcfsRecheck = time.Second

// lxcfsPidfd opens a pidfd of pid, an lxcfs process (its pidfile's).
func lxcfsPidfd(pid int) (*os.File, error) {
	if pid <= 0 {
		return nil, errors.New("no pid")
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	// A pidfile can outlive its process and the pid be reused.
	if comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err != nil || strings.TrimSpace(string(comm)) != "lxcfs" {
		f.Close()
		return nil, errors.New("not lxcfs")
	}
	return f, nil
}

// pidfdRuns reports whether the process of pidfd has not exited.
func pidfdRuns(pidfd *os.File) bool {
	p := []unix.PollFd{{Fd: int32(pidfd.Fd()), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	return err == nil && n == 0
}

// forgetPid closes the pidfd of the lxcfs that was in use. Called with mu
// held.
func (v *procViews) forgetPid() {
	if v.inUsePid != nil {
		v.inUsePid.Close()
		v.inUsePid = nil
	}
}

// viewMounts binds each lxcfs file over its path in the sandbox. nosuid and
// nodev repeat flags of the FUSE mount that a user namespace may not clear.
func viewMounts(dir string, files []string) []*configs.Mount {
	ms := make([]*configs.Mount, 0, len(files))
	for _, f := range files {
		ms = append(ms, &configs.Mount{
			Source:      filepath.Join(dir, f),
			Destination: "/" + f,
			Device:      "bind",
			Flags:       unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC,
		})
	}
	return ms
}

// lxcfs is one lxcfs mount: stead's own, or the system's.
type lxcfs struct {
	dir string
	// bin is the lxcfs binary ("" = lxcfs on PATH).
	bin string
	// answerTimeout bounds each check that goes to the FUSE daemon (0 =
	// lxcfsAnswerTimeout): a hung lxcfs must not hang sandbox creates.
	answerTimeout time.Duration
}

// errNoAnswer is a live lxcfs that does not answer in time. It is left
// alone: killing it would break every running sandbox's views for good.
var errNoAnswer = errors.New("lxcfs does not answer")

// answered runs a check that talks to the FUSE daemon, within the timeout.
// On a timeout the goroutine stays blocked until lxcfs answers or dies.
func (l lxcfs) answered(check func() error) error {
	done := make(chan error, 1)
	go func() { done <- check() }()
	d := cmp.Or(l.answerTimeout, lxcfsAnswerTimeout)
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("%s: %w within %s", l.dir, errNoAnswer, d)
	}
}

// alive is the cheap check of a mount known to be lxcfs: a statfs goes to
// the FUSE daemon and fails with ENOTCONN once it is gone.
func (l lxcfs) alive() error {
	return l.answered(func() error {
		var st unix.Statfs_t
		if err := unix.Statfs(l.dir, &st); err != nil {
			return fmt.Errorf("statfs %s: %w", l.dir, err)
		}
		if st.Type != unix.FUSE_SUPER_MAGIC {
			return fmt.Errorf("%s is not a FUSE mount", l.dir)
		}
		return nil
	})
}

// healthy reports whether dir is an lxcfs mount that answers.
func (l lxcfs) healthy() error {
	if err := l.alive(); err != nil {
		return err
	}
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(l.dir))
	if err != nil {
		return fmt.Errorf("read mountinfo: %w", err)
	}
	if len(ms) == 0 || ms[len(ms)-1].FSType != "fuse.lxcfs" {
		return fmt.Errorf("%s is not an lxcfs mount", l.dir)
	}
	return l.answered(func() error {
		_, err := os.Stat(filepath.Join(l.dir, "proc/meminfo"))
		return err
	})
}

// ensure makes sure an lxcfs answers at dir and returns its pid (0 if
// unknown). It serializes with other stead processes through dir.lock. A
// mount left by a dead lxcfs is detached and a new lxcfs started; a live
// one that does not answer is an error (errNoAnswer).
func (l lxcfs) ensure(log *slog.Logger) (int, error) {
	dir := l.dir
	// 0711 as the daemon makes its run directory (/run/stead by default).
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return 0, fmt.Errorf("create lxcfs dir: %w", err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return 0, fmt.Errorf("lock lxcfs: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return 0, fmt.Errorf("lock lxcfs: %w", err)
	}
	pidFile := dir + ".pid"
	err = l.healthy()
	if err == nil {
		return readPid(pidFile), nil
	}
	if errors.Is(err, errNoAnswer) {
		return 0, err
	}
	bin := l.bin
	if bin == "" {
		if bin, err = exec.LookPath("lxcfs"); err != nil {
			return 0, fmt.Errorf("lxcfs is not installed: %w", err)
		}
	}
	// A dead lxcfs leaves its mount behind (ENOTCONN); sandboxes still
	// holding binds of it keep them, the mount point is freed.
	if err := unix.Unmount(dir, unix.MNT_DETACH); err == nil {
		log.Warn("detached the mount of a dead lxcfs", "dir", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("create lxcfs mount point: %w", err)
	}
	logf, err := os.OpenFile(dir+".log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("open lxcfs log: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "--- %s stead starts lxcfs\n", time.Now().Format(time.RFC3339))
	args := append(slices.Clone(lxcfsFlags), "--pidfile", pidFile, dir)
	cmd := exec.Command(bin, args...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: no signal meant for the daemon's process group or
	// terminal reaches it, and it lives on when the daemon exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start lxcfs: %w", err)
	}
	exited := make(chan error, 1)
	// Reap it should it exit while this process lives; after that its
	// parent is the host's init.
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid
	deadline := time.Now().Add(lxcfsStartTimeout)
	for {
		err := l.healthy()
		if err == nil {
			break
		}
		select {
		case werr := <-exited:
			return 0, fmt.Errorf("lxcfs exited: %v (log %s: %s)", werr, dir+".log", logTail(dir+".log"))
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return 0, fmt.Errorf("lxcfs did not mount %s within %s: %w", dir, lxcfsStartTimeout, err)
		}
	}
	// Every sandbox's views die with it: the OOM killer must pick others
	// (what the Debian service does). Needs CAP_SYS_RESOURCE.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte("-1000"), 0); err != nil {
		log.Info("lxcfs runs unprotected from the OOM killer", "pid", pid, "err", err)
	}
	log.Info("started lxcfs for sandbox /proc views", "dir", dir, "pid", pid, "flags", strings.Join(lxcfsFlags, " "))
	return pid, nil
}

func readPid(file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func logTail(file string) string {
	b, _ := os.ReadFile(file)
	return tail(bytes.TrimSpace(b), 512)
}

// hostCPUs are the CPUs and memory nodes sandboxes may be given.
type hostCPUs struct {
	ok   bool // a cpuset controller is there to use
	cpus []int
	mems string
	// parent is the cpuset cgroup directory holding the sandboxes' cgroups.
	parent string
}

// hostCPUs learns, once, the CPUs this daemon may run on (its affinity,
// which the kernel keeps within its cpuset, so every CPU in it is allowed
// below the daemon's cgroup), its memory nodes, and where libcontainer puts
// the sandboxes' cpuset cgroups (relative to the daemon's own cgroup).
// Called with views.cpuMu held.
func (r *Runtime) hostCPUs() *hostCPUs {
	v := &r.views
	if v.cpus != nil {
		return v.cpus
	}
	h := &hostCPUs{}
	v.cpus = h
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		r.log.Warn("sandboxes get no cpuset: read CPU affinity", "err", err)
		return h
	}
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			h.cpus = append(h.cpus, c)
		}
	}
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(status), "\n") {
			if val, ok := strings.CutPrefix(l, "Mems_allowed_list:"); ok {
				h.mems = strings.TrimSpace(val)
			}
		}
	}
	if cgroups.IsCgroup2UnifiedMode() {
		// fs2 puts relative parents below the parent of its own cgroup and
		// enables there what that cgroup's parent offers.
		own, err := cgroups.ParseCgroupFile("/proc/self/cgroup")
		if err != nil {
			return h
		}
		base := filepath.Join("/sys/fs/cgroup", filepath.Dir(own[""]))
		ctrl, _ := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
		h.ok = slices.Contains(strings.Fields(string(ctrl)), "cpuset")
		h.parent = filepath.Join(base, r.opts.CgroupParent)
	} else {
		own, err := cgroups.GetOwnCgroupPath("cpuset")
		h.ok = err == nil
		h.parent = filepath.Join(own, r.opts.CgroupParent)
	}
	h.ok = h.ok && len(h.cpus) > 0 && h.mems != ""
	if !h.ok {
		r.log.Warn("sandboxes get no cpuset (no cpuset cgroup controller): nproc inside shows every CPU of the host")
	}
	return h
}

// cpusetFor returns the cpuset.cpus and cpuset.mems of a sandbox with a
// limit of cpus CPUs: ceil(cpus) of the host's CPUs, the least used
// contiguous window (ties broken by the sandbox id, so sandboxes spread
// even when they start together). current is the sandbox's cpuset so far
// ("" for a new one); a resize to the same count keeps it. "" and "" mean
// every CPU (no limit, or no cpuset controller).
func (r *Runtime) cpusetFor(id string, cpus float64, current string) (string, string) {
	if cpus <= 0 {
		return "", ""
	}
	v := &r.views
	v.cpuMu.Lock()
	defer v.cpuMu.Unlock()
	h := r.hostCPUs()
	if !h.ok {
		return "", ""
	}
	n := len(h.cpus)
	k := min(n, max(1, int(math.Ceil(cpus))))
	cur, _ := parseCPUList(current)
	if len(cur) == k && allIn(cur, h.cpus) {
		return formatCPUList(cur), h.mems
	}
	prefer := int(fnvHash(id) % uint32(n))
	if len(cur) > 0 {
		if i := slices.Index(h.cpus, cur[0]); i >= 0 {
			prefer = i
		}
	}
	load := r.cpuLoad(h, id)
	pick := pickCPUs(h.cpus, load, k, prefer)
	if v.recent == nil {
		v.recent = map[string]recentCpuset{}
	}
	v.recent[id] = recentCpuset{cpus: pick, at: time.Now()}
	if v.cpusets != nil {
		v.setCpuset(id, pick)
	}
	return formatCPUList(pick), h.mems
}

// cpuLoad counts, per CPU, the running sandboxes (other than id) whose
// cpuset holds it: the cpusets known in memory (see views.cpusets; the
// cpuset.cpus of every cgroup under the sandboxes' parent, read again
// every cpusetRescan, off the start's path), plus cpusets handed out in
// the last seconds. Its cost does not grow with the sandboxes: the counts
// are kept as cpusets come and go. Called with views.cpuMu held.
func (r *Runtime) cpuLoad(h *hostCPUs, id string) map[int]int {
	v := &r.views
	if v.cpusets == nil {
		// The first start: nothing to count from yet.
		v.replaceCpusets(readCpusets(h))
	} else if time.Since(v.cpusetsAt) > cpusetRescan && !v.rescanning {
		v.rescanning, v.forgotten = true, map[string]bool{}
		go r.rescanCpusets(h)
	}
	load := make(map[int]int, len(v.perCPU))
	for c, n := range v.perCPU {
		load[c] = n
	}
	for _, c := range v.cpusets[id] {
		load[c]--
	}
	for other, rc := range v.recent {
		if time.Since(rc.at) > 10*time.Second {
			delete(v.recent, other)
			continue
		}
		if _, counted := v.cpusets[other]; !counted && other != id {
			for _, c := range rc.cpus {
				load[c]++
			}
		}
	}
	return load
}

// rescanCpusets reads every sandbox's cpuset from the cgroup tree without
// holding cpuMu and then takes it as the count, less the sandboxes
// destroyed meanwhile; cpusets handed out meanwhile are in views.recent.
func (r *Runtime) rescanCpusets(h *hostCPUs) {
	m := readCpusets(h)
	v := &r.views
	v.cpuMu.Lock()
	defer v.cpuMu.Unlock()
	for id := range v.forgotten {
		delete(m, id)
	}
	for id, rc := range v.recent {
		if set, ok := v.cpusets[id]; ok && slices.Equal(rc.cpus, set) {
			m[id] = set // handed out while the tree was read
		}
	}
	v.replaceCpusets(m)
	v.rescanning, v.forgotten = false, nil
}

// readCpusets reads the cpuset of every cgroup under the sandboxes'
// parent.
func readCpusets(h *hostCPUs) map[string][]int {
	out := map[string][]int{}
	ents, _ := os.ReadDir(h.parent)
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(h.parent, e.Name(), "cpuset.cpus"))
		if err != nil {
			continue
		}
		set, err := parseCPUList(string(b))
		if err != nil || len(set) == 0 {
			set = h.cpus // cgroup v2 leaves an unset cpuset empty: every CPU
		}
		out[e.Name()] = set
	}
	return out
}

// pickCPUs returns the k CPUs of the window (contiguous in avail, wrapping
// around) with the least total load; among equals, the first at or after
// avail[prefer].
func pickCPUs(avail []int, load map[int]int, k, prefer int) []int {
	n := len(avail)
	best, bestCost := -1, 0
	for d := 0; d < n; d++ {
		s := (prefer + d) % n
		cost := 0
		for i := 0; i < k; i++ {
			cost += load[avail[(s+i)%n]]
		}
		if best < 0 || cost < bestCost {
			best, bestCost = s, cost
		}
	}
	out := make([]int, 0, k)
	for i := 0; i < k; i++ {
		out = append(out, avail[(best+i)%n])
	}
	slices.Sort(out)
	return out
}

func allIn(set, avail []int) bool {
	for _, c := range set {
		if !slices.Contains(avail, c) {
			return false
		}
	}
	return true
}

func fnvHash(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// parseCPUList parses the kernel's CPU list format ("0-3,8,10-11").
func parseCPUList(s string) ([]int, error) {
	var out []int
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q: bad element %q", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1<<16 {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// formatCPUList writes sorted CPUs in the kernel's list format.
func formatCPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}
