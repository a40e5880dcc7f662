package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/blobstore/local"
	"github.com/stead-dev/stead/internal/blobstore/s3"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/pool/btrfs"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/repo/seal"
	"github.com/stead-dev/stead/internal/treediff"
)

// benchScope is the scope (tenant data key) every stead push goes to.
const benchScope = "t-bench"

// steadRepo is one stead repository under test: its blob store, the master
// key, a cache directory and the latest manifest pushed (the next push's
// parent).
type steadRepo struct {
	store  blobstore.BlobStore
	master seal.Key
	cache  string
	last   seal.ID
	// snaps, when set, makes every push read a fresh read-only snapshot
	// of the corpus subvolume, as the daemon's pushes do.
	snaps *snapshotter
	// diff makes a push look only at what btrfs says changed since the
	// previous push's snapshot (kept until the next push, as the daemon
	// keeps it), instead of walking the tree.
	diff     bool
	lastSnap string // dataset of the previous push's snapshot
	// workers, readers and transfers are the repository's Workers, Readers
	// and Transfers (0: the defaults).
	workers, readers, transfers int
	// profile, when set, is where each O(changes) push writes its CPU
	// profile (profile.1, profile.2 ...).
	profile string
	pushes  int
	open    *repo.Scope // kept open across pushes (diff only)
}

// snapshotter takes read-only snapshots of the corpus subvolume.
type snapshotter struct {
	pool *btrfs.Pool
	src  string // the corpus dataset
	n    int
}

func (s *snapshotter) take(ctx context.Context) (string, error) {
	s.n++
	name := fmt.Sprintf("%s/bench-%d", pool.KindSnapshot, s.n)
	if err := s.pool.Clone(ctx, s.src, name, pool.CloneOptions{ReadOnly: true}); err != nil {
		return "", fmt.Errorf("snapshot the corpus: %w", err)
	}
	return name, nil
}

// newSteadLocal initialises a repository in the directory dir.
func newSteadLocal(ctx context.Context, dir, cache string) (*steadRepo, error) {
	st, err := local.New(dir)
	if err != nil {
		return nil, fmt.Errorf("open local store %s: %w", dir, err)
	}
	return initStead(ctx, st, cache)
}

// newSteadS3 initialises a repository in the bucket cfg names (created if
// missing).
func newSteadS3(ctx context.Context, cfg s3.Config, cache string) (*steadRepo, error) {
	st, err := s3.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return initStead(ctx, st, cache)
}

func initStead(ctx context.Context, st blobstore.BlobStore, cache string) (*steadRepo, error) {
	master, err := seal.NewKey()
	if err != nil {
		return nil, err
	}
	if err := repo.Init(ctx, st, master); err != nil {
		return nil, err
	}
	return &steadRepo{store: st, master: master, cache: cache}, nil
}

// scope opens the repository and the bench scope, as a fresh `stead push`
// process would; the O(changes) repository's stays open from one push to
// the next, as the daemon keeps its repository (its index is loaded once
// and then only what other writers add).
func (s *steadRepo) scope(ctx context.Context) (*repo.Scope, error) {
	if s.open != nil {
		return s.open, nil
	}
	r, err := repo.Open(ctx, s.store, s.master, repo.Options{CacheDir: s.cache, Workers: s.workers, Readers: s.readers, Transfers: s.transfers})
	if err != nil {
		return nil, err
	}
	sc, err := r.Scope(ctx, benchScope, true)
	if err == nil && s.diff {
		s.open = sc
	}
	return sc, err
}

// push backs up src, incremental to the previous push if there was one:
// src itself, or with snaps a fresh snapshot of it (the snapshot is part
// of the push, as in the daemon).
func (s *steadRepo) push(ctx context.Context, src string) (repo.PushStats, error) {
	sc, err := s.scope(ctx)
	if err != nil {
		return repo.PushStats{}, err
	}
	var snap string
	var d treediff.Diff
	if s.snaps != nil {
		if snap, err = s.snaps.take(ctx); err != nil {
			return repo.PushStats{}, err
		}
		src = s.snaps.pool.Path(snap)
		if s.diff && s.lastSnap != "" {
			if d, err = s.snaps.pool.Diff(ctx, s.snaps.pool.Path(s.lastSnap), src); err != nil {
				return repo.PushStats{}, err
			}
			defer d.Close()
		}
	}
	if s.profile != "" && d != nil {
		s.pushes++
		stop, err := startProfile(fmt.Sprintf("%s.%d", s.profile, s.pushes))
		if err != nil {
			return repo.PushStats{}, err
		}
		defer stop()
	}
	m, st, err := sc.Push(ctx, src, repo.PushOptions{Parent: s.last, Source: "bench/corpus", Diff: d})
	if err != nil {
		return st, err
	}
	if d != nil && !st.Incremental {
		return st, fmt.Errorf("the push with a btrfs comparison walked the tree")
	}
	s.last = m.ID
	if snap != "" {
		if s.lastSnap != "" {
			if err := s.snaps.pool.Delete(ctx, s.lastSnap); err != nil {
				return st, err
			}
		}
		s.lastSnap = snap
	}
	return st, nil
}

// restore writes the latest push to dst, which must not exist.
func (s *steadRepo) restore(ctx context.Context, dst string) (repo.RestoreStats, error) {
	sc, err := s.scope(ctx)
	if err != nil {
		return repo.RestoreStats{}, err
	}
	return sc.Restore(ctx, s.last, dst, repo.RestoreOptions{})
}

// bucketBytes sums the sizes of every object in the bucket cfg names (any
// repository's: stead's or restic's).
func bucketBytes(ctx context.Context, cfg s3.Config) (int64, int, error) {
	st, err := s3.New(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	infos, err := st.List(ctx, "")
	if err != nil {
		return 0, 0, fmt.Errorf("list bucket %s: %w", cfg.Bucket, err)
	}
	var n int64
	for _, in := range infos {
		n += in.Size
	}
	return n, len(infos), nil
}

// emptyBucket deletes every object in the bucket cfg names.
func emptyBucket(ctx context.Context, cfg s3.Config) error {
	st, err := s3.New(ctx, cfg)
	if err != nil {
		return err
	}
	infos, err := st.List(ctx, "")
	if err != nil {
		return fmt.Errorf("list bucket %s: %w", cfg.Bucket, err)
	}
	for _, in := range infos {
		if err := st.Delete(ctx, in.Key); err != nil {
			return err
		}
	}
	return nil
}

// startProfile starts a CPU profile into path and returns its stop.
func startProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
