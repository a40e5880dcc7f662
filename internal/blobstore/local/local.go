// Package local is the BlobStore on a local directory: the embedded default,
// and the fastest backend for tests.
//
// Layout: the object with key "a/b/c" is the regular file <dir>/a/b/c (mode
// 0600); directories are created on demand (mode 0700) and never removed.
//
// Crash ordering: Put writes a temp file in the object's directory (its name
// starts with ".tmp-" and ends with '~', so it is never a valid key), fsyncs
// it, renames it over the object's name, then fsyncs the directory. Every
// directory on the object's path has been fsynced into its parent (once per
// Store) before the object is written. So after a crash an object is either
// absent, its old content or its new content, and once Put has returned it is
// durable. A spool (Spool, then Commit) writes its temp file in the
// directory it names and at Commit fsyncs it, renames it to the key and
// fsyncs the key's directory: the same order. A crash may leave temp files
// behind; List never shows them and Sweep removes them.
//
// A directory tree cannot hold both "a" and "a/b": a Put that would need one
// as a file and the other as a directory returns errs.ErrConflict. stead's
// repository never uses such key pairs.
package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/fsutil"
)

// tmpPrefix and tmpSuffix frame the names of in-flight Put files. '~' is not a
// key character, so a temp file can never be mistaken for an object.
const (
	tmpPrefix = ".tmp-"
	tmpSuffix = "~"
)

// Store is a BlobStore rooted at a local directory.
type Store struct {
	dir string
	// durable holds the directories (absolute paths) this Store has fsynced
	// into their parents, so a Put into a directory that another goroutine
	// or process just created still makes that directory durable, once.
	durable sync.Map
}

var _ blobstore.BlobStore = (*Store)(nil)

