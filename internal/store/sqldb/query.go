package sqldb

import (
	"context"
	"fmt"

	"github.com/stead-dev/stead/internal/errs"
)

// queryAll runs the query q on db and scans every row with scan; what
// names the call in errors.
func queryAll[T any](ctx context.Context, db *conn, what string, scan func(scanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	out, err := scanAll(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// updateOne runs the UPDATE upd in a write transaction and returns the
// row that sel then reads, in the same transaction. No row changed is
// errs.ErrNotFound (and nothing is read).
func updateOne[T any](ctx context.Context, s *Store, scan func(scanner) (T, error), upd string, updArgs []any, sel string, selArgs ...any) (T, error) {
	var out T
	err := s.writeTx(ctx, func(tx *txn) error {
		res, err := tx.ExecContext(ctx, upd, updArgs...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return errs.ErrNotFound
		}
		out, err = scan(tx.QueryRowContext(ctx, sel, selArgs...))
		return err
	})
	return out, err
}
