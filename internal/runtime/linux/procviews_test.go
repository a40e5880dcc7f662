package linux

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/guest"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/testutil"
)

// lxcfsHelperEnv makes the test binary play a daemon that starts lxcfs and
// is then killed with SIGKILL (TestLXCFSOutlivesKilledDaemon).
const lxcfsHelperEnv = "STEAD_TEST_LXCFS_HELPER"

func init() {
	if dir := os.Getenv(lxcfsHelperEnv); dir != "" {
		pid, err := (lxcfs{dir: dir}).ensure(slog.New(slog.NewTextHandler(os.Stderr, nil)))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(pid)
		time.Sleep(time.Hour)
		os.Exit(0)
	}
}

func TestCPUListFormatAndParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		cpus []int
		out  string
	}{
		{"", nil, ""},
		{"0", []int{0}, "0"},
		{"0-3", []int{0, 1, 2, 3}, "0-3"},
		{"0-1,3,5-6\n", []int{0, 1, 3, 5, 6}, "0-1,3,5-6"},
		{"3,1,2", []int{1, 2, 3}, "1-3"},
		{"7,7", []int{7}, "7"},
	} {
		got, err := parseCPUList(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.cpus) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", tc.in, got, err, tc.cpus)
		}
		if s := formatCPUList(got); s != tc.out {
			t.Errorf("formatCPUList(%v) = %q, want %q", got, s, tc.out)
		}
	}
	for _, bad := range []string{"a", "1-", "3-1", "-1", "0-99999999"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q): no error", bad)
		}
	}
}

func TestPickCPUsTakesTheLeastUsedWindow(t *testing.T) {
	avail := []int{0, 1, 2, 3}
	for _, tc := range []struct {
		name   string
		load   map[int]int
		k      int
		prefer int
		want   []int
	}{
		{"idle host, preferred start", nil, 1, 2, []int{2}},
		{"idle host, window wraps", nil, 2, 3, []int{0, 3}},
		{"busy CPU 0 is avoided", map[int]int{0: 3}, 1, 0, []int{1}},
		{"least loaded pair", map[int]int{0: 1, 1: 1, 2: 0, 3: 1}, 2, 0, []int{1, 2}},
		{"all CPUs", map[int]int{0: 5}, 4, 1, []int{0, 1, 2, 3}},
		{"tie goes to the first at or after prefer", map[int]int{0: 1, 2: 1}, 1, 2, []int{3}},
	} {
		if got := pickCPUs(avail, tc.load, tc.k, tc.prefer); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v want %v", tc.name, got, tc.want)
		}
	}
	// Sandboxes started one after another spread over the host.
	load := map[int]int{}
	for i := 0; i < 8; i++ {
		for _, c := range pickCPUs(avail, load, 1, 0) {
			load[c]++
		}
	}
	if !reflect.DeepEqual(load, map[int]int{0: 2, 1: 2, 2: 2, 3: 2}) {
		t.Fatalf("8 one-CPU sandboxes on 4 CPUs: %v", load)
	}
}

// newViewsRuntime is a runtime using the host's shared stead lxcfs.
func newViewsRuntime(t *testing.T, dir string) *Runtime {
	t.Helper()
	testutil.RequireRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{StateDir: filepath.Join(dir, "state"), RunDir: filepath.Join(dir, "run"), Binary: exe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { RemoveHostState(filepath.Join(dir, "state")) })
	return r
}

// viewsRoot makes a root filesystem that borrows the host's /usr.
func viewsRoot(t *testing.T) (string, []steadrt.Mount) {
	root := t.TempDir()
	for _, d := range []string{"usr", "etc", "proc", "sys", "dev", "tmp", ".stead", "home/agent"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if _, err := os.Lstat("/usr/" + l); err == nil {
			os.Symlink("usr/"+l, filepath.Join(root, l))
		}
	}
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n"), 0o644)
	return root, []steadrt.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}}
}

