// Package audit is stead's audit trail: an append-only, hash-chained log of
// every state-changing action (API requests and lifecycle transitions the
// daemon makes on its own), with periodic ed25519-signed checkpoints of its
// head. It lives in the metadata store (store.AuditStore), outside every
// sandbox, and references nothing else there: deleting or purging a
// sandbox, volume, key or tenant leaves its entries in place.
//
// # Chain
//
// Entries are numbered 1, 2, 3 ... (Seq) and appended by one writer (the
// Log's mutex; the store also refuses any append that does not extend the
// last entry). Entry n's Hash is SHA-256 over this canonical encoding:
//
//	"stead-audit-entry-v1" 0x00
//	prev hash    (uint32 big-endian length, bytes; 32 zero bytes for seq 1)
//	seq          (uint64 big-endian)
//	time         (int64 big-endian, Unix microseconds, UTC)
//	actor, tenant, action, target, outcome
//	             (each: uint32 big-endian length, UTF-8 bytes)
//
// so an edit of any field, a deleted, inserted or reordered entry breaks the
// chain at that point (HashEntry computes it).
//
// # Checkpoints
//
// Every Options.CheckpointEvery entries, every Options.CheckpointInterval
// when the head moved (Run), when Open finds the head unsigned (a kill -9
// left it so), on a clean stop (Close) and on demand (Checkpoint), the Log
// signs "entry Seq has Hash and the trail starts at Start" with its ed25519
// key (see SignedMessage). A hash chain alone can be rewritten consistently
// by anyone who can write the database; a signed checkpoint cannot be,
// without the key, which is generated on first start and kept in a file of
// mode 0600 in the daemon's data directory (Open's keyPath).
//
// # Witnesses
//
// A checkpoint in the database does not survive someone deleting it with
// the entries it covered. So the newest checkpoint is also kept outside
// the database: in a file beside it (Options.Witness, a FileWitness,
// written after every checkpoint) and, when a repository is configured, as
// a sealed record there (SetRemote, a RepoWitness, written every
// CheckpointInterval when it lags and on Close, independent of pushes).
// Verify compares the database with each: a witnessed seq past the last
// entry is a truncated tail, a witnessed hash the database holds otherwise
// is a rewrite, a witnessed checkpoint missing from the database was
// deleted, a witness of another key means the key was replaced.
//
// Crash ordering: a checkpoint is stored in the database (durable when
// PutAuditCheckpoint returns) before any witness is written, and a witness
// is replaced atomically (FileWitness: temp file, fsync, rename, fsync of
// the directory; the repository's Put is atomic). So a crash leaves each
// witness naming the newest checkpoint or an older one the database still
// holds, never one the database lacks; Verify accepts a witness that lags.
// A kill -9 leaves at most the entries of one CheckpointInterval (or
// CheckpointEvery entries) unsigned and unwitnessed.
//
// A witness only moves forward: the Log does not overwrite one that names
// a seq past the head, an entry the database holds with another hash, a
// checkpoint no longer in the database, or another key's signature, nor
// one it cannot read. It logs the conflict loudly and keeps the witness as
// evidence; once the operator has examined it, moving the file (or the
// repository record) aside lets the daemon write a new one.
//
// # Retention
//
// Prune(before) deletes old entries only up to a signed checkpoint: it picks
// the newest checkpoint C whose entry is older than before, deletes every
// entry and checkpoint with Seq < C, and in the same transaction signs a new
// checkpoint of the head that records Start = C. Entry C is kept: its hash
// is vouched for by checkpoint C, so the chain stays verifiable from C
// onward, and because the newest checkpoint states where the trail starts,
// deleting entries at the front outside Prune is still detected. Entries
// newer than the last checkpoint are never pruned. The prune itself is
// recorded as an entry (action "audit.prune").
//
// # Malformed rows
//
// A row the store cannot decode (a time that is not a stored time, a hash
// that is not hex) does not stop Open: the store returns it marked
// Malformed, Open logs it loudly, the chain is extended from it, and Verify
// reports it.
//
// # Limits
//
// Verify detects any change to entries up to the newest witnessed
// checkpoint, and any change to later entries except a consistent rewrite
// or truncation of that unsigned tail, which the running daemon still
// catches by comparing with the head it appended itself (not across a
// restart). A checkpoint is only as trustworthy as the key file, and the
// file witness only as the data directory: someone who can replace both
// the database and the witness file with an older consistent copy (or
// delete both, with every checkpoint) is caught only by the repository's
// witness, which needs the repository's key to forge and which they
// must also reach to delete.
package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Entry is what a caller records: the Log adds Seq, Time and the hashes.
type Entry struct {
	// Actor is who acted: an API key id, or a daemon component such as
	// "daemon" for transitions the daemon makes on its own.
	Actor string
	// Tenant is the tenant acted in ("" for daemon-wide actions).
	Tenant string
	// Action names what was done: a route pattern for API requests
	// ("POST /v1/sandboxes/{id}/stop"), a dotted verb otherwise
	// ("sandbox.stop", "sandbox.crash"). Required.
	Action string
	// Target is the resource acted on (a sandbox id, ...), if any.
	Target string
	// Outcome is the HTTP status for API requests, "ok" or an error text
	// for daemon actions.
	Outcome string
}

