package sqldb

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const (
	auditCols      = "seq, time, actor, tenant_id, action, target, outcome, prev_hash, hash"
	auditCheckCols = "seq, hash, start_seq, time, key_id, signature"
)

// AppendAudit stores e as the next entry of the chain.
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) error {
	switch {
	case e.Seq < 1:
		return fmt.Errorf("append audit entry: seq %d: %w", e.Seq, errs.ErrInvalid)
	case e.Action == "" || len(e.Hash) == 0:
		return fmt.Errorf("append audit entry %d: empty action or hash: %w", e.Seq, errs.ErrInvalid)
	}
	at, err := FormatTime(e.Time)
	if err != nil {
		return fmt.Errorf("append audit entry %d: time: %w", e.Seq, err)
	}
	err = s.writeTx(ctx, func(tx *txn) error {
		var last sql.NullInt64
		var lastHash sql.NullString
		err := tx.QueryRowContext(ctx, "SELECT seq, hash FROM audit_entries ORDER BY seq DESC LIMIT 1").Scan(&last, &lastHash)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if e.Seq != 1 {
				return fmt.Errorf("trail is empty, next seq is 1, not %d: %w", e.Seq, errs.ErrConflict)
			}
		case err != nil:
			return err
		case e.Seq != last.Int64+1:
			return fmt.Errorf("next seq is %d, not %d: %w", last.Int64+1, e.Seq, errs.ErrConflict)
		case !bytes.Equal(decodeHash(lastHash.String), e.PrevHash):
			return fmt.Errorf("prev_hash does not match the hash of entry %d: %w", last.Int64, errs.ErrConflict)
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO audit_entries ("+auditCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
			e.Seq, at, e.Actor, e.Tenant, e.Action, e.Target, e.Outcome,
			hex.EncodeToString(e.PrevHash), hex.EncodeToString(e.Hash))
		if s.isUnique(err) {
			return fmt.Errorf("seq taken: %w", errs.ErrConflict)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("append audit entry %d: %w", e.Seq, err)
	}
	return nil
}

// LastAudit returns the entry with the highest seq.
func (s *Store) LastAudit(ctx context.Context) (store.AuditEntry, error) {
	e, err := scanAudit(s.r.QueryRowContext(ctx, "SELECT "+auditCols+" FROM audit_entries ORDER BY seq DESC LIMIT 1"))
	if errors.Is(err, sql.ErrNoRows) {
		return store.AuditEntry{}, fmt.Errorf("last audit entry: trail is empty: %w", errs.ErrNotFound)
	}
	if err != nil {
		return store.AuditEntry{}, fmt.Errorf("last audit entry: %w", err)
	}
	return e, nil
}

// ListAudit returns the entries f selects, by seq.
func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, error) {
	var where []string
	var args []any
	where = append(where, "seq > ?")
	args = append(args, f.AfterSeq)
	if !f.Since.IsZero() {
		since, err := FormatTime(f.Since)
		if err != nil {
			return nil, fmt.Errorf("list audit entries: since: %w", err)
		}
		where = append(where, "time >= ?")
		args = append(args, since)
	}
	if f.Tenant != "" {
		where = append(where, "tenant_id = ?")
		args = append(args, f.Tenant)
	}
	q := "SELECT " + auditCols + " FROM audit_entries WHERE " + strings.Join(where, " AND ") + " ORDER BY seq"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list audit entries: %w", err)
	}
	defer rows.Close()
	out, err := scanAll(rows, scanAudit)
	if err != nil {
		return nil, fmt.Errorf("list audit entries: %w", err)
	}
	return out, nil
}

// PutAuditCheckpoint stores a signed checkpoint of the chain.
func (s *Store) PutAuditCheckpoint(ctx context.Context, c store.AuditCheckpoint) error {
	if err := s.writeTx(ctx, func(tx *txn) error { return putCheckpoint(ctx, tx, c, false) }); err != nil {
		return fmt.Errorf("put audit checkpoint %d: %w", c.Seq, err)
	}
	return nil
}

