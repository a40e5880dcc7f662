package sqldb

import (
	"context"
	"database/sql"
	"sync"
)

// maxCachedStmts bounds the statements one pool keeps prepared. The
// store's queries are a fixed set of texts, but a few are built with a
// varying number of conditions; past the bound a new text simply runs
// unprepared, as every query did before the cache.
const maxCachedStmts = 512

// stmtCache keeps one pool's statements prepared, by query text (after
// Rebind), for a driver that does not cache them itself
// (Dialect.CacheStatements): SQLite parses and plans a statement on every
// run otherwise, a sixth of the daemon's own CPU in a sandbox create.
//
// A statement is prepared only on the pool itself, never inside a
// transaction: the pool may be a single connection that the transaction
// holds. A transaction uses the statements already prepared (on its own
// connection: database/sql prepares a statement on each connection once)
// and notes the texts it ran without one; they are prepared after it ends.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// lookup returns the prepared statement of q, or nil.
func (c *stmtCache) lookup(q string) *sql.Stmt {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[q]
}

// get returns the prepared statement of q, preparing it on the pool when
// there is room; nil when it is not prepared (the caller runs q as it is,
// so that an error in q is reported as it always was).
func (c *stmtCache) get(ctx context.Context, q string) *sql.Stmt {
	if c == nil {
		return nil
	}
	if st := c.lookup(q); st != nil {
		return st
	}
	c.prepare(ctx, q)
	return c.lookup(q)
}

// prepare prepares q on the pool and keeps it, if there is room.
func (c *stmtCache) prepare(ctx context.Context, q string) {
	c.mu.Lock()
	full := len(c.m) >= maxCachedStmts
	_, have := c.m[q]
	c.mu.Unlock()
	if full || have {
		return
	}
	st, err := c.db.PrepareContext(context.WithoutCancel(ctx), q)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, have := c.m[q]; have || len(c.m) >= maxCachedStmts {
		_ = st.Close()
		return
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[q] = st
}

// prepareAll prepares the texts a transaction ran without a statement.
func (c *stmtCache) prepareAll(ctx context.Context, qs []string) {
	for _, q := range qs {
		c.prepare(ctx, q)
	}
}

// PreparedStatements returns how many statements the store keeps prepared
// on its writer and on its reader pool (both 0 without
// Dialect.CacheStatements), for tests and measurements.
func (s *Store) PreparedStatements() (writer, reader int) {
	count := func(c *stmtCache) int {
		if c == nil {
			return 0
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.m)
	}
	return count(s.w.stmts), count(s.r.stmts)
}
