package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Checkpoint documents. A put is one IMMEDIATE transaction on the writer
// connection: it checks the sandbox's tenant, reads the document row, checks
// IfVersion against its latest, runs the caller's schema check, bumps latest
// with a compare-and-swap, inserts the version and deletes every version
// older than the newest keep. Either all of that is in the WAL, fsynced,
// when PutCheckpoint returns, or none of it ever becomes visible.

const checkpointDocCols = "d.tenant_id, d.sandbox_id, d.agent, d.name, d.latest, d.keep, d.schema, d.created_at, d.updated_at," +
	" (SELECT COUNT(*) FROM checkpoint_versions v WHERE v.sandbox_id = d.sandbox_id AND v.agent = d.agent AND v.name = d.name)," +
	" (SELECT COALESCE(MIN(v.version), 0) FROM checkpoint_versions v WHERE v.sandbox_id = d.sandbox_id AND v.agent = d.agent AND v.name = d.name)"

const checkpointVersionCols = "d.tenant_id, v.sandbox_id, v.agent, v.name, v.version, v.created_at, v.principal, v.run_id, v.note"

// checkpointRef names a document in error messages.
func checkpointRef(k store.CheckpointKey) string {
	if k.Agent == "" {
		return fmt.Sprintf("%s/%s", k.SandboxID, k.Name)
	}
	return fmt.Sprintf("%s/%s/%s", k.SandboxID, k.Agent, k.Name)
}

func validateCheckpointKey(k store.CheckpointKey) error {
	switch {
	case k.TenantID == "":
		return fmt.Errorf("empty tenant: %w", errs.ErrInvalid)
	case k.SandboxID == "":
		return fmt.Errorf("empty sandbox: %w", errs.ErrInvalid)
	case k.Name == "":
		return fmt.Errorf("empty document name: %w", errs.ErrInvalid)
	}
	return nil
}

// querier is a *sql.DB or *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// sandboxOfTenant returns errs.ErrNotFound unless sandbox id exists in the
// tenant.
func sandboxOfTenant(ctx context.Context, q querier, tenantID, id string) error {
	var one int
	err := q.QueryRowContext(ctx, "SELECT 1 FROM sandboxes WHERE id = ? AND tenant_id = ?", id, tenantID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sandbox %s: %w", id, errs.ErrNotFound)
	}
	return err
}

