package repo_test

// Fuzzers of what the repository reads from its store: whoever can write
// to the bucket (without the master key) can put any bytes under any name.
// The fuzzers of tree documents sealed with the scope's key are in
// hostile_test.go (they need the unexported codec).

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/blobstore/local"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/repo/chunker"
	"github.com/stead-dev/stead/internal/repo/seal"
	"github.com/stead-dev/stead/internal/treedigest"
)

// fuzzDir returns a fresh directory, on /dev/shm when it is a tmpfs
// (restore's syncfs and the store's fsyncs are free there).
func fuzzDir(t testing.TB) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err == nil && st.Type == unix.TMPFS_MAGIC {
		if dir, err := os.MkdirTemp("/dev/shm", "stead-repo-fuzz-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// digestTB is digest for fuzz targets too.
func digestTB(t testing.TB, dir string) string {
	t.Helper()
	d, err := treedigest.Digest(context.Background(), dir, treedigest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// quiet returns a logger that drops the repository's progress logs.
func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// FuzzOpenConfig stores arbitrary bytes as the repository's plaintext
// config object: Open never panics, and succeeds only on a config it can
// use (this format version, valid chunker parameters, a check value the
// master key opens).
func FuzzOpenConfig(f *testing.F) {
	ctx := context.Background()
	store, err := local.New(filepath.Join(fuzzDir(f), "repo"))
	if err != nil {
		f.Fatal(err)
	}
	master, err := seal.NewKey()
	if err != nil {
		f.Fatal(err)
	}
	if err := repo.Init(ctx, store, master); err != nil {
		f.Fatal(err)
	}
	valid, err := store.Get(ctx, "config")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte(strings.Replace(string(valid), `"version": 1`, `"version": 2`, 1)))
	f.Add([]byte(strings.Replace(string(valid), `"avg": 524288`, `"avg": 3`, 1)))
	f.Add([]byte(`{"version":1,"id":"../../etc","chunker":{"min":64,"avg":128,"max":256},"check":"AAAA"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte{0xff, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := store.Put(ctx, "config", data); err != nil {
			t.Fatal(err)
		}
		r, err := repo.Open(ctx, store, master, repo.Options{Logger: quiet()})
		if err != nil {
			return
		}
		cfg := r.Config()
		if cfg.Version != repo.Version || cfg.Chunker.Validate() != nil {
			t.Fatalf("open accepted config %+v", cfg)
		}
		// The config must carry a check value the master key opens:
		// only Init can have written it.
		var raw map[string]json.RawMessage
		if json.Unmarshal(data, &raw) != nil || raw["check"] == nil {
			t.Fatalf("open accepted a config without a check value: %q", data)
		}
	})
}

// FuzzStoredObjectsNeverPanicOrLoseData writes arbitrary bytes into a
// repository holding one snapshot, as an index file, a manifest or a pack
// under the name of their hash (what a writer without the key can do).
// Check, restore and prune never panic; check reports the object (an
// error for an index file or manifest, a warning for a pack); prune
// refuses to run past an unreadable manifest or index file and would
// delete a stray pack; and the real snapshot restores exactly unless an
// unreadable index file stops the restore with an error.
func FuzzStoredObjectsNeverPanicOrLoseData(f *testing.F) {
	ctx := context.Background()
	base := fuzzDir(f)
	store, err := local.New(filepath.Join(base, "repo"))
	if err != nil {
		f.Fatal(err)
	}
	master, err := seal.NewKey()
	if err != nil {
		f.Fatal(err)
	}
	if err := repo.Init(ctx, store, master, repo.InitOptions{Chunker: chunker.Params{Min: 1 << 10, Avg: 4 << 10, Max: 16 << 10}}); err != nil {
		f.Fatal(err)
	}
	open := func(t testing.TB) *repo.Scope {
		t.Helper()
		r, err := repo.Open(ctx, store, master, repo.Options{PackSize: 16 << 10, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		sc, err := r.Scope(ctx, "t-fuzz", true)
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	src := filepath.Join(base, "src")
	if err := os.MkdirAll(filepath.Join(src, "d"), 0o755); err != nil {
		f.Fatal(err)
	}
	for i, name := range []string{"a", "d/b", "d/c"} {
		if err := os.WriteFile(filepath.Join(src, name), randBytes(uint64(i), 20<<10), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	want := digestTB(f, src)
	m, _, err := open(f).Push(ctx, src, repo.PushOptions{Source: "s", Digest: want})
	if err != nil {
		f.Fatal(err)
	}
	prefix := "scopes/t-fuzz/"
	for k, p := range []string{"index/", "snapshots/", "data/"} {
		infos, err := store.List(ctx, prefix+p)
		if err != nil {
			f.Fatal(err)
		}
		for _, in := range infos {
			b, err := store.Get(ctx, in.Key)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, uint8(k))
			if len(b) > 10 {
				b[len(b)/2] ^= 1 // a near-valid object: one bit off
				f.Add(b, uint8(k))
			}
		}
	}
	f.Add([]byte{}, uint8(0))
	f.Add([]byte("{}"), uint8(1))
	f.Add([]byte("STP1"), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, kind uint8) {
		kind %= 3
		id := seal.Hash(data)
		var key string
		switch kind {
		case 0:
			key = prefix + "index/" + id.String()
		case 1:
			key = prefix + "snapshots/" + id.String()
		default:
			key = prefix + "data/" + id.String()[:2] + "/" + id.String()
		}
		if _, err := store.Stat(ctx, key); err == nil {
			return // one of the repository's own objects: nothing forged
		}
		if err := store.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := store.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
		}()
		res, err := open(t).Check(ctx, repo.CheckOptions{ReadData: true})
		if err != nil {
			t.Fatalf("check failed to run: %v", err)
		}
		if kind == 2 {
			if !res.OK() || len(res.Warnings) == 0 {
				t.Fatalf("check of a stray pack: %+v", res)
			}
		} else if res.OK() {
			t.Fatalf("check found nothing wrong with a forged %s", key)
		}
		dst := filepath.Join(base, "dst")
		defer os.RemoveAll(dst)
		_, err = open(t).Restore(ctx, m.ID, dst, repo.RestoreOptions{})
		switch {
		case err == nil:
			if got := digestTB(t, dst); got != want {
				t.Fatalf("restore beside a forged %s differs", key)
			}
		case kind != 0:
			t.Fatalf("a forged %s stopped the restore: %v", key, err)
		}
		// A dry run, so the repository stays as the seeds know it.
		st, err := open(t).Prune(ctx, repo.PruneOptions{DryRun: true})
		switch {
		case kind != 2 && err == nil:
			t.Fatalf("prune ran past a forged %s", key)
		case kind == 2 && err != nil:
			t.Fatalf("prune with a stray pack: %v", err)
		case kind == 2 && st.PacksDeleted != 1:
			t.Fatalf("prune would delete %d packs, want the stray one", st.PacksDeleted)
		}
	})
}
