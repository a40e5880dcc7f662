package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqldb"
)

var _ store.Store = (*Store)(nil)

// writeLockKey is the key of the transaction-level advisory lock every write
// transaction takes first (see the package comment: writers are serialised,
// as SQLite's single writer serialises them).
const writeLockKey int64 = 0x5374656164_5731 // "Stead" "W1"

// keyLockClass is the first key of every key lock (sqldb.Dialect.TryKeyLock):
// the second is the hash of the key's name.
const keyLockClass int32 = 0x5354

// migrateLockKey is the advisory lock migrations hold, so two daemons
// opening one database at once apply each migration exactly once.
const migrateLockKey int64 = 0x5374656164_4D31 // "Stead" "M1"

// maxConns bounds the connection pool of one Store.
const maxConns = 16

// Store is the PostgreSQL implementation of store.Store: the queries of
// sqldb.Store run through this package's dialect. Its methods are safe for
// concurrent use, also from several processes on one database.
type Store struct {
	*sqldb.Store
	db *sql.DB

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
	return &Store{Store: sqldb.New(dialect(db)), db: db}, nil
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

// dialect is PostgreSQL's sqldb.Dialect on the pool db: every write
// transaction takes the transaction-level advisory lock writeLockKey first,
// so writers of all stores on the database are serialised (as SQLite's single
// writer serialises them); reads run in REPEATABLE READ snapshots; ids come
// from store_sequences.
func dialect(db *sql.DB) sqldb.Dialect {
	return sqldb.Dialect{
		Writer: db,
		Reader: db,
		Rebind: rebind,
		WriteLock: func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", writeLockKey); err != nil {
				return fmt.Errorf("take write lock: %w", err)
			}
			return nil
		},
		// A key lock (quota admission's, per tenant) is a two-int advisory
		// lock, apart from writeLockKey's space; the transaction that holds
		// it is ended by the server if its process stops talking (it died
		// holding it), so the lock never outlives its holder by long.
		TryKeyLock: func(ctx context.Context, tx *sql.Tx, key string) (bool, error) {
			if _, err := tx.ExecContext(ctx, "SET LOCAL idle_in_transaction_session_timeout = '30s'"); err != nil {
				return false, fmt.Errorf("key lock %s: %w", key, err)
			}
			h := fnv.New32a()
			h.Write([]byte(key))
			var got bool
			if err := tx.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1, $2)", keyLockClass, int32(h.Sum32())).Scan(&got); err != nil {
				return false, fmt.Errorf("key lock %s: %w", key, err)
			}
			return got, nil
		},
		ReadOptions:  sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead},
		IsUnique:     isUnique,
		IsForeignKey: isForeignKey,
		Sequences:    true,
		PrefixFunc:   "strpos",
	}
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