// Recorder appends entries to the audit trail. *Log implements it.
type Recorder interface {
	// Record appends e; when it returns nil the entry is durable.
	Record(ctx context.Context, e Entry) error
}

// Nop is a Recorder that records nothing (for tests and tools).
type Nop struct{}

// Record does nothing.
func (Nop) Record(context.Context, Entry) error { return nil }

// Defaults for Options.
const (
	DefaultCheckpointEvery = 1000
	// DefaultCheckpointInterval bounds what a kill -9 leaves unsigned and
	// unwitnessed; a checkpoint is one row and one small file write, and
	// none is taken while the head does not move.
	DefaultCheckpointInterval = time.Minute
	// maxField caps each string field of an entry, in bytes.
	maxField = 1024
)

// Options configure a Log.
type Options struct {
	// CheckpointEvery signs a checkpoint after every that many entries
	// (default DefaultCheckpointEvery; < 0 disables).
	CheckpointEvery int64
	// CheckpointInterval is how often Run signs a checkpoint when the head
	// moved (default DefaultCheckpointInterval).
	CheckpointInterval time.Duration
	// Retention is how long Run keeps entries (0: for ever); see Prune.
	Retention time.Duration
	// Logger receives failures that cannot be returned (default
	// slog.Default()).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Witness keeps the newest signed checkpoint outside the database (a
	// FileWitness beside it): written after every checkpoint, compared
	// with the database by Open and Verify. nil: none.
	Witness Witness
	// Key, when set, signs the checkpoints instead of the key file's key:
	// the nodes of a cluster share one (derived from the cluster secret),
	// so each verifies the others' checkpoints.
	Key ed25519.PrivateKey
	// Shared says other daemons (the nodes of a cluster) append to the
	// same trail: an append that finds the head moved chains on from the
	// new head as a matter of course, and Verify does not count entries
	// past this daemon's own head as inserted.
	Shared bool
}

// Log is the audit trail. Its methods are safe for concurrent use; one Log
// must be the only writer of its store's trail.
type Log struct {
	st    store.AuditStore
	key   ed25519.PrivateKey
	pub   ed25519.PublicKey
	keyID string
	opts  Options

	// pruneMu keeps Verify and Export from seeing a prune half way.
	pruneMu sync.RWMutex
	// mu serialises appends, checkpoints and prunes and guards the fields
	// below.
	mu     sync.Mutex
	head   store.AuditEntry      // last entry (Seq 0: none yet)
	signed store.AuditCheckpoint // newest checkpoint (Seq 0: none)
	// localSeen is what Options.Witness holds, once known (under mu).
	localSeen *store.AuditCheckpoint
	localErr  string // the last witness failure logged, to log each kind once

	// remoteMu serialises writes of Options.Remote and guards the fields
	// below.
	remoteMu   sync.Mutex
	remote     Witness
	remoteSeen *store.AuditCheckpoint
	remoteErr  string // the last failure logged, to log each kind once
}

var _ Recorder = (*Log)(nil)

