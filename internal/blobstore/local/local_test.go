package local

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/blobstore/blobstoretest"
	"github.com/stead-dev/stead/internal/errs"
)

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLocalPassesBlobStoreContract(t *testing.T) {
	blobstoretest.Run(t, func(t *testing.T) blobstore.BlobStore { return newStore(t) })
}

func TestLocalCreatesRootDirectoryPrivate(t *testing.T) {
	s := newStore(t)
	st, err := os.Stat(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("root mode %v, want 0700", st.Mode().Perm())
	}
	if got, want := s.Location(), "file://"+s.Dir(); got != want {
		t.Fatalf("Location() = %q, want %q", got, want)
	}
}

func TestLocalStoresObjectAtKeyPathWithNoTempFilesLeft(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if err := s.Put(ctx, "data/ab/pack1", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(s.Dir(), "data", "ab", "pack1"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("object file = %q, %v", got, err)
	}
	var names []string
	filepath.WalkDir(s.Dir(), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, d.Name())
		}
		return nil
	})
	if !slices.Equal(names, []string{"pack1"}) {
		t.Fatalf("files in store = %q, want only pack1", names)
	}
}

// A crash between writing the temp file and renaming it leaves a ".tmp-"
// file: it must never show up as an object, and Sweep removes it once old.
func TestLocalCrashLeftoverTempFileIsNeverListedAndIsSwept(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if err := s.Put(ctx, "data/ab/pack1", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	leftovers := []string{
		filepath.Join(s.Dir(), "data", "ab", ".tmp-12345~"),
		filepath.Join(s.Dir(), ".tmp-999~"),
	}
	for _, p := range leftovers {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, prefix := range []string{"", "data/", "data/ab/", ".tmp"} {
		list, err := s.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range list {
			if strings.Contains(in.Key, ".tmp-") {
				t.Fatalf("List(%q) shows crash leftover %q", prefix, in.Key)
			}
		}
	}
	if _, err := s.Get(ctx, "data/ab/.tmp-12345~"); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("Get of a temp file name: err = %v, want ErrInvalid", err)
	}

	// Fresh leftovers may belong to a Put in flight: Sweep keeps them.
	if n, err := s.Sweep(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("Sweep of fresh temp files = %d, %v; want 0, nil", n, err)
	}
	old := time.Now().Add(-2 * time.Hour)
	for _, p := range leftovers {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Sweep(ctx, time.Hour); err != nil || n != 2 {
		t.Fatalf("Sweep of old temp files = %d, %v; want 2, nil", n, err)
	}
	for _, p := range leftovers {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s survived Sweep: %v", p, err)
		}
	}
	if got, err := s.Get(ctx, "data/ab/pack1"); err != nil || string(got) != "ok" {
		t.Fatalf("object after Sweep = %q, %v", got, err)
	}
}

// A user key may start with ".tmp-": only names ending in '~' (never a key)
// are temp files.
func TestLocalKeyThatLooksLikeTempPrefixIsAnObject(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if err := s.Put(ctx, ".tmp-real", []byte("x")); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Key != ".tmp-real" {
		t.Fatalf("List = %+v, want .tmp-real", list)
	}
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(filepath.Join(s.Dir(), ".tmp-real"), old, old)
	if n, err := s.Sweep(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("Sweep removed %d files (%v), want 0", n, err)
	}
}

func TestLocalListIgnoresForeignFilesThatAreNotKeys(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if err := s.Put(ctx, "k", []byte("x")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(s.Dir(), "has space"), nil, 0o600)
	os.Symlink("k", filepath.Join(s.Dir(), "link"))
	list, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Key != "k" {
		t.Fatalf("List = %+v, want only k", list)
	}
}

func TestLocalPutOverDirectoryOrThroughObjectIsConflict(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if err := s.Put(ctx, "a/b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "a", []byte("y")); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("Put(a) over directory a/: err = %v, want ErrConflict", err)
	}
	if err := s.Put(ctx, "a/b/c", []byte("y")); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("Put(a/b/c) through object a/b: err = %v, want ErrConflict", err)
	}
	if got, err := s.Get(ctx, "a/b"); err != nil || string(got) != "x" {
		t.Fatalf("a/b after conflicts = %q, %v", got, err)
	}
}

func TestLocalNewRejectsAFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "file")
	os.WriteFile(p, nil, 0o600)
	if _, err := New(p); err == nil {
		t.Fatal("New over a regular file succeeded")
	}
}

func TestLocalCanceledContextWritesNothing(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Put(ctx, "k", []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with canceled ctx: %v", err)
	}
	if _, err := s.Stat(context.Background(), "k"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("Stat after canceled Put: %v, want not found", err)
	}
}

// filesIn lists the names of the regular files under dir.
func filesIn(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, d.Name())
		}
		return nil
	})
	slices.Sort(names)
	return names
}

func TestLocalSpoolCommitsUnderAKeyBelowItsDirectoryAndLeavesNoTempFile(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	sp, err := s.Spool(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"hel", "lo"} {
		if _, err := sp.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	if names := filesIn(t, s.Dir()); len(names) != 1 || !strings.HasPrefix(names[0], tmpPrefix) {
		t.Fatalf("files while spooling = %q, want one temp file", names)
	}
	if err := sp.Commit(ctx, "data/ab/pack1"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "data/ab/pack1"); err != nil || string(got) != "hello" {
		t.Fatalf("Get after Commit = %q, %v", got, err)
	}
	if names := filesIn(t, s.Dir()); !slices.Equal(names, []string{"pack1"}) {
		t.Fatalf("files after Commit = %q, want only pack1", names)
	}
	sp.Abort() // after Commit: nothing happens
	if _, err := s.Get(ctx, "data/ab/pack1"); err != nil {
		t.Fatalf("Abort after Commit removed the object: %v", err)
	}
	if err := sp.Commit(ctx, "data/ab/pack2"); err == nil {
		t.Fatal("a second Commit succeeded")
	}
}

func TestLocalSpoolAbortAndAFailedCommitStoreNothing(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	sp, err := s.Spool(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	sp.Write([]byte("x"))
	sp.Abort()
	sp.Abort()
	if names := filesIn(t, s.Dir()); len(names) != 0 {
		t.Fatalf("files after Abort = %q, want none", names)
	}
	for _, key := range []string{"data/../x", ""} {
		sp, err := s.Spool(ctx, "data")
		if err != nil {
			t.Fatal(err)
		}
		sp.Write([]byte("x"))
		if err := sp.Commit(ctx, key); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("Commit(%q) = %v, want ErrInvalid", key, err)
		}
		if names := filesIn(t, s.Dir()); len(names) != 0 {
			t.Fatalf("files after a failed Commit = %q, want none", names)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	sp, err = s.Spool(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := sp.Commit(cctx, "data/ab/c"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with a canceled context = %v", err)
	}
	if names := filesIn(t, s.Dir()); len(names) != 0 {
		t.Fatalf("files after a canceled Commit = %q, want none", names)
	}
	if _, err := s.Spool(ctx, "bad//dir"); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("Spool(bad dir) = %v, want ErrInvalid", err)
	}
}

func TestLocalReadRangeReadsWhatGetRangeReturns(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	data := []byte("0123456789")
	if err := s.Put(ctx, "r", data); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if err := s.ReadRange(ctx, "r", 3, buf); err != nil || string(buf) != "3456" {
		t.Fatalf("ReadRange(3, 4) = %q, %v", buf, err)
	}
	if err := s.ReadRange(ctx, "r", 8, buf); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("ReadRange past the end = %v, want io.ErrUnexpectedEOF", err)
	}
	if err := s.ReadRange(ctx, "absent", 0, buf); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("ReadRange of an absent key = %v, want ErrNotFound", err)
	}
	if err := s.ReadRange(ctx, "r", -1, buf); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("ReadRange at -1 = %v, want ErrInvalid", err)
	}
}
