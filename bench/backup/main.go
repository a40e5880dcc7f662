// Command backup measures stead's off-box repository side by side with
// restic 0.14 and tar czf on one seeded corpus (~1.5 GB of real data in
// ~23,000 files: a source tree with .git, compressed blobs, large mixed
// binaries, sparse files, symlinks, hardlinks, xattrs, odd modes and names),
// to local disk and to an S3 server on this machine:
//
//  1. full backup (stead push, restic backup, tar czf),
//  2. incremental backup with nothing changed (cold, then warm cache),
//  3. incremental backup after 1 MiB was overwritten in three files, and the
//     bytes it added to the repository,
//
// With -btrfs (the default) the corpus lives in a subvolume of a btrfs pool
// on a loop image, every stead push reads a fresh read-only snapshot of it
// (taking it is part of the timed push, as in the daemon), and the rows of
// 2 and 3 are run a second time by another stead repository whose pushes
// look only at what btrfs says changed since the previous push's snapshot
// (the O(changes) path, PushOptions.Diff) instead of walking the tree.
//
//  4. restore into a fresh directory,
//  5. repository size and the restored tree's disk use, and whether the
//     restored tree equals the source (internal/treedigest).
//
// The page cache is dropped before every timed operation (but the second,
// warm, run of the incremental with nothing changed) and every timed
// operation ends with sync(2), so each writes durably. stead runs in this
// process (repository opened afresh for each operation, as a CLI would);
// restic and tar run as commands. Needs root (drop_caches), restic on PATH
// (Debian: apt-get install restic) and ~30 GB free under -dir.
//
//	eval "$(scripts/s3server.sh)"
//	go run ./bench/backup -dir /var/tmp/stead-bench -s3 "$STEAD_S3_ENDPOINT"
//
// with the S3 credentials in STEAD_S3_ACCESS_KEY and STEAD_S3_SECRET_KEY
// (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), as scripts/s3server.sh
// prints them; without -s3 only the local-disk rows run.
//
// With -full only the full push and the restore run (local disk, -reps
// times, fresh repositories each time), stead's in a child process each as
// restic's are, each restore beside the disk's own fsync'd write rate (dd
// conv=fdatasync of as many bytes into the same file system):
//
//	go run ./bench/backup -dir /var/tmp/stead-bench -full -reps 3
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/blobstore/s3"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/pool/btrfs"
	"github.com/stead-dev/stead/internal/treedigest"
)