// New opens (creating it with mode 0700 if missing) the store rooted at dir.
func New(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open blob store %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("open blob store %s: %w", abs, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("open blob store %s: %w", abs, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("open blob store %s: not a directory: %w", abs, errs.ErrInvalid)
	}
	if err := fsutil.SyncDir(filepath.Dir(abs)); err != nil {
		return nil, fmt.Errorf("open blob store %s: %w", abs, err)
	}
	return &Store{dir: abs}, nil
}

// Dir returns the absolute directory the store is rooted at.
func (s *Store) Dir() string { return s.dir }

// Location returns "file://" followed by the store's absolute directory.
func (s *Store) Location() string { return "file://" + s.dir }

func (s *Store) path(key string) string {
	return filepath.Join(s.dir, filepath.FromSlash(key))
}

// Put stores data under key durably; see the package comment for the crash
// ordering.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := blobstore.CheckKey("put", key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	p := s.path(key)
	dir := filepath.Dir(p)
	if err := s.mkdirs(key); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if st, err := os.Lstat(p); err == nil && st.IsDir() {
		return fmt.Errorf("put %s: key is a prefix of other keys: %w", key, errs.ErrConflict)
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*"+tmpSuffix)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("put %s: write: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("put %s: fsync: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("put %s: close: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("put %s: rename: %w", key, err)
	}
	ok = true
	if err := fsutil.SyncDir(dir); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Spool starts a temp file in the directory dir names (created as Put
// creates directories); Commit fsyncs it, renames it to its key (which may
// lie in a subdirectory of dir, created then) and fsyncs the key's
// directory: the crash ordering of Put, without the bytes in memory.
func (s *Store) Spool(ctx context.Context, dir string) (blobstore.Spool, error) {
	if err := blobstore.CheckKey("spool", dir); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	if err := s.mkdirs(dir + "/x"); err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	f, err := os.CreateTemp(s.path(dir), tmpPrefix+"*"+tmpSuffix)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	return &spool{s: s, f: f}, nil
}

var _ blobstore.Spooler = (*Store)(nil)

// spool is a temp file on its way to becoming an object.
type spool struct {
	s    *Store
	f    *os.File
	done bool
}

func (sp *spool) Write(p []byte) (int, error) {
	if sp.done {
		return 0, fmt.Errorf("write spool: %w", os.ErrClosed)
	}
	return sp.f.Write(p)
}

func (sp *spool) Commit(ctx context.Context, key string) error {
	if sp.done {
		return fmt.Errorf("commit %s: spool released: %w", key, os.ErrClosed)
	}
	ok := false
	defer func() {
		if !ok {
			sp.Abort()
		}
	}()
	if err := blobstore.CheckKey("commit", key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("commit %s: %w", key, err)
	}
	p := sp.s.path(key)
	if err := sp.s.mkdirs(key); err != nil {
		return fmt.Errorf("commit %s: %w", key, err)
	}
	if st, err := os.Lstat(p); err == nil && st.IsDir() {
		return fmt.Errorf("commit %s: key is a prefix of other keys: %w", key, errs.ErrConflict)
	}
	if err := sp.f.Sync(); err != nil {
		return fmt.Errorf("commit %s: fsync: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("commit %s: %w", key, err)
	}
	if err := os.Rename(sp.f.Name(), p); err != nil {
		return fmt.Errorf("commit %s: rename: %w", key, err)
	}
	ok, sp.done = true, true
	err := sp.f.Close()
	if err := fsutil.SyncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("commit %s: %w", key, err)
	}
	if err != nil {
		return fmt.Errorf("commit %s: close: %w", key, err)
	}
	return nil
}

func (sp *spool) Abort() {
	if sp.done {
		return
	}
	sp.done = true
	sp.f.Close()
	os.Remove(sp.f.Name())
}

// mkdirs creates the directories above key one by one and makes each
// durable in its parent (an fsync of the parent, once per directory per
// Store), so the object's path survives a crash even if a concurrent Put
// created the directory and has not fsynced it yet.
func (s *Store) mkdirs(key string) error {
	segs := strings.Split(key, "/")
	parent := s.dir
	for _, seg := range segs[:len(segs)-1] {
		d := filepath.Join(parent, seg)
		err := os.Mkdir(d, 0o700)
		switch {
		case err == nil:
		case errors.Is(err, fs.ErrExist):
			st, serr := os.Stat(d)
			if serr != nil {
				return fmt.Errorf("mkdir %s: %w", d, serr)
			}
			if !st.IsDir() {
				return fmt.Errorf("mkdir %s: an object holds this name: %w", d, errs.ErrConflict)
			}
		case errors.Is(err, syscall.ENOTDIR):
			return fmt.Errorf("mkdir %s: an object holds a parent name: %w", d, errs.ErrConflict)
		default:
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
		if _, done := s.durable.Load(d); !done {
			if err := fsutil.SyncDir(parent); err != nil {
				return err
			}
			s.durable.Store(d, struct{}{})
		}
		parent = d
	}
	return nil
}

// open opens key's file for reading; a missing file, a directory or a path
// through a file is errs.ErrNotFound.
func (s *Store) open(op, key string) (*os.File, int64, error) {
	f, err := os.Open(s.path(key))
	if err != nil {
		if isNotExist(err) {
			return nil, 0, fmt.Errorf("%s %s: %w", op, key, errs.ErrNotFound)
		}
		return nil, 0, fmt.Errorf("%s %s: %w", op, key, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%s %s: %w", op, key, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s %s: %w", op, key, errs.ErrNotFound)
	}
	return f, st.Size(), nil
}

// Get returns the whole object.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := blobstore.CheckKey("get", key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	f, size, err := s.open("get", key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, 0); err != nil {
		return nil, fmt.Errorf("get %s: read: %w", key, err)
	}
	return buf, nil
}

// GetRange returns length bytes at offset, read with pread.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error) {
	if err := blobstore.CheckRange(key, offset, length); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get range %s: %w", key, err)
	}
	f, size, err := s.open("get range", key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if offset > size || length > size-offset {
		return nil, fmt.Errorf("get range %s [%d,+%d): object is %d bytes: %w", key, offset, length, size, io.ErrUnexpectedEOF)
	}
	buf := make([]byte, length)
	if _, err := f.ReadAt(buf, offset); err != nil {
		return nil, fmt.Errorf("get range %s: read: %w", key, err)
	}
	return buf, nil
}

var _ blobstore.RangeReader = (*Store)(nil)

// ReadRange is GetRange into the caller's buffer (pread).
func (s *Store) ReadRange(ctx context.Context, key string, offset int64, buf []byte) error {
	length := int64(len(buf))
	if err := blobstore.CheckRange(key, offset, length); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("read range %s: %w", key, err)
	}
	f, size, err := s.open("read range", key)
	if err != nil {
		return err
	}
	defer f.Close()
	if offset > size || length > size-offset {
		return fmt.Errorf("read range %s [%d,+%d): object is %d bytes: %w", key, offset, length, size, io.ErrUnexpectedEOF)
	}
	if _, err := f.ReadAt(buf, offset); err != nil {
		return fmt.Errorf("read range %s: read: %w", key, err)
	}
	return nil
}