// Open returns the audit trail kept in st, signing checkpoints with the
// ed25519 key in the file keyPath, which is created (mode 0600, with its
// directory) on first use. A key file readable by group or others is
// refused.
func Open(ctx context.Context, st store.AuditStore, keyPath string, opts Options) (*Log, error) {
	key := opts.Key
	if key == nil {
		var err error
		if key, err = loadOrCreateKey(keyPath); err != nil {
			return nil, fmt.Errorf("open audit trail: %w", err)
		}
	}
	if opts.CheckpointEvery == 0 {
		opts.CheckpointEvery = DefaultCheckpointEvery
	}
	if opts.CheckpointInterval <= 0 {
		opts.CheckpointInterval = DefaultCheckpointInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	pub := key.Public().(ed25519.PublicKey)
	l := &Log{st: st, key: key, pub: pub, keyID: KeyID(pub), opts: opts}
	last, err := st.LastAudit(ctx)
	switch {
	case err == nil:
		l.head = last
	case !errors.Is(err, errs.ErrNotFound):
		return nil, fmt.Errorf("open audit trail: %w", err)
	}
	cps, err := st.ListAuditCheckpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("open audit trail: %w", err)
	}
	for i := len(cps) - 1; i >= 0; i-- {
		if cps[i].Malformed == "" {
			l.signed = cps[i]
			break
		}
	}
	if opts.Shared && opts.Witness != nil && l.signed.Seq > 0 {
		// A node joining a shared trail finds the others' checkpoints and
		// no witness of its own yet: it starts one from the newest. (A
		// node's witness removed later is made again at its restart; the
		// other nodes' witnesses still hold the trail.)
		if _, err := opts.Witness.Load(ctx); errors.Is(err, errs.ErrNotFound) {
			if err := opts.Witness.Store(ctx, l.signed); err != nil {
				return nil, fmt.Errorf("open audit trail: start this node's witness: %w", err)
			}
			opts.Logger.InfoContext(ctx, "audit witness started from the shared trail's newest checkpoint", "witness", opts.Witness.Name(), "seq", l.signed.Seq)
		}
	}
	l.openCheck(ctx, cps)
	return l, nil
}

// openCheck says loudly what is wrong with the trail as Open finds it
// (the daemon starts anyway; Verify reports the same), then signs the
// head when a kill left it unsigned and writes the witness when it lags.
func (l *Log) openCheck(ctx context.Context, cps []store.AuditCheckpoint) {
	log := l.opts.Logger
	if l.head.Malformed != "" {
		log.ErrorContext(ctx, "AUDIT TRAIL DAMAGED: its last entry is malformed in the database; new entries chain on from it; run stead audit verify",
			"seq", l.head.Seq, "problem", l.head.Malformed)
	}
	for _, c := range cps {
		if c.Malformed != "" {
			log.ErrorContext(ctx, "AUDIT TRAIL DAMAGED: a signed checkpoint is malformed in the database; run stead audit verify",
				"seq", c.Seq, "problem", c.Malformed)
		}
	}
	if l.signed.Seq > l.head.Seq {
		log.ErrorContext(ctx, "AUDIT TRAIL TRUNCATED: a signed checkpoint covers entries the database no longer holds; run stead audit verify",
			"checkpoint", l.signed.Seq, "last", l.head.Seq)
	}
	if w := l.opts.Witness; w != nil {
		p, err := w.Load(ctx)
		switch {
		case errors.Is(err, errs.ErrNotFound):
			if l.signed.Seq > 0 {
				log.ErrorContext(ctx, "AUDIT WITNESS MISSING: the database holds signed checkpoints but the witness beside it is gone (removed?); writing a new one; the repository's witness, if any, still holds the old head",
					"witness", w.Name(), "signed", l.signed.Seq)
			}
		case err != nil:
			log.ErrorContext(ctx, "AUDIT WITNESS UNREADABLE: it is left as it is; run stead audit verify", "witness", w.Name(), "err", err)
		default:
			if cerr := l.witnessConflict(ctx, p, l.startLocked(), cps); cerr != nil {
				log.ErrorContext(ctx, "AUDIT TRAIL CONTRADICTS ITS WITNESS: entries or checkpoints were deleted or rewritten while the daemon was down; the witness is kept as evidence; run stead audit verify",
					"witness", w.Name(), "witness_seq", p.Seq, "last", l.head.Seq, "err", cerr)
			}
		}
	}
	if l.head.Seq == 0 {
		return
	}
	if _, err := l.checkpointLocked(ctx); err != nil {
		log.ErrorContext(ctx, "sign audit checkpoint at start", "seq", l.head.Seq, "err", err)
	}
}

// PublicKey returns the key checkpoints are verified with.
func (l *Log) PublicKey() ed25519.PublicKey { return l.pub }

