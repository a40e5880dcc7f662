package repo_test

// Crash tests: a child process (this test binary, re-executed) runs a push,
// prune or restore and is killed with SIGKILL, either after a random delay
// spread over the operation or just before or after its n-th write (Put or
// Delete) for a random n; the parent then checks the sentences of the
// "Crash ordering" paragraph in doc.go against what the child left:
//
//   - "a manifest never names a tree or chunk whose pack and index entry are
//     not already durable": after every kill, a structure check of the
//     repository opened afresh (no cache) has no error, and every manifest
//     restores to exactly the tree digest recorded in it;
//   - "a push killed at any point leaves at worst packs no index lists
//     (check reports them, prune deletes them) or an index without a
//     manifest": check may warn, never err, and after a prune in the
//     parent check --read-data is clean with no warning left;
//   - "Prune writes repacked packs first, then a new index file ..., then
//     deletes the old index files, and only then deletes packs": "a prune
//     killed at any point leaves every manifest's blobs reachable through
//     a live index": after every killed prune, every manifest still
//     restores exactly, and a prune in the parent cleans up what is left.
//
// A restore writes nothing to the repository: a killed restore leaves the
// store's objects as they were, and its target is simply discarded.
//
// Each test logs where its kills landed, told from the objects they left
// (before the first write, packs without an index, an index without its
// manifest, a prune's new index beside the ones it supersedes ...), so a
// reader sees which sentences the run exercised.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/blobstore/local"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/repo/chunker"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// Environment of a crash child.
const (
	envCrashOp     = "STEAD_REPO_CRASH_CHILD"  // push | prune | restore | repair
	envCrashRepo   = "STEAD_REPO_CRASH_REPO"   // local blob store directory
	envCrashKey    = "STEAD_REPO_CRASH_KEY"    // file holding the master key (hex)
	envCrashCache  = "STEAD_REPO_CRASH_CACHE"  // the child's cache directory
	envCrashPath   = "STEAD_REPO_CRASH_PATH"   // push or repair source, or restore target
	envCrashID     = "STEAD_REPO_CRASH_ID"     // push parent or restored manifest
	envCrashDigest = "STEAD_REPO_CRASH_DIGEST" // push: digest to record
	envCrashPack   = "STEAD_REPO_CRASH_PACK"   // pack size in bytes
	envCrashAt     = "STEAD_REPO_CRASH_AT"     // optional: "<n> before|after": die at the n-th Put or Delete
	envCrashSeed   = "STEAD_REPO_CRASH_SEED"   // optional: seed of the kill delays
)

// crashScope is the scope every crash test works in.
const crashScope = "t-crash"

// crashChunker cuts chunks of about 64 KiB, so a tree of a few MiB makes
// many blobs and, with a small pack size, many packs: many crash points for
// little data.
func crashChunker() chunker.Params {
	return chunker.Params{Min: 16 << 10, Avg: 64 << 10, Max: 256 << 10}
}

// TestMain runs a crash child instead of the tests when the environment
// names an operation (see crashChild).
func TestMain(m *testing.M) {
	if op := os.Getenv(envCrashOp); op != "" {
		os.Exit(crashChild(op))
	}
	os.Exit(m.Run())
}

