// Package sqlite is stead's embedded metadata store: an implementation of
// store.Store on a single SQLite file, using the pure-Go driver
// modernc.org/sqlite so the daemon needs no cgo for its metadata.
//
// The queries are written once, in internal/store/sqldb; this package holds
// the connection setup, the sqldb.Dialect that says what this engine does
// differently, and the engine's migrations.
//
// Durability and crash ordering. The database runs in WAL mode with
// synchronous=FULL. A write is acknowledged (its method returns nil) only
// after its transaction has committed, and a commit appends the transaction's
// pages and a commit frame to the WAL and fsyncs the WAL before returning. An
// acknowledged write is therefore in the WAL and fsynced: kill -9 of the
// daemon, or a power loss, after that point cannot lose it, and the next Open
// replays it from the WAL. A write that has not returned is either entirely
// present after a crash or entirely absent: SQLite ignores WAL frames after
// the last valid commit frame, so a torn transaction is never visible.
// Checkpoints copy WAL pages into the main file and fsync it before the WAL is
// reset, so no acknowledged write exists only in memory at any time.
// Multi-statement operations (UpdateSandbox's compare-and-swap, each schema
// migration together with its schema_migrations row) run in one transaction
// and are atomic under the same rule.
//
// Concurrency. All writes go through one connection (a pool of size one), so
// writers queue inside the process instead of racing for SQLite's write lock
// and surfacing SQLITE_BUSY; write transactions start with BEGIN IMMEDIATE so
// a writer in another process (a CLI opening the same file) is waited for by
// busy_timeout rather than failing mid-transaction. Reads use a separate pool
// of read-only connections that WAL lets run alongside the writer, and every
// read sees every write acknowledged before it started.
//
// Schema. Versioned migrations are embedded .sql files applied in order, each
// in its own transaction and recorded in schema_migrations. Opening an
// already migrated database applies nothing; a database written by a newer
// stead (a schema version this build does not know) is refused with an error
// wrapping errs.ErrUnsupported. Timestamps are stored as fixed-width
// RFC 3339 UTC text with nanoseconds ("2006-01-02T15:04:05.000000000Z"), which
// sorts correctly as text and keeps nanosecond precision. Column types are
// TEXT, INTEGER and BLOB only, so a PostgreSQL schema can mirror this one.
package sqlite
