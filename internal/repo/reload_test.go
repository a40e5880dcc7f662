package repo

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stead-dev/stead/internal/repo/seal"
)

// A reload that finds only new index files adds their blobs to the maps it
// has (the cost of what is new), and the result is what a full load of a
// fresh repository resolves; a reload after a prune removed index files
// rebuilds the maps, again equal to a full load.
func TestReloadAddsNewIndexFilesInPlaceAndEqualsAFullLoad(t *testing.T) {
	ctx := context.Background()
	store, master := newLocalRepo(t, filepath.Join(t.TempDir(), "repo"))
	open := func() *Scope {
		r, err := Open(ctx, store, master, Options{PackSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		s, err := r.Scope(ctx, "t-reload", true)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	push := func(s *Scope, seed byte) seal.ID {
		dir := t.TempDir()
		for i := range 5 {
			data := make([]byte, 300<<10)
			for j := range data {
				data[j] = byte(j*int(seed+1)) ^ byte(i) ^ seed
			}
			if err := os.WriteFile(filepath.Join(dir, string(rune('a'+i))), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		m, _, err := s.Push(ctx, dir, PushOptions{Source: "sandbox/sb-reload"})
		if err != nil {
			t.Fatal(err)
		}
		return m.ID
	}
	a, b := open(), open()
	first := push(a, 1)
	before := reflect.ValueOf(a.blobs).Pointer()
	push(b, 2)
	push(b, 3)
	if err := a.loadIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if reflect.ValueOf(a.blobs).Pointer() != before {
		t.Fatal("a reload that only found new index files rebuilt the maps")
	}
	same := func(when string) {
		t.Helper()
		full := open()
		if err := full.loadIndex(ctx); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(a.blobs, full.blobs) || !maps.Equal(a.packs, full.packs) || len(a.indexes) != len(full.indexes) {
			t.Fatalf("%s: %d blobs, %d packs, %d index files; a full load has %d, %d, %d", when,
				len(a.blobs), len(a.packs), len(a.indexes), len(full.blobs), len(full.packs), len(full.indexes))
		}
	}
	same("after the in-place reload")
	// A prune (of the first push) removes index files: a full rebuild.
	if err := b.Forget(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Prune(ctx, PruneOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.loadIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if reflect.ValueOf(a.blobs).Pointer() == before {
		t.Fatal("a reload after a prune kept the maps it had")
	}
	same("after a prune")
}