// crashChild runs one operation for the parent. It writes "S\n" to stdout
// when the operation starts and "D <n>\n" once it has returned
// successfully, n being how many Puts and Deletes it made.
func crashChild(op string) int {
	ctx := context.Background()
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "crash child %s: %v\n", op, err)
		return 2
	}
	hexKey, err := os.ReadFile(os.Getenv(envCrashKey))
	if err != nil {
		return fail(err)
	}
	var master seal.Key
	if n, err := hex.Decode(master[:], bytes.TrimSpace(hexKey)); err != nil || n != len(master) {
		return fail(fmt.Errorf("master key file: %d bytes, %v", n, err))
	}
	inner, err := local.New(os.Getenv(envCrashRepo))
	if err != nil {
		return fail(err)
	}
	store := &killStore{BlobStore: inner}
	if at := os.Getenv(envCrashAt); at != "" {
		var when string
		if _, err := fmt.Sscanf(at, "%d %s", &store.at, &when); err != nil || (when != "before" && when != "after") {
			return fail(fmt.Errorf("%s=%q: want \"<n> before|after\"", envCrashAt, at))
		}
		store.after = when == "after"
	}
	packSize, err := strconv.Atoi(os.Getenv(envCrashPack))
	if err != nil {
		return fail(err)
	}
	r, err := repo.Open(ctx, store, master, repo.Options{CacheDir: os.Getenv(envCrashCache), PackSize: packSize, Logger: quiet()})
	if err != nil {
		return fail(err)
	}
	sc, err := r.Scope(ctx, crashScope, false)
	if err != nil {
		return fail(err)
	}
	var id seal.ID
	if s := os.Getenv(envCrashID); s != "" {
		if id, err = seal.ParseID(s); err != nil {
			return fail(err)
		}
	}
	os.Stdout.WriteString("S\n")
	switch op {
	case "push":
		_, _, err = sc.Push(ctx, os.Getenv(envCrashPath), repo.PushOptions{Parent: id, Source: "crash", Digest: os.Getenv(envCrashDigest)})
	case "prune":
		_, err = sc.Prune(ctx, repo.PruneOptions{})
	case "restore":
		_, err = sc.Restore(ctx, id, os.Getenv(envCrashPath), repo.RestoreOptions{})
	case "repair":
		// The source tree is the exact local copy of every manifest.
		_, err = sc.Repair(ctx, repo.RepairOptions{Sources: func(*repo.Manifest) []repo.RepairSource {
			return []repo.RepairSource{{Dir: os.Getenv(envCrashPath), Exact: true, Name: "source"}}
		}})
	default:
		err = fmt.Errorf("unknown operation")
	}
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(os.Stdout, "D %d\n", store.writes.Load())
	return 0
}

// killStore counts the writes (Put, Delete) of a crash child and kills the
// process with SIGKILL just before or just after the at-th one: a crash
// at an exact step of the write order, which random delays rarely hit
// when the step is short (the manifest after the index, the deletions
// after a prune's index). Concurrent writes in flight are cut wherever
// they are, as by a real crash.
type killStore struct {
	blobstore.BlobStore
	at     int64 // 0: never
	after  bool
	writes atomic.Int64
}

func (k *killStore) write(op func() error) error {
	n := k.writes.Add(1)
	if n == k.at && !k.after {
		dieNow()
	}
	err := op()
	if n == k.at && k.after {
		dieNow()
	}
	return err
}

// Put counts the write and may kill the process around it.
func (k *killStore) Put(ctx context.Context, key string, data []byte) error {
	return k.write(func() error { return k.BlobStore.Put(ctx, key, data) })
}

// Delete counts the write and may kill the process around it.
func (k *killStore) Delete(ctx context.Context, key string) error {
	return k.write(func() error { return k.BlobStore.Delete(ctx, key) })
}

func dieNow() {
	_ = syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL cannot be caught; wait for it
}

// crashRig runs crash children against one repository and verifies what
// they leave.
type crashRig struct {
	t       *testing.T
	base    string // every directory of the test lives below it
	dir     string // the local blob store's directory
	keyFile string
	cache   string // the children's cache: it survives kills, so torn cache files are exercised too
	master  seal.Key
	// packSize is the target pack size of every push and prune.
	packSize int
	rng      *rand.Rand
	// digests are the tree digests the parent handed to pushes: a manifest
	// may only record one of them.
	digests map[string]bool
	// restored are manifests already restored exactly since the last prune
	// (manifest objects are immutable, and only prune removes data).
	restored map[seal.ID]bool

	trials, killed, finished, cleanChecks int
	pointTrials, pointKilled              int
	// leftovers counts checks that warned (packs no index lists, left by
	// a kill mid-push or mid-repack).
	leftovers int
	// phases counts where the kills landed, told from what they left.
	phases map[string]int
}