// KeyID returns the fingerprint of a public key: the first 16 hex digits of
// its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return fmt.Sprintf("%x", h[:8])
}

// Record appends e to the trail; when it returns nil the entry is durable.
// Every CheckpointEvery entries it also signs a checkpoint (a failure to do
// so is logged, not returned: the entry is stored).
func (l *Log) Record(ctx context.Context, e Entry) error {
	_, err := l.Append(ctx, e)
	return err
}

// Append is Record returning the stored entry.
func (l *Log) Append(ctx context.Context, e Entry) (store.AuditEntry, error) {
	if e.Action == "" {
		return store.AuditEntry{}, fmt.Errorf("record audit entry: empty action: %w", errs.ErrInvalid)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var ent store.AuditEntry
	var err error
	tries := 3
	if l.opts.Shared {
		tries = 50 // every node of the cluster appends
	}
	for range tries {
		ent, err = l.appendLocked(ctx, e)
		if !errors.Is(err, errs.ErrConflict) {
			break
		}
		// Someone else wrote the trail: another node of a cluster, or
		// (alone) what must not happen. Chain on from its head; Verify
		// will tell.
		if !l.opts.Shared {
			l.opts.Logger.ErrorContext(ctx, "audit trail changed under the daemon", "err", err)
		}
		last, lerr := l.st.LastAudit(ctx)
		if lerr != nil {
			break
		}
		l.head = last
	}
	if err != nil {
		return store.AuditEntry{}, fmt.Errorf("record audit entry %q: %w", e.Action, err)
	}
	if n := l.opts.CheckpointEvery; n > 0 && ent.Seq%n == 0 {
		if _, err := l.checkpointLocked(ctx); err != nil {
			l.opts.Logger.ErrorContext(ctx, "sign audit checkpoint", "seq", ent.Seq, "err", err)
		}
	}
	return ent, nil
}

func (l *Log) appendLocked(ctx context.Context, e Entry) (store.AuditEntry, error) {
	tm := l.opts.Now().UTC().Truncate(time.Microsecond)
	if tm.Before(l.head.Time) {
		tm = l.head.Time // keep time order equal to seq order
	}
	prev := l.head.Hash
	if l.head.Seq == 0 {
		prev = make([]byte, sha256.Size)
	}
	ent := store.AuditEntry{
		Seq: l.head.Seq + 1, Time: tm,
		Actor: clip(e.Actor), Tenant: clip(e.Tenant), Action: clip(e.Action), Target: clip(e.Target), Outcome: clip(e.Outcome),
		PrevHash: prev,
	}
	ent.Hash = HashEntry(ent)
	if err := l.st.AppendAudit(ctx, ent); err != nil {
		return store.AuditEntry{}, err
	}
	l.head = ent
	return ent, nil
}

// clip caps s at maxField bytes, keeping it valid UTF-8 (so that it
// survives JSON unchanged).
func clip(s string) string {
	if len(s) > maxField {
		s = s[:maxField]
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}

// HashEntry returns the hash of e over e.PrevHash and its fields, in the
// canonical encoding of the package documentation. e.Hash is ignored.
func HashEntry(e store.AuditEntry) []byte {
	h := sha256.New()
	h.Write([]byte("stead-audit-entry-v1\x00"))
	writeBytes(h, e.PrevHash)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(e.Seq))
	h.Write(n[:])
	binary.BigEndian.PutUint64(n[:], uint64(e.Time.UnixMicro()))
	h.Write(n[:])
	for _, s := range []string{e.Actor, e.Tenant, e.Action, e.Target, e.Outcome} {
		writeBytes(h, []byte(s))
	}
	return h.Sum(nil)
}

func writeBytes(h interface{ Write([]byte) (int, error) }, b []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// SignedMessage is what a checkpoint's signature covers:
//
//	"stead-audit-checkpoint-v1" 0x00, seq, start (uint64 big-endian),
//	time (int64 big-endian Unix microseconds), hash (uint32 length, bytes)
func SignedMessage(c store.AuditCheckpoint) []byte {
	b := []byte("stead-audit-checkpoint-v1\x00")
	b = binary.BigEndian.AppendUint64(b, uint64(c.Seq))
	b = binary.BigEndian.AppendUint64(b, uint64(c.Start))
	b = binary.BigEndian.AppendUint64(b, uint64(c.Time.UnixMicro()))
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.Hash)))
	return append(b, c.Hash...)
}