func startViews(t *testing.T, r *Runtime, id string, l steadrt.Limits) {
	t.Helper()
	root, mounts := viewsRoot(t)
	ctx := context.Background()
	if err := r.Start(ctx, steadrt.Spec{ID: id, Rootfs: root, Mounts: mounts, Limits: l,
		Env: []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill(context.Background(), id) })
}

// sizeSeen is what a process inside a sandbox learns of its size.
type sizeSeen struct {
	nproc, cpuinfo, statCPUs int
	memTotalKB               int64
	uptime                   float64
	online, allowed          string
	loadavg                  string
	uidMap                   string            // first line of /proc/self/uid_map
	views                    map[string]string // mount point -> "fstype opts"
}

func seeSize(t *testing.T, r *Runtime, id string, uid int) sizeSeen {
	t.Helper()
	script := `
echo "nproc $(nproc)"
echo "cpuinfo $(grep -c ^processor /proc/cpuinfo)"
echo "statcpus $(grep -c '^cpu[0-9]' /proc/stat)"
grep ^MemTotal: /proc/meminfo
echo "uptime $(cut -d' ' -f1 /proc/uptime)"
echo "online $(cat /sys/devices/system/cpu/online)"
echo "allowed $(grep ^Cpus_allowed_list: /proc/self/status | cut -f2)"
echo "loadavg $(cat /proc/loadavg)"
echo "uidmap $(head -1 /proc/self/uid_map)"
cat /proc/swaps /proc/diskstats >/dev/null || echo "unreadable swaps or diskstats"
sed 's/^/mount /' /proc/self/mountinfo
`
	var out, errb bytes.Buffer
	res, err := r.Exec(context.Background(), id, guest.ExecSpec{Args: []string{"sh", "-c", script}, UID: uid, GID: uid, Stdout: &out, Stderr: &errb})
	if err != nil || res.ExitCode != 0 || errb.Len() > 0 {
		t.Fatalf("exec in %s as uid %d: %v exit %d: %s %s", id, uid, err, res.ExitCode, out.String(), errb.String())
	}
	s := sizeSeen{views: map[string]string{}}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			t.Fatalf("odd line %q in %s", sc.Text(), out.String())
		}
		atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
		switch f[0] {
		case "nproc":
			s.nproc = atoi(f[1])
		case "cpuinfo":
			s.cpuinfo = atoi(f[1])
		case "statcpus":
			s.statCPUs = atoi(f[1])
		case "MemTotal:":
			s.memTotalKB, _ = strconv.ParseInt(f[1], 10, 64)
		case "uptime":
			s.uptime, _ = strconv.ParseFloat(f[1], 64)
		case "online":
			s.online = f[1]
		case "allowed":
			s.allowed = f[1]
		case "loadavg":
			s.loadavg = strings.Join(f[1:], " ")
		case "uidmap":
			s.uidMap = strings.Join(f[1:], " ")
		case "mount": // mount ID PARENT MAJ:MIN ROOT POINT OPTIONS ... - FSTYPE ...
			if i := slices.Index(f, "-"); len(f) > 6 && i > 0 && i+1 < len(f) {
				s.views[f[5]] = f[i+1] + " " + f[6]
			}
		default:
			t.Fatalf("unexpected output %q", sc.Text())
		}
	}
	return s
}

// checkViews fails unless every view file is an lxcfs bind, read-only.
func checkViews(t *testing.T, s sizeSeen) {
	t.Helper()
	for _, f := range procViewFiles {
		m := s.views["/"+f]
		if !strings.HasPrefix(m, "fuse.lxcfs ro,") {
			t.Errorf("/%s in the sandbox is %q, want a read-only fuse.lxcfs bind (is lxcfs installed? scripts/setup.sh installs it)", f, m)
		}
	}
}

func sumLoad(load map[int]int) int {
	n := 0
	for _, l := range load {
		n += l
	}
	return n
}

func hostMemTotalKB(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n
}