func newCrashRig(t *testing.T, packSize int) *crashRig {
	t.Helper()
	seed := uint64(1)
	if s := os.Getenv(envCrashSeed); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envCrashSeed, s, err)
		}
		seed = v
	}
	base := crashBase(t)
	c := &crashRig{t: t, base: base, dir: filepath.Join(base, "repo"), keyFile: filepath.Join(base, "master.key"),
		cache: filepath.Join(base, "child-cache"), packSize: packSize, rng: rand.New(rand.NewPCG(seed, 0xc4a5)),
		digests: map[string]bool{}, restored: map[seal.ID]bool{}, phases: map[string]int{}}
	master, err := seal.NewKey()
	must(t, err)
	c.master = master
	must(t, os.WriteFile(c.keyFile, []byte(hex.EncodeToString(master[:])+"\n"), 0o600))
	store, err := local.New(c.dir)
	must(t, err)
	ctx := context.Background()
	must(t, repo.Init(ctx, store, master, repo.InitOptions{Chunker: crashChunker()}))
	r, err := repo.Open(ctx, store, master, repo.Options{Logger: quiet()})
	must(t, err)
	_, err = r.Scope(ctx, crashScope, true)
	must(t, err)
	t.Logf("crash seed %d (set %s to replay another)", seed, envCrashSeed)
	return c
}

// open opens the repository afresh: a new Repository, no cache.
func (c *crashRig) open() (*repo.Scope, blobstore.BlobStore) {
	c.t.Helper()
	ctx := context.Background()
	store, err := local.New(c.dir)
	must(c.t, err)
	r, err := repo.Open(ctx, store, c.master, repo.Options{PackSize: c.packSize, Logger: quiet()})
	must(c.t, err)
	sc, err := r.Scope(ctx, crashScope, false)
	must(c.t, err)
	return sc, store
}

// childResult is what a crash child did.
type childResult struct {
	killed bool          // it died of SIGKILL
	took   time.Duration // from start to finish, when it finished
	writes int           // its Puts and Deletes, when it finished
}

// child runs op in a child process. With kill >= 0 the child is sent
// SIGKILL that long after it reported the start of the operation (unless
// it finished first).
func (c *crashRig) child(op string, kill time.Duration, env ...string) childResult {
	c.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envCrashOp+"="+op, envCrashRepo+"="+c.dir, envCrashKey+"="+c.keyFile,
		envCrashCache+"="+c.cache, envCrashPack+"="+strconv.Itoa(c.packSize))
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	must(c.t, err)
	must(c.t, cmd.Start())
	lines := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	started := false
	select {
	case l := <-lines:
		started = l == "S"
	case <-time.After(60 * time.Second):
	}
	if !started {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		c.t.Fatalf("crash child %s did not start: %s", op, stderr.String())
	}
	start := time.Now()
	done := make(chan struct{})
	var res childResult
	var doneAt time.Time
	go func() {
		for l := range lines {
			if n, ok := strings.CutPrefix(l, "D "); ok {
				doneAt = time.Now()
				res.writes, _ = strconv.Atoi(n)
			}
		}
		close(done)
	}()
	if kill >= 0 {
		timer := time.NewTimer(kill)
		select {
		case <-timer.C:
			_ = cmd.Process.Signal(syscall.SIGKILL)
		case <-done:
			timer.Stop()
		}
	}
	<-done
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return childResult{killed: true}
		}
	}
	if err != nil {
		c.t.Fatalf("crash child %s failed on its own: %v\n%s", op, err, stderr.String())
	}
	if doneAt.IsZero() {
		c.t.Fatalf("crash child %s exited without finishing", op)
	}
	res.took = doneAt.Sub(start)
	return res
}

