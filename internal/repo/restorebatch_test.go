package repo

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/repo/pack"
	"github.com/stead-dev/stead/internal/repo/seal"
	"github.com/stead-dev/stead/internal/treedigest"
)

// batchRig is a repository on a local store with one pushed tree whose
// files spread over many restore batches: identical contents in far apart
// files (one chunk, many targets in different batches), a hardlink pair
// at both ends of the walk, a read-only file, a sparse file.
type batchRig struct {
	s       *Scope
	repoDir string
	src     string
	m       *Manifest
}

func newBatchRig(t *testing.T) *batchRig {
	t.Helper()
	ctx := context.Background()
	base := t.TempDir()
	store, master := newLocalRepo(t, filepath.Join(base, "repo"))
	r, err := Open(ctx, store, master, Options{Workers: 2, Transfers: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Scope(ctx, "t-batch", true)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(base, "src")
	rng := rand.New(rand.NewPCG(7, 7))
	contents := make([][]byte, 5)
	for i := range contents {
		contents[i] = make([]byte, 50<<10+i*977)
		for j := range contents[i] {
			contents[i][j] = byte(rng.Uint32())
		}
	}
	for i := range 120 {
		p := filepath.Join(src, fmt.Sprintf("d%02d", i/10), fmt.Sprintf("f%03d", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, contents[i%len(contents)], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(src, "d00", "f001"), filepath.Join(src, "d11", "zz-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "d05", "f055"), 0o444); err != nil {
		t.Fatal(err)
	}
	sparse := filepath.Join(src, "d07", "sparse")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("tail"), 8<<20)
	f.Close()
	m, _, err := s.Push(ctx, src, PushOptions{Source: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	return &batchRig{s: s, repoDir: filepath.Join(base, "repo"), src: src, m: m}
}

// TestRestoreInBatchesEqualsTheSource: a restore whose walk hands its
// files to the pack workers in batches of 3 (about 40 batches, the pack
// reads of one overlapping the file creation of the next) restores the
// tree exactly, and so does one in a single batch.
func TestRestoreInBatchesEqualsTheSource(t *testing.T) {
	rig := newBatchRig(t)
	ctx := context.Background()
	want, err := treedigest.Digest(ctx, rig.src, treedigest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, batch := range []int{3, 1 << 20} {
		rig.s.restoreBatch = batch
		dst := filepath.Join(t.TempDir(), "out")
		if _, err := rig.s.Restore(ctx, rig.m.ID, dst, RestoreOptions{}); err != nil {
			t.Fatalf("batch %d: %v", batch, err)
		}
		got, err := treedigest.Digest(ctx, dst, treedigest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			a, _ := treedigest.Entries(ctx, rig.src, treedigest.Options{})
			b, _ := treedigest.Entries(ctx, dst, treedigest.Options{})
			t.Fatalf("batch %d: restored tree differs from the source: %v", batch, treedigest.Diff(a, b))
		}
	}
}

// TestRestoreInBatchesStopsOnACorruptPack: a corrupt pack met while the
// walk is still creating files fails the restore (a blob that does not
// authenticate);
// the walk stops, and no worker is left running.
func TestRestoreInBatchesStopsOnACorruptPack(t *testing.T) {
	rig := newBatchRig(t)
	var packs []string
	filepath.WalkDir(rig.repoDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.Contains(p, "/data/") {
			packs = append(packs, p)
		}
		return nil
	})
	if len(packs) == 0 {
		t.Fatal("no pack in the repository")
	}
	for _, p := range packs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/3] ^= 0x10
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rig.s.restoreBatch = 2
	before := runtime.NumGoroutine()
	done := make(chan error, 1)
	go func() {
		_, err := rig.s.Restore(context.Background(), rig.m.ID, filepath.Join(t.TempDir(), "out"), RestoreOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, pack.ErrCorrupt) && !errors.Is(err, seal.ErrAuth) {
			t.Fatalf("restore of a corrupt pack: %v, want pack.ErrCorrupt or seal.ErrAuth", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the restore of a corrupt pack did not end")
	}
	time.Sleep(50 * time.Millisecond)
	if g := runtime.NumGoroutine(); g > before+1 {
		t.Fatalf("%d goroutines after the failed restore, %d before", g, before)
	}
}