func hostCPUCount(t *testing.T) int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	return set.Count()
}

func TestMicroSandboxSeesItsOwnSize(t *testing.T) {
	dir := t.TempDir()
	r := newViewsRuntime(t, dir)
	ctx := context.Background()
	micro := steadrt.Limits{CPUs: 0.5, MemoryBytes: 512 << 20, Pids: 256}
	t0 := time.Now()
	startViews(t, r, "pv-micro", micro)
	ncpu := hostCPUCount(t)
	for _, uid := range []int{0, 1000} {
		s := seeSize(t, r, "pv-micro", uid)
		checkViews(t, s)
		if s.nproc != 1 || s.cpuinfo != 1 || s.statCPUs != 1 || s.online != "0" {
			t.Errorf("uid %d: micro sees nproc %d, %d processors in cpuinfo, %d cpuN lines in stat, online %q; want 1, 1, 1, \"0\"", uid, s.nproc, s.cpuinfo, s.statCPUs, s.online)
		}
		if s.memTotalKB != 524288 {
			t.Errorf("uid %d: micro sees MemTotal %d kB, want 524288", uid, s.memTotalKB)
		}
		if max := time.Since(t0).Seconds() + 1; s.uptime > max {
			t.Errorf("uid %d: uptime %.2f s, want the sandbox's (< %.1f s)", uid, s.uptime, max)
		}
		if len(strings.Fields(s.loadavg)) != 5 {
			t.Errorf("uid %d: loadavg %q", uid, s.loadavg)
		}
	}
	// The views hold in a user namespace (uid 0 inside is not host root).
	if s := seeSize(t, r, "pv-micro", 0); !r.opts.NoUserNS && (s.uidMap == "" || strings.HasPrefix(s.uidMap, "0 0 ")) {
		t.Errorf("sandbox uid map %q: want a user namespace", s.uidMap)
	}
	// Its cpuset is unbalanced (the root's balancing covers it): writing
	// its CPUs rebuilt no scheduler domains.
	if r.unbalance {
		c, err := r.mustLoad("pv-micro")
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.State()
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(st.CgroupPaths["cpuset"], "cpuset.sched_load_balance"))
		if err != nil || strings.TrimSpace(string(b)) != "0" {
			t.Errorf("sched_load_balance of the sandbox's cpuset: %q %v", b, err)
		}
	} else if !cgroups.IsCgroup2UnifiedMode() {
		t.Error("a cgroup v1 host whose root cpuset is not balanced: the check above is blind")
	}
	if t.Failed() {
		t.FailNow()
	}

	// A second micro sandbox goes to another CPU when there is one.
	startViews(t, r, "pv-micro2", micro)
	a, b := seeSize(t, r, "pv-micro", 0), seeSize(t, r, "pv-micro2", 0)
	if b.nproc != 1 || (ncpu > 1 && a.allowed == b.allowed) {
		t.Errorf("two micro sandboxes on %d CPUs: cpus %q and %q, nproc %d", ncpu, a.allowed, b.allowed, b.nproc)
	}

	// A large one sees more: 4 CPUs (as many as the host has) and 8 GiB.
	startViews(t, r, "pv-large", steadrt.Limits{CPUs: 4, MemoryBytes: 8 << 30, Pids: 4096})
	l := seeSize(t, r, "pv-large", 1000)
	checkViews(t, l)
	want := min(4, ncpu)
	// The next start counts the cpusets of all three.
	r.views.cpuMu.Lock()
	load := r.cpuLoad(r.hostCPUs(), "pv-next")
	r.views.cpuMu.Unlock()
	if n := sumLoad(load); n != 2+want {
		t.Errorf("CPU load seen by the next start %v (sum %d), want a sum of %d", load, n, 2+want)
	}
	if l.nproc != want || l.cpuinfo != want || l.statCPUs != want {
		t.Errorf("large sees nproc %d, cpuinfo %d, stat %d; want %d", l.nproc, l.cpuinfo, l.statCPUs, want)
	}
	if wantKB := min(8<<20, hostMemTotalKB(t)); l.memTotalKB != wantKB {
		t.Errorf("large sees MemTotal %d kB, want %d", l.memTotalKB, wantKB)
	}

	// Resizing a running sandbox changes what it sees.
	if err := r.Update(ctx, "pv-micro", steadrt.Limits{CPUs: 2, MemoryBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	s := seeSize(t, r, "pv-micro", 1000)
	if want := min(2, ncpu); s.nproc != want || s.cpuinfo != want || s.memTotalKB != 1<<20 {
		t.Errorf("after resize to 2 CPUs, 1 GiB: nproc %d, cpuinfo %d, MemTotal %d kB; want %d, %d, %d", s.nproc, s.cpuinfo, s.memTotalKB, want, want, 1<<20)
	}

	// A daemon restart (a new runtime on the same state) leaves the views
	// working and resizes through the new runtime keep them right.
	r2 := newViewsRuntime(t, dir)
	s = seeSize(t, r2, "pv-micro", 1000)
	checkViews(t, s)
	if err := r2.Update(ctx, "pv-micro", micro); err != nil {
		t.Fatal(err)
	}
	s = seeSize(t, r2, "pv-micro", 1000)
	if s.nproc != 1 || s.cpuinfo != 1 || s.memTotalKB != 524288 {
		t.Errorf("after a restart and a resize back to micro: nproc %d, cpuinfo %d, MemTotal %d kB", s.nproc, s.cpuinfo, s.memTotalKB)
	}
}

// privateLXCFS gives a test its own lxcfs mount point; the cleanup stops
// every lxcfs the test started there.
func privateLXCFS(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "lxcfs")
	t.Cleanup(func() {
		for _, pid := range startedLXCFS(t, dir) {
			unix.Kill(pid, unix.SIGKILL)
		}
		unix.Unmount(dir, unix.MNT_DETACH)
	})
	return dir
}