func main() {
	var o options
	flag.StringVar(&o.dir, "dir", "/var/tmp/stead-bench", "work directory (corpus, repositories, restores); its contents are removed")
	flag.Uint64Var(&o.seed, "seed", 1, "corpus seed")
	flag.BoolVar(&o.small, "small", false, "a few-MiB corpus instead of ~1.5 GB (smoke test of the harness)")
	flag.StringVar(&o.s3, "s3", os.Getenv("STEAD_S3_ENDPOINT"), "S3 endpoint host:port (plain HTTP); empty skips the S3 rows")
	flag.StringVar(&o.region, "s3-region", "us-east-1", "S3 region")
	flag.StringVar(&o.restic, "restic", "restic", "restic binary")
	flag.IntVar(&o.files, "files", 0, "with a number: a corpus of about that many files (more, smaller source files; the same real data), e.g. 230000")
	flag.BoolVar(&o.incremental, "incremental", false, "only the pushes (full, nothing changed, 1 MiB changed), beside restic: no tar, no restores but the O(changes) one's check")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of each O(changes) push to FILE.1, FILE.2 ...")
	flag.BoolVar(&o.keep, "keep", false, "keep the corpus, repositories and restored trees")
	flag.BoolVar(&o.btrfs, "btrfs", true, "put the corpus on a btrfs pool (loop image under -dir) and add the O(changes) push rows")
	flag.BoolVar(&o.full, "full", false, "only the full push and the restore (local), beside restic and the disk's dd write rate")
	flag.IntVar(&o.reps, "reps", 1, "with -full: how many times to run the full push and restore, each into fresh repositories")
	var ch childArgs
	flag.StringVar(&ch.op, "child", "", "internal: run one stead push or restore in this process and print its result (used by -full)")
	flag.StringVar(&ch.repo, "child-repo", "", "internal: the -child's local repository")
	flag.StringVar(&ch.cache, "child-cache", "", "internal: the -child's cache directory")
	flag.StringVar(&ch.src, "child-src", "", "internal: the -child push's source tree")
	flag.StringVar(&ch.dst, "child-dst", "", "internal: the -child restore's target")
	flag.StringVar(&ch.id, "child-id", "", "internal: the -child restore's snapshot")
	flag.Parse()
	if ch.op != "" {
		if err := runChild(context.Background(), ch); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		return
	}
	o.access = firstEnv(s3.EnvAccessKey, "AWS_ACCESS_KEY_ID")
	o.secret = firstEnv(s3.EnvSecretKey, "AWS_SECRET_ACCESS_KEY")
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	dir, s3, region, restic string
	access, secret          string
	seed                    uint64
	small, keep, btrfs      bool
	files                   int
	incremental             bool
	cpuprofile              string
	full                    bool
	reps                    int
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// target is one place backups go: local disk or S3.
type target struct {
	name   string // "local" or "S3"
	stead  *steadRepo
	restic *resticRepo
	// steadDiff pushes from btrfs's changes (local only, with -btrfs).
	steadDiff    *steadRepo
	steadDiffDir string
	steadS3      s3.Config // S3 only
	resticS3     s3.Config
	steadDir     string // local only
}

// result is one timed operation of one tool.
type result struct {
	dur    time.Duration
	cpu    time.Duration
	maxRSS int64 // peak resident set size
	floor  int64 // this process's RSS when the peak was reset (see resetPeak)
	note   string
}

func run(ctx context.Context, o options) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (to drop the page cache)")
	}
	rv, err := exec.Command(o.restic, "version").Output()
	if err != nil {
		return fmt.Errorf("run %s version: %w (Debian: apt-get install -y restic)", o.restic, err)
	}
	tv, err := exec.Command("tar", "--version").Output()
	if err != nil {
		return fmt.Errorf("run tar --version: %w", err)
	}
	spec := DefaultSpec()
	if o.small {
		spec = SmallSpec()
	}
	if o.files > 0 {
		spec = spec.WithFiles(o.files)
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	if err := clearDir(o.dir); err != nil {
		return err
	}
	need := uint64(30 << 30)
	if o.small {
		need = 2 << 30
	}
	if free, err := freeBytes(o.dir); err != nil {
		return err
	} else if free < need {
		return fmt.Errorf("%s has %s free, the run needs about %s", o.dir, human(int64(free)), human(int64(need)))
	}
	loadStart := loadAvg()
	corpus := filepath.Join(o.dir, "corpus")
	if !o.keep {
		defer clearDir(o.dir) // after the pool's unmount (deferred below)
	}
	var snaps *snapshotter
	if o.btrfs {
		bp, err := btrfs.Open(ctx, btrfs.Options{Dir: filepath.Join(o.dir, "pool"), Image: filepath.Join(o.dir, "pool.img"),
			ImageSize: 24 << 30})
		if err != nil {
			return fmt.Errorf("btrfs pool for the corpus: %w", err)
		}
		defer func() {
			if !o.keep {
				if err := bp.Unmount(context.Background()); err != nil {
					slog.Warn("unmount the bench pool", "err", err)
				}
			}
		}()
		snaps = &snapshotter{pool: bp, src: pool.KindSandbox + "/corpus"}
		if err := bp.Create(ctx, snaps.src); err != nil {
			return err
		}
		corpus = bp.Path(snaps.src)
	}
	slog.Info("generating corpus", "dir", corpus, "seed", o.seed)
	t0 := time.Now()
	cs, err := Generate(ctx, corpus, o.seed, spec)
	if err != nil {
		return err
	}
	slog.Info("corpus generated", "files", cs.Files, "real", human(cs.RealBytes), "apparent", human(cs.Apparent), "dur", time.Since(t0).Round(time.Millisecond))
	srcAlloc, _ := du(corpus, "-sB1")
	if o.full {
		return runFull(ctx, o, corpus, snaps, cs, srcAlloc, firstLine(rv)+", "+firstLine(tv), loadStart)
	}

	var targets []*target
	loc := &target{name: "local", steadDir: filepath.Join(o.dir, "repo-stead")}
	if loc.stead, err = newSteadLocal(ctx, loc.steadDir, filepath.Join(o.dir, "cache", "stead-local")); err != nil {
		return err
	}
	loc.stead.snaps = snaps
	if snaps != nil {
		loc.steadDiffDir = filepath.Join(o.dir, "repo-stead-diff")
		if loc.steadDiff, err = newSteadLocal(ctx, loc.steadDiffDir, filepath.Join(o.dir, "cache", "stead-diff-local")); err != nil {
			return err
		}
		loc.steadDiff.snaps, loc.steadDiff.diff, loc.steadDiff.profile = snaps, true, o.cpuprofile
	}
	loc.restic = &resticRepo{bin: o.restic, url: filepath.Join(o.dir, "repo-restic"), cache: filepath.Join(o.dir, "cache", "restic-local")}
	targets = append(targets, loc)
	if o.s3 != "" {
		if o.access == "" || o.secret == "" {
			return fmt.Errorf("-s3 needs %s and %s (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY): eval \"$(scripts/s3server.sh)\"", s3.EnvAccessKey, s3.EnvSecretKey)
		}
		suffix := strconv.FormatInt(time.Now().Unix(), 10)
		t := &target{name: "S3"}
		t.steadS3 = s3.Config{Endpoint: o.s3, Bucket: "bench-stead-" + suffix, AccessKey: o.access, SecretKey: o.secret, Region: o.region}
		t.resticS3 = t.steadS3
		t.resticS3.Bucket = "bench-restic-" + suffix
		if t.stead, err = newSteadS3(ctx, t.steadS3, filepath.Join(o.dir, "cache", "stead-s3")); err != nil {
			return err
		}
		t.restic = &resticRepo{bin: o.restic, url: "s3:http://" + o.s3 + "/" + t.resticS3.Bucket,
			cache: filepath.Join(o.dir, "cache", "restic-s3"), env: []string{"AWS_ACCESS_KEY_ID=" + o.access, "AWS_SECRET_ACCESS_KEY=" + o.secret, "AWS_DEFAULT_REGION=" + o.region}}
		targets = append(targets, t)
		defer func() {
			if o.keep {
				return
			}
			for _, c := range []s3.Config{t.steadS3, t.resticS3} {
				if err := emptyBucket(context.Background(), c); err != nil {
					slog.Warn("empty bucket", "bucket", c.Bucket, "err", err)
				}
			}
		}()
	}
	for _, t := range targets {
		if err := t.restic.init(ctx); err != nil {
			return err
		}
	}

	tb := &table{real: cs.RealBytes}
	// 1. Full backup.
	for _, t := range targets {
		s, r, err := backupPair(ctx, t, corpus, false)
		if err != nil {
			return err
		}
		tb.add(row{op: "full backup → " + t.name, kind: rate, v: [3]*result{s, r, nil}})
		if t.steadDiff != nil {
			// The O(changes) repository's first push is a full one too.
			if _, err := t.steadDiff.push(ctx, corpus); err != nil {
				return err
			}
		}
	}
	tarFile := filepath.Join(o.dir, "corpus.tar.gz")
	if !o.incremental {
		tr, err := timed(ctx, "tar czf", func() (result, error) {
			return command(ctx, "", nil, "tar", "-C", corpus, "-czf", tarFile, ".")
		})
		if err != nil {
			return err
		}
		tb.rows[0].v[2] = tr
	}
	// 2. Incremental, nothing changed.
	for _, t := range targets {
		s, r, err := backupPair(ctx, t, corpus, false)
		if err != nil {
			return err
		}
		tb.add(row{op: "incremental, nothing changed → " + t.name, kind: secs, v: [3]*result{s, r, nil}})
		if err := t.diffRow(ctx, tb, corpus, false, r, "  stead O(changes) from btrfs, nothing changed → "); err != nil {
			return err
		}
		// Again at once: the metadata is in the page cache, as when a push
		// follows a local snapshot.
		if s, r, err = backupPair(ctx, t, corpus, true); err != nil {
			return err
		}
		tb.add(row{op: "  the same, page cache warm → " + t.name, kind: secs, v: [3]*result{s, r, nil}})
		if err := t.diffRow(ctx, tb, corpus, true, r, "  stead O(changes) from btrfs, page cache warm → "); err != nil {
			return err
		}
	}
	// 3. Change 1 MiB across three files, incremental again. The tar
	// archive holds the tree before the change: keep its digest.
	slog.Info("digesting the corpus before the change")
	wantBefore, err := treedigest.Entries(ctx, corpus, treedigest.Options{})
	if err != nil {
		return err
	}
	changed, err := Change(corpus, o.seed+1)
	if err != nil {
		return err
	}
	for _, c := range changed {
		slog.Info("changed", "file", c.Path, "offset", c.Offset, "bytes", c.Len)
	}
	var growth []row
	for _, t := range targets {
		before, err := t.sizes(ctx)
		if err != nil {
			return err
		}
		s, r, err := backupPair(ctx, t, corpus, false)
		if err != nil {
			return err
		}
		after, err := t.sizes(ctx)
		if err != nil {
			return err
		}
		tb.add(row{op: "incremental after 1 MiB changed in 3 files → " + t.name, kind: secs, v: [3]*result{s, r, nil}})
		growth = append(growth, row{op: "  repository growth from it → " + t.name, kind: size,
			n: [3]int64{after[0] - before[0], after[1] - before[1]}, has: [3]bool{true, true}})
		if t.steadDiff != nil {
			b, err := du(t.steadDiffDir, "-sb")
			if err != nil {
				return err
			}
			if err := t.diffRow(ctx, tb, corpus, false, r, "  stead O(changes) from btrfs, after the change → "); err != nil {
				return err
			}
			a, err := du(t.steadDiffDir, "-sb")
			if err != nil {
				return err
			}
			growth = append(growth, row{op: "  repository growth from it, stead O(changes) → " + t.name, kind: size,
				n: [3]int64{a - b, after[1] - before[1]}, has: [3]bool{true, true}})
		}
	}
	tb.add(growth...)
	if o.incremental {
		var notes []string
		if loc.steadDiff != nil {
			want, err := treedigest.Entries(ctx, corpus, treedigest.Options{})
			if err != nil {
				return err
			}
			sum, err := diffFidelity(ctx, loc, filepath.Join(o.dir, "restore-diff"), corpus, want)
			if err != nil {
				return err
			}
			notes = append(notes, "stead O(changes) from local: "+sum)
		}
		report(o, firstLine(rv)+", "+firstLine(tv), loadStart, cs, srcAlloc, tb, notes)
		return nil
	}

	// 4. Restore into fresh directories.
	restores := filepath.Join(o.dir, "restore")
	if err := os.MkdirAll(restores, 0o755); err != nil {
		return fmt.Errorf("create restore dir: %w", err)
	}
	var trees []restored
	for _, t := range targets {
		sd := filepath.Join(restores, "stead-"+strings.ToLower(t.name))
		s, err := timed(ctx, "stead restore from "+t.name, func() (result, error) {
			return inProcess(func() (string, error) {
				st, err := t.stead.restore(ctx, sd)
				return fmt.Sprintf("downloaded %s, wrote %s", human(st.BytesDownloaded), human(st.BytesWritten)), err
			})
		})
		if err != nil {
			return err
		}
		rd := filepath.Join(restores, "restic-"+strings.ToLower(t.name))
		r, err := timed(ctx, "restic restore from "+t.name, func() (result, error) {
			return t.restic.restore(ctx, rd)
		})
		if err != nil {
			return err
		}
		tb.add(row{op: "restore from " + t.name + " → fresh dir, incl. sync", kind: rate, v: [3]*result{s, r, nil}})
		trees = append(trees, restored{"stead from " + t.name, sd, 0}, restored{"restic from " + t.name, rd, 1})
	}
	td := filepath.Join(restores, "tar")
	if err := os.Mkdir(td, 0o755); err != nil {
		return fmt.Errorf("create restore dir: %w", err)
	}
	tr, err := timed(ctx, "tar xzf", func() (result, error) {
		return command(ctx, "", nil, "tar", "-C", td, "-xzf", tarFile)
	})
	if err != nil {
		return err
	}
	for i := range tb.rows {
		if strings.HasPrefix(tb.rows[i].op, "restore from local") {
			tb.rows[i].v[2] = tr
		}
	}
	trees = append(trees, restored{"tar", td, 2})

	// 5. Sizes and fidelity.
	for _, t := range targets {
		sz, err := t.sizes(ctx)
		if err != nil {
			return err
		}
		r := row{op: "repository size, " + t.name, kind: size, n: [3]int64{sz[0], sz[1]}, has: [3]bool{true, true}}
		if t.name == "local" {
			fi, err := os.Stat(tarFile)
			if err != nil {
				return fmt.Errorf("stat tar file: %w", err)
			}
			r.n[2], r.has[2] = fi.Size(), true
		}
		tb.add(r)
	}
	alloc := row{op: "restored tree, allocated (du -sB1)", kind: size}
	appar := row{op: "restored tree, apparent (du -sb)", kind: size}
	for _, rt := range trees {
		if !strings.HasSuffix(rt.name, "S3") {
			a, err := du(rt.dir, "-sB1")
			if err != nil {
				return err
			}
			b, err := du(rt.dir, "-sb")
			if err != nil {
				return err
			}
			alloc.n[rt.col], alloc.has[rt.col] = a, true
			appar.n[rt.col], appar.has[rt.col] = b, true
		}
	}
	tb.add(alloc, appar)
	slog.Info("comparing restored trees with the source")
	want, err := treedigest.Entries(ctx, corpus, treedigest.Options{})
	if err != nil {
		return err
	}
	fid := row{op: "restored tree vs source (treedigest)", kind: text}
	var fidNotes []string
	for _, rt := range trees {
		got, err := treedigest.Entries(ctx, rt.dir, treedigest.Options{})
		if err != nil {
			return err
		}
		w := want
		if rt.col == 2 {
			w = wantBefore
		}
		sum, err := summarizeDiff(treedigest.Diff(w, got), func(rel string) (bool, error) {
			return sameFile(filepath.Join(corpus, rel), filepath.Join(rt.dir, rel))
		})
		if err != nil {
			return err
		}
		fidNotes = append(fidNotes, fmt.Sprintf("%s: %s", rt.name, sum))
		if !strings.HasSuffix(rt.name, "S3") {
			fid.s[rt.col] = sum
		}
	}
	tb.add(fid)
	if loc.steadDiff != nil {
		sum, err := diffFidelity(ctx, loc, filepath.Join(restores, "stead-diff-local"), corpus, want)
		if err != nil {
			return err
		}
		fidNotes = append(fidNotes, "stead O(changes) from local: "+sum)
	}
	report(o, firstLine(rv)+", "+firstLine(tv), loadStart, cs, srcAlloc, tb, fidNotes)
	return nil
}