// trial runs op killed at a delay uniform in [0, 1.2*d) and counts it. d
// starts as a measured duration of op and adapts: it grows by 5% after a
// kill and shrinks by 20% when the child finished first, which settles
// where about one trial in six finishes, as uniform delays over 1.2 times
// the true duration would. So the kills cover the whole operation, its
// last writes included, even when the machine is slower than during the
// measurement.
func (c *crashRig) trial(op string, d *time.Duration, env ...string) bool {
	c.t.Helper()
	delay := time.Duration(c.rng.Int64N(int64(*d)*6/5 + 1))
	res := c.child(op, delay, env...)
	c.trials++
	if res.killed {
		c.killed++
		*d = *d * 21 / 20
	} else {
		c.finished++
		*d = *d * 4 / 5
	}
	return res.killed
}

// pointTrial runs op killed just before or just after its n-th write, n
// uniform in [1, writes+1] (writes: how many the last finished run of
// this kind made, updated when this one finishes), and counts it.
func (c *crashRig) pointTrial(op string, writes *int, env ...string) bool {
	c.t.Helper()
	when := "before"
	if c.rng.IntN(2) == 1 {
		when = "after"
	}
	at := fmt.Sprintf("%d %s", 1+c.rng.IntN(*writes+1), when)
	res := c.child(op, -1, append(env, envCrashAt+"="+at)...)
	c.pointTrials++
	if res.killed {
		c.pointKilled++
	} else {
		*writes = res.writes
	}
	return res.killed
}

// verify checks the repository the way the crash ordering promises it
// after any kill: a structure check without errors, and every manifest
// restoring to exactly its digest (all of them when all is set, else those
// not restored since the last prune).
func (c *crashRig) verify(all bool) {
	c.t.Helper()
	ctx := context.Background()
	sc, _ := c.open()
	res, err := sc.Check(ctx, repo.CheckOptions{})
	must(c.t, err)
	if !res.OK() {
		c.t.Fatalf("check after trial %d: errors %q (warnings %q)", c.trials, res.Errors, res.Warnings)
	}
	c.cleanChecks++
	if len(res.Warnings) > 0 {
		c.leftovers++
	}
	if all {
		clear(c.restored)
	}
	ms, err := sc.Snapshots(ctx)
	must(c.t, err)
	for _, m := range ms {
		if c.restored[m.ID] {
			continue
		}
		c.restoreExact(sc, m)
		c.restored[m.ID] = true
	}
}

// restoreExact restores m into a fresh directory and compares its digest
// with the one recorded in m.
func (c *crashRig) restoreExact(sc *repo.Scope, m *repo.Manifest) {
	c.t.Helper()
	if !c.digests[m.Digest] {
		c.t.Fatalf("manifest %s records digest %q that no push was given", m.ID, m.Digest)
	}
	dst, err := os.MkdirTemp(c.base, "restore-")
	must(c.t, err)
	if _, err := sc.Restore(context.Background(), m.ID, dst, repo.RestoreOptions{}); err != nil {
		c.t.Fatalf("restore manifest %s after trial %d: %v", m.ID, c.trials, err)
	}
	if got := digest(c.t, dst); got != m.Digest {
		c.t.Fatalf("manifest %s restores to %s, recorded %s", m.ID, got, m.Digest)
	}
	must(c.t, os.RemoveAll(dst))
}

// pruneClean prunes in the parent and requires check --read-data of the
// repository opened afresh to be clean with no warning left.
func (c *crashRig) pruneClean() {
	c.t.Helper()
	ctx := context.Background()
	sc, store := c.open()
	_, err := sc.Prune(ctx, repo.PruneOptions{})
	must(c.t, err)
	sc, _ = c.open()
	res, err := sc.Check(ctx, repo.CheckOptions{ReadData: true})
	must(c.t, err)
	if !res.OK() || len(res.Warnings) > 0 {
		c.t.Fatalf("check --read-data after prune (trial %d): errors %q, warnings %q", c.trials, res.Errors, res.Warnings)
	}
	if res.PacksRead != res.Packs {
		c.t.Fatalf("check --read-data read %d of %d packs", res.PacksRead, res.Packs)
	}
	left, err := store.List(ctx, "scopes/"+crashScope+"/index/")
	must(c.t, err)
	if len(left) > 1 {
		c.t.Fatalf("prune left %d index files, want at most 1", len(left))
	}
	// The read-data check proves every manifest's trees and chunks are
	// indexed, present and authentic: the manifests restored before the
	// prune stay restorable without restoring them again.
	c.cleanChecks++
}

