package postgres

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/stead-dev/stead/internal/store/sqldb"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one embedded schema step.
type migration = sqldb.Migration

// loadMigrations returns the embedded migrations in version order (see
// sqldb.LoadMigrations).
func loadMigrations() ([]migration, error) {
	return sqldb.LoadMigrations(migrationFiles, "migrations")
}

// migrate brings the database on db to the last of ms. Each migration runs
// in its own transaction together with its schema_migrations row, under a
// transaction-level advisory lock, and the current version is re-read inside
// that transaction, so two processes opening the same database at once apply
// each migration exactly once and a crash leaves the schema at a recorded
// version (PostgreSQL's DDL is transactional).
func migrate(ctx context.Context, db *sql.DB, ms []migration) error {
	return sqldb.Migrate(ctx, db, ms, sqldb.Migrator{
		Begin: func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
				return fmt.Errorf("take migration lock: %w", err)
			}
			if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    BIGINT NOT NULL PRIMARY KEY,
		name       TEXT COLLATE "C" NOT NULL,
		applied_at TEXT COLLATE "C" NOT NULL
	)`); err != nil {
				return fmt.Errorf("create schema_migrations: %w", err)
			}
			return nil
		},
		Record: "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
	})
}