// diffFidelity restores the O(changes) repository's last push into dir and
// summarises how it differs from want, the corpus's entries: the same tree.
func diffFidelity(ctx context.Context, loc *target, dir, corpus string, want []string) (string, error) {
	if _, err := loc.steadDiff.restore(ctx, dir); err != nil {
		return "", err
	}
	got, err := treedigest.Entries(ctx, dir, treedigest.Options{})
	if err != nil {
		return "", err
	}
	return summarizeDiff(treedigest.Diff(want, got), func(rel string) (bool, error) {
		return sameFile(filepath.Join(corpus, rel), filepath.Join(dir, rel))
	})
}

// report prints the run's table and notes.
func report(o options, versions, loadStart string, cs CorpusStats, srcAlloc int64, tb *table, fidNotes []string) {
	fmt.Printf("\nstead backup benchmark, %s, seed %d\n", time.Now().UTC().Format(time.RFC3339), o.seed)
	fmt.Printf("%s, %s, GOMAXPROCS %d\n", versions, runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Printf("load average (1/5/15 min) at start %s, at end %s\n", loadStart, loadAvg())
	fmt.Printf("corpus: %d files (%d inodes), %d dirs, %d symlinks; real data %s (%s), apparent %s, allocated %s\n",
		cs.Files, cs.Inodes, cs.Dirs, cs.Symlinks, mb(cs.RealBytes), human(cs.RealBytes), human(cs.Apparent), human(srcAlloc))
	var tops []string
	for _, k := range sortedKeys(cs.ByTop) {
		tops = append(tops, fmt.Sprintf("%s %s", k, human(cs.ByTop[k])))
	}
	fmt.Printf("  real data by directory: %s\n\n", strings.Join(tops, ", "))
	tb.print(os.Stdout)
	fmt.Println()
	for _, r := range tb.rows {
		for i, v := range r.v {
			if v != nil && v.note != "" {
				fmt.Printf("%s, %s: %s\n", r.op, []string{"stead", "restic", "tar"}[i], v.note)
			}
		}
	}
	for _, n := range fidNotes {
		fmt.Println("fidelity", n)
	}
}

// diffRow times a push of the O(changes) repository (from a dropped page
// cache unless warm) and adds it as a row beside restic's result r of the
// same step.
func (t *target) diffRow(ctx context.Context, tb *table, corpus string, warm bool, r *result, op string) error {
	if t.steadDiff == nil {
		return nil
	}
	timed := timed
	if warm {
		timed = timedWarm
	}
	s, err := timed(ctx, "stead O(changes) push to "+t.name, func() (result, error) {
		return inProcess(func() (string, error) {
			st, err := t.steadDiff.push(ctx, corpus)
			return fmt.Sprintf("read %d files (%s), reused %d, %d new chunks, uploaded %s (PushStats)",
				st.FilesRead, human(st.BytesRead), st.FilesReused, st.ChunksNew, human(st.BytesUploaded)), err
		})
	})
	if err != nil {
		return err
	}
	tb.add(row{op: op + t.name, kind: secs, v: [3]*result{s, r, nil}})
	return nil
}

// restored is a restored tree and its table column.
type restored struct {
	name string
	dir  string
	col  int
}

// sizes returns the bytes of the stead and the restic repository of t.
func (t *target) sizes(ctx context.Context) ([2]int64, error) {
	if t.name == "local" {
		a, err := du(t.steadDir, "-sb")
		if err != nil {
			return [2]int64{}, err
		}
		b, err := du(t.restic.url, "-sb")
		return [2]int64{a, b}, err
	}
	a, _, err := bucketBytes(ctx, t.steadS3)
	if err != nil {
		return [2]int64{}, err
	}
	b, _, err := bucketBytes(ctx, t.resticS3)
	return [2]int64{a, b}, err
}

// backupPair runs a stead push and a restic backup of src to t, each timed
// from a dropped page cache, or with the cache as the previous operation
// left it if warm.
func backupPair(ctx context.Context, t *target, src string, warm bool) (*result, *result, error) {
	timed := timed
	if warm {
		timed = timedWarm
	}
	s, err := timed(ctx, "stead push to "+t.name, func() (result, error) {
		return inProcess(func() (string, error) {
			st, err := t.stead.push(ctx, src)
			return fmt.Sprintf("read %d files (%s), reused %d, %d new chunks, uploaded %s (PushStats)",
				st.FilesRead, human(st.BytesRead), st.FilesReused, st.ChunksNew, human(st.BytesUploaded)), err
		})
	})
	if err != nil {
		return nil, nil, err
	}
	r, err := timed(ctx, "restic backup to "+t.name, func() (result, error) {
		return t.restic.backup(ctx, src)
	})
	if err != nil {
		return nil, nil, err
	}
	return s, r, nil
}

// timed drops the page cache, runs f, syncs, and returns the wall time of
// f and the sync together.
func timed(ctx context.Context, what string, f func() (result, error)) (*result, error) {
	if err := dropCaches(); err != nil {
		return nil, err
	}
	return timedWarm(ctx, what, f)
}

// timedWarm is timed without dropping the page cache first.
func timedWarm(ctx context.Context, what string, f func() (result, error)) (*result, error) {
	unix.Sync()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	r, err := f()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	unix.Sync()
	r.dur = time.Since(t0)
	slog.Info(what, "dur", r.dur.Round(time.Millisecond), "cpu", r.cpu.Round(time.Millisecond), "maxrss", human(r.maxRSS), "note", r.note)
	return &r, nil
}

// resetPeak returns free memory to the kernel and resets this process's
// peak RSS to its current RSS (/proc/self/clear_refs). A command started
// afterwards reports at least that much (Go starts it with vfork, and the
// kernel carries the shared address space's peak over exec), so it is kept
// small and reported as the floor.
func resetPeak() (int64, error) {
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0, fmt.Errorf("reset peak rss: %w", err)
	}
	return vmHWM(), nil
}