// PutCheckpoint stores w as the document's next version; see
// store.CheckpointStore for the contract.
func (s *Store) PutCheckpoint(ctx context.Context, w store.CheckpointWrite) (store.Checkpoint, error) {
	ref := checkpointRef(w.CheckpointKey)
	if err := validateCheckpointKey(w.CheckpointKey); err != nil {
		return store.Checkpoint{}, fmt.Errorf("put checkpoint %s: %w", ref, err)
	}
	switch {
	case len(w.Body) == 0:
		return store.Checkpoint{}, fmt.Errorf("put checkpoint %s: empty body: %w", ref, errs.ErrInvalid)
	case w.IfVersion < store.AnyVersion:
		return store.Checkpoint{}, fmt.Errorf("put checkpoint %s: if-version %d: %w", ref, w.IfVersion, errs.ErrInvalid)
	case w.Keep < 0 || w.Keep > store.MaxCheckpointKeep:
		return store.Checkpoint{}, fmt.Errorf("put checkpoint %s: keep %d is not between 1 and %d: %w",
			ref, w.Keep, store.MaxCheckpointKeep, errs.ErrInvalid)
	}
	if w.CreatedAt.IsZero() {
		w.CreatedAt = now()
	}
	created, err := formatTime(w.CreatedAt)
	if err != nil {
		return store.Checkpoint{}, fmt.Errorf("put checkpoint %s: created_at: %w", ref, err)
	}
	out := store.Checkpoint{
		CheckpointKey: w.CheckpointKey,
		CreatedAt:     normTime(w.CreatedAt),
		Principal:     w.Principal,
		RunID:         w.RunID,
		Note:          w.Note,
		Body:          w.Body,
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := sandboxOfTenant(ctx, tx, w.TenantID, w.SandboxID); err != nil {
			return err
		}
		var latest int64
		var keep int
		var schema []byte
		exists := true
		err := tx.QueryRowContext(ctx, "SELECT latest, keep, schema FROM checkpoint_docs WHERE sandbox_id = ? AND agent = ? AND name = ?",
			w.SandboxID, w.Agent, w.Name).Scan(&latest, &keep, &schema)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			exists, keep = false, store.DefaultCheckpointKeep
		case err != nil:
			return err
		}
		if w.IfVersion != store.AnyVersion && w.IfVersion != latest {
			if latest == 0 {
				return fmt.Errorf("if-version %d: the document has no version yet: %w", w.IfVersion, errs.ErrConflict)
			}
			return fmt.Errorf("if-version %d is stale, the latest version is %d: %w", w.IfVersion, latest, errs.ErrConflict)
		}
		if w.Check != nil {
			if err := w.Check(schema); err != nil {
				return err
			}
		}
		if w.Keep > 0 {
			keep = w.Keep
		}
		out.Version = latest + 1
		if exists {
			// Compare-and-swap on latest, so the statement is safe on its own.
			res, err := tx.ExecContext(ctx, "UPDATE checkpoint_docs SET latest = ?, keep = ?, updated_at = ?"+
				" WHERE sandbox_id = ? AND agent = ? AND name = ? AND latest = ?",
				out.Version, keep, created, w.SandboxID, w.Agent, w.Name, latest)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n != 1 {
				return fmt.Errorf("latest version moved: %w", errs.ErrConflict)
			}
		} else {
			_, err := tx.ExecContext(ctx, "INSERT INTO checkpoint_docs"+
				" (tenant_id, sandbox_id, agent, name, latest, keep, schema, created_at, updated_at)"+
				" VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?)",
				w.TenantID, w.SandboxID, w.Agent, w.Name, out.Version, keep, created, created)
			if isUnique(err) {
				return fmt.Errorf("document created concurrently: %w", errs.ErrConflict)
			}
			if err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO checkpoint_versions"+
			" (sandbox_id, agent, name, version, created_at, principal, run_id, note, body)"+
			" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
			w.SandboxID, w.Agent, w.Name, out.Version, created, w.Principal, w.RunID, w.Note, w.Body); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "DELETE FROM checkpoint_versions WHERE sandbox_id = ? AND agent = ? AND name = ? AND version <= ?",
			w.SandboxID, w.Agent, w.Name, out.Version-int64(keep))
		return err
	})
	if err != nil {
		return store.Checkpoint{}, fmt.Errorf("put checkpoint %s: %w", ref, err)
	}
	return out, nil
}

// GetCheckpoint returns version (0: the latest) of a document.
func (s *Store) GetCheckpoint(ctx context.Context, k store.CheckpointKey, version int64) (store.Checkpoint, error) {
	ref := checkpointRef(k)
	if err := validateCheckpointKey(k); err != nil {
		return store.Checkpoint{}, fmt.Errorf("get checkpoint %s: %w", ref, err)
	}
	if version < 0 {
		return store.Checkpoint{}, fmt.Errorf("get checkpoint %s: version %d: %w", ref, version, errs.ErrInvalid)
	}
	q := "SELECT " + checkpointVersionCols + ", v.body FROM checkpoint_versions v" +
		" JOIN checkpoint_docs d ON d.sandbox_id = v.sandbox_id AND d.agent = v.agent AND d.name = v.name" +
		" WHERE d.tenant_id = ? AND v.sandbox_id = ? AND v.agent = ? AND v.name = ?"
	args := []any{k.TenantID, k.SandboxID, k.Agent, k.Name}
	if version == 0 {
		q += " AND v.version = d.latest"
	} else {
		q += " AND v.version = ?"
		args = append(args, version)
	}
	var c store.Checkpoint
	var created string
	err := s.r.QueryRowContext(ctx, q, args...).Scan(&c.TenantID, &c.SandboxID, &c.Agent, &c.Name, &c.Version,
		&created, &c.Principal, &c.RunID, &c.Note, &c.Body)
	if errors.Is(err, sql.ErrNoRows) {
		if version == 0 {
			return store.Checkpoint{}, fmt.Errorf("get checkpoint %s: %w", ref, errs.ErrNotFound)
		}
		return store.Checkpoint{}, fmt.Errorf("get checkpoint %s version %d: %w", ref, version, errs.ErrNotFound)
	}
	if err != nil {
		return store.Checkpoint{}, fmt.Errorf("get checkpoint %s: %w", ref, err)
	}
	if c.CreatedAt, err = parseTime(created); err != nil {
		return store.Checkpoint{}, fmt.Errorf("get checkpoint %s: %w", ref, err)
	}
	return c, nil
}

