// Package sqldb is the implementation of store.Store shared by stead's SQL
// engines (internal/store/sqlite and internal/store/postgres): every query,
// written once against database/sql in SQLite's dialect with '?'
// placeholders, and run through a Dialect that names the few things the
// engines do differently (placeholders, how writers are serialised, the
// read snapshot, error codes, where ids come from, one SQL function). It
// also holds the schema migration runner both engines use on their own
// migrations.
//
// Concurrency. Writers are serialised: every write transaction begins on
// the dialect's Writer and, where the dialect has a WriteLock, takes it
// before its first statement, so the store's read-then-write paths (audit
// hash chains, sequence numbers, task claims, quota checks) see every write
// committed before them. A write transaction checks a store.WithFence fence
// first. A failed statement may abort the transaction (PostgreSQL's do), so
// every write path returns such an error instead of going on.
//
// Each engine package opens its connections, applies its migrations and
// embeds *Store in its own Store type; closing the connections is the
// engine's job.
package sqldb