// inProcess runs f in this process and measures its CPU time and peak RSS.
func inProcess(f func() (string, error)) (result, error) {
	floor, err := resetPeak()
	if err != nil {
		return result{}, err
	}
	var before, after unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &before)
	note, err := f()
	unix.Getrusage(unix.RUSAGE_SELF, &after)
	return result{cpu: cpuTime(&after) - cpuTime(&before), maxRSS: vmHWM(), floor: floor, note: note}, err
}

func cpuTime(r *unix.Rusage) time.Duration {
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// vmHWM returns this process's peak resident set size since the last reset.
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// command runs name with args (in dir, with extra environment) and returns
// its CPU time and peak RSS (of the process and its waited-for children).
func command(ctx context.Context, dir string, env []string, name string, args ...string) (result, error) {
	out, r, err := commandOutput(ctx, dir, env, name, args...)
	if err != nil {
		return r, fmt.Errorf("%w: %s", err, tail(out, 2000))
	}
	return r, nil
}

func commandOutput(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, result, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var r result
	var err error
	if r.floor, err = resetPeak(); err != nil {
		return nil, r, err
	}
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			r.maxRSS = ru.Maxrss << 10
		}
	}
	if err != nil {
		return out, r, fmt.Errorf("run %s %s: %w", name, strings.Join(args, " "), err)
	}
	return out, r, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// dropCaches writes dirty pages back and drops the page cache, dentries and