// sign returns a signed checkpoint of entry head with the given start.
func (l *Log) sign(head store.AuditEntry, start int64) store.AuditCheckpoint {
	c := store.AuditCheckpoint{
		Seq: head.Seq, Hash: head.Hash, Start: start,
		Time: l.opts.Now().UTC().Truncate(time.Microsecond), KeyID: l.keyID,
	}
	c.Signature = ed25519.Sign(l.key, SignedMessage(c))
	return c
}

// start returns where the trail starts now (held under mu).
func (l *Log) startLocked() int64 {
	if l.signed.Seq > 0 {
		return l.signed.Start
	}
	return 1
}

// Checkpoint signs and stores a checkpoint of the current head, or
// returns the newest one when it already covers the head. An empty trail
// has nothing to sign (errs.ErrConflict).
func (l *Log) Checkpoint(ctx context.Context) (store.AuditCheckpoint, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checkpointLocked(ctx)
}

func (l *Log) checkpointLocked(ctx context.Context) (store.AuditCheckpoint, error) {
	if l.head.Seq == 0 {
		return store.AuditCheckpoint{}, fmt.Errorf("sign audit checkpoint: the trail is empty: %w", errs.ErrConflict)
	}
	if l.signed.Seq == l.head.Seq {
		l.witnessLocked(ctx, l.signed)
		return l.signed, nil
	}
	c := l.sign(l.head, l.startLocked())
	if err := l.st.PutAuditCheckpoint(ctx, c); err != nil {
		return store.AuditCheckpoint{}, fmt.Errorf("sign audit checkpoint: %w", err)
	}
	l.signed = c
	l.witnessLocked(ctx, c)
	return c, nil
}

// witnessLocked writes c to the local witness (held under mu). The
// checkpoint is stored in the database first, so a crash in between
// leaves a witness one checkpoint behind, which Verify accepts. Failures
// are logged: the checkpoint stands.
func (l *Log) witnessLocked(ctx context.Context, c store.AuditCheckpoint) {
	w := l.opts.Witness
	if w == nil || (l.localSeen != nil && l.localSeen.Seq == c.Seq && bytes.Equal(l.localSeen.Signature, c.Signature)) {
		return
	}
	err := l.advanceWitness(ctx, w, &l.localSeen, c)
	switch {
	case err == nil:
		l.localErr = ""
	case err.Error() != l.localErr: // once per kind: Verify repeats it
		l.localErr = err.Error()
		l.opts.Logger.ErrorContext(ctx, "write audit witness", "witness", w.Name(), "seq", c.Seq, "err", err)
	}
}

// advanceWitness stores c in w unless what w holds must stay as evidence:
// a checkpoint the database contradicts (see witnessConflict), or one that
// cannot be read. seen caches what w holds (nil: not known yet).
func (l *Log) advanceWitness(ctx context.Context, w Witness, seen **store.AuditCheckpoint, c store.AuditCheckpoint) error {
	prev := *seen
	// What this Log wrote itself it trusts; what it finds it checks
	// against the database's checkpoints too.
	var cps []store.AuditCheckpoint
	if prev == nil {
		p, err := w.Load(ctx)
		switch {
		case errors.Is(err, errs.ErrNotFound):
		case err != nil:
			return fmt.Errorf("advance audit witness to seq %d: %w; left as it is (move it aside once examined)", c.Seq, err)
		default:
			prev = &p
			if cps, err = l.st.ListAuditCheckpoints(ctx); err != nil {
				return fmt.Errorf("advance audit witness to seq %d: %w", c.Seq, err)
			}
		}
	}
	if prev != nil {
		// On a conflict, forget what w holds: the next attempt reads it
		// again, and writes anew once an operator has moved it aside.
		var err error
		switch {
		case prev.Seq > c.Seq:
			err = fmt.Errorf("it holds seq %d, past the trail's head: entries were deleted: %w", prev.Seq, errs.ErrConflict)
		case prev.Seq == c.Seq && checkpointReplaced(c, *prev):
			err = fmt.Errorf("the checkpoint of seq %d it holds is gone from the database (signed anew since): %w", c.Seq, errs.ErrConflict)
		case prev.Seq == c.Seq && bytes.Equal(prev.Signature, c.Signature):
			*seen = prev
			return nil // holds c already
		default:
			err = l.witnessConflict(ctx, *prev, c.Start, cps)
		}
		if err != nil {
			*seen = nil
			return fmt.Errorf("advance audit witness to seq %d: %w; kept as evidence", c.Seq, err)
		}
	}
	if err := w.Store(ctx, c); err != nil {
		return err
	}
	*seen = &c
	return nil
}