// GetCheckpointDoc describes one document.
func (s *Store) GetCheckpointDoc(ctx context.Context, k store.CheckpointKey) (store.CheckpointDoc, error) {
	ref := checkpointRef(k)
	if err := validateCheckpointKey(k); err != nil {
		return store.CheckpointDoc{}, fmt.Errorf("get checkpoint document %s: %w", ref, err)
	}
	d, err := getCheckpointDoc(ctx, s.r, k)
	if err != nil {
		return store.CheckpointDoc{}, fmt.Errorf("get checkpoint document %s: %w", ref, err)
	}
	return d, nil
}

func getCheckpointDoc(ctx context.Context, q querier, k store.CheckpointKey) (store.CheckpointDoc, error) {
	d, err := scanCheckpointDoc(q.QueryRowContext(ctx, "SELECT "+checkpointDocCols+" FROM checkpoint_docs d"+
		" WHERE d.tenant_id = ? AND d.sandbox_id = ? AND d.agent = ? AND d.name = ?",
		k.TenantID, k.SandboxID, k.Agent, k.Name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.CheckpointDoc{}, errs.ErrNotFound
	}
	return d, err
}

// ListCheckpoints describes every document of a sandbox, ordered by agent,
// then name.
func (s *Store) ListCheckpoints(ctx context.Context, tenantID, sandboxID string) ([]store.CheckpointDoc, error) {
	if tenantID == "" || sandboxID == "" {
		return nil, fmt.Errorf("list checkpoints of sandbox %s: empty tenant or sandbox: %w", sandboxID, errs.ErrInvalid)
	}
	var out []store.CheckpointDoc
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		if err := sandboxOfTenant(ctx, tx, tenantID, sandboxID); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, "SELECT "+checkpointDocCols+" FROM checkpoint_docs d"+
			" WHERE d.tenant_id = ? AND d.sandbox_id = ? ORDER BY d.agent, d.name", tenantID, sandboxID)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = []store.CheckpointDoc{}
		for rows.Next() {
			d, err := scanCheckpointDoc(rows)
			if err != nil {
				return err
			}
			out = append(out, d)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list checkpoints of sandbox %s: %w", sandboxID, err)
	}
	return out, nil
}

// ListCheckpointVersions lists the kept versions of a document, oldest
// first, without bodies.
func (s *Store) ListCheckpointVersions(ctx context.Context, k store.CheckpointKey) ([]store.Checkpoint, error) {
	ref := checkpointRef(k)
	if err := validateCheckpointKey(k); err != nil {
		return nil, fmt.Errorf("list versions of checkpoint %s: %w", ref, err)
	}
	var out []store.Checkpoint
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		if _, err := getCheckpointDoc(ctx, tx, k); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, "SELECT "+checkpointVersionCols+" FROM checkpoint_versions v"+
			" JOIN checkpoint_docs d ON d.sandbox_id = v.sandbox_id AND d.agent = v.agent AND d.name = v.name"+
			" WHERE d.tenant_id = ? AND v.sandbox_id = ? AND v.agent = ? AND v.name = ? ORDER BY v.version",
			k.TenantID, k.SandboxID, k.Agent, k.Name)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = []store.Checkpoint{}
		for rows.Next() {
			var c store.Checkpoint
			var created string
			if err := rows.Scan(&c.TenantID, &c.SandboxID, &c.Agent, &c.Name, &c.Version,
				&created, &c.Principal, &c.RunID, &c.Note); err != nil {
				return err
			}
			if c.CreatedAt, err = parseTime(created); err != nil {
				return err
			}
			out = append(out, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list versions of checkpoint %s: %w", ref, err)
	}
	return out, nil
}