// forgetAllBut forgets every manifest except the newest keep.
func (c *crashRig) forgetAllBut(keep int) {
	c.t.Helper()
	ctx := context.Background()
	sc, _ := c.open()
	ms, err := sc.Snapshots(ctx)
	must(c.t, err)
	if len(ms) <= keep {
		return
	}
	var ids []seal.ID
	for _, m := range ms[:len(ms)-keep] {
		ids = append(ids, m.ID)
		delete(c.restored, m.ID)
	}
	must(c.t, sc.Forget(ctx, ids...))
}

// latest returns the newest manifest (nil if there is none).
func (c *crashRig) latest() *repo.Manifest {
	c.t.Helper()
	sc, _ := c.open()
	ms, err := sc.Snapshots(context.Background())
	must(c.t, err)
	if len(ms) == 0 {
		return nil
	}
	return ms[len(ms)-1]
}

// pushEnv is the environment of a push of src (recording its digest),
// incremental to parent when it is not nil.
func (c *crashRig) pushEnv(src string, parent *repo.Manifest) []string {
	c.t.Helper()
	d := digest(c.t, src)
	c.digests[d] = true
	env := []string{envCrashPath + "=" + src, envCrashDigest + "=" + d}
	if parent != nil {
		env = append(env, envCrashID+"="+parent.ID.String())
	}
	return env
}

// pushNow pushes src in a child that is not killed.
func (c *crashRig) pushNow(src string, parent *repo.Manifest) childResult {
	c.t.Helper()
	return c.child("push", -1, c.pushEnv(src, parent)...)
}

