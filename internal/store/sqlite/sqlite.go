package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqldb"
)

var _ store.Store = (*Store)(nil)

// busyTimeout is how long a connection waits for a lock held by another
// process (or, for readers, for WAL recovery) before SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// Store is the SQLite implementation of store.Store: the queries of
// sqldb.Store run through this package's dialect. Its methods are safe for
// concurrent use.
type Store struct {
	*sqldb.Store
	path string
	// w is the only connection that writes. One connection means writers
	// queue in database/sql, never inside SQLite, so concurrent writers in
	// this process cannot hit SQLITE_BUSY or a lock-upgrade deadlock; the
	// store's writes are small, so serialising them costs little next to the
	// fsync each commit does anyway.
	w *sql.DB
	// r is a pool of query_only connections. In WAL mode readers neither
	// block the writer nor are blocked by it, so reads scale with the pool
	// and always see every write that committed before they started.
	r *sql.DB

	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating if needed) the SQLite database at path, applies any
// pending schema migrations and returns the store. path must name a file on
// a local file system that supports shared memory (WAL needs it); it must not
// contain '?'. A database whose schema is newer than this build is refused
// with an error wrapping errs.ErrUnsupported.
//
// The database and its -wal, -shm and -journal files are readable by their
// owner only (0600) from the moment they exist: a new database file is
// created 0600 before SQLite opens it (SQLite gives the files it creates
// beside a database the database file's mode), and existing ones with
// group or other bits are narrowed to 0600.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || strings.ContainsRune(path, '?') || strings.HasPrefix(path, "file:") || path == ":memory:" {
		return nil, fmt.Errorf("open store %q: path must be a plain file path: %w", path, errs.ErrInvalid)
	}
	if err := privateFiles(path); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// Switching a brand-new file to WAL can meet SQLITE_BUSY without the
	// busy handler being consulted (another process is creating it at the
	// same moment); such an open is retried for up to the busy timeout.
	deadline := time.Now().Add(busyTimeout)
	for {
		st, err := open(ctx, path)
		if err == nil || !strings.Contains(err.Error(), "SQLITE_BUSY") || time.Now().After(deadline) {
			return st, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("open store %s: %w", path, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// fileSuffixes are the suffixes of the files SQLite keeps beside a
// database file ("" is the database itself).
var fileSuffixes = []string{"", "-wal", "-shm", "-journal"}

// privateFiles creates the database file 0600 if it does not exist, and
// narrows the database and its companion files to 0600 where they have
// group or other permission bits.
func privateFiles(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	for _, suffix := range fileSuffixes {
		fi, err := os.Lstat(path + suffix)
		if err != nil {
			continue
		}
		if fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(path+suffix, fi.Mode().Perm()&0o700); err != nil {
				return err
			}
		}
	}
	return nil
}

func open(ctx context.Context, path string) (*Store, error) {
	busy := fmt.Sprintf("_pragma=busy_timeout(%d)", busyTimeout.Milliseconds())

	// secure_delete(FAST) zeroes the bytes a write frees inside a b-tree
	// page, so a replaced value (a rewritten sandbox spec) does not linger
	// in the page's free space; it costs no extra I/O.
	w, err := sql.Open("sqlite", path+"?"+busy+
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)&_pragma=secure_delete(FAST)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	var mode string
	if err := w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		w.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		w.Close()
		return nil, fmt.Errorf("open store %s: journal mode is %q, not wal (does the file system support shared memory?): %w", path, mode, errs.ErrUnsupported)
	}
	ms, err := loadMigrations()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := migrate(ctx, w, ms); err != nil {
		w.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}

	r, err := sql.Open("sqlite", path+"?"+busy+"&_pragma=foreign_keys(1)&_query_only=1")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	if err := r.PingContext(ctx); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	return &Store{Store: sqldb.New(dialect(w, r)), path: path, w: w, r: r}, nil
}

// Close closes both connection pools; the last connection to close
// checkpoints the WAL into the database file. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = errors.Join(s.r.Close(), s.w.Close())
		if s.closeErr != nil {
			s.closeErr = fmt.Errorf("close store %s: %w", s.path, s.closeErr)
		}
	})
	return s.closeErr
}

// dialect is SQLite's sqldb.Dialect on the single writer connection w
// (whose transactions are BEGIN IMMEDIATE) and the reader pool r; ids come
// from AUTOINCREMENT.
func dialect(w, r *sql.DB) sqldb.Dialect {
	return sqldb.Dialect{
		Writer:          w,
		Reader:          r,
		ReadOptions:     sql.TxOptions{ReadOnly: true},
		SerialWriter:    true,
		IsUnique:        isUnique,
		IsForeignKey:    isForeignKey,
		PrefixFunc:      "instr",
		PrepareRepeated: true,
		// The driver parses every statement it runs: keep them prepared.
		CacheStatements: true,
	}
}

func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}

// isUnique reports whether err is a unique or primary key violation.
func isUnique(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// isForeignKey reports whether err is a foreign key violation (here always:
// the record names a tenant that does not exist).
func isForeignKey(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}
