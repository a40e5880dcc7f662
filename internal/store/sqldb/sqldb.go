package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Dialect is what one database engine does differently. The store's queries
// are written once, in SQLite's dialect with '?' placeholders, and run
// through it.
type Dialect struct {
	// Writer is the pool write transactions and single-statement writes
	// run on; Reader is the pool reads run on (it may be Writer).
	Writer, Reader *sql.DB

	// Rebind rewrites a query's '?' placeholders into the engine's; nil
	// leaves queries as written.
	Rebind func(q string) string

	// WriteLock, if set, runs first in every write transaction begun on
	// Writer and takes the lock that keeps every other writer of the
	// database out until the transaction ends. Without it, beginning a
	// transaction on Writer must be enough. Its errors are wrapped.
	WriteLock func(ctx context.Context, tx *sql.Tx) error

	// ReadOptions are the options of a read transaction on Reader, in which
	// every query must see one snapshot.
	ReadOptions sql.TxOptions

	// SerialWriter says Writer is one connection that serialises writers by
	// itself, so a single-statement write without a fence needs no write
	// transaction around it.
	SerialWriter bool

	// IsUnique reports whether err is a unique or primary key violation;
	// IsForeignKey whether it is a foreign key violation.
	IsUnique, IsForeignKey func(err error) bool

	// Sequences says ids are handed out from the store_sequences table
	// (taken under the write lock) rather than by the engine's
	// AUTOINCREMENT, whose counters are in sqlite_sequence.
	Sequences bool

	// PrefixFunc names the function that returns the 1-based position of
	// its second argument in its first (instr in SQLite, strpos in
	// PostgreSQL).
	PrefixFunc string

	// TryKeyLock, if set, tries to take a lock on key in tx, held until tx
	// ends, which keeps every other process on the database from taking
	// it (PostgreSQL: a transaction-level advisory lock): false when
	// another holds it now. Without it, a transaction begun on Writer
	// holds every key (SerialWriter). Quota admission takes it per tenant.
	TryKeyLock func(ctx context.Context, tx *sql.Tx, key string) (bool, error)

	// PrepareRepeated says a statement run many times in one transaction
	// is prepared once first (the driver does not cache statements).
	PrepareRepeated bool

	// CacheStatements says every statement is kept prepared on its pool
	// and reused (stmtcache.go), for a driver that does not cache
	// statements itself.
	CacheStatements bool
}

// Store is store.Store on a database/sql database speaking a Dialect. Its
// methods are safe for concurrent use. Closing the pools is the engine's
// job.
type Store struct {
	d Dialect
	// w writes: a statement run on it outside writeTx runs in its own write
	// transaction (and is fenced) unless the dialect's writer is serial and
	// ctx carries no fence.
	w *conn
	// r reads, without the write lock; every read sees every write that
	// committed before it started.
	r *conn
	// hints speed up leases.
	hints leaseHints
}

// New returns the store on d's pools.
func New(d Dialect) *Store {
	if d.Rebind == nil {
		d.Rebind = func(q string) string { return q }
	}
	s := &Store{d: d}
	s.w = &conn{db: d.Writer, s: s, write: true}
	s.r = &conn{db: d.Reader, s: s}
	if d.CacheStatements {
		s.w.stmts = &stmtCache{db: d.Writer}
		s.r.stmts = &stmtCache{db: d.Reader}
		if d.Reader == d.Writer {
			s.r.stmts = s.w.stmts
		}
	}
	return s
}

func (s *Store) isUnique(err error) bool     { return s.d.IsUnique(err) }
func (s *Store) isForeignKey(err error) bool { return s.d.IsForeignKey(err) }

// bindArgs converts arguments to what the columns hold: a flag is an
// integer 0 or 1 (as SQLite's driver binds a bool).
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

// conn runs statements on a pool with SQLite-style placeholders.
type conn struct {
	db    *sql.DB
	s     *Store
	write bool
	stmts *stmtCache // nil: statements are not kept prepared
}

// exec runs one statement on the pool, prepared when the dialect keeps
// statements.
func (c *conn) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	q = c.s.d.Rebind(q)
	if st := c.stmts.get(ctx, q); st != nil {
		return st.ExecContext(ctx, bindArgs(args)...)
	}
	return c.db.ExecContext(ctx, q, bindArgs(args)...)
}

// ExecContext runs one statement; on the writer it runs in its own fenced
// write transaction unless the writer is serial and ctx has no fence.
func (c *conn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if !c.write {
		return c.exec(ctx, q, args...)
	}
	if _, fenced := store.FenceFrom(ctx); c.s.d.SerialWriter && !fenced {
		return c.exec(ctx, q, args...)
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
	q = c.s.d.Rebind(q)
	if st := c.stmts.get(ctx, q); st != nil {
		return st.QueryContext(ctx, bindArgs(args)...)
	}
	return c.db.QueryContext(ctx, q, bindArgs(args)...)
}

// QueryRowContext runs a query returning at most one row on the pool.
func (c *conn) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	q = c.s.d.Rebind(q)
	if st := c.stmts.get(ctx, q); st != nil {
		return st.QueryRowContext(ctx, bindArgs(args)...)
	}
	return c.db.QueryRowContext(ctx, q, bindArgs(args)...)
}

// txn is a transaction that takes SQLite-style placeholders.
type txn struct {
	tx *sql.Tx
	s  *Store
	// stmts are the prepared statements of the transaction's pool (nil:
	// none); missed are the texts run without one, prepared when the
	// transaction has ended (see stmtCache).
	stmts  *stmtCache
	missed []string
}

