package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

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
	" d.write_access, d.write_keys, d.read_access, d.read_keys, d.mutability," +
	" (SELECT COUNT(*) FROM checkpoint_versions v WHERE v.sandbox_id = d.sandbox_id AND v.agent = d.agent AND v.name = d.name)," +
	" (SELECT COALESCE(MIN(v.version), 0) FROM checkpoint_versions v WHERE v.sandbox_id = d.sandbox_id AND v.agent = d.agent AND v.name = d.name)"

const checkpointVersionCols = "d.tenant_id, v.sandbox_id, v.agent, v.name, v.version, v.created_at, v.principal, v.principal_kind, v.run_id, v.note"

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

// querier is a *conn or *txn.
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
	created, err := FormatTime(w.CreatedAt)
	if err != nil {
		return store.Checkpoint{}, fmt.Errorf("put checkpoint %s: created_at: %w", ref, err)
	}
	out := store.Checkpoint{
		CheckpointKey: w.CheckpointKey,
		CreatedAt:     normTime(w.CreatedAt),
		Principal:     w.Principal,
		PrincipalKind: w.PrincipalKind,
		RunID:         w.RunID,
		Note:          w.Note,
		Body:          w.Body,
	}
	err = s.writeTx(ctx, func(tx *txn) error {
		if err := sandboxOfTenant(ctx, tx, w.TenantID, w.SandboxID); err != nil {
			return err
		}
		d, exists, err := docForWrite(ctx, tx, w.CheckpointKey)
		if err != nil {
			return err
		}
		latest, keep, schema := d.Latest, d.Keep, d.Schema
		if w.Guard != nil {
			body := func() ([]byte, error) {
				if latest == 0 {
					return nil, nil
				}
				var b []byte
				err := tx.QueryRowContext(ctx, "SELECT body FROM checkpoint_versions WHERE sandbox_id = ? AND agent = ? AND name = ? AND version = ?",
					w.SandboxID, w.Agent, w.Name, latest).Scan(&b)
				if err != nil {
					return nil, fmt.Errorf("read latest version %d: %w", latest, err)
				}
				return b, nil
			}
			if err := w.Guard(d, body); err != nil {
				return err
			}
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
			if s.isUnique(err) {
				return fmt.Errorf("document created concurrently: %w", errs.ErrConflict)
			}
			if err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO checkpoint_versions"+
			" (sandbox_id, agent, name, version, created_at, principal, principal_kind, run_id, note, body)"+
			" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			w.SandboxID, w.Agent, w.Name, out.Version, created, w.Principal, w.PrincipalKind, w.RunID, w.Note, w.Body); err != nil {
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
		&created, &c.Principal, &c.PrincipalKind, &c.RunID, &c.Note, &c.Body)
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
	err := s.readTx(ctx, func(tx *txn) error {
		if err := sandboxOfTenant(ctx, tx, tenantID, sandboxID); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, "SELECT "+checkpointDocCols+" FROM checkpoint_docs d"+
			" WHERE d.tenant_id = ? AND d.sandbox_id = ? ORDER BY d.agent, d.name", tenantID, sandboxID)
		if err != nil {
			return err
		}
		defer rows.Close()
		out, err = scanAll(rows, scanCheckpointDoc)
		return err
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
	err := s.readTx(ctx, func(tx *txn) error {
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
				&created, &c.Principal, &c.PrincipalKind, &c.RunID, &c.Note); err != nil {
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
func (s *Store) SetCheckpointSchema(ctx context.Context, k store.CheckpointKey, schema []byte, guard store.CheckpointGuard) (store.CheckpointDoc, error) {
	ref := checkpointRef(k)
	if err := validateCheckpointKey(k); err != nil {
		return store.CheckpointDoc{}, fmt.Errorf("set schema of checkpoint %s: %w", ref, err)
	}
	var stored any // NULL for no schema
	if len(schema) > 0 {
		stored = schema
	}
	ts, err := FormatTime(now())
	if err != nil {
		return store.CheckpointDoc{}, err
	}
	var out store.CheckpointDoc
	err = s.writeTx(ctx, func(tx *txn) error {
		if err := sandboxOfTenant(ctx, tx, k.TenantID, k.SandboxID); err != nil {
			return err
		}
		if err := runGuard(ctx, tx, k, guard); err != nil {
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
func (s *Store) DeleteCheckpoint(ctx context.Context, k store.CheckpointKey, guard store.CheckpointGuard) error {
	ref := checkpointRef(k)
	if err := validateCheckpointKey(k); err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", ref, err)
	}
	err := s.writeTx(ctx, func(tx *txn) error {
		if guard != nil {
			d, err := getCheckpointDoc(ctx, tx, k)
			if err != nil {
				return err
			}
			if err := guard(d); err != nil {
				return err
			}
		}
		// The versions go by ON DELETE CASCADE, in the same statement.
		res, err := tx.ExecContext(ctx, "DELETE FROM checkpoint_docs WHERE tenant_id = ? AND sandbox_id = ? AND agent = ? AND name = ?",
			k.TenantID, k.SandboxID, k.Agent, k.Name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return errs.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", ref, err)
	}
	return nil
}

// SetCheckpointPolicy stores p as the document's policy and, when keep >
// 0, its history depth, trimming the versions beyond it.
func (s *Store) SetCheckpointPolicy(ctx context.Context, k store.CheckpointKey, p store.CheckpointPolicy, keep int, guard store.CheckpointGuard) (store.CheckpointDoc, error) {
	ref := checkpointRef(k)
	if err := validateCheckpointKey(k); err != nil {
		return store.CheckpointDoc{}, fmt.Errorf("set policy of checkpoint %s: %w", ref, err)
	}
	if keep < 0 || keep > store.MaxCheckpointKeep {
		return store.CheckpointDoc{}, fmt.Errorf("set policy of checkpoint %s: keep %d is not between 1 and %d: %w",
			ref, keep, store.MaxCheckpointKeep, errs.ErrInvalid)
	}
	p = p.Normalized()
	wkeys, err := joinKeys(p.Write.Keys)
	if err != nil {
		return store.CheckpointDoc{}, fmt.Errorf("set policy of checkpoint %s: write: %w", ref, err)
	}
	rkeys, err := joinKeys(p.Read.Keys)
	if err != nil {
		return store.CheckpointDoc{}, fmt.Errorf("set policy of checkpoint %s: read: %w", ref, err)
	}
	ts, err := FormatTime(now())
	if err != nil {
		return store.CheckpointDoc{}, err
	}
	var out store.CheckpointDoc
	err = s.writeTx(ctx, func(tx *txn) error {
		if err := sandboxOfTenant(ctx, tx, k.TenantID, k.SandboxID); err != nil {
			return err
		}
		d, exists, err := docForWrite(ctx, tx, k)
		if err != nil {
			return err
		}
		if guard != nil {
			if err := guard(d); err != nil {
				return err
			}
		}
		if keep == 0 {
			keep = d.Keep
		}
		if exists {
			if _, err := tx.ExecContext(ctx, "UPDATE checkpoint_docs SET keep = ?, write_access = ?, write_keys = ?,"+
				" read_access = ?, read_keys = ?, mutability = ?, updated_at = ?"+
				" WHERE sandbox_id = ? AND agent = ? AND name = ?",
				keep, p.Write.Who, wkeys, p.Read.Who, rkeys, p.Mutability, ts, k.SandboxID, k.Agent, k.Name); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "DELETE FROM checkpoint_versions WHERE sandbox_id = ? AND agent = ? AND name = ? AND version <= ?",
				k.SandboxID, k.Agent, k.Name, d.Latest-int64(keep)); err != nil {
				return err
			}
		} else if _, err := tx.ExecContext(ctx, "INSERT INTO checkpoint_docs"+
			" (tenant_id, sandbox_id, agent, name, latest, keep, schema, created_at, updated_at,"+
			" write_access, write_keys, read_access, read_keys, mutability)"+
			" VALUES (?, ?, ?, ?, 0, ?, NULL, ?, ?, ?, ?, ?, ?, ?)",
			k.TenantID, k.SandboxID, k.Agent, k.Name, keep, ts, ts, p.Write.Who, wkeys, p.Read.Who, rkeys, p.Mutability); err != nil {
			return err
		}
		out, err = getCheckpointDoc(ctx, tx, k)
		return err
	})
	if err != nil {
		return store.CheckpointDoc{}, fmt.Errorf("set policy of checkpoint %s: %w", ref, err)
	}
	return out, nil
}

// docForWrite reads the document inside a write transaction; an absent
// document comes back as its defaults with exists false.
func docForWrite(ctx context.Context, tx *txn, k store.CheckpointKey) (store.CheckpointDoc, bool, error) {
	d, err := getCheckpointDoc(ctx, tx, k)
	if errors.Is(err, errs.ErrNotFound) {
		return store.CheckpointDoc{
			CheckpointKey: k, Keep: store.DefaultCheckpointKeep, Policy: store.CheckpointPolicy{}.Normalized(),
		}, false, nil
	}
	if err != nil {
		return store.CheckpointDoc{}, false, err
	}
	return d, true, nil
}

// runGuard calls guard, when set, with the document as docForWrite reads
// it.
func runGuard(ctx context.Context, tx *txn, k store.CheckpointKey, guard store.CheckpointGuard) error {
	if guard == nil {
		return nil
	}
	d, _, err := docForWrite(ctx, tx, k)
	if err != nil {
		return err
	}
	return guard(d)
}

// joinKeys encodes a key id list as one column: comma-separated.
func joinKeys(keys []string) (string, error) {
	for _, k := range keys {
		if k == "" || strings.ContainsAny(k, ", \t\r\n") {
			return "", fmt.Errorf("key id %q: empty or holds a comma or white space: %w", k, errs.ErrInvalid)
		}
	}
	return strings.Join(keys, ","), nil
}

// splitKeys decodes joinKeys.
func splitKeys(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func scanCheckpointDoc(sc scanner) (store.CheckpointDoc, error) {
	var d store.CheckpointDoc
	var created, updated string
	var wkeys, rkeys string
	if err := sc.Scan(&d.TenantID, &d.SandboxID, &d.Agent, &d.Name, &d.Latest, &d.Keep, &d.Schema,
		&created, &updated, &d.Policy.Write.Who, &wkeys, &d.Policy.Read.Who, &rkeys, &d.Policy.Mutability,
		&d.Versions, &d.Oldest); err != nil {
		return store.CheckpointDoc{}, err
	}
	d.Policy.Write.Keys, d.Policy.Read.Keys = splitKeys(wkeys), splitKeys(rkeys)
	d.Policy = d.Policy.Normalized()
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
