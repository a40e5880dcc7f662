package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

var _ store.Store = (*Store)(nil)

// writeLockKey is the key of the transaction-level advisory lock every write
// transaction takes first (see the package comment: writers are serialised,
// as SQLite's single writer serialises them).
const writeLockKey int64 = 0x5374656164_5731 // "Stead" "W1"

// migrateLockKey is the advisory lock migrations hold, so two daemons
// opening one database at once apply each migration exactly once.
const migrateLockKey int64 = 0x5374656164_4D31 // "Stead" "M1"

// maxConns bounds the connection pool of one Store.
const maxConns = 16

// Store is the PostgreSQL implementation of store.Store. Its methods are safe
// for concurrent use, also from several processes on one database.
type Store struct {
	db *sql.DB
	// w writes: every statement run on it outside writeTx runs in its own
	// transaction holding the write lock.
	w *conn
	// r reads, without the write lock; every read sees every write that
	// committed before it started.
	r *conn

	closeOnce sync.Once
	closeErr  error
}

// Open connects to the PostgreSQL database named by dsn (a URL,
// postgres://user:pass@host:port/db?sslmode=..., or a key=value string),
// applies any pending schema migrations and returns the store. A database
// whose schema is newer than this build is refused with an error wrapping
// errs.ErrUnsupported; a dsn that does not parse is errs.ErrInvalid.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open store: parse postgres dsn: %w: %w", errs.ErrInvalid, err)
	}
	// Every session of the store speaks UTC and reads committed data; the
	// write lock, not the isolation level, orders writers.
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["timezone"] = "UTC"
	cfg.RuntimeParams["application_name"] = "stead"
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	where := cfg.Host + ":" + strconv.Itoa(int(cfg.Port)) + "/" + cfg.Database
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store postgres %s: %w", where, err)
	}
	ms, err := loadMigrations()
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open store postgres %s: %w", where, err)
	}
	if err := migrate(ctx, db, ms); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store postgres %s: %w", where, err)
	}
	s := &Store{db: db}
	s.w = &conn{db: db, s: s, write: true}
	s.r = &conn{db: db, s: s}
	return s, nil
}

// Close closes the connection pool. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("close store: %w", err)
		}
	})
	return s.closeErr
}

// rebind rewrites the '?' placeholders of q (outside quoted strings and
// identifiers) into PostgreSQL's $1, $2, ..., and the numbered ?NNN into
// $NNN.
func rebind(q string) string {
	if !strings.ContainsRune(q, '?') {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?' && i+1 < len(q) && q[i+1] >= '0' && q[i+1] <= '9':
			b.WriteByte('$') // ?NNN, SQLite's numbered parameter, is $NNN
			continue
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// bindArgs converts arguments to what the PostgreSQL columns hold: the
// schema mirrors SQLite's, where a flag is an integer 0 or 1.
func bindArgs(args []any) []any {
	for i, a := range args {
		if v, ok := a.(bool); ok {
			if v {
				args[i] = int64(1)
			} else {
				args[i] = int64(0)
			}
		}
	}
	return args
}

// conn runs statements on the pool with SQLite-style placeholders.
type conn struct {
	db    *sql.DB
	s     *Store
	write bool
}

// ExecContext runs one statement; on the writer it runs in its own
// transaction under the write lock.
func (c *conn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if !c.write {
		return c.db.ExecContext(ctx, rebind(q), bindArgs(args)...)
	}
	var res sql.Result
	err := c.s.writeTx(ctx, func(tx *txn) error {
		var err error
		res, err = tx.ExecContext(ctx, q, args...)
		return err
	})
	return res, err
}

// QueryContext runs a query on the pool.
func (c *conn) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return c.db.QueryContext(ctx, rebind(q), bindArgs(args)...)
}

// QueryRowContext runs a query returning at most one row on the pool.
func (c *conn) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return c.db.QueryRowContext(ctx, rebind(q), bindArgs(args)...)
}

// txn is a transaction that takes SQLite-style placeholders.
type txn struct {
	tx *sql.Tx
}

// ExecContext runs one statement in the transaction.
func (t *txn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, rebind(q), bindArgs(args)...)
}

// QueryContext runs a query in the transaction.
func (t *txn) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, rebind(q), bindArgs(args)...)
}

// QueryRowContext runs a query returning at most one row in the transaction.
func (t *txn) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, rebind(q), bindArgs(args)...)
}

// writeTx runs fn in a write transaction holding the store's write lock and
// commits it if fn returns nil. A statement that fails inside fn aborts the
// PostgreSQL transaction (unlike a SQLite one), so fn returns that error.
func (s *Store) writeTx(ctx context.Context, fn func(tx *txn) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", writeLockKey); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("take write lock: %w", err)
	}
	if err := checkFence(ctx, &txn{tx: tx}); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := fn(&txn{tx: tx}); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// readTx runs fn in a read-only REPEATABLE READ transaction, so every query
// in fn sees the same snapshot.
func (s *Store) readTx(ctx context.Context, fn func(tx *txn) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return fn(&txn{tx: tx})
}

// nextID advances the named counter in store_sequences and returns its new
// value. It runs under the write lock, so ids are handed out in commit
// order, and a rolled-back transaction hands its id out again (as SQLite's
// AUTOINCREMENT does).
func nextID(ctx context.Context, tx *txn, name string) (int64, error) {
	var id int64
	if err := tx.QueryRowContext(ctx, "UPDATE store_sequences SET seq = seq + 1 WHERE name = ? RETURNING seq", name).Scan(&id); err != nil {
		return 0, fmt.Errorf("next %s id: %w", name, err)
	}
	return id, nil
}

// timeLayout is the stored form of every timestamp: UTC, fixed width, with
// nanoseconds, so text order equals time order. Timestamps are text (in the
// C collation) rather than timestamptz because timestamptz keeps only
// microseconds and the store's contract returns what was written.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

// formatTime returns t in the stored form, or an error wrapping
// errs.ErrInvalid when the year does not fit in four digits.
func formatTime(t time.Time) (string, error) {
	u := t.UTC()
	if y := u.Year(); y < 0 || y > 9999 {
		return "", fmt.Errorf("time %s out of range: %w", t, errs.ErrInvalid)
	}
	return u.Format(timeLayout), nil
}

// formatTimePtr is formatTime for an optional time: nil is stored as NULL.
func formatTimePtr(t *time.Time) (any, error) {
	if t == nil {
		return nil, nil
	}
	return formatTime(*t)
}

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse stored time %q: %w", s, err)
	}
	return t, nil
}

func parseTimePtr(s sql.NullString) (*time.Time, error) {
	if !s.Valid {
		return nil, nil
	}
	t, err := parseTime(s.String)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// now is the store's clock for timestamps it sets itself.
func now() time.Time { return time.Now().UTC().Round(0) }

// normTime strips the monotonic reading and location, as a round trip
// through the database does, so returned records equal re-read ones.
func normTime(t time.Time) time.Time { return t.UTC().Round(0) }

func normTimePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	n := normTime(*t)
	return &n
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// isUnique reports whether err is a unique or primary key violation.
func isUnique(err error) bool { return pgCode(err) == "23505" }

// isForeignKey reports whether err is a foreign key violation (here always:
// the record names a tenant that does not exist).
func isForeignKey(err error) bool { return pgCode(err) == "23503" }