// startedLXCFS returns the pids of lxcfs processes serving dir.
func startedLXCFS(t *testing.T, dir string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		if len(args) > 1 && filepath.Base(args[0]) == "lxcfs" && args[len(args)-1] == dir {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestLXCFSOutlivesKilledDaemon(t *testing.T) {
	dir := privateLXCFS(t)
	exe, _ := os.Executable()
	helper := exec.Command(exe, "-test.run=^$")
	helper.Env = append(os.Environ(), lxcfsHelperEnv+"="+dir)
	helper.Stderr = os.Stderr
	outp, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(outp).ReadString('\n')
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		helper.Process.Kill()
		helper.Wait()
		t.Fatalf("helper did not start lxcfs: %q %v", line, err)
	}
	// kill -9 of the "daemon" that started lxcfs.
	helper.Process.Kill()
	helper.Wait()
	time.Sleep(100 * time.Millisecond)
	if err := (lxcfs{dir: dir}).healthy(); err != nil {
		t.Fatalf("lxcfs died with the daemon: %v", err)
	}
	if sid, _ := unix.Getsid(pid); sid != pid {
		t.Errorf("lxcfs is in session %d, want its own (%d)", sid, pid)
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	for _, f := range lxcfsFlags {
		if !bytes.Contains(cmdline, []byte("\x00"+f+"\x00")) {
			t.Errorf("lxcfs runs without %s: %q", f, cmdline)
		}
	}

	// The next daemon reuses the healthy mount.
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	again, err := (lxcfs{dir: dir}).ensure(log)
	if err != nil || again != pid {
		t.Fatalf("second ensure: pid %d (want %d) %v", again, pid, err)
	}
	if n := len(startedLXCFS(t, dir)); n != 1 {
		t.Fatalf("%d lxcfs processes serve %s, want 1", n, dir)
	}

	// A dead lxcfs (its mount answers ENOTCONN) is replaced.
	unix.Kill(pid, unix.SIGKILL)
	for i := 0; (lxcfs{dir: dir}).alive() == nil; i++ {
		if i == 500 {
			t.Fatal("mount of a killed lxcfs still answers")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fresh, err := (lxcfs{dir: dir}).ensure(log)
	if err != nil || fresh == pid || fresh == 0 {
		t.Fatalf("ensure after lxcfs died: pid %d %v", fresh, err)
	}
	if err := (lxcfs{dir: dir}).healthy(); err != nil {
		t.Fatal(err)
	}
}

func TestSandboxStartsWithoutLXCFS(t *testing.T) {
	dir := t.TempDir()
	r := newViewsRuntime(t, dir)
	var logs bytes.Buffer
	r.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r.views.own.dir = filepath.Join(dir, "lxcfs")
	r.views.own.bin = filepath.Join(dir, "no-such-lxcfs")
	r.views.system.dir = filepath.Join(dir, "no-system-lxcfs")
	startViews(t, r, "pv-noviews", steadrt.Limits{CPUs: 0.5, MemoryBytes: 512 << 20})
	startViews(t, r, "pv-noviews2", steadrt.Limits{CPUs: 0.5, MemoryBytes: 512 << 20})
	s := seeSize(t, r, "pv-noviews", 1000)
	if len(s.views) == 0 || s.views["/proc/meminfo"] != "" {
		t.Fatalf("views without lxcfs: %v", s.views)
	}
	// The cpuset does not need lxcfs.
	if s.nproc != 1 {
		t.Errorf("nproc %d without lxcfs, want 1", s.nproc)
	}
	if n := strings.Count(logs.String(), "without /proc views"); n != 1 {
		t.Fatalf("%d warnings for two starts without lxcfs, want 1:\n%s", n, logs.String())
	}
}

func TestCpusetForSpreadsAndFollowsResizes(t *testing.T) {
	r := newViewsRuntime(t, t.TempDir())
	ncpu := hostCPUCount(t)
	if cpus, mems := r.cpusetFor("pv-unlimited", 0, ""); cpus != "" || mems != "" {
		t.Fatalf("no cpu limit gives cpuset %q/%q, want every CPU", cpus, mems)
	}
	a, mems := r.cpusetFor("pv-a", 0.5, "")
	b, _ := r.cpusetFor("pv-b", 0.5, "")
	if mems == "" {
		t.Fatal("no cpuset.mems")
	}
	if ncpu > 1 && a == b {
		t.Fatalf("two sandboxes starting together both get CPU %s of %d", a, ncpu)
	}
	if again, _ := r.cpusetFor("pv-a", 1, a); again != a {
		t.Fatalf("a resize to the same CPU count moved the sandbox from %s to %s", a, again)
	}
	grown, _ := r.cpusetFor("pv-a", 1.5, a)
	if set, _ := parseCPUList(grown); len(set) != min(2, ncpu) {
		t.Fatalf("1.5 CPUs gives cpuset %q on %d CPUs", grown, ncpu)
	}
	all, _ := r.cpusetFor("pv-a", 64, grown)
	if set, _ := parseCPUList(all); len(set) != ncpu {
		t.Fatalf("64 CPUs gives cpuset %q on %d CPUs", all, ncpu)
	}
	shrunk, _ := r.cpusetFor("pv-a", 1, all)
	if set, _ := parseCPUList(shrunk); len(set) != 1 {
		t.Fatalf("shrink to 1 CPU gives cpuset %q", shrunk)
	}
}

func TestHungLXCFSDoesNotHangCreates(t *testing.T) {
	dir := privateLXCFS(t)
	r := newViewsRuntime(t, t.TempDir())
	var logs bytes.Buffer
	r.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pids := viewsFromOwnLXCFS(t, r, lxcfs{dir: dir, answerTimeout: 300 * time.Millisecond})
	// A stopped lxcfs never answers, as a hung one would.
	unix.Kill(pids[0], unix.SIGSTOP)
	defer unix.Kill(pids[0], unix.SIGCONT)
	// kill returns before the process is stopped: wait until every thread
	// of it is (a thread still running could answer one more request).
	waitStopped(t, pids[0])
	// Its last answer stands for lxcfsRecheck: a start meanwhile asks
	// nothing of it.
	t0 := time.Now()
	if ms := r.procViewMounts(); len(ms) != len(procViewFiles) {
		t.Fatalf("views within a second of lxcfs's last answer: %d mounts", len(ms))
	}
	if d := time.Since(t0); d > 100*time.Millisecond {
		t.Fatalf("a start within a second of lxcfs's last answer took %s: it asked lxcfs again", d)
	}
	r.views.mu.Lock()
	r.views.answeredAt = time.Now().Add(-lxcfsRecheck)
	r.views.mu.Unlock()
	t0 = time.Now()
	if ms := r.procViewMounts(); ms != nil {
		t.Fatalf("views from a hung lxcfs: %d mounts", len(ms))
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("a hung lxcfs held the create up for %s", d)
	}
	if !strings.Contains(logs.String(), "does not answer") {
		t.Fatalf("no warning about the hung lxcfs:\n%s", logs.String())
	}
	if now := startedLXCFS(t, dir); len(now) != 1 || now[0] != pids[0] {
		t.Fatalf("the hung lxcfs was replaced or killed: %v (was %v)", now, pids)
	}
	// It recovers: the next try after the retry delay gets the views back.
	unix.Kill(pids[0], unix.SIGCONT)
	r.views.mu.Lock()
	r.views.retryAt = time.Time{}
	r.views.mu.Unlock()
	if ms := r.procViewMounts(); len(ms) != len(procViewFiles) {
		t.Fatalf("views after lxcfs answers again: %d mounts", len(ms))
	}
}

// viewsFromOwnLXCFS has r take its views from own (no system lxcfs to
// fall back on) and returns the pid of the one lxcfs it started.
func viewsFromOwnLXCFS(t *testing.T, r *Runtime, own lxcfs) []int {
	t.Helper()
	r.views.own = own
	r.views.system.dir = filepath.Join(t.TempDir(), "no-system-lxcfs")
	if ms := r.procViewMounts(); len(ms) != len(procViewFiles) {
		t.Fatalf("views: %d mounts", len(ms))
	}
	pids := startedLXCFS(t, own.dir)
	if len(pids) != 1 {
		t.Fatalf("lxcfs processes for %s: %v", own.dir, pids)
	}
	return pids
}

// waitStopped waits until every thread of pid is in the stopped state.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		stopped := len(stats) > 0
		for _, st := range stats {
			b, err := os.ReadFile(st)
			// The state follows the ")" that ends the command name.
			if i := bytes.LastIndexByte(b, ')'); err != nil || i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
				stopped = false
			}
		}
		if stopped {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("lxcfs %d did not stop", pid)
}

// TestCpuLoadReadsTheCgroupTreeOnlyEveryRescan: a start does not read the
// cpuset of every other sandbox (O(n) files per create): the cpusets are
// read once, kept in memory, read again only after cpusetRescan (beside
// the start, not in its path), and a destroyed sandbox leaves the count
// at once.
func TestCpuLoadReadsTheCgroupTreeOnlyEveryRescan(t *testing.T) {
	r := newViewsRuntime(t, t.TempDir())
	v := &r.views
	v.cpuMu.Lock()
	h := r.hostCPUs()
	v.cpuMu.Unlock()
	if !h.ok {
		t.Fatal("no cpuset controller on this host")
	}
	load := func() map[int]int {
		v.cpuMu.Lock()
		defer v.cpuMu.Unlock()
		return r.cpuLoad(h, "pv-self")
	}
	sum := func(m map[int]int) int {
		n := 0
		for _, c := range m {
			n += c
		}
		return n
	}
	before := sum(load())
	if err := os.MkdirAll(h.parent, 0o755); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(h.parent, "pv-cached-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(stray, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(stray) })
	if got := sum(load()); got != before {
		t.Fatalf("load %d → %d without a rescan: the cgroup tree was read again", before, got)
	}
	v.cpuMu.Lock()
	v.cpusetsAt = time.Now().Add(-2 * cpusetRescan)
	v.cpuMu.Unlock()
	// The rescan runs beside the start that found the count stale.
	for deadline := time.Now().Add(5 * time.Second); sum(load()) <= before; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("load %d 5 s after a rescan with one more sandbox cgroup, want more than %d", sum(load()), before)
		}
	}
	r.forgetCpuset(filepath.Base(stray))
	if got := sum(load()); got != before {
		t.Fatalf("load %d after the sandbox was destroyed, want %d", got, before)
	}
}

// TestCpuLoadKeepsItsCountsInStep: the per-CPU counts a start reads are
// kept as cpusets are handed out, changed and forgotten, and always equal
// a count over every known cpuset (less the starting sandbox's own), plus
// what was handed out in the last seconds and is not known yet.
func TestCpuLoadKeepsItsCountsInStep(t *testing.T) {
	r := newViewsRuntime(t, t.TempDir())
	v := &r.views
	h := &hostCPUs{ok: true, cpus: []int{0, 1, 2, 3}, parent: filepath.Join(t.TempDir(), "none")}
	v.cpuMu.Lock()
	defer v.cpuMu.Unlock()
	v.replaceCpusets(map[string][]int{"a": {0, 1}, "b": {1}, "c": {2, 3}})
	v.recent = map[string]recentCpuset{"new": {cpus: []int{3}, at: time.Now()}, "old": {cpus: []int{0}, at: time.Now().Add(-time.Minute)}}
	v.setCpuset("b", []int{2})  // a resize
	v.setCpuset("d", []int{0})  // a start
	v.dropCpuset("c")           // a destroy
	v.dropCpuset("never-known") // a destroy of what was never counted
	want := map[int]int{}
	for id, set := range v.cpusets {
		if id == "a" {
			continue
		}
		for _, c := range set {
			want[c]++
		}
	}
	want[3]++ // "new", handed out and not known yet; "old" has expired
	got := r.cpuLoad(h, "a")
	for _, c := range h.cpus {
		if got[c] != want[c] {
			t.Errorf("load of CPU %d: %d, want %d (all: %v)", c, got[c], want[c], got)
		}
	}
	if _, ok := v.recent["old"]; ok {
		t.Error("an expired hand-out is still counted")
	}
}

// TestADeadLXCFSIsNoticedAtOnce: a start within a second of lxcfs's last
// answer does not ask it again, but an lxcfs that has exited meanwhile is
// seen at once (by its pidfd): the start gets the views of a new lxcfs,
// never binds of the dead one's mount.
func TestADeadLXCFSIsNoticedAtOnce(t *testing.T) {
	dir := privateLXCFS(t)
	r := newViewsRuntime(t, t.TempDir())
	pids := viewsFromOwnLXCFS(t, r, lxcfs{dir: dir})
	pidfd, err := lxcfsPidfd(pids[0])
	if err != nil {
		t.Fatal(err)
	}
	defer pidfd.Close()
	unix.Kill(pids[0], unix.SIGKILL)
	for deadline := time.Now().Add(5 * time.Second); pidfdRuns(pidfd); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("lxcfs did not exit")
		}
	}
	ms := r.procViewMounts()
	now := startedLXCFS(t, dir)
	if len(now) != 1 || now[0] == pids[0] {
		t.Fatalf("lxcfs after the old one died: %v (was %v)", now, pids)
	}
	if len(ms) != len(procViewFiles) {
		t.Fatalf("views from the new lxcfs: %d mounts", len(ms))
	}
	for _, m := range ms {
		if _, err := os.Stat(m.Source); err != nil {
			t.Fatalf("a view's source: %v", err)
		}
	}
}
