// Package postgres is stead's scale-out metadata store: an implementation of
// store.Store on a PostgreSQL database (driver github.com/jackc/pgx/v5), for
// several daemons sharing one database. It passes the same contract suite
// (internal/store/storetest) as the embedded SQLite store and keeps its
// semantics, including the ones SQLite gives for free (the queries are
// written once, in internal/store/sqldb; this package holds the connection
// setup, the sqldb.Dialect that says what PostgreSQL does differently, and
// its migrations):
//
// Concurrency. SQLite has one writer at a time, and the store's write paths
// rely on it (an audit entry's sequence number and hash chain, checkpoint
// and session sequence numbers, task claims, quota checks read and then
// write). Here every write transaction takes one transaction-level advisory
// lock (pg_advisory_xact_lock) before its first statement, so writers from
// every process on the database are serialised exactly as SQLite's are and
// each sees every write committed before it. Single statements issued
// outside a transaction on the writer run in their own locked transaction.
// Reads take no lock and run at READ COMMITTED (one statement) or in a
// read-only REPEATABLE READ transaction (several statements that must see one
// snapshot). A failed statement aborts a PostgreSQL transaction, unlike a
// SQLite one; every write path returns such an error (a unique violation
// becomes errs.ErrConflict, a foreign key one errs.ErrNotFound) and never
// goes on in the same transaction.
//
// Durability. A write is acknowledged after its transaction has committed;
// with PostgreSQL's default synchronous_commit=on and fsync=on the commit
// record is flushed to the WAL before the commit returns, so an acknowledged
// write survives a crash of the server and a torn transaction is never
// visible.
//
// Schema. Versioned migrations are embedded .sql files, applied in order,
// each in its own transaction (PostgreSQL DDL is transactional) under an
// advisory lock and recorded in schema_migrations; gaps in the numbering are
// allowed, and a database whose schema is newer than this build is refused
// with an error wrapping errs.ErrUnsupported. The first migration is the end
// state of the SQLite migrations up to 0021. Column types mirror SQLite's:
// BIGINT, DOUBLE PRECISION, BYTEA and TEXT in the C collation (bytewise
// comparison and order, as SQLite's BINARY). Timestamps are the same
// fixed-width RFC 3339 UTC text with nanoseconds, so they sort as text and
// round-trip exactly (timestamptz would keep only microseconds). SQLite's
// AUTOINCREMENT counters are rows of store_sequences advanced inside the
// writing transaction.
package postgres
