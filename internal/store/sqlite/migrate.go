package sqlite

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

// migrate brings the database on db (the writer pool) to the last of ms.
// Each migration runs in its own IMMEDIATE transaction together with its
// schema_migrations row, and the current version is re-read inside that
// transaction, so two processes opening the same file at once apply each
// migration exactly once and a crash leaves the schema at a recorded version.
func migrate(ctx context.Context, db *sql.DB, ms []migration) error {
	return sqldb.Migrate(ctx, db, ms, sqldb.Migrator{
		Prepare: func(ctx context.Context, db *sql.DB) error {
			if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER NOT NULL PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at TEXT NOT NULL
	) STRICT`); err != nil {
				return fmt.Errorf("create schema_migrations: %w", err)
			}
			return nil
		},
		Record: "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
	})
}