func (c *crashRig) summary(op string, start time.Time) {
	c.t.Logf("%s crash trials: %d killed at a random delay (killed mid-operation %d, finished before the kill %d), "+
		"%d killed at a random write (killed %d); clean structure checks %d; %s",
		op, c.trials, c.killed, c.finished, c.pointTrials, c.pointKilled, c.cleanChecks, time.Since(start).Round(time.Millisecond))
	var ph []string
	for k, v := range c.phases {
		ph = append(ph, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(ph)
	c.t.Logf("%s kills by what they left (delay:/write:): %s; checks warning of unindexed packs %d", op, strings.Join(ph, ", "), c.leftovers)
	// The adaptation of trial aims at about five kills in six; far fewer
	// means the kills did not reach into the operation.
	if c.killed < c.trials/2 {
		c.t.Fatalf("only %d of %d trials killed the child mid-operation: the delays do not cover the operation", c.killed, c.trials)
	}
}

// crashTree is a source tree of many small files in nested directories and
// a few larger ones (about mb MiB), rewritten in part between pushes.
type crashTree struct {
	t     *testing.T
	dir   string
	rng   *rand.Rand
	files []string // relative paths of the regular files
	gen   uint64
}

func newCrashTree(t *testing.T, base string, mb int, seed uint64) *crashTree {
	t.Helper()
	ct := &crashTree{t: t, dir: filepath.Join(base, "src"), rng: rand.New(rand.NewPCG(seed, 7))}
	budget := mb << 20
	// A quarter in three big files, the rest in small files of 4..64 KiB
	// spread over nested directories.
	for i := range 3 {
		ct.write(fmt.Sprintf("big-%d.bin", i), budget/12)
	}
	budget -= 3 * (budget / 12)
	for i := 0; budget > 0; i++ {
		n := 4<<10 + ct.rng.IntN(60<<10)
		rel := fmt.Sprintf("d%02d/e%d/f%04d", i%16, i%3, i)
		ct.write(rel, n)
		budget -= n
	}
	must(t, os.Symlink("d00/e0/f0000", filepath.Join(ct.dir, "link")))
	return ct
}

// write (re)writes rel with n fresh random bytes, compressible in part.
func (ct *crashTree) write(rel string, n int) {
	ct.t.Helper()
	p := filepath.Join(ct.dir, rel)
	must(ct.t, os.MkdirAll(filepath.Dir(p), 0o755))
	ct.gen++
	b := randBytes(ct.rng.Uint64(), n)
	copy(b[n/2:], bytes.Repeat([]byte("stead crash test "), n/2/17)) // half compressible
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		ct.files = append(ct.files, rel)
	}
	must(ct.t, os.WriteFile(p, b, 0o644))
}

// change rewrites about frac of the small files, rewrites a region of one
// big file in place, and adds and deletes a file.
func (ct *crashTree) change(frac float64) {
	ct.t.Helper()
	for _, rel := range ct.files {
		if strings.HasPrefix(rel, "big-") || ct.rng.Float64() >= frac {
			continue
		}
		ct.write(rel, 4<<10+ct.rng.IntN(60<<10))
	}
	big := filepath.Join(ct.dir, fmt.Sprintf("big-%d.bin", ct.rng.IntN(3)))
	f, err := os.OpenFile(big, os.O_WRONLY, 0)
	must(ct.t, err)
	st, err := f.Stat()
	must(ct.t, err)
	_, err = f.WriteAt(randBytes(ct.rng.Uint64(), 256<<10), ct.rng.Int64N(st.Size()-256<<10))
	must(ct.t, err)
	must(ct.t, f.Close())
	// Add one file, delete one small file.
	ct.write(fmt.Sprintf("d%02d/new-%d", ct.rng.IntN(16), ct.gen), 32<<10)
	for {
		i := ct.rng.IntN(len(ct.files))
		if !strings.HasPrefix(ct.files[i], "big-") {
			must(ct.t, os.Remove(filepath.Join(ct.dir, ct.files[i])))
			ct.files = slices.Delete(ct.files, i, i+1)
			break
		}
	}
}

// TestPushKilledAnywhereLeavesEveryManifestRestorable kills 100 pushes
// (full and incremental, alternately, each after a change of the source)
// at random moments: 70 after a random delay, 30 around a random write.
// After each kill the repository opened afresh checks
// clean (warnings allowed) and every manifest restores to exactly its
// digest; every tenth trial and at the end a prune in the parent leaves
// check --read-data clean without warnings.
func TestPushKilledAnywhereLeavesEveryManifestRestorable(t *testing.T) {
	start := time.Now()
	c := newCrashRig(t, 512<<10)
	src := newCrashTree(t, c.base, 8, 11)
	// Calibrate: three full and three incremental pushes, each after a
	// change and run to the end (their manifests are verified like any
	// other). The median is robust to a busy machine.
	var full, inc []time.Duration
	var fullWrites, incWrites int
	for range 3 {
		r := c.pushNow(src.dir, nil)
		full, fullWrites = append(full, r.took), r.writes
		src.change(0.25)
		r = c.pushNow(src.dir, c.latest())
		inc, incWrites = append(inc, r.took), r.writes
		src.change(0.25)
	}
	dFull, dInc := median(full), median(inc)
	c.verify(false)
	t.Logf("push durations: full %v, incremental %v", full, inc)

	// 70 trials killed at a random delay and 30 at a random write,
	// alternately full and incremental.
	for i := range 100 {
		src.change(0.25)
		before := c.objects()
		var env []string
		if i%2 == 0 {
			env = c.pushEnv(src.dir, nil)
		} else {
			env = c.pushEnv(src.dir, c.latest())
		}
		mode := "delay:"
		var killed bool
		switch {
		case i%10 == 3 || i%10 == 6 || i%10 == 8:
			mode = "write:"
			if i%2 == 0 {
				killed = c.pointTrial("push", &fullWrites, env...)
			} else {
				killed = c.pointTrial("push", &incWrites, env...)
			}
		case i%2 == 0:
			killed = c.trial("push", &dFull, env...)
		default:
			killed = c.trial("push", &dInc, env...)
		}
		if killed {
			c.phases[mode+pushPhase(before, c.objects())]++
		}
		c.verify(false)
		if i%10 == 9 {
			c.forgetAllBut(2)
			c.pruneClean()
		}
	}
	c.pruneClean()
	t.Logf("adapted push durations: full %v, incremental %v", dFull, dInc)
	c.summary("push", start)
}

// TestPruneKilledAnywhereKeepsEveryManifestRestorable kills 60 prunes at
// random moments (40 after a random delay, 20 around a random write),
// after changes, pushes and forgets have left packs to delete and to
// repack. After each kill the repository opened afresh
// checks clean and every remaining manifest restores to exactly its
// digest; a prune in the parent then leaves check --read-data clean
// without warnings.
func TestPruneKilledAnywhereKeepsEveryManifestRestorable(t *testing.T) {
	start := time.Now()
	c := newCrashRig(t, 256<<10)
	src := newCrashTree(t, c.base, 4, 12)
	c.pushNow(src.dir, nil)
	for range 2 {
		src.change(0.3)
		c.pushNow(src.dir, c.latest())
	}
	// Calibrate on repositories with the same shape as every trial's.
	var ds []time.Duration
	var writes int
	for range 3 {
		src.change(0.3)
		c.pushNow(src.dir, c.latest())
		c.forgetAllBut(3)
		r := c.child("prune", -1)
		ds, writes = append(ds, r.took), r.writes
	}
	dPrune := median(ds)
	c.verify(true)
	t.Logf("prune durations %v, writes %d", ds, writes)

	// 40 trials killed at a random delay and 20 at a random write.
	for i := range 60 {
		// A push that changes about a third of the data, then forgetting
		// the oldest manifest: whole packs become unused, others partly.
		src.change(0.3)
		c.pushNow(src.dir, c.latest())
		c.forgetAllBut(3)
		before := c.objects()
		if i%3 == 2 {
			if c.pointTrial("prune", &writes) {
				c.phases["write:"+prunePhase(before, c.objects())]++
			}
		} else if c.trial("prune", &dPrune) {
			c.phases["delay:"+prunePhase(before, c.objects())]++
		}
		c.verify(true)
		c.pruneClean()
	}
	t.Logf("adapted prune duration %v", dPrune)
	c.summary("prune", start)
}

// TestRestoreKilledAnywhereChangesNothingInTheRepository kills 40
// restores after random delays. The repository's objects are exactly as before, it
// checks clean, the partial target is discarded and a fresh restore is
// exact.
func TestRestoreKilledAnywhereChangesNothingInTheRepository(t *testing.T) {
	start := time.Now()
	ctx := context.Background()
	c := newCrashRig(t, 1<<20)
	src := newCrashTree(t, c.base, 8, 13)
	c.pushNow(src.dir, nil)
	m := c.latest()
	_, store := c.open()
	before := listStore(t, store, "")
	targets := filepath.Join(c.base, "targets")
	must(t, os.Mkdir(targets, 0o755))
	var ds []time.Duration
	for i := range 3 {
		dst := filepath.Join(targets, fmt.Sprintf("calibrate-%d", i))
		r := c.child("restore", -1, envCrashPath+"="+dst, envCrashID+"="+m.ID.String())
		ds = append(ds, r.took)
		must(t, os.RemoveAll(dst))
	}
	dRestore := median(ds)
	t.Logf("restore durations %v", ds)

	const trials = 40
	for i := range trials {
		dst := filepath.Join(targets, fmt.Sprintf("t%d", i))
		c.trial("restore", &dRestore, envCrashPath+"="+dst, envCrashID+"="+m.ID.String())
		if after := listStore(t, store, ""); !slices.Equal(before, after) {
			t.Fatalf("a killed restore changed the repository:\nbefore %q\nafter  %q", before, after)
		}
		// The target is discardable, and a fresh restore into its place
		// from the repository opened afresh is exact.
		must(t, os.RemoveAll(dst))
		sc, _ := c.open()
		{
			_, err := sc.Restore(ctx, m.ID, dst, repo.RestoreOptions{})
			must(t, err)
			if got := digest(t, dst); got != m.Digest {
				t.Fatalf("fresh restore after killed restore %d: digest %s, want %s", i, got, m.Digest)
			}
			must(t, os.RemoveAll(dst))
		}
		res, err := sc.Check(ctx, repo.CheckOptions{})
		must(t, err)
		if !res.OK() || len(res.Warnings) > 0 {
			t.Fatalf("check after killed restore %d: errors %q, warnings %q", i, res.Errors, res.Warnings)
		}
		c.cleanChecks++
	}
	// The children's cache, torn by the kills, still serves a push and a
	// restore correctly.
	src.change(0.1)
	c.pushNow(src.dir, m)
	c.child("restore", -1, envCrashPath+"="+filepath.Join(targets, "final"), envCrashID+"="+c.latest().ID.String())
	if got := digest(t, filepath.Join(targets, "final")); got != c.latest().Digest {
		t.Fatalf("restore through the torn cache: digest %s, want %s", got, c.latest().Digest)
	}
	c.pruneClean()
	t.Logf("adapted restore duration %v", dRestore)
	c.summary("restore", start)
}

// crashBase returns the directory a crash test works in: a fresh
// directory in /dev/shm when that is a tmpfs with room, else in the test's
// temp dir. A SIGKILL loses nothing the kernel already holds, so what the
// tests prove (the order of atomic writes) is the same on tmpfs; it only
// takes the fsync latency of the disk out of the 200 trials.
func crashBase(t *testing.T) string {
	t.Helper()
	var fs unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &fs); err == nil && fs.Type == unix.TMPFS_MAGIC && fs.Bavail*uint64(fs.Bsize) >= 2<<30 {
		dir, err := os.MkdirTemp("/dev/shm", "stead-repo-crash-")
		if err == nil {
			t.Cleanup(func() {
				if err := os.RemoveAll(dir); err != nil {
					t.Errorf("remove %s: %v", dir, err)
				}
			})
			return dir
		}
	}
	t.Logf("no tmpfs with 2 GiB free at /dev/shm: crash trials run on the disk of %s (slower)", os.TempDir())
	return t.TempDir()
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// scopeObjects are the keys of a scope's packs, index files and manifests.
type scopeObjects struct{ packs, index, snapshots []string }

func (c *crashRig) objects() scopeObjects {
	c.t.Helper()
	_, store := c.open()
	p := "scopes/" + crashScope + "/"
	return scopeObjects{listStore(c.t, store, p+"data/"), listStore(c.t, store, p+"index/"), listStore(c.t, store, p+"snapshots/")}
}

// added and removed report whether after has a key before lacks, and the
// reverse.
func added(before, after []string) bool {
	return slices.ContainsFunc(after, func(k string) bool { return !slices.Contains(before, k) })
}

func removed(before, after []string) bool { return added(after, before) }

// pushPhase names the step a push was killed in, from what it left.
func pushPhase(b, a scopeObjects) string {
	switch {
	case added(b.snapshots, a.snapshots):
		return "after-manifest"
	case added(b.index, a.index):
		return "index-without-manifest"
	case added(b.packs, a.packs):
		return "packs-without-index"
	}
	return "before-first-write"
}

// prunePhase names the step a prune was killed in, from what it left.
func prunePhase(b, a scopeObjects) string {
	switch {
	case !added(b.index, a.index) && added(b.packs, a.packs):
		return "repacked-packs-without-index"
	case !added(b.index, a.index):
		return "before-first-write"
	case !removed(b.index, a.index) || slices.ContainsFunc(b.index, func(k string) bool { return slices.Contains(a.index, k) }):
		return "new-index-old-indexes-left"
	case !removed(b.packs, a.packs):
		return "old-indexes-deleted-packs-not"
	}
	return "deleting-packs-or-after"
}

// listStore lists every object of a store as "key size".
func listStore(t *testing.T, s blobstore.BlobStore, prefix string) []string {
	t.Helper()
	infos, err := s.List(context.Background(), prefix)
	must(t, err)
	out := make([]string, len(infos))
	for i, in := range infos {
		out[i] = in.Key + " " + strconv.FormatInt(in.Size, 10)
	}
	return out
}