// SetCheckpointSchema stores schema (nil removes it) as the document's
// JSON Schema, creating the document without versions if needed (but not
// to remove a schema).
func (s *Store) SetCheckpointSchema(ctx context.Context, k store.CheckpointKey, schema []byte) (store.CheckpointDoc, error) {
	ref := checkpointRef(k)
	if err := validateCheckpointKey(k); err != nil {
		return store.CheckpointDoc{}, fmt.Errorf("set schema of checkpoint %s: %w", ref, err)
	}
	var stored any // NULL for no schema
	if len(schema) > 0 {
		stored = schema
	}
	ts, err := formatTime(now())
	if err != nil {
		return store.CheckpointDoc{}, err
	}
	var out store.CheckpointDoc
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := sandboxOfTenant(ctx, tx, k.TenantID, k.SandboxID); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, "UPDATE checkpoint_docs SET schema = ?, updated_at = ?"+
			" WHERE sandbox_id = ? AND agent = ? AND name = ?", stored, ts, k.SandboxID, k.Agent, k.Name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			if stored == nil {
				return errs.ErrNotFound
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO checkpoint_docs"+
				" (tenant_id, sandbox_id, agent, name, latest, keep, schema, created_at, updated_at)"+
				" VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?)",
				k.TenantID, k.SandboxID, k.Agent, k.Name, store.DefaultCheckpointKeep, stored, ts, ts); err != nil {
				return err
			}
		}
		out, err = getCheckpointDoc(ctx, tx, k)
		return err
	})
	if err != nil {
		return store.CheckpointDoc{}, fmt.Errorf("set schema of checkpoint %s: %w", ref, err)
	}
	return out, nil
}

// DeleteCheckpoint removes a document with all its versions.
func (s *Store) DeleteCheckpoint(ctx context.Context, k store.CheckpointKey) error {
	ref := checkpointRef(k)
	if err := validateCheckpointKey(k); err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", ref, err)
	}
	// The versions go by ON DELETE CASCADE, in the same statement.
	res, err := s.w.ExecContext(ctx, "DELETE FROM checkpoint_docs WHERE tenant_id = ? AND sandbox_id = ? AND agent = ? AND name = ?",
		k.TenantID, k.SandboxID, k.Agent, k.Name)
	if err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", ref, err)
	}
	return deleted(res, "delete checkpoint", ref)
}

func scanCheckpointDoc(sc scanner) (store.CheckpointDoc, error) {
	var d store.CheckpointDoc
	var created, updated string
	if err := sc.Scan(&d.TenantID, &d.SandboxID, &d.Agent, &d.Name, &d.Latest, &d.Keep, &d.Schema,
		&created, &updated, &d.Versions, &d.Oldest); err != nil {
		return store.CheckpointDoc{}, err
	}
	var err error
	if d.CreatedAt, err = parseTime(created); err != nil {
		return store.CheckpointDoc{}, err
	}
	if d.UpdatedAt, err = parseTime(updated); err != nil {
		return store.CheckpointDoc{}, err
	}
	if len(d.Schema) == 0 {
		d.Schema = nil
	}
	return d, nil
}

// readTx runs fn in a read-only transaction on the reader pool, so every
// query in fn sees the same snapshot.
func (s *Store) readTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return fn(tx)
}