// Stat returns the object's size.
func (s *Store) Stat(ctx context.Context, key string) (blobstore.Info, error) {
	if err := blobstore.CheckKey("stat", key); err != nil {
		return blobstore.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return blobstore.Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	st, err := os.Lstat(s.path(key))
	if err != nil {
		if isNotExist(err) {
			return blobstore.Info{}, fmt.Errorf("stat %s: %w", key, errs.ErrNotFound)
		}
		return blobstore.Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	if !st.Mode().IsRegular() {
		return blobstore.Info{}, fmt.Errorf("stat %s: %w", key, errs.ErrNotFound)
	}
	return blobstore.Info{Key: key, Size: st.Size()}, nil
}

// List walks only the directory the prefix names (its part up to the last
// '/'), skipping subdirectories that cannot hold a match, temp files and any
// file whose path is not a valid key.
func (s *Store) List(ctx context.Context, prefix string) ([]blobstore.Info, error) {
	if err := blobstore.CheckPrefix(prefix); err != nil {
		return nil, err
	}
	base := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		base = prefix[:i]
	}
	root := s.dir
	if base != "" {
		root = s.path(base)
	}
	out := []blobstore.Info{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if isNotExist(err) {
				// The base directory does not exist (no match), or a
				// directory vanished under the walk.
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(s.dir, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if p == root {
				return nil
			}
			// Descend only if some key below can start with prefix.
			dk := key + "/"
			if strings.HasPrefix(dk, prefix) || strings.HasPrefix(prefix, dk) {
				return nil
			}
			return fs.SkipDir
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(key, prefix) || !blobstore.ValidKey(key) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if isNotExist(err) {
				return nil // deleted under the walk
			}
			return err
		}
		out = append(out, blobstore.Info{Key: key, Size: fi.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	slices.SortFunc(out, func(a, b blobstore.Info) int { return cmp.Compare(a.Key, b.Key) })
	return out, nil
}

// Delete removes key and fsyncs its directory; an absent key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blobstore.CheckKey("delete", key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	p := s.path(key)
	st, err := os.Lstat(p)
	if err != nil {
		if isNotExist(err) {
			return nil
		}
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if st.IsDir() {
		return nil // a prefix of other keys, not an object
	}
	if err := os.Remove(p); err != nil {
		if isNotExist(err) {
			return nil
		}
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if err := fsutil.SyncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// Sweep removes the temp files that crashed Puts left behind and that were
// last modified more than olderThan ago, and returns how many it removed.
// olderThan must exceed the longest Put in flight (an hour is safe); a Put
// whose temp file is swept fails and may be retried.
func (s *Store) Sweep(ctx context.Context, olderThan time.Duration) (int, error) {
	cutoff := time.Now().Add(-olderThan)
	n := 0
	err := filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if isNotExist(err) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() || !strings.HasPrefix(name, tmpPrefix) || !strings.HasSuffix(name, tmpSuffix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if isNotExist(err) {
				return nil
			}
			return err
		}
		if fi.ModTime().After(cutoff) {
			return nil
		}
		if err := os.Remove(p); err != nil && !isNotExist(err) {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("sweep %s: %w", s.dir, err)
	}
	return n, nil
}

// isNotExist reports whether err means the path is absent, including a path
// that runs through a regular file (ENOTDIR).
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}