// putCheckpoint validates and inserts c in tx (replacing one of the same
// seq when replace is set).
func putCheckpoint(ctx context.Context, tx *txn, c store.AuditCheckpoint, replace bool) error {
	switch {
	case c.Seq < 1 || c.Start < 1:
		return fmt.Errorf("seq %d start %d: %w", c.Seq, c.Start, errs.ErrInvalid)
	case len(c.Hash) == 0 || len(c.Signature) == 0 || c.KeyID == "":
		return fmt.Errorf("empty hash, signature or key id: %w", errs.ErrInvalid)
	}
	at, err := FormatTime(c.Time)
	if err != nil {
		return fmt.Errorf("time: %w", err)
	}
	var last sql.NullInt64
	if err := tx.QueryRowContext(ctx, "SELECT MAX(seq) FROM audit_entries").Scan(&last); err != nil {
		return err
	}
	if c.Seq > last.Int64 {
		return fmt.Errorf("no entry %d (last is %d): %w", c.Seq, last.Int64, errs.ErrInvalid)
	}
	if replace {
		if _, err := tx.ExecContext(ctx, "DELETE FROM audit_checkpoints WHERE seq = ?", c.Seq); err != nil {
			return err
		}
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO audit_checkpoints ("+auditCheckCols+") VALUES (?, ?, ?, ?, ?, ?)",
		c.Seq, hex.EncodeToString(c.Hash), c.Start, at, c.KeyID, hex.EncodeToString(c.Signature))
	if tx.s.isUnique(err) {
		return fmt.Errorf("a checkpoint of seq %d exists: %w", c.Seq, errs.ErrConflict)
	}
	return err
}

// ListAuditCheckpoints returns every checkpoint by seq.
func (s *Store) ListAuditCheckpoints(ctx context.Context) ([]store.AuditCheckpoint, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+auditCheckCols+" FROM audit_checkpoints ORDER BY seq")
	if err != nil {
		return nil, fmt.Errorf("list audit checkpoints: %w", err)
	}
	defer rows.Close()
	out := []store.AuditCheckpoint{}
	for rows.Next() {
		var c store.AuditCheckpoint
		var hash, at, sig string
		if err := rows.Scan(&c.Seq, &hash, &c.Start, &at, &c.KeyID, &sig); err != nil {
			return nil, fmt.Errorf("list audit checkpoints: %w", err)
		}
		var bad []string
		c.Hash = decodeHashNote(hash, "hash", &bad)
		c.Signature = decodeHashNote(sig, "signature", &bad)
		c.Time = parseTimeNote(at, &bad)
		c.Malformed = strings.Join(bad, "; ")
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audit checkpoints: %w", err)
	}
	return out, nil
}

// PruneAudit deletes entries and checkpoints before keepFrom and stores
// head, in one transaction.
func (s *Store) PruneAudit(ctx context.Context, keepFrom int64, head store.AuditCheckpoint) (int64, error) {
	var n int64
	err := s.writeTx(ctx, func(tx *txn) error {
		if keepFrom < 1 || keepFrom > head.Seq {
			return fmt.Errorf("keep from %d past head %d: %w", keepFrom, head.Seq, errs.ErrInvalid)
		}
		if keepFrom != head.Seq {
			var one int
			err := tx.QueryRowContext(ctx, "SELECT 1 FROM audit_checkpoints WHERE seq = ?", keepFrom).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("no checkpoint of seq %d to anchor the rest: %w", keepFrom, errs.ErrInvalid)
			}
			if err != nil {
				return err
			}
		}
		if err := putCheckpoint(ctx, tx, head, true); err != nil {
			return fmt.Errorf("head checkpoint: %w", err)
		}
		res, err := tx.ExecContext(ctx, "DELETE FROM audit_entries WHERE seq < ?", keepFrom)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "DELETE FROM audit_checkpoints WHERE seq < ?", keepFrom)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune audit trail before %d: %w", keepFrom, err)
	}
	return n, nil
}

func scanAudit(sc scanner) (store.AuditEntry, error) {
	var e store.AuditEntry
	var at, prev, hash string
	if err := sc.Scan(&e.Seq, &at, &e.Actor, &e.Tenant, &e.Action, &e.Target, &e.Outcome, &prev, &hash); err != nil {
		return store.AuditEntry{}, err
	}
	var bad []string
	e.Time = parseTimeNote(at, &bad)
	e.PrevHash = decodeHashNote(prev, "prev_hash", &bad)
	e.Hash = decodeHashNote(hash, "hash", &bad)
	e.Malformed = strings.Join(bad, "; ")
	return e, nil
}

// decodeHash returns the bytes of a stored hash: hex-decoded, or its raw
// bytes when it is not hex (a malformed row; see store.AuditStore).
func decodeHash(s string) []byte {
	if b, err := hex.DecodeString(s); err == nil {
		return b
	}
	return []byte(s)
}

// decodeHashNote is decodeHash that notes in bad why s is malformed.
func decodeHashNote(s, column string, bad *[]string) []byte {
	if _, err := hex.DecodeString(s); err != nil {
		*bad = append(*bad, fmt.Sprintf("%s %.40q is not hex", column, s))
	}
	return decodeHash(s)
}

// parseTimeNote parses a stored time, noting in bad when it is not one
// (and returning the zero time).
func parseTimeNote(s string, bad *[]string) time.Time {
	t, err := parseTime(s)
	if err != nil {
		*bad = append(*bad, fmt.Sprintf("time %.40q is not a stored time", s))
		return time.Time{}
	}
	return t
}