// witnessConflict returns why the database contradicts the witnessed
// checkpoint p (nil when it does not): p is not validly signed by this
// daemon's key, or names an entry (at or after start, where the trail
// begins) that the database no longer holds or holds with another hash,
// or, when cps (the database's checkpoints) is not nil, a checkpoint the
// database no longer holds. The errors wrap errs.ErrConflict.
func (l *Log) witnessConflict(ctx context.Context, p store.AuditCheckpoint, start int64, cps []store.AuditCheckpoint) error {
	if p.KeyID != l.keyID || !ed25519.Verify(l.pub, SignedMessage(p), p.Signature) {
		return fmt.Errorf("the witnessed checkpoint of seq %d is not validly signed by this daemon's key %s (key %q): %w", p.Seq, l.keyID, p.KeyID, errs.ErrConflict)
	}
	if p.Seq < start {
		return nil // pruned since: nothing left to compare
	}
	es, err := l.st.ListAudit(ctx, store.AuditFilter{AfterSeq: p.Seq - 1, Limit: 1})
	if err != nil {
		return fmt.Errorf("compare with the audit witness: %w", err)
	}
	if len(es) == 0 || es[0].Seq != p.Seq {
		return fmt.Errorf("the database no longer holds entry %d, which the witness signed: %w", p.Seq, errs.ErrConflict)
	}
	if !bytes.Equal(es[0].Hash, p.Hash) {
		return fmt.Errorf("entry %d in the database differs from the one the witness signed: %w", p.Seq, errs.ErrConflict)
	}
	if cps == nil {
		return nil
	}
	for _, c := range cps {
		if c.Seq == p.Seq && !checkpointReplaced(c, p) {
			return nil
		}
	}
	return fmt.Errorf("the signed checkpoint of seq %d that the witness holds is gone from the database: %w", p.Seq, errs.ErrConflict)
}

// checkpointReplaced reports whether the stored checkpoint c of a seq is
// not the witnessed one p, other than as a prune replaces the head's
// checkpoint (same hash, later start).
func checkpointReplaced(c, p store.AuditCheckpoint) bool {
	if bytes.Equal(c.Signature, p.Signature) {
		return false
	}
	return !(bytes.Equal(c.Hash, p.Hash) && c.Start > p.Start)
}

// SetRemote adds a second witness off the machine (a RepoWitness, which
// needs KeyID to name its record): Run writes it every CheckpointInterval
// when it lags, Close writes it, never while an append waits; Verify
// compares it.
func (l *Log) SetRemote(w Witness) {
	l.remoteMu.Lock()
	defer l.remoteMu.Unlock()
	l.remote, l.remoteSeen, l.remoteErr = w, nil, ""
}

// KeyID returns the fingerprint of the key this Log signs with.
func (l *Log) KeyID() string { return l.keyID }

// advanceRemote writes the newest checkpoint to Options.Remote when it
// lags. A failure is logged once per kind (the repository may not be
// initialised yet, or be unreachable for a while).
func (l *Log) advanceRemote(ctx context.Context) {
	l.mu.Lock()
	c := l.signed
	l.mu.Unlock()
	l.remoteMu.Lock()
	defer l.remoteMu.Unlock()
	w := l.remote
	if w == nil || c.Seq == 0 {
		return
	}
	if s := l.remoteSeen; s != nil && s.Seq == c.Seq && bytes.Equal(s.Signature, c.Signature) {
		return
	}
	err := l.advanceWitness(ctx, w, &l.remoteSeen, c)
	switch {
	case err == nil:
		if l.remoteErr != "" {
			l.opts.Logger.InfoContext(ctx, "audit witness written again", "witness", w.Name(), "seq", c.Seq)
		}
		l.remoteErr = ""
	case err.Error() != l.remoteErr:
		l.remoteErr = err.Error()
		level := slog.LevelWarn
		if errors.Is(err, errs.ErrConflict) {
			level = slog.LevelError
		}
		l.opts.Logger.Log(ctx, level, "write audit witness", "witness", w.Name(), "seq", c.Seq, "err", err)
	}
}

