package audit

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Witness keeps a copy of the newest signed checkpoint outside the
// database, so that Verify can tell a trail whose tail was deleted (with
// or without the checkpoints that covered it) from one that never had
// those entries. A witness only ever moves forward: the Log never replaces
// a witness that names a seq the database no longer holds, or holds with
// another hash, so the evidence stays until an operator removes it.
//
// Implementations: FileWitness (a file beside the database) and
// RepoWitness (a sealed record in the off-box repository).
type Witness interface {
	// Name says where the witness is kept, for reports and logs
	// ("file /var/lib/stead/audit.witness").
	Name() string
	// Load returns the stored checkpoint: errs.ErrNotFound (wrapped) when
	// none was ever stored, errs.ErrInvalid (wrapped) when what is stored
	// cannot be decoded. Load has no side effects and may be retried.
	Load(ctx context.Context) (store.AuditCheckpoint, error)
	// Store replaces the stored checkpoint with c atomically and durably:
	// once it returns nil, Load returns c after a crash of the process or
	// the machine; after an error or a crash during Store, Load returns
	// the previous checkpoint or c, never a mix or nothing. Safe to retry.
	Store(ctx context.Context, c store.AuditCheckpoint) error
}

// witnessFormat tags the encoding of a stored witness.
const witnessFormat = "stead-audit-witness-v1"

// witnessDoc is the stored form of a witness (JSON).
type witnessDoc struct {
	Format    string    `json:"format"`
	Seq       int64     `json:"seq"`
	Hash      string    `json:"hash"`
	Start     int64     `json:"start"`
	Time      time.Time `json:"time"`
	KeyID     string    `json:"key_id"`
	Signature string    `json:"signature"`
}

func toDoc(c store.AuditCheckpoint) witnessDoc {
	return witnessDoc{Format: witnessFormat, Seq: c.Seq, Hash: hex.EncodeToString(c.Hash),
		Start: c.Start, Time: c.Time.UTC(), KeyID: c.KeyID, Signature: hex.EncodeToString(c.Signature)}
}

func encodeWitness(c store.AuditCheckpoint) ([]byte, error) {
	b, err := json.MarshalIndent(toDoc(c), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode audit witness: %w", err)
	}
	return append(b, '\n'), nil
}

func decodeWitness(b []byte) (store.AuditCheckpoint, error) {
	var d witnessDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return store.AuditCheckpoint{}, fmt.Errorf("decode audit witness: %w: %w", errs.ErrInvalid, err)
	}
	return fromDoc(d)
}

// fromDoc checks a decoded witness and returns its checkpoint.
func fromDoc(d witnessDoc) (store.AuditCheckpoint, error) {
	if d.Format != witnessFormat {
		return store.AuditCheckpoint{}, fmt.Errorf("decode audit witness: format %q, want %q: %w", d.Format, witnessFormat, errs.ErrInvalid)
	}
	hash, herr := hex.DecodeString(d.Hash)
	sig, serr := hex.DecodeString(d.Signature)
	if herr != nil || serr != nil || d.Seq < 1 || d.Start < 1 || d.Start > d.Seq || len(hash) == 0 || len(sig) == 0 || d.KeyID == "" {
		return store.AuditCheckpoint{}, fmt.Errorf("decode audit witness: seq %d: a field is missing or malformed: %w", d.Seq, errs.ErrInvalid)
	}
	return store.AuditCheckpoint{Seq: d.Seq, Hash: hash, Start: d.Start, Time: d.Time.UTC(), KeyID: d.KeyID, Signature: sig}, nil
}

// FileWitness keeps the witness in one file (mode 0600), beside the
// database by convention (DATA/audit.witness).
//
// Crash ordering: Store writes the whole checkpoint to PATH.tmp, fsyncs
// it, renames it over PATH and fsyncs the directory. A crash before the
// rename leaves PATH as it was (and a PATH.tmp that Load ignores and the
// next Store truncates); a crash after it leaves the new PATH, durable
// once the directory is synced.
type FileWitness struct {
	path string
	// fault, when set (tests), is called before each step of Store with
	// the step's name ("create", "write", "sync", "close", "rename",
	// "syncdir"); an error stops Store there as a crash would, leaving
	// what is on disk as it is.
	fault func(op string) error
}

var _ Witness = (*FileWitness)(nil)

// NewFileWitness returns the witness kept in the file path.
func NewFileWitness(path string) *FileWitness { return &FileWitness{path: path} }

// Name implements Witness.
func (w *FileWitness) Name() string { return "file " + w.path }

// Path returns the witness file's path.
func (w *FileWitness) Path() string { return w.path }

// Load implements Witness.
func (w *FileWitness) Load(_ context.Context) (store.AuditCheckpoint, error) {
	b, err := os.ReadFile(w.path)
	if errors.Is(err, fs.ErrNotExist) {
		return store.AuditCheckpoint{}, fmt.Errorf("load audit witness %s: %w", w.path, errs.ErrNotFound)
	}
	if err != nil {
		return store.AuditCheckpoint{}, fmt.Errorf("load audit witness %s: %w", w.path, err)
	}
	c, err := decodeWitness(b)
	if err != nil {
		return store.AuditCheckpoint{}, fmt.Errorf("load audit witness %s: %w", w.path, err)
	}
	return c, nil
}

func (w *FileWitness) step(op string) error {
	if w.fault == nil {
		return nil
	}
	return w.fault(op)
}

// Store implements Witness.
func (w *FileWitness) Store(_ context.Context, c store.AuditCheckpoint) error {
	b, err := encodeWitness(c)
	if err != nil {
		return err
	}
	if err := w.write(b); err != nil {
		return fmt.Errorf("store audit witness %s (seq %d): %w", w.path, c.Seq, err)
	}
	return nil
}

func (w *FileWitness) write(b []byte) error {
	dir := filepath.Dir(w.path)
	tmp := w.path + ".tmp"
	if err := w.step("create"); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close() // a second Close after the one below is harmless
	if err := w.step("write"); err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		return err
	}
	if err := w.step("sync"); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := w.step("close"); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := w.step("rename"); err != nil {
		return err
	}
	if err := os.Rename(tmp, w.path); err != nil {
		return err
	}
	if err := w.step("syncdir"); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