// inodes.
func dropCaches() error {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		return fmt.Errorf("drop page cache: %w", err)
	}
	return nil
}

// du returns the first field of `du <flag> path` (bytes).
func du(path, flag string) (int64, error) {
	out, err := exec.Command("du", flag, path).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return 0, fmt.Errorf("du %s %s: %w: %s", flag, path, err, ee.Stderr)
		}
		return 0, fmt.Errorf("du %s %s: %w", flag, path, err)
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return 0, fmt.Errorf("du %s %s: no output", flag, path)
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("du %s %s: %w", flag, path, err)
	}
	return n, nil
}

func freeBytes(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// clearDir removes everything inside dir (not dir itself).
func clearDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("clear %s: %w", dir, err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("clear %s: %w", dir, err)
		}
	}
	return nil
}

// sameFile reports whether the files at a and b hold the same bytes (holes
// read as zeros).
func sameFile(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, fmt.Errorf("compare files: %w", err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, fmt.Errorf("compare files: %w", err)
	}
	defer fb.Close()
	ba, bb := make([]byte, mib), make([]byte, mib)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if ea == io.EOF || ea == io.ErrUnexpectedEOF {
			return eb == ea, nil
		}
		if ea != nil {
			return false, fmt.Errorf("compare files: read %s: %w", a, ea)
		}
		if eb != nil {
			return false, fmt.Errorf("compare files: read %s: %w", b, eb)
		}
	}
}

// loadAvg returns the first three fields of /proc/loadavg: other work on
// the machine shows up in the timings.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], "/")
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}
