package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store/sqldb"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one embedded schema step, named NNNN_description.sql.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations returns the embedded migrations in version order.
// Versions must be unique and start at 1; a gap is allowed (features built
// side by side reserve numbers: 0013 may land before 0011), and migrate
// applies every version the database has not recorded, in order.
func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var ms []migration
	for _, p := range names {
		base := path.Base(p)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("load migration %s: name must be NNNN_description.sql", base)
		}
		b, err := migrationFiles.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("load migration %s: %w", base, err)
		}
		ms = append(ms, migration{version: v, name: strings.TrimSuffix(base, ".sql"), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if i == 0 && m.version != 1 || i > 0 && m.version == ms[i-1].version {
			return nil, fmt.Errorf("load migration %s: versions must start at 1 and be unique", m.name)
		}
	}
	return ms, nil
}

// migrate brings the database on db (the writer pool) to the last of ms.
// Each migration runs in its own IMMEDIATE transaction together with its
// schema_migrations row, and the current version is re-read inside that
// transaction, so two processes opening the same file at once apply each
// migration exactly once and a crash leaves the schema at a recorded version.
func migrate(ctx context.Context, db *sql.DB, ms []migration) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER NOT NULL PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at TEXT NOT NULL
	) STRICT`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	for {
		done, err := migrateOne(ctx, db, ms)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// migrateOne applies the next pending migration, or reports done when there
// is none.
func migrateOne(ctx context.Context, db *sql.DB, ms []migration) (done bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("begin migration: %w", err)
	}
	defer func() {
		if err != nil || done {
			_ = tx.Rollback()
		}
	}()
	var cur int
	if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&cur); err != nil {
		return false, fmt.Errorf("read schema version: %w", err)
	}
	last := 0
	if len(ms) > 0 {
		last = ms[len(ms)-1].version
	}
	if cur > last {
		return false, fmt.Errorf("database schema version %d is newer than this build of stead supports (%d); upgrade stead: %w",
			cur, last, errs.ErrUnsupported)
	}
	rows, err := tx.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return false, fmt.Errorf("read schema versions: %w", err)
	}
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return false, fmt.Errorf("read schema versions: %w", err)
		}
		applied[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("read schema versions: %w", err)
	}
	next := -1
	for i, m := range ms {
		if !applied[m.version] {
			next = i
			break
		}
	}
	if next < 0 {
		return true, nil
	}
	m := ms[next]
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return false, fmt.Errorf("apply migration %s: %w", m.name, err)
	}
	at, err := sqldb.FormatTime(time.Now())
	if err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
		m.version, m.name, at); err != nil {
		return false, fmt.Errorf("record migration %s: %w", m.name, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("commit migration %s: %w", m.name, err)
	}
	return false, nil
}
