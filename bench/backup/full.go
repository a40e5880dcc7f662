package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/stead-dev/stead/internal/treedigest"
)

// runFull is the -full run: the full push and the restore only, o.reps
// times, each time into fresh repositories. stead's push and restore run
// in a child process each (this binary, -child), as restic's do, so the
// peak RSS and CPU time of both are those of a process doing nothing else. Every row puts stead beside
// restic; each restore row also has the disk's own fsync'd write rate in
// the third column: dd writing as many bytes as the corpus's real data
// (conv=fdatasync) into the file system the restores go to, right after
// the two restores.
func runFull(ctx context.Context, o options, corpus string, snaps *snapshotter, cs CorpusStats, srcAlloc int64, versions, loadStart string) error {
	tb := &table{real: cs.RealBytes, third: "dd"}
	restores := filepath.Join(o.dir, "restore")
	if err := os.MkdirAll(restores, 0o755); err != nil {
		return fmt.Errorf("create restore dir: %w", err)
	}
	slog.Info("digesting the corpus")
	want, err := treedigest.Entries(ctx, corpus, treedigest.Options{})
	if err != nil {
		return err
	}
	var notes []string
	for i := 1; i <= max(o.reps, 1); i++ {
		sfx := ""
		if o.reps > 1 {
			sfx = fmt.Sprintf(" (run %d)", i)
		}
		sdir := filepath.Join(o.dir, fmt.Sprintf("repo-stead-%d", i))
		sr, err := newSteadLocal(ctx, sdir, filepath.Join(o.dir, "cache", fmt.Sprintf("stead-%d", i)))
		if err != nil {
			return err
		}
		sr.snaps = snaps
		rr := &resticRepo{bin: o.restic, url: filepath.Join(o.dir, fmt.Sprintf("repo-restic-%d", i)),
			cache: filepath.Join(o.dir, "cache", fmt.Sprintf("restic-%d", i))}
		if err := rr.init(ctx); err != nil {
			return err
		}
		s, err := timed(ctx, "stead push", func() (result, error) { return sr.pushChild(ctx, sdir, corpus) })
		if err != nil {
			return err
		}
		r, err := timed(ctx, "restic backup", func() (result, error) { return rr.backup(ctx, corpus) })
		if err != nil {
			return err
		}
		tb.add(row{op: "full backup → local" + sfx, kind: rate, v: [3]*result{s, r, nil}})

		sd := filepath.Join(restores, fmt.Sprintf("stead-%d", i))
		s, err = timed(ctx, "stead restore", func() (result, error) { return sr.restoreChild(ctx, sdir, sd) })
		if err != nil {
			return err
		}
		rd := filepath.Join(restores, fmt.Sprintf("restic-%d", i))
		r, err = timed(ctx, "restic restore", func() (result, error) { return rr.restore(ctx, rd) })
		if err != nil {
			return err
		}
		d, err := ddWrite(ctx, filepath.Join(restores, "dd.out"), cs.RealBytes)
		if err != nil {
			return err
		}
		tb.add(row{op: "restore from local → fresh dir, incl. sync" + sfx, kind: rate, v: [3]*result{s, r, d}},
			row{op: "  restore rate / the disk's dd rate" + sfx, kind: text, s: [3]string{
				fmt.Sprintf("%.2f", d.dur.Seconds()/s.dur.Seconds()), fmt.Sprintf("%.2f", d.dur.Seconds()/r.dur.Seconds()), "1"}})

		got, err := treedigest.Entries(ctx, sd, treedigest.Options{})
		if err != nil {
			return err
		}
		sum, err := summarizeDiff(treedigest.Diff(want, got), func(rel string) (bool, error) {
			return sameFile(filepath.Join(corpus, rel), filepath.Join(sd, rel))
		})
		if err != nil {
			return err
		}
		notes = append(notes, fmt.Sprintf("fidelity%s: stead's restored tree vs source: %s", sfx, sum))
		if sum != "identical" {
			slog.Warn("stead's restored tree differs from the source", "run", i, "diff", sum)
		}
		if snaps != nil && sr.lastSnap != "" {
			if err := snaps.pool.Delete(ctx, sr.lastSnap); err != nil {
				return err
			}
		}
		if !o.keep {
			for _, p := range []string{sd, rd, sdir, rr.url} {
				if err := os.RemoveAll(p); err != nil {
					return fmt.Errorf("remove %s: %w", p, err)
				}
			}
		}
	}

	fmt.Printf("\nstead backup benchmark (-full), %s, seed %d\n", time.Now().UTC().Format(time.RFC3339), o.seed)
	fmt.Printf("%s, %s, GOMAXPROCS %d\n", versions, runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Printf("load average (1/5/15 min) at start %s, at end %s\n", loadStart, loadAvg())
	fmt.Printf("corpus: %d files (%d inodes), %d dirs, %d symlinks; real data %s (%s), apparent %s, allocated %s\n\n",
		cs.Files, cs.Inodes, cs.Dirs, cs.Symlinks, mb(cs.RealBytes), human(cs.RealBytes), human(cs.Apparent), human(srcAlloc))
	tb.print(os.Stdout)
	fmt.Println()
	for _, r := range tb.rows {
		for i, v := range r.v {
			if v != nil && v.note != "" {
				fmt.Printf("%s, %s: %s\n", r.op, []string{"stead", "restic", "dd"}[i], v.note)
			}
		}
	}
	fmt.Println(strings.Join(notes, "\n"))
	return nil
}

// ddWrite times dd writing n bytes of zeros to path with conv=fdatasync
// (from a dropped page cache, and with the final sync(2) inside the time,
// as every timed step here), then removes the file.
func ddWrite(ctx context.Context, path string, n int64) (*result, error) {
	d, err := timed(ctx, "dd conv=fdatasync", func() (result, error) {
		return command(ctx, "", nil, "dd", "if=/dev/zero", "of="+path, "bs=4M",
			"count="+strconv.FormatInt(n, 10), "iflag=count_bytes", "conv=fdatasync")
	})
	if err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil {
		return nil, fmt.Errorf("remove %s: %w", path, err)
	}
	d.note = fmt.Sprintf("dd if=/dev/zero of=%s bs=4M count=%d iflag=count_bytes conv=fdatasync", path, n)
	return d, nil
}