// stmt returns the transaction's copy of q's prepared statement, or nil
// (noting q to be prepared after the transaction).
func (t *txn) stmt(ctx context.Context, q string) *sql.Stmt {
	if t.stmts == nil {
		return nil
	}
	if st := t.stmts.lookup(q); st != nil {
		return t.tx.StmtContext(ctx, st)
	}
	t.missed = append(t.missed, q)
	return nil
}

// done prepares, on the pool, the texts the transaction ran without a
// statement; call it once the transaction has ended.
func (t *txn) done(ctx context.Context) {
	if t.stmts != nil && len(t.missed) > 0 {
		t.stmts.prepareAll(ctx, t.missed)
	}
}

// ExecContext runs one statement in the transaction.
func (t *txn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	q = t.s.d.Rebind(q)
	if st := t.stmt(ctx, q); st != nil {
		return st.ExecContext(ctx, bindArgs(args)...)
	}
	return t.tx.ExecContext(ctx, q, bindArgs(args)...)
}

// QueryContext runs a query in the transaction.
func (t *txn) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	q = t.s.d.Rebind(q)
	if st := t.stmt(ctx, q); st != nil {
		return st.QueryContext(ctx, bindArgs(args)...)
	}
	return t.tx.QueryContext(ctx, q, bindArgs(args)...)
}

// QueryRowContext runs a query returning at most one row in the transaction.
func (t *txn) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	q = t.s.d.Rebind(q)
	if st := t.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, bindArgs(args)...)
	}
	return t.tx.QueryRowContext(ctx, q, bindArgs(args)...)
}

// repeated returns a function that runs q in the transaction, prepared once
// when the dialect asks for it, and a function that releases it.
func (t *txn) repeated(ctx context.Context, q string) (exec func(args ...any) error, done func(), err error) {
	if !t.s.d.PrepareRepeated {
		return func(args ...any) error {
			_, err := t.ExecContext(ctx, q, args...)
			return err
		}, func() {}, nil
	}
	st, err := t.tx.PrepareContext(ctx, t.s.d.Rebind(q))
	if err != nil {
		return nil, nil, err
	}
	return func(args ...any) error {
		_, err := st.ExecContext(ctx, bindArgs(args)...)
		return err
	}, func() { _ = st.Close() }, nil
}

// writeTx runs fn in a write transaction (which no other writer of the
// database interleaves with, and which checks a store.WithFence fence
// first) and commits it if fn returns nil. A statement that fails inside fn
// may abort the transaction (PostgreSQL's do), so fn returns that error.
func (s *Store) writeTx(ctx context.Context, fn func(tx *txn) error) error {
	tx, err := s.d.Writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if s.d.WriteLock != nil {
		if err := s.d.WriteLock(ctx, tx); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	t := &txn{tx: tx, s: s, stmts: s.w.stmts}
	defer t.done(ctx)
	if err := checkFence(ctx, t); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := fn(t); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// readTx runs fn in a read-only transaction, so every query in fn sees the
// same snapshot.
func (s *Store) readTx(ctx context.Context, fn func(tx *txn) error) error {
	tx, err := s.d.Reader.BeginTx(ctx, &s.d.ReadOptions)
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	t := &txn{tx: tx, s: s, stmts: s.r.stmts}
	defer t.done(ctx)
	defer func() { _ = tx.Rollback() }()
	return fn(t)
}

// insertID inserts one row into table, whose first column is its integer
// id, and returns the id. cols and the '?' placeholders in vals name the
// other columns. Ids come from the engine's AUTOINCREMENT, or, where the
// dialect has Sequences, from the table's counter in store_sequences: it
// runs under the write lock, so ids are handed out in commit order, and a
// rolled-back transaction hands its id out again (as AUTOINCREMENT does).
func insertID(ctx context.Context, tx *txn, table, cols, vals string, args ...any) (int64, error) {
	var id int64
	if !tx.s.d.Sequences {
		err := tx.QueryRowContext(ctx, "INSERT INTO "+table+" ("+cols+") VALUES ("+vals+") RETURNING id", args...).Scan(&id)
		return id, err
	}
	if err := tx.QueryRowContext(ctx, "UPDATE store_sequences SET seq = seq + 1 WHERE name = ? RETURNING seq", table).Scan(&id); err != nil {
		return 0, fmt.Errorf("next %s id: %w", table, err)
	}
	args = append([]any{id}, args...)
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id, "+cols+") VALUES (?, "+vals+")", args...); err != nil {
		return 0, err
	}
	return id, nil
}

// timeLayout is the stored form of every timestamp: UTC, fixed width, with
// nanoseconds, so text order equals time order. In PostgreSQL timestamps
// are text (in the C collation) rather than timestamptz because timestamptz
// keeps only microseconds and the store's contract returns what was written.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

// FormatTime returns t in the stored form, or an error wrapping
// errs.ErrInvalid when the year does not fit in four digits.
func FormatTime(t time.Time) (string, error) {
	u := t.UTC()
	if y := u.Year(); y < 0 || y > 9999 {
		return "", fmt.Errorf("time %s out of range: %w", t, errs.ErrInvalid)
	}
	return u.Format(timeLayout), nil
}

// formatTimePtr is FormatTime for an optional time: nil is stored as NULL.
func formatTimePtr(t *time.Time) (any, error) {
	if t == nil {
		return nil, nil
	}
	return FormatTime(*t)
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