// Close signs a checkpoint of the head and writes both witnesses: call it
// when the daemon stops cleanly, so that a restart finds the whole trail
// signed and witnessed.
func (l *Log) Close(ctx context.Context) error {
	_, err := l.Checkpoint(ctx)
	if err != nil && !errors.Is(err, errs.ErrConflict) {
		return err
	}
	l.advanceRemote(ctx)
	return nil
}

// Prune is retention: it deletes the entries older than before, but only
// up to the newest signed checkpoint C whose entry is older than before
// (entry C itself is kept as the anchor; see the package documentation).
// It returns how many entries it deleted (0 when no checkpoint qualifies),
// and records the prune as an entry.
func (l *Log) Prune(ctx context.Context, before time.Time) (int64, error) {
	l.pruneMu.Lock()
	n, keepFrom, err := l.prune(ctx, before)
	l.pruneMu.Unlock()
	if err != nil || n == 0 {
		return n, err
	}
	if err := l.Record(ctx, Entry{Actor: "daemon", Action: "audit.prune",
		Target: fmt.Sprintf("seq<%d", keepFrom), Outcome: "ok"}); err != nil {
		return n, fmt.Errorf("prune audit trail: %w", err)
	}
	return n, nil
}

func (l *Log) prune(ctx context.Context, before time.Time) (n, keepFrom int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cps, err := l.st.ListAuditCheckpoints(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("prune audit trail: %w", err)
	}
	start := l.startLocked()
	for i := len(cps) - 1; i >= 0 && keepFrom == 0; i-- {
		c := cps[i]
		if c.Seq > l.head.Seq || c.Seq <= start {
			continue
		}
		es, err := l.st.ListAudit(ctx, store.AuditFilter{AfterSeq: c.Seq - 1, Limit: 1})
		if err != nil {
			return 0, 0, fmt.Errorf("prune audit trail: %w", err)
		}
		if len(es) == 1 && es[0].Seq == c.Seq && es[0].Time.Before(before) {
			keepFrom = c.Seq
		}
	}
	if keepFrom == 0 {
		return 0, 0, nil
	}
	head := l.sign(l.head, keepFrom)
	n, err = l.st.PruneAudit(ctx, keepFrom, head)
	if err != nil {
		return 0, 0, fmt.Errorf("prune audit trail: %w", err)
	}
	l.signed = head
	l.witnessLocked(ctx, head)
	return n, keepFrom, nil
}

// Run verifies the whole trail once (logging what it finds), then signs a
// checkpoint every CheckpointInterval when the head moved, writes the
// witnesses and, when Retention is set, prunes entries older than it; it
// returns when ctx ends. Failures are logged.
func (l *Log) Run(ctx context.Context) {
	// A long trail takes a while to verify: the interval goes on meanwhile.
	var wg sync.WaitGroup
	wg.Go(func() { l.verifyAtStart(ctx) })
	defer wg.Wait()
	l.advanceRemote(ctx)
	t := time.NewTicker(l.opts.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := l.Checkpoint(ctx); err != nil && !errors.Is(err, errs.ErrConflict) {
			l.opts.Logger.ErrorContext(ctx, "sign audit checkpoint", "err", err)
		}
		l.advanceRemote(ctx)
		if l.opts.Retention > 0 {
			if _, err := l.Prune(ctx, l.opts.Now().Add(-l.opts.Retention)); err != nil {
				l.opts.Logger.ErrorContext(ctx, "prune audit trail", "err", err)
			}
		}
	}
}

// verifyAtStart verifies the trail and logs every problem loudly.
func (l *Log) verifyAtStart(ctx context.Context) {
	rep, err := l.Verify(ctx)
	switch {
	case err != nil:
		l.opts.Logger.ErrorContext(ctx, "verify the audit trail", "err", err)
	case !rep.OK:
		for _, p := range rep.Problems {
			l.opts.Logger.ErrorContext(ctx, "AUDIT TRAIL ALTERED: "+p.Text, "seq", p.Seq, "kind", p.Kind)
		}
	default:
		l.opts.Logger.InfoContext(ctx, "audit trail verified", "entries", rep.Entries, "last", rep.LastSeq, "signed", rep.SignedSeq)
	}
}
