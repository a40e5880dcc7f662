package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"

	"github.com/stead-dev/stead/internal/blobstore/local"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// envChildMaster carries the master key (hex) to a child process.
const envChildMaster = "STEAD_BENCH_MASTER"

// Tuning by hand: STEAD_BENCH_WORKERS, STEAD_BENCH_READERS and
// STEAD_BENCH_TRANSFERS set the child's repository Workers, Readers and
// Transfers (0: the defaults),
// STEAD_BENCH_CPUPROFILE=FILE writes its CPU profile to FILE.<op>.<pid>.
const (
	envChildWorkers    = "STEAD_BENCH_WORKERS"
	envChildReaders    = "STEAD_BENCH_READERS"
	envChildTransfers  = "STEAD_BENCH_TRANSFERS"
	envChildCPUProfile = "STEAD_BENCH_CPUPROFILE"
)

// childArgs is what a child process (-child push|restore) does: one stead
// push or restore in a process of its own, as `stead push` would run and as
// restic runs, so its CPU time and peak RSS are its own and not the
// harness's (which holds the corpus's digest, among others).
type childArgs struct {
	op, repo, cache, src, dst, id string
}

// childOut is the line a child prints on success.
type childOut struct {
	Child   string            `json:"bench_child"`
	ID      seal.ID           `json:"id"`
	Push    repo.PushStats    `json:"push"`
	Restore repo.RestoreStats `json:"restore"`
}

// runChild runs one push or restore against the local repository a.repo
// and prints a childOut line.
func runChild(ctx context.Context, a childArgs) error {
	k, err := hex.DecodeString(os.Getenv(envChildMaster))
	if err != nil || len(k) != len(seal.Key{}) {
		return fmt.Errorf("child: %s holds no key: %w", envChildMaster, errs.ErrInvalid)
	}
	st, err := local.New(a.repo)
	if err != nil {
		return err
	}
	sr := &steadRepo{store: st, master: seal.Key(k), cache: a.cache}
	for env, v := range map[string]*int{envChildWorkers: &sr.workers, envChildReaders: &sr.readers, envChildTransfers: &sr.transfers} {
		if s := os.Getenv(env); s != "" {
			if *v, err = strconv.Atoi(s); err != nil {
				return fmt.Errorf("child: %s=%q: %w", env, s, errs.ErrInvalid)
			}
		}
	}
	if f := os.Getenv(envChildCPUProfile); f != "" {
		pf, err := os.Create(fmt.Sprintf("%s.%s.%d", f, a.op, os.Getpid()))
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	out := childOut{Child: a.op}
	switch a.op {
	case "push":
		sc, err := sr.scope(ctx)
		if err != nil {
			return err
		}
		m, ps, err := sc.Push(ctx, a.src, repo.PushOptions{Source: "bench/corpus"})
		if err != nil {
			return err
		}
		out.ID, out.Push = m.ID, ps
	case "restore":
		if sr.last, err = seal.ParseID(a.id); err != nil {
			return err
		}
		rs, err := sr.restore(ctx, a.dst)
		if err != nil {
			return err
		}
		out.ID, out.Restore = sr.last, rs
	default:
		return fmt.Errorf("child: unknown op %q: %w", a.op, errs.ErrInvalid)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

// inChild runs op in a child process (this binary with -child) against
// the local repository of s, which lives in dir, and returns its timing,
// CPU time and peak RSS and what it printed.
func (s *steadRepo) inChild(ctx context.Context, dir string, args ...string) (result, childOut, error) {
	self, err := os.Executable()
	if err != nil {
		return result{}, childOut{}, fmt.Errorf("find this binary: %w", err)
	}
	args = append([]string{"-child-repo", dir, "-child-cache", s.cache}, args...)
	out, res, err := commandOutput(ctx, "", []string{envChildMaster + "=" + hex.EncodeToString(s.master[:])}, self, args...)
	if err != nil {
		return res, childOut{}, fmt.Errorf("%w: %s", err, tail(out, 2000))
	}
	for line := range bytes.SplitSeq(out, []byte("\n")) {
		var c childOut
		if bytes.HasPrefix(line, []byte(`{"bench_child"`)) && json.Unmarshal(line, &c) == nil {
			return res, c, nil
		}
	}
	return res, childOut{}, fmt.Errorf("child printed no result: %s: %w", tail(out, 2000), errs.ErrInvalid)
}

// pushChild is push (a fresh snapshot of src with snaps, none without) run
// in a child process; the repository must be local, in dir.
func (s *steadRepo) pushChild(ctx context.Context, dir, src string) (result, error) {
	var snap string
	if s.snaps != nil {
		var err error
		if snap, err = s.snaps.take(ctx); err != nil {
			return result{}, err
		}
		src = s.snaps.pool.Path(snap)
	}
	res, c, err := s.inChild(ctx, dir, "-child", "push", "-child-src", src)
	if err != nil {
		return res, err
	}
	s.last = c.ID
	if snap != "" {
		if s.lastSnap != "" {
			if err := s.snaps.pool.Delete(ctx, s.lastSnap); err != nil {
				return res, err
			}
		}
		s.lastSnap = snap
	}
	st := c.Push
	res.note = fmt.Sprintf("in a child process: read %d files (%s), reused %d, %d new chunks, uploaded %s (PushStats)",
		st.FilesRead, human(st.BytesRead), st.FilesReused, st.ChunksNew, human(st.BytesUploaded))
	return res, nil
}

// restoreChild is restore run in a child process.
func (s *steadRepo) restoreChild(ctx context.Context, dir, dst string) (result, error) {
	res, c, err := s.inChild(ctx, dir, "-child", "restore", "-child-id", s.last.String(), "-child-dst", dst)
	if err != nil {
		return res, err
	}
	res.note = fmt.Sprintf("in a child process: downloaded %s, wrote %s", human(c.Restore.BytesDownloaded), human(c.Restore.BytesWritten))
	return res, nil
}
